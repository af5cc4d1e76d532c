//! Exported C symbols: the constructor, the exit hook and the
//! `__sanitizer_metadata_{covered,atomics}_{add,del}` callbacks (the libc
//! functions racewatch interposes are in [`crate::intercept`]).
//!
//! The constructor only indexes: the detector itself starts at the program's
//! second thread ([`crate::detector`]).
//!
//! Instrumented modules call the callbacks from their constructors, which can
//! run before ours (dependencies are initialised first). Until our constructor
//! has run, calls are kept in a fixed-size static list and merged at init; a
//! table the module walk already found (same kind and start address) is
//! indexed once. After init, each call updates the registry directly: this is
//! how `dlopen`ed libraries and JIT'd code (which has no file) get indexed.

use crate::log;
use crate::modules;
use crate::options;
use crate::registry::{self, Entries, ModuleId, Registry, TableKey};
use crate::stats::{self, Counter};
use crate::{detector, reporter, sampler, sys};
use racewatch_instrument::format::pcsections::{TableKind, Version};
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

/// How many callback calls before init are remembered (each instrumented
/// module makes two); the rest are found by the module walk.
const PENDING_CAPACITY: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    add: bool,
    kind: TableKind,
    version: u32,
    start: u64,
    end: u64,
}

struct Pending {
    ready: bool,
    len: usize,
    dropped: usize,
    calls: [Call; PENDING_CAPACITY],
}

const NO_CALL: Call = Call { add: false, kind: TableKind::Covered, version: 0, start: 0, end: 0 };
static PENDING: spin::Mutex<Pending> =
    spin::Mutex::new(Pending { ready: false, len: 0, dropped: 0, calls: [NO_CALL; PENDING_CAPACITY] });

/// The library constructor.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = racewatch_init;

/// The library destructor (runs at `exit`).
#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static DESTRUCTOR: extern "C" fn() = racewatch_fini;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn racewatch_init() {
    guarded(init);
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn racewatch_fini() {
    guarded(detector::at_exit);
}

/// Runs `f`, never letting a panic unwind into C.
fn guarded(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        log::warn(format_args!("internal error (panic) in the runtime; continuing without it"));
    }
}

#[cfg_attr(test, allow(dead_code))]
fn init() {
    // Before racewatch calls anything a library the program brings could wrap.
    sys::own_imports::bind_to_libc();
    // First of what registers: its fork handlers must run last before a fork and first after it.
    sys::heap::guard_forks();
    sys::real::resolve_all();
    crate::fd_view::note_own_module();
    sys::exec_list::set_targets(
        |path, argv, _| crate::intercept::execv(path, argv),
        |path, argv, envp| crate::intercept::execve(path, argv, envp),
        |file, argv, _| crate::intercept::execvp(file, argv),
    );
    detector::note_original_process();
    // Whose records these are, from the start: a `vfork` child's calls must never change them.
    sys::signal::note_process();
    detector::init_fork_handling();
    log::check_stderr();
    let secure = sys::secure_file::secure_execution();
    let opts = options::install(if secure { secure_options() } else { environment_options() });
    crate::exit_status::install();
    // Before any system call of racewatch's that a filter the process inherited might kill.
    let inherited_filter = sys::seccomp_probe::probe();
    if !matches!(inherited_filter, sys::seccomp_probe::Verdict::Killed { .. }) {
        // Asked once, now: a filter the program installs later may deny `uname` (seccomp_filter.rs).
        sys::identity::note_node_name();
    }
    if let Some(path) = &opts.log_path {
        let host = opts.host.clone().or_else(sys::identity::node_name).unwrap_or_else(|| "unknown".into());
        log::set_log_path(path, &host);
    }
    if !secure {
        warn_if_preloaded_without_interposers();
    }
    // Read: they were the loader's and the options', not the program's. Only where the `exec`
    // interposers hand them on to children.
    if cfg!(feature = "preload") {
        sys::environ::hide_own();
    }
    match inherited_filter {
        sys::seccomp_probe::Verdict::Killed { call, signal } => {
            // Dormant from here: no index (reading the modules' tables is a system call too).
            detector::inherited_filter_kills(call, signal);
            return;
        }
        sys::seccomp_probe::Verdict::Unknown(errno) if opts.verbosity >= 1 => log::line(format_args!(
            "a seccomp filter is in force and its probe could not run (errno {errno}): racewatch goes on"
        )),
        _ => {}
    }
    if cfg!(feature = "preload") {
        sys::region::close_gap_above_own_module();
        sys::region::place();
    }
    reporter::on_halt(halting);
    modules::main_path_without_proc();

    let mut announce = Announcements::default();
    {
        let mut reg = registry::lock();
        let code = modules::CodeRanges::now();
        for module in modules::walk() {
            let id = ModuleId { path: module.path.clone(), bias: module.bias };
            for s in &module.sections {
                let key = TableKey { kind: s.id.kind, start: s.addr };
                let Some(bytes) = modules::read_memory(s.addr, s.size) else { continue };
                register(&mut reg, key, s.id.version, &bytes, &id, &code);
            }
            announce.module(&reg, &id);
        }
        let (calls, dropped) = {
            let mut pending = PENDING.lock();
            pending.ready = true;
            let calls: Vec<Call> = pending.calls[..pending.len].to_vec();
            (calls, pending.dropped)
        };
        if dropped > 0 {
            log::warn(format_args!("{dropped} metadata callbacks before start-up were not kept"));
        }
        for call in calls {
            apply(&mut reg, call, &mut announce, &code);
        }
        reg.publish();
        if opts.verbosity >= 2 {
            registry::with_index(|i| {
                log::line(format_args!(
                    "index: {} covered functions, {} atomic PCs ({} outside covered functions), {} bytes",
                    i.functions(),
                    i.atomics(),
                    i.orphan_atomics(),
                    i.memory_bytes()
                ))
            });
        }
    }
    announce.print();
    if opts.coverage_path.is_some() {
        crate::profile::init(registry::with_index(|i| i.functions()));
    }
    detector::watch_fatal_signals();
    detector::prepare();
    // Last: the footprint racewatch added to the program's memory budgets is complete.
    sys::budget::init();
}

/// The options `RACEWATCH_OPTIONS` sets (bad ones warned about).
fn environment_options() -> options::Options {
    // `racewatch run` passes its merged options in a variable of its own, leaving the user's.
    let text =
        std::env::var("RACEWATCH_RUN_OPTIONS").or_else(|_| std::env::var("RACEWATCH_OPTIONS")).unwrap_or_default();
    let (parsed, warnings) = options::parse(&text);
    for w in &warnings {
        log::warn(format_args!("{w}"));
    }
    parsed
}

/// The options of a process in secure-execution mode (setuid, setgid, file capabilities): its
/// environment is its less privileged caller's, so `RACEWATCH_OPTIONS` is not read at all (no file it
/// names is created, written or read, no behaviour it asks for applies); the defaults, which write
/// nothing but reports on stderr. One line says so when the variable is set. The variable is removed
/// from the environment, so that a process the program execs once fully privileged does not get it.
fn secure_options() -> options::Options {
    let set = |var: &str| std::env::var_os(var).is_some_and(|text| !text.is_empty());
    if set("RACEWATCH_OPTIONS") || set("RACEWATCH_RUN_OPTIONS") {
        log::warn(format_args!(
            "secure execution (setuid, setgid or file capabilities): RACEWATCH_OPTIONS ignored, defaults used"
        ));
    }
    sys::secure_file::forget_caller_options();
    options::Options::DEFAULT
}

/// What `halt_on_error` leaves before it ends the process: what the process leaves at exit.
fn halting() {
    detector::write_profile();
    if options::get().stats {
        detector::print_stats();
    }
}

/// `cargo build` leaves the runtime crate's plain library at `target/*/libracewatch.so`, where users
/// look first; it has no interposers (no `pthread_create`), so preloaded it never starts the detector.
/// Say so once, naming the file to use, when this build is the one `LD_PRELOAD` names.
fn warn_if_preloaded_without_interposers() {
    if cfg!(feature = "preload") {
        return;
    }
    let here = warn_if_preloaded_without_interposers as *const () as u64;
    let Some(own) = modules::module_of(here).and_then(|m| std::fs::canonicalize(m.path).ok()) else { return };
    let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    let named = preload
        .split([' ', ':'])
        .filter(|entry| !entry.is_empty())
        .any(|entry| std::fs::canonicalize(entry).is_ok_and(|path| path == own));
    if named {
        log::warn(format_args!(
            "{} is the runtime crate's plain build, without the interposers the detector starts from: it \
             indexes but never samples; preload the file `racewatch runtime-path` prints, or use `racewatch run`",
            own.display()
        ));
    }
}

/// Modules to report with `verbosity=1`, in order, once each.
#[derive(Default)]
struct Announcements {
    lines: Vec<registry::ModuleCounts>,
}

impl Announcements {
    fn module(&mut self, reg: &Registry, id: &ModuleId) {
        let counts = reg.counts(id);
        if reg.keys_of(id).is_empty() {
            return;
        }
        match self.lines.iter_mut().find(|c| &c.module == id) {
            Some(existing) => *existing = counts,
            None => self.lines.push(counts),
        }
    }

    fn print(self) {
        if options::get().verbosity == 0 {
            return;
        }
        for c in self.lines {
            log::line(format_args!(
                "indexed {}: {} covered functions, {} atomic PCs",
                c.module.path, c.functions, c.atomics
            ));
        }
    }
}

/// Decodes and registers one table; warns (once, for this call) on malformed bytes or a table whose
/// declared PC-offset width fits neither it nor the other width; says once per process when a table
/// was decoded with the other width than it declares.
fn register(
    reg: &mut Registry,
    key: TableKey,
    version: Version,
    bytes: &[u8],
    module: &ModuleId,
    code: &modules::CodeRanges,
) -> bool {
    static WIDTH_NOTED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
    if reg.contains(key) {
        return false;
    }
    let entries = match Entries::decode_checked(key, version, bytes, &|start, len| code.contains(start, len)) {
        Ok((entries, note)) => {
            if let Some(note) = note {
                if !WIDTH_NOTED[usize::from(version.wide())].swap(true, Ordering::Relaxed) {
                    log::line(format_args!("{}: {note}", module.path));
                }
            }
            entries
        }
        Err(err) => {
            log::warn(format_args!("ignoring PC table of {}: {err}", module.path));
            return false;
        }
    };
    let first_of_module = reg.keys_of(module).is_empty();
    match &entries {
        Entries::Covered(v) => stats::add(Counter::CoveredFunctions, v.len() as u64),
        Entries::Atomics(v) => stats::add(Counter::AtomicPcs, v.len() as u64),
    }
    if first_of_module {
        stats::bump(Counter::ModulesIndexed);
    }
    reg.insert(key, module.clone(), entries)
}

/// Applies one callback to the registry (without publishing).
fn apply(reg: &mut Registry, call: Call, announce: &mut Announcements, code: &modules::CodeRanges) {
    let key = TableKey { kind: call.kind, start: call.start };
    if !call.add {
        if let Some(removed) = reg.remove(key) {
            announce.lines.retain(|c| c.module != removed.module || !removed.module_gone);
            if removed.module_gone && options::get().verbosity >= 1 {
                log::line(format_args!("unindexed {}", removed.module.path));
            }
        }
        return;
    }
    if reg.contains(key) {
        return;
    }
    let name = format!("__sanitizer_metadata_{}_add", call.kind.name());
    let Ok(version) = Version::from_raw(call.version) else {
        log::warn(format_args!("{name}: unsupported version {:#x}; table ignored", call.version));
        return;
    };
    if call.start == 0 && call.end == 0 {
        // A module constructor whose `__start_`/`__stop_` symbols resolved to nothing: the linker
        // dropped the sections, or there was nothing to put in one. JITLink drops them (nothing
        // references them): said once per process, for the covered table, which every instrumented
        // module has. An empty atomics table is a module without atomic accesses (a C++ program whose
        // atomics all sit in uncovered library code, set 37 p59): nothing to say.
        static SAID: AtomicBool = AtomicBool::new(false);
        if call.kind == TableKind::Covered && !SAID.swap(true, Ordering::Relaxed) {
            log::warn(format_args!(
                "{name}: range 0x0..0x0: the JIT linker dropped this module's sanmd_* tables (stock lli, or an \
                 ORC JIT without racewatch's plugin), so its code is never watched; add racewatch's ORC plugin \
                 (orc/include/racewatch/orc.h) to the JIT's ObjectLinkingLayer"
            ));
        }
        return;
    }
    if call.end < call.start || call.start == 0 {
        log::warn(format_args!("{name}: bad range {:#x}..{:#x}; table ignored", call.start, call.end));
        return;
    }
    let Some(bytes) = modules::read_memory(call.start, call.end - call.start) else {
        log::warn(format_args!("{name}: unreadable table at {:#x}; table ignored", call.start));
        return;
    };
    let found = modules::containing(call.start);
    let id = match &found {
        Some(m) => ModuleId { path: m.path.clone(), bias: m.bias },
        None => {
            let base = modules::mapping_start(call.start).unwrap_or(call.start);
            ModuleId { path: format!("<anonymous {base:#x}>"), bias: base }
        }
    };
    if !register(reg, key, version, &bytes, &id, code) {
        return;
    }
    // Announce once every table the module's file lists has arrived (a module's
    // constructors register its covered and atomics tables one after the other).
    let expected: Vec<TableKey> = found
        .map(|m| m.sections.iter().map(|s| TableKey { kind: s.id.kind, start: s.addr }).collect())
        .unwrap_or_default();
    let have = reg.keys_of(&id);
    if !expected.contains(&key) || expected.iter().all(|k| have.contains(k)) {
        announce.module(reg, &id);
    }
}

/// Handles a callback: queued before init, applied and published after.
fn callback(call: Call) {
    if detector::is_sandboxed() || sys::confined::here() {
        return; // A seccomp filter may kill any syscall the index update would make.
    }
    if !call.add && detector::is_exiting() {
        return; // A destructor at exit: nothing is unmapped (see `detector::is_exiting`).
    }
    {
        let mut pending = PENDING.lock();
        if !pending.ready {
            if pending.len < PENDING_CAPACITY {
                let at = pending.len;
                pending.calls[at] = call;
                pending.len += 1;
            } else {
                pending.dropped += 1;
            }
            return;
        }
    }
    guarded(|| {
        let mut announce = Announcements::default();
        {
            let mut reg = registry::lock();
            let code = if call.add { modules::CodeRanges::now() } else { modules::CodeRanges::default() };
            apply(&mut reg, call, &mut announce, &code);
            reg.publish();
        }
        announce.print();
        // Start the detector if covered code appeared while threads run; switch sampling on or off.
        if call.add {
            detector::covered_code_arrived();
        } else {
            sampler::refresh();
        }
    });
}

fn call(add: bool, kind: TableKind, version: u32, start: *const c_char, end: *const c_char) {
    callback(Call { add, kind, version, start: start as u64, end: end as u64 });
}

/// Called by an instrumented module's constructor with its `sanmd_covered` table.
#[no_mangle]
pub extern "C" fn __sanitizer_metadata_covered_add(version: u32, start: *const c_char, end: *const c_char) {
    call(true, TableKind::Covered, version, start, end);
}

/// Called by an instrumented module's destructor: its `sanmd_covered` table goes away.
#[no_mangle]
pub extern "C" fn __sanitizer_metadata_covered_del(version: u32, start: *const c_char, end: *const c_char) {
    call(false, TableKind::Covered, version, start, end);
}

/// Called by an instrumented module's constructor with its `sanmd_atomics` table.
#[no_mangle]
pub extern "C" fn __sanitizer_metadata_atomics_add(version: u32, start: *const c_char, end: *const c_char) {
    call(true, TableKind::Atomics, version, start, end);
}

/// Called by an instrumented module's destructor: its `sanmd_atomics` table goes away.
#[no_mangle]
pub extern "C" fn __sanitizer_metadata_atomics_del(version: u32, start: *const c_char, end: *const c_char) {
    call(false, TableKind::Atomics, version, start, end);
}

/// Called by racewatch's ORC plugin (orc/include/racewatch/orc.h) for each named symbol of a linked
/// object: `[start, end)` is `name` (copied), code when bit 0 of `flags` is set, else data. Reports name
/// JIT'd functions and globals from these when the JIT registers no debug objects.
#[no_mangle]
pub extern "C" fn __racewatch_jit_symbol_add(start: u64, end: u64, name: *const c_char, flags: u32) {
    guarded(|| {
        let Some(name) = crate::jit::c_string_at(name as u64) else { return };
        crate::jit::add_symbol(crate::jit::JitSymbol { start, end: end.max(start), name, code: flags & 1 != 0 });
    });
}

/// Called by racewatch's ORC plugin when an object's resources are removed: forgets every symbol
/// starting in `[start, end)`.
#[no_mangle]
pub extern "C" fn __racewatch_jit_symbols_del(start: u64, end: u64) {
    guarded(|| crate::jit::remove_symbols(start, end));
}

/// Test and tooling hook: the index's verdict on `pc` — 0 uncovered, 1 plain, 2 atomic.
#[no_mangle]
pub extern "C" fn __racewatch_classify(pc: u64) -> i32 {
    match registry::with_index(|i| i.classify(pc)) {
        crate::index::Access::Uncovered => 0,
        crate::index::Access::Plain => 1,
        crate::index::Access::Atomic => 2,
    }
}
