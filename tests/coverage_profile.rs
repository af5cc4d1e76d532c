//! Run-time coverage end to end: racy demos run with `coverage_path`, their profiles checked against
//! the same run's `stats`, merged across processes, and rendered as JSON, LCOV (read by Debian's
//! genhtml) and HTML.

mod common;

use common::{demo, run_under, stat, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const RATE: &str = "sample_period_us=1000";

/// Runs `demo` with a profile prefix in `dir` and `stats=1`; returns the run and its profile file.
fn profiled_run(dir: &Path, bin: &Path) -> (Run, PathBuf) {
    let prefix = dir.join("prof");
    let run = run_under(&[RATE, "stats=1", &format!("coverage_path={}", prefix.display())], bin, &["1"]);
    assert!(run.status.success(), "{}: {}", run.status, run.stderr);
    let profile = PathBuf::from(format!("{}.{}", prefix.display(), run.pid));
    assert!(profile.is_file(), "no profile {} written:\n{}", profile.display(), run.stderr);
    (run, profile)
}

/// Sums of the `fn` records' columns: samples, watches, traps, races.
fn fn_sums(profile: &Path) -> [u64; 4] {
    let text = std::fs::read_to_string(profile).unwrap();
    assert!(text.starts_with("racewatch-profile 1\n"), "{text}");
    let mut sums = [0u64; 4];
    for line in text.lines().filter(|l| l.starts_with("fn ")) {
        let fields: Vec<u64> = line.split_whitespace().skip(2).map(|n| n.parse().unwrap()).collect();
        for (sum, n) in sums.iter_mut().zip(fields) {
            *sum += n;
        }
    }
    sums
}

fn coverage_json(args: &[&str]) -> Value {
    let out = common::racewatch().args(["coverage", "--format", "json"]).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn per_function_counts_add_up_to_the_same_runs_stats() {
    for (lang, name) in [("rust", "racy_struct"), ("c", "racy_counter")] {
        let d = demo(lang, name);
        let dir = common::scratch(&format!("profile_stats_{lang}"));
        let (run, profile) = profiled_run(&dir, &d.bin);
        let [samples, watches, traps, races] = fn_sums(&profile);
        let in_covered =
            stat(&run.stderr, "samples").unwrap() - stat(&run.stderr, "samples in uncovered code").unwrap();
        assert!(samples > 0, "{name}: nothing sampled");
        assert_eq!(samples, in_covered, "{name}: samples in covered code\n{}", run.stderr);
        assert_eq!(watches, stat(&run.stderr, "watches armed").unwrap(), "{name}: watches");
        assert!(traps <= stat(&run.stderr, "watchpoint traps").unwrap(), "{name}: traps");
        let printed = stat(&run.stderr, "reports printed").unwrap();
        assert!(races >= printed && races <= 2 * printed, "{name}: {races} race counts for {printed} reports");
        // The report shows the same totals, and the racy function as sampled and watched.
        let json = coverage_json(&["--profile", path(&profile), path(&d.bin)]);
        assert_eq!(json["profiled"], true);
        assert_eq!(json["profile"]["processes"], 1);
        assert_eq!(json["totals"]["samples"], samples);
        assert_eq!(json["totals"]["watches"], watches);
        let user = &json["groups"][0];
        assert_eq!(user["origin"], "user");
        let demo_file =
            user["files"].as_array().unwrap().iter().find(|f| f["path"].as_str().unwrap().ends_with(&d.source_suffix));
        let demo_file = demo_file.unwrap_or_else(|| panic!("{name}: no file {} in {user}", d.source_suffix));
        if printed > 0 {
            assert!(demo_file["totals"]["watched_functions"].as_u64().unwrap() >= 1, "{demo_file}");
            let racy = d.racy_lines();
            let watched: Vec<u64> =
                demo_file["watched_lines"].as_array().unwrap().iter().map(|l| l[0].as_u64().unwrap()).collect();
            assert!(
                watched.iter().any(|l| racy.contains(&(*l as u32))),
                "{name}: watched lines {watched:?}, racy {racy:?}"
            );
        }
    }
}

#[test]
fn profiles_of_several_processes_merge() {
    let d = demo("rust", "racy_counter");
    let dir = common::scratch("profile_merge");
    let (_, first) = profiled_run(&dir, &d.bin);
    let (_, second) = profiled_run(&dir, &d.bin);
    let one = |p: &Path| coverage_json(&["--profile", path(p), path(&d.bin)])["totals"].clone();
    let (a, b) = (one(&first), one(&second));
    // The directory (every profile in it), and the binary taken from the profiles.
    let merged = coverage_json(&["--profile", path(&dir)]);
    assert_eq!(merged["profile"]["processes"], 2);
    assert_eq!(merged["binaries"].as_array().unwrap().len(), 1, "{}", merged["binaries"]);
    for key in ["samples", "watches", "traps", "races"] {
        assert_eq!(merged["totals"][key].as_u64(), Some(a[key].as_u64().unwrap() + b[key].as_u64().unwrap()), "{key}");
    }
    // The spelling: --profile P… BINARY (the binary after the profiles) sums the same.
    let spelled = coverage_json(&["--profile", path(&first), path(&second), path(&d.bin)]);
    assert_eq!(spelled["totals"], merged["totals"]);
    // A profile of another binary does not count for this one.
    let other = demo("rust", "racy_flag");
    let foreign = coverage_json(&["--profile", path(&first), path(&other.bin)]);
    assert_eq!(foreign["totals"]["samples"], 0);
    assert!(foreign["profile"]["unmatched"][0].as_str().unwrap().contains("racy_counter"), "{}", foreign["profile"]);
}

#[test]
fn lcov_tracefile_is_accepted_by_genhtml() {
    let d = demo("rust", "racy_struct");
    let dir = common::scratch("profile_lcov");
    let (_, profile) = profiled_run(&dir, &d.bin);
    let out = common::racewatch()
        .args(["coverage", "--format", "lcov", "--profile"])
        .arg(&profile)
        .arg(&d.bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lcov = String::from_utf8(out.stdout).unwrap();
    let record =
        lcov.split("end_of_record").find(|r| r.contains(&format!("SF:{}", d.source.display()))).expect("demo record");
    assert!(record.contains("\nFN:") && record.contains("\nFNDA:") && record.contains("\nFNH:"), "{record}");
    assert!(record.contains("\nDA:"), "watched lines: {record}");
    let tracefile = dir.join("racewatch.lcov");
    std::fs::write(&tracefile, &lcov).unwrap();
    let html = dir.join("genhtml");
    let genhtml = std::process::Command::new("genhtml").arg("-q").arg("-o").arg(&html).arg(&tracefile).output();
    match genhtml {
        Ok(run) => {
            assert!(run.status.success(), "genhtml failed:\n{}", String::from_utf8_lossy(&run.stderr));
            assert!(html.join("index.html").is_file());
        }
        Err(_) if std::env::var_os("CI").is_none() => eprintln!("SKIP: genhtml not installed (apt-get install lcov)"),
        Err(e) => panic!("genhtml is required in CI (.ci/run installs lcov): {e}"),
    }
}
