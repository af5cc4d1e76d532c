//! `racewatch run` and `racewatch runtime-path`: the program runs as it would
//! without racewatch (arguments, stdout, exit status), with the runtime
//! preloaded and the options merged.

mod common;

use common::{build_rust, check, parallel_map, racewatch, retry_for, scratch, spawn_and_wait, REPORT_HEADER};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// Prints the variables racewatch sets as the program sees them, then as the kernel holds them (read
/// by a child, `cat`, from the program's `/proc/PID/environ`, which is not the child's own).
const PRINT_ENV: &str = r#"
const KEYS: [&str; 3] = ["LD_PRELOAD", "RACEWATCH_OPTIONS", "RACEWATCH_RUN_OPTIONS"];
fn main() {
    for key in KEYS {
        println!("{key}={}", std::env::var(key).unwrap_or_else(|_| "<unset>".into()));
    }
    let path = format!("/proc/{}/environ", std::process::id());
    let kernel = std::process::Command::new("cat").arg(path).output().unwrap().stdout;
    for entry in kernel.split(|&b| b == 0) {
        let entry = String::from_utf8_lossy(entry);
        if KEYS.iter().any(|key| entry.starts_with(&format!("{key}="))) {
            println!("kernel {entry}");
        }
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
fn runtime_is_preloaded_first_options_are_merged_and_both_are_hidden_from_the_program() {
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
    // What the program sees is what it would see without racewatch: the user's variables as they were.
    let seen: Vec<&str> = stdout.lines().filter(|l| !l.starts_with("kernel ")).collect();
    assert_eq!(
        seen,
        ["LD_PRELOAD=/nonexistent/other.so", "RACEWATCH_OPTIONS=seed=5:stats=1", "RACEWATCH_RUN_OPTIONS=<unset>"],
        "{stdout}"
    );
    // What racewatch run passed: the runtime first in LD_PRELOAD, and the options merged into a
    // variable of its own (`fail_on_race=1`, racewatch run's default, before the user's `-o` options).
    let expected_preload = format!("kernel LD_PRELOAD={}:/nonexistent/other.so", runtime_path().display());
    assert!(stdout.lines().any(|l| l == expected_preload), "{stdout}");
    assert!(stdout.lines().any(|l| l == "kernel RACEWATCH_OPTIONS=seed=5:stats=1"), "{stdout}");
    let merged = "kernel RACEWATCH_RUN_OPTIONS=seed=5:stats=0:fail_on_race=1:verbosity=0";
    assert!(stdout.lines().any(|l| l == merged), "{stdout}");
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

/// Two threads bump a `static mut` for SECONDS, then the program ends with CODE by returning it from
/// `main` (`return`) or through `std::process::exit` (`exit`): `racy_exit SECONDS return|exit CODE`.
const RACY_EXIT: &str = r#"
use std::process::ExitCode;
use std::time::{Duration, Instant};
static mut COUNTER: u64 = 0;
#[inline(never)]
fn bump() {
    unsafe { COUNTER += 1 }
}
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let until = Instant::now() + Duration::from_secs_f64(args[0].parse().unwrap());
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || while Instant::now() < until { for _ in 0..1000 { bump() } }))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    println!("racy_exit: done {}", unsafe { COUNTER } > 0);
    let code: u8 = args[2].parse().unwrap();
    if args[1] == "exit" {
        std::process::exit(code.into())
    }
    ExitCode::from(code)
}
"#;

/// How a case starts the program.
#[derive(Debug)]
enum Via {
    /// `racewatch run -o sample_period_us=1000 -o …`.
    Run(&'static [&'static str]),
    /// `LD_PRELOAD=$(racewatch runtime-path) RACEWATCH_OPTIONS=sample_period_us=1000`.
    Preload,
}

/// TSan's convention under `racewatch run` (`fail_on_race=1` by default): a run that reported a race and
/// would exit 0 exits 66, whether `main` returns 0 or the program calls `exit(0)`; a program's own
/// non-zero status is kept; `-o exitcode=N` and `-o fail_on_race=0` are honoured. A bare `LD_PRELOAD`
/// never touches the status. Each case runs until a run reports the race; every run without a report
/// must end with the program's own status.
#[test]
fn a_run_that_reported_a_race_exits_66_unless_it_failed_itself_or_runs_under_a_bare_preload() {
    let dir = scratch("run_race_status");
    let prog = build_rust(&dir, "racy_exit", RACY_EXIT, &[]);
    let runtime = runtime_path();
    let cases: [(Via, [&str; 2], i32); 8] = [
        (Via::Run(&[]), ["return", "0"], 66),
        (Via::Run(&[]), ["exit", "0"], 66),
        (Via::Run(&[]), ["return", "3"], 3),
        (Via::Run(&[]), ["exit", "3"], 3),
        (Via::Run(&["exitcode=23"]), ["return", "0"], 23),
        (Via::Run(&["fail_on_race=0"]), ["exit", "0"], 0),
        (Via::Preload, ["return", "0"], 0),
        (Via::Preload, ["exit", "0"], 0),
    ];
    let failures: Vec<String> = parallel_map(&cases, |(via, how, reported_status)| {
        let own: i32 = how[1].parse().unwrap();
        let found = retry_for(Duration::from_secs(40), || {
            let run = spawn_and_wait(racy_command(&prog, &runtime, via, how));
            if !run.stdout.contains("racy_exit: done true") {
                return Err(format!("{}: stdout {:?}\n{}", run.status, run.stdout, run.stderr));
            }
            let reported = run.stderr.contains(REPORT_HEADER);
            let expected = if reported { *reported_status } else { own };
            if run.status.code() != Some(expected) {
                return Err(format!(
                    "reported: {reported}, {} instead of exit {expected}:\n{}",
                    run.status, run.stderr
                ));
            }
            Ok(reported.then_some(()))
        });
        found.err().map(|why| format!("{via:?} {how:?}: {why}"))
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn racy_command(prog: &Path, runtime: &Path, via: &Via, how: &[&str; 2]) -> Command {
    const RATE: &str = "sample_period_us=1000";
    let mut cmd = match via {
        Via::Run(options) => {
            let mut cmd = racewatch();
            cmd.args(["run", "-o", RATE]);
            for option in *options {
                cmd.args(["-o", option]);
            }
            cmd.arg("--").arg(prog);
            cmd.env_remove("LD_PRELOAD").env_remove("RACEWATCH_OPTIONS");
            cmd
        }
        Via::Preload => {
            let mut cmd = Command::new(prog);
            cmd.env("LD_PRELOAD", runtime).env("RACEWATCH_OPTIONS", RATE);
            cmd
        }
    };
    cmd.arg("2").args(how);
    cmd
}
