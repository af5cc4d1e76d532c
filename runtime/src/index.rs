//! The immutable PC index: `classify(pc) -> Uncovered | Plain | Atomic`.
//!
//! Built once per change of the registered tables (start-up, `dlopen`,
//! `dlclose`) and then only read, from signal handlers among others: every
//! query is allocation-free, lock-free and O(log n).
//!
//! Layout (memory: 4 bytes per atomic PC + about 12.25 bytes per function):
//! - functions sorted by start, split into *regions* whose functions all lie
//!   within 4 GiB of the region's first function, so a start is stored as a
//!   `u32` offset from its region's base;
//! - per function a [`Meta`] record: size, and the index of its first atomic
//!   PC with the feature bits packed in the top 4 bits;
//! - atomic PCs stored per function, sorted, as `u32` offsets from the
//!   function's start;
//! - a search summary: every [`BLOCK`]th start of each region, so a lookup
//!   binary-searches a small (cache-resident) array, then one 64-byte block.
//!
//! Atomic PCs outside every covered function are counted ([`Index::orphan_atomics`])
//! and not stored: `classify` treats them as `Uncovered`. A covered function
//! whose atomics were not analysed (no [`FEATURE_ATOMICS`] bit) is also
//! `Uncovered`: without its atomic PCs a plain access cannot be told from an
//! atomic one.

use racewatch_instrument::format::pcsections::{self, DecodeError, Version, FEATURE_ATOMICS};

/// What the instruction at a PC is, as far as the metadata knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Not in a covered function (or in one whose atomics were not analysed).
    Uncovered,
    /// In a covered function and not tagged atomic.
    Plain,
    /// A tagged atomic instruction.
    Atomic,
}

/// One covered function at run-time addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionInfo {
    pub start: u64,
    pub size: u32,
    /// `pcsections::FEATURE_*` bits (the low 4 bits are kept).
    pub features: u32,
}

impl FunctionInfo {
    fn end(&self) -> u64 {
        self.start.saturating_add(u64::from(self.size))
    }
}

/// Starts per search block: 16 `u32`s, one cache line.
pub const BLOCK: usize = 16;
const FEATURE_SHIFT: u32 = 28;
const FIRST_MASK: u32 = (1 << FEATURE_SHIFT) - 1;
/// Most atomic PCs one index holds (the first-atomic field has 28 bits); more are dropped as orphans.
pub const MAX_ATOMICS: usize = FIRST_MASK as usize;

/// Per-function record next to its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    size: u32,
    /// Index of the function's first atomic PC (low 28 bits) | features << 28.
    first_and_features: u32,
}

impl Meta {
    fn first(self) -> usize {
        (self.first_and_features & FIRST_MASK) as usize
    }

    fn features(self) -> u32 {
        self.first_and_features >> FEATURE_SHIFT
    }
}

/// Functions within 4 GiB of `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Region {
    /// Start of its first function.
    base: u64,
    /// Highest end of its functions.
    end: u64,
    /// Its functions: `first..first + len` of the function arrays.
    first: u32,
    len: u32,
    /// Its summary entries start here in `summary`.
    summary_first: u32,
}

/// The PC index. See the module documentation for the layout.
#[derive(Debug, Default)]
pub struct Index {
    regions: Vec<Region>,
    starts: Vec<u32>,
    meta: Vec<Meta>,
    atomics: Vec<u32>,
    summary: Vec<u32>,
    orphans: usize,
}

/// Decodes a covered table whose first byte is at `addr` into functions.
pub fn decode_covered(bytes: &[u8], addr: u64, version: Version) -> Result<Vec<FunctionInfo>, DecodeError> {
    let mut out = Vec::with_capacity(bytes.len() / (version.offset_size() + 2));
    pcsections::for_each_covered(bytes, addr, version, |e| {
        // The codec rejects sizes beyond u32; features beyond 32 bits carry no known meaning.
        out.push(FunctionInfo { start: e.pc, size: e.size as u32, features: e.features as u32 });
    })?;
    Ok(out)
}

/// Decodes an atomics table whose first byte is at `addr` into PCs.
pub fn decode_atomics(bytes: &[u8], addr: u64, version: Version) -> Result<Vec<u64>, DecodeError> {
    pcsections::decode_atomics(bytes, addr, version)
}

fn sort_if_needed<T: Copy + Ord>(v: &mut [T]) {
    if !v.is_sorted() {
        v.sort_unstable();
    }
}

impl Index {
    /// An index with nothing in it: every PC is `Uncovered`.
    pub const fn empty() -> Index {
        Index {
            regions: Vec::new(),
            starts: Vec::new(),
            meta: Vec::new(),
            atomics: Vec::new(),
            summary: Vec::new(),
            orphans: 0,
        }
    }

    /// Builds the index from functions and atomic PCs in any order (already
    /// sorted input, the usual case, skips the sort). Duplicate functions
    /// (same start) keep the largest size; duplicate atomic PCs count once.
    pub fn build(mut functions: Vec<FunctionInfo>, mut atomics: Vec<u64>) -> Index {
        if !functions.is_sorted_by_key(|f| f.start) {
            functions.sort_unstable_by_key(|f| f.start);
        }
        functions.dedup_by(|later, kept| {
            let same = later.start == kept.start;
            if same {
                kept.size = kept.size.max(later.size);
                kept.features |= later.features;
            }
            same
        });
        sort_if_needed(&mut atomics);
        atomics.dedup();

        let mut index = Index {
            regions: Vec::new(),
            starts: Vec::with_capacity(functions.len()),
            meta: Vec::with_capacity(functions.len()),
            atomics: Vec::with_capacity(atomics.len().min(MAX_ATOMICS)),
            summary: Vec::with_capacity(functions.len().div_ceil(BLOCK) + 1),
            orphans: 0,
        };
        let mut next_atomic = 0;
        for (i, f) in functions.iter().enumerate() {
            index.push_function(i, f);
            // Atomics before this function (and after the previous one) are orphans.
            while next_atomic < atomics.len() && atomics[next_atomic] < f.start {
                index.orphans += 1;
                next_atomic += 1;
            }
            // A nested function ends before the next start: limit to it so offsets stay in order.
            let limit = functions.get(i + 1).map_or(f.end(), |next| next.start.min(f.end()));
            while next_atomic < atomics.len() && atomics[next_atomic] < limit {
                if index.atomics.len() < MAX_ATOMICS {
                    index.atomics.push((atomics[next_atomic] - f.start) as u32);
                } else {
                    index.orphans += 1;
                }
                next_atomic += 1;
            }
        }
        index.orphans += atomics.len() - next_atomic;
        index
    }

    fn push_function(&mut self, i: usize, f: &FunctionInfo) {
        let fits = |r: &Region| f.end() - r.base <= u64::from(u32::MAX);
        match self.regions.last_mut() {
            Some(r) if fits(r) => {
                r.end = r.end.max(f.end());
                r.len += 1;
            }
            _ => self.regions.push(Region {
                base: f.start,
                end: f.end(),
                first: i as u32,
                len: 1,
                summary_first: self.summary.len() as u32,
            }),
        }
        let r = *self.regions.last().expect("a region was just pushed");
        let offset = (f.start - r.base) as u32;
        if (r.len as usize - 1) % BLOCK == 0 {
            self.summary.push(offset);
        }
        self.starts.push(offset);
        let first = self.atomics.len().min(MAX_ATOMICS) as u32;
        self.meta.push(Meta { size: f.size, first_and_features: first | ((f.features & 0xf) << FEATURE_SHIFT) });
    }

    /// Index of the function containing `pc`, and `pc`'s offset from its start.
    #[inline]
    fn find(&self, pc: u64) -> Option<(usize, u32)> {
        let r = match self.regions.len() {
            0 => return None,
            1 => &self.regions[0],
            _ => {
                let after = self.regions.partition_point(|r| r.base <= pc);
                self.regions.get(after.checked_sub(1)?)?
            }
        };
        if pc < r.base || pc >= r.end {
            return None;
        }
        let offset = (pc - r.base) as u32;
        let first = r.first as usize;
        let len = r.len as usize;
        let blocks = &self.summary[r.summary_first as usize..][..len.div_ceil(BLOCK)];
        // blocks[0] == 0 <= offset, so the block exists.
        let block = blocks.partition_point(|&s| s <= offset) - 1;
        let lo = first + block * BLOCK;
        let hi = (lo + BLOCK).min(first + len);
        let starts = &self.starts[lo..hi];
        // Count of starts <= offset within one cache line, branch-free.
        let within = starts.iter().map(|&s| usize::from(s <= offset)).sum::<usize>();
        let i = lo + within - 1;
        let within_function = offset - self.starts[i];
        (within_function < self.meta[i].size).then_some((i, within_function))
    }

    fn atomics_of(&self, i: usize) -> &[u32] {
        let first = self.meta[i].first();
        let end = self.meta.get(i + 1).map_or(self.atomics.len(), |m| m.first());
        &self.atomics[first..end]
    }

    fn info(&self, i: usize) -> FunctionInfo {
        let r = self.regions[self.regions.partition_point(|r| r.first as usize <= i) - 1];
        FunctionInfo {
            start: r.base + u64::from(self.starts[i]),
            size: self.meta[i].size,
            features: self.meta[i].features(),
        }
    }

    /// What the instruction at `pc` is. Allocation-free, O(log n).
    #[inline]
    pub fn classify(&self, pc: u64) -> Access {
        let Some((i, offset)) = self.find(pc) else { return Access::Uncovered };
        if u64::from(self.meta[i].features()) & FEATURE_ATOMICS == 0 {
            return Access::Uncovered;
        }
        if self.atomics_of(i).binary_search(&offset).is_ok() {
            Access::Atomic
        } else {
            Access::Plain
        }
    }

    /// The covered function containing `pc`. Allocation-free, O(log n).
    pub fn function_containing(&self, pc: u64) -> Option<FunctionInfo> {
        self.find(pc).map(|(i, _)| self.info(i))
    }

    /// Number of covered functions indexed.
    pub fn functions(&self) -> usize {
        self.starts.len()
    }

    /// Number of atomic PCs indexed (inside covered functions).
    pub fn atomics(&self) -> usize {
        self.atomics.len()
    }

    /// Atomic PCs dropped because no covered function contains them.
    pub fn orphan_atomics(&self) -> usize {
        self.orphans
    }

    /// Heap bytes held by the index (allocated capacity).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.regions.capacity() * size_of::<Region>()
            + self.starts.capacity() * size_of::<u32>()
            + self.meta.capacity() * size_of::<Meta>()
            + self.atomics.capacity() * size_of::<u32>()
            + self.summary.capacity() * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcsections::{encode_atomics, encode_covered, CoveredEntry};

    fn f(start: u64, size: u32) -> FunctionInfo {
        FunctionInfo { start, size, features: FEATURE_ATOMICS as u32 }
    }

    #[test]
    fn empty_index_is_uncovered_everywhere() {
        let index = Index::empty();
        for pc in [0, 1, 0x1000, u64::MAX] {
            assert_eq!(index.classify(pc), Access::Uncovered);
            assert_eq!(index.function_containing(pc), None);
        }
        assert_eq!((index.functions(), index.atomics()), (0, 0));
    }

    #[test]
    fn classifies_boundaries() {
        let index = Index::build(vec![f(0x2000, 0x10), f(0x1000, 0x20)], vec![0x1004, 0x200f, 0x1000]);
        assert_eq!(index.classify(0xfff), Access::Uncovered);
        assert_eq!(index.classify(0x1000), Access::Atomic);
        assert_eq!(index.classify(0x1001), Access::Plain);
        assert_eq!(index.classify(0x1004), Access::Atomic);
        assert_eq!(index.classify(0x101f), Access::Plain);
        assert_eq!(index.classify(0x1020), Access::Uncovered);
        assert_eq!(index.classify(0x1fff), Access::Uncovered);
        assert_eq!(index.classify(0x200f), Access::Atomic);
        assert_eq!(index.classify(0x2010), Access::Uncovered);
        assert_eq!(index.function_containing(0x2008), Some(f(0x2000, 0x10)));
        assert_eq!((index.functions(), index.atomics(), index.orphan_atomics()), (2, 3, 0));
    }

    #[test]
    fn orphan_atomics_are_counted_and_uncovered() {
        let index = Index::build(vec![f(0x1000, 0x10)], vec![0x10, 0x1008, 0x1010, 0x5000]);
        assert_eq!(index.orphan_atomics(), 3);
        assert_eq!(index.atomics(), 1);
        assert_eq!(index.classify(0x10), Access::Uncovered);
        assert_eq!(index.classify(0x5000), Access::Uncovered);
    }

    #[test]
    fn function_without_atomics_feature_is_uncovered() {
        let index = Index::build(vec![FunctionInfo { start: 0x1000, size: 8, features: 0 }], vec![]);
        assert_eq!(index.classify(0x1002), Access::Uncovered);
        assert_eq!(index.function_containing(0x1002).map(|f| f.features), Some(0));
    }

    #[test]
    fn regions_far_apart() {
        // A PIE executable and a library 0x7f.. away: separate regions.
        let lib = 0x7f00_0000_0000u64;
        let index = Index::build(
            vec![f(0x5555_0000_1000, 0x40), f(lib, 0x40), f(lib + 0x1_0000_0000, 0x40)],
            vec![lib + 8, lib + 0x1_0000_0008],
        );
        assert_eq!(index.classify(0x5555_0000_1010), Access::Plain);
        assert_eq!(index.classify(lib + 8), Access::Atomic);
        assert_eq!(index.classify(lib + 0x1_0000_0008), Access::Atomic);
        assert_eq!(index.classify(lib + 0x1_0000_0009), Access::Plain);
        assert_eq!(index.classify(lib + 0x8000_0000), Access::Uncovered);
        assert_eq!(index.function_containing(lib + 0x1_0000_0001).unwrap().start, lib + 0x1_0000_0000);
    }

    #[test]
    fn duplicates_collapse() {
        let index = Index::build(vec![f(0x1000, 8), f(0x1000, 16)], vec![0x1008, 0x1008]);
        assert_eq!((index.functions(), index.atomics()), (1, 1));
        assert_eq!(index.classify(0x1008), Access::Atomic);
    }

    /// Brute force against the index on many functions (several search blocks).
    #[test]
    fn agrees_with_brute_force() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut funcs = Vec::new();
        let mut atomics = Vec::new();
        let mut at = 0x40_0000u64;
        for _ in 0..1000 {
            at += rng.u64(0..64);
            let size = rng.u32(1..200);
            funcs.push(f(at, size));
            for _ in 0..rng.usize(0..5) {
                atomics.push(at + rng.u64(0..u64::from(size)));
            }
            at += u64::from(size);
        }
        let index = Index::build(funcs.clone(), atomics.clone());
        for pc in 0x40_0000 - 10..at + 10 {
            let func = funcs.iter().find(|f| f.start <= pc && pc < f.end());
            let want = match func {
                None => Access::Uncovered,
                Some(_) if atomics.contains(&pc) => Access::Atomic,
                Some(_) => Access::Plain,
            };
            assert_eq!(index.classify(pc), want, "pc {pc:#x}");
            assert_eq!(index.function_containing(pc), func.copied());
        }
    }

    #[test]
    fn decodes_through_the_codec() {
        let base = 0x10_0000u64;
        let entries: Vec<CoveredEntry> = (0..10)
            .map(|i| CoveredEntry {
                pc: base + i * 0x100,
                size: 0x80,
                features: FEATURE_ATOMICS,
                stack_args_size: None,
            })
            .collect();
        let covered = encode_covered(&entries, 0x90_0000, Version::V2).unwrap();
        let pcs: Vec<u64> = (0..10).map(|i| base + i * 0x100 + 4).collect();
        let atomics = encode_atomics(&pcs, 0x91_0000, Version::V2).unwrap();
        let index = Index::build(
            decode_covered(&covered, 0x90_0000, Version::V2).unwrap(),
            decode_atomics(&atomics, 0x91_0000, Version::V2).unwrap(),
        );
        assert_eq!((index.functions(), index.atomics()), (10, 10));
        assert_eq!(index.classify(base + 0x304), Access::Atomic);
        assert_eq!(index.classify(base + 0x305), Access::Plain);
        assert_eq!(index.classify(base + 0x380), Access::Uncovered);
        assert!(decode_covered(&covered[..covered.len() - 1], 0x90_0000, Version::V2).is_err());
    }

    #[test]
    fn memory_within_budget() {
        let funcs: Vec<FunctionInfo> = (0..1000).map(|i| f(0x1000 + i * 64, 60)).collect();
        let atomics: Vec<u64> = (0..1000).flat_map(|i| (0..10).map(move |j| 0x1000 + i * 64 + j * 4)).collect();
        let index = Index::build(funcs, atomics);
        assert_eq!(index.atomics(), 10_000);
        assert!(index.memory_bytes() <= 5 * 10_000 + 16 * 1000, "{} bytes", index.memory_bytes());
    }
}
