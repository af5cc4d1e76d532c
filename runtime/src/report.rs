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

use crate::symbolize::Frame;
use racewatch_instrument::frames::{self, is_plumbing, location, module_offset, std_lib, Paths, StdLib};
pub use racewatch_instrument::frames::{short_backtrace, short_path};
use racewatch_instrument::symbols::without_generics;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The separator line that opens and closes a text report.
pub const SEPARATOR: &str = "==================";

/// One side of a race, symbolized.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessReport {
    /// Thread number: 0 for the main thread, then in order of first appearance.
    pub thread: u32,
    /// Kernel thread id.
    pub tid: i32,
    /// The thread's name (`/proc/self/task/<tid>/comm`: at most 15 bytes), when it still runs.
    pub thread_name: Option<String>,
    /// The test the thread runs, in a libtest harness (which names each test's thread after it).
    pub test: Option<String>,
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
    /// Where the thread was created, when racewatch saw it (not for the main thread).
    pub creation: Option<Creation>,
}

/// Where a thread was created: by which thread, at which stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Creation {
    /// The creating thread's number, tid and name.
    pub thread: u32,
    pub tid: i32,
    pub thread_name: Option<String>,
    /// The creating thread's frames at `pthread_create`, innermost first.
    pub stack: Vec<Frame>,
}

/// What the raced-on memory is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MemoryLocation {
    /// A global or static variable of a module's symbol table.
    Global {
        name: String,
        /// Bytes (0 when the symbol table does not say).
        size: u64,
        /// Run-time address of its first byte.
        address: u64,
        /// The module defining it, and the variable's offset in it.
        module: String,
        offset: u64,
    },
    /// The stack of a thread.
    Stack { thread: u32, tid: i32, thread_name: Option<String> },
    /// An address in a module's data whose variable was not looked up (`symbolize=0`): `racewatch triage`
    /// names it offline from the module's build-id and the offset.
    InModule { module: String, build_id: String, address: u64, offset: u64 },
    /// Anything else: the heap, anonymous mappings, a stack racewatch does not know.
    #[default]
    Unknown,
}

/// Who reports: what a fleet's store needs to tell processes, hosts and builds apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Process {
    /// Host name (`host=` option, else the kernel's node name).
    pub host: String,
    /// Process start, in seconds since the epoch.
    pub start_time: u64,
    /// The executable's path and GNU build-id (hex; empty when it has none).
    pub exe_path: String,
    pub exe_build_id: String,
    /// The program's version as the fleet names it (`app_version=`, else the build-id's first 12 digits).
    pub app_version: String,
}

/// A race's identities and how often this process saw it (see DESIGN.md "Keys").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    pub race_key: String,
    /// `None` when neither side is symbolized (`symbolize=0`).
    pub source_key: Option<String>,
    /// Occurrences in this process so far (1 in the first report).
    pub count: u64,
}

/// A race ready to print: the access that hit the watchpoint and the watched one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaceReport {
    /// Process id.
    pub pid: u32,
    /// Who reports, and when (seconds since the epoch).
    pub process: Process,
    pub time: u64,
    pub keys: Keys,
    /// The access that hit the watchpoint (thread B).
    pub current: AccessReport,
    /// The sampled, watched access (thread A).
    pub previous: AccessReport,
    /// What the memory both accesses touch is.
    pub location: MemoryLocation,
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

/// The library a run of folded frames belongs to: a standard library, or the Rust runtime's plumbing
/// (folded as Rust's).
fn folded_lib(frame: &Frame) -> Option<StdLib> {
    if frame.elided > 0 {
        return None;
    }
    std_lib(frame).or_else(|| is_plumbing(frame).then_some(StdLib::Rust))
}

/// The frame a summary names for one access: its first frame in the user's code, else its innermost
/// frame. Races are deduplicated by these frames' lines.
pub fn summary_frame(stack: &[Frame]) -> Option<&Frame> {
    frames::summary_frame(stack)
}

/// The frames a summary names, one per access (current, previous); see [`frames::racing_frames`].
pub fn racing_frames(report: &RaceReport) -> (Option<&Frame>, Option<&Frame>) {
    frames::racing_frames(&report.current.stack, &report.previous.stack)
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
    let _ = writeln!(out, "  {}", location_line(&report.location));
    for access in [&report.current, &report.previous] {
        let Some(creation) = &access.creation else { continue };
        let by = if creation.thread == 0 {
            "main thread".to_string()
        } else {
            thread_label(creation.thread, creation.tid, creation.thread_name.as_deref())
        };
        let created = thread_label(access.thread, access.tid, access.thread_name.as_deref());
        let _ = writeln!(out, "  {} created by {by} at:", capitalize(&created));
        render_frames(&mut out, &creation.stack, full_stacks, false);
    }
    let source_key = report.keys.source_key.as_deref().unwrap_or("-");
    let _ = writeln!(out, "  Keys: race_key={} source_key={source_key}", report.keys.race_key);
    let _ = writeln!(out, "SUMMARY: racewatch: {}", summary_with(report, Paths::Short));
    let _ = writeln!(out, "{SEPARATOR}");
    out
}

/// `thread T2 'name' (tid 123)`.
fn thread_label(number: u32, tid: i32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("thread T{number} '{name}' (tid {tid})"),
        None => format!("thread T{number} (tid {tid})"),
    }
}

/// `Location is global 'counter' of size 8 at 0x… (prog+0x4010)`, TSan's words.
fn location_line(location: &MemoryLocation) -> String {
    match location {
        MemoryLocation::Global { name, size, address, module, offset } => {
            let name = without_llvm_suffix(name);
            if module == crate::symbolize::JIT_MODULE {
                return format!("Location is global '{name}' of size {size} at {address:#x} (JIT'd code)");
            }
            let module = module.rsplit('/').next().unwrap_or(module);
            format!("Location is global '{name}' of size {size} at {address:#x} ({module}+{offset:#x})")
        }
        MemoryLocation::Stack { thread: 0, tid, .. } => format!("Location is stack of main thread (tid {tid})"),
        MemoryLocation::Stack { thread, tid, thread_name } => {
            format!("Location is stack of {}", thread_label(*thread, *tid, thread_name.as_deref()))
        }
        MemoryLocation::InModule { module, address, offset, .. } => {
            let module = module.rsplit('/').next().unwrap_or(module);
            format!("Location is {address:#x} in the data of {module} ({module}+{offset:#x})")
        }
        MemoryLocation::Unknown => "Location is heap or unknown memory".to_string(),
    }
}

/// A symbol's name without the `.N` LLVM appends to a global it split or renamed
/// (`racy_counter::COUNTER.0`).
fn without_llvm_suffix(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((base, digits))
            if !base.is_empty() && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => name,
    }
}

/// The version of the JSON report's fields (DESIGN.md "JSON report, schema 1").
pub const SCHEMA: u32 = 1;

/// The JSON report: one object on one line, ending with a newline (schema [`SCHEMA`]).
pub fn render_json(report: &RaceReport) -> String {
    let process = &report.process;
    let value = json!({
        "kind": "data_race",
        "schema": SCHEMA,
        "racewatch": env!("CARGO_PKG_VERSION"),
        "host": process.host,
        "pid": report.pid,
        "start_time": process.start_time,
        "time": report.time,
        "exe": {"path": process.exe_path, "build_id": non_empty(&process.exe_build_id)},
        "app_version": process.app_version,
        "race_key": report.keys.race_key,
        "source_key": report.keys.source_key,
        "count": report.keys.count,
        "accesses": [access_json(&report.current), access_json(&report.previous)],
        "location": location_json(&report.location),
        "summary": summary(report),
    });
    format!("{value}\n")
}

/// The line a process writes at exit for a race it saw `count` times (more than once).
pub fn render_count_json(process: &Process, pid: u32, race_key: &str, count: u64) -> String {
    let value = json!({
        "kind": "race_count",
        "schema": SCHEMA,
        "host": process.host,
        "pid": pid,
        "start_time": process.start_time,
        "race_key": race_key,
        "count": count,
    });
    format!("{value}\n")
}

fn non_empty(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}

/// `data race <file:line:col> in <function>`, after the current access's racing frame, then ` / ` and
/// the previous access's when it is another (see [`racing_frames`]); full paths.
pub fn summary(report: &RaceReport) -> String {
    summary_with(report, Paths::Full)
}

fn summary_with(report: &RaceReport, paths: Paths) -> String {
    frames::summary(&report.current.stack, &report.previous.stack, paths)
}

fn render_access(out: &mut String, access: &AccessReport, previous: bool, full_stacks: bool) {
    let kind = access_kind(access);
    let what = match (previous, access.is_atomic) {
        (false, false) => capitalize(kind),
        (false, true) => format!("Atomic {kind}"),
        (true, false) => format!("Previous {kind}"),
        (true, true) => format!("Previous atomic {kind}"),
    };
    let thread = thread_label(access.thread, access.tid, access.thread_name.as_deref());
    let test = access.test.as_deref().map(|test| format!(" in test {test}")).unwrap_or_default();
    let _ = writeln!(out, "  {what} of size {} at {:#x} by {thread}{test}:", access.size, access.address);
    render_frames(out, &access.stack, full_stacks, true);
}

/// Prints frames numbered from `#0`. Without `full_stacks`, a run of standard-library frames (and the
/// Rust runtime's plumbing, `__rust_try`) folds into one `#a..#b` line, except the run's innermost frame
/// when it is the access itself (`access`: `#0` is the accessing instruction's) and its outermost when
/// the program's code called it (the `Arc::clone` or `Rc::drop` that raced, the `thread::spawn` that
/// created a thread); the unnamed frames that end most C stacks fold too. Frames left out of a deep
/// stack are one `#a..#b (n frames left out)` line in any case.
fn render_frames(out: &mut String, stack: &[Frame], full_stacks: bool, access: bool) {
    if stack.is_empty() {
        let _ = writeln!(out, "    <empty stack>");
    }
    let mut number = 0usize;
    let mut i = 0;
    while i < stack.len() {
        if stack[i].elided > 0 {
            let n = stack[i].elided;
            let _ = writeln!(out, "    #{number}..#{} ({n} frames left out)", number + n - 1);
            number += n;
            i += 1;
            continue;
        }
        if !full_stacks {
            let lib = folded_lib(&stack[i]);
            let run = stack[i..].iter().take_while(|f| lib.is_some() && folded_lib(f) == lib).count();
            if run >= 2 {
                // Kept: the access's own frame, and the frame the program's code called.
                let keep_first = usize::from(access && i == 0);
                let called = stack.get(i + run).is_some_and(|f| f.elided == 0 && folded_lib(f).is_none());
                let keep_last = usize::from(called);
                let (from, to) = (i + keep_first, i + run - keep_last);
                if to >= from + 2 {
                    for frame in &stack[i..from] {
                        render_frame(out, number, frame, full_stacks);
                        number += 1;
                    }
                    let name = if lib == Some(StdLib::Cxx) { "C++" } else { "Rust" };
                    let n = to - from;
                    let _ =
                        writeln!(out, "    #{number}..#{} ({n} frames of the {name} standard library)", number + n - 1);
                    number += n;
                    for frame in &stack[to..i + run] {
                        render_frame(out, number, frame, full_stacks);
                        number += 1;
                    }
                    i += run;
                    continue;
                }
            }
            // The unnamed frames that end most C stacks (libc's `start_thread` and `clone3`, shipped
            // without symbols): one line naming their modules.
            let unnamed = &stack[i..];
            if i > 0 && unnamed.len() >= 2 && unnamed.iter().all(|f| f.function.is_none() && f.elided == 0) {
                let mut modules: Vec<&str> = Vec::new();
                for f in unnamed {
                    let name = f.module.as_deref().map_or("?", |m| m.rsplit('/').next().unwrap_or(m));
                    if !modules.contains(&name) {
                        modules.push(name);
                    }
                }
                let n = unnamed.len();
                let _ = writeln!(
                    out,
                    "    #{number}..#{} ({n} frames without symbols in {})",
                    number + n - 1,
                    modules.join(", ")
                );
                break;
            }
        }
        render_frame(out, number, &stack[i], full_stacks);
        number += 1;
        i += 1;
    }
}

fn render_frame(out: &mut String, number: usize, frame: &Frame, full_stacks: bool) {
    let name = if full_stacks { function(frame).to_string() } else { short_name(function(frame)) };
    let _ = write!(out, "    #{number} {name}");
    if frame.file.is_some() {
        let _ = write!(out, " {}", location(frame, Paths::Short));
    }
    let _ = writeln!(out, " {}", module_offset(frame));
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

/// A function's name without generic arguments, except `drop_in_place`'s: the type dropped is what a
/// drop-path race is about (`drop_in_place<Rc<u64>>`), spelled without paths and default allocators.
fn short_name(function: &str) -> String {
    const DROP: &str = "drop_in_place";
    let plain = without_generics(function);
    let Some(at) = function.rfind(DROP) else { return plain };
    let rest = function[at + DROP.len()..].trim_start_matches("::");
    let Some(dropped) = rest.strip_prefix('<').and_then(|r| r.strip_suffix('>')) else { return plain };
    let name = without_generics(&function[..at + DROP.len()]);
    format!("{name}<{}>", without_paths(dropped).replace(", Global", ""))
}

/// A type's spelling without module paths: `Rc<u64>` for `alloc::rc::Rc<u64>`.
fn without_paths(ty: &str) -> String {
    let mut out = String::with_capacity(ty.len());
    let mut word = String::new();
    let mut chars = ty.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            word.clear();
        } else {
            out.push_str(&word);
            word.clear();
            out.push(c);
        }
    }
    out.push_str(&word);
    out
}

fn function(frame: &Frame) -> &str {
    frame.function.as_deref().unwrap_or("<unknown>")
}

fn access_json(access: &AccessReport) -> Value {
    let mut value = json!({
        "thread": format!("T{}", access.thread),
        "tid": access.tid,
        "thread_name": access.thread_name,
        "kind": access_kind(access),
        "size": access.size,
        "address": format!("{:#x}", access.address),
        "atomic": access.is_atomic,
        "stack": stack_json(&access.stack),
    });
    if let Some(test) = &access.test {
        value["test"] = test.as_str().into();
    }
    if let Some(creation) = &access.creation {
        value["created_by"] = json!({
            "thread": format!("T{}", creation.thread),
            "tid": creation.tid,
            "thread_name": creation.thread_name,
            "stack": stack_json(&creation.stack),
        });
    }
    value
}

fn location_json(location: &MemoryLocation) -> Value {
    match location {
        MemoryLocation::Global { name, size, address, module, offset } => json!({
            "kind": "global",
            "name": name,
            "size": size,
            "address": format!("{address:#x}"),
            "module": module,
            "offset": format!("{offset:#x}"),
        }),
        MemoryLocation::Stack { thread, tid, thread_name } => json!({
            "kind": "stack",
            "thread": format!("T{thread}"),
            "tid": tid,
            "thread_name": thread_name,
        }),
        MemoryLocation::InModule { module, build_id, address, offset } => json!({
            "kind": "module",
            "module": module,
            "build_id": non_empty(build_id),
            "address": format!("{address:#x}"),
            "offset": format!("{offset:#x}"),
        }),
        MemoryLocation::Unknown => json!({"kind": "unknown"}),
    }
}

/// The frames; frames left out of a deep stack are one entry in their place with every field null but
/// `"elided_frames": n`.
fn stack_json(stack: &[Frame]) -> Vec<Value> {
    stack.iter().map(frame_json).collect()
}

fn frame_json(frame: &Frame) -> Value {
    if frame.elided > 0 {
        return json!({"function": null, "file": null, "line": null, "column": null, "module": null,
                      "build_id": null, "offset": null, "inlined": false, "elided_frames": frame.elided});
    }
    let mut value = json!({
        "function": frame.function,
        "file": frame.file,
        "line": frame.line,
        "column": frame.column,
        "module": frame.module,
        "build_id": frame.build_id,
        "offset": format!("{:#x}", frame.offset),
        "inlined": frame.inlined,
    });
    // Only when set: the line is the nearest real one (the PC's own is line 0).
    if frame.line_approximate {
        value["line_approximate"] = true.into();
    }
    if frame.memory_function {
        value["memory_function"] = true.into();
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::base_name;

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
                ..AccessReport::default()
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
                ..AccessReport::default()
            },
            location: MemoryLocation::Unknown,
            process: Process {
                host: "web-7".into(),
                start_time: 1_764_000_000,
                exe_path: EXE.into(),
                exe_build_id: "5f1e0c2a9b3d4e6f".into(),
                app_version: "2.4.1".into(),
            },
            time: 1_764_000_042,
            keys: Keys { race_key: "0123456789abcdef".into(), source_key: Some("fedcba9876543210".into()), count: 1 },
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
  Location is heap or unknown memory
  Keys: race_key=0123456789abcdef source_key=fedcba9876543210
SUMMARY: racewatch: data race demos/src/bin/racy_flag.rs:15:9 in racy_flag::publish / (c_racy+0x11b4) in <unknown>
==================
";
        assert_eq!(render_text(&sample()), expected);
    }

    /// A creation stack of the main thread: `main` calling `pthread_create` in a C program.
    fn creation_of(thread: u32, tid: i32) -> Creation {
        Creation {
            thread,
            tid,
            thread_name: None,
            stack: vec![frame("main", "demos/c/racy_named.c", 40, 3, 0x1290, false)],
        }
    }

    #[test]
    fn threads_are_named_with_their_test_and_creation_and_the_memory_is_located() {
        let mut report = sample();
        report.current.thread_name = Some("tests::publish_".into());
        report.current.test = Some("tests::publish_twice".into());
        report.current.creation = Some(creation_of(0, 1234));
        report.previous.thread_name = Some("reader".into());
        report.previous.creation = Some(Creation { thread_name: Some("spawner".into()), ..creation_of(3, 5680) });
        report.location = MemoryLocation::Global {
            name: "racy_flag::READY.0".into(),
            size: 8,
            address: 0x7f12_3456_7890,
            module: EXE.into(),
            offset: 0x5b1d0,
        };
        let text = render_text(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            "  Write of size 8 at 0x7f1234567890 by thread T2 'tests::publish_' (tid 5678) in test tests::publish_twice:"
        );
        assert_eq!(lines[6], "  Previous atomic read of size 4 at 0x7f1234567894 by thread T1 'reader' (tid 5677):");
        assert_eq!(
            &lines[9..16],
            [
                "  Location is global 'racy_flag::READY' of size 8 at 0x7f1234567890 (racy_flag+0x5b1d0)",
                "  Thread T2 'tests::publish_' (tid 5678) created by main thread at:",
                "    #0 main demos/c/racy_named.c:40:3 (racy_flag+0x1290)",
                "  Thread T1 'reader' (tid 5677) created by thread T3 'spawner' (tid 5680) at:",
                "    #0 main demos/c/racy_named.c:40:3 (racy_flag+0x1290)",
                "  Keys: race_key=0123456789abcdef source_key=fedcba9876543210",
                "SUMMARY: racewatch: data race demos/src/bin/racy_flag.rs:15:9 in racy_flag::publish / (c_racy+0x11b4) in <unknown>",
            ],
            "{text}"
        );
        // The same facts in JSON.
        let json: Value = serde_json::from_str(&render_json(&report)).unwrap();
        let current = &json["accesses"][0];
        assert_eq!(
            (&current["thread_name"], &current["test"]),
            (&json!("tests::publish_"), &json!("tests::publish_twice"))
        );
        assert_eq!(current["created_by"]["thread"], "T0");
        assert_eq!(current["created_by"]["stack"][0]["function"], "main");
        assert_eq!(json["accesses"][1]["created_by"]["thread_name"], "spawner");
        assert_eq!(json["accesses"][1].get("test"), None);
        assert_eq!(
            json["location"],
            json!({"kind": "global", "name": "racy_flag::READY.0", "size": 8, "address": "0x7f1234567890",
                   "module": EXE, "offset": "0x5b1d0"})
        );
        // Stacks and the rest.
        // A creation stack folds std's frames down to the `spawn` the program called.
        let spawn = vec![
            frame(
                "<std::sys::thread::unix::Thread>::new",
                &format!("{STD}/std/src/sys/thread/unix.rs"),
                98,
                19,
                0x40,
                false,
            ),
            frame("spawn_unchecked", &format!("{STD}/std/src/thread/lifecycle.rs"), 70, 5, 0x50, true),
            frame("spawn", &format!("{STD}/std/src/thread/functions.rs"), 131, 20, 0x50, true),
            frame("racy_flag::main", "demos/src/bin/racy_flag.rs", 28, 42, 0x50, false),
        ];
        report.current.creation = Some(Creation { stack: spawn, ..creation_of(0, 1234) });
        let text = render_text(&report);
        assert!(
            text.contains(
                "created by main thread at:\n    #0..#1 (2 frames of the Rust standard library)\n    #2 spawn library/std/src/thread/functions.rs:131:20 (racy_flag+0x50)\n    #3 racy_flag::main "
            ),
            "{text}"
        );
        report.location = MemoryLocation::InModule {
            module: EXE.into(),
            build_id: "ab12".into(),
            address: 0x7f12_3456_7890,
            offset: 0x5b1d0,
        };
        assert!(render_text(&report)
            .contains("  Location is 0x7f1234567890 in the data of racy_flag (racy_flag+0x5b1d0)\n"));
        let json: Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(
            json["location"],
            json!({"kind": "module", "module": EXE, "build_id": "ab12", "address": "0x7f1234567890", "offset": "0x5b1d0"})
        );
        report.location = MemoryLocation::Stack { thread: 0, tid: 1234, thread_name: Some("racy_flag".into()) };
        assert!(render_text(&report).contains("\n  Location is stack of main thread (tid 1234)\n"));
        report.location = MemoryLocation::Stack { thread: 4, tid: 1240, thread_name: Some("pool".into()) };
        assert!(render_text(&report).contains("\n  Location is stack of thread T4 'pool' (tid 1240)\n"));
        let json: Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(json["location"], json!({"kind": "stack", "thread": "T4", "tid": 1240, "thread_name": "pool"}));
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
        // The run's outermost frame is the one the program's code called: kept.
        assert!(
            text.contains("    #1..#2 (2 frames of the Rust standard library)\n    #3 c library/std/src/thread/mod.rs:1:1 (racy_flag+0x10)\n    #4 racy_flag::publish"),
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
        assert!(text.contains("SUMMARY: racewatch: data race (c_racy+0x11b4) in <unknown>\n"), "{text}");
        report.previous.stack.clear();
        assert!(render_text(&report).contains("SUMMARY: racewatch: data race\n"));
    }

    #[test]
    fn std_runs_keep_the_racing_access_and_the_call_into_std_and_fold_plumbing() {
        let core = |name: &str, file: &str, inlined| frame(name, &format!("{STD}/{file}"), 10, 5, 0x40, inlined);
        let user = |name: &str, inlined| frame(name, "tests/arc.rs", 20, 9, 0x40, inlined);
        // `Arc::clone` racing: its atomic add, inlined through two more std frames into the clone the
        // test called.
        let stack = vec![
            core("atomic_add<usize>", "core/src/sync/atomic.rs", true),
            core("fetch_add", "core/src/sync/atomic.rs", true),
            core("inner<u64>", "alloc/src/sync.rs", true),
            core("<alloc::sync::Arc<u64> as core::clone::Clone>::clone", "alloc/src/sync.rs", true),
            user("arc::share", false),
            user("{closure#0}", true),
            core("core::ops::function::FnOnce::call_once", "core/src/ops/function.rs", false),
            Frame { function: Some("__rust_try".into()), module: Some(EXE.into()), offset: 0x50, ..Frame::default() },
            core("std::panicking::catch_unwind", "std/src/panicking.rs", true),
            core("std::panic::catch_unwind", "std/src/panic.rs", false),
        ];
        let mut report = sample();
        report.current.stack = stack;
        let text = render_text(&report);
        let current: Vec<&str> = text.lines().skip(3).take_while(|l| l.starts_with("    #")).collect();
        assert_eq!(
            current,
            [
                "    #0 atomic_add library/core/src/sync/atomic.rs:10:5 (racy_flag+0x40)",
                "    #1..#2 (2 frames of the Rust standard library)",
                "    #3 <alloc::sync::Arc as core::clone::Clone>::clone library/alloc/src/sync.rs:10:5 (racy_flag+0x40)",
                "    #4 arc::share tests/arc.rs:20:9 (racy_flag+0x40)",
                "    #5 {closure#0} tests/arc.rs:20:9 (racy_flag+0x40)",
                "    #6..#9 (4 frames of the Rust standard library)",
            ],
            "{text}"
        );
        // The summary never names the plumbing.
        assert!(!racewatch_instrument::frames::is_summary_candidate(&report.current.stack[7]));
    }

    #[test]
    fn elided_frames_of_a_deep_stack_are_one_numbered_line() {
        let mut report = sample();
        let user = |name: &str| frame(name, "src/deep.rs", 3, 1, 0x10, false);
        report.current.stack =
            vec![user("access"), user("caller"), Frame { elided: 37, ..Frame::default() }, user("main")];
        let text = render_text(&report);
        assert!(
            text.contains(
                "    #1 caller src/deep.rs:3:1 (racy_flag+0x10)\n    #2..#38 (37 frames left out)\n    #39 main "
            ),
            "{text}"
        );
        assert!(render_text_with(&report, true).contains("    #2..#38 (37 frames left out)\n"));
        let json: Value = serde_json::from_str(&render_json(&report)).unwrap();
        assert_eq!(json["accesses"][0]["stack"][2]["elided_frames"], 37);
        assert_eq!(json["accesses"][0]["stack"][2]["function"], Value::Null);
        assert_eq!(json["accesses"][0]["stack"][3]["function"], "main");
    }

    #[test]
    fn summary_names_both_racing_functions_in_the_library_where_they_race() {
        let tokio = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.40.0/src/task/local.rs";
        let std = |name: &str| frame(name, &format!("{STD}/alloc/src/rc.rs"), 5, 1, 0x10, true);
        let mut report = sample();
        // One side drops an `Rc` in the test's future, which tokio's LocalSet runs; the other clones it
        // inside the LocalSet.
        report.current.stack = vec![
            std("<alloc::rc::Rc<u8> as core::ops::drop::Drop>::drop"),
            frame("{async_block#0}", "tests/local_set.rs", 31, 9, 0x10, true),
            frame("tokio::task::local::LocalSet::tick", tokio, 700, 21, 0x10, false),
            frame("local_set::spawn_and_drop", "tests/local_set.rs", 25, 5, 0x10, false),
        ];
        report.previous.stack = vec![
            std("<alloc::rc::Rc<u8> as core::clone::Clone>::clone"),
            frame("tokio::task::local::Shared::schedule", tokio, 1020, 13, 0x10, false),
        ];
        assert_eq!(
            summary(&report),
            format!("data race {tokio}:700:21 in tokio::task::local::LocalSet::tick / {tokio}:1020:13 in tokio::task::local::Shared::schedule")
        );
        // Two frames of the user's own: both named, each at its line.
        report.previous.stack = vec![frame("other", "tests/local_set.rs", 40, 2, 0x10, false)];
        assert_eq!(
            summary(&report),
            "data race tests/local_set.rs:31:9 in {async_block#0} / tests/local_set.rs:40:2 in other"
        );
        // The same frame on both sides: named once.
        report.previous.stack = report.current.stack.clone();
        assert_eq!(summary(&report), "data race tests/local_set.rs:31:9 in {async_block#0}");
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
        report.previous.stack = report.current.stack.clone();
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
        report.previous.stack = report.current.stack.clone();
        assert_eq!(summary(&report), "data race (libc.so.6+0x891f5) in <unknown>");
        report.current.stack[0].module = None;
        report.previous.stack[0].module = None;
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
            "schema": 1,
            "racewatch": env!("CARGO_PKG_VERSION"),
            "host": "web-7",
            "pid": 1234,
            "start_time": 1_764_000_000u64,
            "time": 1_764_000_042u64,
            "exe": {"path": EXE, "build_id": "5f1e0c2a9b3d4e6f"},
            "app_version": "2.4.1",
            "race_key": "0123456789abcdef",
            "source_key": "fedcba9876543210",
            "count": 1,
            "summary": "data race demos/src/bin/racy_flag.rs:15:9 in racy_flag::publish / (c_racy+0x11b4) in <unknown>",
            "location": {"kind": "unknown"},
            "accesses": [
                {
                    "thread": "T2", "tid": 5678, "thread_name": null, "kind": "write", "size": 8,
                    "address": "0x7f1234567890", "atomic": false,
                    "stack": [
                        {"function": "write_volatile<u64>", "file": format!("{STD}/core/src/ptr/mod.rs"),
                         "line": 2178, "column": 9, "module": EXE, "build_id": null, "offset": "0x1c1cb", "inlined": true},
                        {"function": "racy_flag::publish", "file": "demos/src/bin/racy_flag.rs", "line": 15,
                         "column": 9, "module": EXE, "build_id": null, "offset": "0x1c1cb", "inlined": false},
                        {"function": "{closure#0}", "file": "demos/src/bin/racy_flag.rs", "line": 40,
                         "column": 17, "module": EXE, "build_id": null, "offset": "0x1b76b", "inlined": true},
                    ],
                },
                {
                    "thread": "T1", "tid": 5677, "thread_name": null, "kind": "read", "size": 4,
                    "address": "0x7f1234567894", "atomic": true,
                    "stack": [
                        {"function": null, "file": null, "line": null, "column": null,
                         "module": "/tmp/c_racy", "build_id": null, "offset": "0x11b4", "inlined": false},
                        {"function": "start_thread", "file": null, "line": null, "column": null,
                         "module": LIBC, "build_id": null, "offset": "0x891f5", "inlined": false},
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
    fn drop_in_place_keeps_the_type_it_drops() {
        assert_eq!(
            short_name("core::ptr::drop_in_place<alloc::rc::Rc<u64, alloc::alloc::Global>>"),
            "core::ptr::drop_in_place<Rc<u64>>"
        );
        assert_eq!(
            short_name("core::ptr::drop_in_place::<tokio::sync::oneshot::Inner<()>>"),
            "core::ptr::drop_in_place<Inner<()>>"
        );
        assert_eq!(short_name("drop_in_place<(u8, std::string::String)>"), "drop_in_place<(u8, String)>");
        assert_eq!(
            short_name("<alloc::rc::Rc<T> as core::ops::drop::Drop>::drop"),
            "<alloc::rc::Rc as core::ops::drop::Drop>::drop"
        );
        assert_eq!(short_name("write_volatile<u64>"), "write_volatile");
        assert_eq!(short_name("core::ptr::drop_in_place"), "core::ptr::drop_in_place");
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
