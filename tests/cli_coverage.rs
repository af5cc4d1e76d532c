//! `racewatch coverage` on real binaries: a C program whose second
//! translation unit is built without metadata, a Rust program, a stripped
//! copy; JSON, text, HTML and LCOV; with run-time profiles from real runs.

mod common;

use racewatch_instrument::toolchain::C_FLAGS;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Built with the metadata flags.
const COVERED_TU: &str = r#"#include <stdatomic.h>
#include <stdio.h>
atomic_long counter;
long plain;
long uncovered_fn(long);
__attribute__((noinline)) void bump(void) {
    atomic_fetch_add(&counter, 1);
}
__attribute__((noinline)) long both(long x) { plain += x; atomic_store(&counter, x); return atomic_load(&counter); }
__attribute__((noinline)) long noatomics(long x) { return x * 3 + plain; }
__attribute__((noinline)) long a_function_with_a_name_long_enough_to_be_cut_short_in_the_terminal_table(long x) {
    return x ^ plain;
}
int main(int argc, char **argv) {
    bump();
    printf("%ld\n", both(argc) + noatomics(argc) + uncovered_fn(argc)
        + a_function_with_a_name_long_enough_to_be_cut_short_in_the_terminal_table(argc));
    return 0;
}
"#;

/// Built without metadata: its atomic must not count.
const PLAIN_TU: &str = r#"#include <stdatomic.h>
atomic_long other;
__attribute__((noinline)) long uncovered_fn(long x) { atomic_fetch_add(&other, x); return x + 1; }
"#;

const RUST_SRC: &str = r#"
use std::sync::atomic::{AtomicUsize, Ordering};
static COUNTER: AtomicUsize = AtomicUsize::new(0);
#[inline(never)]
pub fn bump() { COUNTER.fetch_add(1, Ordering::SeqCst); }
fn main() {
    for _ in 0..std::hint::black_box(3) { bump(); }
    println!("{}", COUNTER.load(Ordering::Relaxed));
}
"#;

/// Links `cov.c` (with metadata) and `lib/plain.c` (without) into `dir/prog`.
fn build_two_tu(name: &str) -> Option<(PathBuf, PathBuf)> {
    let clang = common::clang()?;
    let dir = common::scratch(name);
    let compile = |file: &str, src: &str, flags: &[&str]| {
        let c = dir.join(file);
        std::fs::create_dir_all(c.parent().unwrap()).unwrap();
        std::fs::write(&c, src).unwrap();
        let obj = c.with_extension("o");
        let out = Command::new(&clang).args(flags).args(["-O2", "-c"]).arg(&c).arg("-o").arg(&obj).output().unwrap();
        common::check(out, "clang -c");
        obj
    };
    let covered = compile("cov.c", COVERED_TU, C_FLAGS);
    let plain = compile("lib/plain.c", PLAIN_TU, &["-gline-tables-only"]);
    let exe = dir.join("prog");
    common::check(Command::new(&clang).arg(&covered).arg(&plain).arg("-o").arg(&exe).output().unwrap(), "clang link");
    Some((dir, exe))
}

fn coverage(format: &str, files: &[&Path]) -> Output {
    common::racewatch().args(["coverage", "--format", format]).args(files).output().expect("run racewatch")
}

fn coverage_json(files: &[&Path]) -> Value {
    let out = coverage("json", files);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("coverage JSON")
}

/// Every file of the report with its group's origin.
fn files(report: &Value) -> Vec<(&str, &Value)> {
    let mut out = Vec::new();
    for group in report["groups"].as_array().unwrap() {
        for file in group["files"].as_array().unwrap() {
            out.push((group["origin"].as_str().unwrap(), file));
        }
    }
    out
}

/// Every function row, with the path of its file.
fn rows(report: &Value) -> Vec<(&str, &Value)> {
    files(report)
        .into_iter()
        .flat_map(|(_, f)| f["functions"].as_array().unwrap().iter().map(move |r| (f["path"].as_str().unwrap(), r)))
        .collect()
}

fn row<'a>(report: &'a Value, name: &str) -> (&'a str, &'a Value) {
    rows(report).into_iter().find(|(_, r)| r["name"] == name).unwrap_or_else(|| panic!("no row {name}"))
}

/// Atomic PCs per function, as `racewatch dump` lists them.
fn dump_atomics(exe: &Path) -> Vec<u64> {
    let out = common::racewatch().args(["dump", "--format", "json"]).arg(exe).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["atomics"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
}

#[test]
fn c_rows_files_and_summary_are_right() {
    let Some((_dir, exe)) = build_two_tu("cov_c") else { return };
    let json = coverage_json(&[&exe]);
    assert_eq!(json["schema"], "racewatch-coverage/2");
    assert_eq!(json["profiled"], false);
    let binaries = json["binaries"].as_array().unwrap();
    assert_eq!(binaries.len(), 1);
    assert_eq!(binaries[0]["path"], exe.to_str().unwrap());

    for (name, atomics) in [("bump", 1), ("both", 2), ("noatomics", 0), ("main", 0)] {
        let (_, r) = row(&json, name);
        assert_eq!(r["covered"], true, "{name}");
        assert_eq!(r["features"].as_u64().unwrap() & 1, 1, "{name}");
        assert!(r["feature_names"].as_array().unwrap().contains(&"atomics".into()), "{name}");
        assert_eq!(r["binary"], 0);
        if name != "main" {
            assert_eq!(r["atomics"], atomics, "{name}: {r}");
        }
    }
    // The TU built without metadata: uncovered, and its lock-prefixed add is not a tagged PC.
    let (plain_file, plain) = row(&json, "uncovered_fn");
    assert_eq!(
        (plain["covered"].as_bool(), plain["atomics"].as_u64(), plain["features"].as_u64()),
        (Some(false), Some(0), Some(0))
    );
    assert!(plain_file.ends_with("plain.c"), "{plain_file}");

    // Rows sit in the file of their first line, which is the user's.
    let (bump_file, bump) = row(&json, "bump");
    assert!(bump_file.ends_with("cov.c"), "{bump_file}");
    assert_eq!(bump["line"], 6);
    let (origin, cov) = files(&json).into_iter().find(|(_, f)| f["path"] == bump_file).unwrap();
    assert_eq!(origin, "user");
    assert_eq!(json["groups"][0]["origin"], "user", "your code comes first");
    assert_eq!(cov["totals"]["covered_functions"], 5);
    assert_eq!(cov["atomic_lines"], serde_json::json!([7, 9]), "the lines holding the atomics of bump and both");

    // The atomic counts add up to the dump's; the totals to the rows.
    let all = rows(&json);
    let in_rows: u64 = all.iter().map(|(_, r)| r["atomics"].as_u64().unwrap()).sum();
    assert_eq!(in_rows as usize, dump_atomics(&exe).len());
    let covered: Vec<&Value> = all.iter().filter(|(_, r)| r["covered"] == true).map(|(_, r)| *r).collect();
    let t = &json["totals"];
    assert_eq!(t["functions"].as_u64().unwrap() as usize, all.len());
    assert_eq!(t["covered_functions"].as_u64().unwrap() as usize, covered.len());
    let s = &binaries[0]["summary"];
    assert_eq!(s["functions"], t["functions"]);
    let cov_bytes: u64 = covered.iter().map(|r| r["size"].as_u64().unwrap()).sum();
    assert_eq!(s["covered_text_bytes"], cov_bytes);
    assert_eq!(s["atomics"].as_u64().unwrap() as usize, dump_atomics(&exe).len());
    let mut names: Vec<&str> = covered.iter().map(|r| r["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "a_function_with_a_name_long_enough_to_be_cut_short_in_the_terminal_table",
            "both",
            "bump",
            "main",
            "noatomics"
        ]
    );
}

#[test]
fn c_text_groups_files_and_fits_the_width() {
    let Some((dir, exe)) = build_two_tu("cov_c_text") else { return };
    // Run where the program was built: files are shown relative to it.
    let text = |columns: &str| {
        let out = common::racewatch()
            .current_dir(&dir)
            .env("COLUMNS", columns)
            .args(["coverage"])
            .arg(&exe)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let wide = text("160");
    let lines: Vec<&str> = wide.lines().collect();
    assert!(lines[0].starts_with("racewatch coverage: 1 binary"), "{wide}");
    assert!(lines.iter().any(|l| l.starts_with("Total: 5/")), "{wide}");
    let header = lines.iter().find(|l| l.starts_with("FILE")).expect("header");
    assert!(header.contains("COVERED") && header.contains("ATOMICS"), "{header}");
    assert!(lines.iter().any(|l| l.starts_with("your code")), "{wide}");
    // Directories under the group: the files at the top are in `./`, not `/`.
    assert!(lines.iter().any(|l| l.starts_with("  ./ ")), "{wide}");
    assert!(lines.iter().any(|l| l.starts_with("  lib/ ")), "{wide}");
    let row = |text: &'static str, name: &str| -> String {
        text.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("no {name} in\n{text}")).to_string()
    };
    let wide: &'static str = Box::leak(wide.into_boxed_str());
    assert!(row(wide, " bump ").contains(" yes "), "{}", row(wide, " bump "));
    assert!(row(wide, "uncovered_fn").contains("[not covered]"));
    assert!(row(wide, "a_function_with_a_name_long_enough_to_be_cut_short_in_the_terminal_table").contains(" yes "));
    assert!(wide.contains("Static metadata only"), "the text says how to get run-time counts");
    // Narrow: every line fits, and the long name keeps its distinguishing end.
    let narrow: &'static str = Box::leak(text("80").into_boxed_str());
    for line in narrow.lines().filter(|l| l.starts_with(' ') || l.starts_with("FILE")) {
        assert!(line.chars().count() <= 80, "{} columns: {line}", line.chars().count());
    }
    // The row of the long name (a long binary path in the header is cut too).
    let cut = narrow.lines().find(|l| l.starts_with(' ') && l.contains('…') && l.contains(" yes "));
    assert!(cut.is_some_and(|l| l.contains("terminal_table")), "{narrow}");
}

#[test]
fn stripped_binary_shows_covered_functions_as_unknown() {
    let Some((dir, exe)) = build_two_tu("cov_stripped") else { return };
    let stripped = dir.join("prog.stripped");
    common::check(Command::new("strip").arg("-o").arg(&stripped).arg(&exe).output().unwrap(), "strip");
    let json = coverage_json(&[&exe, &stripped]);
    let covered = |binary: u64| -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = rows(&json)
            .iter()
            .filter(|(_, r)| r["binary"] == binary && r["covered"] == true)
            .map(|(_, r)| (r["address"].as_u64().unwrap(), r["atomics"].as_u64().unwrap()))
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(covered(1), covered(0));
    let unknown: Vec<(&str, &Value)> = rows(&json).into_iter().filter(|(_, r)| r["binary"] == 1).collect();
    assert!(unknown.iter().all(|(_, r)| r["name"] == "<unknown>"));
    assert!(unknown.iter().all(|(file, _)| file.is_empty()), "no line information: the unknown group");
    assert_eq!(unknown.len(), covered(0).len());
    assert_eq!(
        json["binaries"][1]["summary"]["covered_functions"],
        json["binaries"][0]["summary"]["covered_functions"]
    );
}

#[test]
fn rust_program_rows_and_std_folded() {
    let dir = common::scratch("cov_rust");
    let exe = common::build_rust(&dir, "rusty", RUST_SRC, &[]);
    let json = coverage_json(&[&exe]);
    let (file, bump) = row(&json, "rusty::bump");
    assert_eq!(bump["covered"], true);
    assert_eq!(bump["atomics"], 1);
    let raw = bump["raw_name"].as_str().unwrap();
    assert!(raw.starts_with("_R") || raw.starts_with("_ZN"), "{raw}");
    assert!(file.ends_with("rusty.rs"), "{file}");
    assert_eq!(bump["line"], 5);
    // The precompiled standard library is not covered, and sits in its own group with short paths.
    for name in ["std::rt::lang_start_internal", "std::io::stdio::_print"] {
        assert_eq!(row(&json, name).1["covered"], false, "{name}");
    }
    let std_files: Vec<&Value> = files(&json).into_iter().filter(|(o, _)| *o == "std").map(|(_, f)| f).collect();
    assert!(!std_files.is_empty());
    for f in &std_files {
        let display = f["display"].as_str().unwrap();
        assert!(!display.contains("/rustc/") && display.contains("::…/"), "{display}");
    }
    assert_eq!(json["groups"][0]["origin"], "user");
    assert_eq!(row(&json, "rusty::main").1["covered"], true);
}

#[test]
fn missing_file_among_others_exits_2_and_reports_the_rest() {
    let Some((dir, exe)) = build_two_tu("cov_missing") else { return };
    let missing = dir.join("gone");
    let out = coverage("json", &[&exe, &missing]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("gone"), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["binaries"].as_array().unwrap().len(), 1);
}

#[test]
fn corrupt_table_is_reported_and_rows_still_printed() {
    let Some((dir, exe)) = build_two_tu("cov_corrupt") else { return };
    // Cut the last covered entry's features ULEB with a continuation bit.
    let bytes = std::fs::read(&exe).unwrap();
    let module = racewatch_instrument::elf::Module::from_bytes(&exe, bytes.clone()).unwrap();
    let off = module.section_file_offset("sanmd_covered2").unwrap();
    let len = module.section_data("sanmd_covered2").unwrap().1.len();
    let mut bad = bytes;
    bad[off + len - 1] = 0x80;
    let path = dir.join("prog.bad");
    std::fs::write(&path, bad).unwrap();
    let out = coverage("text", &[&path]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        format!("racewatch: {}: sanmd_covered2: truncated features at byte {}\n", path.display(), len - 1)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("    error: sanmd_covered2: truncated features"), "{text}");
    assert!(text.contains("Total: "));
}

#[test]
fn output_goes_to_a_file_with_dash_o_and_a_closed_pipe_ends_quietly() {
    let Some((dir, exe)) = build_two_tu("cov_output") else { return };
    // -o FILE: the same bytes as stdout, nothing on stdout.
    let file = dir.join("report.html");
    let out = common::racewatch().args(["coverage", "--format", "html", "-o"]).arg(&file).arg(&exe).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    let to_stdout = coverage("html", &[&exe]);
    assert_eq!(std::fs::read(&file).unwrap(), to_stdout.stdout);
    // `racewatch dump … | head -c 10`: the reader goes away; racewatch neither panics nor complains.
    for args in [&["dump", "--format", "json"][..], &["coverage"], &["verify"]] {
        let mut child = common::racewatch()
            .args(args)
            .arg(&exe)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert!(out.status.code().is_some_and(|c| c <= 1), "{args:?}: {:?} {stderr}", out.status);
    }
}

/// A profile without a single sample (a suite that ends in milliseconds) says why, instead of a table of zeros.
#[test]
fn profile_without_samples_explains_why() {
    let Some((dir, exe)) = build_two_tu("cov_no_samples") else { return };
    let profile = dir.join("profile.1");
    std::fs::write(&profile, format!("racewatch-profile 1\npid 1\ndropped 0\nmodule - {}\n", exe.display())).unwrap();
    let out = common::racewatch().args(["coverage", "--profile"]).arg(&profile).arg(&exe).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("run-time profiles of 1 process"), "{text}");
    assert!(text.contains("No samples:") && text.contains("sample_period_us=100"), "{text}");
}
