//! Rendering race reports (text and JSON).
//!
//! Pure functions over already symbolized data, so they are tested without a
//! process. The text shape is the DESIGN.md contract (TSan-like); the JSON form
//! carries the same content, one object per line.
//!
//! Stacks are cut like Rust's own short backtraces ([`short_backtrace`]) before
//! either form is rendered, so both show the same frames. The text form
//! shortens standard-library paths (`/rustc/<commit>/library/...` to
//! `library/...`); JSON keeps them whole.

use crate::symbolize::{base_name, Frame};
use racewatch_instrument::symbols::without_generics;
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

/// Where Rust's standard library sources are said to be (remapped by rustc).
const STD_SOURCES: &str = "/rustc/";
/// The directory of the C++ standard library's headers, under any prefix (libstdc++'s
/// `/usr/include/c++/12/…`, reached as `/usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/…`;
/// libc++'s `…/include/c++/v1/…`).
const CXX_STD_HEADERS: &str = "/include/c++/";
/// Rust's marker frames: below `__rust_begin_short_backtrace` is thread or
/// process start-up, above `__rust_end_short_backtrace` panic machinery.
const BEGIN_SHORT_BACKTRACE: &str = "__rust_begin_short_backtrace";
const END_SHORT_BACKTRACE: &str = "__rust_end_short_backtrace";

/// How a report spells file paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Paths {
    /// As symbolized (JSON).
    Full,
    /// Standard-library paths from `library/` on (text).
    Short,
}

/// Cuts a Rust stack the way Rust's short backtraces do: the
/// `__rust_begin_short_backtrace` frame and everything outside it (thread
/// and `main` start-up) go, and so do the frames from the access out to a
/// `__rust_end_short_backtrace` frame (panic machinery). The frames of the
/// accessing PC itself (the first physical frame with its inlined frames)
/// are always kept. Stacks without the markers (C, C++) are unchanged.
pub fn short_backtrace(mut frames: Vec<Frame>) -> Vec<Frame> {
    let is =
        |marker: &'static str| move |f: &Frame| f.function.as_deref().is_some_and(|name| base_name(name) == marker);
    // The accessing PC's frames: up to and including the first physical one.
    let access = frames.iter().position(|f| !f.inlined).map_or(frames.len(), |i| i + 1);
    if let Some(begin) = frames.iter().position(is(BEGIN_SHORT_BACKTRACE)) {
        frames.truncate(begin.max(1));
    }
    if let Some(end) = frames.get(access..).and_then(|outer| outer.iter().position(is(END_SHORT_BACKTRACE))) {
        frames.drain(access..=access + end);
    }
    frames
}

/// The standard library a frame's source is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StdLib {
    Rust,
    Cxx,
}

fn std_lib(frame: &Frame) -> Option<StdLib> {
    let file = frame.file.as_deref()?;
    if file.starts_with(STD_SOURCES) {
        Some(StdLib::Rust)
    } else if file.contains(CXX_STD_HEADERS) {
        Some(StdLib::Cxx)
    } else {
        None
    }
}

/// Whether the frame's source is Rust's or C++'s standard library.
fn in_std(frame: &Frame) -> bool {
    std_lib(frame).is_some()
}

/// The frame a summary names: the current access's first frame in the
/// user's code (not in Rust's standard library, not in the runtime, not in a
/// known atomic primitive such as `ck_pr.h`'s, not in a libc memory function
/// racewatch watches), else its innermost frame.
pub fn summary_frame(stack: &[Frame]) -> Option<&Frame> {
    let in_atomic_primitive = |f: &Frame| f.file.as_deref().is_some_and(racewatch_instrument::tags::is_asm_atomic_file);
    stack
        .iter()
        .find(|f| !in_std(f) && !f.in_runtime && !in_atomic_primitive(f) && !f.memory_function)
        .or(stack.first())
}

/// The human report, TSan-like, ending with a newline: Rust names without generic arguments, and runs of
/// standard-library frames folded into one line (see [`render_text_with`]).
pub fn render_text(report: &RaceReport) -> String {
    render_text_with(report, false)
}

/// The human report; `full_stacks` prints every frame with its full name (the `full_stacks=1` option).
pub fn render_text_with(report: &RaceReport, full_stacks: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{SEPARATOR}");
    let _ = writeln!(out, "WARNING: racewatch: data race (pid={})", report.pid);
    render_access(&mut out, &report.current, false, full_stacks);
    render_access(&mut out, &report.previous, true, full_stacks);
    let _ = writeln!(out, "SUMMARY: racewatch: {}", summary_with(report, Paths::Short));
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

/// `data race <file:line:col> in <function>`, after the current access's
/// [`summary_frame`], with full paths.
pub fn summary(report: &RaceReport) -> String {
    summary_with(report, Paths::Full)
}

fn summary_with(report: &RaceReport, paths: Paths) -> String {
    match summary_frame(&report.current.stack) {
        Some(frame) => format!("data race {} in {}", location(frame, paths), function(frame)),
        None => "data race".to_string(),
    }
}

fn render_access(out: &mut String, access: &AccessReport, previous: bool, full_stacks: bool) {
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
    let stack = &access.stack;
    let mut i = 0;
    while i < stack.len() {
        // A run of two or more frames of one standard library after the access's own frame: one line.
        let lib = std_lib(&stack[i]);
        let run = stack[i..].iter().take_while(|f| lib.is_some() && std_lib(f) == lib).count();
        if !full_stacks && i > 0 && run >= 2 {
            let name = if lib == Some(StdLib::Cxx) { "C++" } else { "Rust" };
            let _ = writeln!(out, "    #{i}..#{} ({run} frames of the {name} standard library)", i + run - 1);
            i += run;
            continue;
        }
        // The unnamed frames that end most C stacks (libc's `start_thread` and `clone3`, shipped without
        // symbols): one line naming their modules.
        let unnamed = &stack[i..];
        if !full_stacks && i > 0 && unnamed.len() >= 2 && unnamed.iter().all(|f| f.function.is_none()) {
            let mut modules: Vec<&str> = Vec::new();
            for f in unnamed {
                let name = f.module.as_deref().map_or("?", |m| m.rsplit('/').next().unwrap_or(m));
                if !modules.contains(&name) {
                    modules.push(name);
                }
            }
            let n = unnamed.len();
            let _ = writeln!(out, "    #{i}..#{} ({n} frames without symbols in {})", i + n - 1, modules.join(", "));
            break;
        }
        let frame = &stack[i];
        let name = if full_stacks { function(frame).to_string() } else { without_generics(function(frame)) };
        let _ = write!(out, "    #{i} {name}");
        if frame.file.is_some() {
            let _ = write!(out, " {}", location(frame, Paths::Short));
        }
        let _ = writeln!(out, " {}", module_offset(frame));
        i += 1;
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
fn location(frame: &Frame, paths: Paths) -> String {
    let file = frame.file.as_deref().map(|file| match paths {
        Paths::Full => file,
        Paths::Short => short_path(file),
    });
    let approx = if frame.line_approximate { "~" } else { "" };
    match (file, frame.line.filter(|&l| l > 0), frame.column.filter(|&c| c > 0)) {
        (Some(file), Some(line), Some(column)) => format!("{file}:{approx}{line}:{column}"),
        (Some(file), Some(line), None) => format!("{file}:{approx}{line}"),
        (Some(file), None, _) => file.to_string(),
        (None, _, _) => module_offset(frame),
    }
}

/// `library/...` for a standard-library path `/rustc/<commit>/library/...`, `c++/...` for a C++
/// standard header `.../include/c++/...`; any other path unchanged.
pub fn short_path(file: &str) -> &str {
    if let Some(at) = file.find(CXX_STD_HEADERS) {
        return &file[at + "/include/".len()..];
    }
    file.strip_prefix(STD_SOURCES)
        .and_then(|rest| rest.split_once('/'))
        .map(|(_commit, rest)| rest)
        .filter(|rest| rest.starts_with("library/"))
        .unwrap_or(file)
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
    let mut value = json!({
        "function": frame.function,
        "file": frame.file,
        "line": frame.line,
        "column": frame.column,
        "module": frame.module,
        "offset": format!("{:#x}", frame.offset),
        "inlined": frame.inlined,
    });
    // Only when set: the line is the nearest real one (the PC's own is line 0).
    if frame.line_approximate {
        value["line_approximate"] = true.into();
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    const STD: &str = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library";
    const EXE: &str = "/work/demos/target/release/racy_flag";
    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

    fn frame(function: &str, file: &str, line: u32, column: u32, offset: u64, inlined: bool) -> Frame {
        Frame {
            function: Some(function.to_string()),
            file: Some(file.to_string()),
            line: Some(line),
            column: Some(column),
            module: Some(EXE.to_string()),
            offset,
            inlined,
            ..Frame::default()
        }
    }

    fn libc_frame(function: Option<&str>) -> Frame {
        Frame { function: function.map(str::to_string), module: Some(LIBC.into()), offset: 0x891f5, ..Frame::default() }
    }

    /// A Rust thread's stack as the symbolizer returns it (line tables only:
    /// inlined frames keep bare names), before [`short_backtrace`].
    fn rust_thread_stack() -> Vec<Frame> {
        vec![
            frame("write_volatile<u64>", &format!("{STD}/core/src/ptr/mod.rs"), 2178, 9, 0x1c1cb, true),
            frame("racy_flag::publish", "demos/src/bin/racy_flag.rs", 15, 9, 0x1c1cb, false),
            frame("{closure#0}", "demos/src/bin/racy_flag.rs", 40, 17, 0x1b76b, true),
            frame(
                "__rust_begin_short_backtrace<racy_flag::main::{closure_env#0}, u64>",
                &format!("{STD}/std/src/sys/backtrace.rs"),
                166,
                18,
                0x1b76b,
                false,
            ),
            frame(
                "{closure#0}<racy_flag::main::{closure_env#0}, u64>",
                &format!("{STD}/std/src/thread/lifecycle.rs"),
                91,
                13,
                0x1ac7f,
                false,
            ),
            frame(
                "<std::sys::thread::unix::Thread>::new::thread_start",
                &format!("{STD}/std/src/sys/thread/unix.rs"),
                118,
                17,
                0x4707f,
                false,
            ),
            libc_frame(None),
        ]
    }

    /// A race as the reporter builds it: a Rust write against a C-like atomic read.
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
                stack: short_backtrace(rust_thread_stack()),
            },
            previous: AccessReport {
                thread: 1,
                tid: 5677,
                is_write: false,
                is_atomic: true,
                size: 4,
                address: 0x7f12_3456_7894,
                stack: short_backtrace(vec![
                    Frame { module: Some("/tmp/c_racy".into()), offset: 0x11b4, ..Frame::default() },
                    libc_frame(Some("start_thread")),
                ]),
            },
        }
    }

    #[test]
    fn text_report_has_the_design_shape() {
        let expected = "\
==================
WARNING: racewatch: data race (pid=1234)
  Write of size 8 at 0x7f1234567890 by thread T2 (tid 5678):
    #0 write_volatile library/core/src/ptr/mod.rs:2178:9 (racy_flag+0x1c1cb)
    #1 racy_flag::publish demos/src/bin/racy_flag.rs:15:9 (racy_flag+0x1c1cb)
    #2 {closure#0} demos/src/bin/racy_flag.rs:40:17 (racy_flag+0x1b76b)
  Previous atomic read of size 4 at 0x7f1234567894 by thread T1 (tid 5677):
    #0 <unknown> (c_racy+0x11b4)
    #1 start_thread (libc.so.6+0x891f5)
SUMMARY: racewatch: data race demos/src/bin/racy_flag.rs:15:9 in racy_flag::publish
==================
";
        assert_eq!(render_text(&sample()), expected);
    }

    #[test]
    fn names_lose_their_generic_arguments_and_std_runs_fold() {
        assert_eq!(without_generics("{closure#0}<app::main::{closure_env#0}, u64>"), "{closure#0}");
        assert_eq!(
            without_generics("<alloc::boxed::Box<dyn core::ops::FnOnce<()>> as core::ops::FnOnce<()>>::call_once"),
            "<alloc::boxed::Box as core::ops::FnOnce>::call_once"
        );
        assert_eq!(without_generics("core::ptr::drop_in_place<[u8]>"), "core::ptr::drop_in_place");
        assert_eq!(without_generics("bump"), "bump");
        let std_frame = |name: &str| frame(name, &format!("{STD}/std/src/thread/mod.rs"), 1, 1, 0x10, true);
        let mut report = sample();
        let user = report.current.stack[1].clone();
        report.current.stack = vec![user.clone(), std_frame("a<T>"), std_frame("b"), std_frame("c"), user];
        let text = render_text(&report);
        assert!(
            text.contains("    #1..#3 (3 frames of the Rust standard library)\n    #4 racy_flag::publish"),
            "{text}"
        );
        let full = render_text_with(&report, true);
        assert!(full.contains("    #1 a<T> library/std/src/thread/mod.rs:1:1"), "{full}");
        // C++: libstdc++'s headers fold the same way, named as such, and a summary skips them.
        let cxx = "/usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/bits/std_thread.h";
        let cxx_frame = |name: &str| frame(name, cxx, 210, 13, 0x10, true);
        let access = frame("std::vector::push_back", "/usr/include/c++/12/bits/stl_vector.h", 1283, 4, 0x10, true);
        let caller = frame("worker", "prog.cc", 9, 3, 0x10, true);
        report.current.stack = vec![access, caller, cxx_frame("__invoke"), cxx_frame("_M_run")];
        let text = render_text(&report);
        assert!(text.contains("    #0 std::vector::push_back c++/12/bits/stl_vector.h:1283:4"), "{text}");
        assert!(text.contains("    #2..#3 (2 frames of the C++ standard library)"), "{text}");
        assert_eq!(summary_frame(&report.current.stack).unwrap().function.as_deref(), Some("worker"));
        // The unnamed frames that end a C thread's stack: one line naming their modules.
        let caller = frame("worker", "prog.cc", 9, 3, 0x10, false);
        report.current.stack = vec![caller, libc_frame(None), libc_frame(None)];
        let text = render_text(&report);
        assert!(
            text.contains("    #0 worker prog.cc:9:3 ")
                && text.contains("    #1..#2 (2 frames without symbols in libc.so.6)\n"),
            "{text}"
        );
        assert!(render_text_with(&report, true).contains("    #2 <unknown> (libc.so.6+"), "full_stacks keeps them");
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
    fn summary_names_the_first_frame_outside_std_the_runtime_and_atomic_primitives() {
        let mut stack = rust_thread_stack();
        assert_eq!(summary_frame(&stack).unwrap().function.as_deref(), Some("racy_flag::publish"));
        // A runtime frame (an interceptor) is skipped like std.
        stack[1].in_runtime = true;
        assert_eq!(summary_frame(&stack).unwrap().function.as_deref(), Some("{closure#0}"));
        // Only std and runtime frames: the innermost frame.
        stack.truncate(2);
        assert_eq!(summary_frame(&stack).unwrap().function.as_deref(), Some("write_volatile<u64>"));
        // A frame without a file is not known to be std: C code without line tables is named.
        let mut c = vec![libc_frame(Some("memcpy")), frame("main", "prog.c", 3, 1, 0x10, false)];
        assert_eq!(summary_frame(&c).unwrap().function.as_deref(), Some("memcpy"));
        // A libc memory function racewatch watches names its caller.
        c[0].memory_function = true;
        assert_eq!(summary_frame(&c).unwrap().function.as_deref(), Some("main"));
        assert_eq!(summary_frame(&[]), None);
        // A known atomic primitive inlined into the caller (Concurrency Kit's ck_pr.h) names the caller.
        let ck = vec![
            frame("ck_pr_md_load_ptr", "../include/gcc/x86_64/ck_pr.h", 185, 1, 0x20, true),
            frame("ck_fifo_mpmc_dequeue", "../include/ck_fifo.h", 255, 3, 0x20, true),
            frame("thread", "validate.c", 40, 2, 0x20, false),
        ];
        assert_eq!(summary_frame(&ck).unwrap().function.as_deref(), Some("ck_fifo_mpmc_dequeue"));
    }

    #[test]
    fn summary_keeps_full_paths_in_json_and_short_ones_in_text() {
        let mut report = sample();
        report.current.stack.drain(1..);
        let full = format!("data race {STD}/core/src/ptr/mod.rs:2178:9 in write_volatile<u64>");
        assert_eq!(summary(&report), full);
        assert!(render_text(&report)
            .contains("SUMMARY: racewatch: data race library/core/src/ptr/mod.rs:2178:9 in write_volatile<u64>\n"));
        let json: Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(json["summary"], full);
    }

    #[test]
    fn summary_without_source_names_the_module() {
        let mut report = sample();
        report.current.stack = vec![libc_frame(None)];
        assert_eq!(summary(&report), "data race (libc.so.6+0x891f5) in <unknown>");
        report.current.stack[0].module = None;
        assert_eq!(summary(&report), "data race (0x891f5) in <unknown>");
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| base_name(f.function.as_deref().unwrap_or("?"))).collect()
    }

    #[test]
    fn short_backtrace_drops_thread_start_from_the_begin_marker_on() {
        assert_eq!(names(&short_backtrace(rust_thread_stack())), ["write_volatile", "publish", "{closure#0}"]);
        // Qualified (limited debuginfo) spellings of the marker count too.
        let mut stack = rust_thread_stack();
        stack[3].function = Some("std::sys::backtrace::__rust_begin_short_backtrace::<fn(), ()>".into());
        assert_eq!(short_backtrace(stack).len(), 3);
        // The accessing frame stays even when it is the marker itself.
        let stack = rust_thread_stack().split_off(3);
        assert_eq!(names(&short_backtrace(stack)), ["__rust_begin_short_backtrace"]);
    }

    #[test]
    fn short_backtrace_drops_panic_machinery_but_never_the_access() {
        let user = |name: &str, inlined| frame(name, "src/main.rs", 1, 1, 0x10, inlined);
        let std = |name: &str| frame(name, &format!("{STD}/std/src/panicking.rs"), 1, 1, 0x20, false);
        // A panic hook writing a static races: the hook is the access.
        let stack = vec![
            user("hook_inner", true),
            user("app::hook", false),
            std("std::panicking::panic_with_hook"),
            std("std::sys::backtrace::__rust_end_short_backtrace::<F, !>"),
            std("core::panicking::panic_fmt"),
            user("app::compute", false),
            std("std::sys::backtrace::__rust_begin_short_backtrace::<fn(), ()>"),
            std("std::rt::lang_start_internal"),
        ];
        assert_eq!(names(&short_backtrace(stack)), ["hook_inner", "hook", "panic_fmt", "compute"]);
        // A marker among the access's own inlined frames is not cut.
        let stack = vec![user("inner", true), std("__rust_end_short_backtrace<F, !>"), user("outer", false)];
        assert_eq!(short_backtrace(stack).len(), 3);
    }

    #[test]
    fn stacks_without_markers_are_unchanged() {
        let c = vec![frame("record", "demos/c/racy_struct.c", 9, 10, 0x11b4, false), libc_frame(None)];
        assert_eq!(short_backtrace(c.clone()), c);
        assert_eq!(short_backtrace(Vec::new()), Vec::<Frame>::new());
    }

    #[test]
    fn only_standard_library_paths_are_shortened() {
        assert_eq!(short_path(&format!("{STD}/core/src/ptr/mod.rs")), "library/core/src/ptr/mod.rs");
        assert_eq!(short_path("/rustc/abc/src/tools/x.rs"), "/rustc/abc/src/tools/x.rs");
        assert_eq!(short_path("/rustc/library/x.rs"), "/rustc/library/x.rs");
        assert_eq!(short_path("demos/src/bin/racy_flag.rs"), "demos/src/bin/racy_flag.rs");
        assert_eq!(short_path("/home/u/rustc/abc/library/x.rs"), "/home/u/rustc/abc/library/x.rs");
        let libstdcxx = "/usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/bits/std_thread.h";
        assert_eq!(short_path(libstdcxx), "c++/12/bits/std_thread.h");
        assert_eq!(short_path("/usr/lib/llvm-19/bin/../include/c++/v1/__thread/thread.h"), "c++/v1/__thread/thread.h");
    }

    #[test]
    fn json_report_is_one_line_with_the_same_frames_and_full_paths() {
        let report = sample();
        let line = render_json(&report);
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let value: Value = serde_json::from_str(&line).unwrap();
        let expected = json!({
            "kind": "data_race",
            "pid": 1234,
            "summary": "data race demos/src/bin/racy_flag.rs:15:9 in racy_flag::publish",
            "accesses": [
                {
                    "thread": "T2", "tid": 5678, "kind": "write", "size": 8,
                    "address": "0x7f1234567890", "atomic": false,
                    "stack": [
                        {"function": "write_volatile<u64>", "file": format!("{STD}/core/src/ptr/mod.rs"),
                         "line": 2178, "column": 9, "module": EXE, "offset": "0x1c1cb", "inlined": true},
                        {"function": "racy_flag::publish", "file": "demos/src/bin/racy_flag.rs", "line": 15,
                         "column": 9, "module": EXE, "offset": "0x1c1cb", "inlined": false},
                        {"function": "{closure#0}", "file": "demos/src/bin/racy_flag.rs", "line": 40,
                         "column": 17, "module": EXE, "offset": "0x1b76b", "inlined": true},
                    ],
                },
                {
                    "thread": "T1", "tid": 5677, "kind": "read", "size": 4,
                    "address": "0x7f1234567894", "atomic": true,
                    "stack": [
                        {"function": null, "file": null, "line": null, "column": null,
                         "module": "/tmp/c_racy", "offset": "0x11b4", "inlined": false},
                        {"function": "start_thread", "file": null, "line": null, "column": null,
                         "module": LIBC, "offset": "0x891f5", "inlined": false},
                    ],
                },
            ],
        });
        assert_eq!(value, expected);
        // The text shows exactly the same frames.
        let text = render_text(&report);
        assert_eq!(text.lines().filter(|l| l.starts_with("    #")).count(), 5, "{text}");
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
