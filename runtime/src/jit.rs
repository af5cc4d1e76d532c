//! JIT'd code, named: what a report can say about PCs and globals that no loaded module holds.
//!
//! Three sources, best first:
//!
//! - the objects a JIT registered through the GDB JIT interface (`__jit_debug_descriptor`, looked up
//!   with `dlsym(RTLD_DEFAULT)`: LLVM's ORC debugger support, `llvm::orc::enableDebuggerSupport`,
//!   registers each linked object with its DWARF): function, file and line, inlined frames, globals;
//! - the symbol list racewatch's ORC plugin hands over (`__racewatch_jit_symbol_add`): names of
//!   functions and globals;
//! - a perf map (`/tmp/perf-<pid>.map`, written by JITs for `perf`): names of functions.
//!
//! Everything here runs on the reporter thread (or the JIT's own thread, for the symbol list), never in
//! a signal handler: the descriptor's list is walked, and objects copied, with non-faulting reads
//! (`process_vm_readv`), since the JIT may change the list meanwhile.

use crate::modules;
use racewatch_instrument::jit_object::{self, JitObject};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Mutex;

/// A symbol of JIT'd code handed over by racewatch's ORC plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitSymbol {
    pub start: u64,
    /// Its end (`start` for a symbol of unknown size).
    pub end: u64,
    pub name: String,
    /// In executable memory (a function), else data (a global).
    pub code: bool,
}

impl JitSymbol {
    fn holds(&self, addr: u64) -> bool {
        addr == self.start || (self.start..self.end).contains(&addr)
    }
}

/// The symbols handed over, sorted by start.
static SYMBOLS: Mutex<Vec<JitSymbol>> = Mutex::new(Vec::new());

fn symbols() -> std::sync::MutexGuard<'static, Vec<JitSymbol>> {
    SYMBOLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Adds a symbol (`__racewatch_jit_symbol_add`); one already known at the same start is replaced.
pub fn add_symbol(symbol: JitSymbol) {
    let mut all = symbols();
    let at = all.partition_point(|s| s.start < symbol.start);
    match all.get_mut(at) {
        Some(same) if same.start == symbol.start && same.code == symbol.code => *same = symbol,
        _ => all.insert(at, symbol),
    }
}

/// Functions removed while run-time coverage counts (their names are still wanted at exit), latest last.
static RETIRED: Mutex<Vec<JitSymbol>> = Mutex::new(Vec::new());
/// Retired functions remembered at most.
const RETIRED_CAPACITY: usize = 1 << 16;

/// Forgets every symbol starting in `[start, end)` (`__racewatch_jit_symbols_del`); with run-time
/// coverage on, the functions' names are kept for the profile.
pub fn remove_symbols(start: u64, end: u64) {
    let mut removed = Vec::new();
    symbols().retain(|s| {
        let gone = (start..end).contains(&s.start);
        if gone && s.code {
            removed.push(s.clone());
        }
        !gone
    });
    if crate::profile::is_on() && !removed.is_empty() {
        let mut retired = RETIRED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let room = RETIRED_CAPACITY.saturating_sub(retired.len());
        retired.extend(removed.into_iter().take(room));
    }
}

/// The name of the JIT'd function starting at `start`: handed over and still there, else removed
/// while coverage counted (the latest).
pub fn function_named_at(start: u64) -> Option<String> {
    let live = symbols().iter().find(|s| s.code && s.start == start).map(|s| s.name.clone());
    live.or_else(|| {
        let retired = RETIRED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        retired.iter().rev().find(|s| s.start == start).map(|s| s.name.clone())
    })
}

/// The symbol handed over that holds `addr`, a function's (`code`) or a global's.
pub fn symbol_at(addr: u64, code: bool) -> Option<JitSymbol> {
    let all = symbols();
    let end = all.partition_point(|s| s.start <= addr);
    all[..end].iter().rev().take(8).find(|s| s.code == code && s.holds(addr)).cloned()
}

/// Every function handed over, sorted by start.
pub fn functions() -> Vec<JitSymbol> {
    symbols().iter().filter(|s| s.code).cloned().collect()
}

/// The NUL-terminated string at `addr` (at most 4 KiB, read without faulting; invalid UTF-8 replaced).
pub fn c_string_at(addr: u64) -> Option<String> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 256];
    while bytes.len() < 4096 {
        let n = crate::sys::mem::read_into(addr.checked_add(bytes.len() as u64)?, &mut chunk);
        if n == 0 {
            return None;
        }
        if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&chunk[..end]);
            return Some(String::from_utf8_lossy(&bytes).into_owned());
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    None
}

/// The `(address, size)` of each object the GDB JIT interface whose descriptor is at `descriptor` lists
/// now, in list order.
pub fn registered_objects(descriptor: u64) -> Vec<(u64, u64)> {
    const MAX_ENTRIES: usize = 1 << 16;
    // struct jit_descriptor { u32 version; u32 action_flag; entry *relevant_entry; entry *first_entry; }
    let Some(mut entry) = crate::sys::mem::read_u64(descriptor + 16) else { return Vec::new() };
    let mut out = Vec::new();
    // struct jit_code_entry { entry *next; entry *prev; const char *symfile_addr; u64 symfile_size; }
    while entry != 0 && out.len() < MAX_ENTRIES {
        let Some(bytes) = modules::read_memory(entry, 32) else { break };
        let field = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        out.push((field(2), field(3)));
        entry = field(0);
    }
    out
}

/// Where `__jit_debug_descriptor` is: in the dynamic symbol tables (`dlsym(RTLD_DEFAULT)`: a JIT using
/// libLLVM.so), else, when `search_executable`, in the executable's own symbol table (LLVM linked in
/// statically: its symbols are not exported).
fn find_descriptor(search_executable: bool) -> Option<u64> {
    const NAME: &str = "__jit_debug_descriptor";
    if let Some(addr) = crate::sys::dl::global_symbol(c"__jit_debug_descriptor") {
        return Some(addr);
    }
    if !search_executable {
        return None;
    }
    let exe = modules::main_program_path()?;
    let module = modules::all().into_iter().find(|m| std::path::Path::new(&m.path) == exe)?;
    let bytes = crate::sys::fd::read_file(&exe).ok()?;
    let file = racewatch_instrument::elf::Module::from_bytes(&exe, bytes).ok()?;
    let symbol = file.objects.iter().find(|o| o.raw_name == NAME)?;
    Some(symbol.address.wrapping_add(module.bias))
}

/// The JIT's objects read so far (by address and size) and the perf map: a cache for one symbolizer.
#[derive(Default)]
pub struct JitObjects {
    /// The GDB JIT interface's descriptor, once found.
    descriptor: Option<u64>,
    /// The executable's symbol table was searched for it (once).
    searched_executable: bool,
    cache: HashMap<(u64, u64), Option<Rc<JitObject>>>,
    /// The objects listed at the last walk, in list order.
    live: Vec<Rc<JitObject>>,
    perf_map: PerfMap,
}

impl JitObjects {
    /// Walks the GDB JIT interface's list again, reading objects not seen before.
    fn refresh(&mut self) {
        if self.descriptor.is_none() {
            self.descriptor = find_descriptor(!self.searched_executable);
            self.searched_executable = true;
        }
        let listed = self.descriptor.map(registered_objects).unwrap_or_default();
        self.live.clear();
        for key in &listed {
            let object = self.cache.entry(*key).or_insert_with(|| {
                let (addr, size) = *key;
                let bytes = modules::read_memory(addr, size.min(1 << 28))?;
                jit_object::read(&format!("<jit object {addr:#x}>"), &bytes).map(Rc::new)
            });
            if let Some(object) = object {
                self.live.push(object.clone());
            }
        }
        // Objects no longer listed are gone (their memory may hold other code now).
        self.cache.retain(|key, _| listed.contains(key));
    }

    /// The registered object whose code holds `pc`.
    pub fn with_code_at(&mut self, pc: u64) -> Option<Rc<JitObject>> {
        self.refresh();
        self.live.iter().find(|o| o.has_code_at(pc)).cloned()
    }

    /// The registered object whose sections (code or data) hold `addr`.
    pub fn holding(&mut self, addr: u64) -> Option<Rc<JitObject>> {
        self.refresh();
        self.live.iter().find(|o| o.holds(addr)).cloned()
    }

    /// The function of `/tmp/perf-<pid>.map` holding `pc`.
    pub fn perf_map_name(&mut self, pc: u64) -> Option<String> {
        self.perf_map.name_at(pc)
    }
}

/// `/tmp/perf-<pid>.map`: `START SIZE NAME` per line, in hex; read again when it grew.
#[derive(Default)]
struct PerfMap {
    read_len: u64,
    /// (start, end, name), sorted by start.
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    fn name_at(&mut self, pc: u64) -> Option<String> {
        let path = format!("/tmp/perf-{}.map", std::process::id());
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        if len != self.read_len {
            self.read_len = len;
            self.entries = std::fs::read_to_string(&path).map(|text| parse_perf_map(&text)).unwrap_or_default();
        }
        let end = self.entries.partition_point(|e| e.0 <= pc);
        // Later lines win: a JIT that reuses memory appends the new code's line.
        self.entries[..end].iter().rev().find(|e| (e.0..e.1).contains(&pc)).map(|e| e.2.clone())
    }
}

fn parse_perf_map(text: &str) -> Vec<(u64, u64, String)> {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let mut entries: Vec<(u64, u64, String)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ' ');
            let start = hex(parts.next()?)?;
            let size = hex(parts.next()?)?;
            let name = parts.next()?.trim();
            (!name.is_empty()).then(|| (start, start.saturating_add(size.max(1)), name.to_string()))
        })
        .collect();
    entries.sort_by_key(|e| e.0);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_added_found_and_removed() {
        add_symbol(JitSymbol { start: 0x9000_1000, end: 0x9000_1040, name: "f".into(), code: true });
        add_symbol(JitSymbol { start: 0x9000_2000, end: 0x9000_2008, name: "g".into(), code: false });
        add_symbol(JitSymbol { start: 0x9000_1040, end: 0x9000_1040, name: "h".into(), code: true });
        assert_eq!(symbol_at(0x9000_103f, true).map(|s| s.name), Some("f".into()));
        assert_eq!(symbol_at(0x9000_1040, true).map(|s| s.name), Some("h".into()));
        assert_eq!(symbol_at(0x9000_1041, true), None);
        assert_eq!(symbol_at(0x9000_2004, false).map(|s| s.name), Some("g".into()));
        assert_eq!(symbol_at(0x9000_2004, true), None);
        remove_symbols(0x9000_1000, 0x9000_2000);
        assert_eq!(symbol_at(0x9000_1010, true), None);
        assert!(symbol_at(0x9000_2000, false).is_some());
        remove_symbols(0x9000_0000, 0x9000_3000);
    }

    #[test]
    fn c_strings_are_read_without_faulting() {
        let text = c"racy_bump";
        assert_eq!(c_string_at(text.as_ptr() as u64).as_deref(), Some("racy_bump"));
        assert_eq!(c_string_at(8), None);
    }

    #[test]
    fn perf_map_lines() {
        let entries = parse_perf_map("7f0000001000 40 jit_fn\n0x7f0000002000 0x10 other fn\nbad line\n");
        assert_eq!(entries[0], (0x7f00_0000_1000, 0x7f00_0000_1040, "jit_fn".to_string()));
        assert_eq!(entries[1], (0x7f00_0000_2000, 0x7f00_0000_2010, "other fn".to_string()));
        assert_eq!(entries.len(), 2);
    }

    #[test]
    fn no_descriptor_no_objects() {
        // The test binary has no GDB JIT interface.
        assert_eq!(find_descriptor(true), None);
        assert!(JitObjects::default().with_code_at(0x1000).is_none());
    }
}
