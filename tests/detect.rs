//! End to end: the demos under racewatch, as a user runs them.
//!
//! Every demo in demos/src/bin and demos/c is discovered by name (`racy_*`, `clean_*`), so a new demo
//! file is tested without touching this file. Racy demos must be reported within 30 s at
//! `sample_period_us=1000`, and each report must name a `racewatch: racy` line of the demo's source in
//! the stacks of *both* accesses. Clean demos run 5 s with an active detector (watches armed) and must
//! not be reported. Demo runs go in parallel, at most one per CPU.

mod common;

use common::{
    clean_run_status, demo, demos, has_report, parallel_map, retry_for, run_under, stat, stats_summary, Demo, DemoKind,
    Run, REPORT_HEADER,
};
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long a racy demo may take to be reported.
const DETECTION_BUDGET: Duration = Duration::from_secs(30);
/// Seconds per run of a racy demo (runs repeat until a report or the budget is spent).
const RACY_RUN_SECONDS: &str = "3";
/// Seconds a clean demo runs.
const CLEAN_RUN_SECONDS: &str = "5";
/// One sample per millisecond of thread CPU time: the rate the issue fixes for detection.
const SAMPLE_PERIOD: &str = "sample_period_us=1000";

fn of_kind(kind: DemoKind) -> Vec<&'static Demo> {
    demos().iter().filter(|d| d.kind == kind).collect()
}

/// Exit status 0 (66 after a report: `racewatch run`'s `fail_on_race=1`) and the demo's result on
/// stdout: one or more lines, each `<name>: ...`.
fn check_exit_and_stdout(demo: &Demo, run: &Run) -> Result<(), String> {
    if run.status.code() != Some(clean_run_status(has_report(&run.stderr))) {
        return Err(format!("exit status {} (stderr:\n{})", run.status, run.stderr));
    }
    let prefix = format!("{}: ", demo.name);
    if run.stdout.is_empty() || !run.stdout.lines().all(|l| l.starts_with(&prefix)) {
        return Err(format!("expected stdout lines `{prefix}...`, got:\n{}", run.stdout));
    }
    Ok(())
}

/// The frame of `access` on a racy line of the demo's source, as `file:line`.
fn racy_frame(access: &Value, demo: &Demo, racy_lines: &[u32]) -> Option<String> {
    access["stack"].as_array()?.iter().find_map(|frame| {
        let file = frame["file"].as_str()?;
        let line = u32::try_from(frame["line"].as_u64()?).ok()?;
        (file.ends_with(&demo.source_suffix) && racy_lines.contains(&line)).then(|| format!("{file}:{line}"))
    })
}

/// Checks one JSON report against the demo: this process, two accesses from different threads, at least
/// one write, not both atomic, and both stacks reaching a marked racy line.
fn check_report(demo: &Demo, run: &Run, report: &Value, racy_lines: &[u32]) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{why} in report {report}"));
    if report["kind"] != "data_race" {
        return fail("kind is not data_race");
    }
    if report["pid"].as_u64() != Some(u64::from(run.pid)) {
        return fail(&format!("pid is not {}", run.pid));
    }
    let Some([current, previous]) = report["accesses"].as_array().map(Vec::as_slice) else {
        return fail("expected two accesses");
    };
    if current["tid"] == previous["tid"] {
        return fail("both accesses from one thread");
    }
    if current["kind"] != "write" && previous["kind"] != "write" {
        return fail("no write");
    }
    if current["atomic"] == true && previous["atomic"] == true {
        return fail("both accesses atomic");
    }
    for (which, access) in [("current", current), ("previous", previous)] {
        if racy_frame(access, demo, racy_lines).is_none() {
            return fail(&format!("the {which} access's stack has no frame at {}:{racy_lines:?}", demo.source_suffix));
        }
    }
    Ok(())
}

/// Runs a racy demo until it is reported; returns the runs it took and the first report.
fn detect(demo: &Demo) -> Result<(usize, Duration, Value), String> {
    let racy_lines = demo.racy_lines();
    if racy_lines.is_empty() {
        return Err(format!("{} has no `racewatch: racy` marker", demo.source.display()));
    }
    let start = Instant::now();
    let mut last_stats = String::new();
    let result = retry_for(DETECTION_BUDGET, || {
        let run = run_under(&[SAMPLE_PERIOD, "report_format=json", "stats=1"], &demo.bin, &[RACY_RUN_SECONDS]);
        check_exit_and_stdout(demo, &run)?;
        last_stats = stats_summary(&run.stderr);
        if run.stderr.contains(REPORT_HEADER) {
            return Err(format!("a text report with report_format=json:\n{}", run.stderr));
        }
        let mut reports = Vec::new();
        for line in run.stderr.lines().filter(|l| l.starts_with('{')) {
            let report: Value =
                serde_json::from_str(line).map_err(|e| format!("bad JSON report line ({e}): {line}"))?;
            if report["kind"] == "race_count" {
                // At exit: a race this process saw more than once, by its key.
                let known = reports.iter().any(|r: &Value| r["race_key"] == report["race_key"]);
                if !known || report["pid"] != run.pid || report["count"].as_u64().is_none_or(|n| n < 2) {
                    return Err(format!("race_count line of no reported race, or count < 2: {line}"));
                }
                continue;
            }
            check_report(demo, &run, &report, &racy_lines)?;
            reports.push(report);
        }
        Ok(reports.into_iter().next())
    });
    match result {
        Ok((report, runs)) => Ok((runs, start.elapsed(), report)),
        Err(why) => Err(format!("{why}; stats of the last run: {last_stats}")),
    }
}

#[test]
fn every_demo_is_discovered_and_built() {
    let count = |lang: &str, kind: DemoKind| demos().iter().filter(|d| d.lang == lang && d.kind == kind).count();
    assert!(count("rust", DemoKind::Racy) >= 4, "Rust racy demos: {:?}", demos());
    assert!(count("rust", DemoKind::Clean) >= 5, "Rust clean demos: {:?}", demos());
    if common::clang().is_some() {
        assert!(count("c", DemoKind::Racy) >= 4, "C racy demos: {:?}", demos());
        assert!(count("c", DemoKind::Clean) >= 4, "C clean demos: {:?}", demos());
    }
    for demo in of_kind(DemoKind::Racy) {
        assert!(!demo.racy_lines().is_empty(), "{}: no `racewatch: racy` marker", demo.source.display());
    }
    for demo in of_kind(DemoKind::Clean) {
        assert!(demo.racy_lines().is_empty(), "{}: a clean demo with a racy marker", demo.source.display());
    }
}

#[test]
fn every_racy_demo_is_reported_with_the_racing_lines_of_both_accesses() {
    let racy = of_kind(DemoKind::Racy);
    let results = parallel_map(&racy, |demo| detect(demo));
    let mut failures = Vec::new();
    for (demo, result) in racy.iter().zip(results) {
        match result {
            Ok((runs, elapsed, report)) => {
                let lines: Vec<String> = report["accesses"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|a| racy_frame(a, demo, &demo.racy_lines()))
                    .collect();
                eprintln!(
                    "racy {}: reported after {runs} run(s), {:.1} s: {}",
                    demo.label(),
                    elapsed.as_secs_f64(),
                    lines.join(" vs ")
                );
            }
            Err(why) => failures.push(format!("{}: {why}", demo.label())),
        }
    }
    assert!(failures.is_empty(), "racy demos not reported correctly:\n{}", failures.join("\n"));
}

/// Runs a clean demo for 5 s with stats; returns its stats line.
fn run_clean(demo: &Demo) -> Result<String, String> {
    let run = run_under(&[SAMPLE_PERIOD, "stats=1"], &demo.bin, &[CLEAN_RUN_SECONDS]);
    check_exit_and_stdout(demo, &run)?;
    let stats = stats_summary(&run.stderr);
    let reports = run.stderr.matches(REPORT_HEADER).count();
    if reports != 0 {
        return Err(format!("{reports} race report(s):\n{}", run.stderr));
    }
    // Races the handler found must all have been dropped on review (inline-assembly atomics): none printed,
    // and their repeats are not counted as repeats of reported races (a user would read hidden races).
    if stat(&run.stderr, "reports printed") != Some(0)
        || stat(&run.stderr, "races at already reported locations (not printed)") != Some(0)
    {
        return Err(format!("reports counted: {stats}"));
    }
    // The detector must have been watching, or "no report" proves nothing.
    match stat(&run.stderr, "watches armed") {
        Some(n) if n > 0 => Ok(stats),
        _ => Err(format!("no watch armed in {CLEAN_RUN_SECONDS} s: {stats}")),
    }
}

#[test]
fn every_clean_demo_runs_without_reports_while_the_detector_watches() {
    let clean = of_kind(DemoKind::Clean);
    let results = parallel_map(&clean, |demo| run_clean(demo));
    let mut failures = Vec::new();
    for (demo, result) in clean.iter().zip(results) {
        match result {
            Ok(stats) => eprintln!("clean {}: no report; {stats}", demo.label()),
            Err(why) => failures.push(format!("{}: {why}", demo.label())),
        }
    }
    assert!(failures.is_empty(), "clean demos failed:\n{}", failures.join("\n"));
}

/// The first text report block of `stderr`: the lines between two separators.
fn first_text_report(stderr: &str) -> Option<Vec<&str>> {
    let mut lines = stderr.lines().skip_while(|l| *l != "==================");
    lines.next()?;
    let block: Vec<&str> = lines.take_while(|l| *l != "==================").collect();
    (!block.is_empty()).then_some(block)
}

#[test]
fn text_report_has_the_contract_shape() {
    let demo = demo("rust", "racy_counter");
    let racy_lines = demo.racy_lines();
    let (run, runs) = retry_for(DETECTION_BUDGET, || {
        let run = run_under(&[SAMPLE_PERIOD], &demo.bin, &[RACY_RUN_SECONDS]);
        check_exit_and_stdout(demo, &run)?;
        Ok(run.stderr.contains(REPORT_HEADER).then_some(run))
    })
    .unwrap_or_else(|why| panic!("{}: {why}", demo.label()));
    eprintln!("text report of {} after {runs} run(s)", demo.label());

    let block = first_text_report(&run.stderr).unwrap_or_else(|| panic!("no report block in:\n{}", run.stderr));
    let text = block.join("\n");
    assert_eq!(block[0], format!("{REPORT_HEADER} (pid={})", run.pid), "{text}");
    // Current access, its frames, the previous access, its frames, the summary.
    let access_line = |line: &str, previous: bool| {
        let rest = if previous { line.strip_prefix("  Previous ") } else { line.strip_prefix("  ") };
        rest.is_some_and(|r| r.contains(" of size ") && r.contains(" by thread T") && r.ends_with("):"))
    };
    assert!(access_line(block[1], false) && !block[1].contains("Previous"), "{text}");
    let previous_at = block.iter().position(|l| access_line(l, true)).unwrap_or_else(|| panic!("no Previous: {text}"));
    let summary = block.last().unwrap();
    assert!(summary.starts_with("SUMMARY: racewatch: data race "), "{text}");
    assert!(summary.contains(&demo.source_suffix), "summary names the source: {text}");
    let frames_from =
        |at: usize| -> Vec<&str> { block[at..].iter().take_while(|l| l.starts_with("    #")).copied().collect() };
    let (current, previous) = (frames_from(2), frames_from(previous_at + 1));
    // After the accesses: the memory (`static mut COUNTER`), then where each thread was created (both by
    // `main`'s `thread::spawn`, in the demo's source).
    let location_at = previous_at + 1 + previous.len();
    assert!(block[location_at].starts_with("  Location is global 'racy_counter::COUNTER' of size 8 at 0x"), "{text}");
    let created: Vec<usize> = (0..block.len()).filter(|&i| block[i].contains(") created by main thread at:")).collect();
    assert_eq!(created.len(), 2, "{text}");
    for at in created {
        let frames = frames_from(at + 1);
        assert!(frames.iter().any(|f| f.contains(" spawn ")), "the std::thread::spawn called: {text}");
        assert!(frames.iter().any(|f| f.contains(" racy_counter::main ") && f.contains(&demo.source_suffix)), "{text}");
    }
    for frames in [&current, &previous] {
        // The accessing function and at least its caller: a stack, not just a PC.
        assert!(frames.len() >= 2, "{text}");
        // Frames are numbered from 0 on; a run of standard-library frames is one `#a..#b (…)` line.
        let mut next = 0usize;
        for frame in frames.iter() {
            let fold = frame.strip_prefix(&format!("    #{next}..#")).and_then(|rest| rest.split_once(' '));
            if let Some((last, _)) = fold {
                next = last.parse::<usize>().unwrap_or_else(|_| panic!("fold line {frame}: {text}")) + 1;
            } else {
                assert!(frame.starts_with(&format!("    #{next} ")), "frame {next}: {text}");
                next += 1;
            }
        }
        let marked = racy_lines.iter().any(|n| frames[0].contains(&format!("{}:{n}:", demo.source_suffix)));
        assert!(marked, "#0 is not on a racy line {racy_lines:?}: {text}");
    }
}

/// Runs `bin` (one racy run of `RACY_RUN_SECONDS` each) until a run prints a text report, within the
/// detection budget; every run must exit 0 (66 once it reported) and print `done` on stdout. The run
/// and how many it took.
fn first_reported_run(bin: &std::path::Path, options: &[&str], done: &str) -> Result<(Run, usize), String> {
    retry_for(DETECTION_BUDGET, || {
        let run = run_under(options, bin, &[RACY_RUN_SECONDS]);
        if run.status.code() != Some(clean_run_status(has_report(&run.stderr))) || !run.stdout.contains(done) {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(run.stderr.contains(REPORT_HEADER).then_some(run))
    })
}

const OPENMP_RACE: &str = r#"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 3;
  long sum = 0; /* shared: a local on the master thread's stack */
  double start = omp_get_wtime();
  while (omp_get_wtime() - start < seconds) {
#pragma omp parallel for num_threads(2)
    for (int i = 0; i < 1000000; i++) {
      *(volatile long *)&sum += i; /* racewatch: racy (no reduction) */
    }
  }
  printf("openmp: done %d\n", sum != 0);
  return 0;
}
"#;

/// An OpenMP `parallel for` updating a shared local (it lives on the master's stack, which the master's
/// own samples treat as private): the workers' accesses are watched and the race is reported.
#[test]
fn openmp_race_on_a_shared_local_is_reported() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_openmp");
    let src = dir.join("openmp.c");
    std::fs::write(&src, OPENMP_RACE).unwrap();
    let bin = dir.join("openmp");
    let built = std::process::Command::new(&clang)
        .args(racewatch_instrument::toolchain::C_FLAGS)
        .args(["-O2", "-fopenmp"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .unwrap();
    if !built.status.success() {
        eprintln!(
            "SKIP: clang-19 -fopenmp failed (apt-get install libomp-19-dev):\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        return;
    }
    let (run, runs) = first_reported_run(&bin, &[SAMPLE_PERIOD, "stats=1"], "openmp: done 1")
        .unwrap_or_else(|why| panic!("the OpenMP race was not reported: {why}"));
    assert!(run.stderr.contains("openmp.c:12"), "the report names the racing line: {}", run.stderr);
    // One of the two threads is the master: its stack goes through libomp (no frame pointers) to main.
    let report = first_text_report(&run.stderr).unwrap_or_default().join("\n");
    assert!(report.contains("__kmpc_fork_call") && report.contains(" main "), "stack through libomp: {report}");
    eprintln!("openmp: reported after {runs} run(s); {}", stats_summary(&run.stderr));
}

const NO_FRAME_POINTERS: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long counter;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
__attribute__((noinline)) void bump(void) { counter++; }
__attribute__((noinline)) void level_two(int n) { for (int i = 0; i < n; i++) bump(); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void level_one(int n) { level_two(n); __asm__ volatile("" ::: "memory"); }
static double until;
static void *worker(void *arg) { while (now() < until) level_one(1000); return arg; }
int main(int argc, char **argv) {
  until = now() + (argc > 1 ? atof(argv[1]) : 3);
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  worker(0);
  pthread_join(t, 0);
  printf("nofp: done %d\n", counter != 0);
  return 0;
}
"#;

/// Code built without frame pointers (`-fomit-frame-pointer`, like most of libc and prebuilt
/// libraries): both stacks are unwound by the `.eh_frame` CFI through every level, the main thread's to
/// `main` and the other's to libc's thread start.
#[test]
fn stacks_are_unwound_through_code_without_frame_pointers() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_nofp");
    let bin = common::build_c(&clang, &dir, "nofp", NO_FRAME_POINTERS, &["-fomit-frame-pointer", "-lpthread"]);
    let (run, _) = first_reported_run(&bin, &[SAMPLE_PERIOD], "nofp: done 1")
        .unwrap_or_else(|why| panic!("the race was not reported: {why}"));
    let report = first_text_report(&run.stderr).expect("a text report").join("\n");
    let (current, previous) = report.split_once("  Previous").expect("two accesses");
    for (access, text) in [("current", current), ("previous", previous)] {
        let order: Vec<usize> = [" bump ", " level_two ", " level_one ", " worker "]
            .iter()
            .map(|name| text.find(name).unwrap_or_else(|| panic!("{access} lacks{name}: {report}")))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{access} frames out of order: {report}");
    }
    assert!(report.contains(" main "), "the main thread's stack reaches main: {report}");
}

/// crossbeam's `AtomicCell<[u64; 4]>` (a seqlock): the optimistic read races with the writer's plain
/// stores, and the report labels the write plain (its tag, if any, is a compiler-only fence's label).
#[test]
fn atomic_cell_seqlock_race_is_reported_with_the_write_plain() {
    let demo = demo("rust", "racy_atomic_cell");
    let (write, runs) = retry_for(DETECTION_BUDGET, || {
        let run = run_under(&[SAMPLE_PERIOD, "report_format=json"], &demo.bin, &[RACY_RUN_SECONDS]);
        if run.status.code() != Some(clean_run_status(has_report(&run.stderr))) {
            return Err(format!("{}: {}", run.status, run.stderr));
        }
        let write = run.stderr.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|report| {
            let accesses = report["accesses"].as_array()?.clone();
            accesses.into_iter().find(|a| a["kind"] == "write")
        });
        Ok(write)
    })
    .unwrap_or_else(|why| panic!("the AtomicCell race was not reported: {why}"));
    assert_eq!(write["atomic"], false, "the seqlock's write is a plain store: {write}");
    eprintln!("racy_atomic_cell: reported after {runs} run(s)");
}

/// A race inside libc's memory and string functions: the text report shows the libc function by name
/// as the access's frame #0 (`#0 memcpy (libc.so.6+0x…)`, Debian's libc has only a dynamic symbol
/// table) with the covered caller's racy line right after it (a run of standard-library frames
/// between, for Rust), the SUMMARY names the caller's line, and `stats=1` counts the samples that
/// reached such a call and the traps judged inside one.
#[test]
fn races_in_libc_memory_functions_name_the_function_and_the_caller() {
    let mut cases = vec![demo("rust", "racy_copy_from_slice")];
    if common::clang().is_some() {
        cases.extend([demo("c", "racy_memcpy"), demo("c", "racy_strcpy")]);
    }
    let results = parallel_map(&cases, |demo| {
        let done = format!("{}: ", demo.name);
        let (run, runs) = first_reported_run(&demo.bin, &[SAMPLE_PERIOD, "stats=1"], &done)?;
        let report = first_text_report(&run.stderr).ok_or("no report block")?;
        let text = report.join("\n");
        let racy = demo.racy_lines();
        let on_racy_line = |line: &str| racy.iter().any(|n| line.contains(&format!("{}:{n}:", demo.source_suffix)));
        let libc_frame = ["memcpy", "strcpy", "strlen", "strcmp"]
            .iter()
            .find_map(|name| report.iter().position(|l| l.starts_with(&format!("    #0 {name} (libc.so.6+0x"))))
            .ok_or_else(|| format!("no `#0 <function> (libc.so.6+0x…)` frame:\n{text}"))?;
        // The caller follows: its frame is the next one outside the standard library (folded, or the
        // std function it called, `copy_from_slice`, kept).
        let caller = report[libc_frame + 1..]
            .iter()
            .find(|l| !l.contains(" frames of the Rust standard library)") && !l.contains(" library/"));
        if !caller.is_some_and(|l| l.starts_with("    #") && on_racy_line(l)) {
            return Err(format!("the libc frame is not followed by the racy caller:\n{text}"));
        }
        let summary = report.last().copied().unwrap_or_default();
        if !(summary.starts_with("SUMMARY: racewatch: data race ") && on_racy_line(summary)) {
            return Err(format!("the summary does not name a racy line of the caller:\n{text}"));
        }
        let samples = stat(&run.stderr, "samples whose path reached a call to a libc memory or string function");
        let traps = stat(&run.stderr, "traps judged inside a libc memory or string function");
        // Both sides are libc functions in the C demos; the Rust reader's loads are plain.
        let (samples_n, traps_n) = (samples.unwrap_or(0), traps.unwrap_or(0));
        let counted = if demo.lang == "c" { samples_n > 0 && traps_n > 0 } else { samples_n + traps_n > 0 };
        if !counted {
            return Err(format!("stats: {}", stats_summary(&run.stderr)));
        }
        Ok((runs, samples, traps))
    });
    let mut failures = Vec::new();
    for (demo, result) in cases.iter().zip(results) {
        match result {
            Ok((runs, samples, traps)) => eprintln!(
                "{}: reported after {runs} run(s); {samples:?} samples reached a libc function, {traps:?} traps judged in one",
                demo.label()
            ),
            Err(why) => failures.push(format!("{}: {why}", demo.label())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Races on one 4 KiB buffer through libc only (memcpy against memcpy; memset against byte stores) at the
/// debug rate with the cold-code bias on, as a user would run them: nearly every sample lands inside
/// libc's memcpy or memset, whose bytes are watched (issue 24: 62-66 watches in 10 s caught nothing,
/// 15,379 of 15,496 samples were declined by the bias keyed on the one call site). Each is reported
/// within the detection budget, with samples counted inside the libc function and traps judged there.
#[test]
fn samples_inside_libc_copies_watch_the_bytes_the_call_touches() {
    if common::clang().is_none() {
        eprintln!("SKIP: clang-19 not found");
        return;
    }
    let cases = [demo("c", "racy_memcpy_page"), demo("c", "racy_memset_bytes")];
    let results = parallel_map(&cases, |demo| {
        let done = format!("{}: ", demo.name);
        let (run, runs) = first_reported_run(&demo.bin, &[SAMPLE_PERIOD, "stats=1"], &done)?;
        let inside = stat(&run.stderr, "samples inside libc's memcpy/memmove/memset called from covered code");
        let traps = stat(&run.stderr, "traps judged inside a libc memory or string function");
        if inside.unwrap_or(0) == 0 || traps.unwrap_or(0) == 0 {
            return Err(format!("stats: {}", stats_summary(&run.stderr)));
        }
        let report = first_text_report(&run.stderr).ok_or("no report block")?;
        let racy = demo.racy_lines();
        let summary = report.last().copied().unwrap_or_default();
        if !racy.iter().any(|n| summary.contains(&format!("{}:{n}:", demo.source_suffix))) {
            return Err(format!("the summary does not name a racy line:\n{}", report.join("\n")));
        }
        Ok((runs, inside, traps))
    });
    let mut failures = Vec::new();
    for (demo, result) in cases.iter().zip(results) {
        match result {
            Ok((runs, inside, traps)) => {
                eprintln!(
                    "{}: reported after {runs} run(s); {inside:?} samples inside libc, {traps:?} traps",
                    demo.label()
                )
            }
            Err(why) => failures.push(format!("{}: {why}", demo.label())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One worker streams while `main` waits in `pthread_join`: no other thread runs, so sampling pauses
/// and (almost) nothing is watched, at the test profile's rate; with `watch_alone=1` they watch as before.
#[test]
fn a_thread_alone_does_not_watch() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_one_worker");
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/one_worker.c")).unwrap();
    let bin = common::build_c(&clang, &dir, "one_worker", &src, &["-pthread"]);
    let profile = ["sample_period_us=250", "watchpoints=4", "cold_bias=0", "stats=1"];
    let run = run_under(&profile, &bin, &["2"]);
    assert!(!has_report(&run.stderr), "{}", run.stderr);
    let samples = stat(&run.stderr, "samples").unwrap_or(u64::MAX);
    let pauses = stat(&run.stderr, "sampling paused while one thread ran alone").unwrap_or(0);
    let armed = stat(&run.stderr, "watches armed").unwrap_or(u64::MAX);
    // 2 s of one thread at 4,000 signals per CPU-second: the timers pause for 10 ms at a time, so a small
    // fraction of the samples remain, and only those of the first 100 ms (while main's last timer signal
    // is within the horizon) may watch. (A loaded machine runs the worker less: 19 pauses in one CI run.)
    assert!(
        pauses >= 10 && samples < 2_000 && armed < 64,
        "pauses {pauses}, samples {samples}, armed {armed}: {}",
        stats_summary(&run.stderr)
    );
    // With watch_alone=1 nothing is declined or paused for running alone. How many watches are armed
    // depends on the CPU the worker gets (87 samples, 9 watches in one CI run on a loaded 2-core machine;
    // most of the rest were declined as the worker's own memory).
    let run = run_under(&[&profile[..], &["watch_alone=1"]].concat(), &bin, &["1"]);
    let armed = stat(&run.stderr, "watches armed").unwrap_or(0);
    let samples = stat(&run.stderr, "samples").unwrap_or(0);
    let alone = stat(&run.stderr, "samples declined while no other thread ran (nobody to race with)").unwrap_or(1);
    let pauses = stat(&run.stderr, "sampling paused while one thread ran alone").unwrap_or(1);
    assert!(
        samples > 20 && armed > 0 && alone == 0 && pauses == 0,
        "watch_alone=1: samples {samples}, armed {armed}, declined {alone}, pauses {pauses}: {}",
        stats_summary(&run.stderr)
    );
}

/// Two threads spend all but about 0.01% of their time in code without metadata and race on a counter
/// once per round, at the test profile: timer signals almost never land in covered code, so the signals
/// that land elsewhere aim a code breakpoint at an access of the covered code the samples saw, and the
/// thread that runs it first is sampled there. Reported within 12 s of 2 s runs (the earlier sampler found
/// it in 1 of 4 runs of 6 s; alone it is reported in the first run, 0.2 s; one CI run under the load of the
/// other tests found nothing in 3 runs, 6 s), with aims hit in the reporting run.
#[test]
fn samples_aimed_at_covered_code_find_a_race_in_rarely_run_code() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_mostly_uncovered");
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mostly_uncovered.c")).unwrap();
    let bin = common::build_c(&clang, &dir, "mostly_uncovered", &src, &["-pthread"]);
    let profile = ["sample_period_us=250", "watchpoints=4", "cold_bias=0", "stats=1", "halt_on_error=1"];
    let (run, runs) = retry_for(Duration::from_secs(12), || {
        let run = run_under(&profile, &bin, &["2"]);
        let reported = has_report(&run.stderr);
        if run.status.code() != Some(clean_run_status(reported)) {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(reported.then_some(run))
    })
    .unwrap_or_else(|why| panic!("mostly_uncovered: {why}"));
    let hits = stat(&run.stderr, "code breakpoints hit (samples taken there)").unwrap_or(0);
    assert!(hits > 0, "reported without an aimed sample: {}", stats_summary(&run.stderr));
    let report = first_text_report(&run.stderr).expect("a text report");
    assert!(report.iter().any(|l| l.contains("mostly_uncovered.c:32")), "{}", report.join("\n"));
    eprintln!("mostly_uncovered: reported after {runs} run(s), {hits} aimed samples");
}

/// Two threads stream over buffers of their own: after each 64 KiB region's first watches, the sampler
/// watches one sample in eight there, then fewer with each watch (the rest are counted as declined), and
/// a run of declined samples pauses the timers, so the test profile stops stalling threads, and mostly
/// stops interrupting them, on memory no other thread touches; nothing is reported.
#[test]
fn threads_on_their_own_memory_are_rarely_watched() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_own_buffers");
    // The clean streaming workload of bench/threads.sh: 2 threads, 4,000 passes over 1 MiB each.
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/threads.c")).unwrap();
    let bin = common::build_c(&clang, &dir, "threads", &src, &["-pthread"]);
    let profile = ["sample_period_us=250", "watchpoints=4", "cold_bias=0", "stats=1"];
    let run = run_under(&profile, &bin, &["2", "4000"]);
    assert!(!has_report(&run.stderr), "{}", run.stderr);
    let private = stat(&run.stderr, "samples declined in memory only their own thread was seen in").unwrap_or(0);
    let armed = stat(&run.stderr, "watches armed").unwrap_or(u64::MAX);
    // 2 threads x 17 regions x 2 watches of grace, then 1 in 8, 32, 128, 256: about 150 watches.
    assert!(private > 200 && armed * 4 < private, "declined {private}, armed {armed}: {}", stats_summary(&run.stderr));
    // Runs of 64 declined samples pause the timers for 10 ms.
    let pauses =
        stat(&run.stderr, "sampling paused after a run of samples in memory only their own thread was seen in")
            .unwrap_or(0);
    assert!(pauses > 0, "no pause: {}", stats_summary(&run.stderr));
}

/// A helper waits on a condition variable while `main` works alone for a second: the timers pause (the
/// signal that finds a thread alone switches them off until the reporter's next check), and when `main`
/// wakes the helper and both race, the race is still found.
#[test]
fn a_race_after_a_thread_ran_alone_is_reported() {
    let Some(run) = race_on_counter("alone_then_race", &["stats=1"]) else { return };
    let pauses = stat(&run.stderr, "sampling paused while one thread ran alone").unwrap_or(0);
    assert!(pauses > 0, "main ran alone for a second without a pause: {}", stats_summary(&run.stderr));
}

/// The reporter thread rests whenever the program is back to one thread and starts again with its next
/// thread: a race between threads created after three such rounds is still found and printed.
#[test]
fn a_race_after_the_program_was_single_threaded_again_is_reported() {
    race_on_counter("race_after_join", &[]);
}

/// At the default rate (one sample per 100 ms of a thread's CPU time, taken with one of its four timer
/// signals), pairs of racing threads that each live 50 ms of CPU time, 60 pairs per run (fewer threads
/// than the sampler's per-thread table has cells): each thread may take its sample with either of its two
/// signals (about 3 in 10 do), and watches them. racewatch once counted a thread's signals up to a whole
/// period before its first sample: such threads were never sampled (0 samples in a run on a quiet
/// machine), and every race waited a period. Runs until one samples, within the detection budget (on a
/// loaded machine the sampler declines signals that find a racer alone).
#[test]
fn threads_shorter_than_a_sample_period_are_sampled() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_short_lived_racers");
    let name = "short_lived_racers";
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(format!("{name}.c"));
    let bin = common::build_c(&clang, &dir, name, &std::fs::read_to_string(fixture).unwrap(), &["-pthread"]);
    let sampled = retry_for(DETECTION_BUDGET, || {
        let run = run_under(&["stats=1"], &bin, &["60"]);
        if (!run.status.success() && !has_report(&run.stderr)) || !run.stdout.contains("short_lived_racers: done") {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        let watches = stat(&run.stderr, "watches armed").unwrap_or(0);
        Ok((watches > 0).then_some(watches))
    });
    sampled.unwrap_or_else(|why| panic!("no watch armed in short-lived threads at the default rate: {why}"));
}

/// A child spawned the way CPython's `subprocess` does it (`vfork`, every descriptor from 3 closed
/// before `exec`, here stderr too) closes its own copies: the parent's detection goes on and its races
/// are still printed (the child's closes once switched the parent's detection off for good).
#[test]
fn a_race_after_a_vfork_child_closed_every_descriptor_is_reported() {
    let Some(run) = race_on_counter_with("race_after_join", &[], &["60", "vfork"]) else { return };
    assert!(!run.stderr.contains("race detection is off"), "{}", run.stderr);
}

/// A container or chroot that does not mount `/proc` (here: a tmpfs over it in a mount namespace of
/// its own): the race is still found, and the report names the program's file, its functions and the
/// global, as with `/proc` (without it racewatch once found no code to watch and warned that the
/// program's table pointed outside it). Needs `unshare --mount` (root); skipped without.
#[test]
fn a_race_in_a_process_without_proc_is_reported_with_its_names() {
    let Some(clang) = common::clang() else { return };
    let mount_ns = std::process::Command::new("unshare").args(["--mount", "true"]).status();
    if !mount_ns.is_ok_and(|s| s.success()) {
        eprintln!("SKIP: unshare --mount does not work here");
        return;
    }
    let dir = common::scratch("detect_without_proc");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/race_after_join.c");
    let bin =
        common::build_c(&clang, &dir, "race_after_join", &std::fs::read_to_string(fixture).unwrap(), &["-pthread"]);
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "sh", "-c", "mount -t tmpfs none /proc && exec \"$0\" run -o \"$1\" -- \"$2\" 60"])
        .arg(env!("CARGO_BIN_EXE_racewatch"))
        .arg("sample_period_us=250:watchpoints=4:cold_bias=0:halt_on_error=1")
        .arg(&bin)
        .env_remove("RACEWATCH_OPTIONS")
        .env_remove("LD_PRELOAD");
    let run = common::spawn_and_wait(cmd);
    assert!(has_report(&run.stderr), "no report within 60 s without /proc: {}", run.stderr);
    assert!(!run.stderr.contains("ignoring PC table"), "{}", run.stderr);
    assert!(run.stderr.contains("global 'counter'"), "{}", run.stderr);
    assert!(run.stderr.contains("#0 bump ") && run.stderr.contains("race_after_join.c:"), "symbolized: {}", run.stderr);
    assert!(run.stderr.contains("(race_after_join+0x"), "the program's file named: {}", run.stderr);
}

/// Builds `tests/fixtures/NAME.c` (its threads race on a global `counter` for at most the seconds given)
/// and runs it under the test profile with `halt_on_error=1` and `extra` options: the run, after
/// asserting that it reported the race on `counter` (`None` without clang).
fn race_on_counter(name: &str, extra: &[&str]) -> Option<Run> {
    race_on_counter_with(name, extra, &["60"])
}

/// [`race_on_counter`] with the program's arguments (the seconds first).
fn race_on_counter_with(name: &str, extra: &[&str], args: &[&str]) -> Option<Run> {
    let clang = common::clang()?;
    // One scratch directory per test (tests run at once; two may build the same fixture).
    let dir = common::scratch(&format!("detect_{name}_{}", args.join("_")));
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(format!("{name}.c"));
    let bin = common::build_c(&clang, &dir, name, &std::fs::read_to_string(fixture).unwrap(), &["-pthread"]);
    let options = [&["sample_period_us=250", "watchpoints=4", "cold_bias=0", "halt_on_error=1"][..], extra].concat();
    let run = run_under(&options, &bin, args);
    assert!(has_report(&run.stderr), "no report within 60 s: {}", run.stderr);
    assert!(run.stderr.contains("global 'counter'"), "{}", run.stderr);
    Some(run)
}

/// The lines of `demo`'s source carrying `marker`, 1-based.
fn marked_lines(demo: &Demo, marker: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(&demo.source).expect("read demo source");
    text.lines().zip(1..).filter(|(line, _)| line.contains(marker)).map(|(_, n)| n).collect()
}

/// Threads named with `pthread_setname_np` race on a global: each access names its thread, the report
/// says where `main` created each (the `pthread_create` lines) and which global it is.
#[test]
fn reports_name_the_threads_where_they_were_created_and_the_global() {
    if common::clang().is_none() {
        return;
    }
    let demo = demo("c", "racy_named");
    let (run, runs) = first_reported_run(&demo.bin, &[SAMPLE_PERIOD], "racy_named: ")
        .unwrap_or_else(|why| panic!("{}: not reported: {why}", demo.label()));
    let block = first_text_report(&run.stderr).expect("a text report");
    let text = block.join("\n");
    for name in ["'rw-writer'", "'rw-reader'"] {
        let access =
            block.iter().any(|l| l.contains(" of size 8 at ") && l.contains(" by thread T") && l.contains(name));
        assert!(access, "an access by {name}: {text}");
        let created = block.iter().position(|l| l.contains(name) && l.ends_with(") created by main thread at:"));
        let created = created.unwrap_or_else(|| panic!("where {name} was created: {text}"));
        let creates = marked_lines(demo, "racewatch: creates");
        let main = &block[created + 1];
        let at_create =
            main.contains(" main ") && creates.iter().any(|n| main.contains(&format!("{}:{n}:", demo.source_suffix)));
        assert!(at_create, "#0 of {name}'s creation is main at a pthread_create line {creates:?}: {text}");
    }
    assert!(block.iter().any(|l| l.starts_with("  Location is global 'shared_total' of size 8 at 0x")), "{text}");
    let summary = block.last().unwrap();
    assert!(summary.contains(" in add") && summary.contains(" in peek") && summary.contains(" / "), "{text}");
    eprintln!("racy_named: reported after {runs} run(s)");
}

/// `Arc::downgrade`, `Arc::clone` and `Weak::upgrade` raced on one `Arc` for 20 s: a release build
/// merges `Arc::downgrade`'s two relaxed loads into one `mov` without its atomic tag (`racewatch
/// verify` lists it as a note), which must not be reported against the other thread's `lock cmpxchg`.
/// Before racewatch read the debug info for it, every 20 s run reported it (2 reports per run).
#[test]
fn arc_downgrade_clone_and_upgrade_on_one_arc_are_never_reported() {
    let demo = demo("rust", "clean_arc_downgrade");
    let verify = common::racewatch().arg("verify").arg(&demo.bin).output().expect("run racewatch verify");
    let verified = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{verified}");
    assert!(
        verified.contains("in clean_arc_downgrade::downgrade: untagged mov ")
            && verified.contains("untagged plain access in core::sync::atomic (metadata lost by an optimisation)"),
        "the merged load lost its tag (if a newer rustc keeps it, this demo no longer shows the problem): {verified}"
    );
    let run = run_under(&[SAMPLE_PERIOD, "stats=1"], &demo.bin, &["20"]);
    check_exit_and_stdout(demo, &run).unwrap();
    assert_eq!(run.stderr.matches(REPORT_HEADER).count(), 0, "{}", run.stderr);
    assert_eq!(stat(&run.stderr, "reports printed"), Some(0), "{}", stats_summary(&run.stderr));
    assert!(stat(&run.stderr, "watches armed").is_some_and(|n| n > 0), "{}", stats_summary(&run.stderr));
    eprintln!("clean_arc_downgrade: 20 s, no report; {}", stats_summary(&run.stderr));
}

/// Two volatile accesses of a dependency racing (crossbeam-deque's `Buffer::read`/`write`: a steal reads
/// a slot the owner may be overwriting, and throws the value away when its compare-exchange fails) are a
/// race made on purpose: `clean_work_stealing` gives no report by default (the clean demos' test),
/// though the detector sees the race: with `report_volatile_races=1` it is reported, both stacks at
/// crossbeam's volatile accesses, while by default it is declined (counted, not printed). Without this,
/// the clean demo's silence could mean it is never watched.
#[test]
fn volatile_races_of_a_dependency_are_reported_only_on_request() {
    let demo = demo("rust", "clean_work_stealing");
    // The race needs a stealer and the owner on one slot as the buffer wraps: rare enough that at the
    // debug rate with one watchpoint, 20 runs while the other detection tests shared two cores saw it
    // in neither half. The test profile (`racewatch cargo`'s) sees it within a few runs.
    const PROFILE: [&str; 3] = ["sample_period_us=250", "watchpoints=4", "cold_bias=0"];
    let (run, runs) = retry_for(Duration::from_secs(120), || {
        let run = run_under(&[&PROFILE[..], &["report_volatile_races=1"]].concat(), &demo.bin, &[RACY_RUN_SECONDS]);
        if run.stdout != "clean_work_stealing: tasks taken twice 0, lost 0\n" {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(has_report(&run.stderr).then_some(run))
    })
    .unwrap_or_else(|why| panic!("crossbeam-deque's volatile race was not reported on request: {why}"));
    let block = first_text_report(&run.stderr).expect("a text report").join("\n");
    assert!(block.contains(" read_volatile ") && block.contains(" write_volatile "), "{block}");
    assert!(block.contains("/crossbeam-deque-0.8.") && block.contains("/src/deque.rs:"), "{block}");
    // By default the same race is seen and declined: no run reports, and one counts a declined pair.
    let declined = "pairs of volatile accesses in dependencies (racing by design: not reported)";
    let (_, default_runs) = retry_for(Duration::from_secs(120), || {
        let run = run_under(&[&PROFILE[..], &["stats=1"]].concat(), &demo.bin, &[RACY_RUN_SECONDS]);
        if has_report(&run.stderr) || run.status.code() != Some(0) {
            return Err(format!("a report or a failed run by default: {}\n{}", run.status, run.stderr));
        }
        Ok(stat(&run.stderr, declined).filter(|&n| n > 0))
    })
    .unwrap_or_else(|why| panic!("crossbeam-deque's volatile race was never declined by default: {why}"));
    eprintln!(
        "crossbeam-deque's volatile race: reported on request after {runs} run(s), declined after {default_runs}"
    );
}

/// The program's own volatile race (`racy_flag`: `read_volatile`/`write_volatile` on both sides) is
/// reported wherever the program runs. Run from a directory its sources are not under, its files show
/// as absolute paths, which are still not a dependency's (only the crates cargo fetched or vendored
/// are): before, every such pair was declined as a dependency's race by design.
#[test]
fn own_volatile_races_are_reported_when_run_outside_the_source_tree() {
    let demo = demo("rust", "racy_flag");
    let elsewhere = common::scratch("detect_own_volatile_elsewhere");
    let declined = "pairs of volatile accesses in dependencies (racing by design: not reported)";
    let (run, runs) = retry_for(DETECTION_BUDGET, || {
        let mut cmd = common::racewatch();
        cmd.current_dir(&elsewhere).args(["run", "-o", "sample_period_us=1000", "-o", "stats=1", "--"]);
        cmd.arg(&demo.bin).arg(RACY_RUN_SECONDS).env_remove("RACEWATCH_OPTIONS").env_remove("LD_PRELOAD");
        let run = common::spawn_and_wait(cmd);
        if stat(&run.stderr, declined).is_some_and(|n| n > 0) {
            return Err(format!("the program's own volatile pairs were declined:\n{}", stats_summary(&run.stderr)));
        }
        Ok(has_report(&run.stderr).then_some(run))
    })
    .unwrap_or_else(|why| panic!("racy_flag run outside its source tree: {why}"));
    let block = first_text_report(&run.stderr).expect("a text report").join("\n");
    assert!(block.contains("/demos/src/bin/racy_flag.rs:"), "an absolute path of the program's own file: {block}");
    eprintln!("racy_flag outside its source tree: reported after {runs} run(s)");
}

const DEEP_STACK: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long counter;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
__attribute__((noinline)) void bump(void) { counter++; }
__attribute__((noinline)) void descend(int depth) {
  if (depth == 0) {
    for (int i = 0; i < 1000; i++) bump();
  } else {
    descend(depth - 1);
  }
  __asm__ volatile("" ::: "memory");
}
static double until;
__attribute__((noinline)) void *outermost_worker(void *arg) { while (now() < until) descend(100); return arg; }
int main(int argc, char **argv) {
  until = now() + (argc > 1 ? atof(argv[1]) : 3);
  pthread_t a, b;
  pthread_create(&a, 0, outermost_worker, 0);
  pthread_create(&b, 0, outermost_worker, 0);
  pthread_join(a, 0);
  pthread_join(b, 0);
  printf("deep: done %d\n", counter != 0);
  return 0;
}
"#;

/// A race 100 calls deep: the stacks keep the access and the thread's outermost frames, the middle
/// left out with a count.
#[test]
fn deep_stacks_keep_the_access_and_the_outermost_frames() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("detect_deep");
    let bin = common::build_c(&clang, &dir, "deep", DEEP_STACK, &["-lpthread"]);
    let (run, _) = first_reported_run(&bin, &[SAMPLE_PERIOD], "deep: done 1")
        .unwrap_or_else(|why| panic!("the race was not reported: {why}"));
    let report = first_text_report(&run.stderr).expect("a text report").join("\n");
    let (current, previous) = report.split_once("  Previous").expect("two accesses");
    let previous = previous.split("\n  Location").next().unwrap();
    for (access, text) in [("current", current), ("previous", previous)] {
        assert!(text.contains("    #0 bump "), "{access}: {report}");
        assert!(text.contains(" frames left out)\n"), "{access}: {report}");
        assert!(text.contains(" outermost_worker "), "{access} reaches the thread's function: {report}");
    }
}

const LIBTEST_RACE: &str = r#"
use std::time::{Duration, Instant};
static mut SHARED: u64 = 0;
#[inline(never)]
fn bump() {
    unsafe { SHARED += 1 }
}
fn work_until(until: Instant) {
    while Instant::now() < until {
        for _ in 0..1000 {
            bump();
        }
    }
}
#[test]
fn a_race_between_the_test_thread_and_its_helper() {
    let until = Instant::now() + Duration::from_secs(3);
    let helper = std::thread::spawn(move || work_until(until));
    work_until(until);
    helper.join().unwrap();
}
"#;

/// A libtest harness runs each test on a thread named after it (cut to 15 bytes): the report names the
/// whole test for both the test's thread and the thread the test spawned, and only the test's thread
/// has the name (the helper inherited it).
#[test]
fn races_in_a_test_harness_name_the_test() {
    let dir = common::scratch("detect_libtest");
    let bin = common::build_rust(&dir, "libtest_race", LIBTEST_RACE, &["--test"]);
    let test = "a_race_between_the_test_thread_and_its_helper";
    let (run, runs) = retry_for(DETECTION_BUDGET, || {
        let run = run_under(&[SAMPLE_PERIOD], &bin, &[]);
        let reported = has_report(&run.stderr);
        if run.status.code() != Some(clean_run_status(reported)) || !run.stdout.contains("test result: ok") {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(reported.then_some(run))
    })
    .unwrap_or_else(|why| panic!("the test's race was not reported: {why}"));
    let block = first_text_report(&run.stderr).expect("a text report");
    let text = block.join("\n");
    let accesses: Vec<&&str> =
        block.iter().filter(|l| l.contains(" of size 8 at ") && l.contains(" by thread T")).collect();
    assert_eq!(accesses.len(), 2, "{text}");
    // The test's thread is named after the test (cut to 15 bytes); the helper started with a copy of
    // that name, which is not its own, so it has none. Both run the test, named whole.
    let named = accesses.iter().filter(|a| a.contains(&format!(" '{}' (tid ", &test[..15]))).count();
    assert_eq!(named, 1, "only the test's thread is named: {text}");
    for access in &accesses {
        assert!(access.ends_with(&format!(") in test {test}:")), "{text}");
    }
    // The helper was created by the test's thread, in the test.
    let helper =
        block.iter().position(|l| l.contains("created by thread T") && l.contains(&format!("'{}'", &test[..15])));
    let helper = helper.unwrap_or_else(|| panic!("the helper's creation: {text}"));
    let frames: Vec<&&str> = block[helper + 1..].iter().take_while(|l| l.starts_with("    #")).collect();
    assert!(frames.iter().any(|f| f.contains(&format!("{test} ")) || f.contains(&format!("{test}::"))), "{text}");
    eprintln!("libtest race: reported after {runs} run(s)");
}

/// A race-free C++20 program whose readers `load` a `std::atomic<std::shared_ptr>` while a writer `store`s
/// it, for 3 s at the debug rate: libstdc++'s spin lock in it makes relaxed loads whose `sanmd_atomics2`
/// tag clang 19 drops once they are inlined, racing with the lock's `fetch_sub` (held-out set 17, p58:
/// one report in every 3-second run before). Their debug info places them in `bits/atomic_base.h`, so the
/// review takes them as the atomics they are.
#[test]
fn std_atomic_shared_ptr_is_not_reported() {
    let Some(clang) = common::clang() else { return };
    let clangxx = clang.with_file_name(clang.file_name().unwrap().to_string_lossy().replace("clang", "clang++"));
    if !std::process::Command::new(&clangxx).arg("--version").output().is_ok_and(|out| out.status.success()) {
        eprintln!("SKIP: {} not found", clangxx.display());
        return;
    }
    let dir = common::scratch("detect_atomic_shared_ptr");
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/atomic_shared_ptr.cpp");
    let bin = dir.join("atomic_shared_ptr");
    common::check(
        std::process::Command::new(&clangxx)
            .args(racewatch_instrument::toolchain::C_FLAGS)
            .args(["-O2", "-std=c++20", "-pthread"])
            .arg(&source)
            .arg("-o")
            .arg(&bin)
            .output()
            .unwrap(),
        "clang++",
    );
    let run = run_under(&[SAMPLE_PERIOD, "stats=1"], &bin, &["3"]);
    assert_eq!(run.stdout, "stores: yes, reads: yes\n", "{}", run.stderr);
    assert!(!has_report(&run.stderr), "a race reported in std::atomic<std::shared_ptr>:\n{}", run.stderr);
    assert!(stat(&run.stderr, "watches armed").unwrap_or(0) > 0, "nothing watched: {}", stats_summary(&run.stderr));
}
