//! End to end: the host contract (DESIGN.md "Living inside someone else's process"). With racewatch
//! preloaded, a program behaves exactly as without it, apart from racewatch's own lines on stderr.
//!
//! Every case is a small C program in tests/host/ (built with the metadata flags, tests/host/common.c
//! prepended) that races for real in covered code while it does the thing under test: signals, seccomp,
//! descriptors, limits, fork, exec, small stacks, unread pipes, cancellation, tracers. Each case runs
//! three ways: without racewatch, under `racewatch run` with the default options, and with
//! `-o sample_period_us=1000` (many samples and watch windows). The exit status, stdout, stderr with
//! racewatch's own output removed (`racewatch:` lines and complete report blocks between
//! `==================` lines) and the case's artefacts (data files, directory listings) must be the same
//! in all three; the programs print only facts that do not depend on timing. A run is killed after its
//! timeout and counts as a hang. The racewatch modes run with `fail_on_race=0`: the exit status stays the
//! program's.
//!
//! One `#[test]` per case (the harness runs cases in parallel, one per CPU); a case's runs go through
//! `parallel_map`. A case whose failure depends on timing runs each racewatch mode several times
//! (`Case::repeat`), each compared with the one run without racewatch. A failure names the case, the mode
//! and the run and shows each difference (status, a line diff of stdout or stderr, an artefact) and the
//! tail of the raw stderr; later failed runs of the same mode get one line each.
//!
//! A few more tests check that the detector really works in these settings: the programs arm
//! watchpoints, a parent keeps sampling after its forked children exit, pre-forked workers are
//! reported, a program that capped RLIMIT_NOFILE without CAP_SYS_RESOURCE is still watched; and that the
//! runtime library a plain `cargo build --release` leaves either works when preloaded or says which file
//! to preload.
//!
//! `RACEWATCH_HOST_SELF_CHECK=1` runs the "racewatch" modes without racewatch: every case must then
//! pass, which shows the programs are deterministic and the harness compares the right things.

mod common;

use common::{build_c, check, clang, parallel_map, retry_for, scratch, stat, stats_summary, REPORT_HEADER};
use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Prepended to every program: the racing threads and small helpers.
const COMMON_C: &str = include_str!("host/common.c");
/// Starts and ends a text race report.
const SEPARATOR: &str = "==================";
/// A run still going after this long is killed and fails (a hang is a failure).
const TIMEOUT: Duration = Duration::from_secs(30);
/// The sampling rate at which many samples and watch windows happen in a 1 s run.
const SAMPLE_PERIOD: &str = "sample_period_us=1000";
/// Bytes of `rw_pattern` the descriptor programs write to their data file.
const DATA_LEN: usize = 16384;

// ---- The programs ----

struct Program {
    name: &'static str,
    source: &'static str,
    /// Built with `C_FLAGS` (covered code); `false`: plain `clang -O2`.
    metadata: bool,
    /// More compiler flags (a language standard, feature macros).
    flags: &'static [&'static str],
}

const PROGRAMS: &[Program] = &[
    Program { name: "sigwait", source: include_str!("host/sigwait.c"), metadata: true, flags: &[] },
    Program { name: "signalfd", source: include_str!("host/signalfd.c"), metadata: true, flags: &[] },
    Program { name: "sighup_thread", source: include_str!("host/sighup_thread.c"), metadata: true, flags: &[] },
    Program { name: "itimer_longjmp", source: include_str!("host/itimer_longjmp.c"), metadata: true, flags: &[] },
    Program { name: "unshare", source: include_str!("host/unshare.c"), metadata: true, flags: &[] },
    Program { name: "single_again", source: include_str!("host/single_again.c"), metadata: true, flags: &[] },
    Program { name: "fork_pools", source: include_str!("host/fork_pools.c"), metadata: true, flags: &[] },
    Program { name: "sig_default", source: include_str!("host/sig_default.c"), metadata: true, flags: &[] },
    Program { name: "trap_handler", source: include_str!("host/trap_handler.c"), metadata: true, flags: &[] },
    Program { name: "sigtimedwait", source: include_str!("host/sigtimedwait.c"), metadata: true, flags: &[] },
    Program { name: "exec_self", source: include_str!("host/exec_self.c"), metadata: true, flags: &[] },
    Program { name: "trap_default", source: include_str!("host/trap_default.c"), metadata: true, flags: &[] },
    Program { name: "spawn", source: include_str!("host/spawn.c"), metadata: true, flags: &[] },
    Program { name: "environ", source: include_str!("host/environ.c"), metadata: true, flags: &[] },
    Program { name: "process_ops", source: include_str!("host/process_ops.c"), metadata: true, flags: &[] },
    Program { name: "small_stacks", source: include_str!("host/small_stacks.c"), metadata: true, flags: &[] },
    Program { name: "tls_footprint", source: include_str!("host/tls_footprint.c"), metadata: true, flags: &[] },
    Program { name: "big_tls", source: include_str!("host/big_tls.c"), metadata: true, flags: &[] },
    Program { name: "environ_kept", source: include_str!("host/environ_kept.c"), metadata: true, flags: &[] },
    Program {
        name: "huge_tls",
        source: include_str!("host/big_tls.c"),
        metadata: true,
        flags: &["-DTLS_BYTES=1048576"],
    },
    Program { name: "privilege_mark", source: include_str!("host/privilege_mark.c"), metadata: true, flags: &[] },
    Program { name: "altstack", source: include_str!("host/altstack.c"), metadata: true, flags: &[] },
    Program { name: "altstack_depth", source: include_str!("host/altstack_depth.c"), metadata: true, flags: &[] },
    Program { name: "seccomp", source: include_str!("host/seccomp.c"), metadata: true, flags: &[] },
    Program { name: "fds", source: include_str!("host/fds.c"), metadata: true, flags: &[] },
    Program { name: "log_symlink", source: include_str!("host/log_symlink.c"), metadata: true, flags: &[] },
    Program { name: "race_only", source: include_str!("host/race_only.c"), metadata: true, flags: &[] },
    Program { name: "race_only_no_metadata", source: include_str!("host/race_only.c"), metadata: false, flags: &[] },
    Program { name: "nofile", source: include_str!("host/nofile.c"), metadata: true, flags: &[] },
    Program { name: "fork_parent", source: include_str!("host/fork_parent.c"), metadata: true, flags: &[] },
    Program { name: "fork_status", source: include_str!("host/fork_status.c"), metadata: true, flags: &[] },
    Program { name: "own_proc", source: include_str!("host/own_proc.c"), metadata: true, flags: &[] },
    Program { name: "task_listing", source: include_str!("host/task_listing.c"), metadata: true, flags: &[] },
    Program { name: "budgets", source: include_str!("host/budgets.c"), metadata: true, flags: &[] },
    Program { name: "status_kept_open", source: include_str!("host/status_kept_open.c"), metadata: true, flags: &[] },
    Program { name: "foreign_altstack", source: include_str!("host/foreign_altstack.c"), metadata: true, flags: &[] },
    Program { name: "main_waits", source: include_str!("host/main_waits.c"), metadata: true, flags: &[] },
    Program { name: "own_memory", source: include_str!("host/own_memory.c"), metadata: true, flags: &[] },
    Program { name: "fork_storm", source: include_str!("host/fork_storm.c"), metadata: true, flags: &[] },
    Program { name: "prefork", source: include_str!("host/prefork.c"), metadata: true, flags: &[] },
    Program { name: "many_races", source: include_str!("host/many_races.c"), metadata: true, flags: &[] },
    Program { name: "rlimit_as", source: include_str!("host/rlimit_as.c"), metadata: true, flags: &[] },
    Program { name: "dl_cycle", source: include_str!("host/dl_cycle.c"), metadata: true, flags: &[] },
    Program { name: "fatal", source: include_str!("host/fatal.c"), metadata: true, flags: &[] },
    Program { name: "cancel", source: include_str!("host/cancel.c"), metadata: true, flags: &[] },
    Program { name: "longjmp_probe", source: include_str!("host/longjmp_probe.c"), metadata: true, flags: &[] },
    Program { name: "prefork_exit", source: include_str!("host/prefork_exit.c"), metadata: true, flags: &[] },
    Program { name: "huge_stack", source: include_str!("host/huge_stack.c"), metadata: true, flags: &[] },
    Program { name: "lazy_reporter", source: include_str!("host/lazy_reporter.c"), metadata: true, flags: &[] },
    Program { name: "fd_scan", source: include_str!("host/fd_scan.c"), metadata: true, flags: &[] },
    Program { name: "own_malloc", source: include_str!("host/own_malloc.c"), metadata: true, flags: &[] },
    Program { name: "attach", source: include_str!("host/attach.c"), metadata: true, flags: &[] },
    Program {
        name: "exit_while_last_worker_ends",
        source: include_str!("host/exit_while_last_worker_ends.c"),
        metadata: true,
        flags: &[],
    },
    Program { name: "trap_doors", source: include_str!("host/trap_doors.c"), metadata: true, flags: &[] },
    Program { name: "wait_masks", source: include_str!("host/wait_masks.c"), metadata: true, flags: &[] },
    // Strict C11 with X/Open: no _GNU_SOURCE (tests/host/common.c), so `signal` is `__sysv_signal`.
    Program {
        name: "trap_doors_c11",
        source: include_str!("host/trap_doors.c"),
        metadata: true,
        flags: &["-std=c11", "-D_XOPEN_SOURCE=700"],
    },
    Program { name: "trap_disposition", source: include_str!("host/trap_disposition.c"), metadata: true, flags: &[] },
    Program { name: "trap_kept", source: include_str!("host/trap_kept.c"), metadata: true, flags: &[] },
    Program { name: "jump_masks", source: include_str!("host/jump_masks.c"), metadata: true, flags: &[] },
    Program { name: "child_fdsize", source: include_str!("host/child_fdsize.c"), metadata: true, flags: &[] },
    Program { name: "sigqueue_thread", source: include_str!("host/sigqueue_thread.c"), metadata: true, flags: &[] },
    Program { name: "cpu_traps", source: include_str!("host/cpu_traps.c"), metadata: true, flags: &[] },
    Program { name: "fifo_turns", source: include_str!("host/fifo_turns.c"), metadata: true, flags: &[] },
    Program { name: "raw_trap", source: include_str!("host/raw_trap.c"), metadata: true, flags: &[] },
    Program {
        name: "exe_wrappers",
        source: include_str!("host/exe_wrappers.c"),
        metadata: true,
        flags: &["-rdynamic", "-Wno-deprecated-declarations"],
    },
    Program { name: "hidden_masks", source: include_str!("host/hidden_masks.c"), metadata: true, flags: &[] },
    Program { name: "coroutines", source: include_str!("host/coroutines.c"), metadata: true, flags: &[] },
    Program { name: "onstack_big", source: include_str!("host/onstack_big.c"), metadata: true, flags: &[] },
    Program { name: "clone_raw", source: include_str!("host/clone_raw.c"), metadata: true, flags: &[] },
    Program { name: "resources", source: include_str!("host/resources.c"), metadata: true, flags: &[] },
    Program { name: "nofile_full", source: include_str!("host/nofile_full.c"), metadata: true, flags: &[] },
    Program { name: "nofile_1024", source: include_str!("host/nofile_1024.c"), metadata: true, flags: &[] },
    Program { name: "tracer", source: include_str!("host/tracer.c"), metadata: true, flags: &[] },
    Program { name: "traced_syscalls", source: include_str!("host/traced_syscalls.c"), metadata: true, flags: &[] },
    Program { name: "footprint", source: include_str!("host/footprint.c"), metadata: true, flags: &[] },
    Program { name: "pthread_exit_main", source: include_str!("host/pthread_exit_main.c"), metadata: true, flags: &[] },
    Program { name: "thread_frames", source: include_str!("host/thread_frames.c"), metadata: true, flags: &["-ldl"] },
    Program { name: "memory_pressure", source: include_str!("host/memory_pressure.c"), metadata: true, flags: &[] },
    Program { name: "nproc", source: include_str!("host/nproc.c"), metadata: true, flags: &[] },
    Program { name: "children_mask", source: include_str!("host/children_mask.c"), metadata: true, flags: &[] },
    Program { name: "trap_readback", source: include_str!("host/trap_readback.c"), metadata: true, flags: &[] },
    Program { name: "handler_mask", source: include_str!("host/handler_mask.c"), metadata: true, flags: &[] },
    Program { name: "pid1", source: include_str!("host/pid1.c"), metadata: true, flags: &[] },
    Program { name: "seccomp_raw", source: include_str!("host/seccomp_raw.c"), metadata: true, flags: &[] },
    Program {
        name: "seccomp_wrapper",
        source: include_str!("host/seccomp_raw.c"),
        metadata: true,
        flags: &["-DVIA_WRAPPER"],
    },
    Program {
        name: "seccomp_wrapper_O0",
        source: include_str!("host/seccomp_raw.c"),
        metadata: true,
        flags: &["-DVIA_WRAPPER", "-O0"],
    },
    Program { name: "probe_timeouts", source: include_str!("host/probe_timeouts.c"), metadata: true, flags: &[] },
    // `siglongjmp` is `__longjmp_chk`, which checks where the jump goes.
    Program {
        name: "probe_timeouts_fortify",
        source: include_str!("host/probe_timeouts.c"),
        metadata: true,
        flags: &["-D_FORTIFY_SOURCE=2"],
    },
];

/// Builds every program once per test binary (in parallel); `None` (skip) without clang-19.
fn programs() -> Option<&'static [(&'static str, PathBuf)]> {
    static BUILT: OnceLock<Option<Vec<(&'static str, PathBuf)>>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let clang = clang()?;
            let dir = scratch("host-programs");
            let built = parallel_map(PROGRAMS, |p| {
                let source = format!("#line 1 \"common.c\"\n{COMMON_C}\n#line 1 \"{}.c\"\n{}", p.name, p.source);
                let flags: Vec<&str> =
                    ["-pthread", "-Wall", "-Werror"].into_iter().chain(p.flags.iter().copied()).collect();
                let bin = if p.metadata {
                    build_c(&clang, &dir, p.name, &source, &flags)
                } else {
                    let src_path = dir.join(format!("{}.c", p.name));
                    std::fs::write(&src_path, &source).expect("write C source");
                    let out = dir.join(p.name);
                    let mut cmd = Command::new(&clang);
                    cmd.arg("-O2").args(&flags).arg(&src_path).arg("-o").arg(&out);
                    check(cmd.output().expect("run clang"), "clang (no metadata)");
                    out
                };
                (p.name, bin)
            });
            Some(built)
        })
        .as_deref()
}

fn program(name: &str) -> Option<PathBuf> {
    let built = programs()?;
    Some(built.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no program {name}")).1.clone())
}

// ---- The cases ----

/// How the program is started (the same way in every mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Launch {
    /// stdout and stderr read concurrently.
    Plain,
    /// Through `sh -c 'ulimit -n 16 && exec "$@"' sh ...`: soft and hard RLIMIT_NOFILE 16.
    Ulimit16,
    /// stderr is a pipe whose read end was closed before the program started.
    DeadStderr,
    /// stdout is read to EOF before stderr is read at all.
    StdoutFirst,
    /// Through `setpriv` with `CAP_SYS_RESOURCE` dropped from the bounding and inheritable sets: the
    /// program cannot raise a hard limit again (as root in a test, it otherwise could).
    NoSysResource,
    /// Through `setpriv` with `CAP_IPC_LOCK` dropped: `RLIMIT_MEMLOCK` binds (as root it otherwise would not).
    NoIpcLock,
    /// Through `setpriv` with `CAP_SYS_RESOURCE` dropped, then `sh -c 'ulimit -n 8192 && exec "$@"'`:
    /// soft = hard RLIMIT_NOFILE 8192 from the start, no number above it for anyone.
    FullNofile,
}

/// `setpriv` (util-linux) and its arguments for [`Launch::NoSysResource`].
const WITHOUT_CAP_SYS_RESOURCE: &[&str] =
    &["setpriv", "--inh-caps=-sys_resource", "--bounding-set=-sys_resource", "--"];
/// The same for [`Launch::NoIpcLock`].
const WITHOUT_CAP_IPC_LOCK: &[&str] = &["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "--"];

/// Named facts a run leaves behind: file contents, directory listings.
type Artefacts = Vec<(String, Vec<u8>)>;

struct Case {
    name: &'static str,
    program: &'static str,
    /// Program arguments; `{dir}` is the run's scratch directory.
    args: &'static [&'static str],
    /// Extra `-o` options in the racewatch modes; `{dir}` as above.
    options: &'static [&'static str],
    launch: Launch,
    timeout: Duration,
    /// How many times each racewatch mode runs (timing-dependent cases: a behaviour that goes wrong in
    /// one run of five should fail the test, not pass it four times in five). Each run is compared with
    /// the one run without racewatch.
    repeat: usize,
    /// Lines the run without racewatch must print (guards the baseline: the test, not racewatch).
    expect: &'static [&'static str],
    /// How the run without racewatch ends (`exit 0` unless the case is about dying).
    status: &'static str,
    /// Collects the artefacts from the run's directory.
    artefacts: fn(&Path) -> Artefacts,
    /// Extra checks, on every mode (including the run without racewatch).
    check: fn(&Outcome) -> Result<(), String>,
}

/// How a process killed by `SIGTRAP`'s default action ends.
const DIED_OF_SIGTRAP: &str = "signal 5 (SIGTRAP)";
const DIED_OF_SIGABRT: &str = "signal 6 (SIGABRT)";
const DIED_OF_SIGSEGV: &str = "signal 11 (SIGSEGV)";
const DIED_OF_SIGTERM: &str = "signal 15 (SIGTERM)";

fn case(name: &'static str, program: &'static str, args: &'static [&'static str]) -> Case {
    Case {
        name,
        program,
        args,
        options: &[],
        launch: Launch::Plain,
        timeout: TIMEOUT,
        repeat: 1,
        expect: &[],
        status: "exit 0",
        artefacts: |_| Vec::new(),
        check: |_| Ok(()),
    }
}

impl Case {
    fn expect(self, expect: &'static [&'static str]) -> Self {
        Case { expect, ..self }
    }
    fn status(self, status: &'static str) -> Self {
        Case { status, ..self }
    }
    fn options(self, options: &'static [&'static str]) -> Self {
        Case { options, ..self }
    }
    fn launch(self, launch: Launch) -> Self {
        Case { launch, ..self }
    }
    fn timeout(self, timeout: Duration) -> Self {
        Case { timeout, ..self }
    }
    fn repeat(self, repeat: usize) -> Self {
        Case { repeat, ..self }
    }
    fn artefacts(self, artefacts: fn(&Path) -> Artefacts) -> Self {
        Case { artefacts, ..self }
    }
    fn check(self, check: fn(&Outcome) -> Result<(), String>) -> Self {
        Case { check, ..self }
    }
}

/// Any warning of racewatch's names the program's raw `SIGTRAP` handler installation (the stdout
/// comparison shows that racewatch stepped aside: none of its signals reached that handler).
fn names_the_raw_trap_handler(outcome: &Outcome) -> Result<(), String> {
    no_line(outcome, "another warning", |line| {
        line.starts_with("racewatch: warning") && !line.contains("installs a SIGTRAP handler with its own system call")
    })
}

/// racewatch printed no warning (it had nothing to give up: the program's sandbox covers every thread
/// before a second one exists).
fn no_warning(outcome: &Outcome) -> Result<(), String> {
    no_line(outcome, "a warning", |line| line.starts_with("racewatch: warning"))
}

/// racewatch did not step aside for the process (a thread's own seccomp sandbox leaves the rest sampled).
fn detection_stays_on(outcome: &Outcome) -> Result<(), String> {
    no_line(outcome, "racewatch stepped aside", |line| line.contains("race detection is off"))
}

/// No warning that the reporter thread was given up for a thread limit the program did not reach.
fn reporter_kept(outcome: &Outcome) -> Result<(), String> {
    no_line(outcome, "the reporter was given up", |line| line.contains("limit of threads"))
}

/// No line of stderr is `unwanted`; the first one is named after `what`.
fn no_line(outcome: &Outcome, what: &str, unwanted: impl Fn(&str) -> bool) -> Result<(), String> {
    match outcome.stderr.lines().find(|line| unwanted(line)) {
        Some(line) => Err(format!("{what}: {line}")),
        None => Ok(()),
    }
}

/// A report printed under a memory budget the program set (`mlockall` under a memlock limit) read no module
/// file for its symbols (one warning says so): that memory would have been the program's (a report waited
/// for it, and held the program's exit up to 1.2 s).
fn reports_read_no_module_file(outcome: &Outcome) -> Result<(), String> {
    let reported = outcome.stderr.contains("WARNING: racewatch: data race");
    if reported && !outcome.stderr.contains("module files are not read") {
        return Err("a report under the memlock budget, without the warning that no module file is read".into());
    }
    Ok(())
}

/// The data file the descriptor programs write, as an artefact.
fn data_file(dir: &Path) -> Artefacts {
    vec![("data file".into(), read_or_error(&dir.join("data")))]
}

/// The symlink target's content and whether the dangling link's target came to exist.
fn symlink_targets(dir: &Path) -> Artefacts {
    let absent = dir.join("absent");
    let exists = std::fs::symlink_metadata(&absent).is_ok();
    vec![
        ("target".into(), read_or_error(&dir.join("target"))),
        ("absent exists".into(), exists.to_string().into_bytes()),
        ("absent content".into(), if exists { read_or_error(&absent) } else { Vec::new() }),
    ]
}

/// The names in the run's directory, one per line.
fn listing(dir: &Path) -> Artefacts {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read run dir")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    vec![("directory listing".into(), names.join("\n").into_bytes())]
}

/// The file's bytes, or the error (without the directory, which differs between runs).
fn read_or_error(path: &Path) -> Vec<u8> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    std::fs::read(path).unwrap_or_else(|e| format!("<cannot read {name}: {:?}>", e.kind()).into_bytes())
}

/// The bytes `rw_pattern` (tests/host/common.c) gives.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 131 + i / 251 + 7) & 0xff) as u8).collect()
}

/// The data file holds exactly the known pattern (no foreign bytes, no racewatch text).
fn data_is_the_pattern(outcome: &Outcome) -> Result<(), String> {
    let data = outcome.artefacts.iter().find(|(name, _)| name == "data file").map(|(_, b)| b.as_slice());
    let data = data.ok_or("no data file artefact")?;
    if let Some(at) = find(data, b"racewatch") {
        let text = String::from_utf8_lossy(&data[at..(at + 300).min(data.len())]).into_owned();
        return Err(format!("the data file contains racewatch text at offset {at}:\n{}", tail(&text, 6)));
    }
    let expected = pattern(DATA_LEN);
    if data != expected.as_slice() {
        return Err(format!("the data file is not the pattern: {}", bytes_diff(&expected, data)));
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What a program whose SIGTRAP handler came through another door prints (tests/host/trap_doors.c).
const DOOR_HANDLER_RAN_3: &[&str] = &["previous handler is SIG_DFL: 1", "SIGTRAP handler is ours: 1", "handler ran: 3"];

/// All the cases, in DESIGN.md's order of concerns.
fn cases() -> Vec<Case> {
    vec![
        // 1. SIGTERM blocked and collected with sigwait, single-threaded then racing / racing then collected.
        case("sigwait_sigterm_single_threaded", "sigwait", &["before"]).expect(&["sigwait: ok, signal 15"]),
        case("sigwait_sigterm_after_threads", "sigwait", &["after"]).expect(&["sigwait: ok, signal 15"]),
        // 2. SIGCHLD through a signalfd, five children in turn.
        case("signalfd_sigchld", "signalfd", &[]).expect(&["child 4: exit 14", "SIGCHLD read: 5"]),
        case("signalfd_sigtrap_blocked_everywhere", "signalfd", &["trap"])
            .repeat(10)
            .expect(&["read: SIGTRAP 1, SIGUSR1 1, other 0; still pending: 0"]),
        case("signalfd_sigtrap_raised_while_blocked_reads_only_the_programs", "signalfd", &["raise"])
            .repeat(5)
            .expect(&["read: SIGTRAP 20, SIGRTMIN 20, SIGCHLD 20, out of turn 0, missing 0"]),
        case("signalfd_sigtrap_from_a_child_names_the_child", "signalfd", &["child-trap"])
            .repeat(5)
            .expect(&["read: signal 5, code 0, sent by the child: 1"]),
        // 3. A dedicated sigwait thread for SIGHUP.
        case("sigwait_thread_sighup", "sighup_thread", &[]).expect(&["SIGHUP count: 3"]),
        // 4. setitimer + a SIGALRM handler that siglongjmps out of racy code, 20 times.
        case("itimer_siglongjmp", "itimer_longjmp", &[]).expect(&["jumps: 20"]),
        // 5. unshare(CLONE_NEWUSER) while single-threaded.
        case("unshare_newuser_single_threaded", "unshare", &[]).expect(&["done"]),
        // 5b. Single-threaded again after every thread was joined: no thread of racewatch's is left in
        // the process (the kernel's check, /proc/self/task), and the next threads start it again.
        case("single_threaded_again_after_join", "single_again", &[]).repeat(3).expect(&[
            "round 1: tasks after join 1",
            "round 3: tasks after join 1",
            "unshare(CLONE_NEWUSER) after the threads: ok",
        ]),
        // 5d. The same after a thread churn (200 rounds of two short workers joined by main): racewatch
        // keeps its reporter through the rounds, the listings still show one thread, and unshare, also
        // made through glibc's syscall(), finds the process single-threaded.
        case("single_threaded_again_after_a_thread_churn", "single_again", &["churn"]).repeat(3).expect(&[
            "after the churn: tasks 1, Threads: 1",
            "round 3: tasks after join 1",
            "unshare(CLONE_NEWUSER) after the threads: ok",
        ]),
        case("single_threaded_again_after_a_thread_churn_raw_unshare", "single_again", &["churn-raw"])
            .repeat(3)
            .expect(&["after the churn: tasks 1, Threads: 1", "unshare(CLONE_NEWUSER) after the threads: ok"]),
        // 5c. Children forked while the parent's threads (and their samples) run start thread pools.
        case("forked_children_start_thread_pools", "fork_pools", &[])
            .repeat(3)
            .expect(&["worker children that exited 0: 60 of 60"]),
        // 6. Every signal reset to SIG_DFL, then racing.
        case("all_signals_default", "sig_default", &[]).expect(&["survived"]),
        // 7. The program's own SIGTRAP handler.
        case("own_sigtrap_handler_after_threads", "trap_handler", &["after"]).expect(&[
            "handler ran: 3",
            "SIGTRAPs with another si_code: 0",
            "sigaction returns our handler: 1",
        ]),
        case("own_sigtrap_to_the_process_reaches_the_thread_letting_it_through", "trap_handler", &["routed"])
            .repeat(3)
            .expect(&[
                "worker 0: kill 100, sigqueue 100 (payload right 100)",
                "worker 1: kill 100, sigqueue 100 (payload right 100)",
                "worker 2: kill 100, sigqueue 100 (payload right 100)",
                "taken by another thread: 0",
            ]),
        case("own_sigtrap_handler_before_threads", "trap_handler", &["before"]).expect(&[
            "handler ran: 3",
            "SIGTRAPs with another si_code: 0",
            "sigaction returns our handler: 1",
        ]),
        case("own_sigtrap_handler_with_signal", "trap_handler", &["signal"])
            .expect(&["handler ran: 3", "sigaction returns our handler: 1"]),
        // 7b. SIGTRAPs the program raises with the default disposition (dies of SIGTRAP), an SA_RESETHAND
        // handler, or SIGTRAP blocked (pending, taken by sigwaitinfo).
        case("own_sigtrap_default_raise", "trap_default", &["raise"]).expect(&["raising"]).status(DIED_OF_SIGTRAP),
        case("own_sigtrap_default_int3", "trap_default", &["int3"]).expect(&["raising"]).status(DIED_OF_SIGTRAP),
        // An int3 is forced on the thread by the kernel: ignored or blocked, it still ends the process
        // (set 35 p34: the program went on after it, exit 33 and 34).
        case("own_sigtrap_ignored_int3", "trap_default", &["int3-ignored"]).expect(&["raising"]).status(DIED_OF_SIGTRAP),
        case("own_sigtrap_blocked_int3", "trap_default", &["int3-blocked"]).expect(&["raising"]).status(DIED_OF_SIGTRAP),
        case("own_sigtrap_blocked_handler_int3", "trap_default", &["int3-blocked-handler"])
            .expect(&["raising"])
            .status(DIED_OF_SIGTRAP),
        case("own_sigtrap_resethand", "trap_default", &["resethand"])
            .expect(&["handled: 1, reset to default: 1", "raising"])
            .status(DIED_OF_SIGTRAP),
        // Repeated: a sample of racewatch's pending in the handler once stood in the program's place.
        case("own_sigtrap_blocked_pending", "trap_default", &["blocked"]).repeat(5).expect(&[
            "pending: 1",
            "sigwaitinfo: 5, si_code: 0",
            "still blocked: 1",
        ]),
        // 8. Threads blocking everything and polling with sigtimedwait.
        case("sigtimedwait_everything_blocked", "sigtimedwait", &[]).expect(&["signals dequeued: 0"]),
        // 9. SIGTRAP blocked, execve of itself while racing.
        case("exec_self_with_sigtrap_blocked", "exec_self", &[]).expect(&["exec", "child ok"]),
        // 9c. setuid/setgid (glibc signals every thread), vfork + exec, exec from a thread other than main.
        case("setxid_broadcast_reaches_every_thread", "process_ops", &["setxid"]).expect(&["setuid: 0, setgid: 0"]),
        // 9c'. The same while the threads race on and racewatch's reporter prints (a thread of its own that
        // glibc's broadcast waits for too), and while a sampling signal may start it.
        case("setxid_while_the_reporter_runs", "process_ops", &["setxid-reporting"])
            .expect(&["identity calls failed: 0"]),
        case("vfork_and_exec", "process_ops", &["vfork"])
            .expect(&["vfork children failed: 0", "a batch of 1000 more grew the resident memory by under 512 KiB: 1"]),
        case("exec_from_a_thread", "process_ops", &["exec-thread"]).expect(&["exec from a thread"]),
        // 9d. The environment is the program's, and its children's are theirs (racewatch's variables are
        // read before main and taken out; every child gets them back, and hides them in turn).
        case("environment_without_racewatch_variables", "environ", &[]).expect(&[
            "system: exit 0",
            "posix_spawn: exit 0",
            "execv: exit 0",
            "pclose: exit 0",
            "racer done",
            "racer: exit 0",
        ]),
        case("concurrent_system_and_popen_from_threads", "environ", &["concurrent"]).repeat(5).expect(&[
            "thread 0: 12 of 12 commands right",
            "thread 1: 12 of 12 commands right",
            "thread 2: 12 of 12 commands right",
        ]),
        // 9b. Child processes through system(), posix_spawn() and popen().
        case("children_through_system_spawn_popen", "spawn", &[]).expect(&[
            "from system",
            "from posix_spawn",
            "popen read: from popen",
        ]),
        // 9d. A library loaded and unloaded 200 times while threads race.
        case("dlopen_dlclose_while_racing", "dl_cycle", &[]).expect(&["dlopen/dlclose cycles: 200, failures: 0"]),
        // 9e. Dying of a signal with `stats=1` (its handler stands where the program sees SIG_DFL).
        case("stats_at_abort", "fatal", &["abort"])
            .options(&["stats=1"])
            .expect(&["dying by abort"])
            .status(DIED_OF_SIGABRT),
        case("stats_at_segv", "fatal", &["segv"])
            .options(&["stats=1"])
            .expect(&["dying by segv"])
            .status(DIED_OF_SIGSEGV),
        case("stats_at_sigterm", "fatal", &["term"])
            .options(&["stats=1"])
            .expect(&["dying by term"])
            .status(DIED_OF_SIGTERM),
        case("stats_handlers_read_as_default", "fatal", &["query"]).options(&["stats=1"]).expect(&[
            "defaults: 8 of 8, previous SIGINT default: 1, signal() returned default: 1",
            "handled: 2, SIGINT handler is ours: 1",
        ]),
        // 10. PTHREAD_STACK_MIN threads recursing to ~3 KiB from the end of their stacks; then threads get the
        // stack sizes they ask for (none of racewatch's kept by glibc).
        // racewatch's thread-local variables are not in glibc's static TLS block (carved from every thread's
        // stack) and take no slot of a thread's TLS vector (the program's malloc).
        case("thread_stacks_and_tls_vectors_as_without_racewatch", "tls_footprint", &[]).repeat(2).expect(&["done"]),
        // A 240 KiB `__thread` array, which glibc carves from every thread stack it maps: racewatch's
        // reporter thread asks for that room on top of its own (before: it overflowed, SIGSEGV).
        // The environment array `system()` runs with stays intact for a thread that read `environ`
        // meanwhile (before: freed as the call ended).
        case("environment_read_during_system_stays_intact", "environ_kept", &[])
            .expect(&["entries of the array read during system(): changed 0"]),
        case("a_large_static_tls_block_leaves_the_reporter_its_stack", "big_tls", &[])
            .repeat(3)
            .expect(&["threads that wrote their own array: 2; main's first byte: 7"]),
        // Opening racewatch's perf events (as root: a capability check that succeeds) does not mark the
        // program's thread as having used a superuser privilege (set 22 p11).
        case("no_privilege_mark_on_the_program_threads", "privilege_mark", &[]).expect(&["a worker's mark: 0"]),
        // A backtrace taken in `main` or in a thread (its start routine, a cleanup handler of
        // `pthread_exit` or of cancellation, an `atexit` handler run by `exit`) has the frames it has
        // without racewatch (set 34: in a thread it ended at racewatch's return trampoline, 2 frames
        // instead of 3; `main` had racewatch's `wrapped_main` and `__libc_start_main` below it, `exit`
        // one more).
        case("thread_backtraces_have_their_frames", "thread_frames", &["backtrace"]).repeat(2).expect(&[
            "main: 5 frames: thread_frames libc.so.6 libc.so.6 thread_frames",
            "returning thread: 4 frames: thread_frames libc.so.6 libc.so.6",
            "done",
            "atexit handler: 7 frames: libc.so.6 libc.so.6 thread_frames libc.so.6 libc.so.6 thread_frames",
        ]),
        // The program's keys are numbered from 0 and it can make as many as without racewatch (whose
        // key, the one that sees threads end, goes to the program when it would come next).
        case("thread_keys_numbered_and_counted_as_without_racewatch", "thread_frames", &["keys"]).expect(&[
            "keys created: 1024, the first: 0, the last: 1023",
            "a key made after deleting them: 0",
            "destructors run: 4",
        ]),
        case("min_stacks_deep_recursion", "small_stacks", &[]).expect(&[
            "first thread asked for PTHREAD_STACK_MIN: got 0 bytes more",
            "threads that recursed to about 3072 bytes from the end of their stack: 2",
            "asked for 128 KiB (guard 64 KiB): got 128 KiB",
        ]),
        // 11. SIGUSR1 handler on an 8 KiB alternate stack doing racy work.
        case("sigaltstack_sigusr1_handler", "altstack", &[]).expect(&[
            "sent at least 200: 1",
            "worker 0 handler ran: ok",
            "worker 1 handler ran: ok",
        ]),
        // 11b. racewatch's samples land at the top of the program's alternate stack, and a wrapped handler's
        // decision runs on racewatch's stacks: the program's alternate stack is written as deep as without
        // racewatch (set 21 p05: 1,928 bytes of 8 KiB instead of 1,344).
        case("alternate_stack_written_as_deep_as_without_racewatch", "altstack_depth", &[])
            .repeat(3)
            .expect(&["handled: 800"]),
        // 12. seccomp.
        // A worker's own sandbox (no TSYNC): racewatch leaves that thread alone and samples the others.
        case("seccomp_strict_prctl", "seccomp", &["strict-prctl"])
            .expect(&["read 1 byte(s): S", "done"])
            .check(detection_stays_on),
        case("seccomp_strict_syscall", "seccomp", &["strict-syscall"])
            .expect(&["read 1 byte(s): S", "done"])
            .check(detection_stays_on),
        case("seccomp_filter_one_thread", "seccomp", &["filter"])
            .expect(&["read 1 byte(s): S", "done"])
            .check(detection_stays_on),
        // Inside it: signals, threads, a fork whose child makes a thread, a return through glibc.
        case("seccomp_filter_threads", "seccomp", &["filter-threads"])
            .repeat(3)
            .expect(&[
                "filter: ok, second layer ok, threads created 2 joined 2, child exit 7",
                "SIGUSR1s taken in the sandbox: 20",
                "done",
            ])
            .check(detection_stays_on),
        case("seccomp_filter_of_the_only_thread", "seccomp", &["filter-main-errno"])
            .expect(&["filter: ok", "perf_event_open: -1 EPERM", "done"])
            .check(no_warning),
        case("seccomp_filter_exit_inside", "seccomp", &["filter-exit"])
            .repeat(3)
            .expect(&["filter: ok"])
            .status("exit 3")
            .check(detection_stays_on),
        // The CPU traps what racewatch's handler does: the time-stamp counter (the vDSO's clocks read it)
        // and system calls from outside the region Syscall User Dispatch allows.
        case("rdtsc_faults_emulated_by_the_program", "cpu_traps", &["tsc"])
            .repeat(3)
            .expect(&["tsc faults: on", "rdtsc emulated: 200"])
            .check(detection_stays_on),
        case("syscall_user_dispatch_in_racing_threads", "cpu_traps", &["sud"])
            .repeat(3)
            .expect(&["dispatch on in 4 threads; emulated 800; foreign 0"])
            .check(detection_stays_on),
        case("seccomp_filter_tsync_all_threads", "seccomp", &["tsync"]).expect(&["tsync filter: ok", "done"]),
        // Deny-lists of calls racewatch never makes (set 26 p27: racewatch stepped aside with a line for a
        // TSYNC one; so did every libseccomp load, at its probes): nothing to step aside for; every thread
        // is sampled on under the TSYNC one, which also goes on every thread when a race was reported
        // (the reporter thread must not carry the first worker's own filter: TSYNC failed on it).
        // A deny-list of 121 calls racewatch says it never makes, killing the process on each, on every
        // thread while racewatch reports, starts and ends its thread, and starts again in a forked child.
        case("seccomp_deny_list_of_calls_racewatch_never_makes", "seccomp", &["deny-never"])
            .repeat(2)
            .expect(&["tsync deny-list of 121 calls: ok", "child: exit 0", "done"])
            .check(detection_stays_on),
        // A sandbox library's deny-list that looks at arguments (QEMU's -sandbox on: clone only for threads,
        // clone3 refused with ENOSYS; flatpak's: no TIOCSTI) on every thread: racewatch's own calls pass
        // (its perf ioctls, its threads' clone), so detection stays on and threads started under it race.
        case("seccomp_deny_list_on_arguments_leaves_detection_on", "seccomp", &["deny-args"])
            .repeat(2)
            .expect(&[
                "tsync filter on clone, clone3 and ioctl: ok",
                "TIOCSTI: EPERM",
                "threads started under the filter: 2",
                "done",
            ])
            .check(detection_stays_on),
        case("seccomp_deny_lists_leave_detection_on", "seccomp", &["deny-list"])
            .repeat(4)
            .expect(&[
                "own deny-list: ok, getpriority in it: ENOTTY",
                "probes refused: 2; tsync deny-list: ok, getpriority: ENOTTY, socket: EAFNOSUPPORT",
                "getppid and pipe2 denied: 1",
                "done",
            ])
            .check(detection_stays_on),
        // A filter the program inherited (its launcher's) that forbids a call of racewatch's: the program
        // runs as without racewatch (a probe child finds the call first; racewatch steps aside).
        case("seccomp_inherited_kill_process", "seccomp", &["inherit-kill"]).repeat(2).expect(&["filter: ok", "done"]),
        case("seccomp_inherited_kill_thread", "seccomp", &["inherit-thread"]).expect(&["filter: ok", "done"]),
        case("seccomp_inherited_trap", "seccomp", &["inherit-trap"]).expect(&["filter: ok", "done"]),
        case("seccomp_inherited_errno", "seccomp", &["inherit-errno"]).expect(&["filter: ok", "done"]),
        // A launcher's filter that traps the start of a process but not of a thread: racewatch's probe
        // child is such a start (before: the program died of SIGSYS before `main`); its trap is caught,
        // and racewatch goes on.
        case("seccomp_inherited_threads_only", "seccomp", &["inherit-threads-only"])
            .expect(&["filter: ok", "done"]),
        // 13. Descriptors closed or reused under the runtime.
        case("fds_close_loop", "fds", &["close", "{dir}/data"])
            .expect(&["pipe: 65536 bytes, 0 mismatches, checksum ac34ccc3", "data file written"])
            .artefacts(data_file)
            .check(data_is_the_pattern),
        case("fds_close_range", "fds", &["close_range", "{dir}/data"])
            .expect(&["pipe: 65536 bytes, 0 mismatches, checksum ac34ccc3", "data file written"])
            .artefacts(data_file)
            .check(data_is_the_pattern),
        case("fds_dup2_over_all", "fds", &["dup2", "{dir}/data"])
            .expect(&["dup2 failures: 0", "pipe: 65536 bytes, 0 mismatches, checksum ac34ccc3", "data file written"])
            .artefacts(data_file)
            .check(data_is_the_pattern),
        // A server's scans, closes, dups and high `dup2`s: counts as without racewatch.
        // The children it starts (fork + exec, posix_spawn, system, popen) read their own FDSize as without
        // racewatch: the table the kernel grew for racewatch's descriptors is inherited (set 39's forked
        // grep: 32768 for 64).
        case("children_read_their_fd_table_size_as_the_programs", "child_fdsize", &[]).repeat(2).expect(&["done"]),
        case("fds_scanned_closed_and_parked_high", "fd_scan", &[]).expect(&[
            "F_DUPFD high: 40 in order, one more: EMFILE",
            "close_range: 0",
            "dup: 0",
            "parked: 48, written: 48, read: 48",
            "done",
        ]),
        // 14. log_path.
        // stats=1: racewatch has something to write at exit too, when the data file is still open.
        case("log_path_daemon_close_range", "fds", &["close_range", "{dir}/data"])
            .options(&["log_path={dir}/rw", "stats=1"])
            .expect(&["pipe: 65536 bytes, 0 mismatches, checksum ac34ccc3", "data file written"])
            .artefacts(data_file)
            .check(data_is_the_pattern),
        case("log_path_symlink_to_target", "log_symlink", &["{dir}", "target"])
            .options(&["log_path={dir}/rw", "stats=1"])
            .expect(&["symlink: ok", "done"])
            .artefacts(symlink_targets),
        case("log_path_symlink_dangling", "log_symlink", &["{dir}", "dangling"])
            .options(&["log_path={dir}/rw", "stats=1"])
            .expect(&["symlink: ok", "done"])
            .artefacts(symlink_targets),
        case("log_path_without_metadata_creates_nothing", "race_only_no_metadata", &[])
            .options(&["log_path={dir}/rw"])
            .expect(&["done"])
            .artefacts(listing),
        // 15. RLIMIT_NOFILE 16.
        case("nofile_16_before_threads", "nofile", &["before"]).expect(&["setrlimit: ok", "done"]),
        case("nofile_16_after_threads", "nofile", &["after"]).expect(&["setrlimit: ok", "done"]),
        case("nofile_16_from_shell_ulimit", "nofile", &["inherit"])
            .launch(Launch::Ulimit16)
            .expect(&["RLIMIT_NOFILE 16/16", "done"]),
        // 16. fork, parent side: children exit(0) while the parent races.
        case("fork_children_exit", "fork_parent", &[]).expect(&["children that exited 0: 20", "done"]),
        // 16b. A child forked while the parent races sees SIGTRAP as the program set it: no handler in
        // its SigCgt, and a raise with the default disposition kills it.
        case("forked_child_signal_state_is_the_programs", "fork_status", &[])
            .repeat(3)
            .expect(&["child: signal 5", "done"]),
        // 16c. A server printing its own signal state, thread count and descriptors from /proc while its
        // threads run (status, stat, the task and fd listings; the process, the main thread by id, the
        // calling thread), with SIGTRAP left alone and blocked.
        case("own_proc_files_show_the_programs_state", "own_proc", &[]).repeat(2).expect(&[
            "status VmSize is statm's size: 1",
            "process Threads:\t3",
            "stat threads: 3",
            "task entries: 3",
            "openat Threads:\t3",
            "dotdot Threads:\t3",
            "fdopendir task entries: 3",
            "relative Threads:\t3",
            "done",
        ]),
        // The reporter thread starting again with each round's first thread is never listed, with readdir
        // or scandir; nor are racewatch's descriptors, read raw too (getdents64).
        case("task_listing_right_after_thread_start", "task_listing", &["100"]).repeat(3).expect(&[
            "rounds with a count other than 4: 0",
            "descriptors listed with readdir and scandir agree: 1",
            "descriptors read raw agree: 1 1",
            "threads read raw agree: 1",
            "threads by the directory's link count agree: 1",
        ]),
        case("own_proc_files_show_a_blocked_sigtrap", "own_proc", &["blocked"]).repeat(2).expect(&[
            "process SigBlk:\t0000000000000210",
            "calling thread SigBlk:\t0000000000000210",
            "done",
        ]),
        // A forked child reading its parent's status, stat and task listing (a supervisor's helper): the
        // parent program's signal sets and threads, not racewatch's handler, mask or reporter thread.
        case("forked_child_reads_the_parents_state_as_the_programs", "own_proc", &["parent"]).repeat(2).expect(&[
            "parent SigBlk:\t0000000000000210",
            "parent Threads:\t3",
            "parent stat threads: 3",
            "parent task entries: 3",
            "parent task entries read raw: 3",
            "child: exit 0",
        ]),
        // The same read by new images: a shell that system() runs (its grep and ls, the program's
        // grandchildren) and one forked and exec'd, told of the program's view in their environment.
        case("new_images_read_the_starters_state_as_the_programs", "own_proc", &["new-images"]).repeat(2).expect(&[
            "system: Threads:\t3",
            "system: SigBlk:\t0000000000010210",
            "system: SigIgn:\t0000000080000007",
            "system: SigCgt:\t0000000100000800",
            "system: task entries 3",
            "system: exit 0",
            "exec: Threads:\t3",
            "exec: SigBlk:\t0000000000000210",
            "exec: SigIgn:\t0000000080000001",
            "exec: SigCgt:\t0000000100000800",
            "exec: stat threads 3",
            "exec: racewatch view in env 0",
            "exec: exit 0",
        ]),
        // 16d. The main thread's alternate stack, the program's own, unmapped by another thread while the
        // main thread runs on (Rust's process::exit from a worker).
        case("main_alt_stack_unmapped_by_the_exiting_thread", "foreign_altstack", &[])
            .repeat(3)
            .status("exit 7")
            .expect(&["sigaltstack: 0", "unmap: 0", "exiting 7"]),
        // 16e. A main thread waiting in pause() for its handler while workers are busy gets the process's
        // signals (alarm, sigqueue with its payload, a child's end); handlers read back as installed.
        case("main_waits_for_signals_beside_busy_workers", "main_waits", &[]).repeat(3).expect(&[
            "alarm: 15 rounds, handled outside main at most once: 1",
            "sigqueue: 15 rounds, handled outside main at most once: 1, payload and sender intact: 15",
            "child: 15 rounds, handled outside main at most once: 1",
            "SA_SIGINFO handler reads back: 1, flags: 1",
            "replaced handler reads back: 1",
            "one-argument handler reads back: 1, SA_SIGINFO: 0",
            "signal() returns the previous handler: 1",
            "one-shot handler ran: 1, default back: 1, flags kept: 1",
        ]),
        // The same with handlers that read the siginfo (a child's end and status, a kill's sender and
        // code) or are one-shot: the main thread gets them, with the first delivery's siginfo.
        case("main_waits_for_signals_read_through_siginfo", "main_waits", &["siginfo"]).repeat(3).expect(&[
            "child, siginfo: 15 rounds, handled outside main at most once: 1, sender and code intact: 15",
            "kill, siginfo: 15 rounds, handled outside main at most once: 1, sender and code intact: 15",
            "one-shot alarm: 15 rounds, handled outside main at most once: 1, default action back: 15",
        ]),
        // A main thread that computes gets the process's alarms, also while racewatch's handler runs in it
        // (every signal blocked there: the worker the kernel gave one to hands it over).
        case("computing_main_gets_the_alarms", "main_waits", &["computing"])
            .repeat(3)
            .expect(&["alarms to a computing main: 150, handled outside main at most 6: 1"]),
        // 16f. racewatch's memory is its own: a report leaves the program's malloc statistics alone, and
        // with address randomisation off the program's mappings land where they would without it.
        case("malloc_statistics_unchanged_by_reports", "own_memory", &[]).expect(&[
            "malloc arena bytes changed: 0",
            "malloc bytes in use changed: 0",
            "malloc mmapped bytes changed: 0",
        ]),
        // Nothing of racewatch's goes through the program's malloc before main: main's first malloc makes
        // the thread's malloc cache, as without racewatch (its `dlopen(RTLD_NOLOAD)` of libc made it).
        case("first_malloc_in_main_makes_the_malloc_cache", "own_memory", &["first_malloc"])
            .expect(&["malloc bytes in use before main's first malloc: 0", "done"]),
        // The module files a report's symbolization read are let go of with the reporter thread when the
        // program is back to one thread (3 shared mappings left before).
        case("module_files_read_for_reports_are_unmapped_with_the_threads", "own_memory", &["files"])
            .expect(&["shared mappings of files after the threads ended: 0"]),
        // The program's new mapping lands where it would without racewatch: not in the gap the kernel's
        // 2 MiB alignment of racewatch's module left, merged with an anonymous mapping there (set 37 p49).
        case("new_mapping_adds_its_own_maps_line", "own_memory", &["new_mapping"])
            .repeat(3)
            .expect(&["lines a new mapping adds: 1"]),
        case("mappings_without_randomisation_land_alike", "own_memory", &["layout"])
            .repeat(2)
            .expect(&["children failed: 0", "distinct addresses of the mapping after pthread_create: 1"]),
        // 17. 200 forks while reporting.
        case("fork_storm_while_reporting", "fork_storm", &[]).expect(&["children that exited 0: 200", "no hang"]),
        // 18. A pre-fork server.
        case("prefork_workers", "prefork", &[]).expect(&["worker 0: exit 0", "worker 1: exit 0"]),
        // 19. stderr a pipe nobody reads.
        case("stderr_pipe_without_reader", "many_races", &[]).launch(Launch::DeadStderr).expect(&[
            "racy functions: 200",
            "SIGPIPE default: 1",
            "done",
        ]),
        // 20. A parent reading stdout to EOF before stderr; the run ends within 10 s of the program's 1 s.
        case("stdout_read_before_stderr", "many_races", &["stderr"])
            .launch(Launch::StdoutFirst)
            .timeout(Duration::from_secs(12))
            .expect(&["racy functions: 200", "done"]),
        // 21. RLIMIT_AS of about 40 MiB.
        case("rlimit_as_40_mib", "rlimit_as", &[]).expect(&["setrlimit(RLIMIT_AS): ok", "threads started", "done"]),
        // Under RLIMIT_AS, threads on stacks glibc mapped get no alternate stack of racewatch's: a program
        // starts exactly as many threads as without it (a 32 KiB one each left 337 of 376).
        case("rlimit_as_thread_capacity", "rlimit_as", &["capacity"])
            .expect(&["setrlimit(RLIMIT_AS): ok", "done"])
            .check(|outcome| {
                match outcome.stdout.contains("started: ") && outcome.stdout.contains("(over 300: yes)") {
                    true => Ok(()),
                    false => Err("fewer than 300 threads started".into()),
                }
            }),
        // 22. Thread cancellation of racing threads: deferred (cancellation points, a handler of ours may be
        // in one), asynchronous (anywhere, a handler of ours included).
        case("cancel_deferred_while_racing", "cancel", &["deferred"])
            .repeat(5)
            .expect(&["joined: 320, cancelled: 320"]),
        case("cancel_async_while_racing", "cancel", &["async"]).repeat(5).expect(&["joined: 320, cancelled: 320"]),
        // A cancel still pending when the worker returns (it reached no cancellation point): racewatch's
        // waits as the last thread but one ends (the reporter rests) must not act on it.
        // Signals sent to one thread (pthread_kill, pthread_sigqueue) run there.
        case("pthread_sigqueue_to_a_worker_runs_there", "sigqueue_thread", &[])
            .expect(&["handled 300, on another thread 0, wrong payload 0, lost 0"]),
        // A thread cancelled in one of the waits racewatch interposes.
        case("cancel_in_every_interposed_wait", "cancel", &["waits"]).repeat(2).expect(&[
            "sigtimedwait: cancelled 1, cleanup ran 1",
            "sigwaitinfo: cancelled 1, cleanup ran 1",
            "sigwait: cancelled 1, cleanup ran 1",
            "sigsuspend: cancelled 1, cleanup ran 1",
            "ppoll: cancelled 1, cleanup ran 1",
            "pselect: cancelled 1, cleanup ran 1",
            "epoll_pwait: cancelled 1, cleanup ran 1",
            "pthread_join: cancelled 1, cleanup ran 1",
            "open: cancelled 1, cleanup ran 1",
        ]),
        case("cancel_pending_at_thread_return", "cancel", &["pending"])
            .repeat(5)
            .expect(&["returned: 20, cancelled: 0"]),
        // 23. siglongjmp out of the program's handlers (SA_ONSTACK, some without restoring the mask): SIGSEGV
        // memory probes in 3 threads; a 2 ms SIGALRM timeout in main while 2 threads probe. A SIGTRAP raised
        // afterwards still runs the program's handler at once.
        case("siglongjmp_sigsegv_probes", "longjmp_probe", &["segv"]).repeat(5).expect(&[
            "thread 0: probes 3200, faults 1600, SIGTRAP handled at once 8 of 8, blocks SIGSEGV or SIGTRAP 0",
            "thread 1: probes 3200, faults 1600, SIGTRAP handled at once 8 of 8, blocks SIGSEGV or SIGTRAP 0",
            "thread 2: probes 3200, faults 1600, SIGTRAP handled at once 8 of 8, blocks SIGSEGV or SIGTRAP 0",
        ]),
        case("siglongjmp_sigalrm_timeouts_and_probes", "longjmp_probe", &["alarm"]).repeat(5).expect(&[
            "jumps: 200",
            "main: probes 800, faults 400, SIGTRAP handled at once 2 of 2, blocks SIGSEGV or SIGTRAP 0",
            "thread 0: probes 3200, faults 1600, SIGTRAP handled at once 8 of 8, blocks SIGSEGV or SIGTRAP 0",
            "thread 1: probes 3200, faults 1600, SIGTRAP handled at once 8 of 8, blocks SIGSEGV or SIGTRAP 0",
        ]),
        // 24. Pre-forked children exit() while their threads race (some while the first report is written).
        case("prefork_children_exit_while_racing", "prefork_exit", &[])
            .repeat(5)
            .timeout(Duration::from_secs(60))
            .expect(&["batch 0 child 0: exit 10", "batch 2 child 3: exit 13"]),
        // main's exit() and its last worker's end wait for the reporter at once (set 11's rayon-core
        // `stack_overflow_crash`: one joiner freed it, the other wrote to its unmapped descriptor).
        case("exit_while_last_worker_ends", "exit_while_last_worker_ends", &[])
            .repeat(2)
            .timeout(Duration::from_secs(60))
            .expect(&["children that exited 0: 40 of 40"]),
        // ...and a handler that calls exit() in the worker while it waits for the reporter as it ends.
        case("exit_from_handler_while_last_worker_ends", "exit_while_last_worker_ends", &["handler"])
            .repeat(2)
            .timeout(Duration::from_secs(120))
            .expect(&["children that exited 0: 40 of 40"]),
        // A stack no machine can map fails with EAGAIN as without racewatch: at once, and the reporter
        // is not given up for it (set 11's rayon-core pool with an isize::MAX stack).
        case("huge_stack_eagain", "huge_stack", &[]).repeat(2).check(reporter_kept).expect(&[
            "huge stacks refused with EAGAIN: 4 of 4, each within 100 ms: yes",
            "then a thread with a normal stack: started",
        ]),
        // 25. The program's SIGTRAP handler through the other doors: signal() as __sysv_signal (strict C11),
        // bsd_signal, sysv_signal, ssignal, sigset, the raw rt_sigaction system call; sigignore.
        case("own_sigtrap_handler_sysv_signal_c11", "trap_doors_c11", &["signal"]).repeat(3).expect(DOOR_HANDLER_RAN_3),
        case("own_sigtrap_handler_bsd_signal", "trap_doors", &["bsd_signal"]).repeat(3).expect(DOOR_HANDLER_RAN_3),
        case("own_sigtrap_handler_sysv_signal", "trap_doors", &["sysv_signal"]).repeat(3).expect(DOOR_HANDLER_RAN_3),
        case("own_sigtrap_handler_ssignal", "trap_doors", &["ssignal"]).repeat(3).expect(DOOR_HANDLER_RAN_3),
        case("own_sigtrap_handler_sigset", "trap_doors", &["sigset"]).repeat(3).expect(DOOR_HANDLER_RAN_3),
        case("own_sigtrap_handler_raw_rt_sigaction", "trap_doors", &["rt_sigaction"])
            .repeat(3)
            .expect(DOOR_HANDLER_RAN_3),
        case("own_sigtrap_sigignore", "trap_doors", &["sigignore"])
            .repeat(3)
            .expect(&["sigignore: ok", "SIGTRAP ignored: 1", "handler ran: 0"])
            .check(detection_stays_on),
        // 26. The program's SIGTRAP disposition in full: no SA_RESTART (read gets EINTR), SIG_IGN (a sleep is
        // not interrupted), no SA_ONSTACK (not on the thread's alternate stack), blocked everywhere and
        // process-directed (the sigtimedwait thread gets it), int3 in an SA_ONSTACK handler.
        case("own_sigtrap_handler_without_sa_restart", "trap_disposition", &["no_restart"])
            .repeat(3)
            .expect(&["read: -1 EINTR", "handler ran: yes"]),
        case("own_sigtrap_ignored_sleep_not_interrupted", "trap_disposition", &["ignored"])
            .repeat(3)
            .expect(&["nanosleep: 0", "SIGTRAP ignored: 1"])
            .check(detection_stays_on),
        case("sigtrap_handler_installed_with_a_raw_system_call", "raw_trap", &[])
            .expect(&["raw rt_sigaction: 0", "breakpoints caught: 100, other SIGTRAPs: 0"])
            .check(names_the_raw_trap_handler),
        case("real_time_threads_keep_their_turns", "fifo_turns", &[])
            .repeat(3)
            .expect(&["turns logged: 900, out of turn: 0"]),
        case("an_executables_own_sigaction_sees_only_its_own_calls", "exe_wrappers", &[])
            .expect(&["handled: 3", "sigaction: own calls 1, foreign calls 0"]),
        case("sigaction_clears_unknown_flags_like_the_kernel", "trap_disposition", &["unknown_flags"]).expect(&[
            "signal 5: unknown flags cleared 1, SA_SIGINFO kept 1",
            "signal 10: unknown flags cleared 1, SA_SIGINFO kept 1",
        ]),
        case("exec_from_an_onstack_handler_keeps_the_mask", "trap_disposition", &["exec_from_handler"])
            .repeat(3)
            .expect(&["exec'd from a handler: SIGTRAP blocked 0, SIGUSR2 blocked 1"]),
        case("own_sigtrap_ignored_reaches_started_children", "trap_disposition", &["ignored_exec"])
            .expect(&[
                "posix_spawn child: SIGTRAP ignored 1, SigIgn has it 1, survived raise",
                "posix_spawn child: exit 0",
                "fork+execv child: SIGTRAP ignored 1, SigIgn has it 1, survived raise",
                "fork+execv child: exit 0",
                "system child: SIGTRAP ignored 1, SigIgn has it 1, survived raise",
                "system child: exit 0",
            ])
            .check(detection_stays_on),
        case("own_sigtrap_handler_without_sa_onstack", "trap_disposition", &["no_onstack"]).repeat(3).expect(&[
            "handler without SA_ONSTACK: SS_ONSTACK 0, on the alternate stack 0",
            "handler with SA_ONSTACK: SS_ONSTACK 1, on the alternate stack 1",
            "handler ran: 6",
        ]),
        case("own_sigtrap_blocked_process_directed_sigtimedwait", "trap_disposition", &["sigtimedwait"])
            .expect(&[
                "sigtimedwait: 5, si_code SI_USER: 1, SI_QUEUE: 0, value 0, from us: 1",
                "handler ran: 0, still pending: 0",
            ])
            .check(detection_stays_on),
        case("own_sigtrap_blocked_sigqueue_payload_sigtimedwait", "trap_disposition", &["sigqueue"])
            .expect(&[
                "sigtimedwait: 5, si_code SI_USER: 0, SI_QUEUE: 1, value 4242, from us: 1",
                "handler ran: 0, still pending: 0",
            ])
            .check(detection_stays_on),
        // 300 SIGTRAPs sent to the process one at a time (kill, sigqueue, from a forked child) go to the
        // thread waiting for them, each with its siginfo, and no wait ends with EINTR (CI: the sleeper
        // woken for one that a busy thread took first, 1 run in 60).
        case("sigtrap_waits_take_300_sent_to_the_process_sigtimedwait_worker", "trap_disposition", &[
            "wait_rounds",
            "sigtimedwait",
            "worker",
        ])
        .expect(&[
            "sigtimedwait: 300 of 300 arrived, 0 wrong, 0 EINTR, 0 timed out, 0 other errors",
            "sender: 0 lost",
            "handler ran: 0, still pending: 0",
        ])
        .check(detection_stays_on),
        case("sigtrap_waits_take_300_sent_to_the_process_sigwaitinfo_main", "trap_disposition", &[
            "wait_rounds",
            "sigwaitinfo",
            "main",
        ])
        .expect(&[
            "sigwaitinfo: 300 of 300 arrived, 0 wrong, 0 EINTR, 0 timed out, 0 other errors",
            "sender: 0 lost",
            "handler ran: 0, still pending: 0",
        ])
        .check(detection_stays_on),
        case("sigtrap_waits_take_300_sent_to_the_process_sigwait_worker", "trap_disposition", &[
            "wait_rounds",
            "sigwait",
            "worker",
        ])
        .expect(&["sigwait: 300 of 300 arrived, 0 wrong, 0 EINTR, 0 timed out, 0 other errors", "sender: 0 lost"])
        .check(detection_stays_on),
        case("sigtrap_waits_take_300_sent_to_the_process_raw_main", "trap_disposition", &["wait_rounds", "raw", "main"])
            .expect(&["raw: 300 of 300 arrived, 0 wrong, 0 EINTR, 0 timed out, 0 other errors", "sender: 0 lost"])
            .check(detection_stays_on),
        // 300 SIGTRAPs sent to a busy racing worker one at a time all reach its handler, with the kernel's
        // siginfo: sent for real, one that found a sample of racewatch's pending there merged with it
        // (set 31 p14: lost within 20 rounds, and the program waited for ever, 5 runs of 5).
        case("sigtrap_pings_to_a_busy_worker_pthread_kill", "trap_disposition", &["ping", "pthread_kill"])
            .expect(&["pthread_kill: 300 sent, 300 handled, 0 wrong, 0 lost"])
            .check(detection_stays_on),
        case("sigtrap_pings_to_a_busy_worker_tgkill", "trap_disposition", &["ping", "tgkill"])
            .expect(&["tgkill: 300 sent, 300 handled, 0 wrong, 0 lost"])
            .check(detection_stays_on),
        case("sigtrap_pings_to_a_busy_worker_raw_tkill", "trap_disposition", &["ping", "tkill"])
            .expect(&["tkill: 300 sent, 300 handled, 0 wrong, 0 lost"])
            .check(detection_stays_on),
        case("sigtrap_raised_in_its_own_handler_runs_after_it", "trap_disposition", &["raise_in_handler"])
            .repeat(4)
            .expect(&["raised 100, 3 more from each handler: handler ran 400 times"]),
        case("sigtrap_raised_while_blocked_is_discarded_by_sig_ign", "trap_disposition", &["ignore_pending"])
            .repeat(3)
            .expect(&["raised while blocked: pending 1, SigPnd 1", "after SIG_IGN: pending 0, SigPnd 0"]),
        case("sigtrap_to_the_process_and_to_its_only_taker_both_run", "trap_disposition", &["ping", "both"])
            .expect(&["both: 600 sent, 600 handled, 0 wrong, 0 lost"])
            .check(detection_stays_on),
        // A SIGTRAP sent to the process while every thread blocks it waits for the process (racewatch keeps
        // it: before, racewatch stepped aside, and a SIG_IGN set meanwhile did not discard it).
        // The mask after siglongjmp (the saved one), and after a longjmp out of the program's SIGTRAP handler
        // (the handler's), for SIGTRAP as without racewatch (set 39 p37: both came back the other way, and a
        // raise the program had blocked again killed it).
        case("jumps_restore_the_programs_sigtrap_mask_in_main", "jump_masks", &["main"]).repeat(2).expect(&[
            "restore: blocked after the jump 0, handler at once 1, after unblocking 1",
            "reblock: blocked after the jump 1, handler at once 0, after unblocking 1",
            "handler: blocked after the jump 1, handler at once 0, after unblocking 1",
            "nodefer: blocked after the jump 0, handler at once 1, after unblocking 1",
            "plain: blocked after the jump 1, handler at once 0, after unblocking 1",
            "done",
        ]),
        case("jumps_restore_the_programs_sigtrap_mask_in_a_worker", "jump_masks", &["worker"]).repeat(2).expect(&[
            "restore: blocked after the jump 0, handler at once 1, after unblocking 1",
            "reblock: blocked after the jump 1, handler at once 0, after unblocking 1",
            "handler: blocked after the jump 1, handler at once 0, after unblocking 1",
            "done",
        ]),
        case("sigtrap_sent_while_all_block_goes_to_the_thread_that_unblocks_it", "trap_kept", &["unblock"])
            .expect(&[
                "pending before: 1, handled before: 0",
                "handled: 1, in the thread that unblocked it: 1, SI_USER from us: 1",
                "still pending: 0",
            ])
            .check(detection_stays_on),
        case("sigtrap_sent_while_all_block_ends_a_sigsuspend_letting_it_through", "trap_kept", &["sigsuspend"])
            .expect(&[
                "pending before: 1",
                "sigsuspend: -1 EINTR, handled: 1 in main: 1, from the sender: 1",
                "still pending: 0",
            ])
            .check(detection_stays_on),
        case("sigtrap_from_a_child_while_all_block_ends_a_sigsuspend_with_its_siginfo", "trap_kept", &[
            "sigsuspend_from_child",
        ])
        .expect(&[
            "pending before: 1",
            "sigsuspend: -1 EINTR, handled: 1 in main: 1, from the sender: 1",
            "still pending: 0",
        ])
        .check(detection_stays_on),
        case("sigtrap_from_a_child_while_all_block_keeps_its_siginfo", "trap_kept", &["from_child"])
            .expect(&[
                "pending before: 1",
                "sigwaitinfo: 5, from the child: 1, SI_QUEUE: 1, value 77",
                "handled: 0, still pending: 0",
            ])
            .check(detection_stays_on),
        case("sigtrap_sent_while_all_block_is_not_a_forked_childs", "trap_kept", &["fork"])
            .expect(&["child: pending 0", "parent: pending 1"])
            .check(detection_stays_on),
        case("sigtrap_sent_while_all_block_is_discarded_by_sig_ign", "trap_kept", &["ignore"])
            .expect(&["pending before: 1", "pending once ignored: 0", "handled: 0"])
            .check(detection_stays_on),
        case("sigtrap_sent_while_all_block_stays_pending_across_exec", "trap_kept", &["exec"])
            .expect(&["pending before: 1", "after exec: pending 1", "after exec: sigtimedwait 5, SI_USER: 1"])
            .check(detection_stays_on),
        // A handler of the program's (or glibc's at a `setuid`) still ends such a wait with EINTR.
        case("sigtrap_wait_ended_by_a_handler_sigtimedwait", "trap_disposition", &[
            "wait_interrupted",
            "sigtimedwait",
            "usr1",
        ])
        .expect(&["wait 0: -1 EINTR", "wait 1: 5", "SIGUSR1 handled: 1, still pending: 0"]),
        case("sigtrap_wait_ended_by_setuid_sigwaitinfo", "trap_disposition", &["wait_interrupted", "sigwaitinfo", "setxid"])
            .expect(&["wait 0: -1 EINTR", "wait 1: 5", "SIGUSR1 handled: 0, still pending: 0"]),
        case("sigtrap_wait_ended_by_a_handler_raw", "trap_disposition", &["wait_interrupted", "raw", "usr1"])
            .expect(&["wait 0: -1 EINTR", "wait 1: 5", "SIGUSR1 handled: 1, still pending: 0"]),
        case("own_sigtrap_handler_int3_on_altstack", "trap_disposition", &["int3_altstack"])
            .repeat(3)
            .expect(&["SIGUSR1 handled: 100, SIGTRAP handled: 100"]),
        // 27. Masks the interposers do not see: kept across exec, set by pthread_attr_setsigmask_np, by
        // swapcontext, by the raw rt_sigprocmask system call.
        case("exec_keeps_sigtrap_blocked", "hidden_masks", &["exec"])
            .repeat(3)
            .expect(&["exec", "child: SIGTRAP blocked: 1"]),
        case("pthread_attr_sigmask_everything_blocked", "hidden_masks", &["attr_sigmask"])
            .repeat(3)
            .expect(&["every signal blocked in the threads: 1", "signals dequeued: 0"]),
        case("swapcontext_masks_sigtrap_blocked", "hidden_masks", &["contexts"]).repeat(3).expect(&[
            "wrong masks: 0",
            "SIGTRAP found where blocked: 0",
            "main blocks SIGTRAP: 0",
        ]),
        case("raw_rt_sigprocmask_sigtrap_blocked", "hidden_masks", &["raw_sigprocmask"])
            .repeat(3)
            .expect(&["SIGTRAP found where blocked: 0"]),
        // 28. Stacks: makecontext coroutines on 16 KiB stacks using 10 KiB; an SA_ONSTACK handler using
        // 48 KiB in threads (256 KiB, 64 KiB) without an alternate stack; what sigaltstack reports there.
        case("fiber_stacks_high_water_mark", "coroutines", &["highwater"])
            .repeat(2)
            .expect(&["most bytes a fiber's stack used, at most 1 KiB: yes"]),
        // 28b. Waits with a mask of their own let blocked signals through, SIGTRAP among them (set 20 p10).
        case("waits_with_their_own_mask_run_the_blocked_handlers", "wait_masks", &[]).repeat(2).expect(&[
            "sigsuspend: EINTR 40 of 40, handlers ran as ' 36 10 5' 40 of 40, left pending 0, still blocked 3",
            "ppoll: EINTR 40 of 40, handlers ran as ' 36 10 5' 40 of 40, left pending 0, still blocked 3",
            "pselect: EINTR 40 of 40, handlers ran as ' 36 10 5' 40 of 40, left pending 0, still blocked 3",
            "epoll_pwait: EINTR 40 of 40, handlers ran as ' 36 10 5' 40 of 40, left pending 0, still blocked 3",
            "syscall(rt_sigsuspend): EINTR 40 of 40, handlers ran as ' 36 10 5' 40 of 40, left pending 0, still blocked 3",
            "inline rt_sigsuspend (SIGTRAP alone): EINTR 40 of 40, handlers ran as ' 5' 40 of 40, left pending 0, \
             still blocked 3",
        ]),
        case("fiber_stack_after_a_jump_out_of_a_handler", "coroutines", &["after_jump"])
            .repeat(2)
            .expect(&["after a jump out of a handler, most bytes a fiber's stack used, at most 1 KiB: yes"]),
        case("fiber_stack_with_a_handler_running_on_it", "coroutines", &["handler_on_fiber"]).repeat(2).expect(&[
            "with a handler running on it, most bytes a fiber's stack used, at most a signal frame and 1 KiB: yes",
        ]),
        case("makecontext_coroutines_16k_stacks", "coroutines", &[]).repeat(5).expect(&[
            "coroutines that used about 10 KiB of their 16 KiB stack: 8",
            "coroutines that yielded at least 20 times: 8",
            "areas below a stack overwritten: 0",
        ]),
        case("crash_handler_backtrace_through_the_signal_frame", "onstack_big", &["backtrace"])
            .repeat(3)
            .expect(&["backtraces from the SIGABRT handler that reach the abort site: 5 of 5"]),
        case("onstack_handler_48k_without_altstack", "onstack_big", &[]).repeat(3).expect(&[
            "256 KiB thread: sigaltstack SS_DISABLE",
            "64 KiB thread 0: sigaltstack SS_DISABLE",
            "64 KiB thread 1: sigaltstack SS_DISABLE",
            "48 KiB handler ran: 30",
            "on its thread's own stack: 30",
        ]),
        // 29. A raw clone thread sharing main's TLS (errno included).
        case("raw_clone_thread_shared_tls", "clone_raw", &[])
            .repeat(5)
            .expect(&["errno checks: at least 1000, mismatches: 0"]),
        // Raw clone threads with a thread block of their own (no glibc TLS) that take the program's SIGUSR1
        // (set 17 p27: SIGSEGV in racewatch's trampoline, 4 runs in 20).
        case("raw_clone_threads_own_tls_take_signals", "clone_raw", &["own_tls"]).repeat(5).expect(&[
            "raw thread 0: signals handled 200 of 200",
            "raw thread 1: signals handled 200 of 200",
            "raw thread 2: signals handled 200 of 200",
        ]),
        // 30. Resources the program counts: thread-specific keys, hardware breakpoints, RLIMIT_NOFILE as set.
        case("pthread_keys_until_failure", "resources", &["keys"])
            .repeat(3)
            .expect(&["keys created: 1024, then EAGAIN"]),
        case("program_hw_breakpoints", "resources", &["breakpoints"])
            .repeat(3)
            .expect(&["fewest breakpoints opened in a round: 4 of 4"]),
        // Threads asking for their debug registers at once: each gets all four.
        case("program_hw_breakpoints_in_threads_at_once", "resources", &["breakpoints_threads"])
            .repeat(5)
            .expect(&["fewest breakpoints a thread opened: 4 of 4"]),
        case("rlimit_nofile_set_and_read_back", "resources", &["rlimit"])
            .repeat(5)
            .expect(&["RLIMIT_NOFILE mismatches: 0"]),
        // Signals queued up to RLIMIT_SIGPENDING beside busy workers: as many as without racewatch in
        // nearly every round (a sampling signal holds a slot for a moment; see "Not yet promised").
        case("sigqueue_up_to_rlimit_sigpending", "resources", &["sigpending"])
            .repeat(3)
            .expect(&["rounds that queued 40 signals, then EAGAIN: at least 25 of 30: yes"]),
        // 32. What racewatch takes from each thread (issue 22, items 12 and 13): no stack below the start
        // routine (the recursion depth to the guard page on a 128 KiB stack is printed and compared), a
        // watch window that does not sleep (a busy thread's voluntary context switches), and nothing per
        // thread that outlives it (3000 short-lived threads: returning, pthread_exit, cancelled).
        case("thread_stack_depth_to_guard_page", "footprint", &["depth"]).repeat(3),
        // At a production rate (20 ms: windows spin there; the debug rate's sleep, which lets racers run
        // on a busy machine, is a voluntary switch).
        case("busy_thread_no_voluntary_switches", "footprint", &["busy"])
            .options(&["sample_period_us=20000"])
            .repeat(3)
            .expect(&["busy thread's voluntary context switches at most 3: 1"]),
        // At the debug rate (and the default): windows there give the CPU away, by yielding in a thread that
        // never blocks (before: they slept, 16-22 switches in 0.5 s). Without symbol reading: the reporter
        // mapping files for a report meanwhile can make a sampled thread's reads of its own memory
        // (`process_vm_readv`) wait for the memory map's lock.
        case("busy_thread_no_voluntary_switches_at_the_debug_rate", "footprint", &["busy"])
            .options(&["symbolize=0"])
            .repeat(3)
            .expect(&["busy thread's voluntary context switches at most 3: 1"]),
        // racewatch's memory that its signals write is faulted in ahead: a computing thread takes no page
        // fault for racewatch during its loop (set 19 p22).
        case("computing_thread_takes_no_page_faults", "footprint", &["faults"])
            .repeat(3)
            .expect(&["minor page faults in a computing thread's loop: 0"]),
        // The loader's list of modules, racewatch's own left out: nothing else of racewatch's (its unwinder
        // is linked in, not libgcc_s.so.1).
        case("loaded_modules_beside_racewatch", "footprint", &["modules"])
            .repeat(2)
            .expect(&["libgcc_s.so.1 loaded: no"]),
        // The program's own threads change its address space as without racewatch: what the detector's
        // start and a thread's alternate stack need was mapped before `main` (set 13 p19: VmSize grew by
        // 1,064 KiB more across the first pthread_create under an RLIMIT_AS).
        case("address_space_across_first_threads", "footprint", &["address"])
            .repeat(2)
            .expect(&["round 2: 4 threads; VmSize +4112 KiB alive, +4112 KiB joined; maps lines +8 alive, +8 joined"]),
        case("address_space_across_first_threads_under_rlimit_as", "footprint", &["address", "budget"])
            .repeat(2)
            .expect(&["setrlimit(RLIMIT_AS): ok"]),
        // racewatch's mappings leave the address space's free ranges whole: a program reserving all of
        // it in 1 TiB, then 1 GiB, pieces (randomisation off) gets as many as without racewatch (set 42
        // p20: 126 and 2045 with the regions 1 TiB below the libraries).
        case("address_space_reserved_whole_in_large_pieces", "footprint", &["reserve"])
            .expect(&["reserved at least 100 TiB: yes"]),
        // The detector's start, in the program's first pthread_create, never blocks the program's thread
        // (set 42 rt2: 3 voluntary switches, waiting for the perf helper's and the warm-up thread's ends).
        case("first_thread_create_does_not_block", "footprint", &["first_create"])
            .repeat(3)
            .expect(&["voluntary switches in the first pthread_create at most 1: yes"]),
        // An idle worker costs the page of its alternate stack that a sample's kernel frame takes, not
        // three (set 42 rt12: 5.3 minor faults per worker instead of 2.3).
        case("idle_workers_fault_in_one_page_each", "footprint", &["idle_pool"])
            .repeat(2)
            .expect(&["minor faults per idle worker under 4: yes"]),
        // RLIMIT_AS and RLIMIT_DATA leave the program as much as without racewatch, set absolutely or
        // from its own VmSize/VmData, and read back (getrlimit, prlimit, /proc/self/limits; in an exec'd,
        // a spawned and a system() shell) as it set them. Runtime of 1b8ee06: 3628 of 3788 64 KiB chunks
        // under a 256 MiB RLIMIT_AS, 527 of 752 under a 64 MiB RLIMIT_DATA.
        // A monitor that keeps its status and statm open reads them again (lseek + read, pread, rewind)
        // as the kernel makes them again, and the descriptor looks like the file (fstat, fstatfs, its
        // link, its fdinfo flags): opened before the first thread, and while threads race (runtime of
        // 1b8ee06: the re-read after the join still said 4 threads, and VmSize grown); a forked child reads its
        // parent's file through the descriptor it inherited, and a dup reads as the descriptor (runtime of bfac7f0: 1 thread
        // for 4).
        case("own_files_kept_open_read_again", "status_kept_open", &[]).repeat(2).expect(&["done"]),
        case("own_files_opened_while_racing_read_again", "status_kept_open", &["late"])
            .repeat(2)
            .expect(&["joined: threads 1 by read, 1 by pread, 1 by stream; statm size grew: no", "done"]),
        case("memory_budgets_are_the_programs", "budgets", &[])
            .repeat(2)
            .expect(&["setrlimit AS: ok", "main: Max address space         1073741824           2147483648           bytes     ", "done"]),
        // Exactly: without races (no report), a churn changes neither VmSize nor the maps lines, whatever
        // new tids the threads get, and the reporter's start for a module loaded meanwhile (libgcc_s, by
        // the first pthread_exit) maps nothing (set 19 p23).
        case("thread_churn_leaves_the_address_space_as_it_was", "footprint", &["churn_exact"])
            .repeat(2)
            .expect(&["after 3000 short threads: VmSize changed by 0 kB, maps lines by 0"]),
        case("thread_churn_maps_and_vmsize", "footprint", &["churn"]).repeat(2).expect(&[
            "threads that failed to start: 0",
            "maps lines grew by less than 20: 1",
            "VmSize grew by less than 128 MiB: 1",
        ]),
        // 31. RLIMIT_NOFILE 1024/1024 (memcached -c 1024), with and without CAP_SYS_RESOURCE.
        case("nofile_1024_before_threads", "nofile_1024", &["before"]).repeat(3).expect(&[
            "setrlimit: ok",
            "RLIMIT_NOFILE 1024/1024",
            "done",
        ]),
        case("nofile_1024_after_threads", "nofile_1024", &["after"]).repeat(3).expect(&[
            "setrlimit: ok",
            "RLIMIT_NOFILE 1024/1024",
            "done",
        ]),
        // Soft = hard from the start, no right to raise it: racewatch's descriptors sit below the limit;
        // a program that uses every number gets them back (racewatch steps aside, one line), and opens
        // as many as without racewatch (set 35 p28, set 36 c26: 3 fewer).
        case("nofile_inherited_full_open_until_emfile", "nofile_full", &["open"])
            .launch(Launch::FullNofile)
            .expect(&["soft = hard: 1", "stopped by EMFILE, every number the limit allows: 1", "done"]),
        case("nofile_inherited_full_pipe_until_emfile", "nofile_full", &["pipe"])
            .launch(Launch::FullNofile)
            .expect(&["soft = hard: 1", "stopped by EMFILE, every number the limit allows: 1", "done"]),
        case("nofile_1024_before_threads_without_cap_sys_resource", "nofile_1024", &["before"])
            .repeat(3)
            .launch(Launch::NoSysResource)
            .expect(&["setrlimit: ok", "RLIMIT_NOFILE 1024/1024", "raising the hard limit again: EPERM", "done"]),
        case("nofile_1024_after_threads_without_cap_sys_resource", "nofile_1024", &["after"])
            .repeat(3)
            .launch(Launch::NoSysResource)
            .expect(&["setrlimit: ok", "RLIMIT_NOFILE 1024/1024", "raising the hard limit again: EPERM", "done"]),
        // 32. A tracer (a debugger passing signals through) of a racing child, traced from its start: no
        // signal of racewatch's reaches it, and no thread of racewatch's is created.
        // A system-call tracer counts what a forked child does with ordinary files (open, write, dup,
        // dup2, F_DUPFD, close, unlink): only the program's calls (set 41 p14: racewatch's getpid around
        // an open and a close showed as 4 calls more; around each dup as 1 more).
        case("traced_child_makes_only_its_own_system_calls", "traced_syscalls", &[]).repeat(2).expect(&[
            "child: exit 0",
            "system calls entered: 38; other stops: 0",
            "  call 39: 1",
        ]),
        case("ptrace_traced_racing_child", "tracer", &[]).repeat(3).expect(&[
            "child: exit 0",
            "clone events: 2, new threads' first stops: 2",
            "signal-delivery stops: none",
        ]),
        // 33. `main` ends with pthread_exit: the process ends with its last worker (no racewatch thread
        // outlives the program).
        case("pthread_exit_main_workers_return", "pthread_exit_main", &["workers"])
            .repeat(3)
            .timeout(Duration::from_secs(10))
            .expect(&["main calls pthread_exit", "atexit handler ran"]),
        case("pthread_exit_main_workers_pthread_exit", "pthread_exit_main", &["exiting-workers"])
            .repeat(3)
            .timeout(Duration::from_secs(10))
            .expect(&["main calls pthread_exit", "atexit handler ran"]),
        // 200 rounds of two workers at the debug rate took 4.9 s in one loaded CI run (1.3 s alone).
        // Races after main's exit keep the reporter busy as the last worker's return ends the process:
        // glibc's exit(0) runs there, and the reporter it ends must not run a second one (which ended
        // the process before stdout, fully buffered here, was flushed: set 31 p03, 2 runs in 30).
        case("pthread_exit_main_buffered_output_of_late_racers", "pthread_exit_main", &["buffered-late-workers"])
            .repeat(5)
            .expect(&["main calls pthread_exit", "atexit handler ran"]),
        case("pthread_exit_main_after_a_thread_churn", "pthread_exit_main", &["churn-workers"])
            .repeat(3)
            .timeout(Duration::from_secs(20))
            .expect(&["main calls pthread_exit", "atexit handler ran"]),
        // 34. Allocating until malloc fails while racing (racewatch's allocations fail too: they wait).
        case("memory_exhausted_under_rlimit_data", "memory_pressure", &["rlimit-data"])
            .repeat(3)
            .expect(&["allocated until malloc failed: yes", "done"]),
        case("memory_exhausted_under_mlockall", "memory_pressure", &["mlockall"])
            .repeat(3)
            .launch(Launch::NoIpcLock)
            .expect(&["allocated until malloc failed: yes", "done"]),
        // A race-free run's reporter allocates nothing (no malloc arena of its own: 64 MiB of locked
        // memory under mlockall(MCL_FUTURE)), and ended threads' alternate stacks are not kept locked.
        case("locked_memory_after_threads_end", "memory_pressure", &["locked"])
            .repeat(2)
            .expect(&["locked memory grew by less than 48 MiB: yes"]),
        // Under an 8 MiB memlock budget and mlockall(MCL_CURRENT | MCL_FUTURE), two workers with 256 KiB
        // stacks start: racewatch's share of the budget (its library, tables, stacks) leaves them room.
        case("threads_start_under_a_memlock_budget", "memory_pressure", &["budget"])
            .repeat(2)
            .launch(Launch::NoIpcLock)
            .expect(&["worker 0 with a 256 KiB stack: ran", "worker 1 with a 256 KiB stack: ran"])
            .check(reports_read_no_module_file),
        case("three_1m_stacks_start_under_a_memlock_budget", "memory_pressure", &["budget-1m"])
            .repeat(2)
            .launch(Launch::NoIpcLock)
            .expect(&[
                "worker 0 with a 1024 KiB stack: ran",
                "worker 1 with a 1024 KiB stack: ran",
                "worker 2 with a 1024 KiB stack: ran",
            ])
            .check(reports_read_no_module_file),
        case("memory_exhausted_until_exit", "memory_pressure", &["hold"])
            .repeat(3)
            .expect(&["allocated until malloc failed: yes", "done, still holding the memory"]),
        // 35. RLIMIT_NPROC: as many threads as without racewatch (its reporter thread gives way).
        case("rlimit_nproc_threads_until_eagain", "nproc", &[])
            .repeat(5)
            .expect(&["waiting threads started: 5, then EAGAIN", "done"]),
        // 36. Children started with SIGTRAP blocked keep it blocked; a vfork child's resets stay its own.
        // (system() and popen() go through sh, which starts its command with whatever mask it likes:
        // compared with the run without racewatch like the rest.)
        case("blocked_sigtrap_reaches_spawned_children", "children_mask", &["spawn"]).repeat(3).expect(&[
            "child started with SIGTRAP blocked: 1, 2 arguments, last report, RW_CHILD_ENV unset",
            "child started with SIGTRAP blocked: 1, 3 arguments, last two, RW_CHILD_ENV from-execle",
            "child started with SIGTRAP blocked: 1, 302 arguments, last 299, RW_CHILD_ENV unset",
            "child started with SIGTRAP blocked: 1, 3 arguments, last vfork, RW_CHILD_ENV unset",
            "child started with SIGTRAP blocked: 0, 3 arguments, last vfork-unblocked, RW_CHILD_ENV unset",
            "child started with SIGTRAP blocked: 1, 3 arguments, last clone-vfork, RW_CHILD_ENV unset",
        ]),
        // A child that shares the memory without being a thread (clone(CLONE_VM), with or without
        // CLONE_VFORK) and does not exec reads SIGTRAP blocked and not caught, as the program left it.
        case("clone_vm_children_see_sigtrap_as_the_program_set_it", "children_mask", &["clone-vm"]).repeat(3).expect(&[
            "clone(CLONE_VM) child: SIGTRAP blocked in status: 1, caught in status: 0",
            "clone(CLONE_VM | CLONE_VFORK) child: SIGTRAP blocked in status: 1, caught in status: 0",
        ]),
        case("vfork_child_resets_stay_in_the_child", "children_mask", &["vfork"]).repeat(3).expect(&[
            "vfork children failed: 0",
            "handler still ours: 1, SIGTRAP still blocked: 1",
            "handled after unblocking: 1",
        ]),
        // 37. SIGTRAP's disposition reads back as any other signal's (SA_RESTORER and glibc's restorer).
        case("sigtrap_action_reads_back_like_any_signal", "trap_readback", &[]).expect(&[
            "before threads: flags equal: 1, restorer equal: 1, handler equal: 1",
            "while racing: flags equal: 1, restorer equal: 1, handler equal: 1",
            "back to default: flags equal: 1, restorer equal: 1, handler equal: 1",
        ]),
        // 38. A handler whose sa_mask blocks everything is not interrupted by the program's SIGTRAP handler.
        case("full_sa_mask_holds_off_the_programs_sigtrap", "handler_mask", &[])
            .repeat(3)
            .expect(&["SIGTRAP handled at least 190 times: 1, inside the SIGUSR1 handler: 0"]),
        // 33. Seccomp filters installed with the program's own `syscall` instruction (no libc call racewatch
        // sees), PR_SET_NO_NEW_PRIVS by a raw prctl first: racewatch finds the instruction before the
        // detector starts and steps aside (one line). RET_TRAP counted by the program's SIGSYS handler
        // (a call of racewatch's would be one more, or kill the process with SIGSYS), RET_KILL_PROCESS,
        // the raw prctl(PR_SET_SECCOMP) door, RET_ERRNO, and TSYNC from main.
        case("seccomp_raw_trap", "seccomp_raw", &["trap"]).repeat(5).expect(&[
            "filter: ok, getppid: T",
            "trapped: 5",
            "done",
        ]),
        case("seccomp_raw_kill_process", "seccomp_raw", &["kill"]).repeat(5).expect(&[
            "filter: ok, getppid: -",
            "trapped: 0",
            "done",
        ]),
        case("seccomp_raw_prctl_trap", "seccomp_raw", &["prctl"]).repeat(5).expect(&[
            "filter: ok, getppid: T",
            "trapped: 5",
            "done",
        ]),
        case("seccomp_raw_errno", "seccomp_raw", &["errno"]).repeat(3).expect(&["filter: ok, getppid: E", "done"]),
        case("seccomp_raw_tsync_trap", "seccomp_raw", &["tsync"]).repeat(5).expect(&["tsync filter: ok", "trapped: 5"]),
        // Through a wrapper function whose number is a parameter, optimised and not (set 38 p36: built with
        // -O0, the number loaded from the wrapper's frame was not followed, and the process was killed by
        // SIGSYS in 5 of 5 runs).
        case("seccomp_raw_wrapper_trap", "seccomp_wrapper", &["trap"]).repeat(3).expect(&[
            "filter: ok, getppid: T",
            "trapped: 5",
            "done",
        ]),
        case("seccomp_raw_wrapper_unoptimised_trap", "seccomp_wrapper_O0", &["trap"]).repeat(5).expect(&[
            "filter: ok, getppid: T",
            "trapped: 5",
            "done",
        ]),
        // 34. Memory probes (SIGSEGV) and per-thread timeouts (SIGALRM) that siglongjmp out of their handlers,
        // SA_ONSTACK or not, restoring the mask or not, a timeout often while a probe is in flight.
        case("siglongjmp_probes_and_timeouts_restoring_masks", "probe_timeouts", &["mask"])
            .repeat(5)
            .expect(PROBE_TIMEOUTS_DONE),
        case("siglongjmp_probes_and_timeouts_onstack_restoring_masks", "probe_timeouts", &["mask", "onstack"])
            .repeat(5)
            .expect(PROBE_TIMEOUTS_DONE),
        case("siglongjmp_probes_and_timeouts_onstack_nodefer", "probe_timeouts", &["nodefer", "onstack"])
            .repeat(5)
            .expect(PROBE_TIMEOUTS_DONE),
        case("siglongjmp_probes_and_timeouts_onstack_mixed", "probe_timeouts", &["mixed", "onstack"])
            .repeat(5)
            .expect(PROBE_TIMEOUTS_DONE),
        case("siglongjmp_probes_and_timeouts_onstack_fortify", "probe_timeouts_fortify", &["nodefer", "onstack"])
            .repeat(5)
            .expect(PROBE_TIMEOUTS_DONE),
    ]
}

/// What every `probe_timeouts` run prints: each worker's 150 sections, right answers, nothing left blocked.
const PROBE_TIMEOUTS_DONE: &[&str] = &[
    "worker 0: sections 150, wrong answers 0, blocks SIGSEGV or SIGTRAP 0",
    "worker 1: sections 150, wrong answers 0, blocks SIGSEGV or SIGTRAP 0",
    "worker 2: sections 150, wrong answers 0, blocks SIGSEGV or SIGTRAP 0",
    "worker 3: sections 150, wrong answers 0, blocks SIGSEGV or SIGTRAP 0",
    "done",
];

// ---- Running ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Direct,
    Default,
    Sampled,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Direct, Mode::Default, Mode::Sampled];

    fn label(self) -> &'static str {
        match self {
            Mode::Direct => "without racewatch",
            Mode::Default => "racewatch run (default options)",
            Mode::Sampled => "racewatch run -o sample_period_us=1000",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Default => "default",
            Mode::Sampled => "sampled",
        }
    }
}

/// `RACEWATCH_HOST_SELF_CHECK=1`: the racewatch modes run the program directly.
fn self_check() -> bool {
    std::env::var_os("RACEWATCH_HOST_SELF_CHECK").is_some_and(|v| v != "0" && !v.is_empty())
}

/// One finished (or killed) run.
#[derive(Debug)]
struct Outcome {
    pid: u32,
    /// `exit N`, `signal N (NAME)`, or a hang; with a note when the pipes stayed open after exit.
    status: String,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    artefacts: Artefacts,
}

/// `racewatch run -o ... -- program args`, or the program alone; `{dir}` substituted.
fn command_line(case: &Case, mode: Mode, bin: &Path, dir: &Path, options: &[&str]) -> Vec<OsString> {
    let subst = |s: &str| s.replace("{dir}", &dir.display().to_string());
    let mut argv: Vec<OsString> = Vec::new();
    if mode != Mode::Direct && !self_check() {
        argv.push(env!("CARGO_BIN_EXE_racewatch").into());
        argv.push("run".into());
        // The exit status is the program's to keep: `racewatch run` would turn a 0 into 66 once a race
        // was reported (fail_on_race=1), and every program here races.
        argv.extend(["-o".into(), "fail_on_race=0".into()]);
        for option in options.iter().chain(case.options) {
            argv.push("-o".into());
            argv.push(subst(option).into());
        }
        argv.push("--".into());
    }
    argv.push(bin.into());
    argv.extend(case.args.iter().map(|a| OsString::from(subst(a))));
    if case.launch == Launch::Ulimit16 {
        let shell: [OsString; 3] = ["-c".into(), "ulimit -n 16 && exec \"$@\"".into(), "sh".into()];
        argv = ["sh".into()].into_iter().chain(shell).chain(argv).collect();
    }
    if case.launch == Launch::FullNofile {
        let shell: [OsString; 3] = ["-c".into(), "ulimit -n 8192 && exec \"$@\"".into(), "sh".into()];
        argv = ["sh".into()].into_iter().chain(shell).chain(argv).collect();
    }
    if matches!(case.launch, Launch::NoSysResource | Launch::FullNofile) {
        argv = WITHOUT_CAP_SYS_RESOURCE.iter().map(OsString::from).chain(argv).collect();
    }
    if case.launch == Launch::NoIpcLock {
        argv = WITHOUT_CAP_IPC_LOCK.iter().map(OsString::from).chain(argv).collect();
    }
    argv
}

/// The write end of a pipe whose read end is already closed.
fn dead_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own; the read end is closed at once.
    let write_end = unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0, "pipe2");
        libc::close(fds[0]);
        OwnedFd::from_raw_fd(fds[1])
    };
    Stdio::from(write_end)
}

fn kill_group(pid: u32) {
    // SAFETY: signals the process group the child leads (it was started with process_group(0)).
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        _ => "?",
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => {
            format!("signal {sig} ({}){}", signal_name(sig), if status.core_dumped() { ", core dumped" } else { "" })
        }
        _ => format!("{status}"),
    }
}

/// What the processes of a hung run's group were doing, for the failure message: each thread's name,
/// state, kernel wait channel, system call and pending and blocked signals, and gdb's backtraces where
/// gdb is installed (CI installs it). A flake that hangs once in many runs then explains itself.
fn hang_snapshot(group: u32) -> String {
    let field = |path: &str| std::fs::read_to_string(path).unwrap_or_default().trim().to_string();
    let mut out = String::new();
    let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    for pid in pids.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
        let stat = field(&format!("/proc/{pid}/stat"));
        // pgrp is the fifth field, after `pid (comm) state ppid`; comm may hold spaces.
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else { continue };
        if rest.split_whitespace().nth(2).and_then(|g| g.parse::<u32>().ok()) != Some(group) {
            continue;
        }
        out.push_str(&format!("  process {pid}: {}\n", field(&format!("/proc/{pid}/cmdline")).replace('\0', " ")));
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let dir = task.path().display().to_string();
            let status = field(&format!("{dir}/status"));
            let pick = |key: &str| status.lines().find(|l| l.starts_with(key)).unwrap_or_default().replace('\t', " ");
            out.push_str(&format!(
                "    task {} {} {} wchan={} syscall={} {} {} {}\n",
                task.file_name().to_string_lossy(),
                field(&format!("{dir}/comm")),
                pick("State:"),
                field(&format!("{dir}/wchan")),
                field(&format!("{dir}/syscall")),
                pick("SigPnd:"),
                pick("ShdPnd:"),
                pick("SigBlk:"),
            ));
            // The kernel's stack (root only): what gdb cannot show where it cannot attach (a zombie main).
            let stack = field(&format!("{dir}/stack"));
            out.extend(stack.lines().take(6).map(|l| format!("      {l}\n")));
        }
        let gdb = Command::new("timeout")
            .args(["10", "gdb", "-nx", "-batch", "-p", &pid.to_string(), "-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .output();
        if let Ok(gdb) = gdb {
            let text = String::from_utf8_lossy(&gdb.stdout);
            let frames = text.lines().filter(|l| l.starts_with('#') || l.starts_with("Thread "));
            out.extend(frames.map(|l| format!("    | {l}\n")));
        }
    }
    out
}

/// Runs `argv` with stdin from /dev/null, in its own process group, killed after `timeout`.
fn execute(argv: &[OsString], launch: Launch, timeout: Duration) -> (u32, String, Vec<u8>, Vec<u8>, Duration) {
    use std::io::Read;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_remove("RACEWATCH_OPTIONS").env_remove("LD_PRELOAD");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).process_group(0);
    cmd.stderr(if launch == Launch::DeadStderr { dead_pipe() } else { Stdio::piped() });
    // Every run starts from the default dispositions, whatever the test runner inherited (`nohup`
    // ignores SIGHUP, a shell's background job SIGINT and SIGQUIT, and exec keeps what is ignored).
    // SAFETY: `sigaction` is async-signal-safe, as the code between fork and exec must be.
    unsafe {
        cmd.pre_exec(|| {
            for sig in (1..32).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP) {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    drop(cmd); // our copy of a dead pipe's write end
    let pid = child.id();
    let mut out = child.stdout.take().expect("stdout");
    let err = child.stderr.take();
    let stdout_first = launch == Launch::StdoutFirst;
    let reader = std::thread::spawn(move || {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        if stdout_first {
            let _ = out.read_to_end(&mut stdout);
            if let Some(mut err) = err {
                let _ = err.read_to_end(&mut stderr);
            }
        } else {
            let err_reader = err.map(|mut err| {
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let _ = err.read_to_end(&mut buf);
                    buf
                })
            });
            let _ = out.read_to_end(&mut stdout);
            if let Some(r) = err_reader {
                stderr = r.join().expect("stderr reader");
            }
        }
        (stdout, stderr)
    });
    let deadline = start + timeout;
    let mut status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break describe(status);
        }
        if Instant::now() >= deadline {
            let snapshot = hang_snapshot(pid);
            kill_group(pid);
            child.wait().expect("wait");
            break format!("hung: killed after {} s\n{snapshot}", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    // Exited, but something (a child, a leaked descriptor) may still hold the pipes open.
    let pipe_deadline = deadline.max(Instant::now() + Duration::from_secs(5));
    while !reader.is_finished() {
        if Instant::now() >= pipe_deadline {
            kill_group(pid);
            status.push_str(", its stdout/stderr stayed open after it ended (process group killed)");
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (stdout, stderr) = reader.join().expect("reader");
    (pid, status, stdout, stderr, elapsed)
}

/// Runs `case` in `mode` in a fresh directory, with `extra` options in the racewatch modes.
fn run_case(case: &Case, mode: Mode, bin: &Path, tag: &str, extra: &[&str]) -> Outcome {
    let dir = scratch(&format!("host/{}/{tag}{}", case.name, mode.slug()));
    let options: Vec<&str> =
        (mode == Mode::Sampled).then_some(SAMPLE_PERIOD).into_iter().chain(extra.iter().copied()).collect();
    let argv = command_line(case, mode, bin, &dir, &options);
    let (pid, status, stdout, stderr, elapsed) = execute(&argv, case.launch, case.timeout);
    Outcome {
        pid,
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        elapsed,
        artefacts: (case.artefacts)(&dir),
    }
}

/// stderr without racewatch's output: `racewatch:` lines and complete report blocks.
fn programs_stderr(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.split_inclusive('\n').collect();
    let mut kept = String::new();
    let mut i = 0;
    while i < lines.len() {
        let bare = lines[i].trim_end_matches('\n');
        if bare == SEPARATOR {
            if let Some(end) = lines[i + 1..].iter().position(|l| l.trim_end_matches('\n') == SEPARATOR) {
                i += end + 2;
                continue;
            }
        }
        if !bare.starts_with("racewatch:") {
            kept.push_str(lines[i]);
        }
        i += 1;
    }
    kept
}

// ---- Comparing ----

/// A line diff (`-` expected, `+` got) of two short texts, at most 80 lines.
fn line_diff(expected: &str, got: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    let mut out: Vec<String> = Vec::new();
    if a.len() * b.len() > 4_000_000 {
        out.extend(a.iter().map(|l| format!("    - {l}")));
        out.extend(b.iter().map(|l| format!("    + {l}")));
    } else {
        // Longest common subsequence, then walk it.
        let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            if i < a.len() && j < b.len() && a[i] == b[j] {
                out.push(format!("      {}", a[i]));
                i += 1;
                j += 1;
            } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
                out.push(format!("    - {}", a[i]));
                i += 1;
            } else {
                out.push(format!("    + {}", b[j]));
                j += 1;
            }
        }
        if a == b {
            out.push("    (the same lines; they differ in the final newline)".into());
        }
    }
    if out.len() > 80 {
        let more = out.len() - 80;
        out.truncate(80);
        out.push(format!("    ... {more} more lines"));
    }
    out.join("\n")
}

fn bytes_diff(expected: &[u8], got: &[u8]) -> String {
    let at = expected.iter().zip(got).position(|(a, b)| a != b).unwrap_or(expected.len().min(got.len()));
    let snippet = |bytes: &[u8]| {
        format!("{:?}", String::from_utf8_lossy(&bytes[at.min(bytes.len())..(at + 64).min(bytes.len())]))
    };
    format!(
        "expected {} bytes, got {}; first difference at offset {at}: expected {}, got {}",
        expected.len(),
        got.len(),
        snippet(expected),
        snippet(got)
    )
}

fn text_or_bytes_diff(expected: &[u8], got: &[u8]) -> String {
    match (std::str::from_utf8(expected), std::str::from_utf8(got)) {
        (Ok(e), Ok(g)) if e.len() + g.len() < 20_000 => format!("(- expected, + got):\n{}", line_diff(e, g)),
        _ => bytes_diff(expected, got),
    }
}

/// The last lines of a text, indented, for context.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(n);
    let shown: Vec<String> = lines[skip..].iter().map(|l| format!("    | {l}")).collect();
    if skip > 0 {
        format!("    | ... ({skip} lines before)\n{}", shown.join("\n"))
    } else {
        shown.join("\n")
    }
}

/// What differs between the run without racewatch and `got`; empty when nothing does.
fn differences(expected: &Outcome, got: &Outcome) -> Vec<String> {
    let mut diffs = Vec::new();
    if expected.status != got.status {
        diffs.push(format!("status: expected {}, got {}", expected.status, got.status));
    }
    if expected.stdout != got.stdout {
        diffs.push(format!("stdout differs {}", text_or_bytes_diff(expected.stdout.as_bytes(), got.stdout.as_bytes())));
    }
    let (want, have) = (programs_stderr(&expected.stderr), programs_stderr(&got.stderr));
    if want != have {
        diffs.push(format!(
            "stderr (racewatch's lines and reports removed) differs {}",
            text_or_bytes_diff(want.as_bytes(), have.as_bytes())
        ));
    }
    for ((name, want), (_, have)) in expected.artefacts.iter().zip(&got.artefacts) {
        if want != have {
            diffs.push(format!("artefact `{name}` differs: {}", text_or_bytes_diff(want, have)));
        }
    }
    diffs
}

/// A difference on one line: its heading and its first changed lines.
fn brief(diff: &str) -> String {
    let mut lines = diff.lines();
    let heading = lines.next().unwrap_or("");
    let changed: Vec<&str> =
        lines.filter(|l| l.starts_with("    - ") || l.starts_with("    + ")).take(4).map(str::trim).collect();
    if changed.is_empty() {
        heading.to_string()
    } else {
        format!("{heading} {}", changed.join(" / "))
    }
}

/// Runs one case in the three modes (in parallel, the racewatch modes `case.repeat` times each) and
/// panics with every difference found.
fn check_case(name: &str) {
    let all = cases();
    let case = all.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
    let Some(bin) = program(case.program) else { return };
    if self_check() {
        eprintln!("{name}: RACEWATCH_HOST_SELF_CHECK: every mode runs without racewatch");
    }
    // The run without racewatch once, then each racewatch mode `repeat` times: (mode, run index).
    let repeat = case.repeat.max(1);
    let runs: Vec<(Mode, usize)> = std::iter::once((Mode::Direct, 0))
        .chain((0..repeat).flat_map(|i| [(Mode::Default, i), (Mode::Sampled, i)]))
        .collect();
    let outcomes = parallel_map(&runs, |&(mode, i)| {
        let tag = if i == 0 { String::new() } else { format!("run{i}-") };
        run_case(case, mode, &bin, &tag, &[])
    });
    let direct = &outcomes[0];

    // The baseline must be what the program is written to do, or the comparison proves nothing.
    let mut baseline = Vec::new();
    if !direct.status.starts_with(case.status) {
        baseline.push(format!("status {} (expected {})", direct.status, case.status));
    }
    for line in case.expect {
        if !direct.stdout.lines().any(|l| l == *line) {
            baseline.push(format!("no line `{line}` on stdout"));
        }
    }
    if let Err(why) = (case.check)(direct) {
        baseline.push(why);
    }
    assert!(
        baseline.is_empty(),
        "[{name}] the run without racewatch is not the expected baseline (a bug in the test): {}\nstdout:\n{}\nstderr:\n{}",
        baseline.join("; "),
        tail(&direct.stdout, 40),
        tail(&direct.stderr, 40)
    );

    let mut failures = Vec::new();
    // Per mode: failed runs, and whether one was shown in full (later ones get one line each).
    let mut failed = [(0usize, false); 3];
    for (&(mode, i), got) in runs.iter().zip(&outcomes).skip(1) {
        let mut diffs = differences(direct, got);
        if let Err(why) = (case.check)(got) {
            diffs.push(why);
        }
        let verdict = if diffs.is_empty() { "PASS" } else { "FAIL" };
        let run = if repeat > 1 { format!(" run {}/{repeat}", i + 1) } else { String::new() };
        eprintln!(
            "{verdict} {name} [{}]{run} {:.1} s (without: {:.1} s)",
            mode.label(),
            got.elapsed.as_secs_f64(),
            direct.elapsed.as_secs_f64()
        );
        if diffs.is_empty() {
            continue;
        }
        let (count, shown) = &mut failed[mode as usize];
        *count += 1;
        if *shown {
            let first = diffs.iter().map(|d| brief(d)).collect::<Vec<_>>().join("; ");
            failures.push(format!("[{name}] {}{run} (pid {}): {first}", mode.label(), got.pid));
            continue;
        }
        *shown = true;
        failures.push(format!(
            "[{name}] {}{run} (pid {}, {:.1} s; without racewatch {:.1} s):\n  {}\n  raw stderr:\n{}",
            mode.label(),
            got.pid,
            got.elapsed.as_secs_f64(),
            direct.elapsed.as_secs_f64(),
            diffs.join("\n  "),
            tail(&got.stderr, 25)
        ));
    }
    let tally: Vec<String> = Mode::ALL[1..]
        .iter()
        .filter(|m| failed[**m as usize].0 > 0)
        .map(|m| format!("{}: {} of {repeat} runs failed", m.label(), failed[*m as usize].0))
        .collect();
    assert!(
        failures.is_empty(),
        "the host program behaved differently under racewatch ({}):\n{}",
        tally.join(", "),
        failures.join("\n\n")
    );
}

macro_rules! host_cases {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {
        $(
            #[test]
            $(#[$attr])*
            fn $name() {
                check_case(stringify!($name));
            }
        )*

        #[test]
        fn every_case_has_a_test() {
            let tested = [$(stringify!($name)),*];
            let mut names: Vec<&str> = cases().iter().map(|c| c.name).collect();
            let mut sorted: Vec<&str> = tested.to_vec();
            names.sort_unstable();
            sorted.sort_unstable();
            assert_eq!(names, sorted);
        }
    };
}

host_cases!(
    dlopen_dlclose_while_racing,
    stats_at_abort,
    stats_at_segv,
    stats_at_sigterm,
    stats_handlers_read_as_default,
    sigwait_sigterm_single_threaded,
    sigwait_sigterm_after_threads,
    signalfd_sigchld,
    signalfd_sigtrap_blocked_everywhere,
    signalfd_sigtrap_from_a_child_names_the_child,
    signalfd_sigtrap_raised_while_blocked_reads_only_the_programs,
    sigwait_thread_sighup,
    itimer_siglongjmp,
    unshare_newuser_single_threaded,
    single_threaded_again_after_join,
    single_threaded_again_after_a_thread_churn,
    single_threaded_again_after_a_thread_churn_raw_unshare,
    forked_children_start_thread_pools,
    all_signals_default,
    own_sigtrap_handler_after_threads,
    own_sigtrap_handler_before_threads,
    own_sigtrap_to_the_process_reaches_the_thread_letting_it_through,
    own_sigtrap_handler_with_signal,
    sigtimedwait_everything_blocked,
    exec_self_with_sigtrap_blocked,
    own_sigtrap_default_raise,
    own_sigtrap_default_int3,
    own_sigtrap_ignored_int3,
    own_sigtrap_blocked_int3,
    own_sigtrap_blocked_handler_int3,
    own_sigtrap_resethand,
    own_sigtrap_blocked_pending,
    children_through_system_spawn_popen,
    environment_without_racewatch_variables,
    concurrent_system_and_popen_from_threads,
    setxid_broadcast_reaches_every_thread,
    setxid_while_the_reporter_runs,
    vfork_and_exec,
    exec_from_a_thread,
    thread_backtraces_have_their_frames,
    thread_keys_numbered_and_counted_as_without_racewatch,
    min_stacks_deep_recursion,
    thread_stacks_and_tls_vectors_as_without_racewatch,
    a_large_static_tls_block_leaves_the_reporter_its_stack,
    environment_read_during_system_stays_intact,
    no_privilege_mark_on_the_program_threads,
    sigaltstack_sigusr1_handler,
    alternate_stack_written_as_deep_as_without_racewatch,
    seccomp_strict_prctl,
    seccomp_strict_syscall,
    seccomp_filter_one_thread,
    seccomp_filter_threads,
    seccomp_filter_exit_inside,
    seccomp_filter_of_the_only_thread,
    rdtsc_faults_emulated_by_the_program,
    syscall_user_dispatch_in_racing_threads,
    seccomp_filter_tsync_all_threads,
    seccomp_deny_lists_leave_detection_on,
    seccomp_deny_list_on_arguments_leaves_detection_on,
    seccomp_deny_list_of_calls_racewatch_never_makes,
    seccomp_inherited_kill_process,
    seccomp_inherited_kill_thread,
    seccomp_inherited_trap,
    seccomp_inherited_errno,
    seccomp_inherited_threads_only,
    fds_close_loop,
    fds_close_range,
    fds_dup2_over_all,
    fds_scanned_closed_and_parked_high,
    log_path_daemon_close_range,
    log_path_symlink_to_target,
    log_path_symlink_dangling,
    log_path_without_metadata_creates_nothing,
    nofile_16_before_threads,
    nofile_16_after_threads,
    nofile_16_from_shell_ulimit,
    fork_children_exit,
    forked_child_signal_state_is_the_programs,
    task_listing_right_after_thread_start,
    own_proc_files_show_the_programs_state,
    own_proc_files_show_a_blocked_sigtrap,
    forked_child_reads_the_parents_state_as_the_programs,
    new_images_read_the_starters_state_as_the_programs,
    main_alt_stack_unmapped_by_the_exiting_thread,
    main_waits_for_signals_beside_busy_workers,
    main_waits_for_signals_read_through_siginfo,
    computing_main_gets_the_alarms,
    malloc_statistics_unchanged_by_reports,
    first_malloc_in_main_makes_the_malloc_cache,
    module_files_read_for_reports_are_unmapped_with_the_threads,
    new_mapping_adds_its_own_maps_line,
    mappings_without_randomisation_land_alike,
    fork_storm_while_reporting,
    prefork_workers,
    stderr_pipe_without_reader,
    stdout_read_before_stderr,
    rlimit_as_40_mib,
    rlimit_as_thread_capacity,
    address_space_across_first_threads,
    address_space_across_first_threads_under_rlimit_as,
    address_space_reserved_whole_in_large_pieces,
    first_thread_create_does_not_block,
    idle_workers_fault_in_one_page_each,
    memory_budgets_are_the_programs,
    own_files_kept_open_read_again,
    own_files_opened_while_racing_read_again,
    cancel_deferred_while_racing,
    cancel_async_while_racing,
    pthread_sigqueue_to_a_worker_runs_there,
    cancel_in_every_interposed_wait,
    cancel_pending_at_thread_return,
    siglongjmp_sigsegv_probes,
    siglongjmp_sigalrm_timeouts_and_probes,
    prefork_children_exit_while_racing,
    exit_while_last_worker_ends,
    exit_from_handler_while_last_worker_ends,
    huge_stack_eagain,
    own_sigtrap_handler_sysv_signal_c11,
    own_sigtrap_handler_bsd_signal,
    own_sigtrap_handler_sysv_signal,
    own_sigtrap_handler_ssignal,
    own_sigtrap_handler_sigset,
    own_sigtrap_handler_raw_rt_sigaction,
    own_sigtrap_sigignore,
    own_sigtrap_handler_without_sa_restart,
    own_sigtrap_ignored_sleep_not_interrupted,
    own_sigtrap_ignored_reaches_started_children,
    sigaction_clears_unknown_flags_like_the_kernel,
    an_executables_own_sigaction_sees_only_its_own_calls,
    real_time_threads_keep_their_turns,
    sigtrap_handler_installed_with_a_raw_system_call,
    exec_from_an_onstack_handler_keeps_the_mask,
    own_sigtrap_handler_without_sa_onstack,
    own_sigtrap_blocked_process_directed_sigtimedwait,
    own_sigtrap_blocked_sigqueue_payload_sigtimedwait,
    sigtrap_waits_take_300_sent_to_the_process_sigtimedwait_worker,
    sigtrap_waits_take_300_sent_to_the_process_sigwaitinfo_main,
    sigtrap_waits_take_300_sent_to_the_process_sigwait_worker,
    sigtrap_waits_take_300_sent_to_the_process_raw_main,
    sigtrap_pings_to_a_busy_worker_pthread_kill,
    sigtrap_pings_to_a_busy_worker_tgkill,
    sigtrap_pings_to_a_busy_worker_raw_tkill,
    sigtrap_to_the_process_and_to_its_only_taker_both_run,
    sigtrap_raised_while_blocked_is_discarded_by_sig_ign,
    sigtrap_raised_in_its_own_handler_runs_after_it,
    sigtrap_wait_ended_by_a_handler_sigtimedwait,
    sigtrap_sent_while_all_block_goes_to_the_thread_that_unblocks_it,
    sigtrap_sent_while_all_block_ends_a_sigsuspend_letting_it_through,
    sigtrap_from_a_child_while_all_block_ends_a_sigsuspend_with_its_siginfo,
    sigtrap_from_a_child_while_all_block_keeps_its_siginfo,
    sigtrap_sent_while_all_block_is_not_a_forked_childs,
    sigtrap_sent_while_all_block_is_discarded_by_sig_ign,
    sigtrap_sent_while_all_block_stays_pending_across_exec,
    sigtrap_wait_ended_by_setuid_sigwaitinfo,
    sigtrap_wait_ended_by_a_handler_raw,
    own_sigtrap_handler_int3_on_altstack,
    exec_keeps_sigtrap_blocked,
    pthread_attr_sigmask_everything_blocked,
    swapcontext_masks_sigtrap_blocked,
    raw_rt_sigprocmask_sigtrap_blocked,
    makecontext_coroutines_16k_stacks,
    fiber_stacks_high_water_mark,
    fiber_stack_after_a_jump_out_of_a_handler,
    waits_with_their_own_mask_run_the_blocked_handlers,
    fiber_stack_with_a_handler_running_on_it,
    onstack_handler_48k_without_altstack,
    crash_handler_backtrace_through_the_signal_frame,
    raw_clone_thread_shared_tls,
    raw_clone_threads_own_tls_take_signals,
    pthread_keys_until_failure,
    program_hw_breakpoints,
    program_hw_breakpoints_in_threads_at_once,
    rlimit_nofile_set_and_read_back,
    sigqueue_up_to_rlimit_sigpending,
    nofile_1024_before_threads,
    nofile_1024_after_threads,
    nofile_inherited_full_open_until_emfile,
    nofile_inherited_full_pipe_until_emfile,
    nofile_1024_before_threads_without_cap_sys_resource,
    nofile_1024_after_threads_without_cap_sys_resource,
    ptrace_traced_racing_child,
    traced_child_makes_only_its_own_system_calls,
    thread_stack_depth_to_guard_page,
    busy_thread_no_voluntary_switches,
    busy_thread_no_voluntary_switches_at_the_debug_rate,
    computing_thread_takes_no_page_faults,
    thread_churn_leaves_the_address_space_as_it_was,
    loaded_modules_beside_racewatch,
    thread_churn_maps_and_vmsize,
    pthread_exit_main_workers_return,
    pthread_exit_main_workers_pthread_exit,
    pthread_exit_main_after_a_thread_churn,
    pthread_exit_main_buffered_output_of_late_racers,
    memory_exhausted_under_rlimit_data,
    memory_exhausted_under_mlockall,
    locked_memory_after_threads_end,
    threads_start_under_a_memlock_budget,
    three_1m_stacks_start_under_a_memlock_budget,
    memory_exhausted_until_exit,
    rlimit_nproc_threads_until_eagain,
    blocked_sigtrap_reaches_spawned_children,
    vfork_child_resets_stay_in_the_child,
    clone_vm_children_see_sigtrap_as_the_program_set_it,
    sigtrap_action_reads_back_like_any_signal,
    full_sa_mask_holds_off_the_programs_sigtrap,
    seccomp_raw_trap,
    seccomp_raw_kill_process,
    seccomp_raw_prctl_trap,
    seccomp_raw_errno,
    seccomp_raw_wrapper_trap,
    jumps_restore_the_programs_sigtrap_mask_in_main,
    children_read_their_fd_table_size_as_the_programs,
    jumps_restore_the_programs_sigtrap_mask_in_a_worker,
    seccomp_raw_wrapper_unoptimised_trap,
    seccomp_raw_tsync_trap,
    siglongjmp_probes_and_timeouts_restoring_masks,
    siglongjmp_probes_and_timeouts_onstack_restoring_masks,
    siglongjmp_probes_and_timeouts_onstack_nodefer,
    siglongjmp_probes_and_timeouts_onstack_mixed,
    siglongjmp_probes_and_timeouts_onstack_fortify,
);

/// A module that installs seccomp filters with its own `syscall` instruction: racewatch says so once,
/// naming the program and the instruction's offset, and never starts.
#[test]
fn a_raw_seccomp_instruction_is_named_once_and_detection_never_starts() {
    if skip_detection() {
        return;
    }
    let Some(bin) = program("seccomp_raw") else { return };
    let case = find_case("seccomp_raw_trap");
    let run = run_case(&case, Mode::Sampled, &bin, "step-aside-", &["stats=1"]);
    let line = "installs seccomp filters with its own system call instruction; race detection is off";
    let lines: Vec<&str> = run.stderr.lines().filter(|l| l.contains(line)).collect();
    assert_eq!(lines.len(), 1, "one step-aside line expected:\n{}", run.stderr);
    assert!(lines[0].contains(&format!("{}+0x", bin.display())), "names the program and an offset: {}", lines[0]);
    assert_eq!(stat(&run.stderr, "watches armed").unwrap_or(0), 0, "no watch once stepped aside:\n{}", run.stderr);
    assert!(!run.stderr.contains(REPORT_HEADER), "no report once stepped aside:\n{}", run.stderr);
}

/// tests/host/lazy_reporter.c with `args` as case `name`, and its run without racewatch (which sees
/// the main thread and two workers); `None` where detection cannot run here.
fn reporter_on_demand_case(name: &'static str, args: &'static [&'static str]) -> Option<(Case, PathBuf, Outcome)> {
    if skip_detection() {
        return None;
    }
    let bin = program("lazy_reporter")?;
    let case = case(name, "lazy_reporter", args);
    let plain = run_case(&case, Mode::Direct, &bin, "", &[]);
    assert_eq!(
        plain.stdout,
        "largest task count: 3\nthreads another process saw: 3\nmaps grew by 2 per thread, give or take 8: 1\n",
        "{}",
        plain.stderr
    );
    Some((case, bin, plain))
}

/// A race-free process never has racewatch's reporter thread, at the default rate and at the debug rate:
/// its raw listing of `/proc/self/task` and another process's view of its `Threads:` are what they are
/// without racewatch, while the detector samples its two threads.
#[test]
fn a_process_that_reports_nothing_never_has_a_reporter_thread() {
    let Some((case, bin, plain)) = reporter_on_demand_case("reporter_on_demand_quiet", &["quiet"]) else { return };
    for mode in [Mode::Default, Mode::Sampled] {
        let run = run_case(&case, mode, &bin, "", &["stats=1"]);
        assert_eq!(run.stdout, plain.stdout, "{}:\n{}", mode.label(), run.stderr);
        assert_eq!(stat(&run.stderr, "reporter thread starts"), Some(0), "{}:\n{}", mode.label(), run.stderr);
        assert!(stat(&run.stderr, "samples").unwrap_or(0) > 0, "{}: not sampled:\n{}", mode.label(), run.stderr);
    }
}

/// A process that reported a race has the reporter thread only while it has work: it started from a
/// sampling signal (the program creates no thread after its two workers), printed, and ended a second
/// after the race stopped, so the counts at the end are those without racewatch again.
#[test]
fn the_reporter_thread_ends_a_second_after_its_last_race() {
    let Some((case, bin, plain)) = reporter_on_demand_case("reporter_on_demand_race", &["race-then-quiet"]) else {
        return;
    };
    for mode in [Mode::Default, Mode::Sampled] {
        let mut attempt = 0;
        let (run, runs) = retry_for(Duration::from_secs(60), || {
            attempt += 1;
            let run = run_case(&case, mode, &bin, &format!("{attempt}-"), &["stats=1"]);
            Ok(run.stderr.contains(REPORT_HEADER).then_some(run))
        })
        .unwrap_or_else(|why| panic!("{}: no race reported: {why}", mode.label()));
        assert_eq!(run.stdout, plain.stdout, "{} (run {runs}):\n{}", mode.label(), run.stderr);
        assert!(
            stat(&run.stderr, "reporter thread starts from a sampling signal").unwrap_or(0) > 0,
            "{}: the report was printed by a reporter not started from a signal:\n{}",
            mode.label(),
            run.stderr
        );
        assert!(
            stat(&run.stderr, "reporter thread ends after a second without work").unwrap_or(0) > 0,
            "{}: the reporter did not end:\n{}",
            mode.label(),
            run.stderr
        );
    }
}

/// Runs `program` (no arguments) without racewatch, which must print `expect` and exit 0, then under
/// `racewatch run` with `options` until a run with the same output and exit status passes `done` (a
/// minute at most); how many runs that took.
fn run_until(program_name: &'static str, expect: &str, options: &[&str], done: impl Fn(&Outcome) -> bool) -> usize {
    let Some(bin) = program(program_name) else { return 0 };
    let case = case(program_name, program_name, &[]);
    let plain = run_case(&case, Mode::Direct, &bin, "", &[]);
    assert_eq!((plain.status.as_str(), plain.stdout.as_str()), ("exit 0", expect), "{}", plain.stderr);
    let mut attempt = 0;
    let (_, runs) = retry_for(Duration::from_secs(60), || {
        attempt += 1;
        let run = run_case(&case, Mode::Default, &bin, &format!("{attempt}-"), options);
        if (run.status.as_str(), run.stdout.as_str()) != ("exit 0", expect) {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(done(&run).then_some(()))
    })
    .unwrap_or_else(|why| panic!("{program_name}: {why}"));
    runs
}

/// A program with its own `malloc`, whose threads race while `main` sleeps and leaves with `_exit`: no
/// sampling signal may start the reporter thread (it could interrupt the allocator holding its lock), so
/// it starts with the program's second thread, as it always did, and the race is printed while the
/// program runs rather than never.
#[test]
fn a_program_with_its_own_malloc_is_reported_while_it_runs() {
    if skip_detection() {
        return;
    }
    let runs = run_until("own_malloc", "racing\n", &[], |run| run.stderr.contains(REPORT_HEADER));
    eprintln!("own malloc: reported in run {runs}");
}

/// A worker that enters a seccomp sandbox of its own (tests/host/seccomp.c "filter-threads": an allow-list
/// filter that kills the process on any other call) is left unsampled, threads it creates included, while
/// the rest of the process is sampled as before: the race between the other threads is reported, and no
/// line says detection is off.
#[test]
fn races_beside_a_thread_in_its_own_sandbox_are_reported() {
    if skip_detection() {
        return;
    }
    let runs = reported_with_detection_on("seccomp_filter_threads");
    eprintln!("race beside a sandboxed thread: reported in run {runs}");
}

/// A program that ignores `SIGTRAP` (tests/host/trap_disposition.c "ignored": `SIG_IGN`, then `SIGTRAP`s sent
/// at a sleeping thread in four ways) is sampled all the same, and its race reported.
#[test]
fn races_are_reported_while_the_program_ignores_sigtrap() {
    if skip_detection() {
        return;
    }
    let runs = reported_with_detection_on("own_sigtrap_ignored_sleep_not_interrupted");
    eprintln!("race while SIGTRAP is ignored: reported in run {runs}");
}

/// Runs host case `name` at the debug rate until a run reports a race (a minute at most), each run
/// exiting 0 with no line that detection is off; how many runs that took.
fn reported_with_detection_on(name: &str) -> usize {
    let case = find_case(name);
    let Some(bin) = program(case.program) else { return 0 };
    let mut attempt = 0;
    let (_, runs) = retry_for(Duration::from_secs(60), || {
        attempt += 1;
        let run = run_case(&case, Mode::Sampled, &bin, &format!("{attempt}-"), &[]);
        if run.status != "exit 0" || run.stderr.contains("race detection is off") {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, tail(&run.stderr, 20)));
        }
        Ok(run.stderr.contains(REPORT_HEADER).then_some(()))
    })
    .unwrap_or_else(|why| panic!("{name}: {why}"));
    runs
}

/// A tracer that attaches in the middle of a run and detaches 0.4 s later (tests/host/attach.c): sampling
/// pauses while it is there and starts again once it is gone, although no thread of racewatch's ran when it
/// came (a sampling signal saw it and started the reporter, whose checks then pause and resume), and the
/// race that starts after the detach is reported.
#[test]
fn sampling_resumes_after_a_tracer_that_attached_mid_run_detaches() {
    if skip_detection() {
        return;
    }
    let runs = run_until("attach", "child: exit 0\n", &["verbosity=1"], |run| {
        let paused = run.stderr.contains("a tracer is attached") && run.stderr.contains("the tracer detached");
        paused && run.stderr.contains(REPORT_HEADER)
    });
    eprintln!("tracer attached mid-run: paused, resumed and reported in run {runs}");
}

/// The children of a program whose environment racewatch cleaned run under racewatch (tests/host/environ.c:
/// its last child, started by `system()` through `sh`, races): a report comes from that child.
#[test]
fn children_get_racewatch_back_in_their_environment() {
    if skip_detection() {
        return;
    }
    let Some(bin) = program("environ") else { return };
    let case = case("environ", "environ", &[]);
    let (_, runs) = retry_for(Duration::from_secs(60), || {
        let run = run_case(&case, Mode::Sampled, &bin, "children-", &[]);
        if !run.stdout.contains("racer done") {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(run.stderr.contains(REPORT_HEADER).then_some(()))
    })
    .unwrap_or_else(|why| panic!("environ: {why}"));
    eprintln!("a grandchild through system() and sh reported a race in run {runs}");
}

/// A tracer that seizes a busy thread at the debug rate (tests/host/attach.c `busy`): each sampling signal
/// until racewatch sees the tracer is a stop the tracer must pass on. The first is inherent (the stop comes
/// before any handler runs); the sampling signal that reads the tracer's pid pauses sampling at once, at
/// most 10 ms later at this rate. 3 runs, the most stops counted: 134 to 243 when pausing waited for the
/// reporter thread's check.
#[test]
fn a_tracer_that_attaches_sees_few_sampling_stops() {
    let Some(bin) = program("attach") else { return };
    let case = case("attach", "attach", &["busy"]);
    let most = (0..3)
        .map(|run| {
            let outcome = run_case(&case, Mode::Sampled, &bin, &format!("busy{run}-"), &[]);
            assert_eq!((outcome.status.as_str(), outcome.stdout.as_str()), ("exit 0", "child: exit 0\n"));
            let line = outcome.stderr.lines().find_map(|l| l.strip_prefix("SIGTRAP stops seen by the tracer: "));
            line.and_then(|n| n.trim().parse::<u64>().ok()).unwrap_or(u64::MAX)
        })
        .max()
        .unwrap_or(0);
    eprintln!("SIGTRAP stops seen by a tracer at the debug rate: at most {most} in 3 runs");
    assert!(most <= 40, "a tracer saw {most} sampling stops before racewatch paused");
}

/// gdb attached to a busy program at the debug rate, with the setting the guide gives for racewatch
/// (`handle SIGTRAP nostop noprint nopass`): gdb does not pass `SIGTRAP` on, so racewatch's handler
/// never learns of it and the sampling signals go on (without the setting, each is a stop gdb reports);
/// with it gdb drops them silently, stops only at its own breakpoint (hit twice), lists the program's 3
/// threads and no other, and after it detaches the program ends as it does without racewatch.
#[test]
fn gdb_attached_with_the_guides_setting_stops_only_at_its_breakpoints() {
    let Some(clang) = clang() else { return };
    if Command::new("gdb").arg("--version").output().map_or(true, |out| !out.status.success()) {
        eprintln!("SKIP: gdb not found (apt-get install gdb)");
        return;
    }
    let dir = scratch("gdb-attach");
    let bin = build_c(
        &clang,
        &dir,
        "gdb_busy",
        "#include <pthread.h>\n#include <stdatomic.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;\n\
         static long total;\n static atomic_int stop;\n\
         __attribute__((noinline)) void checkpoint(long n) { __asm__ volatile(\"\" : : \"r\"(n) : \"memory\"); }\n\
         static void *work(void *arg) { long i = 0;\n\
           while (!atomic_load(&stop)) { pthread_mutex_lock(&lock); total++; pthread_mutex_unlock(&lock);\n\
             if ((++i & 0xffff) == 0) checkpoint(i); }\n\
           return arg; }\n\
         int main(void) { pthread_t t[2]; char c;\n\
           for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, work, 0);\n\
           if (read(0, &c, 1) != 1) return 2;\n\
           atomic_store(&stop, 1); for (int i = 0; i < 2; i++) pthread_join(t[i], 0);\n\
           printf(\"stopped 2 workers\\n\"); return total < 0; }\n",
        &["-pthread"],
    );
    let finish = |mut child: std::process::Child| {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(b"x").expect("tell the program to stop");
        child.wait_with_output().expect("the program's end")
    };
    let piped = |mut command: Command| {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start")
    };
    let plain = finish(piped(Command::new(&bin)));
    let mut command = common::racewatch();
    command.args(["run", "-o", "sample_period_us=1000", "--"]).arg(&bin);
    let child = piped(command);
    std::thread::sleep(Duration::from_millis(500));
    let gdb = Command::new("timeout")
        .args(["120", "gdb", "-q", "-batch", "-nx", "-p", &child.id().to_string()])
        .args(["-ex", "set pagination off", "-ex", "handle SIGTRAP nostop noprint nopass", "-ex", "break checkpoint"])
        .args(["-ex", "continue", "-ex", "continue", "-ex", "info threads", "-ex", "delete", "-ex", "detach"])
        .output()
        .expect("gdb");
    let run = finish(child);
    let gdb_out = String::from_utf8_lossy(&gdb.stdout).to_string() + &String::from_utf8_lossy(&gdb.stderr);
    assert!(gdb.status.success(), "gdb: {}\n{gdb_out}", gdb.status);
    assert_eq!(gdb_out.matches("hit Breakpoint 1, checkpoint").count(), 2, "{gdb_out}");
    assert!(!gdb_out.contains("received signal"), "{gdb_out}");
    let threads = gdb_out.lines().filter(|l| l.contains("gdb_busy") && l.contains("(LWP ")).count();
    assert_eq!(threads, 3, "{gdb_out}");
    let (stderr, plain_out) = (String::from_utf8_lossy(&run.stderr), String::from_utf8_lossy(&plain.stdout));
    assert_eq!(plain_out, "stopped 2 workers\n");
    assert_eq!((run.status.code(), String::from_utf8_lossy(&run.stdout)), (plain.status.code(), plain_out), "{stderr}");
    assert!(!stderr.contains("racewatch"), "{stderr}");
}

/// A program that closes every descriptor number (`close`, `closefrom`, `close_range`) and parks a pipe at
/// the top of its descriptor range with `dup2`, over racewatch's descriptors (tests/host/fd_scan.c): its
/// counts are those without racewatch (checked by the case `fds_scanned_closed_and_parked_high`), and
/// detection goes on: a race between the functions its threads switch to afterwards is reported.
#[test]
fn races_after_a_program_closed_every_descriptor_are_reported() {
    if skip_detection() {
        return;
    }
    let Some(bin) = program("fd_scan") else { return };
    let case = case("fd_scan_detects", "fd_scan", &[]);
    let plain = run_case(&case, Mode::Direct, &bin, "", &[]);
    let mut attempt = 0;
    let (_, runs) = retry_for(Duration::from_secs(60), || {
        attempt += 1;
        let run = run_case(&case, Mode::Sampled, &bin, &format!("{attempt}-"), &[]);
        if (run.status.as_str(), run.stdout.as_str()) != (plain.status.as_str(), plain.stdout.as_str()) {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        if run.stderr.contains("race detection is off") {
            return Err(format!("racewatch stepped aside:\n{}", run.stderr));
        }
        Ok(run.stderr.contains("in rw_varied").then_some(()))
    })
    .unwrap_or_else(|why| panic!("fd_scan: {why}"));
    eprintln!("a race after the closes reported in run {runs}");
}

/// A race that starts after `main` called `pthread_exit` is found and printed on stderr: the sampler
/// reads the code it follows through a live thread's id (the process id names the main thread, whose
/// memory is gone: every read failed, and 770 of 781 samples found nothing to follow), and the reporter
/// reaches the process's stderr through a live thread (the process's pidfd names the main thread, whose
/// descriptor table is gone; before, such a report was counted as not written, set 31 p03).
#[test]
fn races_after_main_called_pthread_exit_are_reported() {
    if skip_detection() {
        return;
    }
    let Some(bin) = program("pthread_exit_main") else { return };
    let runs =
        reported_within_a_minute(&case("pthread_exit_main_detects", "pthread_exit_main", &["late-workers"]), &bin);
    eprintln!("a race after main's pthread_exit reported in run {runs}");
}

/// Runs `case` at the debug rate until a race report is printed (at most a minute), each run's status and
/// stdout those of the run without racewatch; the number of runs it took.
fn reported_within_a_minute(case: &Case, bin: &Path) -> usize {
    let plain = run_case(case, Mode::Direct, bin, "", &[]);
    let mut attempt = 0;
    let (_, runs) = retry_for(Duration::from_secs(60), || {
        attempt += 1;
        let run = run_case(case, Mode::Sampled, bin, &format!("{attempt}-"), &[]);
        if run.stdout != plain.stdout || run.status != plain.status {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(run.stderr.contains(REPORT_HEADER).then_some(()))
    })
    .unwrap_or_else(|why| panic!("{}: {why}", case.program));
    runs
}

/// Races in programs whose static thread-local block is large (240 KiB, 1 MiB of `__thread` arrays) are
/// printed: the reporter thread's stack has room for that block on top of its own (before: with 240 KiB
/// it overflowed, with 1 MiB it never started and every report was dropped without a word).
#[test]
fn races_in_programs_with_large_tls_blocks_are_reported() {
    if skip_detection() {
        return;
    }
    for name in ["big_tls", "huge_tls"] {
        let Some(bin) = program(name) else { return };
        let runs = reported_within_a_minute(&case("large_tls_detects", name, &[]), &bin);
        eprintln!("{name}: a race reported in run {runs}");
    }
}

/// A module `dlopen`ed while the program's (race-free) threads run, with a function that would install a seccomp
/// filter with its own `syscall` instruction: the reporter's periodic check sees that the loader's
/// counts of loaded modules changed, finds the instruction, and detection goes off before the program
/// could call it.
#[test]
fn a_raw_seccomp_instruction_in_a_module_loaded_later_is_found() {
    if skip_detection() {
        return;
    }
    let Some(clang) = clang() else { return };
    let dir = scratch("sandbox-dlopen");
    let lib_src = dir.join("sandbox_lib.c");
    std::fs::write(
        &lib_src,
        "long install_filter(long a, long b, long c) { long r; __asm__ volatile(\"mov $317, %%eax\\n\\tsyscall\" \
         : \"=a\"(r) : \"D\"(a), \"S\"(b), \"d\"(c) : \"rcx\", \"r11\", \"memory\"); return r; }\n",
    )
    .unwrap();
    let lib = dir.join("libsandbox.so");
    check(
        Command::new(&clang).args(["-O1", "-shared", "-fPIC"]).arg(&lib_src).arg("-o").arg(&lib).output().unwrap(),
        "clang -shared",
    );
    let main = build_c(
        &clang,
        &dir,
        "dlopen_sandbox",
        "#include <dlfcn.h>\n#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         static volatile int stop;\n\
         static void *work(void *a) { volatile long own = 0; while (!stop) own++; return a; }\n\
         int main(int argc, char **argv) { (void)argc; pthread_t t[2];\n\
           for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, work, 0);\n\
           usleep(200000); void *h = dlopen(argv[1], RTLD_NOW); printf(\"dlopen: %s\\n\", h ? \"ok\" : dlerror());\n\
           usleep(400000); stop = 1; for (int i = 0; i < 2; i++) pthread_join(t[i], 0); return 0; }\n",
        &["-pthread", "-ldl"],
    );
    let out = common::racewatch().args(["run", "-o", "fail_on_race=0", "--"]).arg(&main).arg(&lib).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout, "dlopen: ok\n", "{stderr}");
    let line = "installs seccomp filters with its own system call instruction; race detection is off";
    let found: Vec<&str> = stderr.lines().filter(|l| l.contains(line)).collect();
    assert_eq!(found.len(), 1, "one step-aside line expected:\n{stderr}");
    assert!(found[0].contains(&format!("{}+0x", lib.display())), "names the module: {}", found[0]);
}

/// A plugin host: it opens `./plugin.so` by a relative path and moves to another directory (where a FIFO
/// has the same name) while the plugin's threads race; unloads it and checks `/proc/self/maps`; rewrites
/// the file in place with a smaller build (truncate and write, as `cp` does) and loads it again. Reports
/// name the plugin's source lines (its file is found where the kernel mapped it, not by the name
/// relative to the directory now), the unloaded plugin is no longer mapped, and the rewritten file is
/// never read through the old mapping (a read past its new end was a SIGBUS that killed the host).
#[test]
fn a_plugin_opened_by_relative_path_and_reloaded_in_place() {
    if skip_detection() {
        return;
    }
    let Some(clang) = clang() else { return };
    let dir = scratch("plugin-reload");
    let plugin = "#include <pthread.h>\n#include <stdatomic.h>\n\
        static atomic_int stop; static pthread_t t[2]; long plugin_counter;\n\
        #ifdef BIG\nstatic const char pad[2 << 20] = {1}; const char *plugin_pad = pad;\n#endif\n\
        __attribute__((noinline)) static void bump(void) { plugin_counter++; }\n\
        static void *run(void *a) { while (!atomic_load(&stop)) bump(); return a; }\n\
        __attribute__((constructor)) static void start(void) { for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, run, 0); }\n\
        __attribute__((destructor)) static void end(void) { atomic_store(&stop, 1); for (int i = 0; i < 2; i++) pthread_join(t[i], 0); }\n";
    let src = dir.join("plugin.c");
    std::fs::write(&src, plugin).unwrap();
    for (out, extra) in [("v1.so", &["-DBIG"][..]), ("v2.so", &[][..])] {
        let mut cmd = Command::new(&clang);
        cmd.args(racewatch_instrument::toolchain::C_FLAGS)
            .args(["-O1", "-g", "-shared", "-fPIC", "-pthread"])
            .args(extra)
            .arg(&src);
        check(cmd.arg("-o").arg(dir.join(out)).output().unwrap(), "clang -shared");
    }
    std::fs::create_dir_all(dir.join("other")).unwrap();
    let fifo = dir.join("other/plugin.so");
    if !fifo.exists() {
        check(Command::new("mkfifo").arg(&fifo).output().unwrap(), "mkfifo");
    }
    let host = build_c(
        &clang,
        &dir,
        "plugin_host",
        "#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n\
         static int mapped(const char *name) { FILE *f = fopen(\"/proc/self/maps\", \"r\"); char l[4096]; int n = 0;\n\
           while (fgets(l, sizeof l, f)) if (strstr(l, name)) n++; fclose(f); return n; }\n\
         static void copy(const char *from, const char *to) { FILE *in = fopen(from, \"rb\"), *out = fopen(to, \"wb\");\n\
           char b[65536]; size_t k; while ((k = fread(b, 1, sizeof b, in)) > 0) fwrite(b, 1, k, out); fclose(in); fclose(out); }\n\
         int main(int argc, char **argv) { useconds_t us = (useconds_t)(atof(argv[1]) * 1e6);\n\
           copy(\"v1.so\", \"plugin.so\"); void *h = dlopen(\"./plugin.so\", RTLD_NOW);\n\
           if (!h) { printf(\"dlopen: %s\\n\", dlerror()); return 1; }\n\
           if (chdir(\"other\") != 0) return 1; usleep(us); dlclose(h);\n\
           printf(\"round 0 done, mapped after dlclose: %d\\n\", mapped(\"plugin.so\"));\n\
           if (chdir(\"..\") != 0) return 1; copy(\"v2.so\", \"plugin.so\"); h = dlopen(\"./plugin.so\", RTLD_NOW);\n\
           if (!h) { printf(\"dlopen: %s\\n\", dlerror()); return 1; }\n\
           usleep(us); dlclose(h); printf(\"round 1 done\\n\"); return 0; }\n",
        &["-ldl"],
    );
    let (run, runs) = retry_for(Duration::from_secs(60), || {
        let mut cmd = common::racewatch();
        cmd.current_dir(&dir).args(["run", "-o", "sample_period_us=1000", "-o", "fail_on_race=0", "--"]);
        cmd.arg(&host).arg("1.5");
        let start = Instant::now();
        let run = common::spawn_and_wait(cmd);
        let elapsed = start.elapsed().as_secs_f64();
        if run.status.code() != Some(0)
            || run.stdout != "round 0 done, mapped after dlclose: 0\nround 1 done\n"
            || elapsed > 10.0
        {
            return Err(format!("{} after {elapsed:.1} s:\n{}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(common::has_report(&run.stderr).then_some(run))
    })
    .unwrap_or_else(|why| panic!("{why}"));
    assert!(run.stderr.contains("plugin.c:"), "the plugin's frames are named by source line:\n{}", run.stderr);
    eprintln!("plugin host: a report after {runs} run(s)");
}

/// Another interposer preloaded after racewatch (`LD_PRELOAD=<runtime>:shim.so`, as `racewatch run` leaves
/// a user's own preload) counts the program's `pthread_create`, `sigaction`, `clock_gettime`, `ioctl` and
/// `mmap` calls only, as without racewatch: racewatch's own thread, `SIGTRAP` handler, clock reads (a clock
/// library such as libfaketime would otherwise answer them with its own time), perf event controls and
/// mappings go to libc directly (`sys::own_imports`).
#[test]
fn an_interposer_preloaded_after_racewatch_sees_only_the_program() {
    if skip_detection() {
        return;
    }
    let Some(clang) = clang() else { return };
    let dir = scratch("interposer-after");
    let shim = "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <pthread.h>\n#include <signal.h>\n#include <stdio.h>\n\
        #include <link.h>\n#include <stdarg.h>\n#include <sys/mman.h>\n#include <time.h>\n\
        static long creates, actions, foreign_clocks, foreign_ioctls, foreign_mmaps;\n\
        static unsigned long exe_start, exe_end;\n\
        static int first_object(struct dl_phdr_info *i, size_t size, void *data) { (void)size; (void)data;\n\
          for (int k = 0; k < i->dlpi_phnum; k++) if (i->dlpi_phdr[k].p_type == PT_LOAD) {\n\
            unsigned long lo = i->dlpi_addr + i->dlpi_phdr[k].p_vaddr, hi = lo + i->dlpi_phdr[k].p_memsz;\n\
            if (!exe_start || lo < exe_start) exe_start = lo; if (hi > exe_end) exe_end = hi; }\n\
          return 1; }\n\
        __attribute__((constructor)) static void find_program(void) { dl_iterate_phdr(first_object, 0); }\n\
        int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {\n\
          int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) = dlsym(RTLD_NEXT, \"pthread_create\");\n\
          creates++; return real(t, a, f, arg); }\n\
        int sigaction(int s, const struct sigaction *n, struct sigaction *o) {\n\
          int (*real)(int, const struct sigaction *, struct sigaction *) = dlsym(RTLD_NEXT, \"sigaction\");\n\
          if (n) actions++; return real(s, n, o); }\n\
        int clock_gettime(clockid_t c, struct timespec *ts) {\n\
          int (*real)(clockid_t, struct timespec *) = dlsym(RTLD_NEXT, \"clock_gettime\");\n\
          unsigned long caller = (unsigned long)__builtin_return_address(0);\n\
          if (caller < exe_start || caller >= exe_end) __atomic_fetch_add(&foreign_clocks, 1, __ATOMIC_RELAXED);\n\
          return real(c, ts); }\n\
        static int foreign(void *caller) { unsigned long at = (unsigned long)caller; return at < exe_start || at >= exe_end; }\n\
        int ioctl(int fd, unsigned long request, ...) {\n\
          va_list ap; va_start(ap, request); void *arg = va_arg(ap, void *); va_end(ap);\n\
          int (*real)(int, unsigned long, void *) = dlsym(RTLD_NEXT, \"ioctl\");\n\
          if (foreign(__builtin_return_address(0))) __atomic_fetch_add(&foreign_ioctls, 1, __ATOMIC_RELAXED);\n\
          return real(fd, request, arg); }\n\
        void *mmap(void *a, size_t n, int p, int f, int fd, off_t o) {\n\
          void *(*real)(void *, size_t, int, int, int, off_t) = dlsym(RTLD_NEXT, \"mmap\");\n\
          if (foreign(__builtin_return_address(0))) __atomic_fetch_add(&foreign_mmaps, 1, __ATOMIC_RELAXED);\n\
          return real(a, n, p, f, fd, o); }\n\
        __attribute__((destructor)) static void report(void) {\n\
          printf(\"shim: pthread_create %ld, sigaction %ld; not from the program: clock_gettime %ld, ioctl %ld, mmap %ld\\n\",\n\
                 creates, actions, foreign_clocks, foreign_ioctls, foreign_mmaps); }\n";
    std::fs::write(dir.join("shim.c"), shim).unwrap();
    let mut cmd = Command::new(&clang);
    cmd.args(["-O1", "-shared", "-fPIC"]).arg(dir.join("shim.c")).arg("-o").arg(dir.join("shim.so")).arg("-ldl");
    check(cmd.output().unwrap(), "clang -shared");
    let Some(host) = program("race_only") else { return };
    let shim_lib = dir.join("shim.so");
    let run_with = |racewatch: bool| {
        let mut cmd = if racewatch {
            let mut cmd = common::racewatch();
            cmd.args(["run", "-o", "sample_period_us=1000", "-o", "fail_on_race=0", "--"]).arg(&host);
            cmd
        } else {
            Command::new(&host)
        };
        cmd.env("LD_PRELOAD", &shim_lib);
        common::spawn_and_wait(cmd)
    };
    let plain = run_with(false);
    assert!(plain.stdout.contains("shim: pthread_create"), "the shim did not run: {}", plain.stdout);
    let (run, _) = retry_for(Duration::from_secs(20), || {
        let run = run_with(true);
        if run.stdout != plain.stdout || run.status.code() != plain.status.code() {
            return Err(format!(
                "with racewatch before the shim: {:?} {} instead of {:?}",
                run.stdout, run.status, plain.stdout
            ));
        }
        Ok(common::has_report(&run.stderr).then_some(run))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.stdout, plain.stdout);
}

// ---- The detector really runs in these programs ----

/// These tests need racewatch: they have nothing to check in a self-check run.
fn skip_detection() -> bool {
    if self_check() {
        eprintln!("SKIP: RACEWATCH_HOST_SELF_CHECK runs without racewatch");
    }
    self_check()
}

fn find_case(name: &str) -> Case {
    cases().into_iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"))
}

/// Every value of `racewatch: stats: <label>: N`, in order (one block per process that printed stats).
fn stat_values(stderr: &str, label: &str) -> Vec<u64> {
    let prefix = format!("racewatch: stats: {label}: ");
    stderr.lines().filter_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok()).collect()
}

#[test]
fn the_programs_really_race_under_the_detector() {
    if skip_detection() {
        return;
    }
    // A suite whose programs never arm a watchpoint would test nothing.
    let Some(_) = programs() else { return };
    let racing = [
        case("race_only", "race_only", &[]),
        find_case("itimer_siglongjmp"),
        find_case("fds_dup2_over_all"),
        find_case("rlimit_as_40_mib"),
    ];
    let results = parallel_map(&racing, |case| {
        let bin = program(case.program).expect("built");
        let run = run_case(case, Mode::Sampled, &bin, "stats-", &["stats=1"]);
        (case.name, stat(&run.stderr, "watches armed").unwrap_or(0), stats_summary(&run.stderr))
    });
    for (name, armed, summary) in &results {
        eprintln!("{name}: watches armed {armed}; {summary}");
    }
    assert!(
        results.iter().any(|(_, armed, _)| *armed > 0),
        "no program armed a watchpoint at {SAMPLE_PERIOD}: the suite would test nothing"
    );
}

#[test]
fn a_namespace_init_keeps_sampling_after_a_sigtrap_from_inside() {
    if skip_detection() {
        return;
    }
    let Some(bin) = program("pid1") else { return };
    // The init of a PID namespace: a SIGTRAP its child sends at the default disposition is dropped by
    // the kernel; racewatch must drop it too, not hand SIGTRAP back to SIG_DFL (which stopped sampling
    // for good). Samples with and without the signal, each run once, in the same conditions.
    let samples = |arg: &str| {
        let out = Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(env!("CARGO_BIN_EXE_racewatch"))
            .args(["run", "-o", "fail_on_race=0", "-o", "sample_period_us=1000", "-o", "stats=1", "--"])
            .arg(&bin)
            .arg(arg)
            .env_remove("RACEWATCH_OPTIONS")
            .output()
            .expect("run unshare");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (stdout, stat(&stderr, "samples"), stats_summary(&stderr))
    };
    let probe = samples("quiet");
    if !probe.0.contains("pid 1 survived") {
        eprintln!("SKIP: no PID namespace here (unshare --pid --fork): {}", probe.0);
        return;
    }
    let (out, with_kill, summary) = samples("kill");
    assert!(out.contains("pid 1 survived"), "{out}");
    let without = probe.1.unwrap_or(0);
    let with_kill = with_kill.unwrap_or(0);
    assert!(
        with_kill * 2 >= without,
        "samples fell from {without} to {with_kill} after a SIGTRAP from inside the namespace (sampling stopped); {summary}"
    );
}

/// The init of a PID namespace with two race-free workers forks three children: they get the pids they
/// get without racewatch (the namespace hands pids out in order, and a thread of racewatch's would take
/// one; a reporter thread, started only after a race, takes one, as documented).
#[test]
fn children_of_a_namespace_init_get_the_pids_they_get_without_racewatch() {
    let Some(bin) = program("pid1") else { return };
    let run = |racewatch: &[&str]| {
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--"]);
        if !racewatch.is_empty() {
            cmd.arg(env!("CARGO_BIN_EXE_racewatch")).args(["run", "-o", "fail_on_race=0"]).args(racewatch).arg("--");
        }
        let out = cmd.arg(&bin).arg("pids").env_remove("RACEWATCH_OPTIONS").output().expect("run unshare");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = run(&[]);
    if !plain.contains("child 2: pid") {
        eprintln!("SKIP: no PID namespace here (unshare --pid --fork): {plain}");
        return;
    }
    for options in [&["-o", "verbosity=0"][..], &["-o", SAMPLE_PERIOD][..]] {
        assert_eq!(run(options), plain, "{options:?}");
    }
}

#[test]
fn a_parent_keeps_sampling_after_its_forked_children_exit() {
    if skip_detection() {
        return;
    }
    let case = find_case("fork_children_exit");
    let Some(bin) = program(case.program) else { return };
    let run = run_case(&case, Mode::Sampled, &bin, "stats-", &["stats=1"]);
    assert_eq!(run.status, "exit 0", "{}", tail(&run.stderr, 40));
    assert!(run.stdout.contains("children that exited 0: 20\n"), "{}", run.stdout);
    // Stats are printed at each process's exit; the parent (which races 1.5 s after its last child) is last.
    // Had a child's exit switched the parent's sampling off (the forks take the first ~0.2 s), the parent
    // could not have taken more than ~400 samples (2 threads x 0.2 s of CPU at 1 ms).
    let samples = stat_values(&run.stderr, "samples").last().copied();
    let armed = stat_values(&run.stderr, "watches armed").last().copied();
    assert!(
        samples.is_some_and(|n| n >= 500) && armed.is_some_and(|n| n > 0),
        "the parent took {samples:?} samples and armed {armed:?} watches in 1.5 s of racing after its children \
         exited (want >= 500 samples and some watches); stats: {}",
        stats_summary(&run.stderr)
    );
}

#[test]
fn pre_forked_workers_are_reported_with_their_own_pid() {
    if skip_detection() {
        return;
    }
    // "pids": the parent also prints its workers' pids.
    let case = Case { args: &["pids"], ..find_case("prefork_workers") };
    let Some(bin) = program(case.program) else { return };
    let result = retry_for(Duration::from_secs(30), || {
        let run = run_case(&case, Mode::Sampled, &bin, "detect-", &[]);
        if run.status != "exit 0" {
            return Err(format!("status {}:\n{}", run.status, tail(&run.stderr, 40)));
        }
        let workers: Vec<u32> =
            run.stdout.lines().filter_map(|l| l.strip_prefix("worker pid ")?.parse().ok()).collect();
        if workers.len() != 2 {
            return Err(format!("expected two worker pids on stdout:\n{}", run.stdout));
        }
        let reported: Vec<u32> = run
            .stderr
            .lines()
            .filter_map(|l| {
                l.strip_prefix(REPORT_HEADER)?.trim().strip_prefix("(pid=")?.strip_suffix(')')?.parse().ok()
            })
            .collect();
        if let Some(other) = reported.iter().find(|pid| !workers.contains(pid)) {
            return Err(format!(
                "a report names pid {other}, not a worker {workers:?} (the parent {} never starts a thread)",
                run.pid
            ));
        }
        Ok(reported.first().copied())
    });
    match result {
        Ok((pid, runs)) => eprintln!("prefork: worker pid {pid} reported after {runs} run(s)"),
        Err(why) => panic!("no race report from a pre-forked worker: {why}"),
    }
}

/// `stats=1` prints the counters when the program dies of a signal, once, and it still dies of it.
#[test]
fn stats_are_printed_when_the_program_dies_of_a_signal() {
    let Some(_) = programs() else { return };
    let cases = [find_case("stats_at_abort"), find_case("stats_at_segv"), find_case("stats_at_sigterm")];
    let results = parallel_map(&cases, |case| {
        let bin = program(case.program).expect("built");
        run_case(case, Mode::Sampled, &bin, "fatal-", &[])
    });
    for (case, run) in cases.iter().zip(&results) {
        assert_eq!(run.status, case.status, "{}: {}", case.name, tail(&run.stderr, 20));
        let printed = run.stderr.matches("racewatch: stats: samples: ").count();
        assert_eq!(printed, 1, "{}: stats printed {printed} times:\n{}", case.name, tail(&run.stderr, 60));
    }
}

/// A program that caps RLIMIT_NOFILE at 1024/1024 before its first thread, without CAP_SYS_RESOURCE (so
/// no one can raise the hard limit again), is still watched: racewatch reports its race at the debug rate
/// and never says it could not open the sampling timer.
#[test]
fn races_are_detected_under_a_nofile_limit_without_cap_sys_resource() {
    if skip_detection() {
        return;
    }
    let case = find_case("nofile_1024_before_threads_without_cap_sys_resource");
    let Some(bin) = program(case.program) else { return };
    let result = retry_for(Duration::from_secs(30), || {
        let run = run_case(&case, Mode::Sampled, &bin, "detect-", &[]);
        if run.status != "exit 0" {
            return Err(format!("status {}:\n{}", run.status, tail(&run.stderr, 40)));
        }
        if let Some(line) = run.stderr.lines().find(|l| l.contains("cannot open the sampling timer")) {
            return Err(format!("racewatch could not sample under the limit: {line}"));
        }
        Ok(run.stderr.contains(REPORT_HEADER).then_some(()))
    });
    match result {
        Ok(((), runs)) => eprintln!("nofile 1024 without CAP_SYS_RESOURCE: reported after {runs} run(s)"),
        Err(why) => panic!("no race report under RLIMIT_NOFILE 1024/1024 without CAP_SYS_RESOURCE: {why}"),
    }
}

/// `target/release/libracewatch.so`, what `cargo build --release` leaves (the runtime crate built on its
/// own, without the `preload` feature the CLI's embedded copy has), preloaded by hand into a racing
/// covered program: it either detects the race at the debug rate or says at start-up, in one line, which
/// file to preload instead.
#[test]
fn the_release_build_library_detects_or_names_the_file_to_use() {
    if skip_detection() {
        return;
    }
    let Some(bin) = program("race_only") else { return };
    // CARGO_BIN_EXE_racewatch is <target>/<profile>/racewatch.
    let target = Path::new(env!("CARGO_BIN_EXE_racewatch")).parent().and_then(Path::parent).expect("target dir");
    let lib = target.join("release").join("libracewatch.so");
    if !lib.exists() {
        eprintln!("SKIP: {} does not exist (cargo build --release makes it)", lib.display());
        return;
    }
    let result = retry_for(Duration::from_secs(10), || {
        let mut cmd = Command::new(&bin);
        cmd.env("LD_PRELOAD", &lib).env("RACEWATCH_OPTIONS", SAMPLE_PERIOD);
        let run = common::spawn_and_wait(cmd);
        if run.status.code() != Some(0) || run.stdout != "done\n" {
            return Err(format!(
                "the program did not run as without it: status {}, stdout {:?}\n{}",
                run.status,
                run.stdout,
                tail(&run.stderr, 20)
            ));
        }
        if run.stderr.contains(REPORT_HEADER) {
            return Ok(Some("detected the race".to_string()));
        }
        let ours: Vec<&str> = run.stderr.lines().filter(|l| l.contains("racewatch")).collect();
        match ours.as_slice() {
            [] => Ok(None),
            [line] if run.stderr.lines().next() == Some(*line) && line.contains(".so") => {
                Ok(Some(format!("said: {line}")))
            }
            _ => Err(format!("neither a report nor one line naming the file to use:\n{}", tail(&run.stderr, 20))),
        }
    });
    match result {
        Ok((what, runs)) => eprintln!("{}: {what} (run {runs})", lib.display()),
        Err(why) => panic!(
            "{} preloaded into a racing program at {SAMPLE_PERIOD}: no report and no line saying which file to \
             use: {why}",
            lib.display()
        ),
    }
}
