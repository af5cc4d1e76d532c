//! End to end: the runtime options a user sets with `racewatch run -o key=value` (DESIGN.md "Options
//! contract"), on the real demos: halting, log files, JSON, verbosity, bad options, watchpoint counts,
//! a detector that cannot start, and a host program whose stdout and exit status stay its own.

mod common;

use common::{
    clean_run_status, demo, retry_for, run_under, scratch, spawn_and_wait, stat, stats_summary, Demo, Run,
    REPORT_HEADER,
};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const DETECTION_BUDGET: Duration = Duration::from_secs(30);
const SAMPLE_PERIOD: &str = "sample_period_us=1000";

/// The C demo with a deterministic stdout and a chosen exit status, or `None` (skip) without clang-19.
fn exit_code_demo() -> Option<&'static Demo> {
    common::clang()?;
    Some(demo("c", "clean_exit_code"))
}

/// Runs `demo` (3 s per run) under `options` until a run's `report_of(run)` is `Some`; every run must exit 0,
/// or 66 when it reported (`racewatch run`'s `fail_on_race=1`).
fn until_reported<T>(demo: &Demo, options: &[&str], report_of: impl Fn(&Run) -> Option<T>) -> (Run, T) {
    let mut last_stats = String::new();
    let ((run, found), runs) = retry_for(DETECTION_BUDGET, || {
        let run = run_under(options, &demo.bin, &["3"]);
        last_stats = stats_summary(&run.stderr);
        let found = report_of(&run);
        if run.status.code() != Some(clean_run_status(found.is_some())) {
            return Err(format!("exit status {} (reported: {}):\n{}", run.status, found.is_some(), run.stderr));
        }
        Ok(found.map(|found| (run, found)))
    })
    .unwrap_or_else(|why| panic!("{} with {options:?}: {why}; last stats: {last_stats}", demo.label()));
    eprintln!("{} with {options:?}: reported after {runs} run(s)", demo.label());
    (run, found)
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("racewatch: warning: ")).collect()
}

#[test]
fn halt_on_error_exits_with_exitcode_after_one_report() {
    let demo = demo("rust", "racy_counter");
    let cases: [(&[&str], i32); 2] = [(&["halt_on_error=1"], 66), (&["halt_on_error=1", "exitcode=23"], 23)];
    common::parallel_map(&cases, |(options, code)| {
        let options: Vec<&str> = [SAMPLE_PERIOD].iter().chain(options.iter()).copied().collect();
        let start = Instant::now();
        // Long enough that only a halt ends it early.
        let run = run_under(&options, &demo.bin, &["30"]);
        assert_eq!(run.status.code(), Some(*code), "{options:?}: {}\n{}", run.status, run.stderr);
        assert!(start.elapsed() < Duration::from_secs(25), "{options:?}: did not halt early");
        assert_eq!(run.stderr.matches(REPORT_HEADER).count(), 1, "{options:?}: one report, then exit:\n{}", run.stderr);
        assert!(run.stderr.contains("SUMMARY: racewatch: data race"), "{}", run.stderr);
        // Halted with _exit before the demo printed its result.
        assert_eq!(run.stdout, "", "{options:?}");
    });
}

#[test]
fn log_path_writes_reports_to_path_dot_pid_and_not_to_stderr() {
    let demo = demo("rust", "racy_counter");
    let dir = scratch("options_log_path");
    let log_path = format!("log_path={}/rw", dir.display());
    let options = [SAMPLE_PERIOD, "stats=1", log_path.as_str()];
    let (run, log) = until_reported(demo, &options, |run| {
        assert!(!run.stderr.contains("racewatch"), "racewatch output on stderr with log_path:\n{}", run.stderr);
        assert!(run.stdout.starts_with("racy_counter: "), "{}", run.stdout);
        let file = dir.join(format!("rw.{}", run.pid));
        let log = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(stat(&log, "samples").is_some(), "stats=1 goes to the log too:\n{log}");
        log.contains(REPORT_HEADER).then_some(log)
    });
    assert!(log.contains(&format!("{REPORT_HEADER} (pid={})", run.pid)), "{log}");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let pid = name.strip_prefix("rw.").and_then(|p| p.parse::<u32>().ok());
        assert!(pid.is_some(), "unexpected file {name} in the log directory");
    }
}

/// Checks the fields of one JSON report; returns a message on the first problem.
fn check_json_report(report: &Value, pid: u32) -> Result<(), String> {
    if report["kind"] != "data_race" || report["pid"].as_u64() != Some(u64::from(pid)) {
        return Err("kind/pid".into());
    }
    if !report["summary"].as_str().is_some_and(|s| s.starts_with("data race")) {
        return Err("summary".into());
    }
    // Schema 1: who reported, and the race's keys (symbolized here, so source_key too).
    if report["schema"] != 1 || !report["host"].is_string() || !report["start_time"].is_u64() {
        return Err("schema/host/start_time".into());
    }
    let is_key = |v: &Value| v.as_str().is_some_and(|k| k.len() == 16 && k.bytes().all(|b| b.is_ascii_hexdigit()));
    if !is_key(&report["race_key"]) || !is_key(&report["source_key"]) || report["count"].as_u64() < Some(1) {
        return Err("race_key/source_key/count".into());
    }
    let accesses = report["accesses"].as_array().ok_or("accesses")?;
    if accesses.len() != 2 {
        return Err("two accesses".into());
    }
    for access in accesses {
        let thread = access["thread"].as_str().ok_or("thread")?;
        if thread.strip_prefix('T').is_none_or(|n| n.parse::<u32>().is_err()) {
            return Err(format!("thread {thread}"));
        }
        if access["tid"].as_i64().is_none_or(|tid| tid <= 0) {
            return Err("tid".into());
        }
        if !matches!(access["kind"].as_str(), Some("read" | "write")) {
            return Err("kind".into());
        }
        if !matches!(access["size"].as_u64(), Some(1 | 2 | 4 | 8 | 16)) {
            return Err("size".into());
        }
        let address = access["address"].as_str().and_then(|a| a.strip_prefix("0x")).ok_or("address")?;
        u64::from_str_radix(address, 16).map_err(|_| "address is not hex")?;
        access["atomic"].as_bool().ok_or("atomic")?;
        let stack = access["stack"].as_array().filter(|s| !s.is_empty()).ok_or("stack")?;
        for frame in stack {
            for key in ["function", "file", "line", "column", "module", "build_id", "offset"] {
                frame.get(key).ok_or(format!("frame.{key}"))?;
            }
        }
    }
    Ok(())
}

#[test]
fn json_reports_are_one_object_per_line() {
    let demo = demo("rust", "racy_struct");
    let (run, reports) = until_reported(demo, &[SAMPLE_PERIOD, "report_format=json"], |run| {
        let reports: Vec<&str> = run.stderr.lines().filter(|l| !l.starts_with("racewatch: ")).collect();
        (!reports.is_empty()).then(|| reports.iter().map(|l| l.to_string()).collect::<Vec<_>>())
    });
    for line in &reports {
        let report: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line}"));
        if report["kind"] == "race_count" {
            assert_eq!(report["pid"], run.pid, "{line}");
            continue;
        }
        if let Err(why) = check_json_report(&report, run.pid) {
            panic!("bad field {why}: {line}");
        }
    }
    assert!(!run.stderr.contains("=================="), "text report mixed in:\n{}", run.stderr);
}

#[test]
fn verbosity_1_prints_the_indexed_line_of_each_module() {
    let demo = demo("rust", "clean_mutex");
    let run = run_under(&["verbosity=1", "stats=1"], &demo.bin, &["0.2"]);
    assert!(run.status.success(), "{}", run.stderr);
    let prefix = format!("racewatch: indexed {}: ", demo.bin.display());
    let line = run.stderr.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{}", run.stderr));
    let counts = format!(
        "{} covered functions, {} atomic PCs",
        stat(&run.stderr, "covered functions").unwrap(),
        stat(&run.stderr, "atomic PCs").unwrap()
    );
    assert_eq!(&line[prefix.len()..], counts, "the demo is the only covered module: {}", run.stderr);
    assert!(!counts.starts_with("0 "), "{line}");

    let quiet = run_under(&[], &demo.bin, &["0.2"]);
    assert!(quiet.status.success());
    assert!(!quiet.stderr.contains("racewatch: indexed"), "verbosity=0 is silent: {}", quiet.stderr);
}

#[test]
fn stdout_stderr_and_exit_status_are_the_programs_own() {
    let Some(demo) = exit_code_demo() else { return };
    let direct = spawn_and_wait({
        let mut cmd = Command::new(&demo.bin);
        cmd.args(["1", "3"]);
        cmd
    });
    assert_eq!(direct.status.code(), Some(3), "{direct:?}");
    assert!(direct.stdout.ends_with("(no newline at the end)"), "{direct:?}");
    for options in [&[][..], &[SAMPLE_PERIOD, "watchpoints=4"][..]] {
        let via = run_under(options, &demo.bin, &["1", "3"]);
        assert_eq!(via.status.code(), Some(3), "{options:?}: {via:?}");
        assert_eq!(via.stdout.as_bytes(), direct.stdout.as_bytes(), "{options:?}: stdout differs");
        // No race, no option output: stderr is the program's own too.
        assert_eq!(via.stderr, direct.stderr, "{options:?}: stderr differs");
    }
}

#[test]
fn bad_options_warn_once_each_and_the_program_runs() {
    let demo = demo("rust", "clean_mutex");
    let run = run_under(&["sample_period_us=1000", "delay_us=abc", "nosuchkey=1", "stats=1"], &demo.bin, &["1"]);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.stdout.starts_with("clean_mutex: "), "{}", run.stdout);
    let warned = warnings(&run.stderr);
    assert_eq!(warned.len(), 2, "{}", run.stderr);
    assert_eq!(warned.iter().filter(|w| w.contains("'delay_us'") && w.contains("'abc'")).count(), 1);
    assert_eq!(warned.iter().filter(|w| w.contains("'nosuchkey'")).count(), 1);
    // The detector still runs (with the default window).
    assert!(stat(&run.stderr, "samples").is_some_and(|n| n > 0), "{}", stats_summary(&run.stderr));
}

#[test]
fn four_watchpoints_catch_races_without_warnings() {
    let demo = demo("rust", "racy_struct");
    let (run, _) =
        until_reported(demo, &[SAMPLE_PERIOD, "watchpoints=4", "stats=1"], |run| run.stderr.find(REPORT_HEADER));
    assert_eq!(warnings(&run.stderr), Vec::<&str>::new());
    assert!(stat(&run.stderr, "watches armed").is_some_and(|n| n > 0));
}

#[test]
fn out_of_range_watchpoints_are_clamped_with_one_warning() {
    let demo = demo("rust", "racy_counter");
    let (run, _) = until_reported(demo, &[SAMPLE_PERIOD, "watchpoints=9"], |run| run.stderr.find(REPORT_HEADER));
    assert_eq!(
        warnings(&run.stderr),
        ["racewatch: warning: watchpoints=9 is out of range 1..=4; using 4"],
        "{}",
        run.stderr
    );
}

#[test]
fn a_detector_that_cannot_open_its_perf_events_leaves_the_program_alone() {
    let Some(demo) = exit_code_demo() else { return };
    // With 4 file descriptors (stdio + one), the loader still works, but the runtime has no room for
    // its descriptors above the program's (without CAP_SYS_RESOURCE to raise the hard limit), or its
    // second perf_event_open fails with EMFILE.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n 4 && exec \"$@\"", "sh", env!("CARGO_BIN_EXE_racewatch"), "run", "-o", SAMPLE_PERIOD])
        .arg("--")
        .arg(&demo.bin)
        .args(["1", "3"])
        .env_remove("RACEWATCH_OPTIONS")
        .env_remove("LD_PRELOAD");
    let limited = spawn_and_wait(cmd);
    let direct = spawn_and_wait({
        let mut cmd = Command::new(&demo.bin);
        cmd.args(["1", "3"]);
        cmd
    });
    assert_eq!(limited.status.code(), Some(3), "{limited:?}");
    assert_eq!(limited.stdout, direct.stdout);
    let warned = warnings(&limited.stderr);
    assert_eq!(warned.len(), 1, "{}", limited.stderr);
    let names_the_cause = warned[0].contains("RLIMIT_NOFILE 4/4") || warned[0].contains("perf_event_open");
    assert!(names_the_cause && warned[0].ends_with("race detection disabled"), "{warned:?}");
    assert!(!limited.stderr.contains(REPORT_HEADER));
    assert!(Path::new(&demo.bin).is_file());
}

/// A daemon started as root that gives up root (`setgid`/`setuid` to nobody, as `memcached -u` does),
/// then races, itself or in a child it forks as it daemonizes (the parent leaving with `_exit`): the
/// reports still reach `log_path` and the profile `coverage_path` in directories only root may write
/// (racewatch makes the files just before the change and gives them to the new user; a forked child
/// that may create no file of its own uses them), and nothing of racewatch reaches stderr.
#[test]
fn a_program_that_gives_up_root_still_writes_its_log_and_profile() {
    gives_up_root_then_races(false);
}

#[test]
fn a_daemon_that_gives_up_root_then_forks_still_writes_its_log_and_profile() {
    gives_up_root_then_races(true);
}

fn gives_up_root_then_races(daemonize: bool) {
    let Some(clang) = common::clang() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: not root: no user to give up");
        return;
    }
    const DROP_AND_RACE: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
long counter;
static void *work(void *arg) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 100000; i++) { counter++; __asm__ volatile("" ::: "memory"); }
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < 2);
    return arg;
}
int main(int argc, char **argv) {
    if (setgid(65534) != 0 || setuid(65534) != 0) { perror("drop"); return 1; }
    if (argc > 1) {
        /* As a daemon's start: the parent leaves with _exit once its child is done. */
        pid_t child = fork();
        if (child > 0) {
            int status = 0;
            waitpid(child, &status, 0);
            _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
        }
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, work, 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    printf("uid %d euid %d\n", (int)getuid(), (int)geteuid());
    return 0;
}
"#;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = scratch(if daemonize { "options_drop_root_fork" } else { "options_drop_root" });
    let bin = common::build_c(&clang, &dir, "drop_and_race", DROP_AND_RACE, &["-pthread"]);
    let (logs, profiles) = (dir.join("logs"), dir.join("profiles"));
    for d in [&dir, &profiles] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let log_path = format!("log_path={}/", logs.display());
    let coverage_path = format!("coverage_path={}/cov", profiles.display());
    let options = [SAMPLE_PERIOD, log_path.as_str(), coverage_path.as_str()];
    let args: &[&str] = if daemonize { &["daemonize"] } else { &[] };
    let owned_by_nobody = |path: &Path| {
        let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o600), "{}", path.display());
        std::fs::read_to_string(path).unwrap()
    };
    let ((run, log), runs) = retry_for(DETECTION_BUDGET, || {
        let _ = std::fs::remove_dir_all(&logs);
        for entry in std::fs::read_dir(&profiles).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let run = run_under(&options, &bin, args);
        assert_eq!(run.stdout, "uid 65534 euid 65534\n");
        assert!(!run.stderr.contains("racewatch"), "racewatch output on stderr:\n{}", run.stderr);
        let files: Vec<_> =
            std::fs::read_dir(&logs).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
        assert_eq!(files.len(), 1, "one log file, made before the change: {files:?}");
        let log = owned_by_nobody(&files[0]);
        let reported = log.contains(REPORT_HEADER);
        assert_eq!(run.status.code(), Some(clean_run_status(reported)), "{log}");
        Ok::<_, String>(reported.then_some((run, log)))
    })
    .unwrap_or_else(|why| panic!("{why}"));
    eprintln!("reported after {runs} run(s)");
    let meta = std::fs::metadata(&logs).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o711), "the log directory racewatch made as root");
    // The files carry the pid of the process that gave up root; what is in them, the racing process's.
    let profile = owned_by_nobody(&profiles.join(format!("cov.{}", run.pid)));
    let racer = profile.lines().nth(1).and_then(|l| l.strip_prefix("pid ")).and_then(|p| p.parse::<u32>().ok());
    let racer = racer.unwrap_or_else(|| panic!("{profile}"));
    assert_eq!(racer != run.pid, daemonize, "{profile}");
    assert!(log.contains(&format!("{REPORT_HEADER} (pid={racer})")), "{log}");
    assert!(profile.starts_with("racewatch-profile 1\n") && profile.contains("\nfn "), "{profile}");
}
