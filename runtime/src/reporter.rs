//! The reporter thread: drains the queue, symbolizes, deduplicates and prints.
//!
//! Signal handlers only push fixed-size [`RaceEvent`]s into [`crate::queue`];
//! everything that allocates or locks happens here, on the thread named
//! `racewatch-reporter`, which sleeps on a futex that pushes wake. The thread
//! exists only while it has work ([`wanted`]): it is started from the program's
//! next interposed call ([`wake_if_wanted`]) or from a sampling signal at a
//! spawn point ([`start_from_signal`]), and ends itself after a second without
//! work. The per-report work is in [`Reporter`] (no globals, so it is testable);
//! [`start`] and [`shutdown`] are the process-wide glue.

use crate::event::{AccessRecord, RaceEvent};
use crate::options::{Options, ReportFormat};
use crate::report::{self, AccessReport, Creation, Keys, MemoryLocation, Process, RaceReport, ThreadNames};
use crate::suppressions::{self, Suppressions};
use crate::symbolize::{Frame, Symbolizer};
use crate::{log, modules, queue, stats, sys};
use racewatch_instrument::keys;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Name of the reporter thread.
pub const THREAD_NAME: &str = "racewatch-reporter";
/// Longest sleep of the reporter between two looks at the queue: pushes wake
/// it at once (futex); this is the safety net and the period of the detector's
/// checks ([`on_tick`]).
const MAX_WAIT_MS: u32 = 100;

/// What the reporter needs from the options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Text or JSON.
    pub format: ReportFormat,
    /// Stop the process after the first report.
    pub halt_on_error: bool,
    /// Exit status when halting.
    pub exitcode: i32,
    /// Races not reported: `race:` patterns (a function, file or module of either stack contains one),
    /// keys, and PCs (never watched).
    pub suppressions: Suppressions,
    /// Print the `stats=1` block before halting.
    pub stats: bool,
    /// Report a plain access racing an atomic one.
    pub report_atomic_races: bool,
    pub report_volatile_races: bool,
    /// Text reports print every frame with its full name.
    pub full_stacks: bool,
    /// The user's `atomic_code` patterns: an access whose own source file or function contains one
    /// is atomic (inline-assembly atomics the compiler pass cannot tag), besides the built-in
    /// `racewatch_instrument::tags::ASM_ATOMIC_CODE`.
    pub atomic_code: Vec<String>,
    /// Read module files to name frames (`symbolize=1`).
    pub symbolize: bool,
    /// `host=` and `app_version=`.
    pub host: Option<String>,
    pub app_version: Option<String>,
}

impl Config {
    /// The reporter's view of `options`; reads the suppressions file (a
    /// missing or unreadable file is warned about and ignored).
    pub fn from_options(options: &Options) -> Config {
        let suppressions = match &options.suppressions {
            None => Suppressions::default(),
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => {
                    let (suppressions, warnings) = suppressions::parse(&text);
                    for warning in warnings {
                        log::warn(format_args!("suppressions {path}: {warning}"));
                    }
                    suppressions
                }
                Err(err) => {
                    log::warn(format_args!("cannot read suppressions {path}: {err}; none used"));
                    Suppressions::default()
                }
            },
        };
        Config {
            format: options.report_format,
            halt_on_error: options.halt_on_error,
            exitcode: options.exitcode,
            suppressions,
            stats: options.stats,
            report_atomic_races: options.report_atomic_races,
            report_volatile_races: options.report_volatile_races,
            full_stacks: options.full_stacks,
            atomic_code: options.atomic_code.clone(),
            symbolize: options.symbolize,
            host: options.host.clone(),
            app_version: options.app_version.clone(),
        }
    }
}

/// Whether an access marked atomic only by its tag (not LOCK) is really a plain access carrying the label
/// of a compiler-only fence: on x86-64 `fence(Release)` and `fence(Acquire)` emit no instruction, so the
/// pass's tag lands on the next one. In Rust every atomic operation is inlined from
/// `core/src/sync/atomic.rs`; an access whose own frames show other library code (`core::ptr::write`,
/// `ptr::read`, …) and none from there is not one. Without such evidence (no debug info, C code, the
/// user's own tagged inline assembly) the tag is trusted.
fn is_fence_label(record: &AccessRecord, stack: &[Frame]) -> bool {
    if !record.is_atomic || record.locked {
        return false;
    }
    // The access's own frames: the inlined ones, then the physical function.
    let own = stack.iter().position(|f| !f.inlined).map_or(stack, |i| &stack[..=i]);
    let files = || own.iter().filter_map(|f| f.file.as_deref());
    let library = |file: &str| ["/library/core/", "/library/std/", "/library/alloc/"].iter().any(|l| file.contains(l));
    files().any(library) && !files().any(|file| file.ends_with("sync/atomic.rs"))
}

/// Where an access is, for deduplication: file and line of the frame the SUMMARY names for it, or its
/// PC when there is no line information.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Location {
    Line(String, u32),
    Pc(u64),
}

fn location(frame: Option<&Frame>, pc: u64) -> Location {
    match frame {
        Some(Frame { file: Some(file), line: Some(line), .. }) if *line > 0 => Location::Line(file.clone(), *line),
        _ => Location::Pc(pc),
    }
}

/// A race's identity across the processes of one program (`racewatch cargo`'s summary counts distinct
/// ones): its unordered pair of source locations, as `file:line<TAB>file:line` (a location without line
/// information is its PC, which differs between processes of a position-independent program).
fn race_key_text((here, there): &(Location, Location)) -> String {
    let text = |location: &Location| match location {
        Location::Line(file, line) => format!("{file}:{line}").replace(['\t', '\n'], " "),
        Location::Pc(pc) => format!("{pc:#x}"),
    };
    format!("{}\t{}", text(here), text(there))
}

/// What became of a pair of PCs the first time it was judged.
#[derive(Clone, Copy)]
enum Verdict {
    /// Printed, or its source locations had been printed already: the index of its race in
    /// [`Reporter::races`].
    Reported(usize),
    /// Both accesses atomic on review (or atomic against plain with `report_atomic_races=0`).
    NotARace,
    /// Both accesses volatile in dependencies: a race by design (see [`is_dependency_volatile`]).
    Volatile,
    Suppressed,
}

/// Turns race events into printed reports: dedup, symbolization, suppression, rendering.
pub struct Reporter {
    config: Config,
    pid: u32,
    /// Who reports (host, start time, executable).
    process: Process,
    /// Unordered PC pairs judged so far, with their verdicts.
    seen: HashMap<(u64, u64), Verdict>,
    /// Printed races by their pair of source locations: the index in `races`.
    seen_locations: HashMap<(Location, Location), usize>,
    /// Printed races: race_key and occurrences in this process.
    races: Vec<(String, u64)>,
    threads: ThreadNames,
    symbolizer: Symbolizer,
    /// Whether the executable is a libtest harness (read on the first report).
    test_harness: Option<bool>,
}

impl Reporter {
    /// A reporter for process `pid`.
    pub fn new(config: Config, pid: u32) -> Reporter {
        let symbolizer = if config.symbolize { Symbolizer::new() } else { Symbolizer::without_files() };
        Reporter {
            process: this_process(&config),
            config,
            pid,
            seen: HashMap::new(),
            seen_locations: HashMap::new(),
            races: Vec::new(),
            threads: ThreadNames::new(pid),
            symbolizer,
            test_harness: None,
        }
    }

    /// One `race_count` line per race this process saw more than once (JSON reports only): what a
    /// fleet's store adds up. Empty for text reports.
    pub fn counts(&self) -> String {
        if self.config.format != ReportFormat::Json {
            return String::new();
        }
        let repeated = self.races.iter().filter(|(_, count)| *count > 1);
        repeated.map(|(key, count)| report::render_count_json(&self.process, self.pid, key, *count)).collect()
    }

    /// Whether [`Reporter::counts`] has anything to write.
    fn has_counts(&self) -> bool {
        self.config.format == ReportFormat::Json && self.races.iter().any(|(_, count)| *count > 1)
    }

    fn count_repeat(&mut self, race: usize) {
        stats::bump(stats::Counter::RacesRepeated);
        if let Some((_, count)) = self.races.get_mut(race) {
            *count += 1;
        }
    }

    /// The rendered report for `event`, or `None` when this unordered pair of
    /// PCs was already judged, the review finds it is no race, its source
    /// locations were already reported, or a suppression matches (any frame of
    /// either full stack, before [`report::short_backtrace`] cuts them).
    pub fn render(&mut self, event: &RaceEvent) -> Option<String> {
        self.render_keyed(event).map(|(text, _)| text)
    }

    /// [`Reporter::render`], with the race's [`race_key`].
    fn render_keyed(&mut self, event: &RaceEvent) -> Option<(String, String)> {
        let (a, b) = (event.current.pc, event.previous.pc);
        let pair = (a.min(b), a.max(b));
        // A pair is judged once (the verdict depends only on its two PCs); a repeat counts as it did.
        if let Some(&verdict) = self.seen.get(&pair) {
            match verdict {
                Verdict::Reported(race) => self.count_repeat(race),
                Verdict::NotARace => stats::bump(stats::Counter::ReviewedNotRaces),
                Verdict::Volatile => stats::bump(stats::Counter::VolatilePairs),
                Verdict::Suppressed => {}
            }
            return None;
        }
        let (verdict, text) = self.judge(event);
        self.seen.insert(pair, verdict);
        text
    }

    /// The verdict on a pair seen for the first time, and its report and [`race_key`] when it is printed.
    fn judge(&mut self, event: &RaceEvent) -> (Verdict, Option<(String, String)>) {
        let (a, b) = (event.current.pc, event.previous.pc);
        let current_stack = self.symbolize(&event.current);
        let previous_stack = self.symbolize(&event.previous);
        if self.is_suppressed(&current_stack) || self.is_suppressed(&previous_stack) {
            stats::bump(stats::Counter::RacesSuppressed);
            return (Verdict::Suppressed, None);
        }
        // Judge again with what the debug info says: a tag that is only a compiler-only fence's label is
        // not an atomic access; accesses made by atomic inline assembly (a rule) are atomic.
        let mut current_record = event.current;
        let mut previous_record = event.previous;
        for (record, stack) in [(&mut current_record, &current_stack), (&mut previous_record, &previous_stack)] {
            if is_fence_label(record, stack) {
                record.is_atomic = false;
                stats::bump(stats::Counter::FenceLabelsPlain);
            }
            record.is_atomic |= is_atomic_code(stack, &self.config.atomic_code) || is_core_atomic(stack);
        }
        if !self.config.report_volatile_races
            && is_dependency_volatile(&current_stack)
            && is_dependency_volatile(&previous_stack)
        {
            stats::bump(stats::Counter::VolatilePairs);
            return (Verdict::Volatile, None);
        }
        let both_atomic = current_record.is_atomic && previous_record.is_atomic;
        let mixed = current_record.is_atomic != previous_record.is_atomic;
        if both_atomic || (mixed && !self.config.report_atomic_races) {
            stats::bump(stats::Counter::ReviewedNotRaces);
            return (Verdict::NotARace, None);
        }
        // The stacks as reported, and the race's keys (computed on them, as `racewatch triage` does).
        let current_stack = self.report_stack(current_stack);
        let previous_stack = self.report_stack(previous_stack);
        let race_key = keys::race_key(&current_stack, &previous_stack);
        let source_key = keys::source_key(&current_stack, &previous_stack);
        let known = &self.config.suppressions;
        if known.race_keys.contains(&race_key) || source_key.as_ref().is_some_and(|k| known.source_keys.contains(k)) {
            stats::bump(stats::Counter::RacesSuppressed);
            return (Verdict::Suppressed, None);
        }
        // One report per unordered pair of the source locations the SUMMARY names: an unrolled or
        // vectorised loop has many PCs on one line, and two lines of a callback a library runs at once
        // (a `Clone` body's read and write) are one race, at the library's call.
        let (frame_a, frame_b) = racewatch_instrument::frames::racing_frames(&current_stack, &previous_stack);
        let (here, there) = (location(frame_a, a), location(frame_b, b));
        let key = if here <= there { (here, there) } else { (there, here) };
        if let Some(&race) = self.seen_locations.get(&key) {
            self.count_repeat(race);
            return (Verdict::Reported(race), None);
        }
        let race = race_key_text(&key);
        let index = self.races.len();
        self.seen_locations.insert(key, index);
        self.races.push((race_key.clone(), 1));
        // Threads are numbered only once their race is really reported.
        let current = self.access(&current_record, current_stack);
        let previous = self.access(&previous_record, previous_stack);
        let location = self.memory_location(event.current.addr);
        let race_report = RaceReport {
            pid: self.pid,
            process: self.process.clone(),
            time: sys::identity::now(),
            keys: Keys { race_key, source_key, count: 1 },
            current,
            previous,
            location,
        };
        let text = match self.config.format {
            ReportFormat::Text => report::render_text_with(&race_report, self.config.full_stacks),
            ReportFormat::Json => report::render_json(&race_report),
        };
        (Verdict::Reported(index), Some((text, race)))
    }

    /// Renders, prints and counts `event`; halts the process when configured to.
    pub fn handle(&mut self, event: &RaceEvent) {
        PHASE.store(SYMBOLIZING, Ordering::Release);
        let rendered = self.render_keyed(event);
        PHASE.store(IDLE, Ordering::Release);
        let Some((text, race)) = rendered else { return };
        log::write(&text);
        stats::bump(stats::Counter::ReportsPrinted);
        remember(race);
        // Now, not only at exit: a process that dies of a signal or aborts after a report still counts.
        crate::races_file::write(&reported_races());
        crate::profile::count_race(event.current.pc, event.previous.pc);
        if self.config.halt_on_error {
            if let Some(halting) = HALTING.get() {
                halting();
            }
            sys::process::exit_now(self.config.exitcode);
        }
    }

    fn symbolize(&mut self, record: &AccessRecord) -> Vec<Frame> {
        let mut stack = record.stack;
        if stack.len == 0 {
            // No stack captured: still show the accessing instruction.
            stack.push(record.pc);
        }
        self.symbolizer.symbolize_stack(&stack)
    }

    /// A symbolized stack as a report shows it: without racewatch's frames past the access, cut like a
    /// short backtrace.
    fn report_stack(&self, stack: Vec<Frame>) -> Vec<Frame> {
        report::short_backtrace(self.without_runtime_frames(stack))
    }

    fn access(&mut self, record: &AccessRecord, stack: Vec<Frame>) -> AccessReport {
        let thread = self.threads.number(record.tid);
        let thread_name = self.thread_name(record.tid);
        let creation = if thread == 0 { None } else { self.creation(record.tid) };
        // A thread a test spawned runs under the test's name without it being its own.
        let test = match comm(record.tid).filter(|_| self.pid == std::process::id()) {
            Some(name) if thread != 0 && self.is_test_harness() => {
                // The test's frames are in the thread's stack, or in its creator's (a thread the test
                // spawned, which inherits the test's name).
                let created = creation.as_ref().map_or(&[][..], |c| &c.stack[..]);
                self.test_of(&name, &[&stack, created])
            }
            _ => None,
        };
        AccessReport {
            thread,
            tid: record.tid,
            thread_name,
            test,
            is_write: record.is_write,
            is_atomic: record.is_atomic,
            size: record.size,
            address: record.addr,
            stack,
            creation,
        }
    }

    /// The name of thread `tid` of this process, while it runs (`comm`: at most 15 bytes), when it is its
    /// own: a new thread starts with a copy of its creator's name, so a thread named as its creator was
    /// when it created it (or, with no creation known, as the main thread) has none.
    fn thread_name(&self, tid: i32) -> Option<String> {
        if self.pid != std::process::id() || tid <= 0 {
            return None;
        }
        let name = comm(tid)?;
        if tid == self.pid as i32 {
            return Some(name);
        }
        let inherited = match sys::creation::lookup(tid) {
            Some(record) if !record.creation.creator_name().is_empty() => {
                record.creation.creator_name() == name.as_bytes()
            }
            _ => comm(self.pid as i32).as_ref() == Some(&name),
        };
        (!inherited).then_some(name)
    }

    /// Whether the executable is a libtest harness (`racewatch cargo test`'s test binaries).
    fn is_test_harness(&mut self) -> bool {
        if self.test_harness.is_none() {
            let harness = self.symbolizer.executable_functions().iter().any(|f| f.name == "test::test_main_static");
            self.test_harness = Some(harness);
        }
        self.test_harness == Some(true)
    }

    /// The test a thread of a libtest harness runs: libtest names a test's thread after the test (cut
    /// to 15 bytes by the kernel), so its name is the start of the test's path. The whole path comes
    /// from the stacks (the test's function or closure, outermost first: a qualified name, or a bare
    /// inlined one completing the name's last segment), else from the one function of the executable it
    /// fits; a name with a module path (`tests::…`) that fits none is shown as it is.
    fn test_of(&mut self, name: &str, stacks: &[&[Frame]]) -> Option<String> {
        let fits = |path: &str| if name.len() >= 15 { path.starts_with(name) } else { path == name };
        let (module, partial) = name.rsplit_once("::").unwrap_or(("", name));
        for frame in stacks.iter().flat_map(|stack| stack.iter().rev()) {
            let Some(function) = frame.function.as_deref() else { continue };
            if let Some(path) = test_path(function).filter(|p| fits(p)) {
                return Some(path);
            }
            let bare = bare_name(function);
            let completes = if name.len() >= 15 { bare.starts_with(partial) } else { bare == partial };
            if completes && !bare.is_empty() && !function.contains("::") {
                return Some(if module.is_empty() { bare } else { format!("{module}::{bare}") });
            }
        }
        let mut paths: Vec<String> = self
            .symbolizer
            .executable_functions()
            .iter()
            .flat_map(|f| paths_naming(&f.name, name))
            .filter_map(test_path)
            .filter(|p| fits(p))
            .collect();
        paths.sort();
        paths.dedup();
        match paths.len() {
            1 => paths.pop(),
            _ => name.contains("::").then(|| name.to_string()),
        }
    }

    /// Where thread `tid` was created, when racewatch saw it.
    fn creation(&mut self, tid: i32) -> Option<Creation> {
        let record = sys::creation::lookup(tid)?;
        let pcs = record.creation.frames();
        if pcs.is_empty() {
            return None;
        }
        let mut stack = self.symbolizer.symbolize_return_addresses(pcs);
        if !self.config.full_stacks {
            stack.retain(|f| !f.in_runtime);
        }
        let creator = record.creation.creator;
        Some(Creation {
            thread: self.threads.number(creator),
            tid: creator,
            thread_name: self.thread_name(creator),
            stack: report::short_backtrace(stack),
        })
    }

    /// What the memory at `addr` is: a global of a module's symbol table, the stack of a thread
    /// racewatch knows (or the main thread's `[stack]` mapping), or unknown.
    fn memory_location(&mut self, addr: u64) -> MemoryLocation {
        if let Some(symbol) = self.symbolizer.data_symbol(addr) {
            let offset = symbol.offset.wrapping_sub(addr.wrapping_sub(symbol.address));
            return MemoryLocation::Global {
                name: symbol.name,
                size: symbol.size,
                address: symbol.address,
                module: symbol.module,
                offset,
            };
        }
        if !self.config.symbolize {
            // The variable is named offline, from the module's symbol table (its file is not read here).
            if let Some(module) = modules::module_of(addr).filter(|m| m.path.contains('/')) {
                let offset = addr.wrapping_sub(module.bias);
                return MemoryLocation::InModule {
                    module: module.path,
                    build_id: module.build_id,
                    address: addr,
                    offset,
                };
            }
        }
        let alive = |tid: i32| std::path::Path::new(&format!("/proc/self/task/{tid}")).exists();
        let on_stack = sys::creation::records()
            .into_iter()
            .find(|r| (r.stack.0..r.stack.1).contains(&addr) && alive(r.tid))
            .map(|r| r.tid)
            .or_else(|| in_main_stack_mapping(addr).then_some(self.pid as i32));
        match on_stack {
            Some(tid) => {
                MemoryLocation::Stack { thread: self.threads.number(tid), tid, thread_name: self.thread_name(tid) }
            }
            None => MemoryLocation::Unknown,
        }
    }

    /// The stack without racewatch's own frames past the access (the interposers a thread or `main`
    /// starts through), unless `full_stacks=1`.
    fn without_runtime_frames(&self, stack: Vec<Frame>) -> Vec<Frame> {
        if self.config.full_stacks {
            return stack;
        }
        stack.into_iter().enumerate().filter(|(i, f)| *i == 0 || !f.in_runtime).map(|(_, f)| f).collect()
    }

    fn is_suppressed(&self, stack: &[Frame]) -> bool {
        let fields = |f: &Frame| [f.function.clone(), f.file.clone(), f.module.clone()];
        self.config
            .suppressions
            .patterns
            .iter()
            .any(|pattern| stack.iter().flat_map(fields).flatten().any(|field| field.contains(pattern.as_str())))
    }
}

/// Who this process is: host, start time, executable and its build-id, version.
fn this_process(config: &Config) -> Process {
    let exe_path = modules::main_program_path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let exe_build_id = modules::all()
        .into_iter()
        .find(|m| !exe_path.is_empty() && m.path == exe_path)
        .map(|m| m.build_id)
        .unwrap_or_default();
    let app_version = config.app_version.clone().unwrap_or_else(|| match exe_build_id.get(..12) {
        Some(short) => short.to_string(),
        None => "unknown".to_string(),
    });
    Process {
        host: config.host.clone().or_else(sys::identity::node_name).unwrap_or_else(|| "unknown".to_string()),
        start_time: sys::identity::start_time().unwrap_or(0),
        exe_path,
        exe_build_id,
        app_version,
    }
}

/// The reporter's state, behind a lock that only the reporter thread (and exit) takes. A forked child
/// abandons its copy (the parent's reporter may have held the lock at fork time) and starts a new one.
static STATE: AtomicPtr<Mutex<Option<Reporter>>> = AtomicPtr::new(std::ptr::null_mut());
static THREAD: AtomicU64 = AtomicU64::new(0);
static REPORTER_TID: AtomicI32 = AtomicI32::new(0);
/// Set to make the reporter thread drain the queue once more and end.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set while there is no reporter thread: not started yet, ended after a second without work, or
/// ended because the program runs on one thread ([`rest`]); started when there is work.
static RESTING: AtomicBool = AtomicBool::new(false);
/// Whether the reporter thread is started only when it has work ([`wanted`]): where a sampling signal
/// may start it ([`crate::spawn_point::possible`]). Elsewhere (a program with its own `malloc`, under a
/// seccomp filter) it starts with the detector, as the program's second thread starts, and stays.
static ON_DEMAND: AtomicBool = AtomicBool::new(true);
/// Set, from anywhere (signal handlers included), when the reporter thread has work besides the queue:
/// a tracer to watch, modules to scan ([`request`]).
static WANTED: AtomicBool = AtomicBool::new(false);
/// When a signal handler last tried to start the reporter ([`start_from_signal`]; monotonic ns).
static SIGNAL_TRY_NS: AtomicU64 = AtomicU64::new(0);
/// At most one try from a signal handler per this many ns: each unwinds the interrupted stack.
const SIGNAL_TRY_GAP_NS: u64 = 10_000_000;
/// A reporter thread with nothing to do for this long ends itself ([`retire_if_idle`]).
const RETIRE_AFTER_NS: u64 = 1_000_000_000;
/// Held by [`rest`], [`wake_from_rest`] and the reporter's own end ([`retire_if_idle`]), so that a thread
/// the program creates while another one ends finds the reporter either running or resting, never
/// half-way (a flag, reset in a forked child).
static CONTROL: AtomicBool = AtomicBool::new(false);

/// The thread holding [`CONTROL`] (0: none).
static CONTROL_HOLDER: AtomicI32 = AtomicI32::new(0);

/// Holds [`CONTROL`] while alive.
struct Control;

impl Control {
    fn take() -> Control {
        while CONTROL.swap(true, Ordering::AcqRel) {
            crate::sys::raw::yield_cpu();
        }
        CONTROL_HOLDER.store(sys::thread::gettid(), Ordering::Release);
        Control
    }

    /// [`Control::take`] if nobody holds it now (a signal handler never waits for it).
    fn try_take() -> Option<Control> {
        if CONTROL.swap(true, Ordering::AcqRel) {
            return None;
        }
        CONTROL_HOLDER.store(sys::thread::gettid(), Ordering::Release);
        Some(Control)
    }

    /// [`Control::take`], unless this thread holds it already, further up its stack (a program's
    /// handler that calls `exit` while its thread waits for the reporter in [`rest`]): `None` then,
    /// rather than waiting for itself.
    fn take_unless_held_here() -> Option<Control> {
        if CONTROL.load(Ordering::Acquire) && CONTROL_HOLDER.load(Ordering::Acquire) == sys::thread::gettid() {
            return None;
        }
        Some(Control::take())
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        CONTROL_HOLDER.store(0, Ordering::Release);
        CONTROL.store(false, Ordering::Release);
    }
}

/// How long exit, and a sandbox entry, wait for the reporter to print what is queued: about a second,
/// longer (up to `DRAIN_SYMBOLIZING_MS`) while it is reading debug info, never for a blocked write.
const DRAIN_MS: u64 = 1000;
const DRAIN_SYMBOLIZING_MS: u64 = 5000;

/// Set while the reporter handles what it took from the queue (see [`settle`]).
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set when [`shutdown`] gave up waiting for a reporter thread that may still hold the state's lock.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// The races this process printed, as [`race_key`]s, in order. A forked child starts a list of its own.
static REPORTED: AtomicPtr<Mutex<Vec<String>>> = AtomicPtr::new(std::ptr::null_mut());

fn reported_list() -> &'static Mutex<Vec<String>> {
    if let Some(list) = sys::ptr::leaked_ref(REPORTED.load(Ordering::Acquire)) {
        return list;
    }
    let fresh: *mut Mutex<Vec<String>> = Box::leak(Box::new(Mutex::new(Vec::new())));
    let current = match REPORTED.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(other) => other, // Another thread published one first; ours stays leaked (once per process).
    };
    sys::ptr::leaked_ref(current).expect("published list")
}

fn remember(race: String) {
    reported_list().lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(race);
}

/// How many races this process printed (each once: repeats and suppressed races are not counted).
pub fn races_reported() -> usize {
    sys::ptr::leaked_ref(REPORTED.load(Ordering::Acquire))
        .map_or(0, |list| list.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len())
}

/// The races this process printed, as `file:line<TAB>file:line` keys (the unordered pair of locations
/// of the two accesses), in the order printed.
pub fn reported_races() -> Vec<String> {
    sys::ptr::leaked_ref(REPORTED.load(Ordering::Acquire))
        .map_or_else(Vec::new, |list| list.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone())
}

/// What the reporter thread is doing: reading debug info for a report, or anything else.
static PHASE: AtomicU8 = AtomicU8::new(IDLE);
const IDLE: u8 = 0;
const SYMBOLIZING: u8 = 1;

fn state() -> Option<MutexGuard<'static, Option<Reporter>>> {
    let mutex = sys::ptr::leaked_ref(STATE.load(Ordering::Acquire))?;
    Some(mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// Clears [`BUSY`] when dropped (a panicking report included).
struct Busy;

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::SeqCst);
    }
}

/// Handles everything queued so far.
fn drain() {
    let Some(mut guard) = state() else { return };
    let Some(reporter) = guard.as_mut() else { return };
    BUSY.store(true, Ordering::SeqCst);
    let _busy = Busy;
    sys::fd::apply_private_closes();
    if !queue::is_empty() && is_reporter_thread(sys::thread::gettid()) {
        // Before the first file is opened for a report: the program's descriptor table never sees one.
        sys::fd::enter_private_table();
    }
    while let Some(event) = queue::pop() {
        // A module unloaded since the last report is not read through an old mapping of its file.
        reporter.symbolizer.forget_unloaded();
        reporter.handle(&event);
        sys::fd::apply_private_closes();
    }
    HOLDS_FILES.store(reporter.symbolizer.holds_files(), Ordering::Release);
}

/// Whether the symbolizer holds module files (mapped for their symbols and debug info).
static HOLDS_FILES: AtomicBool = AtomicBool::new(false);
/// Set by a `dlclose` while the symbolizer holds module files; cleared once the reporter thread dropped
/// the files of modules no longer loaded.
static UNLOADED: AtomicBool = AtomicBool::new(false);

/// The program unloaded a module (`dlclose` returned): the reporter thread drops what it read of module
/// files no longer mapped, and the caller waits for that (at most 50 ms), so that the program's next look
/// at `/proc/self/maps` does not find the module still there, and a file the program rewrites in place
/// next (a plugin reloaded over its old copy) is no longer mapped by racewatch.
pub fn module_unloaded() {
    if !HOLDS_FILES.load(Ordering::Acquire) {
        return;
    }
    UNLOADED.store(true, Ordering::Release);
    if THREAD.load(Ordering::Acquire) == 0 {
        // Resting (the library's destructor joined the program's other threads) or never started: done
        // here, unless something holds the reporter's state.
        let Some(mutex) = sys::ptr::leaked_ref(STATE.load(Ordering::Acquire)) else { return };
        if let Ok(mut guard) = mutex.try_lock() {
            if let Some(reporter) = guard.as_mut() {
                reporter.symbolizer.forget_unloaded();
                HOLDS_FILES.store(reporter.symbolizer.holds_files(), Ordering::Release);
            }
        }
        UNLOADED.store(false, Ordering::Release);
        return;
    }
    sys::wake::notify();
    let deadline = sys::thread::monotonic_ns() + 50_000_000;
    while UNLOADED.load(Ordering::Acquire) && sys::thread::monotonic_ns() < deadline {
        sys::thread::sleep_us(100);
    }
}

/// On the reporter thread: answers [`module_unloaded`].
fn forget_unloaded_modules() {
    if !UNLOADED.load(Ordering::Acquire) {
        return;
    }
    if let Some(mut guard) = state() {
        if let Some(reporter) = guard.as_mut() {
            reporter.symbolizer.forget_unloaded();
            HOLDS_FILES.store(reporter.symbolizer.holds_files(), Ordering::Release);
        }
    }
    UNLOADED.store(false, Ordering::Release);
}

extern "C" fn reporter_main(_: *mut std::ffi::c_void) -> *mut std::ffi::c_void {
    REPORTER_TID.store(sys::thread::gettid(), Ordering::Release);
    LAST_TID.store(sys::thread::gettid(), Ordering::Release);
    sys::alloc::set_patient_thread(sys::thread::gettid(), while_waiting_for_memory);
    sys::thread::mark_runtime_thread();
    sys::thread::set_name(c"racewatch-repor");
    let mut busy_at = sys::thread::monotonic_ns();
    let retired = std::panic::catch_unwind(move || loop {
        if STOP.load(Ordering::Acquire) {
            drain();
            let_go_of_files_unless_exiting();
            return false;
        }
        let token = sys::wake::token();
        if WANTED.swap(false, Ordering::AcqRel) || !queue::is_empty() {
            busy_at = sys::thread::monotonic_ns();
        }
        forget_unloaded_modules();
        sys::unwind_info::refresh_if_stale();
        let wait_ms = TICK.get().map_or(MAX_WAIT_MS, |tick| tick().min(MAX_WAIT_MS));
        drain();
        if STOP.load(Ordering::Acquire) {
            let_go_of_files_unless_exiting();
            return false;
        }
        if retire_if_idle(busy_at) {
            return true;
        }
        sys::signal::drop_own_pending_trap();
        sys::wake::wait(token, wait_ms);
    });
    if !retired.unwrap_or(false) {
        sys::thread::unmark_runtime_thread();
        sys::alloc::set_patient_thread(0, while_waiting_for_memory);
    }
    std::ptr::null_mut()
}

/// Whether the program's threads need the reporter thread now: a race is queued, a step aside is to be
/// finished, or something asked for it ([`request`]). Async-signal-safe.
pub fn wanted() -> bool {
    WANTED.load(Ordering::Acquire) || !queue::is_empty() || sys::signal::step_aside_pending()
}

/// Asks for the reporter thread's attention (a tracer to watch, modules to scan): it is woken, or, on
/// demand, started at the next point where that is safe. Async-signal-safe.
pub fn request() {
    WANTED.store(true, Ordering::Release);
    sys::wake::notify();
}

/// An on-demand reporter thread ([`ON_DEMAND`]) that had nothing to do since `busy_at` (monotonic ns) for
/// [`RETIRE_AFTER_NS`] ends itself: it lets go of the module files it read for reports, detaches
/// itself and rests; [`wanted`] work starts it again. True when it retired (return at once).
fn retire_if_idle(busy_at: u64) -> bool {
    if !ON_DEMAND.load(Ordering::Acquire) || sys::thread::monotonic_ns().saturating_sub(busy_at) < RETIRE_AFTER_NS {
        return false;
    }
    if wanted()
        || BUSY.load(Ordering::SeqCst)
        || UNLOADED.load(Ordering::Acquire)
        || !TICK_IDLE.get().is_none_or(|idle| idle())
    {
        return false;
    }
    let Some(_control) = Control::try_take() else { return false };
    if wanted() || STOP.load(Ordering::Acquire) || THREAD.load(Ordering::Acquire) == 0 {
        return false;
    }
    let_go_of_files();
    // SAFETY: detaching the calling thread, which is joinable and about to return: glibc frees it then.
    unsafe { libc::pthread_detach(libc::pthread_self()) };
    sys::thread::unmark_runtime_thread();
    sys::alloc::set_patient_thread(0, while_waiting_for_memory);
    sys::thread::note_leaving(sys::thread::gettid());
    THREAD.store(0, Ordering::Release);
    REPORTER_TID.store(0, Ordering::Release);
    sys::fd::forget_private_table();
    RESTING.store(true, Ordering::Release);
    stats::bump(stats::Counter::ReporterRetired);
    true
}

/// On the reporter thread as it ends (retiring, or stopped because the program is back to one thread):
/// lets go of the module files it read for reports, so that the program's `/proc/self/maps` no longer
/// lists them once the reporter is gone (the next report reads them again).
fn let_go_of_files() {
    if let Some(mut guard) = state() {
        if let Some(reporter) = guard.as_mut() {
            reporter.symbolizer.forget_files();
        }
    }
    HOLDS_FILES.store(false, Ordering::Release);
}

/// [`let_go_of_files`] for a reporter stopped while the program goes on (back to one thread); at exit the
/// process lets go of everything anyway, without the time it takes to free what was parsed.
fn let_go_of_files_unless_exiting() {
    if !crate::detector::is_exiting() {
        let_go_of_files();
    }
}

/// Starts the reporter thread and waits (at most 100 ms) until it has published its thread id: the
/// program's listings of `/proc/self/task` leave that id out ([`crate::proc_view`]), and the thread is
/// started from the program's `pthread_create` while the program has no other thread, so no thread of
/// the program's can list the task directory before the id is known.
fn spawn() -> Option<libc::pthread_t> {
    REPORTER_TID.store(0, Ordering::Release);
    STARTING.store(true, Ordering::Release);
    let thread = sys::thread::spawn_runtime_thread(reporter_main);
    STARTING.store(thread.is_some(), Ordering::Release);
    let thread = thread?;
    stats::bump(stats::Counter::ReporterStarts);
    let deadline = sys::thread::monotonic_ns() + 100_000_000;
    while REPORTER_TID.load(Ordering::Acquire) == 0 && sys::thread::monotonic_ns() < deadline {
        crate::sys::raw::yield_cpu();
    }
    Some(thread)
}

/// Called before `halt_on_error` ends the process (what the process leaves at exit: profile, records,
/// `stats`).
static HALTING: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Makes `halt_on_error` call `halting` before it ends the process (set once per process).
pub fn on_halt(halting: fn()) {
    let _ = HALTING.set(halting);
}

/// Called by the reporter thread at least every `MAX_WAIT_MS` (the detector's periodic checks); returns
/// how soon it wants to be called again, in ms.
static TICK: std::sync::OnceLock<fn() -> u32> = std::sync::OnceLock::new();

/// Makes the reporter thread call `tick` at least every 100 ms, or as soon as it asks (set once per
/// process).
pub fn on_tick(tick: fn() -> u32) {
    let _ = TICK.set(tick);
}

/// Whether the detector's periodic checks need the reporter thread no longer (no paused sampling to
/// resume, no tracer to watch): an on-demand reporter only retires then.
static TICK_IDLE: std::sync::OnceLock<fn() -> bool> = std::sync::OnceLock::new();

/// Sets what [`TICK_IDLE`] asks (once per process).
pub fn on_tick_idle(idle: fn() -> bool) {
    let _ = TICK_IDLE.set(idle);
}

/// Sets the reporter up (once per process; later calls do nothing), without its thread: that is started
/// when there is work. The thread has every signal blocked for its whole life but glibc's `SIGSETXID`.
pub fn start(options: &Options, on_demand: bool) {
    if THREAD.load(Ordering::Acquire) != 0 {
        return;
    }
    ON_DEMAND.store(on_demand, Ordering::Release);
    // Where threads are created, for the reports: this thread's stack bounds, then every creation.
    sys::creation::record_this_thread();
    sys::creation::set_capture(crate::unwind::capture_creation);
    let config = Config::from_options(options);
    install_suppressed_pcs(&config.suppressions);
    let reporter = Mutex::new(Some(Reporter::new(config, std::process::id())));
    STATE.store(Box::leak(Box::new(reporter)), Ordering::Release);
    STOP.store(false, Ordering::Release);
    // Found now, outside any signal handler: a start from one ([`start_from_signal`]) looks nothing up.
    let _ = sys::thread::runtime_threads_uncounted();
    sys::thread::note_static_tls();
    RESTING.store(true, Ordering::Release);
    if on_demand {
        warm_thread_cache();
    }
    if !on_demand {
        wake_from_rest();
        if RESTING.load(Ordering::Acquire) {
            log::warn(format_args!("cannot start the reporter thread; reports are printed at exit"));
        }
    }
}

/// Starts and joins a runtime thread that does nothing, now (the detector starts from the program's
/// `pthread_create`): glibc keeps its stack (16 KiB, as the reporter's: no program thread asks for less,
/// so none is handed it), with the thread-local storage vector it allocated with the
/// program's `malloc`, for the next thread of that size, so the reporter thread a sampling signal
/// starts later takes it and allocates nothing of the program's (a first `calloc` in a worker that
/// never allocated would give it a malloc arena: `mallinfo2` showed 132 KiB more after a report). Not
/// in a nested PID namespace (a container's init and its children), where pids are handed out in
/// order and the thread would make every later one one higher: a program printing its children's
/// pids there saw the difference.
fn warm_thread_cache() {
    /// The warm-up thread's kernel id, which it publishes.
    static TID: AtomicI32 = AtomicI32::new(0);
    extern "C" fn nothing(_: *mut std::ffi::c_void) -> *mut std::ffi::c_void {
        TID.store(sys::thread::gettid(), Ordering::Release);
        std::ptr::null_mut()
    }
    if sys::tracer::read_now().nested_pid_namespace {
        return;
    }
    if let Some(thread) = sys::thread::spawn_small_runtime_thread(nothing) {
        // Yielding first: the program's thread waits without blocking (no voluntary switch of racewatch's).
        if !sys::thread::yield_until(20_000, &mut || sys::thread::try_join(thread)) {
            while !sys::thread::join_for(thread, 100) {}
        }
        // A join returns before the kernel releases the thread: until then the program's own `Threads:`
        // counts it (host case `own_proc_files_show_the_programs_state`, 1 run in a loaded CI).
        let tid = TID.swap(0, Ordering::AcqRel);
        if tid != 0 {
            sys::thread::note_leaving(tid);
            sys::thread::wait_gone(tid, 100);
        }
    }
}

/// The program is creating a thread: a resting reporter starts when it has work, or (where it is not
/// started on demand) again with the program's next thread.
pub fn program_creates_thread() {
    if ON_DEMAND.load(Ordering::Acquire) {
        wake_if_wanted();
    } else {
        wake_from_rest();
    }
}

/// At a point where the program's thread may create one (an interposed call): starts an on-demand
/// reporter that has work ([`wanted`]).
pub fn wake_if_wanted() {
    if RESTING.load(Ordering::Acquire) && wanted() {
        wake_from_rest();
    }
}

/// From a sampling signal in the program's covered code at `regs`: starts an on-demand reporter that
/// has work, when the interrupted thread holds no lock thread creation needs ([`crate::spawn_point`]);
/// at most one try per [`SIGNAL_TRY_GAP_NS`]. `now`: monotonic ns. Async-signal-safe in that case.
pub fn start_from_signal(regs: &sys::signal::Regs, now: u64) {
    if !ON_DEMAND.load(Ordering::Acquire) || !RESTING.load(Ordering::Acquire) || !wanted() {
        return;
    }
    let last = SIGNAL_TRY_NS.load(Ordering::Relaxed);
    if now.saturating_sub(last) < SIGNAL_TRY_GAP_NS
        || SIGNAL_TRY_NS.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_err()
    {
        return;
    }
    if !crate::spawn_point::here(regs) {
        stats::bump(stats::Counter::ReporterStartsDeferred);
        return;
    }
    let Some(_control) = Control::try_take() else { return };
    // Not while another thread changes the process's ids: glibc's broadcast would wait for this
    // thread, which holds its signal, while `pthread_create` here waits for glibc's lock.
    let Some(_start) = sys::setxid::begin_start() else {
        stats::bump(stats::Counter::ReporterStartsDeferred);
        return;
    };
    if RESTING.load(Ordering::Acquire) {
        if let Some(thread) = spawn() {
            THREAD.store(thread, Ordering::Release);
            STARTING.store(false, Ordering::Release);
            RESTING.store(false, Ordering::Release);
            stats::bump(stats::Counter::ReporterStartsFromSignals);
        }
    }
}

/// Resolves the suppressions' `pc:` entries against the loaded modules and hands them to the sampler.
fn install_suppressed_pcs(suppressions: &Suppressions) {
    if suppressions.pcs.is_empty() {
        return;
    }
    let loaded: Vec<(String, u64)> = modules::all().into_iter().map(|m| (m.build_id, m.bias)).collect();
    let pcs = crate::suppressed_pcs::resolve(&suppressions.pcs, &loaded);
    let resolved = pcs.len();
    let left_out = crate::suppressed_pcs::install(pcs);
    if left_out > 0 {
        log::warn(format_args!(
            "suppressions: {left_out} pc: entries beyond the first {} are watched anyway",
            resolved - left_out
        ));
    }
}

/// Ends the reporter thread while the program runs on one thread: a process whose other threads have
/// ended is single-threaded again, as the kernel checks it (`unshare(CLONE_NEWUSER)`, `setns` into a
/// user namespace) and as `/proc/self/task` shows it. Call from the program's last thread but one as
/// it ends; its `pthread_join` in the other returns after the reporter is gone. What is queued is
/// printed first, waited for as at exit (about a second, longer while it reads debug info); a reporter
/// still printing after that ends after its round. It is started again when there is work.
pub fn rest() {
    let _no_cancel = sys::thread::NoCancel::hold();
    let _control = Control::take();
    let thread = THREAD.load(Ordering::Acquire);
    if thread == 0 {
        return;
    }
    let tid = REPORTER_TID.load(Ordering::Acquire);
    STOP.store(true, Ordering::Release);
    sys::wake::notify();
    let start = sys::thread::monotonic_ns();
    while !sys::thread::join_for(thread, 100) {
        if waited_too_long(start) {
            return; // Exit joins it.
        }
    }
    // After a report it closes a descriptor table of its own as it exits: still listed meanwhile.
    sys::thread::wait_gone(tid, 100);
    THREAD.store(0, Ordering::Release);
    REPORTER_TID.store(0, Ordering::Release);
    sys::fd::forget_private_table();
    STOP.store(false, Ordering::Release);
    RESTING.store(true, Ordering::Release);
}

/// Returns to one thread that stopped the reporter so far in this process ([`back_to_one_thread`]).
static RESTS: AtomicU32 = AtomicU32::new(0);
/// From this many returns to one thread on, the program is taken to go back to one thread over and over
/// (short workers started and joined by `main`), and the reporter stays through them: each stop and start
/// is two hand-offs that wait for the scheduler (1,500 rounds of two short workers: 0.16 s alone, 0.44 s
/// with a stop and start per round on a quiet 2-core machine, 10 s beside three CPU-bound processes).
/// `unshare` and `setns` still stop it first ([`crate::detector::before_single_threaded_call`]).
const CHURN_RESTS: u32 = 64;

/// The program is back to one thread (its last thread but one is ending, or was joined): the reporter
/// [`rest`]s, the first [`CHURN_RESTS`] times in this process.
pub fn back_to_one_thread() {
    if THREAD.load(Ordering::Acquire) == 0 {
        return;
    }
    let rests = RESTS.load(Ordering::Relaxed);
    if rests < CHURN_RESTS {
        RESTS.store(rests + 1, Ordering::Relaxed);
        rest();
    }
}

/// A resting reporter is started again to print what was queued since (and, for JSON reports, the
/// counts of repeated races): on its own thread, whose allocations may wait for memory as long as it
/// takes. The program's thread that exits or settles never does that work for it: its allocations
/// cannot wait, and where memory is gone Rust's allocator would end the process.
fn wake_for_queue() {
    let counts_due = || state().is_some_and(|guard| guard.as_ref().is_some_and(|r| r.has_counts()));
    if RESTING.load(Ordering::Acquire) && (!queue::is_empty() || counts_due()) {
        wake_from_rest();
    }
}

/// Where nobody can print: a resting reporter that could not be started again (no memory, or no room
/// for a thread, for it). What is queued is dropped and counted rather than printed on the program's
/// thread; true when that is the case.
fn unable_to_print() -> bool {
    RESTING.load(Ordering::Acquire) || ABANDONED.load(Ordering::Acquire)
}

/// Starts the reporter thread if there is none (call where there is work for it, from a place where the
/// calling thread may create one).
fn wake_from_rest() {
    if !RESTING.load(Ordering::Acquire) {
        return;
    }
    let _no_cancel = sys::thread::NoCancel::hold();
    let _control = Control::take();
    if RESTING.load(Ordering::Acquire) {
        // Without a thread (no memory or no room for one) it rests on: the next try starts it.
        if let Some(thread) = spawn() {
            THREAD.store(thread, Ordering::Release);
            STARTING.store(false, Ordering::Release);
            RESTING.store(false, Ordering::Release);
        }
    }
}

/// Makes the reporter thread end after the round it is in (call from the reporter thread itself, e.g.
/// from its tick; [`shutdown`] still joins it).
pub fn stop_after_this_round() {
    STOP.store(true, Ordering::Release);
}

/// Ends the process as glibc ends it when the program's last thread returns or calls `pthread_exit`:
/// `exit(0)`, which runs the program's `atexit` handlers and flushes its streams. Call from the reporter
/// thread once no thread of the program's is alive; what is queued is printed first.
pub fn exit_in_place_of_the_last_thread() -> ! {
    // Nobody is left to join the reporter: the exit hooks drain on this thread instead (unless it was
    // abandoned in the middle of a report, waiting for memory).
    THREAD.store(0, Ordering::Release);
    if !ABANDONED.load(Ordering::Acquire) {
        drain();
    }
    crate::sys::process::racewatch_exit(0)
}

/// Runs between two tries of an allocation that found no memory on the reporter thread: the report
/// under way waits, but a program whose last thread ended meanwhile still ends.
fn while_waiting_for_memory() {
    if !sys::thread::runtime_threads_uncounted() && sys::tracer::read().only_caller_alive {
        // The report under way (its lock held below us) is given up; the queue is counted as dropped.
        ABANDONED.store(true, Ordering::Release);
        exit_in_place_of_the_last_thread();
    }
}

/// Whether a reporter thread runs.
pub fn has_thread() -> bool {
    THREAD.load(Ordering::Acquire) != 0
}

/// The id of the last reporter thread started, until the kernel no longer counts it (a reporter that
/// retires clears [`REPORTER_TID`] just before it returns).
static LAST_TID: AtomicI32 = AtomicI32::new(0);

/// How many reporter threads the kernel counts in the process now (0 or 1); `None` while one is being
/// started and its id is not known yet (the kernel may count it already): ask again shortly. For the
/// program's own `status` and `stat` thread counts ([`crate::proc_view`]).
pub fn kernel_count() -> Option<u32> {
    if REPORTER_TID.load(Ordering::Acquire) != 0 || has_thread() {
        return Some(1);
    }
    if STARTING.load(Ordering::Acquire) {
        return None;
    }
    let last = LAST_TID.load(Ordering::Acquire);
    if last != 0 && sys::raw::thread_alive(last) {
        return Some(1);
    }
    if last != 0 {
        let _ = LAST_TID.compare_exchange(last, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
    Some(0)
}

/// Whether a reporter thread runs or is being started.
pub fn has_or_starts_thread() -> bool {
    has_thread() || STARTING.load(Ordering::Acquire)
}

/// Set from the reporter thread's creation until the thread that created it records it ([`THREAD`]): a
/// program thread told `EAGAIN` meanwhile has it ended ([`shutdown`] waits for its creator).
static STARTING: AtomicBool = AtomicBool::new(false);

/// Whether `tid` is the reporter thread (never sampled).
pub fn is_reporter_thread(tid: i32) -> bool {
    tid != 0 && REPORTER_TID.load(Ordering::Acquire) == tid
}

/// Prints what is still queued and ends the reporter thread, waiting for it at most about a second
/// (a reader that does not empty stderr cannot hold the program's exit). What is left in the queue is
/// counted as dropped. Without a reporter thread, drains here. Call at exit and before a sandbox.
pub fn shutdown() {
    let _no_cancel = sys::thread::NoCancel::hold();
    wake_for_queue();
    // The program's last thread but one may be ending right now, joining the reporter in [`rest`]: one
    // joiner at a time. Joined twice, a thread whose descriptor glibc freed (and unmapped, with its
    // stack, once the stack cache is full) is written to by the second join.
    match Control::take_unless_held_here() {
        Some(_control) => stop_and_join(),
        None => {
            // This thread is in `rest` further up (a handler of the program's called `exit` there): the
            // reporter was told to end and that join is `rest`'s; wait until it is gone instead.
            let tid = REPORTER_TID.load(Ordering::Acquire);
            if tid != 0 {
                sys::thread::wait_gone(tid, DRAIN_MS);
            }
        }
    }
    while queue::pop().is_some() {
        stats::bump(stats::Counter::ReportsDropped);
    }
    write_counts();
}

/// [`shutdown`]'s wait: tells the reporter thread to print what is queued and end, and joins it (bounded);
/// without one, drains here. Call holding [`Control`].
fn stop_and_join() {
    let thread = THREAD.swap(0, Ordering::AcqRel);
    if thread == 0 {
        // A second call after a reporter was left writing would wait for its lock forever.
        if !unable_to_print() {
            drain();
        }
        return;
    }
    STOP.store(true, Ordering::Release);
    sys::wake::notify();
    let start = sys::thread::monotonic_ns();
    loop {
        if sys::thread::join_for(thread, 100) {
            sys::fd::forget_private_table();
            return;
        }
        if waited_too_long(start) {
            // Still writing (a full pipe) or stuck: leave it; the process is about to exit or be sandboxed.
            REPORTER_TID.store(0, Ordering::Release);
            ABANDONED.store(true, Ordering::Release);
            return;
        }
    }
}

/// Whether the exit path, waiting since `start` (monotonic ns) for the reporter to print what is queued,
/// stops waiting: after `DRAIN_MS`, `DRAIN_SYMBOLIZING_MS` while it reads debug info, at once while it
/// waits for memory (the program may hold it until it ends).
fn waited_too_long(start: u64) -> bool {
    let waited_ms = (sys::thread::monotonic_ns() - start) / 1_000_000;
    let symbolizing = PHASE.load(Ordering::Acquire) == SYMBOLIZING;
    sys::alloc::patient_is_waiting() || waited_ms >= DRAIN_SYMBOLIZING_MS || (waited_ms >= DRAIN_MS && !symbolizing)
}

/// Writes the `race_count` lines of races seen more than once (JSON reports), once per process.
fn write_counts() {
    static WRITTEN_BY: AtomicI32 = AtomicI32::new(0);
    if unable_to_print() {
        return;
    }
    let pid = sys::thread::getpid();
    if WRITTEN_BY.swap(pid, Ordering::AcqRel) == pid {
        return;
    }
    let Some(guard) = state() else { return };
    let counts = guard.as_ref().map(Reporter::counts).unwrap_or_default();
    drop(guard);
    if !counts.is_empty() {
        log::write(&counts);
    }
}

/// Waits until the reporter thread has printed everything queued so far, without ending it: bounded
/// like [`shutdown`] (about a second, up to five while it reads debug info). Call once no new race can
/// be queued (sampling stopped, watch windows closed). Without a reporter thread, drains here.
pub fn settle() {
    wake_for_queue();
    if THREAD.load(Ordering::Acquire) == 0 {
        if !unable_to_print() {
            drain();
        }
        return;
    }
    let start = sys::thread::monotonic_ns();
    // Empty queue first, then idle: every event leaves the queue while BUSY is set, so a reporter that
    // is idle after the queue was seen empty has handled all of them.
    while !queue::is_empty() || BUSY.load(Ordering::SeqCst) {
        if waited_too_long(start) {
            return;
        }
        sys::wake::notify();
        sys::thread::sleep_us(1000);
    }
}

/// In a forked child: the parent's reporter thread does not exist here; abandon its state (its lock
/// may be held) so that the child's own detector starts a fresh reporter.
pub fn forget_after_fork() {
    STATE.store(std::ptr::null_mut(), Ordering::Release);
    REPORTED.store(std::ptr::null_mut(), Ordering::Release);
    BUSY.store(false, Ordering::SeqCst);
    ABANDONED.store(false, Ordering::Release);
    THREAD.store(0, Ordering::Release);
    REPORTER_TID.store(0, Ordering::Release);
    STOP.store(false, Ordering::Release);
    RESTING.store(false, Ordering::Release);
    CONTROL.store(false, Ordering::Release);
    CONTROL_HOLDER.store(0, Ordering::Release);
    sys::fd::forget_private_table();
}

/// The name (`comm`) of thread `tid` of this process, while it runs.
fn comm(tid: i32) -> Option<String> {
    if tid <= 0 {
        return None;
    }
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_string()).filter(|name| !name.is_empty())
}

/// The path of a test's function in a libtest harness, from a frame's function name:
/// `my_crate::tests::races::{{closure}}` is `tests::races` (the crate's name and closures left out).
fn test_path(function: &str) -> Option<String> {
    let name = racewatch_instrument::symbols::without_generics(function);
    if name.starts_with('<') {
        return None;
    }
    let mut segments: Vec<&str> = name.split("::").collect();
    while segments.last().is_some_and(|s| s.starts_with("{closure") || s.starts_with("{{closure")) {
        segments.pop();
    }
    (segments.len() >= 2).then(|| segments[1..].join("::"))
}

/// The paths in a symbol that contain `name`: the symbol itself, or a type argument of it. In a
/// release build the test's function is inlined into libtest's runner and only such symbols
/// (`core::ptr::drop_in_place<my_crate::races::{{closure}}>`) still name it.
fn paths_naming<'a>(symbol: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    let in_path = |c: char| c.is_alphanumeric() || matches!(c, '_' | ':' | '{' | '}' | '#');
    symbol.match_indices(name).map(move |(at, _)| {
        let start = symbol[..at].rfind(|c: char| !in_path(c)).map_or(0, |i| i + 1);
        let end = symbol[at..].find(|c: char| !in_path(c)).map_or(symbol.len(), |i| at + i);
        &symbol[start..end]
    })
}

/// A bare (inlined, line-tables-only) function name without generics and closures: `races` for
/// `races<u8>`, `` for `{closure#0}`.
fn bare_name(function: &str) -> String {
    let name = racewatch_instrument::symbols::without_generics(function);
    if name.starts_with('{') {
        String::new()
    } else {
        name
    }
}

/// Whether `addr` lies in the main thread's stack mapping (`[stack]` in `/proc/self/maps`).
fn in_main_stack_mapping(addr: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return false };
    maps.lines().filter(|l| l.ends_with("[stack]")).any(|line| {
        let range = line.split_whitespace().next().unwrap_or("");
        let Some((lo, hi)) = range.split_once('-') else { return false };
        let parse = |h: &str| u64::from_str_radix(h, 16).ok();
        matches!((parse(lo), parse(hi)), (Some(lo), Some(hi)) if (lo..hi).contains(&addr))
    })
}

/// Whether the debug info places the access in `core::sync::atomic`: an atomic whose `sanmd_atomics2`
/// tag an optimisation lost (two relaxed loads merged into one plain `mov`, as in `Arc::downgrade`'s
/// compare-exchange loop), like `racewatch verify`'s notes (see
/// `racewatch_instrument::tags::is_core_atomic_access`). A line borrowed from a neighbouring
/// instruction (`~`) is not the access's own and never counts.
/// Also an access the standard library's own atomics order
/// (`racewatch_instrument::tags::is_library_ordered_access`: libstdc++'s last `shared_ptr` release).
fn is_core_atomic(stack: &[Frame]) -> bool {
    let Some(first) = stack.first().filter(|f| f.elided == 0) else { return false };
    let line = if first.line_approximate { 0 } else { first.line.unwrap_or(0) };
    let caller = stack.get(1).filter(|_| first.inlined);
    let innermost = racewatch_instrument::tags::Innermost {
        file: first.file.as_deref(),
        line,
        function: first.function.as_deref(),
        inlined: first.inlined,
        caller_file: caller.and_then(|c| c.file.as_deref()),
        caller_line: caller.and_then(|c| c.line).unwrap_or(0),
    };
    racewatch_instrument::tags::is_core_atomic_access(&innermost)
        || racewatch_instrument::tags::is_library_ordered_access(&innermost)
}

/// The standard library's volatile accesses, by the innermost frame's function.
const VOLATILE_FUNCTIONS: [&str; 7] = [
    "read_volatile",
    "write_volatile",
    "volatile_load",
    "volatile_store",
    "volatile_copy_memory",
    "volatile_copy_nonoverlapping_memory",
    "volatile_set_memory",
];

/// Whether the access is a volatile one (`ptr::read_volatile`, `write_volatile` and the intrinsics
/// under them, by its innermost frame at its own line) that a dependency makes (the first frame past the
/// standard library is in a crate outside the workspace). A race between two such accesses is one the
/// dependency's authors made on purpose and marked (crossbeam-deque's `Buffer::read` and `write`: a task
/// read while the owner overwrites its slot is thrown away when the steal's compare-exchange fails).
fn is_dependency_volatile(stack: &[Frame]) -> bool {
    let Some(first) = stack.first().filter(|f| f.elided == 0 && !f.line_approximate) else { return false };
    let name = first.function.as_deref().map(racewatch_instrument::frames::base_name).unwrap_or("");
    racewatch_instrument::frames::in_std(first)
        && VOLATILE_FUNCTIONS.contains(&name)
        && report::summary_frame(stack).is_some_and(|f| racewatch_instrument::frames::dependency_crate(f).is_some())
}

/// Whether the access's own frame (innermost, inlined included) is in atomic inline-assembly code: a
/// built-in rule (`racewatch_instrument::tags::ASM_ATOMIC_CODE`) or one of the user's `atomic_code`
/// `patterns`. Not for an approximate line: that is a neighbouring instruction's (a plain load next to
/// an inlined `ck_pr` primitive).
fn is_atomic_code(stack: &[Frame], patterns: &[String]) -> bool {
    let Some(frame) = stack.first().filter(|f| !f.line_approximate) else { return false };
    let file = frame.file.as_deref().unwrap_or("");
    let function = frame.function.as_deref().unwrap_or("");
    racewatch_instrument::tags::is_asm_atomic_file(file)
        || patterns.iter().any(|p| file.contains(p.as_str()) || function.contains(p.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_code_rules_judge_the_access_own_exact_line() {
        let at = |file: &str, approximate: bool| Frame {
            function: Some("ck_stack_pop_mpmc".into()),
            file: Some(file.into()),
            line: Some(527),
            line_approximate: approximate,
            ..Frame::default()
        };
        let ck = "../../include/gcc/x86_64/ck_pr.h";
        assert!(is_atomic_code(&[at(ck, false)], &[]));
        // A line borrowed from the neighbouring instruction says nothing about this one.
        assert!(!is_atomic_code(&[at(ck, true)], &[]));
        assert!(!is_atomic_code(&[at("include/ck_stack.h", false)], &[]));
        assert!(is_atomic_code(&[at("include/ck_stack.h", false)], &["pop_mpmc".to_string()]));
        assert!(!is_atomic_code(&[], &[]));
    }

    #[test]
    fn volatile_accesses_of_dependencies_are_known_by_their_frames() {
        let ptr = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/ptr/mod.rs";
        let frame = |function: &str, file: &str, approximate: bool| Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(2091),
            line_approximate: approximate,
            inlined: true,
            ..Frame::default()
        };
        let deque = "/root/.cargo/registry/src/index.crates.io-1/crossbeam-deque-0.8.1/src/deque.rs";
        let read = [
            frame("core::ptr::read_volatile<core::mem::maybe_uninit::MaybeUninit<u64>>", ptr, false),
            frame("crossbeam_deque::deque::Buffer<T>::read", deque, false),
        ];
        assert!(is_dependency_volatile(&read));
        let write = [frame("core::ptr::write_volatile<u64>", ptr, false), read[1].clone()];
        assert!(is_dependency_volatile(&write));
        // The program's own volatile accesses, a neighbour's line, the crate's plain access, a function
        // named alike, a plain library access: not.
        let own = [read[0].clone(), frame("app::bump", "src/main.rs", false)];
        assert!(!is_dependency_volatile(&own));
        assert!(!is_dependency_volatile(&[frame("core::ptr::read_volatile<u64>", ptr, true), read[1].clone()]));
        assert!(!is_dependency_volatile(&read[1..]));
        assert!(!is_dependency_volatile(&[frame("dep::read_volatile", deque, false)]));
        assert!(!is_dependency_volatile(&[frame("core::ptr::read<u64>", ptr, false), read[1].clone()]));
        assert!(!is_dependency_volatile(&[]));
    }

    #[test]
    fn accesses_that_the_debug_info_places_in_core_sync_atomic_are_atomic() {
        let atomic = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/sync/atomic.rs";
        let sync = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/alloc/src/sync.rs";
        let frame = |function: &str, file: &str, line: u32, inlined: bool| Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(line),
            inlined,
            ..Frame::default()
        };
        // Arc::downgrade's merged relaxed load: `atomic_load` inlined through `load` into `downgrade`.
        let load = vec![
            frame("atomic_load<usize>", atomic, 3890, true),
            frame("load", atomic, 2844, true),
            frame("downgrade<u64, alloc::alloc::Global>", sync, 0, true),
            frame("clean_arc_downgrade::downgrade", "demos/src/bin/clean_arc_downgrade.rs", 12, false),
        ];
        assert!(is_core_atomic(&load));
        // Its line borrowed from a neighbour (the PC's own is 0) says nothing...
        let mut borrowed = load.clone();
        borrowed[0].line_approximate = true;
        borrowed[0].inlined = false;
        assert!(!is_core_atomic(&borrowed));
        // ...but line 0 inside a function that atomic.rs code inlined is still the atomic.
        let mut merged = load.clone();
        merged[0].line = None;
        assert!(is_core_atomic(&merged));
        // Line 0 in `downgrade` itself (the scope of two merged loads), or a borrowed line of it: plain.
        let outer = load[2..].to_vec();
        assert!(!is_core_atomic(&outer));
        // A plain `ptr::write` is not atomic, nor is an access of the program's own code.
        assert!(!is_core_atomic(&[frame("write<u64>", "/rustc/x/library/core/src/ptr/mod.rs", 1600, false)]));
        assert!(!is_core_atomic(&load[3..]));
        assert!(!is_core_atomic(&[]));
    }

    #[test]
    fn a_test_inlined_away_is_still_named_by_the_symbols_of_its_closures() {
        let symbol = "core::ptr::drop_in_place<std::thread::spawn<racy::tests::races::{{closure}},()>::{{closure}}>";
        let paths: Vec<Option<String>> = paths_naming(symbol, "tests::races").map(test_path).collect();
        assert_eq!(paths, [Some("tests::races".to_string())]);
        assert_eq!(paths_naming("racy::tests::races", "tests::ra").collect::<Vec<_>>(), ["racy::tests::races"]);
        assert_eq!(paths_naming("racy::other", "tests::ra").count(), 0);
    }

    #[test]
    fn test_paths_come_from_function_names_without_crate_and_closures() {
        assert_eq!(test_path("racy::tests::races::{{closure}}").as_deref(), Some("tests::races"));
        assert_eq!(test_path("racy::tests::races::{closure#0}<u8>").as_deref(), Some("tests::races"));
        assert_eq!(test_path("racy::races").as_deref(), Some("races"));
        assert_eq!(test_path("races"), None);
        assert_eq!(test_path("<alloc::sync::Arc<T> as core::clone::Clone>::clone"), None);
    }
}
