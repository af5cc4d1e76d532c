//! The coverage report as aligned columns for a terminal.

use super::{features_label, ModuleCoverage, Summary};
use std::fmt::Write;

/// Longest function name printed in full; longer ones end with `…`.
pub const MAX_NAME: usize = 60;

/// `name` cut to `max` characters, the last one an ellipsis.
pub fn truncate(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        return name.to_string();
    }
    let mut out: String = name.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// One line: `4/20 functions covered, 96/1234 text bytes (7.8%), 7 atomic PCs`.
pub fn summary_line(s: &Summary) -> String {
    format!(
        "{}/{} functions covered, {}/{} text bytes ({:.1}%), {} atomic PCs",
        s.covered_functions, s.functions, s.covered_text_bytes, s.text_bytes, s.covered_text_percent, s.atomics
    )
}

/// Every module: a header line, one row per function, the summary.
pub fn render(modules: &[ModuleCoverage]) -> String {
    let mut out = String::new();
    for (i, m) in modules.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render_module(&mut out, m);
    }
    out
}

fn render_module(out: &mut String, m: &ModuleCoverage) {
    let _ = writeln!(out, "{}", m.path);
    for e in &m.errors {
        let _ = writeln!(out, "  error: {e}");
    }
    let rows: Vec<[String; 6]> = m
        .functions
        .iter()
        .map(|r| {
            [
                format!("{:#x}", r.address),
                r.size.to_string(),
                if r.covered { "yes" } else { "no" }.to_string(),
                if r.covered { features_label(r.features) } else { String::new() },
                r.atomics.to_string(),
                truncate(&r.name, MAX_NAME),
            ]
        })
        .collect();
    let header = ["ADDRESS", "SIZE", "COVERED", "FEATURES", "ATOMICS", "FUNCTION"];
    let mut width = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Numbers right-aligned, words left-aligned; SOURCE last, unaligned.
    let right = [false, true, false, false, true, false];
    let line = |out: &mut String, cells: [&str; 6], source: &str| {
        out.push_str("  ");
        for (k, cell) in cells.iter().enumerate() {
            let pad = width[k] - cell.chars().count();
            if right[k] {
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if k + 1 < cells.len() || !source.is_empty() {
                    out.push_str(&" ".repeat(pad));
                }
            }
            if k + 1 < cells.len() {
                out.push_str("  ");
            }
        }
        if !source.is_empty() {
            out.push_str("  ");
            out.push_str(source);
        }
        out.push('\n');
    };
    line(out, header, "SOURCE");
    for (row, r) in rows.iter().zip(&m.functions) {
        let cells = [&*row[0], &*row[1], &*row[2], &*row[3], &*row[4], &*row[5]];
        let source = r.source.as_ref().map(|s| s.to_string()).unwrap_or_default();
        line(out, cells, &source);
    }
    let _ = writeln!(out, "  summary: {}", summary_line(&m.summary));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_with_an_ellipsis() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdefghij", 5), "abcd…");
        assert_eq!(truncate("ééééé", 5), "ééééé");
        assert_eq!(truncate("éééééé", 5).chars().count(), 5);
    }
}
