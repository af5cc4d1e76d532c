//! The symbolizer on real ELF files built here with clang-19: a known
//! function's address, a PC inside an always-inlined function (two frames,
//! innermost first), a return address looked up at pc-1, and the fallbacks
//! for binaries without DWARF and without any symbols. And on optimized
//! rustc binaries: names of inlined and physical frames with line tables only
//! and with limited debuginfo, and the summary frame of a store inlined from std.

use goblin::elf::Elf;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind};
use racewatch::report::summary_frame;
use racewatch::symbolize::{Frame, Symbolizer};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"#include <stdio.h>
volatile int marker;
int counter;
__attribute__((noinline)) int known_function(int x) {
  return x * 3 + counter;
}
static inline __attribute__((always_inline)) void inlined_store(void) {
  marker = 0x5a5a5a;
}
__attribute__((noinline)) void caller(void) {
  inlined_store();
  counter++;
}
int main(int argc, char **argv) {
  caller();
  int r = known_function(argc);
  printf("%d\n", r);
  return 0;
}
__attribute__((noinline)) long pick(int c, long *p) {
  long r;
  if (c) {
    r = *p + 1;
  } else {
    r = *p + 2;
  }
  return r;
}
"#;

/// clang-19 (or `$RACEWATCH_CLANG`); `None` prints a visible skip.
fn clang() -> Option<PathBuf> {
    let clang = std::env::var_os("RACEWATCH_CLANG").map(PathBuf::from).unwrap_or_else(|| "clang-19".into());
    match Command::new(&clang).arg("--version").output() {
        Ok(out) if out.status.success() => Some(clang),
        _ => {
            eprintln!("SKIP: {} not found; symbolizer tests on C binaries skipped", clang.display());
            None
        }
    }
}

/// Builds PROGRAM at -O2 with `flags` into a fresh directory; returns the binary.
fn build(name: &str, flags: &[&str]) -> Option<PathBuf> {
    let clang = clang()?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_symbolize").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("prog.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = dir.join("prog");
    let status = Command::new(clang).arg("-O2").args(flags).arg(&src).arg("-o").arg(&out).output().unwrap();
    assert!(status.status.success(), "clang failed: {}", String::from_utf8_lossy(&status.stderr));
    Some(out)
}

/// Address (link-time) and bytes of a function from the ELF symbol table.
fn function_code(bytes: &[u8], name: &str) -> (u64, Vec<u8>) {
    let elf = Elf::parse(bytes).unwrap();
    let sym = elf.syms.iter().find(|s| elf.strtab.get_at(s.st_name) == Some(name)).expect("symbol");
    let section = &elf.section_headers[sym.st_shndx];
    let start = (sym.st_value - section.sh_addr + section.sh_offset) as usize;
    (sym.st_value, bytes[start..start + sym.st_size as usize].to_vec())
}

/// The address of a function's first instruction matching `pred`, and the next instruction's.
fn find_instruction(binary: &Path, function: &str, pred: impl Fn(&iced_x86::Instruction) -> bool) -> (u64, u64) {
    let bytes = std::fs::read(binary).unwrap();
    let (addr, code) = function_code(&bytes, function);
    let decoder = Decoder::with_ip(64, &code, addr, DecoderOptions::NONE);
    let insn = decoder.into_iter().find(|i| pred(i)).unwrap_or_else(|| panic!("no such instruction in {function}"));
    (insn.ip(), insn.next_ip())
}

fn symbol_address(binary: &Path, name: &str) -> u64 {
    function_code(&std::fs::read(binary).unwrap(), name).0
}

fn file_name(frame: &Frame) -> Option<&str> {
    frame.file.as_deref().map(|f| f.rsplit('/').next().unwrap())
}

#[test]
fn known_function_maps_to_its_name_file_and_line() {
    let Some(binary) = build("dwarf", &["-g"]) else { return };
    let offset = symbol_address(&binary, "known_function");
    let frames = Symbolizer::new().symbolize_in_module(&binary, offset, false);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let frame = &frames[0];
    assert_eq!(frame.function.as_deref(), Some("known_function"));
    assert_eq!(file_name(frame), Some("prog.c"));
    assert!(matches!(frame.line, Some(4 | 5)), "{frame:?}");
    assert_eq!(frame.offset, offset);
    assert_eq!(frame.module.as_deref(), binary.to_str());
}

#[test]
fn inlined_store_yields_inner_then_outer_frame() {
    let Some(binary) = build("inline", &["-g"]) else { return };
    let marker = symbol_address(&binary, "marker");
    let (store, _) =
        find_instruction(&binary, "caller", |i| i.is_ip_rel_memory_operand() && i.ip_rel_memory_address() == marker);
    let frames = Symbolizer::new().symbolize_in_module(&binary, store, false);
    let got: Vec<(Option<&str>, Option<&str>, Option<u32>)> =
        frames.iter().map(|f| (f.function.as_deref(), file_name(f), f.line)).collect();
    assert_eq!(
        got,
        vec![(Some("inlined_store"), Some("prog.c"), Some(8)), (Some("caller"), Some("prog.c"), Some(11))],
        "{frames:?}"
    );
    assert!(frames.iter().all(|f| f.column.is_some_and(|c| c > 0)), "{frames:?}");
}

#[test]
fn return_address_is_looked_up_at_the_call() {
    let Some(binary) = build("ret", &["-g"]) else { return };
    let target = symbol_address(&binary, "known_function");
    let (_, return_address) = find_instruction(&binary, "main", |i| {
        i.flow_control() == FlowControl::Call && i.near_branch_target() == target
    });
    let frames = Symbolizer::new().symbolize_in_module(&binary, return_address, true);
    let outer = frames.last().unwrap();
    assert_eq!(outer.function.as_deref(), Some("main"));
    assert_eq!(outer.line, Some(16), "{frames:?}");
    assert_eq!(outer.offset, return_address);
}

#[test]
fn without_dwarf_the_symbol_table_names_the_function() {
    let Some(binary) = build("nodwarf", &["-g0"]) else { return };
    let offset = symbol_address(&binary, "known_function");
    let frames = Symbolizer::new().symbolize_in_module(&binary, offset + 1, false);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].function.as_deref(), Some("known_function"));
    assert_eq!(frames[0].file, None);
}

#[test]
fn without_anything_the_frame_is_unknown_but_keeps_module_and_offset() {
    let Some(with_symbols) = build("stripped-ref", &["-g0"]) else { return };
    let offset = symbol_address(&with_symbols, "known_function");
    let Some(binary) = build("stripped", &["-g0", "-s"]) else { return };
    let frames = Symbolizer::new().symbolize_in_module(&binary, offset, false);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].function, None, "no symbol may be guessed: {frames:?}");
    assert_eq!(frames[0].module.as_deref(), binary.to_str());
    assert_eq!(frames[0].offset, offset);
    let missing = Symbolizer::new().symbolize_in_module(Path::new("/nonexistent/lib.so"), 0x10, true);
    assert_eq!(missing, vec![Frame { module: Some("/nonexistent/lib.so".into()), offset: 0x10, ..Frame::default() }]);
}

#[test]
fn shared_library_pc_of_this_process_maps_to_libc() {
    let pc = libc::getpid as *const () as u64;
    let frames = Symbolizer::new().symbolize_pc(pc, false);
    let frame = frames.last().unwrap();
    let module = frame.module.as_deref().unwrap_or_default();
    assert!(module.contains("libc.so"), "{frames:?}");
    assert!(frame.function.as_deref().is_some_and(|f| f.contains("getpid")), "{frames:?}");
    assert!(frame.offset < pc, "offset is relative to the library's load bias");
}

const RUST_PROGRAM: &str = r#"
mod inner {
    #[inline(always)]
    pub fn store(p: *mut u64, v: u64) {
        unsafe { std::ptr::write_volatile(p, v) }
    }
}
static mut MARKER: u64 = 0;
#[inline(never)]
fn outer(v: u64) {
    inner::store(&raw mut MARKER, v);
}
fn main() {
    outer(std::hint::black_box(7));
}
"#;

/// Builds RUST_PROGRAM with rustc -O and `-Cdebuginfo=<debuginfo>`; `None` prints a visible skip.
fn build_rust(debuginfo: &str) -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC").map(PathBuf::from).unwrap_or_else(|| "rustc".into());
    if !Command::new(&rustc).arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("SKIP: {} not found; symbolizer tests on Rust binaries skipped", rustc.display());
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_symbolize").join(format!("rust-{debuginfo}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("prog.rs");
    std::fs::write(&src, RUST_PROGRAM).unwrap();
    let out = dir.join("prog");
    let status = Command::new(rustc)
        .args(["--edition", "2021", "-O", "-Cforce-frame-pointers=yes", "--crate-name", "prog"])
        .arg(format!("-Cdebuginfo={debuginfo}"))
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(status.status.success(), "rustc failed: {}", String::from_utf8_lossy(&status.stderr));
    Some(out)
}

/// Frames of the store to MARKER inside `prog::outer` (its only store), innermost first.
fn store_frames(binary: &Path) -> Vec<Frame> {
    let bytes = std::fs::read(binary).unwrap();
    let elf = Elf::parse(&bytes).unwrap();
    let outer = elf
        .syms
        .iter()
        .filter_map(|s| Some((elf.strtab.get_at(s.st_name)?, s)))
        .find(|(name, s)| s.is_function() && racewatch_instrument::symbols::demangle(name) == "prog::outer")
        .map(|(name, _)| name.to_string())
        .expect("prog::outer in the symbol table");
    let (store, _) =
        find_instruction(binary, &outer, |i| i.mnemonic() == Mnemonic::Mov && i.op0_kind() == OpKind::Memory);
    Symbolizer::new().symbolize_in_module(binary, store, false)
}

fn names_and_files(frames: &[Frame]) -> Vec<(Option<&str>, Option<&str>, bool)> {
    frames.iter().map(|f| (f.function.as_deref(), file_name(f), f.inlined)).collect()
}

/// Line tables only: inlined frames keep DWARF's bare names, the physical
/// frame takes the symbol table's qualified one. Limited debuginfo: linkage
/// names (legacy mangling here, so without generic arguments) qualify all.
/// Either way the summary skips the frame inlined from std.
#[test]
fn rust_frame_names_by_debuginfo_level() {
    let cases = [
        ("line-tables-only", ["write_volatile<u64>", "store", "prog::outer"]),
        ("limited", ["core::ptr::write_volatile", "prog::inner::store", "prog::outer"]),
    ];
    for (debuginfo, [std_fn, inlined_fn, physical_fn]) in cases {
        let Some(binary) = build_rust(debuginfo) else { return };
        let frames = store_frames(&binary);
        let expected = vec![
            (Some(std_fn), Some("mod.rs"), true),
            (Some(inlined_fn), Some("prog.rs"), true),
            (Some(physical_fn), Some("prog.rs"), false),
        ];
        assert_eq!(names_and_files(&frames), expected, "{debuginfo}: {frames:#?}");
        assert!(frames[0].file.as_deref().is_some_and(|f| f.starts_with("/rustc/")), "{frames:#?}");
        let summary = summary_frame(&frames).unwrap();
        assert_eq!((summary.function.as_deref(), summary.line), (Some(inlined_fn), Some(5)), "{debuginfo}");
    }
}

#[test]
fn a_hoisted_load_with_line_zero_gets_the_nearest_line_marked_approximate() {
    let Some(binary) = build("line0", &["-gline-tables-only", "-fno-omit-frame-pointer"]) else { return };
    // clang hoists `*p` out of both branches of `pick` and gives the load line 0.
    let (load, _) = find_instruction(&binary, "pick", |i| i.op_count() == 2 && i.op1_kind() == OpKind::Memory);
    let frames = Symbolizer::new().symbolize_in_module(&binary, load, false);
    let frame = &frames[0];
    assert!(frame.line_approximate, "{frames:?}");
    assert_eq!(file_name(frame), Some("prog.c"));
    assert!(matches!(frame.line, Some(20..=28)), "a line of pick: {frames:?}");
    assert_eq!(frame.function.as_deref(), Some("pick"));
}

const ARC_PROGRAM: &str = include_str!("../../tests/fixtures/arc_downgrade.rs");

/// The innermost function at `addr` by the debug info: its DIE and name (the oracle for
/// `a_borrowed_line_is_one_of_the_same_inlined_function`).
fn innermost_scope(loader: &addr2line::Loader, addr: u64) -> Option<(u64, String)> {
    use addr2line::gimli::ReaderOffset;
    let mut frames = loader.find_frames(addr).ok()?;
    let first = frames.next().ok()??;
    let name = first.function.as_ref()?.raw_name().ok()?.into_owned();
    Some((first.dw_die_offset?.0.into_u64(), name))
}

/// A PC the debug info gives line 0 shows the nearest line of the same innermost (inlined) function
/// with `~`, or no line at all: never a neighbouring instruction's line of other code. In
/// `Arc::downgrade`, the `mov` of its compare-exchange loop's merged relaxed loads is `atomic_load`'s
/// (atomic.rs:3890) and the line-0 instruction after it is `downgrade`'s: borrowing the line before
/// would show `downgrade` at a line of `atomic_load`.
#[test]
fn a_borrowed_line_is_one_of_the_same_inlined_function() {
    let rustc = std::env::var_os("RUSTC").map(PathBuf::from).unwrap_or_else(|| "rustc".into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_symbolize").join("arc");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("arc.rs");
    std::fs::write(&src, ARC_PROGRAM).unwrap();
    let binary = dir.join("arc");
    let out = Command::new(rustc)
        .args(["--edition", "2021", "-O", "-Cforce-frame-pointers=yes", "-Cdebuginfo=line-tables-only"])
        .arg(&src)
        .arg("-o")
        .arg(&binary)
        .output()
        .unwrap();
    assert!(out.status.success(), "rustc failed: {}", String::from_utf8_lossy(&out.stderr));
    let bytes = std::fs::read(&binary).unwrap();
    let elf = Elf::parse(&bytes).unwrap();
    let downgrade = elf
        .syms
        .iter()
        .filter_map(|s| Some((elf.strtab.get_at(s.st_name)?, s)))
        .find(|(name, s)| s.is_function() && racewatch_instrument::symbols::demangle(name).ends_with("arc::downgrade"))
        .map(|(name, _)| name.to_string())
        .expect("arc::downgrade in the symbol table");
    let (start, code) = function_code(&bytes, &downgrade);
    let loader = addr2line::Loader::new(&binary).unwrap();
    let mut symbolizer = Symbolizer::new();
    let (mut line_zero, mut other_code_nearer) = (0, 0);
    for insn in Decoder::with_ip(64, &code, start, DecoderOptions::NONE) {
        let pc = insn.ip();
        let own = loader.find_location(pc).ok().flatten().and_then(|l| l.line).filter(|&l| l > 0);
        if own.is_some() {
            continue;
        }
        line_zero += 1;
        let scope = innermost_scope(&loader, pc);
        // The nearest row with a line (of any function), the old rule's pick, and the nearest of
        // the same function.
        let row = |a: u64| loader.find_location(a).ok().flatten().filter(|l| l.line.is_some_and(|n| n > 0));
        let near = (1..=32u64).flat_map(|d| [pc + d, pc - d]).find(|&a| row(a).is_some());
        if near.is_some_and(|a| innermost_scope(&loader, a) != scope) {
            other_code_nearer += 1;
        }
        let same = (1..=32u64)
            .flat_map(|d| [pc + d, pc - d])
            .find(|&a| row(a).is_some() && innermost_scope(&loader, a) == scope);
        let frames = symbolizer.symbolize_in_module(&binary, pc, false);
        let frame = &frames[0];
        match same.and_then(row) {
            Some(expected) => {
                assert!(frame.line_approximate, "{pc:#x}: {frames:?}");
                assert_eq!(frame.line, expected.line, "{pc:#x}: the line of the same function: {frames:?}");
                assert_eq!(file_name(frame), expected.file.map(|f| f.rsplit('/').next().unwrap()), "{pc:#x}");
            }
            None => assert!(
                frame.line.is_none() && !frame.line_approximate,
                "{pc:#x}: no line of its own code near: {frames:?}"
            ),
        }
    }
    assert!(line_zero > 0, "no line-0 instruction in downgrade: the test sees nothing");
    assert!(other_code_nearer > 0, "no line-0 instruction whose nearest line is other code's: the test proves little");
}
