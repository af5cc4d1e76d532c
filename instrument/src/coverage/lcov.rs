//! The coverage report as an LCOV tracefile, for genhtml, Codecov and editors' coverage gutters.
//!
//! One record per source file that exists on this machine (the standard library's `/rustc/<hash>/…`
//! paths usually do not; genhtml needs the sources): `FN` per function (its first line and name),
//! `FNDA` with its run-time samples (0 without profiles), `FNF`/`FNH` (functions / functions sampled),
//! `DA` per line holding memory accesses of covered functions (your files) or watched accesses, with
//! the watches armed there (0: the detector could have watched it, and did not), `LF`/`LH`.
//! Functions that share a name in one file (generic instances) are one `FN`, their counts summed.

use super::report::{File, Report};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The tracefile, and how many files were left out because their sources are not on this machine.
pub fn render(report: &Report) -> (String, usize) {
    let mut out = String::new();
    let mut skipped = 0;
    for file in report.groups.iter().flat_map(|g| &g.files) {
        if file.path.is_empty() || !std::path::Path::new(&file.path).is_file() {
            skipped += 1;
            continue;
        }
        record(&mut out, file);
    }
    (out, skipped)
}

fn record(out: &mut String, file: &File) {
    // By name: the first line and the summed samples.
    let mut functions: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    for row in file.functions.iter().filter(|r| r.line > 0) {
        let name = lcov_name(&row.name);
        let entry = functions.entry(name).or_insert((row.line, 0));
        entry.0 = entry.0.min(row.line);
        entry.1 += row.run.samples;
    }
    let _ = writeln!(out, "TN:racewatch\nSF:{}", file.path);
    for (name, (line, _)) in &functions {
        let _ = writeln!(out, "FN:{line},{name}");
    }
    for (name, (_, samples)) in &functions {
        let _ = writeln!(out, "FNDA:{samples},{name}");
    }
    let hit = functions.values().filter(|(_, samples)| *samples > 0).count();
    let _ = writeln!(out, "FNF:{}\nFNH:{hit}", functions.len());
    // Lines the detector can watch (memory accesses of covered functions) and lines it watched.
    let mut lines: BTreeMap<u32, u64> = file.access_lines.iter().map(|&l| (l, 0)).collect();
    for &(line, watches) in &file.watched_lines {
        *lines.entry(line).or_default() += watches;
    }
    for (line, watches) in &lines {
        let _ = writeln!(out, "DA:{line},{watches}");
    }
    let watched = lines.values().filter(|w| **w > 0).count();
    let _ = writeln!(out, "LF:{}\nLH:{watched}\nend_of_record", lines.len());
}

/// A function name LCOV readers accept: no line breaks (commas are fine after the first).
fn lcov_name(name: &str) -> String {
    name.replace(['\n', '\r'], " ")
}
