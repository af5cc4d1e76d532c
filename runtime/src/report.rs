//! Rendering race reports (text and JSON).
//!
//! Pure functions over already symbolized data, so they are tested without a
//! process. The text shape is the DESIGN.md contract (TSan-like); the JSON form
//! carries the same content, one object per line.

use crate::symbolize::Frame;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The separator line that opens and closes a text report.
pub const SEPARATOR: &str = "==================";

/// One side of a race, symbolized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessReport {
    /// Thread number: 0 for the main thread, then in order of first appearance.
    pub thread: u32,
    /// Kernel thread id.
    pub tid: i32,
    /// A store (or read-modify-write).
    pub is_write: bool,
    /// An atomic instruction.
    pub is_atomic: bool,
    /// Bytes accessed.
    pub size: u8,
    /// First byte accessed.
    pub address: u64,
    /// Frames, innermost first (inlined frames included).
    pub stack: Vec<Frame>,
}

/// A race ready to print: the access that hit the watchpoint and the watched one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceReport {
    /// Process id.
    pub pid: u32,
    /// The access that hit the watchpoint (thread B).
    pub current: AccessReport,
    /// The sampled, watched access (thread A).
    pub previous: AccessReport,
}

/// Names threads as reports do: `T0` for the main thread (tid == pid), then
/// `T1`, `T2`, ... in order of first appearance.
#[derive(Clone, Debug)]
pub struct ThreadNames {
    pid: i32,
    numbers: HashMap<i32, u32>,
    next: u32,
}

impl ThreadNames {
    /// Numbering for process `pid`.
    pub fn new(pid: u32) -> ThreadNames {
        ThreadNames { pid: pid as i32, numbers: HashMap::new(), next: 1 }
    }

    /// The thread number of `tid`, assigning the next one on first sight.
    pub fn number(&mut self, tid: i32) -> u32 {
        if tid == self.pid {
            return 0;
        }
        let next = &mut self.next;
        *self.numbers.entry(tid).or_insert_with(|| {
            *next += 1;
            *next - 1
        })
    }
}

/// The human report, TSan-like, ending with a newline.
pub fn render_text(report: &RaceReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{SEPARATOR}");
    let _ = writeln!(out, "WARNING: racewatch: data race (pid={})", report.pid);
    render_access(&mut out, &report.current, false);
    render_access(&mut out, &report.previous, true);
    let _ = writeln!(out, "SUMMARY: racewatch: {}", summary(report));
    let _ = writeln!(out, "{SEPARATOR}");
    out
}

/// The JSON report: one object on one line, ending with a newline.
pub fn render_json(report: &RaceReport) -> String {
    let value = json!({
        "kind": "data_race",
        "pid": report.pid,
        "accesses": [access_json(&report.current), access_json(&report.previous)],
        "summary": summary(report),
    });
    format!("{value}\n")
}

/// `data race <file:line:col> in <function>`, after the current access's innermost frame.
pub fn summary(report: &RaceReport) -> String {
    match report.current.stack.first() {
        Some(frame) => format!("data race {} in {}", location(frame), function(frame)),
        None => "data race".to_string(),
    }
}

fn render_access(out: &mut String, access: &AccessReport, previous: bool) {
    let kind = access_kind(access);
    let what = match (previous, access.is_atomic) {
        (false, false) => capitalize(kind),
        (false, true) => format!("Atomic {kind}"),
        (true, false) => format!("Previous {kind}"),
        (true, true) => format!("Previous atomic {kind}"),
    };
    let _ = writeln!(
        out,
        "  {what} of size {} at {:#x} by thread T{} (tid {}):",
        access.size, access.address, access.thread, access.tid
    );
    if access.stack.is_empty() {
        let _ = writeln!(out, "    <empty stack>");
    }
    for (i, frame) in access.stack.iter().enumerate() {
        let _ = write!(out, "    #{i} {}", function(frame));
        if frame.file.is_some() {
            let _ = write!(out, " {}", location(frame));
        }
        let _ = writeln!(out, " {}", module_offset(frame));
    }
}

fn access_kind(access: &AccessReport) -> &'static str {
    if access.is_write {
        "write"
    } else {
        "read"
    }
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

fn function(frame: &Frame) -> &str {
    frame.function.as_deref().unwrap_or("<unknown>")
}

/// `file:line:col` (shorter when parts are unknown), or `(module+0xoff)` without a file.
fn location(frame: &Frame) -> String {
    match (&frame.file, frame.line.filter(|&l| l > 0), frame.column.filter(|&c| c > 0)) {
        (Some(file), Some(line), Some(column)) => format!("{file}:{line}:{column}"),
        (Some(file), Some(line), None) => format!("{file}:{line}"),
        (Some(file), None, _) => file.clone(),
        (None, _, _) => module_offset(frame),
    }
}

/// `(module+0xoffset)` with the module's file name, or `(0xpc)` when the module is unknown.
fn module_offset(frame: &Frame) -> String {
    match &frame.module {
        Some(path) => {
            let name = path.rsplit('/').next().unwrap_or(path);
            format!("({name}+{:#x})", frame.offset)
        }
        None => format!("({:#x})", frame.offset),
    }
}

fn access_json(access: &AccessReport) -> Value {
    json!({
        "thread": format!("T{}", access.thread),
        "tid": access.tid,
        "kind": access_kind(access),
        "size": access.size,
        "address": format!("{:#x}", access.address),
        "atomic": access.is_atomic,
        "stack": access.stack.iter().map(frame_json).collect::<Vec<_>>(),
    })
}

fn frame_json(frame: &Frame) -> Value {
    json!({
        "function": frame.function,
        "file": frame.file,
        "line": frame.line,
        "column": frame.column,
        "module": frame.module,
        "offset": format!("{:#x}", frame.offset),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str, line: u32, column: u32, offset: u64) -> Frame {
        Frame {
            function: Some(function.to_string()),
            file: Some(file.to_string()),
            line: Some(line),
            column: Some(column),
            module: Some("/work/demos/target/debug/racy_counter".to_string()),
            offset,
        }
    }

    fn sample() -> RaceReport {
        RaceReport {
            pid: 1234,
            current: AccessReport {
                thread: 2,
                tid: 5678,
                is_write: true,
                is_atomic: false,
                size: 8,
                address: 0x7f12_3456_7890,
                stack: vec![
                    frame("racy_counter::bump", "demos/src/bin/racy_counter.rs", 12, 5, 0x1a2b),
                    frame("racy_counter::main::{closure#0}", "demos/src/bin/racy_counter.rs", 20, 13, 0x1b00),
                    Frame {
                        module: Some("/lib/x86_64-linux-gnu/libc.so.6".into()),
                        offset: 0x9ca94,
                        ..Frame::default()
                    },
                ],
            },
            previous: AccessReport {
                thread: 1,
                tid: 5677,
                is_write: false,
                is_atomic: true,
                size: 4,
                address: 0x7f12_3456_7894,
                stack: vec![Frame {
                    function: Some("start_thread".into()),
                    module: Some("/lib/x86_64-linux-gnu/libc.so.6".into()),
                    offset: 0x9ca94,
                    ..Frame::default()
                }],
            },
        }
    }

    #[test]
    fn text_report_has_the_design_shape() {
        let expected = "\
==================
WARNING: racewatch: data race (pid=1234)
  Write of size 8 at 0x7f1234567890 by thread T2 (tid 5678):
    #0 racy_counter::bump demos/src/bin/racy_counter.rs:12:5 (racy_counter+0x1a2b)
    #1 racy_counter::main::{closure#0} demos/src/bin/racy_counter.rs:20:13 (racy_counter+0x1b00)
    #2 <unknown> (libc.so.6+0x9ca94)
  Previous atomic read of size 4 at 0x7f1234567894 by thread T1 (tid 5677):
    #0 start_thread (libc.so.6+0x9ca94)
SUMMARY: racewatch: data race demos/src/bin/racy_counter.rs:12:5 in racy_counter::bump
==================
";
        assert_eq!(render_text(&sample()), expected);
    }

    #[test]
    fn text_report_words_atomic_and_plain_accesses_like_tsan() {
        let mut report = sample();
        report.current.is_atomic = true;
        report.current.is_write = false;
        report.previous.is_atomic = false;
        report.previous.is_write = true;
        report.current.stack.clear();
        let text = render_text(&report);
        assert!(
            text.contains("  Atomic read of size 8 at 0x7f1234567890 by thread T2 (tid 5678):\n    <empty stack>\n")
        );
        assert!(text.contains("  Previous write of size 4 at "));
        assert!(text.contains("SUMMARY: racewatch: data race\n"));
    }

    #[test]
    fn summary_without_source_names_the_module() {
        let mut report = sample();
        report.current.stack.remove(0);
        report.current.stack.remove(0);
        assert_eq!(summary(&report), "data race (libc.so.6+0x9ca94) in <unknown>");
        report.current.stack[0].module = None;
        assert_eq!(summary(&report), "data race (0x9ca94) in <unknown>");
    }

    #[test]
    fn json_report_is_one_line_with_the_same_content() {
        let line = render_json(&sample());
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let value: Value = serde_json::from_str(&line).unwrap();
        let expected = json!({
            "kind": "data_race",
            "pid": 1234,
            "summary": "data race demos/src/bin/racy_counter.rs:12:5 in racy_counter::bump",
            "accesses": [
                {
                    "thread": "T2", "tid": 5678, "kind": "write", "size": 8,
                    "address": "0x7f1234567890", "atomic": false,
                    "stack": [
                        {"function": "racy_counter::bump", "file": "demos/src/bin/racy_counter.rs", "line": 12,
                         "column": 5, "module": "/work/demos/target/debug/racy_counter", "offset": "0x1a2b"},
                        {"function": "racy_counter::main::{closure#0}", "file": "demos/src/bin/racy_counter.rs",
                         "line": 20, "column": 13, "module": "/work/demos/target/debug/racy_counter",
                         "offset": "0x1b00"},
                        {"function": null, "file": null, "line": null, "column": null,
                         "module": "/lib/x86_64-linux-gnu/libc.so.6", "offset": "0x9ca94"},
                    ],
                },
                {
                    "thread": "T1", "tid": 5677, "kind": "read", "size": 4,
                    "address": "0x7f1234567894", "atomic": true,
                    "stack": [
                        {"function": "start_thread", "file": null, "line": null, "column": null,
                         "module": "/lib/x86_64-linux-gnu/libc.so.6", "offset": "0x9ca94"},
                    ],
                },
            ],
        });
        assert_eq!(value, expected);
    }

    #[test]
    fn threads_are_numbered_main_first_then_by_first_appearance() {
        let mut names = ThreadNames::new(100);
        assert_eq!(names.number(100), 0);
        assert_eq!(names.number(205), 1);
        assert_eq!(names.number(103), 2);
        assert_eq!(names.number(205), 1);
        assert_eq!(names.number(100), 0);
        assert_eq!(names.number(7), 3);
    }
}
