//! `racewatch flags` and `racewatch cargo`: the flags printed are the ones
//! racewatch uses, and the cargo wrapper builds with metadata in its own target
//! directory, keeps the user's RUSTFLAGS and runs tests with the runtime.

mod common;

use common::{check, racewatch, retry_for, scratch, REPORT_HEADER};
use racewatch_instrument::toolchain::{C_FLAGS, RUST_FLAGS};
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn flags_prints_one_line_for_each_compiler() {
    let rust = check(racewatch().args(["flags", "--rust"]).output().unwrap(), "flags --rust");
    assert_eq!(String::from_utf8(rust.stdout).unwrap(), format!("{}\n", RUST_FLAGS.join(" ")));
    let c = check(racewatch().args(["flags", "--c"]).output().unwrap(), "flags --c");
    assert_eq!(String::from_utf8(c.stdout).unwrap(), format!("{}\n", C_FLAGS.join(" ")));
    assert!(!racewatch().arg("flags").output().unwrap().status.success(), "one of --rust/--c is required");
}

#[test]
fn demos_config_carries_the_same_rust_flags() {
    let config = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("demos/.cargo/config.toml"))
        .expect("demos/.cargo/config.toml");
    let quoted: Vec<&str> = config.split('"').skip(1).step_by(2).collect();
    assert_eq!(quoted, RUST_FLAGS, "demos/.cargo/config.toml rustflags differ from `racewatch flags --rust`");
}

/// Section names and sizes of an ELF64 little-endian file.
fn elf_sections(path: &Path) -> Vec<(String, u64)> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..5], b"\x7fELF\x02", "{} is not ELF64", path.display());
    let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let name_start = strtab + u32_at(header(i));
            let len = b[name_start..].iter().position(|&c| c == 0).unwrap();
            (String::from_utf8_lossy(&b[name_start..name_start + len]).into_owned(), u64_at(header(i) + 0x20))
        })
        .collect()
}

/// A one-binary crate (its own workspace) in a scratch directory.
fn tiny_crate(name: &str, main_rs: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::write(
        dir.join("Cargo.toml"),
        format!("[workspace]\n\n[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), main_rs).unwrap();
    dir
}

/// `racewatch cargo ARGS` in `dir`, with none of the caller's build settings.
fn racewatch_cargo(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = racewatch();
    cmd.arg("cargo").args(args).current_dir(dir);
    for var in [
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RACEWATCH_OPTIONS",
        "RUSTDOCFLAGS",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

const COUNTER_MAIN: &str = r#"
use std::sync::atomic::{AtomicU64, Ordering};
static HITS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn hit() -> u64 {
    HITS.fetch_add(1, Ordering::SeqCst) + 1
}

/// Whether the runtime is loaded in this process (its variables are hidden from the program, its
/// mapping is not).
fn runtime_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps").unwrap_or_default().contains("libracewatch.so")
}

fn main() {
    println!("hits={} user_cfg={} preload={}", hit(), cfg!(racewatch_user_cfg), runtime_loaded());
}

#[test]
fn runs_with_the_runtime_preloaded() {
    assert!(runtime_loaded());
}
"#;

#[test]
fn cargo_wrapper_builds_with_metadata_in_its_own_target_dir() {
    let dir = tiny_crate("rw_cargo_build", COUNTER_MAIN);
    check(racewatch_cargo(&dir, &["build", "--quiet"]).output().unwrap(), "racewatch cargo build");
    let exe = dir.join("target/racewatch/debug/rw_cargo_build");
    let sections = elf_sections(&exe);
    for wanted in ["sanmd_covered2", "sanmd_atomics2"] {
        let size = sections.iter().find(|(n, _)| n == wanted).map(|s| s.1);
        assert!(size.is_some_and(|s| s > 0), "{wanted} missing or empty in {}: {sections:?}", exe.display());
    }
    assert!(!dir.join("target/debug").exists(), "the normal target dir was touched");

    // A plain cargo build afterwards is a normal build without metadata.
    let plain = Command::new(env!("CARGO"))
        .args(["build", "--quiet"])
        .current_dir(&dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .unwrap();
    check(plain, "cargo build");
    let plain_sections = elf_sections(&dir.join("target/debug/rw_cargo_build"));
    assert!(!plain_sections.iter().any(|(n, _)| n.starts_with("sanmd_")), "plain build has metadata");
}

#[test]
fn cargo_wrapper_honours_cargo_target_dir_and_user_rustflags() {
    let dir = tiny_crate("rw_cargo_env", COUNTER_MAIN);
    let parent = dir.join("elsewhere");
    let out = check(
        racewatch_cargo(&dir, &["run", "--quiet"])
            .env("CARGO_TARGET_DIR", &parent)
            .env("RUSTFLAGS", "--cfg racewatch_user_cfg")
            .output()
            .unwrap(),
        "racewatch cargo run",
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("hits=1 user_cfg=true"), "user RUSTFLAGS lost: {stdout}");
    assert!(stdout.contains("preload=true"), "cargo run did not preload the runtime: {stdout}");
    let exe = parent.join("racewatch/debug/rw_cargo_env");
    assert!(elf_sections(&exe).iter().any(|(n, _)| n == "sanmd_covered2"), "{}", exe.display());
    assert!(!dir.join("target").exists());
}

#[test]
fn cargo_test_runs_tests_with_the_runtime() {
    let dir = tiny_crate("rw_cargo_test", COUNTER_MAIN);
    let out = racewatch_cargo(&dir, &["test", "--quiet"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    check(out.clone(), "racewatch cargo test");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(stderr.trim_end().ends_with("racewatch: no data race reported"), "{stderr}");
    // Building the tests only runs nothing, so nothing is summed up.
    let out = racewatch_cargo(&dir, &["test", "--no-run", "--quiet"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    check(out, "racewatch cargo test --no-run");
    assert!(!stderr.contains("no data race reported") && !stderr.contains("test rate"), "{stderr}");
}

#[test]
fn cargo_options_reach_the_program_and_release_builds_keep_line_tables() {
    let dir = tiny_crate("rw_cargo_options", COUNTER_MAIN);
    let out = racewatch_cargo(&dir, &["-o", "stats=1", "run", "--release", "--quiet"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    check(out, "racewatch cargo -o stats=1 run --release");
    assert!(stderr.contains("racewatch: programs run at the test rate sample_period_us=250"), "{stderr}");
    assert!(stderr.contains("racewatch: stats: covered functions: "), "-o stats=1 did not reach the program: {stderr}");
    let exe = dir.join("target/racewatch/release/rw_cargo_options");
    assert!(
        elf_sections(&exe).iter().any(|(n, size)| n == ".debug_line" && *size > 0),
        "the release build lost its line tables: {}",
        exe.display()
    );
    // A rate the user chose is kept, and then no test-rate line is printed.
    let out = racewatch_cargo(&dir, &["run", "--release", "--quiet"])
        .env("RACEWATCH_OPTIONS", "sample_period_us=5000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    check(out, "racewatch cargo run with RACEWATCH_OPTIONS");
    assert!(!stderr.contains("test rate"), "{stderr}");
}

#[test]
fn cargo_plus_toolchain_checks_that_toolchains_rustc() {
    let rustup_stable = Command::new("rustc").args(["+stable", "-vV"]).output().is_ok_and(|o| o.status.success());
    if !rustup_stable {
        eprintln!("SKIP: no rustup `stable` toolchain");
        return;
    }
    let dir = tiny_crate("rw_cargo_plus", COUNTER_MAIN);
    check(racewatch_cargo(&dir, &["+stable", "build", "--quiet"]).output().unwrap(), "racewatch cargo +stable build");
    let out = racewatch_cargo(&dir, &["+no-such-toolchain", "build"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("no-such-toolchain"), "{stderr}");
}

const RACY_DOCTEST_LIB: &str = r#"
/// Two threads bump a `static mut` for up to 10 s: a data race in a doctest.
///
/// ```
/// static mut HITS: u64 = 0;
/// #[inline(never)]
/// fn bump() { unsafe { HITS += 1 } }
/// let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
/// let t: Vec<_> = (0..2).map(|_| std::thread::spawn(move || while std::time::Instant::now() < until {
///     for _ in 0..1000 { bump() }
/// })).collect();
/// for t in t { t.join().unwrap(); }
/// ```
pub fn documented() {}
"#;

#[test]
fn doctests_are_instrumented_and_run_under_the_detector() {
    let dir = tiny_crate("rw_cargo_doctest", COUNTER_MAIN);
    std::fs::write(dir.join("src/lib.rs"), RACY_DOCTEST_LIB).unwrap();
    // halt_on_error makes the racy doctest fail, so rustdoc shows its output (the report).
    let out = racewatch_cargo(&dir, &["-o", "halt_on_error=1", "test", "--doc"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "the racy doctest should have been halted: {text}");
    assert!(text.contains("WARNING: racewatch: data race"), "no report from the doctest: {text}");
}

const ONCE_PER_PROCESS_LIB: &str = r#"
static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Panics when called twice in one process (like rayon's global pool builder).
pub fn start_once() {
    assert!(!STARTED.swap(true, std::sync::atomic::Ordering::SeqCst), "started twice in one process");
}

/// ```
/// rw_doctest_2024::start_once();
/// ```
pub fn first() {}

/// ```
/// rw_doctest_2024::start_once();
/// ```
pub fn second() {}
"#;

#[test]
fn merged_doctests_of_edition_2024_still_run_one_process_each() {
    let dir = tiny_crate("rw_doctest_2024", COUNTER_MAIN);
    let manifest = "[workspace]\n\n[package]\nname = \"rw_doctest_2024\"\nversion = \"0.1.0\"\nedition = \"2024\"\n";
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/lib.rs"), ONCE_PER_PROCESS_LIB).unwrap();
    let out = racewatch_cargo(&dir, &["test", "--doc"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "doctests must pass as under plain cargo test: {text}");
    assert!(text.contains("2 passed"), "{text}");
}

#[test]
fn missing_rustc_is_explained() {
    let dir = tiny_crate("rw_cargo_norustc", COUNTER_MAIN);
    let out = racewatch_cargo(&dir, &["build"]).env("RUSTC", "/nonexistent/rustc").output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("/nonexistent/rustc not found") && stderr.contains("rustup"), "{stderr}");
    assert!(!dir.join("target").exists(), "cargo ran despite the failed check");
}

const BUSY_TESTS: &str = r#"
use std::sync::atomic::{AtomicU64, Ordering};
static SHARED: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
pub fn spin(until: std::time::Instant) -> u64 {
    let mut n = 0;
    while std::time::Instant::now() < until {
        SHARED.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
    n
}

fn main() {}

#[test]
fn two_threads_spin() {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(700);
    let other = std::thread::spawn(move || spin(until));
    assert!(spin(until) + other.join().unwrap() > 0);
}
"#;

/// `racewatch cargo test --coverage FORMAT`: one command leaves the suite's merged report, naming the
/// crate's own function as sampled; cargo's arguments and exit status are kept.
#[test]
fn cargo_test_coverage_leaves_a_merged_report() {
    let dir = tiny_crate("rw_cargo_coverage", BUSY_TESTS);
    let out = racewatch_cargo(&dir, &["test", "--coverage", "json", "--quiet"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    check(out, "racewatch cargo test --coverage json");
    let report_path = dir.join("target/racewatch/coverage/coverage.json");
    assert!(stderr.contains(&format!("written to {}", report_path.display())), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    assert_eq!(report["profiled"], true);
    let user = &report["groups"][0];
    assert_eq!(user["origin"], "user");
    let main_rs =
        user["files"].as_array().unwrap().iter().find(|f| f["display"] == "src/main.rs").expect("src/main.rs");
    let spin = main_rs["functions"].as_array().unwrap().iter().find(|r| r["name"] == "rw_cargo_coverage::spin");
    let spin = spin.unwrap_or_else(|| panic!("no spin row in {main_rs}"));
    // The harness's generated `main` (at line 1) is not listed among the user's functions.
    let names: Vec<&str> = main_rs["functions"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert!(!names.contains(&"rw_cargo_coverage::main"), "{names:?}");
    assert_eq!(spin["covered"], true);
    assert!(spin["samples"].as_u64().unwrap() > 0, "{spin}");
    // A failing run keeps cargo's status, and the report is still written (HTML this time).
    std::fs::write(dir.join("src/main.rs"), format!("{BUSY_TESTS}\n#[test]\nfn fails() {{ panic!(\"no\") }}\n"))
        .unwrap();
    let out = racewatch_cargo(&dir, &["--coverage", "html", "test", "--quiet"]).output().unwrap();
    assert_eq!(out.status.code(), Some(101), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.join("target/racewatch/coverage/index.html")).unwrap();
    assert!(page.contains("rw_cargo_coverage::spin"));
}

/// A format racewatch does not know is an error before cargo runs, not a bare `--coverage` and a test filter.
#[test]
fn cargo_coverage_with_an_unknown_format_is_an_error() {
    let dir = tiny_crate("rw_cargo_coverage_bad", BUSY_TESTS);
    let out = racewatch_cargo(&dir, &["test", "--coverage", "xml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--coverage xml: expected text, html, lcov or json"), "{stderr}");
    assert!(!dir.join("target").exists(), "cargo did not run");
}

/// `racewatch cargo nextest run`: nextest runs each test in its own process through the same runner, at
/// the test rate, and `--coverage` merges their profiles. Skipped where cargo-nextest is not installed.
#[test]
fn cargo_nextest_runs_tests_under_the_runtime() {
    let has_nextest = Command::new("cargo").args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    if !has_nextest {
        eprintln!("skipped: cargo-nextest is not installed");
        return;
    }
    let dir = tiny_crate("rw_cargo_nextest", BUSY_TESTS);
    let out = racewatch_cargo(&dir, &["-o", "stats=1", "nextest", "run", "--no-capture", "--coverage", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("programs run at the test rate sample_period_us=250"), "{stderr}");
    let samples: u64 = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("racewatch: stats: samples: "))
        .map(|n| n.trim().parse::<u64>().unwrap())
        .sum();
    assert!(samples > 0, "the test process was sampled: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("target/racewatch/coverage/coverage.json")).unwrap()).unwrap();
    assert!(report["totals"]["samples"].as_u64().unwrap() > 0, "{}", report["totals"]);
}

const RACY_INLINED_MAIN: &str = r#"
static mut COUNTER: u64 = 0;
mod work {
    #[inline(always)]
    pub fn bump() { unsafe { super::COUNTER += 1; } }
    pub fn worker(until: std::time::Instant) {
        while std::time::Instant::now() < until { for _ in 0..1000 { bump(); } }
    }
}
fn main() {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let t = std::thread::spawn(move || work::worker(until));
    work::worker(until);
    t.join().unwrap();
}
"#;

/// Release builds get debug info from the profile (`limited`), so a race report's inlined frames carry
/// path-qualified names, as Rust's own backtraces do, not bare `bump`.
#[test]
fn release_reports_name_inlined_frames_with_their_paths() {
    let dir = tiny_crate("rw_cargo_inlined", RACY_INLINED_MAIN);
    let out = racewatch_cargo(&dir, &["-o", "halt_on_error=1", "-o", "report_format=json", "run", "--release", "-q"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = stderr.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("no report in 20 s: {stderr}"));
    let report: serde_json::Value = serde_json::from_str(report).unwrap();
    let names: Vec<&str> =
        report["accesses"][0]["stack"].as_array().unwrap().iter().filter_map(|f| f["function"].as_str()).collect();
    assert_eq!(names.first(), Some(&"rw_cargo_inlined::work::bump"), "{names:?}");
    assert!(names.contains(&"rw_cargo_inlined::work::worker"), "{names:?}");
}

/// An integration test that races: two threads bump a `static mut` for 3 s. The test itself passes.
const RACY_TEST: &str = r#"
use std::time::{Duration, Instant};
static mut COUNTER: u64 = 0;

#[inline(never)]
fn bump() {
    unsafe { COUNTER += 1 }
}

#[test]
fn two_threads_bump_a_static_mut() {
    let until = Instant::now() + Duration::from_secs(3);
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || while Instant::now() < until { for _ in 0..1000 { bump() } }))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
"#;

/// Runs `racewatch cargo ARGS` in `dir` until a run prints a race report (every run without one must
/// succeed and say so); returns that run's status and its stdout and stderr together.
fn until_a_race_is_reported(dir: &Path, args: &[&str]) -> (std::process::ExitStatus, String) {
    let found = retry_for(std::time::Duration::from_secs(60), || {
        let out = racewatch_cargo(dir, args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let text = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
        if stderr.contains(REPORT_HEADER) {
            return Ok(Some((out.status, text)));
        }
        if !out.status.success() || !stderr.trim_end().ends_with("racewatch: no data race reported") {
            return Err(format!("a run without a report: {}\n{text}", out.status));
        }
        Ok(None)
    });
    found.unwrap_or_else(|why| panic!("racewatch cargo {args:?}: the race was not reported: {why}")).0
}

/// A test binary that reported a race and then dies (an abort: a corrupted structure's destructor,
/// say) is still counted in the summary: its record of races is written when each race is printed, not
/// only at a normal exit.
#[test]
fn a_binary_that_aborts_after_its_race_report_is_counted_in_the_summary() {
    let dir = tiny_crate("rw_cargo_race_abort", BUSY_TESTS);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    let aborting = RACY_TEST.replace(
        "        t.join().unwrap();\n    }\n",
        "        t.join().unwrap();\n    }\n    std::process::abort();\n",
    );
    assert_ne!(aborting, RACY_TEST);
    std::fs::write(dir.join("tests/racy.rs"), aborting).unwrap();
    let found = retry_for(std::time::Duration::from_secs(60), || {
        let out = racewatch_cargo(&dir, &["test"]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() || !text.contains("SIGABRT") {
            return Err(format!("the test binary did not abort: {}\n{text}", out.status));
        }
        Ok(text.contains(REPORT_HEADER).then_some(text))
    });
    let (text, _) = found.unwrap_or_else(|why| panic!("the race was not reported: {why}"));
    let line = text.lines().rfind(|l| l.starts_with("racewatch: ")).unwrap_or_default();
    assert!(line.starts_with("racewatch: found ") && line.contains(" in 1 test binary: racy-"), "{line}\n{text}");
}

/// Races fail the test binary that raced: it exits 66 at its end (its tests pass), cargo counts it
/// failed, `racewatch cargo test` fails, and its last line names the binary and counts its races; the
/// clean binary of the same package is not named. Under nextest too (each test its own process), when
/// installed. Without the race, the same project passes.
#[test]
fn cargo_test_fails_the_binary_that_raced_and_names_it_in_the_summary() {
    let dir = tiny_crate("rw_cargo_race", BUSY_TESTS);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("tests/racy.rs"), RACY_TEST).unwrap();
    let summary = |text: &str| text.lines().rfind(|l| l.starts_with("racewatch: ")).unwrap_or_default().to_string();

    let (status, text) = until_a_race_is_reported(&dir, &["test"]);
    assert!(!status.success(), "racewatch cargo test succeeded although a race was reported:\n{text}");
    assert!(text.contains("exit status: 66"), "cargo names the racy binary's status:\n{text}");
    assert!(text.contains("test two_threads_bump_a_static_mut ... ok"), "the racing test itself passes:\n{text}");
    let line = summary(&text);
    assert!(line.starts_with("racewatch: found ") && line.contains(" distinct data race"), "{line}\n{text}");
    assert!(line.contains(" in 1 test binary: racy-"), "{line}\n{text}");
    assert!(!line.contains("rw_cargo_race-"), "the clean binary is not named: {line}");
    assert!(text.contains("reported: exit status 66 instead of 0 (fail_on_race=1)"), "the runtime says why:\n{text}");

    let has_nextest = Command::new("cargo").args(["nextest", "--version"]).output().is_ok_and(|o| o.status.success());
    if has_nextest {
        let (status, text) = until_a_race_is_reported(&dir, &["nextest", "run", "--no-fail-fast"]);
        assert!(!status.success(), "racewatch cargo nextest run succeeded although a race was reported:\n{text}");
        let line = summary(&text);
        assert!(line.contains(" in 1 test binary: racy-"), "{line}\n{text}");
    } else {
        eprintln!("skipped the nextest part: cargo-nextest is not installed");
    }

    std::fs::remove_file(dir.join("tests/racy.rs")).unwrap();
    let out = racewatch_cargo(&dir, &["test"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    check(out, "racewatch cargo test without the racy test");
    assert_eq!(summary(&stderr), "racewatch: no data race reported", "{stderr}");
}
