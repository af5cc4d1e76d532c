//! The registered PC tables (from the module walk and the callbacks) and the
//! publication of the [`Index`] built from them.
//!
//! Readers ([`with_index`], signal handlers among them) never block or
//! allocate: the snapshot lives in a [`SnapshotCell`] (an atomic pointer with
//! a two-slot epoch reader count; the writer frees an old snapshot only after
//! its readers left). Writers (constructors, `dlopen`/`dlclose`) serialise on
//! the registry mutex.

use crate::index::{self, FunctionInfo, Index};
use crate::sys::snapshot::SnapshotCell;
use racewatch_instrument::format::pcsections::{DecodeError, IsCode, TableKind, Version, WidthError};
use std::borrow::Cow;
use std::sync::Mutex;

static EMPTY: Index = Index::empty();
static CURRENT: SnapshotCell<Index> = SnapshotCell::new(&EMPTY);

/// Runs `f` on the current index (an empty one before initialisation).
/// Lock-free, allocation-free, async-signal-safe; keep `f` short, the
/// snapshot it sees cannot be freed until it returns.
pub fn with_index<R>(f: impl FnOnce(&Index) -> R) -> R {
    CURRENT.read(f)
}

/// Replaces the published index; frees the previous one once no reader can hold it.
fn publish(index: Index) {
    CURRENT.replace(index);
}

/// Identifies a table: its kind and the run-time address of its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableKey {
    pub kind: TableKind,
    pub start: u64,
}

/// Decoded entries of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entries {
    Covered(Vec<FunctionInfo>),
    Atomics(Vec<u64>),
}

impl Entries {
    /// Decodes `bytes` (the table at run-time address `key.start`).
    pub fn decode(key: TableKey, version: Version, bytes: &[u8]) -> Result<Entries, DecodeError> {
        Ok(match key.kind {
            TableKind::Covered => Entries::Covered(index::decode_covered(bytes, key.start, version)?),
            TableKind::Atomics => Entries::Atomics(index::decode_atomics(bytes, key.start, version)?),
        })
    }

    /// Decodes `bytes` after checking that the declared PC-offset width fits them (see
    /// [`index::decode_covered_checked`]); with the line to print when the other width was used.
    pub fn decode_checked(
        key: TableKey,
        version: Version,
        bytes: &[u8],
        is_code: IsCode<'_>,
    ) -> Result<(Entries, Option<String>), WidthError> {
        Ok(match key.kind {
            TableKind::Covered => {
                let c = index::decode_covered_checked(bytes, key.start, version, is_code)?;
                let note = c.width_note(version);
                (Entries::Covered(c.entries), note)
            }
            TableKind::Atomics => {
                let c = index::decode_atomics_checked(bytes, key.start, version, is_code)?;
                let note = c.width_note(version);
                (Entries::Atomics(c.entries), note)
            }
        })
    }

    pub fn len(&self) -> usize {
        match self {
            Entries::Covered(v) => v.len(),
            Entries::Atomics(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a group of tables comes from: a loaded file, or anonymous memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleId {
    /// The file path as the loader knows it, or `<anonymous 0x…>`.
    pub path: String,
    /// Load bias (or the table address for anonymous memory).
    pub bias: u64,
}

/// Per-module counts, as printed by `verbosity=1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleCounts {
    pub module: ModuleId,
    pub functions: usize,
    pub atomics: usize,
}

struct Table {
    key: TableKey,
    module: ModuleId,
    entries: Entries,
}

/// All registered tables. Obtain it with [`lock`].
#[derive(Default)]
pub struct Registry {
    tables: Vec<Table>,
    /// Every module that ever registered a table (modules unregister theirs in their destructors,
    /// before the exit hook writes the coverage profile that names them).
    seen: Vec<String>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { tables: Vec::new(), seen: Vec::new() });

/// In a forked child: readers counted by the parent's other threads are gone.
pub fn forget_readers_after_fork() {
    CURRENT.forget_readers_after_fork();
}

/// The registry, for writers (never from a signal handler).
pub fn lock() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Registry {
    /// True when a table with this key is registered.
    pub fn contains(&self, key: TableKey) -> bool {
        self.tables.iter().any(|t| t.key == key)
    }

    /// Registers a table; returns false (and changes nothing) when its key is already known.
    /// Call [`Registry::publish`] afterwards.
    pub fn insert(&mut self, key: TableKey, module: ModuleId, entries: Entries) -> bool {
        if self.contains(key) {
            return false;
        }
        if !self.seen.contains(&module.path) {
            self.seen.push(module.path.clone());
        }
        self.tables.push(Table { key, module, entries });
        true
    }

    /// Unregisters a table; returns its module when that module has no table left.
    pub fn remove(&mut self, key: TableKey) -> Option<Removed> {
        let at = self.tables.iter().position(|t| t.key == key)?;
        let table = self.tables.remove(at);
        let module_gone = !self.tables.iter().any(|t| t.module == table.module);
        Some(Removed { module: table.module, module_gone })
    }

    /// Counts of one module's registered tables.
    pub fn counts(&self, module: &ModuleId) -> ModuleCounts {
        let mut counts = ModuleCounts { module: module.clone(), functions: 0, atomics: 0 };
        for t in self.tables.iter().filter(|t| &t.module == module) {
            match &t.entries {
                Entries::Covered(v) => counts.functions += v.len(),
                Entries::Atomics(v) => counts.atomics += v.len(),
            }
        }
        counts
    }

    /// The keys registered for a module.
    pub fn keys_of(&self, module: &ModuleId) -> Vec<TableKey> {
        self.tables.iter().filter(|t| &t.module == module).map(|t| t.key).collect()
    }

    /// The paths of the modules that registered tables at some point, each once.
    pub fn module_paths_ever(&self) -> Vec<String> {
        self.seen.clone()
    }

    /// The module a table was registered under.
    pub fn module_of(&self, key: TableKey) -> Option<&ModuleId> {
        self.tables.iter().find(|t| t.key == key).map(|t| &t.module)
    }

    /// Builds the index from every registered table.
    pub fn build(&self) -> Index {
        // Tables in address order: modules do not overlap, so the concatenation is
        // usually sorted already and the build skips its sort.
        let mut order: Vec<&Table> = self.tables.iter().collect();
        order.sort_by_key(|t| t.key.start);
        let (mut functions, mut atomics) = (Vec::new(), Vec::new());
        for t in order {
            match &t.entries {
                Entries::Covered(v) => functions.push(v.as_slice()),
                Entries::Atomics(v) => atomics.push(v.as_slice()),
            }
        }
        Index::build_from(joined(&functions), joined(&atomics))
    }

    /// Builds and publishes the index of every registered table.
    pub fn publish(&self) {
        publish(self.build());
    }
}

/// The tables' entries in order: borrowed when there is one table, else one copy.
fn joined<'a, T: Clone>(tables: &[&'a [T]]) -> Cow<'a, [T]> {
    match tables {
        [] => Cow::Borrowed(&[]),
        [one] => Cow::Borrowed(one),
        many => Cow::Owned(many.concat()),
    }
}

/// What [`Registry::remove`] took away.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    pub module: ModuleId,
    /// The module has no table left.
    pub module_gone: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Access;
    use racewatch_instrument::format::pcsections::{encode_atomics, encode_covered, CoveredEntry, FEATURE_ATOMICS};

    fn module(path: &str) -> ModuleId {
        ModuleId { path: path.into(), bias: 0 }
    }

    #[test]
    fn insert_dedups_and_remove_reports_empty_modules() {
        let mut r = Registry::default();
        let cov = TableKey { kind: TableKind::Covered, start: 0x9000 };
        let atom = TableKey { kind: TableKind::Atomics, start: 0x9100 };
        let f = FunctionInfo { start: 0x1000, size: 16, features: FEATURE_ATOMICS as u32 };
        assert!(r.insert(cov, module("a"), Entries::Covered(vec![f])));
        assert!(!r.insert(cov, module("a"), Entries::Covered(vec![f, f])));
        assert!(r.insert(atom, module("a"), Entries::Atomics(vec![0x1004, 0x1008])));
        assert_eq!(r.counts(&module("a")), ModuleCounts { module: module("a"), functions: 1, atomics: 2 });
        let index = r.build();
        assert_eq!(index.classify(0x1004), Access::Atomic);
        assert_eq!(r.remove(atom), Some(Removed { module: module("a"), module_gone: false }));
        assert_eq!(r.remove(atom), None);
        assert_eq!(r.remove(cov), Some(Removed { module: module("a"), module_gone: true }));
        assert_eq!(r.build().functions(), 0);
    }

    #[test]
    fn decodes_tables() {
        let e = CoveredEntry { pc: 0x2000, size: 8, features: 1, stack_args_size: None };
        let key = TableKey { kind: TableKind::Covered, start: 0x5000 };
        let bytes = encode_covered(&[e], 0x5000, Version::V2).unwrap();
        let got = Entries::decode(key, Version::V2, &bytes).unwrap();
        assert_eq!(got, Entries::Covered(vec![FunctionInfo { start: 0x2000, size: 8, features: 1 }]));
        let akey = TableKey { kind: TableKind::Atomics, start: 0x6000 };
        let abytes = encode_atomics(&[0x2004], 0x6000, Version::V2).unwrap();
        assert_eq!(Entries::decode(akey, Version::V2, &abytes).unwrap(), Entries::Atomics(vec![0x2004]));
        assert!(Entries::decode(akey, Version::V2, &abytes[..3]).is_err());
    }

    /// Readers in other threads keep querying while the writer republishes;
    /// every answer comes from a complete snapshot (either all or none of the functions).
    #[test]
    fn readers_see_whole_snapshots_during_republish() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(SeqCst) {
                        let n = with_index(|i| {
                            let n = i.functions();
                            assert!(n == 0 || n == 100, "torn snapshot with {n} functions");
                            if n == 100 {
                                assert_eq!(i.classify(0x1000 + 99 * 64), Access::Plain);
                            }
                            n
                        });
                        seen += n as u64;
                    }
                    seen
                })
            })
            .collect();
        let funcs: Vec<FunctionInfo> =
            (0..100).map(|i| FunctionInfo { start: 0x1000 + i * 64, size: 32, features: 1 }).collect();
        for round in 0..200 {
            let _guard = lock();
            publish(if round % 2 == 0 { Index::build(funcs.clone(), vec![]) } else { Index::empty() });
        }
        stop.store(true, SeqCst);
        for r in readers {
            r.join().unwrap();
        }
    }
}
