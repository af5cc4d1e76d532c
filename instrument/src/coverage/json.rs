//! The coverage report as one JSON object (schema `racewatch-coverage/2`, documented in the README):
//! `{"schema", "binaries", "profiled", "profile", "totals", "groups": [{"origin", "name", "totals",
//! "files": [{"path", "display", "origin", "totals", "functions": [...], "atomic_lines",
//! "watched_lines"}]}]}`.

use super::report::Report;

/// The JSON value of the report.
pub fn to_value(report: &Report) -> serde_json::Value {
    serde_json::to_value(report).expect("coverage model serializes")
}

/// The report, pretty-printed, with a final newline.
pub fn render(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(&to_value(report)).expect("JSON value prints");
    s.push('\n');
    s
}
