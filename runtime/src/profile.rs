//! Run-time coverage (`coverage_path=PREFIX`): where the detector actually looked.
//!
//! Per covered function, counted on the signal path: samples that landed in it, watches armed on its
//! accesses, watchpoint traps taken in it, and races reported with an access in it; per access PC,
//! the watches armed on it and the races reported there. Two fixed tables of atomics (open addressing keyed by the function's
//! start and by the PC), allocated once at start-up when the option is set: no allocation, no lock
//! on the signal path; a key that finds no free slot is counted as dropped.
//!
//! At exit the process writes `PREFIX.<pid>`, a line-oriented text file (see the README, "Run-time
//! coverage"): the modules with their build-id and path, then one `fn` line per function and one `pc`
//! line per watched access, at link-time addresses (run-time address minus load bias), so profiles of
//! many processes of the same binary can be matched and summed later (`racewatch coverage --profile`).

use crate::modules::{self, LoadedModule};
use crate::own_file::{NotWritten, OwnFile};
use crate::registry;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// What happened in a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A timer sample interrupted the thread in it.
    Sample = 0,
    /// A watchpoint was armed on one of its accesses.
    Watch = 1,
    /// A watchpoint trap was taken in it (another thread's access to a watched address).
    Trap = 2,
    /// A race report has an access in it.
    Race = 3,
}

const EVENTS: usize = 4;
/// The profile format's first line.
pub const MAGIC: &str = "racewatch-profile 1";
/// Slots a key may probe (the function table is at most half full while its functions are those
/// known at start-up, so this is rarely more than a few).
const PROBES: usize = 128;
/// Distinct watched access PCs remembered.
const ACCESS_SLOTS: usize = 1 << 16;

/// Fixed open-addressing table from a non-zero key to `N` counters.
struct CountTable<const N: usize> {
    keys: Box<[AtomicU64]>,
    counts: Box<[[AtomicU32; N]]>,
}

impl<const N: usize> CountTable<N> {
    fn with_slots(slots: usize) -> Self {
        let slots = slots.next_power_of_two();
        CountTable {
            keys: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            counts: (0..slots).map(|_| [const { AtomicU32::new(0) }; N]).collect(),
        }
    }

    /// Adds one to counter `which` of `key`; false when none of its [`PROBES`] slots is free.
    fn bump(&self, key: u64, which: usize) -> bool {
        let mask = self.keys.len() - 1;
        let start = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize;
        for i in 0..PROBES.min(self.keys.len()) {
            let slot = (start + i) & mask;
            // A plain load first: a full neighbourhood costs reads, not locked operations.
            let found = self.keys[slot].load(Ordering::Acquire);
            let ours = found == key
                || (found == 0
                    && match self.keys[slot].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => true,
                        Err(other) => other == key,
                    });
            if ours {
                self.counts[slot][which].fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    fn entries(&self) -> impl Iterator<Item = (u64, [u32; N])> + '_ {
        self.keys.iter().zip(self.counts.iter()).filter_map(|(key, counts)| {
            let key = key.load(Ordering::Acquire);
            (key != 0).then(|| (key, std::array::from_fn(|i| counts[i].load(Ordering::Relaxed))))
        })
    }

    fn reset(&self) {
        for counts in self.counts.iter() {
            for count in counts {
                count.store(0, Ordering::Relaxed);
            }
        }
    }
}

struct Tables {
    functions: CountTable<EVENTS>,
    /// Per access PC: watches armed, races reported.
    accesses: CountTable<2>,
    dropped: AtomicU64,
}

static TABLES: AtomicPtr<Tables> = AtomicPtr::new(std::ptr::null_mut());

fn tables() -> Option<&'static Tables> {
    crate::sys::ptr::leaked_ref(TABLES.load(Ordering::Acquire))
}

/// Allocates the tables for about `functions` covered functions (once; not for signal handlers).
pub fn init(functions: usize) {
    if tables().is_some() {
        return;
    }
    let tables = Tables {
        // At most half full while the covered functions are those known now.
        functions: CountTable::with_slots((functions * 2).max(1024)),
        accesses: CountTable::with_slots(ACCESS_SLOTS),
        dropped: AtomicU64::new(0),
    };
    TABLES.store(Box::leak(Box::new(tables)), Ordering::Release);
}

/// Whether run-time coverage is being counted.
pub fn is_on() -> bool {
    tables().is_some()
}

/// Counts `event` in the covered function starting at `function_start`. Async-signal-safe.
pub fn count(function_start: u64, event: Event) {
    if let Some(t) = tables() {
        if !t.functions.bump(function_start, event as usize) {
            t.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Counts a watch armed on the access at `pc`, for the PC and its function. Async-signal-safe.
pub fn count_watch(pc: u64) {
    let Some(t) = tables() else { return };
    if !t.accesses.bump(pc, 0) {
        t.dropped.fetch_add(1, Ordering::Relaxed);
    }
    count_at(pc, Event::Watch);
}

/// Counts a printed race report between the accesses at `a` and `b`: once for each of their
/// functions (once when both are in one) and once for each access PC. Not for signal handlers
/// (the reporter calls it).
pub fn count_race(a: u64, b: u64) {
    let Some(t) = tables() else { return };
    let pcs = [a, b];
    for pc in &pcs[..if a == b { 1 } else { 2 }] {
        if !t.accesses.bump(*pc, 1) {
            t.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
    let start = |pc| registry::with_index(|idx| idx.function_containing(pc).map(|f| f.start));
    let (fa, fb) = (start(a), start(b));
    for function in [fa, fb.filter(|f| Some(*f) != fa)].into_iter().flatten() {
        count(function, Event::Race);
    }
}

/// Counts `event` in the covered function containing `pc` (nothing outside covered code).
/// Async-signal-safe.
pub fn count_at(pc: u64, event: Event) {
    if is_on() {
        if let Some(function) = registry::with_index(|idx| idx.function_containing(pc)) {
            count(function.start, event);
        }
    }
}

/// The sum of one event's counts over all functions (tests compare it with `stats`).
pub fn total(event: Event) -> u64 {
    tables().map_or(0, |t| t.functions.entries().map(|(_, c)| u64::from(c[event as usize])).sum())
}

/// In a forked child: the parent's counts are not the child's.
pub fn reset_after_fork() {
    if let Some(t) = tables() {
        t.functions.reset();
        t.accesses.reset();
        t.dropped.store(0, Ordering::Relaxed);
    }
}

/// This process's profile file.
static FILE: OwnFile = OwnFile::new();

/// Writes `<prefix>.<pid>` (mode 0600; never a file this process did not create: see [`OwnFile`]);
/// `covered` lists the modules with covered code (path, as registered).
pub fn write(prefix: &str, covered: &[String]) -> Result<std::path::PathBuf, NotWritten> {
    let text = render(&modules::all(), covered);
    FILE.write(prefix, &text).map(std::path::PathBuf::from)
}

/// Before the process becomes the user `uid`: makes `<prefix>.<pid>` now and gives it to that user
/// ([`OwnFile::hand_to`], [`crate::handover`]).
pub fn hand_to(prefix: &str, uid: u32) {
    FILE.hand_to(prefix, uid);
}

fn render(loaded: &[LoadedModule], covered: &[String]) -> String {
    let mut out = format!("{MAGIC}\npid {}\n", std::process::id());
    let Some(t) = tables() else { return out };
    let _ = writeln!(out, "dropped {}", t.dropped.load(Ordering::Relaxed));
    for module in loaded {
        let functions: Vec<(u64, [u32; EVENTS])> =
            t.functions.entries().filter(|(start, _)| module.contains(*start)).collect();
        let accesses: Vec<(u64, [u32; 2])> = t.accesses.entries().filter(|(pc, _)| module.contains(*pc)).collect();
        if functions.is_empty() && accesses.is_empty() && !covered.contains(&module.path) {
            continue;
        }
        let build_id = if module.build_id.is_empty() { "-" } else { &module.build_id };
        let _ = writeln!(out, "module {build_id} {}", module.path);
        let mut functions = functions;
        functions.sort_unstable();
        for (start, [samples, watches, traps, races]) in functions {
            let _ = writeln!(out, "fn {:#x} {samples} {watches} {traps} {races}", start.wrapping_sub(module.bias));
        }
        let mut accesses = accesses;
        accesses.sort_unstable();
        for (pc, [watches, races]) in accesses {
            let _ = writeln!(out, "pc {:#x} {watches} {races}", pc.wrapping_sub(module.bias));
        }
    }
    // JIT'd code (no module holds it): run-time addresses, named from the symbols racewatch's ORC plugin
    // handed over (`-` when unknown).
    let in_module = |addr: u64| loaded.iter().any(|m| m.contains(addr));
    let mut functions: Vec<(u64, [u32; EVENTS])> =
        t.functions.entries().filter(|(start, _)| !in_module(*start)).collect();
    functions.sort_unstable();
    for (start, [samples, watches, traps, races]) in functions {
        let name = crate::jit::function_named_at(start).unwrap_or_else(|| "-".to_string());
        let _ = writeln!(out, "jitfn {start:#x} {samples} {watches} {traps} {races} {name}");
    }
    let mut accesses: Vec<(u64, [u32; 2])> = t.accesses.entries().filter(|(pc, _)| !in_module(*pc)).collect();
    accesses.sort_unstable();
    for (pc, [watches, races]) in accesses {
        let _ = writeln!(out, "jitpc {pc:#x} {watches} {races}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_counts_per_key_until_full() {
        let table = CountTable::<2>::with_slots(4);
        for key in 1..=4u64 {
            assert!(table.bump(key * 0x1000, 0));
        }
        assert!(table.bump(0x2000, 1));
        assert!(!table.bump(0x9000, 0), "a full table drops new keys");
        let mut entries: Vec<_> = table.entries().collect();
        entries.sort_unstable();
        assert_eq!(entries[1], (0x2000, [1, 1]));
        assert_eq!(entries.len(), 4);
        table.reset();
        assert!(table.entries().all(|(_, c)| c == [0, 0]));
    }
}
