//! `racewatch run` and `racewatch runtime-path`: the program runs as it would
//! without racewatch (arguments, stdout, exit status), with the runtime
//! preloaded and the options merged.

mod common;

use common::{build_rust, check, racewatch, scratch};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;

/// Prints its arguments one per line; exits with the code given by the first
/// argument, or aborts when it is "abort".
const ECHO_EXIT: &str = r#"
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for a in &args {
        println!("arg[{a}]");
    }
    eprintln!("to stderr");
    match args.first().map(String::as_str) {
        Some("abort") => std::process::abort(),
        Some(code) => std::process::exit(code.parse().unwrap_or(0)),
        None => {}
    }
}
"#;

/// Prints the two variables racewatch sets.
const PRINT_ENV: &str = r#"
fn main() {
    for key in ["LD_PRELOAD", "RACEWATCH_OPTIONS"] {
        println!("{key}={}", std::env::var(key).unwrap_or_default());
    }
}
"#;

fn runtime_path() -> PathBuf {
    let out = check(racewatch().arg("runtime-path").output().unwrap(), "racewatch runtime-path");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end_matches('\n'))
}

#[test]
fn runtime_path_is_an_elf_shared_object() {
    let path = runtime_path();
    assert!(path.is_absolute(), "{}", path.display());
    assert_eq!(path.file_name().unwrap(), "libracewatch.so");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "not ELF64");
    assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 3, "e_type is not ET_DYN");
    // The same path again: extracted once, then reused.
    assert_eq!(runtime_path(), path);
}

#[test]
fn arguments_stdout_and_exit_codes_pass_through_exactly() {
    let dir = scratch("run_passthrough");
    let prog = build_rust(&dir, "echo_exit", ECHO_EXIT, &[]);
    for args in [&["0", "plain", "with space", "--flag", "-x"][..], &["7", "--", "é"], &["abort"], &[]] {
        let direct = Command::new(&prog).args(args).output().unwrap();
        let via = racewatch().arg("run").arg("--").arg(&prog).args(args).output().unwrap();
        assert_eq!(via.status, direct.status, "exit status for {args:?}");
        assert_eq!(String::from_utf8_lossy(&via.stdout), String::from_utf8_lossy(&direct.stdout), "stdout");
        assert!(String::from_utf8_lossy(&via.stderr).contains("to stderr"));
    }
    let seven = racewatch().arg("run").arg("--").arg(&prog).arg("7").status().unwrap();
    assert_eq!(seven.code(), Some(7));
    let aborted = racewatch().arg("run").arg("--").arg(&prog).arg("abort").status().unwrap();
    assert_eq!(aborted.signal(), Some(libc::SIGABRT), "a signal death stays a signal death (shell: 128+6)");
}

#[test]
fn runtime_is_preloaded_first_and_options_are_merged() {
    let dir = scratch("run_env");
    let prog = build_rust(&dir, "print_env", PRINT_ENV, &[]);
    let out = check(
        racewatch()
            .args(["run", "--option", "verbosity=0", "-o", "stats=0", "--option", "verbosity=0", "--"])
            .arg(&prog)
            .env("LD_PRELOAD", "/nonexistent/other.so")
            .env("RACEWATCH_OPTIONS", "seed=5:stats=1")
            .output()
            .unwrap(),
        "racewatch run",
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let expected_preload = format!("LD_PRELOAD={}:/nonexistent/other.so", runtime_path().display());
    assert!(stdout.lines().any(|l| l == expected_preload), "{stdout}");
    assert!(stdout.lines().any(|l| l == "RACEWATCH_OPTIONS=seed=5:stats=0:verbosity=0"), "{stdout}");
}

#[test]
fn malformed_option_is_a_usage_error() {
    let out = racewatch().args(["run", "--option", "novalue", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));
}

#[test]
fn missing_program_exits_127_with_one_line() {
    let out = racewatch().args(["run", "--", "/nonexistent/racewatch-test-program", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("/nonexistent/racewatch-test-program"), "{stderr}");
    let out = racewatch().args(["run", "--", "racewatch-no-such-command-on-path"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
}
