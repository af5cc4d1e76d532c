//! The immutable PC index: `classify(pc) -> Uncovered | Plain | Atomic`.
//!
//! Built once per change of the registered tables (start-up, `dlopen`,
//! `dlclose`) and then only read, from signal handlers among others: every
//! query is allocation-free, lock-free and O(log n).
//!
//! Functions are sorted by start and split into *regions* whose functions all
//! lie within 2 GiB of the region's first function, so region offsets are `u32`
//! with the top bit free (slots use it as a tag).
//! Two structures per region:
//!
//! - for [`Index::classify`], the region's code is cut into equal *windows*
//!   (`2^shift` bytes, sized so there are about a third as many windows as
//!   atomic PCs, function starts and ends). Each window has one 8-byte *slot*
//!   ([`Slot`]): whether the window starts inside covered code, then the
//!   offsets (within the window) where coverage toggles and the offsets of its
//!   atomic PCs — inline in the slot when they fit (up to 7 one-byte offsets for
//!   windows of at most 128 bytes, each tagged toggle or atomic by its top bit,
//!   all compared at once), else in an overflow record of `pool` (16 tagged
//!   lanes in one 16-byte record when they fit, else sorted lists). Most
//!   lookups read one slot: one cache line, so uniformly random PCs cost one
//!   cache miss, not three dependent ones;
//! - for [`Index::function_containing`], the functions grouped in 64-byte
//!   [`Block`]s of [`BLOCK`] (starts and sizes) and a direct-mapped bucket
//!   table (one 8-byte [`Bucket`] per 8 functions) naming the PC's block, or
//!   the two blocks and the offset that splits them.
//!
//! Memory (100,000 functions, 1,000,000 atomic PCs): about 2.2 bytes per atomic
//! PC + 16 bytes per function. The window size grows (and overflow records get
//! used) for sparse code; a region whose windows would exceed its share of the
//! budget (5 bytes per atomic PC + 5 per function) gets larger windows.
//!
//! Coverage follows "the last function starting at or before the PC": a
//! function nested in another ends the outer one's coverage at its start.
//! Atomic PCs outside every covered function are counted ([`Index::orphan_atomics`])
//! and not stored: `classify` treats them as `Uncovered`. A covered function
//! whose atomics were not analysed (no [`FEATURE_ATOMICS`] bit) is also
//! `Uncovered`: without its atomic PCs a plain access cannot be told from an
//! atomic one.

use crate::sys::hugepage::HugeSlice;
use racewatch_instrument::format::pcsections::{
    self, Checked, DecodeError, IsCode, Version, WidthError, FEATURE_ATOMICS,
};
use std::borrow::Cow;

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

/// Functions per search block: starts and sizes fill one cache line.
pub const BLOCK: usize = 8;
/// Start of an unused block slot: never `<=` a PC offset (offsets stay below `u32::MAX`).
const PAD: u32 = u32::MAX;
/// Target functions per bucket of the direct-mapped first search step.
const FUNCTIONS_PER_BUCKET: usize = 8;
/// `Bucket::split` of a bucket spanning more than two blocks (never a real split:
/// every block after a region's first starts above offset 0).
const SPLIT_SEARCH: u32 = 0;
/// Target entries (toggles + atomic PCs) per classify window.
const ITEMS_PER_WINDOW: u64 = 3;
/// Overflow records hold at most this many entries of one kind before a binary search.
const LINEAR_ITEMS: usize = 16;
/// Bytes of code a region may span: offsets keep their top bit free for the lane tag.
const MAX_SPAN: u64 = 1 << 31;

/// Eight functions: their starts (offsets from the region base; [`PAD`] when
/// unused) and sizes. One cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    starts: [u32; BLOCK],
    sizes: [u32; BLOCK],
}

/// Offsets `k << shift .. (k + 1) << shift` of a region fall in block `block`
/// when below `split`, else in block `block + 1` ([`PAD`]: always `block`;
/// [`SPLIT_SEARCH`]: search the blocks up to the next bucket's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bucket {
    block: u32,
    split: u32,
}

/// One classify window, as a `u64`:
/// - bit 7: the entries are inline; bit 6: the window's first byte is covered;
///   bit 5: the entries are in a *wide* overflow record;
/// - inline: bits 0–4 the number of lanes used, then from byte 1 up `7 / width`
///   lanes of `width` bytes: an offset within the window (toggles never 0) with
///   the lane's top bit set for an atomic PC, clear for a coverage toggle;
///   unused lanes are all ones;
/// - wide (one-byte offsets, 8 to 16 entries): bits 0–4 the lanes used, bits 8..
///   the record's index in `Index::pool`: 16 lanes as inline, in two `u64`s;
/// - other overflow: bits 8.. the record's index in `Index::pool`: the numbers of
///   toggles `t` and atomic PCs `a` as `u32`, then their offsets, sorted, each
///   `width` bytes, untagged.
///
/// A PC is covered when the first byte is, XOR an odd number of toggles lie at or below it.
type Slot = u64;
const INLINE: u64 = 0x80;
const COVERED: u64 = 0x40;
const WIDE: u64 = 0x20;
/// Bits of a slot holding the number of lanes used.
const USED: u64 = 0x1f;
/// Lanes of a wide record.
const WIDE_LANES: usize = 16;

/// Functions within 2 GiB ([`MAX_SPAN`]) of `base`.
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
    /// Window `k` covers offsets `k << window_shift ..`; its slot is `first_slot + k`.
    first_slot: usize,
    window_shift: u32,
    /// Bytes per stored offset: 1 (windows up to 128 bytes), 2 (up to 32 KiB) or 4.
    width: u32,
}

/// The PC index. See the module documentation for the layout.
#[derive(Debug, Default)]
pub struct Index {
    regions: Vec<Region>,
    blocks: Vec<Block>,
    /// Feature bits per block slot (`block * BLOCK + slot`).
    features: Vec<u8>,
    /// Per region bucket: the (region-relative) block holding the last function
    /// starting at or before the bucket's first offset.
    buckets: Vec<Bucket>,
    /// Window slots, on huge pages when they fill one (uniform lookups then miss the TLB less).
    slots: HugeSlice,
    pool: Vec<u8>,
    functions: usize,
    atomics: usize,
    orphans: usize,
}

/// Where `locate` landed: block, slot, offset of the PC from the function start.
#[derive(Clone, Copy)]
struct Hit {
    region: usize,
    block: usize,
    slot: usize,
    /// The PC lies below the function's end.
    inside: bool,
}

/// Builds one index; functions arrive sorted by start.
struct Builder {
    index: Index,
    /// Starts of the current region's functions (for its buckets).
    region_starts: Vec<u32>,
    /// Current region: offsets where coverage toggles (sorted, distinct).
    toggles: Vec<u32>,
    /// Current region: atomic PCs of analysed functions, as sorted offsets.
    atomic_offsets: Vec<u32>,
    /// Current region: atomic PCs kept (for its memory share).
    region_atomics: usize,
    /// Every region's window slots so far.
    slots: Vec<Slot>,
}

impl Builder {
    /// Adds `f`, covering up to `limit` (its end, or the next function's start
    /// when that comes first), with its atomic PCs (sorted, below `limit`).
    fn push(&mut self, f: &FunctionInfo, limit: u64, atomics: &[u64]) {
        let fits = |r: &Region| f.end() - r.base < MAX_SPAN;
        if !self.index.regions.last().is_some_and(fits) {
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
                first_slot: 0,
                window_shift: 0,
                width: 1,
            });
        }
        let ix = &mut self.index;
        let region = ix.regions.last_mut().expect("a region is open");
        region.end = region.end.max(f.end());
        let slot = self.region_starts.len() % BLOCK;
        if slot == 0 {
            ix.blocks.push(Block { starts: [PAD; BLOCK], sizes: [0; BLOCK] });
            ix.features.extend_from_slice(&[0; BLOCK]);
            region.blocks += 1;
        }
        let base = region.base;
        let offset = (f.start - base) as u32;
        let block = ix.blocks.last_mut().expect("a block is open");
        block.starts[slot] = offset;
        block.sizes[slot] = f.size;
        let at = ix.features.len() - BLOCK + slot;
        ix.features[at] = (f.features & 0xf) as u8;
        self.region_starts.push(offset);
        ix.atomics += atomics.len();
        ix.functions += 1;
        self.region_atomics += atomics.len();
        if u64::from(f.features) & FEATURE_ATOMICS != 0 && limit > f.start {
            // Covered [offset, end): extend a covered run ending exactly here, else open one.
            let end = (limit - base) as u32;
            if self.toggles.last() == Some(&offset) {
                *self.toggles.last_mut().expect("a run is open") = end;
            } else {
                self.toggles.extend_from_slice(&[offset, end]);
            }
            self.atomic_offsets.extend(atomics.iter().map(|&pc| (pc - base) as u32));
        }
    }

    /// Pads the current region's last block and builds its buckets and windows.
    fn close_region(&mut self) {
        let ix = &mut self.index;
        let Some(region) = ix.regions.last_mut() else { return };
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
        self.close_windows(span);
        self.region_starts.clear();
        self.toggles.clear();
        self.atomic_offsets.clear();
        self.region_atomics = 0;
    }

    /// Builds the current region's windows: the smallest size giving about
    /// [`ITEMS_PER_WINDOW`] entries per window whose memory stays within the
    /// region's share of the budget.
    fn close_windows(&mut self, span: u64) {
        let items = (self.toggles.len() + self.atomic_offsets.len()) as u64;
        // (Counted before the padding below.)
        let target = (items / ITEMS_PER_WINDOW).max(1);
        let mut shift = 0;
        while (span >> shift) >= target {
            shift += 1;
        }
        let share = 5 * (self.region_atomics + self.region_starts.len()) + 64;
        self.toggles.extend_from_slice(&[PAD; LANES]);
        self.atomic_offsets.extend_from_slice(&[PAD; LANES]);
        let (first_slot, pool_len) = (self.slots.len(), self.index.pool.len());
        loop {
            // Offsets below 2^(8 * width - 1): the lane's top bit is its tag.
            let width = match shift {
                0..=7 => 1,
                8..=15 => 2,
                _ => 4,
            };
            self.slots.truncate(first_slot);
            self.index.pool.truncate(pool_len);
            let pool = &mut self.index.pool;
            write_windows(&mut self.slots, pool, &self.toggles, &self.atomic_offsets, span, shift, width);
            let used = (self.slots.len() - first_slot) * 8 + self.index.pool.len() - pool_len;
            if used <= share || shift >= 31 {
                let region = self.index.regions.last_mut().expect("a region is open");
                region.first_slot = first_slot;
                region.window_shift = shift;
                region.width = width;
                return;
            }
            shift += 1;
        }
    }

    fn finish(mut self) -> Index {
        self.close_region();
        self.index.slots = HugeSlice::from_slice(&self.slots);
        self.index.pool.shrink_to_fit();
        self.index
    }
}

/// Entries of one kind a window reads at once; lists passed to [`write_windows`]
/// end with this many [`PAD`] entries so the reads never need a bounds check.
const LANES: usize = 8;

/// Appends the slots (and overflow records) of one region's windows.
/// `toggles` and `atomics` are sorted region offsets followed by [`LANES`] [`PAD`]s.
fn write_windows(
    slots: &mut Vec<Slot>,
    pool: &mut Vec<u8>,
    toggles: &[u32],
    atomics: &[u32],
    span: u64,
    shift: u32,
    width: u32,
) {
    match width {
        1 => write_windows_of::<1>(slots, pool, toggles, atomics, span, shift),
        2 => write_windows_of::<2>(slots, pool, toggles, atomics, span, shift),
        _ => write_windows_of::<4>(slots, pool, toggles, atomics, span, shift),
    }
}

/// A sorted list padded with [`LANES`] [`PAD`]s, walked window by window.
struct Cursor<'a> {
    values: &'a [u32],
    /// Entries before the padding.
    len: usize,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(padded: &'a [u32]) -> Self {
        debug_assert!(padded.len() >= LANES && padded[padded.len() - LANES..].iter().all(|&v| v == PAD));
        Cursor { values: padded, len: padded.len() - LANES, at: 0 }
    }

    /// The next [`LANES`] values (padding past the end).
    #[inline(always)]
    fn peek(&self) -> [u32; LANES] {
        self.values[self.at.min(self.len)..][..LANES].try_into().expect("padded")
    }

    /// How many of the remaining values lie at or below `last`: branch-free
    /// (`u32` compares) when fewer than [`LANES`], else linear in the count.
    #[inline(always)]
    fn count_to(&self, next: &[u32; LANES], last: u32) -> usize {
        let n = next.iter().fold(0u32, |n, &v| n + u32::from(v <= last)) as usize;
        let n = n.min(self.len - self.at);
        if n < LANES {
            return n;
        }
        // Dense window: scan on (each value is scanned by one window only).
        let rest = &self.values[self.at + LANES..self.len];
        LANES + rest.iter().position(|&v| v > last).unwrap_or(rest.len())
    }
}

/// [`write_windows`] with `W`-byte offsets: one pass over the windows and both lists.
fn write_windows_of<const W: usize>(
    slots: &mut Vec<Slot>,
    pool: &mut Vec<u8>,
    toggles: &[u32],
    atomics: &[u32],
    span: u64,
    shift: u32,
) {
    let windows = ((span.max(1) - 1) >> shift) + 1;
    let (mut t, mut a) = (Cursor::new(toggles), Cursor::new(atomics));
    slots.reserve(windows as usize);
    for k in 0..windows {
        // Window starts lie below the span, itself below 2^31; so does the last byte.
        let (start, last) = ((k << shift) as u32, ((k + 1) << shift) - 1);
        let last = last as u32;
        // A toggle at the window's first byte only sets its initial state.
        t.at += usize::from(t.values[t.at.min(t.len)] == start);
        let covered = if t.at % 2 == 1 { COVERED } else { 0 };
        let (tv, av) = (t.peek(), a.peek());
        let (nt, na) = (t.count_to(&tv, last), a.count_to(&av, last));
        let slot = if nt + na <= 7 / W {
            // W * (nt + na) <= 7 bytes: the masks' shifts stay below 64.
            let mask = |n: usize| (1u64 << (8 * W * n)) - 1;
            let toggles = lanes::<W>(&tv, start) & mask(nt);
            let atomics = ((lanes::<W>(&av, start) | tag::<W>()) & mask(na)) << (8 * W * nt);
            let unused = mask(7 / W) & !mask(nt + na);
            covered | INLINE | (nt + na) as u64 | (toggles | atomics | unused) << 8
        } else if W == 1 && nt + na <= WIDE_LANES {
            // Tagged one-byte lanes, unused ones all ones; 16-byte aligned (one cache line).
            pool.resize(pool.len().next_multiple_of(WIDE_LANES), 0);
            let at = pool.len() as u64;
            let toggles = t.values[t.at..][..nt].iter().map(|&v| (v - start) as u8);
            let atomics = a.values[a.at..][..na].iter().map(|&v| (v - start) as u8 | 0x80);
            let mut record = [0xff; WIDE_LANES];
            for (lane, v) in record.iter_mut().zip(toggles.chain(atomics)) {
                *lane = v;
            }
            pool.extend_from_slice(&record);
            covered | WIDE | (nt + na) as u64 | at << 8
        } else {
            let at = pool.len() as u64;
            pool.extend_from_slice(&(nt as u32).to_le_bytes());
            pool.extend_from_slice(&(na as u32).to_le_bytes());
            for &v in t.values[t.at..][..nt].iter().chain(&a.values[a.at..][..na]) {
                pool.extend_from_slice(&(v - start).to_le_bytes()[..W]);
            }
            covered | at << 8
        };
        slots.push(slot);
        t.at += nt;
        a.at += na;
    }
}

/// The tag bit of every `W`-byte lane of a slot's 7 bytes (as [`lanes`] packs them).
const fn tag<const W: usize>() -> u64 {
    match W {
        1 => Lanes::<1, 7>::TOP,
        2 => Lanes::<2, 3>::TOP,
        _ => Lanes::<4, 1>::TOP,
    }
}

/// The first `8 / W` of `values` less `start`, in `W`-byte lanes from the lowest
/// (offsets beyond the window wrap: the caller masks the lanes it keeps).
#[inline(always)]
fn lanes<const W: usize>(values: &[u32; LANES], start: u32) -> u64 {
    let lane = u64::MAX >> (64 - 8 * W);
    let mut packed = 0;
    for (i, &v) in values.iter().enumerate().take(8 / W) {
        packed |= (u64::from(v.wrapping_sub(start)) & lane) << (8 * W * i);
    }
    packed
}

/// SWAR constants for `N` lanes of `W` bytes from bit 0 of a `u64` (`W * N <= 8`).
struct Lanes<const W: usize, const N: usize>;

impl<const W: usize, const N: usize> Lanes<W, N> {
    const BITS: u32 = 8 * W as u32;
    /// The lowest bit of every lane.
    const ONES: u64 = {
        let (mut ones, mut i) = (0u64, 0);
        while i < N as u32 {
            ones |= 1 << (i * Self::BITS);
            i += 1;
        }
        ones
    };
    /// The top (tag) bit of every lane.
    const TOP: u64 = Self::ONES << (Self::BITS - 1);
    /// Every lane's offset bits.
    const LOW: u64 = Self::TOP - Self::ONES;
}

/// Tagged lanes (`unused`: all ones over the lanes not in use): (toggles at or
/// below `rel`, `rel` is atomic). Every lane at once, branch-free; `rel` lies
/// below 2^(8 * W - 1).
#[inline(always)]
fn probe_lanes<const W: usize, const N: usize>(lanes: u64, unused: u64, rel: u64) -> (u64, bool) {
    // `rel` with the atomic tag, in every lane.
    let r = (rel * Lanes::<W, N>::ONES) | Lanes::<W, N>::TOP;
    // Per lane, (rel | TOP) - offset keeps TOP set iff offset <= rel, and never
    // borrows from the next lane; toggle lanes are those with the tag clear.
    let below = (r - (lanes & Lanes::<W, N>::LOW)) & !lanes & Lanes::<W, N>::TOP;
    // One multiply sums the flags into the top lane (at most 8: no carry out).
    let top_lane = Lanes::<W, N>::BITS * (N as u32 - 1);
    let count = ((below >> (Lanes::<W, N>::BITS - 1)).wrapping_mul(Lanes::<W, N>::ONES) >> top_lane) & 0xff;
    // An atomic lane equal to `r`: a zero lane of `lanes ^ r` among the used ones
    // (the lowest zero lane is always flagged, so any flag means one exists).
    let x = (lanes ^ r) | unused;
    let zero = x.wrapping_sub(Lanes::<W, N>::ONES) & !x & Lanes::<W, N>::TOP;
    (count, zero != 0)
}

/// Inline entries of a slot: (toggles at or below `rel`, `rel` is atomic).
#[inline(always)]
fn probe_inline<const W: usize>(slot: Slot, rel: u64) -> (u64, bool) {
    // At most 7 / W lanes used: the shift stays below 64.
    let unused = u64::MAX << (8 * W as u64 * (slot & USED));
    match W {
        1 => probe_lanes::<1, 7>(slot >> 8, unused, rel),
        2 => probe_lanes::<2, 3>(slot >> 8, unused, rel),
        _ => probe_lanes::<4, 1>(slot >> 8, unused, rel),
    }
}

/// A wide record's entries: (toggles at or below `rel`, `rel` is atomic).
#[inline(always)]
fn probe_wide(pool: &[u8], at: usize, used: u64, rel: u64) -> (u64, bool) {
    let record: &[u8; WIDE_LANES] = pool[at..][..WIDE_LANES].try_into().expect("16 bytes");
    let (lo, hi) = record.split_at(8);
    let word = |half: &[u8]| u64::from_le_bytes(half.try_into().expect("8 bytes"));
    // 8 to 16 lanes used: all of the low word, `used - 8` of the high one.
    let unused_hi = u64::MAX.checked_shl(8 * (used as u32 - 8)).unwrap_or(0);
    let (below_lo, atomic_lo) = probe_lanes::<1, 8>(word(lo), 0, rel);
    let (below_hi, atomic_hi) = probe_lanes::<1, 8>(word(hi), unused_hi, rel);
    (below_lo + below_hi, atomic_lo | atomic_hi)
}

/// Reads the `i`-th `width`-byte offset of `bytes`.
#[inline]
fn offset_at(bytes: &[u8], width: usize, i: usize) -> u64 {
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(&bytes[i * width..][..width]);
    u64::from_le_bytes(le)
}

/// How many of the `n` sorted `width`-byte offsets of `bytes` are `<= rel`.
fn count_at_or_below(bytes: &[u8], width: usize, n: usize, rel: u64) -> usize {
    if n <= LINEAR_ITEMS {
        return (0..n).map(|i| usize::from(offset_at(bytes, width, i) <= rel)).sum();
    }
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if offset_at(bytes, width, mid) <= rel {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// An overflow record's entries: (toggles at or below `rel`, `rel` is atomic).
/// Out of line: few windows need it, and `classify` stays small enough to inline.
#[inline(never)]
fn probe_pool(pool: &[u8], at: usize, width: usize, rel: u64) -> (u64, bool) {
    let word = |i: usize| u32::from_le_bytes(pool[at + 4 * i..][..4].try_into().expect("4 bytes")) as usize;
    let (t, a) = (word(0), word(1));
    if width == 1 && t.max(a) <= 4 * LINEAR_ITEMS {
        // Windows of at most 256 bytes: compare every byte (vectorised, no branches per entry).
        let (toggles, atomics) = pool[at + 8..][..t + a].split_at(t);
        let rel = rel as u8;
        let below = toggles.iter().fold(0u64, |n, &v| n + u64::from(v <= rel));
        let atomic = atomics.iter().fold(false, |found, &v| found | (v == rel));
        return (below, atomic);
    }
    let toggles = &pool[at + 8..][..t * width];
    let atomics = &pool[at + 8 + t * width..][..a * width];
    let below = count_at_or_below(toggles, width, t, rel);
    let atomic = below_or_equal_match(atomics, width, a, rel);
    (below as u64, atomic)
}

fn below_or_equal_match(atomics: &[u8], width: usize, n: usize, rel: u64) -> bool {
    let k = count_at_or_below(atomics, width, n, rel);
    k > 0 && offset_at(atomics, width, k - 1) == rel
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

/// [`decode_covered`], checking that the declared PC-offset width fits the table (it decodes to the
/// section's end, every function in the code), else decoding with the other width when that fits.
pub fn decode_covered_checked(
    bytes: &[u8],
    addr: u64,
    version: Version,
    is_code: IsCode<'_>,
) -> Result<Checked<FunctionInfo>, WidthError> {
    let c = pcsections::decode_covered_checked(bytes, addr, version, is_code)?;
    let entries = c
        .entries
        .iter()
        .map(|e| FunctionInfo { start: e.pc, size: e.size as u32, features: e.features as u32 })
        .collect();
    Ok(Checked { entries, version: c.version, declared_misfit: c.declared_misfit })
}

/// [`decode_atomics`] with the checks of [`decode_covered_checked`].
pub fn decode_atomics_checked(
    bytes: &[u8],
    addr: u64,
    version: Version,
    is_code: IsCode<'_>,
) -> Result<Checked<u64>, WidthError> {
    pcsections::decode_atomics_checked(bytes, addr, version, is_code)
}

/// Decodes an atomics table whose first byte is at `addr` into PCs.
pub fn decode_atomics(bytes: &[u8], addr: u64, version: Version) -> Result<Vec<u64>, DecodeError> {
    pcsections::decode_atomics(bytes, addr, version)
}

impl Index {
    /// An index with nothing in it: every PC is `Uncovered`.
    pub const fn empty() -> Index {
        Index {
            regions: Vec::new(),
            blocks: Vec::new(),
            features: Vec::new(),
            buckets: Vec::new(),
            slots: HugeSlice::empty(),
            pool: Vec::new(),
            functions: 0,
            atomics: 0,
            orphans: 0,
        }
    }

    /// Builds the index from functions and atomic PCs in any order (already
    /// sorted input, the usual case, skips the sort). Duplicate functions
    /// (same start) keep the largest size; duplicate atomic PCs count once.
    pub fn build(functions: Vec<FunctionInfo>, atomics: Vec<u64>) -> Index {
        Index::build_from(Cow::Owned(functions), Cow::Owned(atomics))
    }

    /// [`Index::build`] on borrowed or owned lists: lists already sorted and
    /// free of duplicates (the usual case) are read in place, never copied.
    pub fn build_from(mut functions: Cow<'_, [FunctionInfo]>, mut atomics: Cow<'_, [u64]>) -> Index {
        if !functions.windows(2).all(|w| w[0].start < w[1].start) {
            let functions = functions.to_mut();
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
        }
        if !atomics.windows(2).all(|w| w[0] < w[1]) {
            let atomics = atomics.to_mut();
            if !atomics.is_sorted() {
                atomics.sort_unstable();
            }
            atomics.dedup();
        }
        let (functions, atomics) = (&*functions, &*atomics);

        let windows = (functions.len() * 2 + atomics.len()) / ITEMS_PER_WINDOW as usize + 2;
        let mut builder = Builder {
            index: Index {
                blocks: Vec::with_capacity(functions.len() / BLOCK + 2),
                features: Vec::with_capacity(functions.len() + 2 * BLOCK),
                buckets: Vec::with_capacity(functions.len() / FUNCTIONS_PER_BUCKET + 2),
                ..Index::empty()
            },
            slots: Vec::with_capacity(windows),
            region_starts: Vec::with_capacity(functions.len()),
            toggles: Vec::with_capacity(2 * functions.len() + LANES),
            atomic_offsets: Vec::with_capacity(atomics.len() + LANES),
            region_atomics: 0,
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
            builder.push(f, limit, &atomics[first..next]);
        }
        builder.index.orphans += atomics.len() - next;
        builder.finish()
    }

    /// The region containing `pc`, if any, and `pc`'s offset in it.
    #[inline]
    fn region(&self, pc: u64) -> Option<(usize, u32)> {
        let region = match self.regions.len() {
            0 => return None,
            1 => 0,
            n => self.regions[..n].partition_point(|r| r.base <= pc).checked_sub(1)?,
        };
        let r = &self.regions[region];
        // One compare: below the base wraps to a huge offset.
        let offset = pc.wrapping_sub(r.base);
        if offset >= r.end - r.base {
            return None;
        }
        Some((region, offset as u32))
    }

    /// The block and slot of the last function starting at or before `pc`.
    fn locate(&self, pc: u64) -> Option<Hit> {
        let (region, offset) = self.region(pc)?;
        let r = &self.regions[region];
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
        let found = &region_blocks[block];
        // How many starts are <= offset: one cache line, branch-free; at least one.
        let slot = found.starts.iter().map(|&s| usize::from(s <= offset)).sum::<usize>() - 1;
        let inside = offset - found.starts[slot] < found.sizes[slot];
        Some(Hit { region, block: r.first_block as usize + block, slot, inside })
    }

    /// What the instruction at `pc` is. Allocation-free, O(log n); one slot read
    /// (one cache line) for windows whose entries fit inline.
    #[inline]
    pub fn classify(&self, pc: u64) -> Access {
        let Some((region, offset)) = self.region(pc) else { return Access::Uncovered };
        let r = &self.regions[region];
        let offset = u64::from(offset);
        let slot = self.slots[r.first_slot + (offset >> r.window_shift) as usize];
        let rel = offset & ((1u64 << r.window_shift) - 1);
        let (below, atomic) = if slot & INLINE != 0 {
            match r.width {
                1 => probe_inline::<1>(slot, rel),
                2 => probe_inline::<2>(slot, rel),
                _ => probe_inline::<4>(slot, rel),
            }
        } else if slot & WIDE != 0 {
            probe_wide(&self.pool, (slot >> 8) as usize, slot & USED, rel)
        } else {
            probe_pool(&self.pool, (slot >> 8) as usize, r.width as usize, rel)
        };
        let covered = ((slot >> 6) ^ below) & 1 == 1;
        // A predicted branch: cheaper on average than a table load on every lookup.
        if !covered {
            Access::Uncovered
        } else if atomic {
            Access::Atomic
        } else {
            Access::Plain
        }
    }

    /// The covered function containing `pc`. Allocation-free, O(log n).
    pub fn function_containing(&self, pc: u64) -> Option<FunctionInfo> {
        let hit = self.locate(pc).filter(|hit| hit.inside)?;
        let block = &self.blocks[hit.block];
        Some(FunctionInfo {
            start: self.regions[hit.region].base + u64::from(block.starts[hit.slot]),
            size: block.sizes[hit.slot],
            features: u32::from(self.features[hit.block * BLOCK + hit.slot]),
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
            + self.features.capacity()
            + self.buckets.capacity() * size_of::<Bucket>()
            + self.slots.memory_bytes()
            + self.pool.capacity()
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
                Some(f) if u64::from(f.features) & FEATURE_ATOMICS == 0 => Access::Uncovered,
                Some(_) if atomic_set.contains(&pc) => Access::Atomic,
                Some(_) => Access::Plain,
            };
            assert_eq!(index.classify(pc), want, "pc {pc:#x}");
            assert_eq!(index.function_containing(pc), func, "pc {pc:#x}");
        }
    }

    /// How many windows keep their entries inline, in a wide record, in a list record.
    fn slot_kinds(index: &Index) -> [usize; 3] {
        let mut kinds = [0; 3];
        for &slot in index.slots.iter() {
            kinds[if slot & INLINE != 0 {
                0
            } else if slot & WIDE != 0 {
                1
            } else {
                2
            }] += 1;
        }
        kinds
    }

    #[test]
    fn agrees_with_brute_force_dense() {
        let mut rng = fastrand::Rng::with_seed(7);
        let (funcs, atomics) = random_module(&mut rng, &[0x40_0000], 1000);
        let kinds = slot_kinds(&Index::build(funcs.clone(), atomics.clone()));
        assert!(kinds[0] > 0 && kinds[1] > 0, "inline and wide windows: {kinds:?}");
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

    /// Window edge cases: adjacent functions (merged coverage), a nested function,
    /// an unanalysed one, atomic-dense code (overflow records), toggles on window
    /// edges, and sparse code whose windows need 2- and 4-byte offsets.
    #[test]
    fn agrees_with_brute_force_window_layouts() {
        let mut rng = fastrand::Rng::with_seed(23);
        let mut funcs = vec![f(0x1000, 0x40), f(0x1040, 0x40), f(0x1080, 0x100), f(0x10a0, 0x10)];
        funcs.push(FunctionInfo { start: 0x1200, size: 0x80, features: 0 });
        funcs.push(f(0x1280, 0x200));
        let mut atomics: Vec<u64> = (0x1280..0x1480).step_by(3).collect();
        atomics.extend([0x1000, 0x103f, 0x1040, 0x10a4, 0x10c0, 0x1204]);
        // Sparse: big functions with few atomics, then far-apart small ones.
        let mut at = 0x10_0000u64;
        for _ in 0..200 {
            let size = rng.u32(0x800..0x4000);
            funcs.push(f(at, size));
            atomics.push(at + rng.u64(0..u64::from(size)));
            at += u64::from(size) + rng.u64(0..0x1000);
        }
        for i in 0..50u64 {
            let start = 0x2_0000_0000 + i * 0x100_0000;
            funcs.push(f(start, 0x100));
            atomics.extend([start, start + 0xff]);
        }
        funcs.sort_by_key(|f| f.start);
        atomics.sort_unstable();
        atomics.dedup();
        let index = Index::build(funcs.clone(), atomics.clone());
        let widths: Vec<u32> = index.regions.iter().map(|r| r.width).collect();
        assert!(widths.len() == 2 && widths[0] < widths[1], "{widths:?}");
        let kinds = slot_kinds(&index);
        assert!(kinds[0] > 0 && kinds[2] > 0, "inline and list windows: {kinds:?}");
        let mut probes: Vec<u64> = (0xff0..0x1500).chain(0x10_0000 - 4..at + 4).collect();
        probes.extend(atomics.iter().flat_map(|&a| [a - 1, a, a + 1]));
        probes.extend(funcs.iter().flat_map(|f| [f.start - 1, f.start, f.end() - 1, f.end()]));
        probes.extend((0..100_000).map(|_| rng.u64(0..0x2_4000_0000)));
        check_against_brute_force(&funcs, &atomics, probes.into_iter());
        assert_eq!(index.classify(0x1204), Access::Uncovered, "unanalysed function, width {widths:?}");
    }

    #[test]
    fn memory_within_budget_without_atomics() {
        // A C program without atomics: coverage alone must fit 16 bytes per function.
        let funcs: Vec<FunctionInfo> = (0..1000).map(|i| f(0x1000 + i * 400, 380)).collect();
        let index = Index::build(funcs, vec![]);
        assert!(index.memory_bytes() <= 16 * 1000, "{} bytes", index.memory_bytes());
        assert_eq!(index.classify(0x1000 + 5 * 400 + 379), Access::Plain);
        assert_eq!(index.classify(0x1000 + 5 * 400 + 380), Access::Uncovered);
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
