//! The coverage report as one self-contained, browsable HTML page (`page.html`: inline CSS and
//! script, no external assets). The report goes into the page as one JSON object; the page builds the
//! per-file tables, the filter, sorting, and the source views from it in the browser.
//!
//! The data (see `page.html` for how it is shown): `title`, `binaries` (`path`, `build_id`),
//! `profiled`, `processes`, `groups` (`origin`, `name`), and `files`, each with `group` (index),
//! `path`, `display`, `functions` as compact rows `[name, line, size, covered, atomics, samples,
//! watches, traps, races, binary]` (the instances of a generic function merged: `name ×N`), `source` (the file's text for your own files when readable, else
//! null), `covered_lines` (inclusive line ranges of covered functions), `atomic_lines`,
//! `watched_lines` (`[line, watches]`) and `race_lines` (`[line, reports]`).

use super::report::{File, Origin, Report};
use serde_json::{json, Value};

const TEMPLATE: &str = include_str!("page.html");
const PLACEHOLDER: &str = "/*RACEWATCH_DATA*/null";
/// Largest source file embedded for the source view.
const MAX_SOURCE: u64 = 2 << 20;

/// The page.
pub fn render(report: &Report) -> String {
    // Inside <script>: no `</` (ends the element) and no `<!--` (with a later `<script`, the parser
    // would never close the element). Both escapes keep the JSON valid.
    let data = data(report).to_string().replace("</", "<\\/").replace("<!--", "<\\u0021--");
    TEMPLATE.replacen(PLACEHOLDER, &data, 1)
}

fn data(report: &Report) -> Value {
    let title = match report.binaries.as_slice() {
        [one] => format!("racewatch coverage: {}", one.path),
        many => format!("racewatch coverage: {} binaries", many.len()),
    };
    let mut files = Vec::new();
    for (index, group) in report.groups.iter().enumerate() {
        for file in &group.files {
            files.push(file_data(file, index));
        }
    }
    json!({
        "title": title,
        "binaries": report.binaries.iter().map(|b| json!({"path": b.path, "build_id": b.build_id})).collect::<Vec<_>>(),
        "profiled": report.profiled,
        "processes": report.profile.as_ref().map_or(0, |p| p.processes),
        "groups": report.groups.iter().map(|g| json!({"origin": g.origin, "name": g.name})).collect::<Vec<_>>(),
        "files": files,
    })
}

fn file_data(file: &File, group: usize) -> Value {
    let functions: Vec<Value> = file
        .merged()
        .iter()
        .map(|r| {
            let name = if r.instances > 1 { format!("{} ×{}", r.name, r.instances) } else { r.name.clone() };
            let covered = u8::from(r.covered > 0);
            json!([
                name,
                r.line,
                r.size,
                covered,
                r.atomics,
                r.run.samples,
                r.run.watches,
                r.run.traps,
                r.run.races,
                r.binary
            ])
        })
        .collect();
    let source = (file.origin == Origin::User).then(|| read_source(&file.path)).flatten();
    let covered_lines =
        source.as_deref().map_or_else(Vec::new, |text| covered_lines(file, text.lines().count() as u32));
    json!({
        "group": group,
        "path": file.path,
        "display": file.display,
        "functions": functions,
        "source": source,
        "covered_lines": covered_lines,
        "atomic_lines": file.atomic_lines,
        "watched_lines": file.watched_lines,
        "race_lines": file.race_lines,
    })
}

fn read_source(path: &str) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_SOURCE {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// Inclusive line ranges of the covered functions: from a function's first line to its last (from
/// the line table), or, when that is unknown, to the line before the next function.
fn covered_lines(file: &File, last_line: u32) -> Vec<[u32; 2]> {
    let mut starts: Vec<u32> = file.functions.iter().filter(|r| r.line > 0).map(|r| r.line).collect();
    starts.sort_unstable();
    starts.dedup();
    let mut spans: Vec<[u32; 2]> = file
        .functions
        .iter()
        .filter(|r| r.covered && r.line > 0)
        .map(|r| {
            let next = starts.iter().find(|&&l| l > r.line).map_or(last_line, |l| l - 1);
            let end = if r.end_line >= r.line { r.end_line } else { next };
            [r.line, end.max(r.line).min(last_line.max(r.line))]
        })
        .collect();
    spans.sort_unstable();
    let mut ranges: Vec<[u32; 2]> = Vec::new();
    for range in spans {
        match ranges.last_mut() {
            Some(last) if last[1] + 1 >= range[0] => last[1] = last[1].max(range[1]),
            _ => ranges.push(range),
        }
    }
    ranges
}
