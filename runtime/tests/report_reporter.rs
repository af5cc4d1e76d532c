//! The reporter from race event to printed report: symbolization of real PCs
//! of this test binary, thread naming, deduplication of PC pairs,
//! suppressions, JSON, Rust stacks cut at std's short-backtrace marker, and
//! (in child processes) the reporter thread with `halt_on_error` and the
//! exit-time drain.

use racewatch::event::{AccessRecord, RaceEvent, Stack};
use racewatch::options::{Options, ReportFormat};
use racewatch::reporter::{self, Config, Reporter};
use racewatch::suppressions::Suppressions;
use racewatch::symbolize::Symbolizer;
use racewatch::{queue, report};
use std::process::Command;

#[inline(never)]
fn writer_side() -> u64 {
    1
}
/// `writer_side`'s closing brace (column 2 in text reports): in every profile its only
/// instruction is there.
const WRITER_LINE: u32 = line!() - 3;

#[inline(never)]
fn reader_side() -> u64 {
    2
}
const READER_LINE: u32 = line!() - 1;

fn pc_of(function: fn() -> u64) -> u64 {
    function as *const () as u64
}

fn record(tid: i32, function: fn() -> u64, is_write: bool, addr: u64) -> AccessRecord {
    AccessRecord {
        tid,
        pc: pc_of(function),
        addr,
        size: 8,
        is_write,
        is_atomic: false,
        locked: false,
        stack: Stack::from_pcs(&[pc_of(function)]),
    }
}

fn event(current_tid: i32, previous_tid: i32) -> RaceEvent {
    RaceEvent {
        current: record(current_tid, writer_side, true, 0x7f00_0000_1000),
        previous: record(previous_tid, reader_side, false, 0x7f00_0000_1000),
    }
}

fn config(format: ReportFormat, suppressions: &[&str]) -> Config {
    Config {
        format,
        halt_on_error: false,
        exitcode: 66,
        suppressions: Suppressions {
            patterns: suppressions.iter().map(|s| s.to_string()).collect(),
            ..Suppressions::default()
        },
        stats: false,
        report_atomic_races: true,
        report_volatile_races: false,
        full_stacks: false,
        atomic_code: Vec::new(),
        symbolize: true,
        host: Some("test-host".into()),
        app_version: None,
    }
}

#[test]
fn accesses_in_atomic_code_are_atomic_and_two_of_them_do_not_race() {
    // Only the reader side is in "atomic code": a plain write racing an atomic read is still a race...
    let mut reporter =
        Reporter::new(Config { atomic_code: vec!["reader_side".into()], ..config(ReportFormat::Text, &[]) }, 1);
    let text = reporter.render(&event(10, 11)).expect("plain vs atomic is a race");
    assert!(text.contains("Previous atomic read"), "{text}");
    // ...unless plain-vs-atomic races are off.
    let mut reporter = Reporter::new(
        Config {
            atomic_code: vec!["reader_side".into()],
            report_atomic_races: false,
            ..config(ReportFormat::Text, &[])
        },
        1,
    );
    assert!(reporter.render(&event(10, 11)).is_none());
    // Both sides in atomic code (a file pattern this time): not a race.
    let mut reporter =
        Reporter::new(Config { atomic_code: vec!["report_reporter.rs".into()], ..config(ReportFormat::Text, &[]) }, 1);
    assert!(reporter.render(&event(10, 11)).is_none());
}

#[test]
fn text_report_names_both_stacks_and_threads() {
    let pid = 4000;
    let mut reporter = Reporter::new(config(ReportFormat::Text, &[]), pid);
    let text = reporter.render(&event(4002, 4000)).expect("first report");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], report::SEPARATOR);
    assert_eq!(lines[1], "WARNING: racewatch: data race (pid=4000)");
    assert_eq!(lines[2], "  Write of size 8 at 0x7f0000001000 by thread T1 (tid 4002):");
    let writer =
        format!("    #0 report_reporter::writer_side tests/report_reporter.rs:{WRITER_LINE}:2 (report_reporter-");
    assert!(lines[3].starts_with(&writer), "{text}");
    assert_eq!(lines[4], "  Previous read of size 8 at 0x7f0000001000 by thread T0 (tid 4000):");
    let reader =
        format!("    #0 report_reporter::reader_side tests/report_reporter.rs:{READER_LINE}:2 (report_reporter-");
    assert!(lines[5].starts_with(&reader), "{text}");
    // 0x7f0000001000 is no variable of this process.
    assert_eq!(lines[6], "  Location is heap or unknown memory");
    assert!(lines[7].starts_with("  Keys: race_key="), "{text}");
    assert_eq!(
        lines[8],
        format!(
            "SUMMARY: racewatch: data race tests/report_reporter.rs:{WRITER_LINE}:2 in report_reporter::writer_side / \
             tests/report_reporter.rs:{READER_LINE}:2 in report_reporter::reader_side"
        )
    );
    assert_eq!(lines[9], report::SEPARATOR);
    assert_eq!(lines.len(), 10);
}

#[inline(never)]
fn send_local_and_wait(ready: &std::sync::mpsc::Sender<(i32, u64)>, done: &std::sync::mpsc::Receiver<()>) {
    let local = 0u64;
    ready.send((racewatch::sys::thread::gettid(), std::hint::black_box(&local) as *const u64 as u64)).unwrap();
    done.recv().unwrap();
}

/// A global of this test binary, raced on in the reports below.
static SHARED_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The test's own thread (libtest names it after the test), a named thread this test creates with a
/// recorded creation, and the memory: a global, then a recorded thread's stack. (The same facts in
/// JSON: `report`'s unit tests.)
#[test]
fn reports_name_threads_their_test_their_creation_and_the_memory() {
    use racewatch::sys::creation::{self, Creation};
    let pid = std::process::id();
    let me = racewatch::sys::thread::gettid();
    SHARED_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let global = &SHARED_COUNTER as *const _ as u64;
    // A named thread, created "by" this test's thread at writer_side (a return address inside it).
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let creator = Creation { creator: me, len: 1, pcs: [pc_of(writer_side) + 4; creation::FRAMES], ..Creation::NONE };
    let helper = std::thread::Builder::new()
        .name("rw-helper".into())
        .spawn(move || {
            creation::started(&creator, 256 << 10, racewatch::sys::stacks::current_sp() as u64);
            // Below the frame that recorded the stack, as the program's frames are below the interposer's.
            send_local_and_wait(&ready_tx, &done_rx);
        })
        .unwrap();
    let (helper_tid, helper_local) = ready_rx.recv().unwrap();

    let mut race = event(helper_tid, me);
    race.current.addr = global;
    race.previous.addr = global;
    let mut reporter = Reporter::new(config(ReportFormat::Text, &[]), pid);
    let text = reporter.render(&race).expect("a report");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[2],
        format!("  Write of size 8 at {global:#x} by thread T1 'rw-helper' (tid {helper_tid}):"),
        "{text}"
    );
    // libtest's thread for this test: its name is the test's (cut to 15 bytes), resolved to the whole
    // path from the binary's functions.
    let test = "reports_name_threads_their_test_their_creation_and_the_memory";
    assert_eq!(
        lines[4],
        format!("  Previous read of size 8 at {global:#x} by thread T2 '{}' (tid {me}) in test {test}:", &test[..15]),
        "{text}"
    );
    assert!(
        lines[6].starts_with(&format!(
            "  Location is global 'report_reporter::SHARED_COUNTER' of size 8 at {global:#x} (report_reporter-"
        )),
        "{text}"
    );
    assert_eq!(
        lines[7],
        format!("  Thread T1 'rw-helper' (tid {helper_tid}) created by thread T2 '{}' (tid {me}) at:", &test[..15]),
        "{text}"
    );
    assert!(lines[8].starts_with("    #0 report_reporter::writer_side tests/report_reporter.rs:"), "{text}");
    // No creation known for this test's thread (libtest made it before anything was recorded).
    assert!(lines[9].starts_with("  Keys: race_key="), "{text}");
    assert!(lines[10].starts_with("SUMMARY: "), "{text}");

    // Another pair of lines (the same reporter: its debug info is read once), on the helper's stack.
    let mut race = event(helper_tid, me);
    race.previous = record(me, writer_side, false, helper_local);
    race.current.addr = helper_local;
    let text = reporter.render(&race).expect("a report");
    assert!(text.contains(&format!("\n  Location is stack of thread T1 'rw-helper' (tid {helper_tid})\n")), "{text}");
    done_tx.send(()).unwrap();
    helper.join().unwrap();
}

#[test]
fn each_unordered_pair_of_source_locations_is_reported_once() {
    let mut reporter = Reporter::new(config(ReportFormat::Text, &[]), 1);
    assert!(reporter.render(&event(10, 11)).is_some());
    assert!(reporter.render(&event(12, 13)).is_none(), "same PCs, other threads");
    let mut swapped = event(11, 10);
    std::mem::swap(&mut swapped.current, &mut swapped.previous);
    assert!(reporter.render(&swapped).is_none(), "same pair in the other order");
    // Another PC inside the same instruction (so on the same source line): the same race.
    let mut same_line = event(10, 11);
    same_line.previous.pc += 1;
    assert!(reporter.render(&same_line).is_none(), "another PC of the same line");
    let mut other = event(10, 11);
    other.previous = record(11, writer_side, false, 0x7f00_0000_1000);
    let text = reporter.render(&other).expect("a different pair of lines is new");
    // Thread numbers stay stable across reports.
    assert!(text.contains("by thread T1 (tid 10):") && text.contains("by thread T2 (tid 11):"), "{text}");
}

#[test]
fn suppressions_match_functions_and_files_of_either_stack() {
    for pattern in ["reader_side", "report_reporter.rs", "writer_side"] {
        let mut reporter = Reporter::new(config(ReportFormat::Text, &[pattern]), 1);
        assert!(reporter.render(&event(2, 3)).is_none(), "{pattern} should suppress");
    }
    let mut reporter = Reporter::new(config(ReportFormat::Text, &["no_such_function"]), 1);
    assert!(reporter.render(&event(2, 3)).is_some());
    // Suppressed races do not use up thread numbers.
    let mut reporter = Reporter::new(config(ReportFormat::Text, &["reader_side"]), 1);
    assert!(reporter.render(&event(2, 3)).is_none());
    let mut other = event(4, 5);
    other.previous = record(5, writer_side, false, 0x10);
    let text = reporter.render(&other).unwrap();
    assert!(text.contains("by thread T1 (tid 4):") && text.contains("by thread T2 (tid 5):"), "{text}");
}

#[test]
fn json_report_is_one_parseable_line() {
    let mut reporter = Reporter::new(config(ReportFormat::Json, &[]), 77);
    let line = reporter.render(&event(78, 77)).unwrap();
    assert_eq!(line.matches('\n').count(), 1);
    let value: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(value["kind"], "data_race");
    assert_eq!(value["pid"], 77);
    let accesses = value["accesses"].as_array().unwrap();
    assert_eq!(accesses[0]["kind"], "write");
    assert_eq!(accesses[0]["thread"], "T1");
    assert_eq!(accesses[1]["thread"], "T0");
    assert_eq!(accesses[0]["stack"][0]["function"], "report_reporter::writer_side");
    assert_eq!(accesses[1]["stack"][0]["function"], "report_reporter::reader_side");
    assert_eq!(accesses[1]["stack"][0]["line"], READER_LINE);
    assert_eq!(accesses[1]["stack"][0]["file"], "tests/report_reporter.rs");
    assert_eq!(accesses[0]["address"], "0x7f0000001000");
}

/// The run-time address of the first function of this test binary whose
/// demangled name contains `needle` (from its symbol table).
fn function_address(needle: &str) -> u64 {
    let exe = racewatch_instrument::elf::Module::open(&std::env::current_exe().unwrap()).unwrap();
    let anchor = exe.functions.iter().find(|f| f.name == "report_reporter::writer_side").expect("writer_side");
    let bias = pc_of(writer_side) - anchor.address;
    let function = exe.functions.iter().find(|f| f.name.contains(needle) && f.size > 8);
    function.unwrap_or_else(|| panic!("no function {needle}")).address + bias
}

#[test]
fn rust_stacks_stop_before_the_short_backtrace_marker_in_text_and_json() {
    let begin = function_address("__rust_begin_short_backtrace");
    let lang_start = function_address("std::rt::lang_start_internal");
    let mut race = event(10, 11);
    // The access, its caller, then thread or main start-up (return addresses).
    race.current.stack = Stack::from_pcs(&[pc_of(writer_side), pc_of(reader_side) + 4, begin + 4, lang_start + 4]);
    let full = Symbolizer::new().symbolize_stack(&race.current.stack);
    assert!(full.iter().any(|f| f.function.as_deref().is_some_and(|n| n.contains("__rust_begin_short_backtrace"))));

    let text = Reporter::new(config(ReportFormat::Text, &[]), 1).render(&race).unwrap();
    let current: Vec<&str> =
        text.lines().skip(3).take_while(|l| l.starts_with("    #")).map(|l| l.split(' ').nth(5).unwrap()).collect();
    assert_eq!(current, ["report_reporter::writer_side", "report_reporter::reader_side"], "{text}");
    assert!(!text.contains("short_backtrace") && !text.contains("lang_start"), "{text}");

    let line = Reporter::new(config(ReportFormat::Json, &[]), 1).render(&race).unwrap();
    let json: serde_json::Value = serde_json::from_str(&line).unwrap();
    let stack = json["accesses"][0]["stack"].as_array().unwrap();
    let functions: Vec<&str> = stack.iter().map(|f| f["function"].as_str().unwrap()).collect();
    assert_eq!(functions, ["report_reporter::writer_side", "report_reporter::reader_side"], "{line}");
}

/// Runs one `child_*` test of this binary in a fresh process.
fn run_child(name: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("RACEWATCH_REPORTER_CHILD", "1")
        .output()
        .unwrap()
}

fn in_child() -> bool {
    std::env::var_os("RACEWATCH_REPORTER_CHILD").is_some()
}

#[test]
fn child_halt() {
    if !in_child() {
        return;
    }
    reporter::start(&Options { halt_on_error: true, exitcode: 77, ..Options::DEFAULT }, true);
    assert!(queue::push(&event(std::process::id() as i32 + 1, std::process::id() as i32)));
    // The reporter thread starts when there is work, at the program's next interposed call.
    reporter::wake_if_wanted();
    std::thread::sleep(std::time::Duration::from_secs(10));
    panic!("halt_on_error did not stop the process");
}

#[test]
fn halt_on_error_prints_the_report_then_exits_with_exitcode() {
    let out = run_child("child_halt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "{stderr}");
    assert_eq!(stderr.matches("WARNING: racewatch: data race").count(), 1, "{stderr}");
    assert!(stderr.contains("SUMMARY: racewatch: data race"), "{stderr}");
}

#[test]
fn child_drain() {
    if !in_child() {
        return;
    }
    reporter::start(&Options::DEFAULT, true);
    let me = racewatch::sys::thread::gettid();
    assert!(!reporter::has_thread(), "a reporter thread before there is work");
    let first = event(me + 1, me);
    let mut second = first;
    second.previous = record(me, writer_side, false, 0x7f00_0000_1000);
    for e in [first, second, first, second] {
        assert!(queue::push(&e));
    }
    // The reporter thread starts when there is work, at the program's next interposed call.
    reporter::wake_if_wanted();
    assert!(!reporter::is_reporter_thread(me));
    let reporter_tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let task = task.ok()?;
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            // The kernel keeps 15 bytes of a thread name.
            (comm.trim() == &reporter::THREAD_NAME[..15]).then(|| task.file_name().to_str()?.parse::<i32>().ok())?
        })
        .next()
        .expect("a thread named racewatch-reporter");
    assert!(reporter::is_reporter_thread(reporter_tid));
    reporter::shutdown();
    println!("reports printed: {}", racewatch::stats::get(racewatch::stats::Counter::ReportsPrinted));
}

#[test]
fn shutdown_prints_every_pending_race_once_and_counts_it() {
    let out = run_child("child_drain");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr.matches("WARNING: racewatch: data race").count(), 2, "{stderr}");
    assert!(stdout.contains("reports printed: 2"), "{stdout}");
}

#[test]
fn child_settle() {
    if !in_child() {
        return;
    }
    reporter::start(&Options::DEFAULT, true);
    let me = racewatch::sys::thread::gettid();
    let first = event(me + 1, me);
    let mut second = first;
    second.previous = record(me, writer_side, false, 0x7f00_0000_1000);
    assert_eq!(reporter::races_reported(), 0);
    for e in [first, second, first, second] {
        assert!(queue::push(&e));
    }
    // Waits for the reporter without ending it: the races are printed and counted once each. A settle
    // gives up after about a second while the reporter is not reading debug info; on a machine loaded
    // by a parallel test run the reporter thread may not have run by then, so a few settles in a row.
    for _ in 0..5 {
        reporter::settle();
        if queue::is_empty() && reporter::races_reported() == 2 {
            break;
        }
    }
    assert!(queue::is_empty());
    println!("races reported: {}", reporter::races_reported());
    for race in reporter::reported_races() {
        println!("race {race}");
    }
    assert!(queue::push(&first));
    reporter::settle();
    println!("after a repeat: {}", reporter::races_reported());
    reporter::shutdown();
}

/// `settle` (at exit, before the status is decided) leaves every queued race printed and counted, keyed
/// by its pair of source lines.
#[test]
fn settle_waits_until_every_queued_race_is_printed_and_counted() {
    let out = run_child("child_settle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr.matches("WARNING: racewatch: data race").count(), 2, "{stderr}");
    assert!(stdout.contains("races reported: 2\n"), "{stdout}");
    assert!(stdout.contains("after a repeat: 2\n"), "{stdout}");
    let file = "tests/report_reporter.rs";
    let keys: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("race ")).collect();
    assert_eq!(
        keys,
        [format!("{file}:{WRITER_LINE}\t{file}:{READER_LINE}"), format!("{file}:{WRITER_LINE}\t{file}:{WRITER_LINE}")],
        "{stdout}"
    );
}
