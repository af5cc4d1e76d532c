//! The immutable PC index: `classify(pc) -> Uncovered | Plain | Atomic`.
//!
//! Built once per change of the registered tables (start-up, `dlopen`,
//! `dlclose`) and then only read, from signal handlers among others: every
//! query is allocation-free, lock-free and O(log n).
//!
//! Layout (memory: 4 bytes per atomic PC + about 14 bytes per function,
//! plus at most one partly used 64-byte block per region):
//! - functions sorted by start, split into *regions* whose functions all lie
//!   within 4 GiB of the region's first function, so a start is stored as a
//!   `u32` offset from its region's base;
//! - functions grouped in 64-byte [`Block`]s of [`BLOCK`]: one cache line
//!   with their starts and their blob indices (with the feature bits);
//! - per function a *blob*: its size, then its atomic PCs as sorted `u32`
//!   offsets from its start (the next function's blob index bounds them);
//! - per region a direct-mapped bucket table (one 8-byte [`Bucket`] per 4–8
//!   functions) that names the PC's block, or the two blocks and the
//!   offset that splits them, so the block is chosen without a branch.
//!
//! A lookup touches one bucket, one block and one blob: three dependent
//! cache lines, no unpredictable branches in the common case; worst case (a
//! bucket holding more than two blocks) a binary search over the blocks of
//! one bucket, so O(log n).
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

/// Functions per search block: starts and blob indices fill one cache line.
pub const BLOCK: usize = 8;
/// Start of an unused block slot: never `<=` a PC offset (offsets stay below `u32::MAX`).
const PAD: u32 = u32::MAX;
const FEATURE_SHIFT: u32 = 28;
const BLOB_MASK: u32 = (1 << FEATURE_SHIFT) - 1;
/// Most words the per-function data may take (28-bit blob index): about 268 M
/// functions plus atomic PCs. Beyond it, functions are not indexed and atomic PCs become orphans.
pub const MAX_BLOB_WORDS: usize = BLOB_MASK as usize;
/// Target functions per bucket of the direct-mapped first search step.
const FUNCTIONS_PER_BUCKET: usize = 4;
/// Up to this many atomic PCs in a function are compared all at once (SIMD);
/// more are binary-searched.
const LINEAR_ATOMICS: usize = 32;
/// `Bucket::split` of a bucket spanning more than two blocks (never a real split:
/// every block after a region's first starts above offset 0).
const SPLIT_SEARCH: u32 = 0;

/// Eight functions: their starts (offsets from the region base; [`PAD`] when
/// unused) and, per function, the index of its blob in `Index::blobs` (low 28
/// bits) with its feature bits above. One cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    starts: [u32; BLOCK],
    info: [u32; BLOCK],
}

/// Offsets `k << shift .. (k + 1) << shift` of a region fall in block `block`
/// when below `split`, else in block `block + 1` ([`PAD`]: always `block`;
/// [`SPLIT_SEARCH`]: search the blocks up to the next bucket's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bucket {
    block: u32,
    split: u32,
}

/// Functions within 4 GiB of `base`, stored in whole blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Region {
    /// Start of its first function.
    base: u64,
    /// Highest end of its functions.
    end: u64,
    first_block: u32,
    blocks: u32,
    first_bucket: u32,
    buckets: u32,
    /// Bucket `k` covers offsets `k << shift .. (k + 1) << shift`.
    shift: u32,
}

/// The PC index. See the module documentation for the layout.
#[derive(Debug, Default)]
pub struct Index {
    regions: Vec<Region>,
    blocks: Vec<Block>,
    /// Per function: its size, then its atomic PCs as sorted offsets from its start.
    blobs: Vec<u32>,
    /// Per region bucket: the (region-relative) block holding the last function
    /// starting at or before the bucket's first offset.
    buckets: Vec<Bucket>,
    functions: usize,
    atomics: usize,
    orphans: usize,
}

/// Where `find` landed: block, slot, offset of the PC from the function start.
#[derive(Clone, Copy)]
struct Hit {
    region: usize,
    block: usize,
    slot: usize,
    offset: u32,
    /// `offset` is below the function's size.
    inside: bool,
}

/// Builds one index; functions arrive sorted by start.
struct Builder {
    index: Index,
    /// Starts of the current region's functions (for its buckets).
    region_starts: Vec<u32>,
}

impl Builder {
    fn push(&mut self, f: &FunctionInfo, atomics: &[u64]) {
        let ix = &mut self.index;
        if ix.blobs.len() + 1 > MAX_BLOB_WORDS {
            ix.orphans += atomics.len();
            return;
        }
        let fits = |r: &Region| f.end() - r.base <= u64::from(u32::MAX);
        if !ix.regions.last().is_some_and(fits) {
            self.close_region();
            let ix = &mut self.index;
            ix.regions.push(Region {
                base: f.start,
                end: f.end(),
                first_block: ix.blocks.len() as u32,
                blocks: 0,
                first_bucket: 0,
                buckets: 0,
                shift: 0,
            });
        }
        let ix = &mut self.index;
        let region = ix.regions.last_mut().expect("a region is open");
        region.end = region.end.max(f.end());
        let slot = self.region_starts.len() % BLOCK;
        if slot == 0 {
            ix.blocks.push(Block { starts: [PAD; BLOCK], info: [0; BLOCK] });
            region.blocks += 1;
        }
        let offset = (f.start - region.base) as u32;
        let block = ix.blocks.last_mut().expect("a block is open");
        block.starts[slot] = offset;
        block.info[slot] = ix.blobs.len() as u32 | ((f.features & 0xf) << FEATURE_SHIFT);
        self.region_starts.push(offset);
        ix.blobs.push(f.size);
        let room = MAX_BLOB_WORDS - ix.blobs.len();
        let kept = atomics.len().min(room);
        ix.blobs.extend(atomics[..kept].iter().map(|&pc| (pc - f.start) as u32));
        ix.atomics += kept;
        ix.orphans += atomics.len() - kept;
        ix.functions += 1;
    }

    /// Pads the current region's last block and builds its buckets.
    fn close_region(&mut self) {
        let ix = &mut self.index;
        let Some(region) = ix.regions.last_mut() else { return };
        // Unused slots point at the next blob, so "next slot's blob" bounds every function's atomics.
        let next_blob = ix.blobs.len() as u32;
        let used = self.region_starts.len() % BLOCK;
        if let (Some(block), true) = (ix.blocks.last_mut(), used != 0) {
            block.info[used..].fill(next_blob);
        }
        let span = region.end - region.base;
        let target = (self.region_starts.len() / FUNCTIONS_PER_BUCKET).max(1) as u64;
        let mut shift = 0;
        while (span >> shift) >= target {
            shift += 1;
        }
        let count = (span >> shift) + 1;
        region.shift = shift;
        region.first_bucket = ix.buckets.len() as u32;
        region.buckets = count as u32;
        let starts = &self.region_starts;
        let mut j = 0;
        for k in 0..count {
            let at = k << shift;
            while j + 1 < starts.len() && u64::from(starts[j + 1]) <= at {
                j += 1;
            }
            ix.buckets.push(Bucket { block: (j / BLOCK) as u32, split: 0 });
        }
        // Each bucket's last possible block is the next bucket's first (or the region's last).
        let region = *ix.regions.last().expect("a region is open");
        let first_bucket = region.first_bucket as usize;
        for k in 0..count as usize {
            let at = first_bucket + k;
            let lo = ix.buckets[at].block;
            let hi = ix.buckets.get(at + 1).filter(|_| k + 1 < count as usize).map_or(region.blocks - 1, |b| b.block);
            ix.buckets[at].split = match hi - lo {
                0 => PAD,
                1 => ix.blocks[(region.first_block + hi) as usize].starts[0],
                _ => SPLIT_SEARCH,
            };
        }
        self.region_starts.clear();
    }

    fn finish(mut self) -> Index {
        self.close_region();
        self.index
    }
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
            blocks: Vec::new(),
            blobs: Vec::new(),
            buckets: Vec::new(),
            functions: 0,
            atomics: 0,
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

        let mut builder = Builder {
            index: Index {
                blocks: Vec::with_capacity(functions.len() / BLOCK + 2),
                blobs: Vec::with_capacity(functions.len() + atomics.len()),
                buckets: Vec::with_capacity(functions.len() / FUNCTIONS_PER_BUCKET + 2),
                ..Index::empty()
            },
            region_starts: Vec::new(),
        };
        let mut next = 0;
        for (i, f) in functions.iter().enumerate() {
            // Atomics before this function (and after the previous one) are orphans.
            // Both lists are sorted: one linear merge (a function holds ~10 atomics, so
            // scanning beats a binary search over the rest).
            let mut first = next;
            while first < atomics.len() && atomics[first] < f.start {
                first += 1;
            }
            builder.index.orphans += first - next;
            // A nested function ends before the next start: stop there so offsets stay in order.
            let limit = functions.get(i + 1).map_or(f.end(), |n| n.start.min(f.end()));
            next = first;
            while next < atomics.len() && atomics[next] < limit {
                next += 1;
            }
            builder.push(f, &atomics[first..next]);
        }
        builder.index.orphans += atomics.len() - next;
        builder.finish()
    }

    /// The block, slot and offset of the function containing `pc`.
    #[inline]
    fn find(&self, pc: u64) -> Option<Hit> {
        self.locate(pc).filter(|hit| hit.inside)
    }

    /// Like `find`, but also returns the nearest function below `pc` when `pc`
    /// lies past its end (`inside == false`), so callers can stay branch-free.
    #[inline]
    fn locate(&self, pc: u64) -> Option<Hit> {
        let region = match self.regions.len() {
            0 => return None,
            1 => 0,
            n => self.regions[..n].partition_point(|r| r.base <= pc).checked_sub(1)?,
        };
        let r = &self.regions[region];
        if pc < r.base || pc >= r.end {
            return None;
        }
        let offset = (pc - r.base) as u32;
        // Direct-mapped first step: the answer is in blocks lo..=hi of the region.
        let bucket = (offset >> r.shift) as usize;
        let buckets = &self.buckets[r.first_bucket as usize..][..r.buckets as usize];
        let b = buckets[bucket];
        let region_blocks = &self.blocks[r.first_block as usize..][..r.blocks as usize];
        let lo = b.block as usize;
        let block = if b.split != SPLIT_SEARCH {
            lo + usize::from(offset >= b.split)
        } else {
            // region_blocks[lo].starts[0] <= offset, so the answer is >= lo.
            let hi = buckets.get(bucket + 1).map_or(r.blocks as usize - 1, |n| n.block as usize);
            lo + region_blocks[lo + 1..=hi].partition_point(|b| b.starts[0] <= offset)
        };
        let starts = &region_blocks[block].starts;
        // How many starts are <= offset: one cache line, branch-free; at least one.
        let slot = starts.iter().map(|&s| usize::from(s <= offset)).sum::<usize>() - 1;
        let block = r.first_block as usize + block;
        let within = offset - starts[slot];
        let size = self.blobs[(self.blocks[block].info[slot] & BLOB_MASK) as usize];
        Some(Hit { region, block, slot, offset: within, inside: within < size })
    }

    /// Blob index of the function after (block, slot): bounds this one's atomics.
    #[inline]
    fn next_blob(&self, block: usize, slot: usize) -> usize {
        if slot + 1 < BLOCK {
            (self.blocks[block].info[slot + 1] & BLOB_MASK) as usize
        } else {
            self.blocks.get(block + 1).map_or(self.blobs.len(), |b| (b.info[0] & BLOB_MASK) as usize)
        }
    }

    /// What the instruction at `pc` is. Allocation-free, O(log n).
    #[inline]
    pub fn classify(&self, pc: u64) -> Access {
        let Some(hit) = self.locate(pc) else { return Access::Uncovered };
        let info = self.blocks[hit.block].info[hit.slot];
        let analysed = u64::from(info >> FEATURE_SHIFT) & FEATURE_ATOMICS != 0;
        let blob = (info & BLOB_MASK) as usize;
        let atomics = &self.blobs[blob + 1..self.next_blob(hit.block, hit.slot)];
        // Past the function's end, `offset` exceeds every atomic offset: no false match.
        let atomic = if atomics.len() <= LINEAR_ATOMICS {
            atomics.iter().fold(false, |found, &a| found | (a == hit.offset))
        } else {
            atomics.binary_search(&hit.offset).is_ok()
        };
        // Branch-free verdict: gaps between functions are common probes too.
        const VERDICT: [Access; 4] = [Access::Uncovered, Access::Uncovered, Access::Plain, Access::Atomic];
        VERDICT[usize::from(hit.inside && analysed) * 2 + usize::from(atomic)]
    }

    /// The covered function containing `pc`. Allocation-free, O(log n).
    pub fn function_containing(&self, pc: u64) -> Option<FunctionInfo> {
        let hit = self.find(pc)?;
        let block = &self.blocks[hit.block];
        let info = block.info[hit.slot];
        Some(FunctionInfo {
            start: self.regions[hit.region].base + u64::from(block.starts[hit.slot]),
            size: self.blobs[(info & BLOB_MASK) as usize],
            features: info >> FEATURE_SHIFT,
        })
    }

    /// Number of covered functions indexed.
    pub fn functions(&self) -> usize {
        self.functions
    }

    /// Number of atomic PCs indexed (inside covered functions).
    pub fn atomics(&self) -> usize {
        self.atomics
    }

    /// Atomic PCs dropped because no covered function contains them.
    pub fn orphan_atomics(&self) -> usize {
        self.orphans
    }

    /// Heap bytes held by the index (allocated capacity).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.regions.capacity() * size_of::<Region>()
            + self.blocks.capacity() * size_of::<Block>()
            + self.blobs.capacity() * size_of::<u32>()
            + self.buckets.capacity() * size_of::<Bucket>()
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

    /// Random functions (gaps, up to 24 atomics each) starting at each of `clusters`.
    fn random_module(rng: &mut fastrand::Rng, clusters: &[u64], per_cluster: usize) -> (Vec<FunctionInfo>, Vec<u64>) {
        let (mut funcs, mut atomics) = (Vec::new(), Vec::new());
        for &cluster in clusters {
            let mut at = cluster;
            for _ in 0..per_cluster {
                at += rng.u64(0..64);
                let size = rng.u32(1..200);
                funcs.push(f(at, size));
                for _ in 0..rng.usize(0..24) {
                    atomics.push(at + rng.u64(0..u64::from(size)));
                }
                at += u64::from(size);
            }
        }
        (funcs, atomics)
    }

    /// Checks every probe against a direct answer from the sorted inputs.
    fn check_against_brute_force(funcs: &[FunctionInfo], atomics: &[u64], probes: impl Iterator<Item = u64>) {
        let index = Index::build(funcs.to_vec(), atomics.to_vec());
        let atomic_set: std::collections::HashSet<u64> = atomics.iter().copied().collect();
        for pc in probes {
            let at = funcs.partition_point(|f| f.start <= pc);
            let func = at.checked_sub(1).map(|i| funcs[i]).filter(|f| pc < f.end());
            let want = match func {
                None => Access::Uncovered,
                Some(_) if atomic_set.contains(&pc) => Access::Atomic,
                Some(_) => Access::Plain,
            };
            assert_eq!(index.classify(pc), want, "pc {pc:#x}");
            assert_eq!(index.function_containing(pc), func, "pc {pc:#x}");
        }
    }

    #[test]
    fn agrees_with_brute_force_dense() {
        let mut rng = fastrand::Rng::with_seed(7);
        let (funcs, atomics) = random_module(&mut rng, &[0x40_0000], 1000);
        let end = funcs.last().unwrap().end();
        check_against_brute_force(&funcs, &atomics, 0x40_0000 - 10..end + 10);
    }

    /// Clusters far apart within one region (buckets spanning many blocks) and
    /// in separate regions (beyond 4 GiB).
    #[test]
    fn agrees_with_brute_force_clustered() {
        let mut rng = fastrand::Rng::with_seed(11);
        let clusters = [0x1000, 0x1000 + 0xf000_0000, 0x5555_0000_0000, 0x7fff_0000_0000, 0x7fff_0100_0000];
        let (funcs, atomics) = random_module(&mut rng, &clusters, 300);
        let mut probes: Vec<u64> =
            (0..200_000).map(|_| funcs[rng.usize(..funcs.len())].start + rng.u64(0..260)).collect();
        probes.extend(atomics.iter().copied());
        probes.extend(clusters.iter().flat_map(|&c| [c - 1, c, c + 0x8000_0000]));
        check_against_brute_force(&funcs, &atomics, probes.into_iter());
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
