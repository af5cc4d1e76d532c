//! Where racewatch's anonymous mappings go: two regions of the address space below the loaded
//! libraries, one for its heap ([`crate::sys::heap`]) and one for its stacks, away from where the
//! kernel puts the program's own mappings.
//!
//! The kernel hands the program's `mmap`s out from the top of the address space down. Each mapping
//! of racewatch's asks (`mmap`'s hint, never `MAP_FIXED`) for an address in its region instead: a
//! range freed earlier that fits, else the region's next address. So racewatch never takes the place
//! the program's next mapping would have had (with randomisation off, the program's mappings land at
//! the same addresses in every run whatever racewatch maps meanwhile), and its heap stays one run of
//! pages: `/proc/self/maps` shows it as a few lines, not one per block it ever freed. A hint the kernel
//! cannot honour (the program mapped that range itself) leaves the placement to the kernel, as usual.

use std::cell::Cell;

const PAGE: usize = 4096;
/// How far below the loaded libraries the heap's region starts; the stacks' starts half-way up.
const REGION_OFFSET: usize = 1 << 40;
const STACKS_OFFSET: usize = REGION_OFFSET / 2;
/// Freed ranges remembered per region for reuse (more are forgotten: address space, not memory).
const FREE_RANGES: usize = 64;

/// Which region a mapping belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// racewatch's heap: slabs and large blocks (rw, counted against the commit limit).
    Heap,
    /// Alternate and runtime signal stacks (`MAP_NORESERVE`, with guard pages).
    Stacks,
}

/// One region: its next unused address and the ranges given back below it.
#[derive(Debug)]
struct Region {
    /// Where the region starts (0: not known yet).
    base: usize,
    cursor: usize,
    free: [(usize, usize); FREE_RANGES],
    count: usize,
    /// Mapped ahead ([`reserve`]) and not handed out yet: `[reserved, reserved_end)`.
    reserved: usize,
    reserved_end: usize,
}

impl Region {
    const fn new() -> Region {
        Region { base: 0, cursor: 0, free: [(0, 0); FREE_RANGES], count: 0, reserved: 0, reserved_end: 0 }
    }

    /// `len` bytes of the part mapped ahead, when that much is left.
    fn take_reserved(&mut self, len: usize) -> Option<usize> {
        let start = self.reserved;
        (start != 0 && self.reserved_end - start >= len).then(|| {
            self.reserved += len;
            start
        })
    }

    /// The address for `len` bytes: the first freed range that fits, else the cursor.
    fn claim(&mut self, len: usize) -> usize {
        if let Some(i) = self.free[..self.count].iter().position(|&(_, size)| size >= len) {
            let (start, size) = self.free[i];
            if size == len {
                self.count -= 1;
                self.free[i] = self.free[self.count];
            } else {
                self.free[i] = (start + len, size - len);
            }
            return start;
        }
        self.cursor += len;
        self.cursor - len
    }

    /// Takes back `[addr, addr + len)`, unmapped, when it lies in the region: merged with the freed
    /// ranges it touches, and given back to the cursor when it ends there.
    fn give_back(&mut self, addr: usize, len: usize) {
        if self.base == 0 || addr < self.base || addr + len > self.cursor || len == 0 {
            return;
        }
        let (mut start, mut end) = (addr, addr + len);
        let mut i = 0;
        while i < self.count {
            let (s, size) = self.free[i];
            if s + size == start || end == s {
                (start, end) = (start.min(s), end.max(s + size));
                self.count -= 1;
                self.free[i] = self.free[self.count];
            } else {
                i += 1;
            }
        }
        if end == self.cursor {
            self.cursor = start;
        } else if self.count < FREE_RANGES {
            self.free[self.count] = (start, end - start);
            self.count += 1;
        }
    }
}

static HEAP: spin::Mutex<Region> = spin::Mutex::new(Region::new());
static STACKS: spin::Mutex<Region> = spin::Mutex::new(Region::new());

thread_local! {
    /// This thread holds a region's lock (a signal handler mapping now lets the kernel choose).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// The start of the heap's region: 1 TiB below this library, which the loader mapped near the top of
/// the address space; `None` where that is not an address (a 32-bit layout, a library mapped low).
fn heap_base() -> Option<usize> {
    let here = std::ptr::addr_of!(HEAP) as usize;
    (here & !((1 << 30) - 1)).checked_sub(REGION_OFFSET).filter(|&start| start >= 1 << 32)
}

/// The address range `use_`'s region has handed out so far (`(0, 0)`: none, or this thread holds a
/// region's lock).
pub fn span(use_: Use) -> (usize, usize) {
    with_region(use_, |region| (region.base, region.cursor.max(region.reserved_end))).unwrap_or((0, 0))
}

/// Runs `f` on `use_`'s region with its lock held; `None` when this thread holds one already.
fn with_region<R>(use_: Use, f: impl FnOnce(&mut Region) -> R) -> Option<R> {
    if HOLDING.with(|holding| holding.replace(true)) {
        return None;
    }
    let mut region = match use_ {
        Use::Heap => HEAP.lock(),
        Use::Stacks => STACKS.lock(),
    };
    let result = f(&mut region);
    drop(region);
    HOLDING.with(|holding| holding.set(false));
    Some(result)
}

/// Takes both regions' locks and keeps them (a `fork`'s prepare handler, after the heap's locks).
pub fn hold_for_fork() {
    std::mem::forget(HEAP.lock());
    std::mem::forget(STACKS.lock());
}

/// Releases what [`hold_for_fork`] took (in the parent and in the child, after the fork).
pub fn release_after_fork() {
    // SAFETY: `hold_for_fork` took both locks on this thread, the one that forked, and left them
    // held; nobody else has them.
    unsafe {
        HEAP.force_unlock();
        STACKS.force_unlock();
    }
}

/// Maps `len` bytes (rounded up to pages) of private, readable and writable, zeroed memory in
/// `use_`'s region. `None` when the kernel refuses.
pub fn map(len: usize, use_: Use) -> Option<usize> {
    let len = len.next_multiple_of(PAGE);
    if let Some(Some(start)) = with_region(use_, |region| region.take_reserved(len)) {
        return Some(start);
    }
    map_new(len, use_)
}

/// Before `main`: maps `len` bytes of `use_`'s region now, for [`map`] to hand out later without a
/// system call, so that what racewatch maps while the program runs (the detector's start, in the
/// program's first `pthread_create`) does not change the program's `VmSize`. Once.
pub fn reserve(len: usize, use_: Use) {
    let len = len.next_multiple_of(PAGE);
    if with_region(use_, |region| region.reserved_end != 0) != Some(false) {
        return;
    }
    if let Some(start) = map_new(len, use_) {
        with_region(use_, |region| (region.reserved, region.reserved_end) = (start, start + len));
    }
}

/// Unmaps what is left of `use_`'s part mapped ahead ([`reserve`]): before an `mlockall(MCL_CURRENT)`,
/// which would lock it and count it against the program's budget.
pub fn release_reserve(use_: Use) {
    let left = with_region(use_, |region| {
        let left = (region.reserved, region.reserved_end);
        region.reserved = region.reserved_end;
        left
    });
    if let Some((start, end)) = left.filter(|&(start, end)| start < end) {
        unmap(start, end - start, use_);
    }
}

fn map_new(len: usize, use_: Use) -> Option<usize> {
    let hint = with_region(use_, |region| {
        if region.base == 0 {
            let base = heap_base()? + if use_ == Use::Stacks { STACKS_OFFSET } else { 0 };
            (region.base, region.cursor) = (base, base);
        }
        Some(region.claim(len))
    })
    .flatten()
    .unwrap_or(0);
    let noreserve = if use_ == Use::Stacks { libc::MAP_NORESERVE } else { 0 };
    crate::sys::budget::before_mapping(len);
    // A fresh private anonymous mapping; the hint is only a hint (no MAP_FIXED).
    let addr = super::raw::mmap_anonymous(hint, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | noreserve);
    if addr as usize != hint && hint != 0 {
        // Not where asked (the program mapped that range): the range stays the region's to reuse.
        with_region(use_, |region| region.give_back(hint, len));
    }
    crate::sys::budget::mapped();
    (addr != libc::MAP_FAILED).then_some(addr as usize)
}

/// Before `main`: closes the gap the kernel left above racewatch's own module with an inaccessible
/// mapping. The module's file mapping is over 2 MiB, and the kernel aligns such file mappings to 2 MiB
/// for huge pages, leaving up to 2 MiB free between the module's end and the mapping above it, where
/// the program's libraries would lie packed without racewatch. Left open, the program's next mappings
/// land there instead of below its libraries, next to other anonymous mappings they merge with (one
/// `/proc/self/maps` line where there would have been two; set 37 p49). Closed, they land where they
/// would without racewatch, beside what they would have beside. Address space only (no memory, no
/// commit charge); none under an `RLIMIT_AS` or `RLIMIT_DATA`, and unmapped again before the program's
/// `mlockall(MCL_CURRENT)`; no effect where there is no gap or it is 2 MiB or more (not the alignment's).
pub fn close_gap_above_own_module() {
    if crate::sys::mem::memory_budgeted() {
        return; // Under an address-space limit the gap's address space is the program's.
    }
    let here = std::ptr::addr_of!(HEAP) as usize;
    let (mut end, mut gap) = (0usize, None);
    crate::sys::raw::for_each_line(c"/proc/self/maps", &mut |line| {
        let Some((start, stop, _)) = crate::sys::raw::maps_entry(line) else { return false };
        if end == 0 {
            if (start..stop).contains(&here) {
                end = stop;
            }
            return true;
        }
        if start == end {
            end = stop; // The module's next segment, or its zero-filled part.
            return true;
        }
        gap = Some((end, start));
        false
    });
    let Some((start, stop)) = gap.filter(|&(start, stop)| stop > start && stop - start < 2 << 20) else { return };
    // MAP_FIXED_NOREPLACE maps only where nothing is mapped (it fails otherwise).
    let flags = libc::MAP_PRIVATE | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
    let at = super::raw::mmap_anonymous(start, stop - start, libc::PROT_NONE, flags);
    if at as usize == start {
        *GAP.lock() = (start, stop - start);
    }
}

/// The mapping [`close_gap_above_own_module`] made: start and length (0: none).
static GAP: spin::Mutex<(usize, usize)> = spin::Mutex::new((0, 0));

/// The mapping over the gap above racewatch's module: start and length (`(0, 0)`: none, or its record is
/// being changed right now).
pub fn gap_above_own_module() -> (usize, usize) {
    GAP.try_lock().map_or((0, 0), |gap| *gap)
}

/// Unmaps the gap's mapping again: before an `mlockall(MCL_CURRENT)`, which counts every mapping, an
/// inaccessible one too, against the program's `RLIMIT_MEMLOCK` (three 1 MiB thread stacks no longer fit
/// a budget that held them without racewatch).
pub fn open_gap_above_own_module() {
    let (start, len) = std::mem::take(&mut *GAP.lock());
    if len != 0 {
        crate::sys::raw::munmap(start, len);
    }
}

/// Unmaps what [`map`] returned for `use_` (or a page-aligned part of it), and gives its range back to
/// the region.
pub fn unmap(addr: usize, len: usize, use_: Use) {
    let len = len.next_multiple_of(PAGE);
    // `addr..addr + len` is a mapping of racewatch's that nothing uses any more.
    if crate::sys::raw::munmap(addr, len) {
        with_region(use_, |region| region.give_back(addr, len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region() -> Region {
        let mut region = Region::new();
        (region.base, region.cursor) = (1 << 40, 1 << 40);
        region
    }

    #[test]
    fn freed_ranges_are_reused_first_fit_and_merge() {
        let mut r = region();
        let a = r.claim(PAGE);
        let b = r.claim(4 * PAGE);
        let c = r.claim(PAGE);
        let d = r.claim(PAGE);
        assert_eq!((b - a, c - b, d - c), (PAGE, 4 * PAGE, PAGE));
        r.give_back(b, 4 * PAGE);
        assert_eq!(r.claim(2 * PAGE), b, "a hole that fits is reused");
        assert_eq!(r.claim(3 * PAGE), d + PAGE, "one that does not is passed over");
        r.give_back(a, PAGE);
        r.give_back(c, PAGE);
        assert_eq!(r.count, 2, "a, and the rest of b's hole with c: the two pages in use between them");
        r.give_back(b, 2 * PAGE);
        assert_eq!(r.count, 1);
        assert_eq!(r.free[0], (a, 6 * PAGE), "a, b's four pages and c merged");
        assert_eq!(r.claim(6 * PAGE), a);
        assert_eq!(r.count, 0);
    }

    #[test]
    fn a_range_freed_at_the_end_gives_the_cursor_back() {
        let mut r = region();
        let start = r.cursor;
        let a = r.claim(PAGE);
        let b = r.claim(2 * PAGE);
        let c = r.claim(PAGE);
        r.give_back(b, 2 * PAGE);
        r.give_back(c, PAGE);
        assert_eq!(r.cursor, b, "c and then the hole before it went back to the cursor");
        assert_eq!(r.count, 0);
        r.give_back(a, PAGE);
        assert_eq!(r.cursor, start);
        // Outside the region, or beyond what it handed out: ignored.
        r.give_back(start - PAGE, PAGE);
        r.give_back(start + 8 * PAGE, PAGE);
        assert_eq!((r.cursor, r.count), (start, 0));
    }

    #[test]
    fn mappings_go_below_the_libraries_and_holes_are_filled() {
        let a = map(PAGE, Use::Heap).unwrap();
        let b = map(3 * PAGE, Use::Heap).unwrap();
        let here = std::ptr::addr_of!(HEAP) as usize;
        assert!(a < here && here - a >= REGION_OFFSET / 2, "{a:#x} vs {here:#x}");
        let s = map(PAGE, Use::Stacks).unwrap();
        assert!(s > b, "the stacks' region lies above the heap's: {b:#x}, {s:#x}");
        unmap(a, PAGE, Use::Heap);
        let again = map(PAGE, Use::Heap).unwrap();
        unmap(b, 3 * PAGE, Use::Heap);
        unmap(again, PAGE, Use::Heap);
        unmap(s, PAGE, Use::Stacks);
    }
}
