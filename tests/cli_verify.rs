//! `racewatch verify FILE`: exit status 0 on pass, 1 on findings, 2 on
//! unreadable input, with the messages a user sees.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

const CLEAN: &str = r#"
#include <stdatomic.h>
#include <stdint.h>
_Atomic uint64_t counter;
__attribute__((noinline)) uint64_t bump(void) { return atomic_fetch_add(&counter, 1); }
__attribute__((noinline)) int claim(uint64_t v) {
    uint64_t expected = 0;
    return atomic_compare_exchange_strong(&counter, &expected, v);
}
int main(void) { return (int)bump() + claim(2) - 1; }
"#;

const GAP: &str = r#"
#include <stdint.h>
uint64_t hidden;
__attribute__((noinline)) void asm_bump(void) {
    __asm__ volatile("lock addq $1, %0" : "+m"(hidden));
}
int main(void) { asm_bump(); return (int)hidden - 1; }
"#;

fn verify(args: &[&str], file: &Path) -> (i32, String, String) {
    let out: Output = common::racewatch().arg("verify").args(args).arg(file).output().expect("run racewatch");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn build(name: &str, src: &str) -> Option<PathBuf> {
    let clang = common::clang()?;
    let dir = common::scratch(name);
    Some(common::build_c(&clang, &dir, name, src, &[]))
}

#[test]
fn clean_binary_passes() {
    let Some(binary) = build("verify_clean", CLEAN) else { return };
    let (code, stdout, stderr) = verify(&[], &binary);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // bump: lock xadd; claim: lock cmpxchg and the sete LLVM tags with it.
    assert_eq!(
        stdout,
        format!("racewatch verify: {}: 3 atomic PCs checked in 3 covered functions: ok\n", binary.display())
    );
}

#[test]
fn inline_asm_atomic_fails_naming_the_function() {
    let Some(binary) = build("verify_gap", GAP) else { return };
    let (code, stdout, stderr) = verify(&[], &binary);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].contains(" in asm_bump: untagged atomic lock add qword ptr"), "{}", lines[0]);
    assert!(lines[1].ends_with("0 atomic PCs checked in 2 covered functions: 1 findings: FAIL"), "{}", lines[1]);
}

#[test]
fn json_report() {
    let Some(binary) = build("verify_json", GAP) else { return };
    let (code, stdout, _) = verify(&["--format", "json"], &binary);
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["passed"], false);
    assert_eq!(report["covered_functions"], 2);
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0]["kind"], "likely_gap");
    assert_eq!(findings[0]["function"], "asm_bump");
}

#[test]
fn missing_file_exits_2() {
    let missing = common::scratch("verify_missing").join("no-such-binary");
    let (code, stdout, stderr) = verify(&[], &missing);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("racewatch verify: ") && stderr.contains("no-such-binary"), "{stderr}");
}

#[test]
fn non_elf_file_exits_2() {
    let file = common::scratch("verify_not_elf").join("notes.txt");
    std::fs::write(&file, "just text\n").unwrap();
    let (code, stdout, stderr) = verify(&[], &file);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert_eq!(stderr, format!("racewatch verify: {}: not an ELF file\n", file.display()));
}

#[test]
fn binary_without_metadata_passes_with_a_note() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("verify_plain");
    let src = dir.join("plain.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let out = dir.join("plain");
    common::check(
        std::process::Command::new(clang).arg("-O2").arg(&src).arg("-o").arg(&out).output().unwrap(),
        "clang",
    );
    let (code, stdout, stderr) = verify(&[], &out);
    assert_eq!(code, 0);
    assert!(stdout.ends_with("0 atomic PCs checked in 0 covered functions: ok\n"), "{stdout}");
    assert!(stderr.contains("no sanmd_* tables"), "{stderr}");
}

#[test]
fn tagged_inline_asm_passes_and_known_asm_atomic_crates_are_listed_not_failed() {
    // racewatch_instrument::atomic! tags the demo's own inline asm: no gap, and the tags are in the table.
    let tagged = common::demo("rust", "clean_asm_atomics");
    let (status, stdout, _) = verify(&[], &tagged.bin);
    assert_eq!(status, 0, "{stdout}");
    let dump = common::racewatch().arg("dump").arg(&tagged.bin).output().unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    for function in ["asm_load+", "asm_store+"] {
        assert!(dump.contains(function), "no atomic PC in {function}: {dump}");
    }
    // atomic-maybe-uninit's untagged MOVs: listed as covered by the rule, and verify still passes.
    let krate = common::demo("rust", "clean_asm_crate");
    assert_rule_notes(&krate.bin, "atomic-maybe-uninit", 2);
    // The same for a C library's primitives in a header named like Concurrency Kit's ck_pr.h: the load,
    // the store and the lock inc.
    if common::clang().is_some() {
        assert_rule_notes(&common::demo("c", "clean_ck_pr").bin, "ck_pr.h", 3);
    }
}

/// `verify` passes on `bin`, listing at least `at_least` untagged accesses in `file` as atomic by rule.
fn assert_rule_notes(bin: &std::path::Path, file: &str, at_least: usize) {
    let (status, stdout, _) = verify(&[], bin);
    assert_eq!(status, 0, "{stdout}");
    let notes: Vec<&str> = stdout.lines().filter(|l| l.contains("treated as atomic by rule")).collect();
    assert!(notes.len() >= at_least, "{stdout}");
    assert!(notes.iter().all(|l| l.contains(file)), "{stdout}");
}

/// `Arc::downgrade`'s compare-exchange loop, whose merged relaxed load carries no `sanmd_atomics2` entry.
const ARC_DOWNGRADE: &str = include_str!("fixtures/arc_downgrade.rs");

/// The merged load is listed as a note (with a count and in JSON), not a failure: the debug info places
/// it in `core::sync::atomic`, and the runtime judges it atomic from the same debug info.
#[test]
fn atomics_whose_tag_an_optimisation_lost_are_notes_with_a_count() {
    let dir = common::scratch("verify_arc_downgrade");
    let binary = common::build_rust(&dir, "arc_downgrade", ARC_DOWNGRADE, &[]);
    let (code, stdout, stderr) = verify(&[], &binary);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let notes: Vec<&str> =
        stdout.lines().filter(|l| l.contains("an atomic whose metadata an optimisation lost")).collect();
    assert!(
        notes.iter().any(|l| l.contains("in arc_downgrade::downgrade: untagged mov ") && l.contains("sync/atomic.rs:")),
        "the merged load of Arc::downgrade is a note:\n{stdout}"
    );
    let count = format!(
        "note: {} untagged plain {} in core::sync::atomic (metadata lost by an optimisation)",
        notes.len(),
        if notes.len() == 1 { "access" } else { "accesses" }
    );
    assert!(stdout.contains(&count), "{stdout}");
    assert!(stdout.ends_with(": ok\n"), "{stdout}");
    let (_, json, _) = verify(&["--format", "json"], &binary);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let lost = value["lost_atomics"].as_array().expect("lost_atomics");
    assert_eq!(lost.len(), notes.len(), "{json}");
    assert!(lost.iter().all(|l| l["location"].as_str().is_some_and(|f| f.contains("core/src/sync/atomic.rs:"))));
    assert_eq!(value["passed"], true);
}
