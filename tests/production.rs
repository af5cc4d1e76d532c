//! End to end: the production profile on the real demos — `symbolize=0` (no module file read, frames as
//! build-id + offset), JSON schema 1 with its keys, `log_path=DIR/` (one file per process), and `pc:`
//! suppressions that keep the sampler off a known race's accesses.

mod common;

use common::{demo, retry_for, run_under, scratch, stat, stats_summary, Demo};
use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

const BUDGET: Duration = Duration::from_secs(40);

fn is_key(value: &Value) -> bool {
    value.as_str().is_some_and(|k| k.len() == 16 && k.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The JSON lines of every log file in `dir`, with the file names.
fn logs(dir: &Path) -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("log dir").flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        out.push((entry.file_name().to_string_lossy().into_owned(), lines));
    }
    out
}

/// Runs `demo` under `options` plus the production profile into `dir` until a run reports.
fn until_reported(demo: &Demo, dir: &Path, options: &[&str]) -> (common::Run, Vec<Value>) {
    let log_path = format!("log_path={}/", dir.display());
    let mut all: Vec<&str> = vec!["symbolize=0", "report_format=json", "sample_period_us=1000", "stats=1"];
    all.push(&log_path);
    all.extend_from_slice(options);
    retry_for(BUDGET, || {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let run = run_under(&all, &demo.bin, &["3"]);
        let reports: Vec<Value> =
            logs(dir).into_iter().flat_map(|(_, lines)| lines).filter(|l| l["kind"] == "data_race").collect();
        Ok((!reports.is_empty()).then_some((run, reports)))
    })
    .unwrap_or_else(|why| panic!("{}: {why}", demo.label()))
    .0
}

#[test]
fn the_production_profile_writes_schema_1_reports_into_a_directory_without_reading_module_files() {
    let demo = demo("rust", "racy_counter");
    let dir = scratch("production_profile");
    let (run, reports) = until_reported(demo, &dir, &["host=web-1", "app_version=1.2.3"]);
    let files = logs(&dir);
    assert_eq!(files.len(), 1, "one file per process: {files:?}");
    let (name, lines) = &files[0];
    let parts: Vec<&str> = name.split('.').collect();
    assert_eq!(&parts[..3], ["racewatch", "racy_counter", "web-1"], "{name}");
    assert_eq!(parts[3], run.pid.to_string(), "{name}");
    assert!(parts[4].parse::<u64>().unwrap() > 1_600_000_000 && parts[5] == "log", "{name}");
    // Stats go to the same file: not a single module file was read for symbols or debug info.
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    assert_eq!(stat(&text, "module files read for symbols or debug info"), Some(0), "{}", stats_summary(&text));
    assert!(!lines.is_empty());

    let report = &reports[0];
    assert_eq!(report["schema"], 1, "{report}");
    assert_eq!(report["host"], "web-1");
    assert_eq!(report["pid"], run.pid);
    assert_eq!(report["app_version"], "1.2.3");
    assert!(report["start_time"].as_u64().unwrap() <= report["time"].as_u64().unwrap(), "{report}");
    assert!(report["exe"]["path"].as_str().unwrap().ends_with("/racy_counter"), "{report}");
    let exe_build_id = report["exe"]["build_id"].as_str().expect("the executable's build-id").to_string();
    assert!(is_key(&report["race_key"]), "{report}");
    assert_eq!(report["source_key"], Value::Null, "nothing symbolized: {report}");
    assert_eq!(report["count"], 1);
    // The static the demo races on: the module and the offset, named offline by racewatch triage.
    let location = &report["location"];
    assert_eq!(
        (&location["kind"], &location["build_id"]),
        (&Value::from("module"), &Value::from(exe_build_id.as_str()))
    );
    assert!(location["offset"].as_str().unwrap().starts_with("0x"), "{location}");
    for access in report["accesses"].as_array().unwrap() {
        let frames = access["stack"].as_array().unwrap();
        let first = &frames[0];
        assert_eq!(first["build_id"], exe_build_id.as_str(), "the access is in the executable: {access}");
        assert!(first["offset"].as_str().unwrap().starts_with("0x"));
        assert!(frames.iter().all(|f| f["file"].is_null() && f["line"].is_null()), "{access}");
    }
}

#[test]
fn pc_suppressions_keep_the_sampler_off_a_known_race() {
    let demo = demo("rust", "racy_flag");
    let dir = scratch("production_pc_suppressions");
    // Learn the races (their access PCs as build-id + offset) from two runs that report.
    let mut known_keys = HashSet::new();
    let mut pcs = HashSet::new();
    for _ in 0..2 {
        let (_, reports) = until_reported(demo, &dir, &[]);
        for report in reports {
            known_keys.insert(report["race_key"].as_str().unwrap().to_string());
            for access in report["accesses"].as_array().unwrap() {
                let frame = &access["stack"][0];
                pcs.insert(format!("pc:{}+{}", frame["build_id"].as_str().unwrap(), frame["offset"].as_str().unwrap()));
            }
        }
    }
    let suppressions = dir.parent().unwrap().join("production_pc_suppressions.supp");
    std::fs::write(&suppressions, pcs.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let option = format!("suppressions={}", suppressions.display());
    let log_path = format!("log_path={}/", dir.display());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = run_under(
        &["symbolize=0", "report_format=json", "sample_period_us=1000", "stats=1", &log_path, &option],
        &demo.bin,
        &["3"],
    );
    let text: String = logs(&dir).iter().map(|(name, _)| std::fs::read_to_string(dir.join(name)).unwrap()).collect();
    let declined = stat(&text, "samples declined at a PC of a suppressed race (pc: suppressions)").unwrap_or(0);
    assert!(declined > 0, "no sample was declined: {}\n{}", stats_summary(&text), run.stderr);
    let again: Vec<Value> = logs(&dir)
        .into_iter()
        .flat_map(|(_, lines)| lines)
        .filter(|l| l["kind"] == "data_race" && known_keys.contains(l["race_key"].as_str().unwrap_or("")))
        .collect();
    assert!(again.is_empty(), "known races reported again: {again:?}");
}
