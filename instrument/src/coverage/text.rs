//! The coverage report for a terminal: a summary line, then per group (your code first) one line per
//! file, and under each of your files one line per function. Long paths and names keep their
//! distinguishing end (`…::{closure#0}`), cut to the terminal's width.

use super::profile::RunCounts;
use super::report::{percent, Group, Merged, Origin, Report, Totals};
use std::fmt::Write;

/// Width used when the terminal's is unknown (output to a file or pipe).
pub const DEFAULT_WIDTH: usize = 120;
/// Narrowest layout.
const MIN_WIDTH: usize = 72;

/// How much to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Terminal columns.
    pub width: usize,
    /// List every group's files and every file's functions (by default: your code's only).
    pub all: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Layout { width: DEFAULT_WIDTH, all: false }
    }
}

/// `text` cut to `max` characters keeping its end: `…` then the last `max - 1` characters.
pub fn keep_end(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let tail: String = text.chars().skip(count - max.saturating_sub(1)).collect();
    format!("…{tail}")
}

/// `3/5 functions covered (60.0%)`.
fn covered_phrase(t: &Totals) -> String {
    format!("{}/{} functions covered ({:.1}%)", t.covered_functions, t.functions, t.covered_percent())
}

/// `1 race`, `2 races`, `3 watches`, `2 processes`, `2 binaries`.
pub fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else if let Some(stem) = word.strip_suffix("ry") {
        format!("{n} {stem}ries")
    } else if word.ends_with("ch") || word.ends_with("ss") {
        format!("{n} {word}es")
    } else {
        format!("{n} {word}s")
    }
}

/// A function name for a narrow column: the types of a qualified path (`<A as B>::f`, `<A>::f`)
/// lose their module paths (`<flume::SendError as core::cmp::PartialEq>::eq` is
/// `<SendError as PartialEq>::eq`); generic arguments are already gone.
pub fn short_name(name: &str) -> String {
    let Some(rest) = name.strip_prefix('<') else { return name.to_string() };
    let mut depth = 1usize;
    let close = rest.char_indices().find_map(|(i, c)| {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ => {}
        }
        (depth == 0).then_some(i)
    });
    let Some(close) = close else { return name.to_string() };
    let last = |path: &str| path.trim().rsplit("::").next().unwrap_or(path).to_string();
    let inner = match rest[..close].split_once(" as ") {
        Some((ty, tr)) => format!("{} as {}", last(ty), last(tr)),
        None => last(&rest[..close]),
    };
    format!("<{inner}>{}", &rest[close + 1..])
}

/// The report.
pub fn render(report: &Report, layout: Layout) -> String {
    let width = layout.width.max(MIN_WIDTH);
    let mut out = String::new();
    heading(&mut out, report, width);
    let numbers = Columns::of(report.profiled, width);
    let name_width = width.saturating_sub(numbers.width()).max(24);
    let _ = writeln!(out, "\n{:<name_width$}{}", "FILE", numbers.header());
    for group in &report.groups {
        let expanded = layout.all || group.origin == Origin::User;
        let label = if expanded {
            group.name.to_string()
        } else {
            format!("{} ({})", group.name, plural(group.files.len() as u64, "file"))
        };
        let _ = writeln!(out, "{:<name_width$}{}", keep_end(&label, name_width - 1), numbers.totals(&group.totals));
        if expanded {
            files(&mut out, group, name_width, &numbers);
        }
    }
    if !report.profiled {
        out.push_str(
            "\nStatic metadata only. To see where the detector looked, run with -o coverage_path=PREFIX \
             (racewatch run, racewatch cargo) and pass the profiles: racewatch coverage --profile PREFIX.* BINARY\n",
        );
    } else if report.totals.run.samples == 0 {
        out.push_str(
            "\nNo samples: the programs ended before a thread ran for one sampling period (a thread is sampled \
             once per sample_period_us of its CPU time, and only from the program's second thread on). Run \
             them longer, or sample more often: -o sample_period_us=100.\n",
        );
    }
    out
}

fn heading(out: &mut String, report: &Report, width: usize) {
    let _ = write!(out, "racewatch coverage: {}", plural(report.binaries.len() as u64, "binary"));
    if let Some(p) = &report.profile {
        let _ = write!(out, ", run-time profiles of {}", plural(p.processes as u64, "process"));
    }
    out.push('\n');
    for b in &report.binaries {
        let id = if b.build_id.is_empty() {
            String::new()
        } else {
            format!(" (build-id {})", &b.build_id[..b.build_id.len().min(12)])
        };
        let mark = if report.profiled && !b.profiled { "  [no profile]" } else { "" };
        let _ = writeln!(out, "  {}{id}{mark}", keep_end(&b.path, width.saturating_sub(40)));
        for e in &b.errors {
            let _ = writeln!(out, "    error: {e}");
        }
        for n in &b.notes {
            let _ = writeln!(out, "    note: {n}");
        }
    }
    if let Some(p) = &report.profile {
        // Doctests' binaries are gone once rustdoc ran them: one line for all of them.
        let (doctests, others): (Vec<&String>, Vec<&String>) =
            p.unmatched.iter().partition(|m| m.contains("/rustdoctest"));
        if !doctests.is_empty() {
            let _ = writeln!(out, "  {} doctest processes profiled (rustdoc deleted their binaries)", doctests.len());
        }
        for m in others.iter().take(3) {
            let _ = writeln!(out, "  profiled module not in this report: {m}");
        }
        if others.len() > 3 {
            let _ = writeln!(out, "  … and {} more profiled modules not in this report", others.len() - 3);
        }
        if p.dropped > 0 {
            let _ = writeln!(out, "  {} counts dropped by the runtimes (tables full)", p.dropped);
        }
    }
    if let Some(user) = report.groups.iter().find(|g| g.origin == Origin::User) {
        let u = &user.totals;
        let _ = write!(out, "Your code: {}", covered_phrase(u));
        if report.profiled {
            let _ = write!(out, ", {} sampled, {} watched", u.sampled_functions, u.watched_functions);
        }
        out.push('\n');
    }
    let t = &report.totals;
    let _ = write!(out, "Total: {}, {} atomic PCs", covered_phrase(t), t.atomics);
    if report.profiled {
        let _ = write!(
            out,
            "; {} sampled, {} watched; {}, {}, {}, {}",
            plural(t.sampled_functions as u64, "function"),
            t.watched_functions,
            plural(t.run.samples, "sample"),
            plural(t.run.watches, "watch"),
            plural(t.run.traps, "trap"),
            plural(t.run.races, "race")
        );
    }
    out.push('\n');
}

/// A group's files, under a line per directory when they are in more than one.
fn files(out: &mut String, group: &Group, name_width: usize, numbers: &Columns) {
    let directories = group.directories();
    let nested = directories.len() > 1;
    for dir in &directories {
        if nested {
            // Files without a directory are relative to where the report was made.
            let label = if dir.path.is_empty() { "./".to_string() } else { format!("{}/", dir.path) };
            let _ = writeln!(
                out,
                "  {:<w$}{}",
                keep_end(&label, name_width - 3),
                numbers.totals(&dir.totals),
                w = name_width - 2
            );
        }
        let indent = if nested { 4 } else { 2 };
        for file in &dir.files {
            let name = if nested {
                file.display.rsplit_once('/').map_or(file.display.as_str(), |(_, base)| base)
            } else {
                &file.display
            };
            let width = name_width - indent;
            let _ =
                writeln!(out, "{:indent$}{:<width$}{}", "", keep_end(name, width - 1), numbers.totals(&file.totals));
            let fn_width = name_width.saturating_sub(indent + 10).max(16);
            for row in file.merged() {
                let _ = writeln!(out, "{:indent$}{}", "", function_line(&row, fn_width, numbers));
            }
        }
    }
}

fn function_line(row: &Merged, width: usize, numbers: &Columns) -> String {
    let line = if row.line == 0 { "-".to_string() } else { row.line.to_string() };
    let covered = if row.covered > 0 { "" } else { " [not covered]" };
    let instances = if row.instances > 1 { format!(" ×{}", row.instances) } else { String::new() };
    let suffix = format!("{instances}{covered}");
    let name = keep_end(&short_name(&row.name), width.saturating_sub(suffix.chars().count()));
    let mut cells = format!("  {line:>6}  {:<w$}", format!("{name}{suffix}"), w = width);
    // Without profiles the run-time columns are not shown (and the counts are 0).
    cells.push_str(&numbers.row(row.covered > 0, row.atomics, &row.run));
    cells
}

/// The numeric columns: all of them from [`WIDE`] columns on, the essential ones below.
struct Columns {
    profiled: bool,
    narrow: bool,
}

/// Terminal width from which every run-time column is shown.
const WIDE: usize = 110;

const COVERED_W: usize = 16;
const NUM_W: usize = 8;

impl Columns {
    fn of(profiled: bool, width: usize) -> Columns {
        Columns { profiled, narrow: width < WIDE }
    }

    fn names(&self) -> &'static [&'static str] {
        match (self.profiled, self.narrow) {
            (true, false) => &["ATOMICS", "SAMPLED", "WATCHED", "SAMPLES", "WATCHES", "TRAPS", "RACES"],
            (true, true) => &["SAMPLES", "WATCHES", "RACES"],
            (false, _) => &["ATOMICS"],
        }
    }

    fn width(&self) -> usize {
        COVERED_W + NUM_W * self.names().len()
    }

    fn header(&self) -> String {
        let mut s = format!("{:>COVERED_W$}", "COVERED");
        for name in self.names() {
            let _ = write!(s, "{name:>NUM_W$}");
        }
        s
    }

    fn totals(&self, t: &Totals) -> String {
        let covered =
            format!("{}/{} {:>5.1}%", t.covered_functions, t.functions, percent(t.covered_functions, t.functions));
        let values = [
            t.atomics as u64,
            t.sampled_functions as u64,
            t.watched_functions as u64,
            t.run.samples,
            t.run.watches,
            t.run.traps,
            t.run.races,
        ];
        self.cells(&covered, values)
    }

    fn row(&self, covered: bool, atomics: usize, run: &RunCounts) -> String {
        let (sampled, watched) = (u64::from(run.samples > 0), u64::from(run.watches > 0));
        self.cells(
            if covered { "yes" } else { "no" },
            [atomics as u64, sampled, watched, run.samples, run.watches, run.traps, run.races],
        )
    }

    /// `covered`, then those of the values (in the wide layout's column order) whose columns are shown.
    fn cells(&self, covered: &str, values: [u64; 7]) -> String {
        let [atomics, sampled, watched, samples, watches, traps, races] = values;
        let shown: &[u64] = match (self.profiled, self.narrow) {
            (true, false) => &[atomics, sampled, watched, samples, watches, traps, races],
            (true, true) => &[samples, watches, races],
            (false, _) => &[atomics],
        };
        let mut s = format!("{covered:>COVERED_W$}");
        for n in shown {
            let _ = write!(s, "{n:>NUM_W$}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_english() {
        let words: Vec<String> =
            [(1, "binary"), (2, "binary"), (2, "process"), (3, "watch"), (1, "function"), (0, "race")]
                .iter()
                .map(|&(n, w)| plural(n, w))
                .collect();
        assert_eq!(words, ["1 binary", "2 binaries", "2 processes", "3 watches", "1 function", "0 races"]);
    }

    #[test]
    fn qualified_paths_lose_their_module_paths() {
        assert_eq!(short_name("<flume::SendError as core::cmp::PartialEq>::eq"), "<SendError as PartialEq>::eq");
        assert_eq!(short_name("<std::sync::mpmc::Sender>::send"), "<Sender>::send");
        assert_eq!(short_name("racy::worker::{closure#0}"), "racy::worker::{closure#0}");
        assert_eq!(short_name("<broken"), "<broken");
    }

    #[test]
    fn long_names_keep_their_distinguishing_end() {
        assert_eq!(keep_end("short", 10), "short");
        let a = keep_end("racy_struct::main::{closure#0}::{closure#0}", 16);
        let b = keep_end("racy_struct::main::{closure#0}::{closure#1}", 16);
        assert_ne!(a, b);
        assert_eq!(a.chars().count(), 16);
        assert!(a.starts_with('…') && a.ends_with("{closure#0}"), "{a}");
    }
}
