//! `racewatch coverage` on real binaries: a C program whose second
//! translation unit is built without metadata, a Rust program, a stripped
//! copy; JSON, text and HTML.

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

/// Links `cov.c` (with metadata) and `plain.c` (without) into `dir/prog`.
fn build_two_tu(name: &str) -> Option<(PathBuf, PathBuf)> {
    let clang = common::clang()?;
    let dir = common::scratch(name);
    let compile = |file: &str, src: &str, flags: &[&str]| {
        let c = dir.join(file);
        std::fs::write(&c, src).unwrap();
        let obj = c.with_extension("o");
        let out = Command::new(&clang).args(flags).args(["-O2", "-c"]).arg(&c).arg("-o").arg(&obj).output().unwrap();
        common::check(out, "clang -c");
        obj
    };
    let covered = compile("cov.c", COVERED_TU, C_FLAGS);
    let plain = compile("plain.c", PLAIN_TU, &["-gline-tables-only"]);
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

fn row<'a>(module: &'a Value, name: &str) -> &'a Value {
    module["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

/// Atomic PCs per function, as `racewatch dump` lists them.
fn dump_atomics(exe: &Path) -> Vec<u64> {
    let out = common::racewatch().args(["dump", "--format", "json"]).arg(exe).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["atomics"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
}

#[test]
fn c_rows_and_summary_are_right() {
    let Some((_dir, exe)) = build_two_tu("cov_c") else { return };
    let json = coverage_json(&[&exe]);
    let modules = json["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 1);
    let m = &modules[0];
    assert_eq!(m["path"], exe.to_str().unwrap());

    for (name, atomics) in [("bump", 1), ("both", 2), ("noatomics", 0), ("main", 0)] {
        let r = row(m, name);
        assert_eq!(r["covered"], true, "{name}");
        assert_eq!(r["features"].as_u64().unwrap() & 1, 1, "{name}");
        assert!(r["feature_names"].as_array().unwrap().contains(&"atomics".into()), "{name}");
        if name != "main" {
            assert_eq!(r["atomics"], atomics, "{name}: {r}");
        }
    }
    // The TU built without metadata: uncovered, and its lock-prefixed add is not a tagged PC.
    let plain = row(m, "uncovered_fn");
    assert_eq!(plain["covered"], false);
    assert_eq!(plain["atomics"], 0);
    assert_eq!(plain["features"], 0);

    // Line tables give the first line of each function.
    let src = &row(m, "bump")["source"];
    assert!(src["file"].as_str().unwrap().ends_with("cov.c"), "{src}");
    assert_eq!(src["line"], 6);
    assert!(row(m, "uncovered_fn")["source"]["file"].as_str().unwrap().ends_with("plain.c"));

    // Rows sorted by address; the atomic counts add up to the dump's.
    let rows = m["functions"].as_array().unwrap();
    let addrs: Vec<u64> = rows.iter().map(|r| r["address"].as_u64().unwrap()).collect();
    assert!(addrs.windows(2).all(|w| w[0] < w[1]), "{addrs:x?}");
    let in_rows: u64 = rows.iter().map(|r| r["atomics"].as_u64().unwrap()).sum();
    assert_eq!(in_rows as usize, dump_atomics(&exe).len());

    let s = &m["summary"];
    let covered: Vec<&Value> = rows.iter().filter(|r| r["covered"] == true).collect();
    assert_eq!(s["functions"].as_u64().unwrap() as usize, rows.len());
    assert_eq!(s["covered_functions"].as_u64().unwrap() as usize, covered.len());
    let bytes = |rs: &mut dyn Iterator<Item = &Value>| rs.map(|r| r["size"].as_u64().unwrap()).sum::<u64>();
    let total = bytes(&mut rows.iter());
    let cov = bytes(&mut covered.iter().copied());
    assert_eq!(s["text_bytes"], total);
    assert_eq!(s["covered_text_bytes"], cov);
    let pct = s["covered_text_percent"].as_f64().unwrap();
    assert!((pct - cov as f64 * 100.0 / total as f64).abs() < 0.06, "{pct}");
    assert_eq!(s["atomics"].as_u64().unwrap() as usize, dump_atomics(&exe).len());
    // Only the functions of cov.c are covered.
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
fn c_text_is_aligned_and_summarised() {
    let Some((_dir, exe)) = build_two_tu("cov_c_text") else { return };
    let out = coverage("text", &[&exe]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], exe.to_str().unwrap());
    let header = lines[1];
    let name_col = header.find("FUNCTION").expect("header");
    let cov_col = header.find("COVERED").unwrap();
    let row = |name: &str| {
        *lines
            .iter()
            .find(|l| l.get(name_col..).is_some_and(|n| n.split_whitespace().next() == Some(name)))
            .unwrap_or_else(|| panic!("no row {name} in\n{text}"))
    };
    assert_eq!(&row("uncovered_fn")[cov_col..cov_col + 3], "no ");
    assert_eq!(&row("bump")[cov_col..cov_col + 3], "yes");
    assert!(row("bump").contains(" atomics "));
    assert!(row("bump").trim_end().ends_with("cov.c:6"), "{}", row("bump"));
    // The long name is cut to 60 characters, the last one an ellipsis.
    let long = lines.iter().find(|l| l.contains("a_function_with_a_name")).unwrap();
    let cut: String = long[name_col..].chars().take_while(|&c| c != ' ').collect();
    assert_eq!(cut.chars().count(), 60);
    assert!(cut.ends_with('…'));

    let json = coverage_json(&[&exe]);
    let s = &json["modules"][0]["summary"];
    let expected = format!(
        "  summary: {}/{} functions covered, {}/{} text bytes ({:.1}%), {} atomic PCs",
        s["covered_functions"],
        s["functions"],
        s["covered_text_bytes"],
        s["text_bytes"],
        s["covered_text_percent"].as_f64().unwrap(),
        s["atomics"]
    );
    assert_eq!(*lines.last().unwrap(), expected);
    assert_eq!(lines.len(), 3 + s["functions"].as_u64().unwrap() as usize);
}

#[test]
fn html_is_one_self_contained_escaped_page() {
    let Some((dir, exe)) = build_two_tu("cov_html") else { return };
    let stripped = dir.join("prog.stripped");
    common::check(Command::new("strip").arg("-o").arg(&stripped).arg(&exe).output().unwrap(), "strip");
    let out = coverage("html", &[&exe, &stripped]);
    assert!(out.status.success());
    let html = String::from_utf8(out.stdout).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert!(html.contains("<style>"));
    for external in ["<script", "<link", " src=", "http://", "https://", "@import", "url("] {
        assert!(!html.contains(external), "external asset {external}");
    }
    // The stripped module's covered functions are <unknown>, escaped.
    assert!(html.contains("&lt;unknown&gt;"));
    assert!(!html.contains("<unknown>"));
    // A summary table naming both modules, then one function table each.
    assert_eq!(html.matches("<table class=\"functions\">").count(), 2);
    let summary = &html[html.find("<table class=\"summary\">").unwrap()..];
    let summary = &summary[..summary.find("</table>").unwrap()];
    assert!(summary.contains(&format!(">{}</a>", exe.display())));
    assert!(summary.contains(&format!(">{}</a>", stripped.display())));
    let uncovered = html.lines().find(|l| l.contains(">uncovered_fn<")).unwrap();
    assert!(uncovered.starts_with("<tr class=\"uncovered\">"), "{uncovered}");
    let bump = html.lines().find(|l| l.contains(">bump<")).unwrap();
    assert!(bump.starts_with("<tr class=\"covered\">") && bump.contains(">atomics<"), "{bump}");
}

#[test]
fn stripped_binary_shows_covered_functions_as_unknown() {
    let Some((dir, exe)) = build_two_tu("cov_stripped") else { return };
    let stripped = dir.join("prog.stripped");
    common::check(Command::new("strip").arg("-o").arg(&stripped).arg(&exe).output().unwrap(), "strip");
    let json = coverage_json(&[&exe, &stripped]);
    let [full, bare] = [&json["modules"][0], &json["modules"][1]];
    let covered = |m: &Value| -> Vec<(u64, u64)> {
        m["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["covered"] == true)
            .map(|r| (r["address"].as_u64().unwrap(), r["atomics"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(covered(bare), covered(full));
    let unknown = bare["functions"].as_array().unwrap().iter().filter(|r| r["name"] == "<unknown>").count();
    assert_eq!(unknown, covered(full).len());
    assert_eq!(bare["summary"]["covered_functions"], full["summary"]["covered_functions"]);
}

#[test]
fn rust_program_rows() {
    let dir = common::scratch("cov_rust");
    let exe = common::build_rust(&dir, "rusty", RUST_SRC, &[]);
    let json = coverage_json(&[&exe]);
    let m = &json["modules"][0];
    let bump = row(m, "rusty::bump");
    assert_eq!(bump["covered"], true);
    assert_eq!(bump["atomics"], 1);
    assert!(
        bump["raw_name"].as_str().unwrap().starts_with("_R") || bump["raw_name"].as_str().unwrap().starts_with("_ZN")
    );
    assert!(bump["source"]["file"].as_str().unwrap().ends_with("rusty.rs"), "{bump}");
    assert_eq!(bump["source"]["line"], 5);
    // The precompiled standard library is not covered (generics instantiated
    // in this crate, like `std::rt::lang_start::<()>`, are).
    for name in ["std::rt::lang_start_internal", "std::io::stdio::_print"] {
        assert_eq!(row(m, name)["covered"], false, "{name}");
    }
    assert_eq!(row(m, "rusty::main")["covered"], true);
    let s = &m["summary"];
    assert!(s["covered_functions"].as_u64().unwrap() >= 2);
    assert!(s["covered_functions"].as_u64().unwrap() < s["functions"].as_u64().unwrap());
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
    assert_eq!(json["modules"].as_array().unwrap().len(), 1);
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
    assert!(text.contains("  error: sanmd_covered2: truncated features"));
    assert!(text.contains("summary: "));
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
