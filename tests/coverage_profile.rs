//! Run-time coverage end to end: racy demos run with `coverage_path`, their profiles checked against
//! the same run's `stats`, merged across processes, and rendered as JSON, LCOV (read by Debian's
//! genhtml) and HTML.

mod common;

use common::{clean_run_status, demo, has_report, run_under, stat, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const RATE: &str = "sample_period_us=1000";

/// Runs `demo` with a profile prefix in `dir` and `stats=1`; returns the run and its profile file.
fn profiled_run(dir: &Path, bin: &Path) -> (Run, PathBuf) {
    let prefix = dir.join("prof");
    let run = run_under(&[RATE, "stats=1", &format!("coverage_path={}", prefix.display())], bin, &["1"]);
    // 66 after a report (`racewatch run`'s `fail_on_race=1`), else 0.
    assert_eq!(run.status.code(), Some(clean_run_status(has_report(&run.stderr))), "{}: {}", run.status, run.stderr);
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
            let races: Vec<u64> =
                demo_file["race_lines"].as_array().unwrap().iter().map(|l| l[0].as_u64().unwrap()).collect();
            assert!(races.iter().any(|l| racy.contains(&(*l as u32))), "{name}: race lines {races:?}, racy {racy:?}");
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
    // DA: the lines the detector could watch (0) and those it watched (> 0), so LH < LF.
    let da: Vec<u64> = record.lines().filter_map(|l| l.strip_prefix("DA:")?.split(',').nth(1)?.parse().ok()).collect();
    assert!(da.contains(&0) && da.iter().any(|&n| n > 0), "access and watched lines: {record}");
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

/// The page's data: the JSON object the template's `const DATA = …;` line holds.
fn page_data(html: &str) -> Value {
    let start = html.find("const DATA = ").expect("data line") + "const DATA = ".len();
    let end = start + html[start..].find(";\n").expect("end of the data line");
    serde_json::from_str(&html[start..end]).expect("the data is JSON")
}

#[test]
fn html_page_is_self_contained_and_carries_sources_and_marks() {
    let d = demo("rust", "racy_struct");
    let dir = common::scratch("profile_html");
    let (run, profile) = profiled_run(&dir, &d.bin);
    let page = dir.join("coverage.html");
    let out = common::racewatch()
        .args(["coverage", "--format", "html", "-o"])
        .arg(&page)
        .arg("--profile")
        .arg(&profile)
        .arg(&d.bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    for external in [" src=", "href=\"http", "@import", "url(http", "<link"] {
        assert!(!html.contains(external), "external asset {external}");
    }
    // Two scripts (the page's code and the data), a filter box, sortable headers.
    assert_eq!(html.matches("<script>").count(), 2);
    assert!(html.contains("type=\"search\"") && html.contains("data-k=\""), "filter box and sortable columns");
    let data = page_data(&html);
    assert_eq!(data["profiled"], true);
    assert_eq!(data["processes"], 1);
    assert_eq!(data["groups"][0]["origin"], "user");
    let files = data["files"].as_array().unwrap();
    let demo_file = files.iter().find(|f| f["path"].as_str().unwrap().ends_with(&d.source_suffix)).expect("demo file");
    assert_eq!(demo_file["group"], 0);
    assert_eq!(demo_file["source"].as_str().unwrap(), std::fs::read_to_string(&d.source).unwrap());
    assert!(!demo_file["covered_lines"].as_array().unwrap().is_empty());
    for row in demo_file["functions"].as_array().unwrap() {
        assert_eq!(row.as_array().unwrap().len(), 10, "{row}");
    }
    // One row per source function (instances merged), as the JSON totals count them.
    let rows = files.iter().map(|f| f["functions"].as_array().unwrap().len()).sum::<usize>();
    let json = coverage_json(&["--profile", path(&profile), path(&d.bin)]);
    assert_eq!(rows as u64, json["totals"]["functions"].as_u64().unwrap());
    let samples: u64 =
        files.iter().flat_map(|f| f["functions"].as_array().unwrap()).map(|r| r[5].as_u64().unwrap()).sum();
    let in_covered = stat(&run.stderr, "samples").unwrap() - stat(&run.stderr, "samples in uncovered code").unwrap();
    assert_eq!(samples, in_covered);
    let racy = d.racy_lines();
    let watched = demo_file["watched_lines"].as_array().unwrap();
    assert!(
        watched.iter().any(|l| racy.contains(&(l[0].as_u64().unwrap() as u32))),
        "watched {watched:?}, racy {racy:?}"
    );
    // The standard library is a folded group with short paths and no sources.
    let std_files: Vec<&Value> =
        files.iter().filter(|f| data["groups"][f["group"].as_u64().unwrap() as usize]["origin"] == "std").collect();
    assert!(
        !std_files.is_empty()
            && std_files.iter().all(|f| f["source"].is_null() && !f["display"].as_str().unwrap().contains("/rustc/"))
    );
}

/// Text inside the page's data that would end its script element early is escaped.
#[test]
fn html_data_cannot_close_its_script() {
    let dir = common::scratch("profile_html_escape");
    let src = "fn main() {\n    // </script><!-- <script> -->\n    println!(\"{}\", std::hint::black_box(1));\n}\n";
    let bin = common::build_rust(&dir, "escape", src, &["-g"]);
    let out = common::racewatch().args(["coverage", "--format", "html"]).arg(&bin).output().unwrap();
    assert!(out.status.success());
    let html = String::from_utf8(out.stdout).unwrap();
    let data_line = html.lines().find(|l| l.starts_with("const DATA = ")).expect("data line");
    assert!(!data_line.contains("</") && !data_line.contains("<!--"), "{data_line}");
    let data = page_data(&html);
    let file =
        data["files"].as_array().unwrap().iter().find(|f| f["path"].as_str().unwrap().ends_with("escape.rs")).unwrap();
    assert_eq!(file["source"].as_str().unwrap(), src);
}
