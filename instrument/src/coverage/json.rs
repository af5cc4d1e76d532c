//! The coverage report as one JSON object: `{"modules": [{"path",
//! "functions": [...], "summary": {...}}]}`.

use super::ModuleCoverage;
use serde::Serialize;

#[derive(Serialize)]
struct Report<'a> {
    modules: &'a [ModuleCoverage],
}

/// The JSON value of the report.
pub fn to_value(modules: &[ModuleCoverage]) -> serde_json::Value {
    serde_json::to_value(Report { modules }).expect("coverage model serializes")
}

/// The report, pretty-printed, with a final newline.
pub fn render(modules: &[ModuleCoverage]) -> String {
    let mut s = serde_json::to_string_pretty(&to_value(modules)).expect("JSON value prints");
    s.push('\n');
    s
}
