//! `racewatch dump` on real binaries from clang-19 and rustc, checked against
//! binutils (readelf, nm, objdump) and the codec run on the raw sections.

mod common;

use racewatch_instrument::format::pcsections::{decode_atomics, decode_covered, parse_section_name, TableKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `bump` and `both` use atomics; `off` is excluded from the metadata pass by
/// its attribute, so it must not be covered.
const C_SRC: &str = r#"
#include <stdatomic.h>
#include <stdio.h>
atomic_long counter;
long plain;
__attribute__((noinline)) void bump(void) { atomic_fetch_add(&counter, 1); }
__attribute__((noinline)) long both(long x) { plain += x; atomic_store(&counter, x); return atomic_load(&counter); }
__attribute__((noinline)) long noatomics(long x) { return x * 3 + plain; }
__attribute__((noinline, disable_sanitizer_instrumentation)) long off(long x) { return atomic_exchange(&counter, x); }
int main(int argc, char **argv) {
    bump();
    printf("%ld\n", both(argc) + noatomics(argc) + off(argc));
    return 0;
}
"#;

const RUST_SRC: &str = r#"
use std::sync::atomic::{AtomicUsize, Ordering};
static COUNTER: AtomicUsize = AtomicUsize::new(0);
#[inline(never)]
pub fn bump() { COUNTER.fetch_add(1, Ordering::SeqCst); }
#[inline(never)]
pub fn swap_in(v: usize) -> usize { COUNTER.swap(v, Ordering::AcqRel) }
fn main() {
    for _ in 0..std::hint::black_box(3) { bump(); }
    println!("{} {}", swap_in(7), COUNTER.load(Ordering::Relaxed));
}
"#;

fn run(args: &[&std::ffi::OsStr]) -> Output {
    common::racewatch().args(args).output().expect("run racewatch")
}

fn dump_json(file: &Path) -> (Value, Output) {
    let out = run(&["dump".as_ref(), "--format".as_ref(), "json".as_ref(), file.as_os_str()]);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("dump JSON: {e}\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (json, out)
}

fn tool(name: &str, args: &[&str], file: &Path) -> String {
    let out = common::check(Command::new(name).args(args).arg(file).output().expect(name), name);
    String::from_utf8(out.stdout).unwrap()
}

/// (address, file offset, size) of each section, from `readelf -SW`.
fn sections(file: &Path) -> BTreeMap<String, (u64, usize, usize)> {
    let mut out = BTreeMap::new();
    for line in tool("readelf", &["-SW"], file).lines() {
        let Some((_, rest)) = line.split_once(']') else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).ok();
        if let (Some(addr), Some(off), Some(size)) = (hex(f[2]), hex(f[3]), hex(f[4])) {
            out.insert(f[0].to_string(), (addr, off as usize, size as usize));
        }
    }
    out
}

/// Function symbol addresses from `nm`.
fn nm(file: &Path) -> BTreeMap<String, u64> {
    tool("nm", &[], file)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 3 || !matches!(f[1], "T" | "t") {
                return None;
            }
            Some((f[2].to_string(), u64::from_str_radix(f[0], 16).ok()?))
        })
        .collect()
}

/// Instruction text by address, from `objdump -d`.
fn disassembly(file: &Path) -> BTreeMap<u64, String> {
    tool("objdump", &["-d", "--no-show-raw-insn", "-M", "intel"], file)
        .lines()
        .filter_map(|l| {
            let (addr, insn) = l.trim_start().split_once(":\t")?;
            Some((u64::from_str_radix(addr, 16).ok()?, insn.trim().to_string()))
        })
        .collect()
}

/// What the codec decodes from the raw bytes of every sanmd section:
/// (covered as (address, size, features), sorted atomics).
fn codec_view(file: &Path) -> (Vec<(u64, u64, u64)>, Vec<u64>) {
    let bytes = std::fs::read(file).unwrap();
    let (mut covered, mut atomics) = (Vec::new(), Vec::new());
    for (name, (addr, off, size)) in sections(file) {
        let Some(id) = parse_section_name(&name) else { continue };
        let data = &bytes[off..off + size];
        match id.kind {
            TableKind::Covered => covered
                .extend(decode_covered(data, addr, id.version).unwrap().iter().map(|e| (e.pc, e.size, e.features))),
            TableKind::Atomics => atomics.extend(decode_atomics(data, addr, id.version).unwrap()),
        }
    }
    covered.sort();
    atomics.sort();
    atomics.dedup();
    (covered, atomics)
}

fn json_covered(json: &Value) -> Vec<(u64, u64, u64)> {
    json["covered"]
        .as_array()
        .expect("covered array")
        .iter()
        .map(|e| (e["address"].as_u64().unwrap(), e["size"].as_u64().unwrap(), e["features"].as_u64().unwrap()))
        .collect()
}

fn json_atomics(json: &Value) -> Vec<u64> {
    json["atomics"].as_array().expect("atomics array").iter().map(|v| v.as_u64().unwrap()).collect()
}

fn build_c_program(name: &str) -> Option<(PathBuf, PathBuf)> {
    let clang = common::clang()?;
    let dir = common::scratch(name);
    let exe = common::build_c(&clang, &dir, "prog", C_SRC, &[]);
    Some((dir, exe))
}

/// Atomic PCs inside `[start, start + size)`.
fn atomics_in(atomics: &[u64], start: u64, size: u64) -> Vec<u64> {
    atomics.iter().copied().filter(|&pc| pc >= start && pc < start + size).collect()
}

#[test]
fn c_program_dump_matches_codec_and_disassembly() {
    let Some((_dir, exe)) = build_c_program("dump_c") else { return };
    let (json, out) = dump_json(&exe);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let (covered, atomics) = codec_view(&exe);
    assert_eq!(json_covered(&json), covered);
    assert_eq!(json_atomics(&json), atomics);
    assert!(json_atomics(&json).windows(2).all(|w| w[0] < w[1]), "atomics sorted");

    let syms = nm(&exe);
    let insns = disassembly(&exe);
    let entry = |name: &str| covered.iter().find(|e| e.0 == syms[name]).copied();
    for name in ["bump", "both", "noatomics", "main"] {
        let (_, _, features) = entry(name).unwrap_or_else(|| panic!("{name} not covered"));
        assert_eq!(features & 1, 1, "{name} has the atomics feature");
    }
    assert_eq!(entry("off"), None, "off() opted out of the pass and must not be covered");

    // bump: one `lock add`/`lock xadd`/`lock inc`, and the PC lands on it.
    let (start, size, _) = entry("bump").unwrap();
    let bump_pcs = atomics_in(&atomics, start, size);
    assert_eq!(bump_pcs.len(), 1, "{bump_pcs:x?}");
    assert!(insns[&bump_pcs[0]].starts_with("lock"), "{}", insns[&bump_pcs[0]]);
    // both: an atomic store (xchg or mov) and an atomic load (mov), each on a memory instruction.
    let (start, size, _) = entry("both").unwrap();
    let both_pcs = atomics_in(&atomics, start, size);
    assert_eq!(both_pcs.len(), 2, "{both_pcs:x?}");
    for pc in both_pcs {
        assert!(insns[&pc].contains("QWORD PTR"), "{pc:#x}: {}", insns[&pc]);
    }
    let (start, size, _) = entry("noatomics").unwrap();
    assert!(atomics_in(&atomics, start, size).is_empty());
    // Every atomic PC is an instruction boundary in the disassembly.
    for pc in &atomics {
        assert!(insns.contains_key(pc), "{pc:#x} is not an instruction start");
    }

    // The tables list names the sections readelf sees.
    let tables = json["tables"].as_array().unwrap();
    let names: Vec<&str> = tables.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["sanmd_covered2", "sanmd_atomics2"]);
    assert!(tables.iter().all(|t| t["error"].is_null()));
    assert_eq!(tables[1]["entries"].as_u64().unwrap() as usize, atomics.len());
}

#[test]
fn c_program_text_dump_names_functions() {
    let Some((_dir, exe)) = build_c_program("dump_c_text") else { return };
    let out = run(&["dump".as_ref(), exe.as_os_str()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let syms = nm(&exe);
    let line = format!("{:#x} bump size=", syms["bump"]);
    let bump = text.lines().find(|l| l.trim_start().starts_with(&line)).unwrap_or_else(|| panic!("{text}"));
    assert!(bump.ends_with("features=atomics"), "{bump}");
    assert!(text.lines().any(|l| l.contains(" bump+0x")), "atomic PC named by function:\n{text}");
    assert!(!text.lines().any(|l| l.contains(" off ")), "{text}");
}

#[test]
fn rust_program_dump_matches_codec() {
    let dir = common::scratch("dump_rust");
    let exe = common::build_rust(&dir, "rusty", RUST_SRC, &[]);
    let (json, out) = dump_json(&exe);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (covered, atomics) = codec_view(&exe);
    assert_eq!(json_covered(&json), covered);
    assert_eq!(json_atomics(&json), atomics);

    let insns = disassembly(&exe);
    for name in ["rusty::bump", "rusty::swap_in"] {
        let e = json["covered"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["function"] == name)
            .unwrap_or_else(|| panic!("{name} not covered: {json}"));
        assert_eq!(e["features"].as_u64().unwrap() & 1, 1);
        let (start, size) = (e["address"].as_u64().unwrap(), e["size"].as_u64().unwrap());
        let pcs = atomics_in(&atomics, start, size);
        assert_eq!(pcs.len(), 1, "{name}: {pcs:x?}");
        let insn = &insns[&pcs[0]];
        assert!(insn.starts_with("lock") || insn.starts_with("xchg"), "{name}: {insn}");
    }
}

#[test]
fn stripped_binary_dumps_the_same_tables() {
    let Some((dir, exe)) = build_c_program("dump_stripped") else { return };
    let stripped = dir.join("prog.stripped");
    common::check(Command::new("strip").arg("-o").arg(&stripped).arg(&exe).output().unwrap(), "strip");
    assert!(!nm_has_symbols(&stripped));
    let (full, _) = dump_json(&exe);
    let (json, out) = dump_json(&stripped);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_covered(&json), json_covered(&full));
    assert_eq!(json_atomics(&json), json_atomics(&full));
    let text = run(&["dump".as_ref(), stripped.as_os_str()]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("<unknown>"));
}

fn nm_has_symbols(file: &Path) -> bool {
    Command::new("nm").arg(file).output().map(|o| o.status.success() && !o.stdout.is_empty()).unwrap_or(false)
}

/// A copy of `exe` with bytes of `section` replaced by `patch(section bytes)`.
fn corrupt(exe: &Path, section: &str, patch: impl FnOnce(&mut [u8])) -> (PathBuf, usize) {
    let (_, off, size) = sections(exe)[section];
    let mut bytes = std::fs::read(exe).unwrap();
    patch(&mut bytes[off..off + size]);
    let copy = exe.with_extension(format!("bad-{section}"));
    std::fs::write(&copy, bytes).unwrap();
    (copy, size)
}

#[test]
fn truncated_uleb_is_reported_with_section_and_offset() {
    let Some((_dir, exe)) = build_c_program("dump_corrupt") else { return };
    let (good, _) = dump_json(&exe);
    // The last byte of the covered table is the last entry's features ULEB:
    // a continuation bit makes it run off the end of the section.
    let (bad, size) = corrupt(&exe, "sanmd_covered2", |d| *d.last_mut().unwrap() = 0x80);
    let (json, out) = dump_json(&bad);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        format!("racewatch: {}: sanmd_covered2: truncated features at byte {}\n", bad.display(), size - 1)
    );
    // What decoded before the error is still printed.
    let good_covered = json_covered(&good);
    assert_eq!(json_covered(&json), good_covered[..good_covered.len() - 1]);
    assert_eq!(json_atomics(&json), json_atomics(&good));
    assert!(json["tables"][0]["error"].as_str().unwrap().contains("at byte"));

    // The text format reports the same, and exits 1 too.
    let text = run(&["dump".as_ref(), bad.as_os_str()]);
    assert_eq!(text.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&text.stdout).contains("ERROR: sanmd_covered2: truncated features"));
}

#[test]
fn garbage_tables_and_flipped_bytes_never_panic() {
    let Some((_dir, exe)) = build_c_program("dump_garbage") else { return };
    let (bad, _) = corrupt(&exe, "sanmd_atomics2", |d| d.fill(0xff));
    let out = run(&["dump".as_ref(), bad.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(0) || out.status.code() == Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let (bad, _) = corrupt(&exe, "sanmd_covered2", |d| d.iter_mut().for_each(|b| *b = 0x80));
    let out = run(&["dump".as_ref(), bad.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("sanmd_covered2:") && stderr.contains("at byte"), "{stderr}");

    // Random byte flips anywhere in the headers and tables: any exit status
    // but a panic or a signal.
    let bytes = std::fs::read(&exe).unwrap();
    let secs = sections(&exe);
    let targets = [0..64usize, secs["sanmd_covered2"].1..secs["sanmd_atomics2"].1 + secs["sanmd_atomics2"].2];
    let mut rng = 0x9e3779b97f4a7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 0..24 {
        let mut copy = bytes.clone();
        let range = &targets[round % 2];
        for _ in 0..4 {
            let i = range.start + next() as usize % range.len();
            copy[i] = next() as u8;
        }
        let path = exe.with_extension(format!("flip{round}"));
        std::fs::write(&path, &copy).unwrap();
        for format in ["text", "json"] {
            let out = run(&["dump".as_ref(), "--format".as_ref(), format.as_ref(), path.as_os_str()]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(matches!(out.status.code(), Some(0..=2)), "round {round}: {:?} {stderr}", out.status);
            assert!(!stderr.contains("panicked"), "round {round}: {stderr}");
        }
    }
}

#[test]
fn missing_and_non_elf_files_exit_2_with_one_line() {
    let dir = common::scratch("dump_missing");
    let missing = dir.join("no-such-file");
    let out = run(&["dump".as_ref(), missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("racewatch: ") && stderr.contains("no-such-file"), "{stderr}");
    assert!(out.stdout.is_empty());

    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello\n").unwrap();
    let out = run(&["dump".as_ref(), text.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8(out.stderr).unwrap(), format!("racewatch: {}: not an ELF file\n", text.display()));
}

#[test]
fn relocatable_object_is_refused_clearly() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("dump_object");
    let src = dir.join("obj.c");
    std::fs::write(&src, C_SRC).unwrap();
    let obj = dir.join("obj.o");
    common::check(
        Command::new(&clang)
            .args(racewatch_instrument::toolchain::C_FLAGS)
            .args(["-O2", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .output()
            .unwrap(),
        "clang -c",
    );
    let out = run(&["dump".as_ref(), obj.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("relocatable object") && stderr.contains("obj.o"), "{stderr}");
}

#[test]
fn stackmap_records_are_dumped() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("dump_stackmap");
    let ll = dir.join("sm.ll");
    std::fs::write(
        &ll,
        r#"
declare void @llvm.experimental.stackmap(i64, i32, ...)
define i64 @compute(i64 %a, i64 %b) noinline {
entry:
  %s = add i64 %a, %b
  call void (i64, i32, ...) @llvm.experimental.stackmap(i64 42, i32 0, i64 %s, i64 7, i64 12345678901234)
  %m = mul i64 %s, %a
  ret i64 %m
}
define i32 @main() {
  %r = call i64 @compute(i64 2, i64 3)
  %t = trunc i64 %r to i32
  ret i32 %t
}
"#,
    )
    .unwrap();
    let exe = dir.join("sm");
    common::check(
        Command::new(&clang)
            .args(["-O1", "-no-pie", "-Wno-override-module"])
            .arg(&ll)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap(),
        "clang sm.ll",
    );
    let (json, out) = dump_json(&exe);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sm = &json["stackmap"];
    assert_eq!(sm["version"], 3);
    assert_eq!(sm["constants"], serde_json::json!([12345678901234_u64]));
    let compute = nm(&exe)["compute"];
    assert_eq!(sm["functions"][0]["address"].as_u64(), Some(compute));
    let records = sm["records"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r["id"], 42);
    let pc = r["pc"].as_u64().unwrap();
    assert!(pc > compute && disassembly(&exe).contains_key(&pc), "{pc:#x}");
    let kinds: Vec<&str> = r["locations"].as_array().unwrap().iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["register", "constant", "constant_index"]);
    assert_eq!(r["locations"][1]["constant"], 7);
    assert_eq!(r["locations"][2]["constant"], 12345678901234_u64);
    assert!(r["live_outs"].as_array().unwrap().is_empty());
    assert!(json["atomics"].as_array().unwrap().is_empty());

    let text = String::from_utf8(run(&["dump".as_ref(), exe.as_os_str()]).stdout).unwrap();
    assert!(text.contains("stack map (version 3): 1 functions, 1 constants, 1 records"), "{text}");
    assert!(text.contains(&format!("function {compute:#x} compute")), "{text}");
}
