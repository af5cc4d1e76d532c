//! JIT'd code for real: LLVM's ORC JIT (LLJIT) running IR that clang-19 emitted with racewatch's C flags,
//! with racewatch's ORC plugin (orc/include/racewatch/orc.h) and without, and stock `lli-19`; plus the
//! tables that cannot be misread (a declared PC-offset width that does not fit) and the `0x0..0x0` range.
//!
//! The LLJIT host (tests/jit/host.cpp, against libLLVM-19) is built once per test binary; tests that need
//! it are skipped with a SKIP line when `llvm-config-19` or `clang++-19` is missing (apt-get install
//! llvm-19-dev clang-19).

mod common;

use common::{build_c, check, clang, has_report, retry_for, run_under, scratch, Run, REPORT_HEADER};
use racewatch_instrument::toolchain::C_FLAGS;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The JIT'd program: racy, relaxed-atomic and mutex-guarded (clean) counters.
fn race_c() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jit/race.c")
}

/// The 1-based line of tests/jit/race.c marked `racewatch: racy`.
fn racy_line() -> u32 {
    let text = std::fs::read_to_string(race_c()).unwrap();
    text.lines().zip(1..).find(|(l, _)| l.contains("racewatch: racy")).map(|(_, n)| n).unwrap()
}

/// Runs `program args` with `options` under `racewatch run` (which sets `fail_on_race=1`).
fn run(options: &[&str], program: &Path, args: &[&str]) -> Run {
    run_under(options, program, args)
}

fn lines_with<'a>(stderr: &'a str, needle: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(needle)).collect()
}

// ---- Tables that cannot be misread ----

/// A library whose IR was compiled for the small code model (its tables declare version 2, 4-byte PC
/// offsets) and then built with `-mcmodel=large` (8-byte offsets), as a large-code-model JIT links such
/// IR: `racewatch dump` and the runtime (at `dlopen`) decode it with the width that fits, and say so in
/// one line. A table that fits neither width is refused with one line naming both reasons and the fix.
#[test]
fn misread_width_is_decoded_with_the_width_that_fits_or_refused() {
    let Some(clang) = clang() else { return };
    let dir = scratch("jit_misread_width");
    let lib_c = dir.join("lib.c");
    std::fs::write(
        &lib_c,
        "#include <stdatomic.h>\natomic_long hits; long plain;\n\
         __attribute__((noinline)) long work(long n) { for (long i = 0; i < n; i++) { \
         atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed); plain += i; } return plain; }\n",
    )
    .unwrap();
    let ll = dir.join("lib.ll");
    check(
        Command::new(&clang)
            .args(C_FLAGS)
            .args(["-O1", "-fPIC", "-S", "-emit-llvm"])
            .arg(&lib_c)
            .arg("-o")
            .arg(&ll)
            .output()
            .unwrap(),
        "clang -emit-llvm",
    );
    let lib = dir.join("libmisread.so");
    check(
        Command::new(&clang)
            .args(["-mcmodel=large", "-fPIC", "-shared"])
            .arg(&ll)
            .arg("-o")
            .arg(&lib)
            .output()
            .unwrap(),
        "clang -mcmodel=large -shared lib.ll",
    );

    // Files: the dump decodes every entry, with a note and no error.
    let out = common::racewatch().arg("dump").arg(&lib).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("NOTE: sanmd_covered2 holds 8-byte PC offsets"), "{stdout}");
    assert!(stdout.contains("-mcmodel=large") && !stdout.contains("ERROR"), "{stdout}");
    assert!(stdout.contains(" work size="), "{stdout}");

    // dlopen: the constructor's callbacks; one note line, the function covered, its atomic atomic.
    let main_src = format!(
        r#"
        #include <dlfcn.h>
        #include <stdio.h>
        int main(void) {{
            void *lib = dlopen("{}", RTLD_NOW);
            if (!lib) {{ printf("dlopen failed\n"); return 1; }}
            long (*work)(long) = (long (*)(long))dlsym(lib, "work");
            int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
            printf("work %ld classify %d\n", work(3), classify ? classify((unsigned long)work) : -1);
            return 0;
        }}
    "#,
        lib.display()
    );
    let exe = build_c(&clang, &dir, "main", &main_src, &[]);
    let out = run(&["verbosity=1"], &exe, &[]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "work 3 classify 1\n", "{}", out.stderr);
    let notes = lines_with(&out.stderr, "holds 8-byte PC offsets although its version 0x2 declares 4-byte ones");
    assert_eq!(notes.len(), 1, "{}", out.stderr);
    assert!(notes[0].starts_with("racewatch: ") && notes[0].contains("libmisread.so"), "{}", out.stderr);
    assert!(out.stderr.contains("libmisread.so: 1 covered functions, 1 atomic PCs"), "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);

    // A table whose PCs point outside executable memory with either width: refused, one line.
    let src = r#"
        #include <dlfcn.h>
        #include <stdint.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/mman.h>
        typedef void (*cb_t)(uint32_t, const char *, const char *);
        int main(void) {
            cb_t add = (cb_t)dlsym(RTLD_DEFAULT, "__sanitizer_metadata_atomics_add");
            int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
            if (!add || !classify) { printf("no runtime\n"); return 0; }
            unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            for (int i = 0; i < 4; i++) { int32_t rel = 64 + i; memcpy(page + 4 * i, &rel, 4); }
            add(2, (char *)page, (char *)page + 16);
            printf("classify %d\n", classify((unsigned long)page + 64));
            return 0;
        }
    "#;
    let exe = build_c(&clang, &dir, "refused", src, &[]);
    let out = run(&[], &exe, &[]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "classify 0\n", "{}", out.stderr);
    let warnings = lines_with(&out.stderr, "racewatch: warning:");
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    for needle in ["ignoring PC table of <anonymous", "outside the code", "declared 4-byte", "8-byte", "-mcmodel=large"]
    {
        assert!(warnings[0].contains(needle), "{needle}: {}", out.stderr);
    }
}

/// A module constructor whose `__start_`/`__stop_` symbols resolved to nothing (what JITLink does to the
/// tables of stock `lli`): one line naming the cause and the fix, not a generic "bad range".
#[test]
fn zero_range_names_the_dropped_tables_and_the_plugin() {
    let Some(clang) = clang() else { return };
    let dir = scratch("jit_zero_range");
    let src = r#"
        #include <stdint.h>
        #include <stdio.h>
        void __sanitizer_metadata_covered_add(uint32_t, const char *, const char *) __attribute__((weak));
        void __sanitizer_metadata_atomics_add(uint32_t, const char *, const char *) __attribute__((weak));
        int main(void) {
            for (int i = 0; i < 2; i++) {
                if (__sanitizer_metadata_covered_add) __sanitizer_metadata_covered_add(2, 0, 0);
                if (__sanitizer_metadata_atomics_add) __sanitizer_metadata_atomics_add(2, 0, 0);
            }
            printf("done\n");
            return 0;
        }
    "#;
    let exe = build_c(&clang, &dir, "zero", src, &[]);
    let out = run(&[], &exe, &[]);
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("racewatch:")).collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    for needle in ["0x0..0x0", "JIT linker dropped", "lli", "ORC plugin", "orc/include/racewatch/orc.h"] {
        assert!(lines[0].contains(needle), "{needle}: {}", out.stderr);
    }
    assert!(!out.stderr.contains("bad range"), "{}", out.stderr);
}

/// An ahead-of-time C++ program built without optimisation has an atomics constructor but no atomic
/// access of its own, so no `sanmd_atomics2` section: its constructor registers `0x0..0x0` for the
/// atomics table. That is not a JIT's dropped tables, and no line says so (set 37 p59 got the JIT
/// diagnosis on every run).
#[test]
fn an_empty_atomics_table_of_an_ahead_of_time_program_is_not_taken_for_a_jit() {
    let Some(clang) = clang() else { return };
    let clangxx = PathBuf::from(clang.to_string_lossy().replace("clang-19", "clang++-19"));
    if Command::new(&clangxx).arg("--version").output().is_err() {
        eprintln!("SKIP: {} not found", clangxx.display());
        return;
    }
    let dir = scratch("aot_empty_atomics");
    let src = dir.join("lazy.cc");
    std::fs::write(
        &src,
        r#"
        #include <cstdio>
        #include <thread>
        struct Lazy { int n; Lazy() : n(1) {} };
        static Lazy &lazy() { static Lazy l; return l; }
        int main() { std::thread t([] { lazy(); }); t.join(); std::printf("n %d\n", lazy().n); }
    "#,
    )
    .unwrap();
    let exe = dir.join("lazy");
    check(
        Command::new(&clangxx).args(C_FLAGS).args(["-O0", "-pthread"]).arg(&src).arg("-o").arg(&exe).output().unwrap(),
        "clang++",
    );
    let bytes = std::fs::read(&exe).unwrap();
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"__sanitizer_metadata_atomics_add") && !has(b"sanmd_atomics2"), "premise: an empty atomics table");
    let out = run(&[], &exe, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "n 1\n");
    assert!(!out.stderr.lines().any(|l| l.starts_with("racewatch:")), "{}", out.stderr);
}

// ---- LLJIT for real ----

/// How long a racy JIT'd run races, and how long the tests keep trying for a report.
const RACY_SECONDS: &str = "1";
const DETECTION_BUDGET: Duration = Duration::from_secs(30);
/// The test profile's rate (what `racewatch cargo` uses): the JIT'd race is found within a run.
const RATE: &[&str] = &["sample_period_us=250", "watchpoints=4", "cold_bias=0"];

/// The built host and the IR of tests/jit/race.c: default code model and `-mcmodel=large`.
struct Jit {
    host: PathBuf,
    ir: PathBuf,
    ir_large: PathBuf,
}

/// Builds the LLJIT host (tests/jit/host.cpp with the plugin's header, against libLLVM-19) and emits the
/// IR, once per test binary; `None` (with a SKIP line) without llvm-config-19, clang++-19 or clang-19.
fn jit() -> Option<&'static Jit> {
    static JIT: OnceLock<Option<Jit>> = OnceLock::new();
    JIT.get_or_init(|| {
        let clang = clang()?;
        let config = |args: &[&str]| -> Option<Vec<String>> {
            let out = Command::new("llvm-config-19").args(args).output().ok().filter(|o| o.status.success())?;
            Some(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect())
        };
        let (Some(cxxflags), Some(libs)) = (config(&["--cxxflags"]), config(&["--ldflags", "--libs"])) else {
            eprintln!("SKIP: llvm-config-19 not found (apt-get install llvm-19-dev); LLJIT tests skipped");
            return None;
        };
        if Command::new("clang++-19").arg("--version").output().is_err() {
            eprintln!("SKIP: clang++-19 not found (apt-get install clang-19); LLJIT tests skipped");
            return None;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("jit-host");
        std::fs::create_dir_all(&dir).unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let host = dir.join("host");
        let started = Instant::now();
        let build = Command::new("clang++-19")
            .args(&cxxflags)
            .arg("-I")
            .arg(root.join("orc/include"))
            .arg("-O1")
            .arg(root.join("tests/jit/host.cpp"))
            .args(&libs)
            .arg("-o")
            .arg(&host)
            .output()
            .unwrap();
        check(build, "clang++-19 tests/jit/host.cpp");
        eprintln!("jit: host built in {:.1} s", started.elapsed().as_secs_f64());
        let emit = |extra: &[&str], out: &Path| {
            let mut cmd = Command::new(&clang);
            cmd.args(C_FLAGS).args(["-g", "-O2", "-S", "-emit-llvm"]).args(extra).arg(race_c()).arg("-o").arg(out);
            check(cmd.output().unwrap(), "clang-19 -S -emit-llvm tests/jit/race.c");
        };
        let (ir, ir_large) = (dir.join("race.ll"), dir.join("race_large.ll"));
        emit(&[], &ir);
        emit(&["-mcmodel=large"], &ir_large);
        Some(Jit { host, ir, ir_large })
    })
    .as_ref()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs the host under `racewatch run` with `options` (plus the test rate) and the host's arguments.
fn host_run(jit: &Jit, options: &[&str], args: &[&str]) -> Run {
    let options: Vec<&str> = RATE.iter().chain(options).copied().collect();
    run(&options, &jit.host, args)
}

/// Runs the host until a run reports a race (each run must end with `done`, exit 66 after a report and
/// 0 without); the run and how many it took.
fn until_reported(jit: &Jit, options: &[&str], args: &[&str]) -> (Run, usize, Duration) {
    let start = Instant::now();
    let (run, runs) = retry_for(DETECTION_BUDGET, || {
        let run = host_run(jit, options, args);
        let reported = has_report(&run.stderr);
        if run.status.code() != Some(if reported { 66 } else { 0 }) || !run.stdout.ends_with("done\n") {
            return Err(format!("{}: {}\n{}", run.status, run.stdout, run.stderr));
        }
        Ok(reported.then_some(run))
    })
    .unwrap_or_else(|e| panic!("host {args:?}: {e}"));
    (run, runs, start.elapsed())
}

/// The first text report of `stderr`, its lines.
fn first_report(stderr: &str) -> Vec<&str> {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().position(|l| l.starts_with(REPORT_HEADER)).expect("a report");
    let end = lines[start..].iter().position(|l| l.starts_with("SUMMARY: ")).expect("a SUMMARY line");
    lines[start..=start + end].to_vec()
}

/// Checks that a report is racy_bump's race on racy_total, JIT frames named with file:line.
fn check_racy_report(stderr: &str) {
    let report = first_report(stderr);
    let text = report.join("\n");
    // Files under the working directory are shown relative to it (tests run in the package root).
    let frame = format!("#0 racy_bump tests/jit/race.c:{}:", racy_line());
    let frames = report.iter().filter(|l| l.trim_start().starts_with(&frame)).count();
    assert_eq!(frames, 2, "both accesses' first frame is racy_bump at race.c:{}:\n{text}", racy_line());
    assert!(text.contains("Location is global 'racy_total' of size 8"), "{text}");
    assert!(text.contains(&format!("race.c:{}", racy_line())) && text.contains(" racy_main "), "{text}");
    let summary = report.last().unwrap();
    assert!(summary.contains(&format!("race.c:{}", racy_line())) && summary.ends_with(" in racy_bump"), "{text}");
    // JIT'd frames are named (an unnamed one would print as `<unknown> (0x...)`); glibc's frames below a
    // thread's start routine print with their module.
    assert!(!text.contains("relaxed_bump") && !text.contains("<unknown> (0x"), "{text}");
}

/// The race in JIT'd code is reported with its JIT frames named (function, file:line), in both code
/// models of the IR and of the JIT (LLJIT configures JITLink with the small code model; a hand-built
/// object linking layer keeps the target's large one): matching models, and mismatched ones, whose tables
/// are decoded with the width that fits after one line saying so. The exit status follows
/// `fail_on_race` (66 under `racewatch run`).
#[test]
fn lljit_race_is_reported_with_named_jit_frames_in_both_code_models() {
    let Some(jit) = jit() else { return };
    for (ir, large_jit) in [(&jit.ir, false), (&jit.ir_large, true), (&jit.ir, true), (&jit.ir_large, false)] {
        let mut args = vec![];
        if large_jit {
            args.push("--large-jit");
        }
        args.extend(["add", "a", path(ir), "classify", "a", "racy_bump", "run", "a", "racy_main", RACY_SECONDS]);
        let (run, runs, took) = until_reported(jit, &[], &args);
        eprintln!(
            "jit: {} in a {} JIT: reported after {runs} run(s), {:.1} s",
            ir.display(),
            if large_jit { "large" } else { "small" },
            took.as_secs_f64()
        );
        assert!(run.stdout.starts_with("classify racy_bump 1\n"), "{}", run.stdout);
        check_racy_report(&run.stderr);
        let mismatched = (ir == &jit.ir) == large_jit;
        let notes = lines_with(&run.stderr, "PC offsets although its version");
        assert_eq!(notes.len(), usize::from(mismatched), "{args:?}:\n{}", run.stderr);
        assert!(!run.stderr.contains("warning"), "{}", run.stderr);
        assert!(run.stderr.contains("exit status 66 instead of 0 (fail_on_race=1)"), "{}", run.stderr);
    }
    // With fail_on_race=0 the host's own status.
    let (run, _) = retry_for(DETECTION_BUDGET, || {
        let run =
            host_run(jit, &["fail_on_race=0"], &["add", "a", path(&jit.ir), "run", "a", "racy_main", RACY_SECONDS]);
        Ok::<_, String>(has_report(&run.stderr).then_some(run))
    })
    .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
}

/// The relaxed atomic counter and the mutex-guarded twin, JIT'd: no report over a fixed time while the
/// detector watches their accesses, and the exit status is the host's own.
#[test]
fn lljit_relaxed_atomic_and_clean_twin_are_never_reported() {
    let Some(jit) = jit() else { return };
    let dir = scratch("jit_clean");
    for (i, ir) in [&jit.ir, &jit.ir_large].into_iter().enumerate() {
        let args = ["add", "a", path(ir), "run", "a", "relaxed_main", "1.5", "run", "a", "clean_main", "1.5"];
        let prefix = dir.join(format!("profile{i}"));
        let coverage = format!("coverage_path={}", prefix.display());
        let run = host_run(jit, &["stats=1", &coverage], &args);
        assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
        assert!(!has_report(&run.stderr), "{}", run.stderr);
        assert!(run.stdout.ends_with("done\n"), "{}", run.stdout);
        let watches = common::stat(&run.stderr, "watches armed").unwrap_or(0);
        eprintln!("jit: {}: no report, {watches} watches", ir.display());
        assert!(watches > 100, "the JIT'd accesses were watched: {}", common::stats_summary(&run.stderr));
        // The run-time coverage profile has the JIT'd functions, named, with their samples and watches.
        let profile = std::fs::read_to_string(format!("{}.{}", prefix.display(), run.pid)).unwrap();
        for (function, watched) in [("relaxed_bump", true), ("guarded_bump", false)] {
            let line = profile.lines().find(|l| l.starts_with("jitfn ") && l.ends_with(&format!(" {function}")));
            let line = line.unwrap_or_else(|| panic!("{function}:\n{profile}"));
            let counts: Vec<u64> = line.split(' ').skip(2).take(2).map(|n| n.parse().unwrap()).collect();
            // (The mutex twin's one access follows the lock's call, where few samples land.)
            assert!(counts[0] > 0 && (counts[1] > 0 || !watched), "samples and watches in {function}:\n{profile}");
        }
    }
}

/// Removing the JITDylib unregisters its tables (the function is uncovered afterwards, the runtime says
/// `unindexed`), and a race in the same code added again, at new addresses, is still found.
#[test]
fn lljit_removed_jitdylib_is_unindexed_and_readded_code_is_watched() {
    let Some(jit) = jit() else { return };
    let args = [
        "--large-jit",
        "add",
        "a",
        path(&jit.ir_large),
        "classify",
        "a",
        "racy_bump",
        "run",
        "a",
        "clean_main",
        "0.2",
        "remove",
        "a",
        "classify",
        "a",
        "racy_bump",
        "add",
        "b",
        path(&jit.ir_large),
        "classify",
        "b",
        "racy_bump",
        "run",
        "b",
        "racy_main",
        RACY_SECONDS,
    ];
    let (run, runs, took) = until_reported(jit, &["verbosity=1"], &args);
    eprintln!("jit: re-added code: reported after {runs} run(s), {:.1} s", took.as_secs_f64());
    let verdicts: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("classify ")).collect();
    assert_eq!(verdicts, ["classify racy_bump 1", "classify racy_bump 0", "classify racy_bump 1"], "{}", run.stderr);
    let unindexed = run.stderr.lines().position(|l| l.starts_with("racewatch: unindexed <anonymous 0x"));
    let report = run.stderr.lines().position(|l| l.starts_with(REPORT_HEADER));
    assert!(unindexed.is_some() && unindexed < report, "{}", run.stderr);
    check_racy_report(&run.stderr);
}

/// A second module JIT'd while the first one's threads run is indexed at once, and its race is found.
#[test]
fn lljit_module_added_while_threads_run_is_indexed() {
    let Some(jit) = jit() else { return };
    let args = [
        "add",
        "a",
        path(&jit.ir),
        "bg",
        "a",
        "clean_main",
        "2",
        "sleep",
        "0.2",
        "add",
        "b",
        path(&jit.ir),
        "classify",
        "b",
        "racy_bump",
        "run",
        "b",
        "racy_main",
        "1.5",
        "join",
    ];
    let (run, runs, took) = until_reported(jit, &[], &args);
    eprintln!("jit: module added while threads run: reported after {runs} run(s), {:.1} s", took.as_secs_f64());
    assert!(run.stdout.starts_with("classify racy_bump 1\n"), "{}", run.stdout);
    check_racy_report(&run.stderr);
}

/// Without ORC's debugger support no object is registered through the GDB JIT interface: JIT frames are
/// still named, from the plugin's symbol list (functions and globals), without file:line.
#[test]
fn lljit_without_debugger_support_names_functions_from_the_plugin() {
    let Some(jit) = jit() else { return };
    let args = ["--no-debug", "add", "a", path(&jit.ir), "run", "a", "racy_main", RACY_SECONDS];
    let (run, _, _) = until_reported(jit, &[], &args);
    let report = first_report(&run.stderr).join("\n");
    assert_eq!(report.matches("#0 racy_bump (0x").count(), 2, "{report}");
    assert!(report.contains("Location is global 'racy_total' of size 8"), "{report}");
    assert!(report.lines().last().unwrap().ends_with(" in racy_bump"), "{report}");
}

/// Stock `lli-19` (ORC and JITLink) and an LLJIT host without the plugin: JITLink drops the tables, the
/// constructor registers `0x0..0x0`, and the runtime says so in one line naming the plugin.
#[test]
fn stock_lli_and_a_jit_without_the_plugin_get_the_one_line_diagnosis() {
    let Some(jit) = jit() else { return };
    let mut runs =
        vec![host_run(jit, &[], &["--no-plugin", "add", "a", path(&jit.ir), "run", "a", "racy_main", "0.3"])];
    if Command::new("lli-19").arg("--version").output().is_ok() {
        runs.push(run(RATE, Path::new("lli-19"), &["-jit-kind=orc", path(&jit.ir), "0.3"]));
    } else {
        eprintln!("SKIP: lli-19 not found (apt-get install llvm-19); its case skipped");
    }
    for run in runs {
        assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
        assert!(run.stdout.ends_with("done\n"), "{}", run.stdout);
        let lines: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("racewatch:")).collect();
        assert_eq!(lines.len(), 1, "{}", run.stderr);
        assert!(
            lines[0].contains("0x0..0x0: the JIT linker dropped") && lines[0].contains("ORC plugin"),
            "{}",
            run.stderr
        );
    }
}
