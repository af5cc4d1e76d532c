//! The coverage report as one self-contained HTML page: inline CSS, no
//! scripts or external assets, every name escaped.

use super::{features_label, ModuleCoverage};
use std::fmt::Write;

const STYLE: &str = "\
body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em;word-break:break-all}\
table{border-collapse:collapse;margin:.5em 0}\
th,td{padding:.2em .7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
th{background:#f3f3f3;position:sticky;top:0}\
td.num{text-align:right;font-variant-numeric:tabular-nums}\
td.addr,td.name{font-family:ui-monospace,monospace}td.name{word-break:break-all}\
tr.covered td.cov{color:#1a7f37;font-weight:600}tr.uncovered td.cov{color:#999}\
tr.uncovered td.name{color:#666}\
.bar{display:inline-block;width:8em;height:.8em;background:#eee;vertical-align:middle}\
.bar span{display:block;height:100%;background:#1a7f37}\
.error{color:#b00}";

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The whole page: a summary table of all modules, then one function table per module.
pub fn render(modules: &[ModuleCoverage]) -> String {
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<title>racewatch coverage</title>\n");
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>\n<h1>racewatch coverage</h1>");
    out.push_str("<table class=\"summary\">\n<tr><th>Module</th><th>Covered functions</th><th>Covered text bytes</th><th></th><th>Atomic PCs</th></tr>\n");
    for (i, m) in modules.iter().enumerate() {
        let s = &m.summary;
        let _ = writeln!(
            out,
            "<tr><td class=\"name\"><a href=\"#m{i}\">{}</a></td><td class=\"num\">{} / {}</td><td class=\"num\">{} / {} ({:.1}%)</td>\
             <td><span class=\"bar\"><span style=\"width:{:.1}%\"></span></span></td><td class=\"num\">{}</td></tr>",
            escape(&m.path),
            s.covered_functions,
            s.functions,
            s.covered_text_bytes,
            s.text_bytes,
            s.covered_text_percent,
            s.covered_text_percent.clamp(0.0, 100.0),
            s.atomics
        );
    }
    out.push_str("</table>\n");
    for (i, m) in modules.iter().enumerate() {
        render_module(&mut out, i, m);
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn render_module(out: &mut String, index: usize, m: &ModuleCoverage) {
    let _ = writeln!(out, "<h2 id=\"m{index}\">{}</h2>", escape(&m.path));
    for e in &m.errors {
        let _ = writeln!(out, "<p class=\"error\">{}</p>", escape(e));
    }
    out.push_str("<table class=\"functions\">\n<tr><th>Address</th><th>Size</th><th>Covered</th><th>Features</th><th>Atomic PCs</th><th>Function</th><th>Source</th></tr>\n");
    for r in &m.functions {
        let (class, cov) = if r.covered { ("covered", "yes") } else { ("uncovered", "no") };
        let features = if r.covered { features_label(r.features) } else { String::new() };
        let source = r.source.as_ref().map(|s| s.to_string()).unwrap_or_default();
        let title = r.raw_name.as_deref().unwrap_or("");
        let _ = writeln!(
            out,
            "<tr class=\"{class}\"><td class=\"addr\">{:#x}</td><td class=\"num\">{}</td><td class=\"cov\">{cov}</td>\
             <td>{}</td><td class=\"num\">{}</td><td class=\"name\" title=\"{}\">{}</td><td>{}</td></tr>",
            r.address,
            r.size,
            escape(&features),
            r.atomics,
            escape(title),
            escape(&r.name),
            escape(&source)
        );
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("<unknown> & \"x\" 'y'"), "&lt;unknown&gt; &amp; &quot;x&quot; &#39;y&#39;");
    }
}
