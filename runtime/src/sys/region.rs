//! Where racewatch's anonymous mappings go: one region of the address space, in the range the kernel
//! never hands out for the program's `mmap`s.
//!
//! The kernel hands the program's `mmap`s out from the top of its mapping area down: that area ends
//! (`mmap_base`) below a gap it keeps for the main thread's stack to grow into, and the loader's own
//! mapping lies at its top. racewatch's region starts a page above the highest mapping below the main
//! stack and grows up, never nearer the stack than the stack's `RLIMIT_STACK` (and 64 MiB) and the
//! kernel's guard gap. Each mapping of racewatch's asks (`mmap`'s hint, never `MAP_FIXED`) for an
//! address there: a range freed earlier that fits, else the region's next address. So racewatch never
//! takes the place the program's next mapping would have had (with randomisation off, the program's
//! mappings land at the same addresses in every run whatever racewatch maps meanwhile), its heap stays a
//! few runs of pages (`/proc/self/maps` shows a few lines, not one per block it ever freed), and the
//! program's free ranges stay whole: a program that reserves its whole address space in large pieces
//! gets as many as without racewatch (set 42 p20: 127 of 1 TiB, then 1023 of 1 GiB; with the regions of
//! before, 1 TiB below the libraries, 126 and 2045). In the legacy layout (the program's mappings grow
//! up from a third of the address space: `setarch -L`, an unlimited stack at `exec`) the region grows up from
//! 1 TiB below racewatch's module instead, as does a mapping once the region is full. A hint the kernel
//! cannot honour (the program mapped that range itself) leaves the placement to the kernel, as usual.

use std::cell::Cell;

const PAGE: usize = 4096;
/// Where the layout gives no stack gap: how far below racewatch's module the region starts, and how
/// far it may grow.
const REGION_OFFSET: usize = 1 << 40;
/// The least room kept for the main thread's stack below its top (more when its `RLIMIT_STACK` is
/// larger), besides the kernel's guard gap between a stack and the mapping below it.
const STACK_ROOM: usize = 64 << 20;
const STACK_GUARD_GAP: usize = 1 << 20;
/// Freed ranges remembered for reuse (more are forgotten: address space, not memory).
const FREE_RANGES: usize = 64;

/// What a mapping is for (its flags; both share the one region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// racewatch's heap: slabs and large blocks (rw, counted against the commit limit).
    Heap,
    /// Alternate and runtime signal stacks (`MAP_NORESERVE`, with guard pages).
    Stacks,
}

/// The region `[base, limit)`: `[base, cursor)` handed out, and the ranges given back below the cursor.
#[derive(Debug)]
struct Region {
    /// Where the region starts (0: not known yet, or no region).
    base: usize,
    cursor: usize,
    limit: usize,
    free: [(usize, usize); FREE_RANGES],
    count: usize,
    /// Mapped ahead ([`reserve`]) and not handed out yet: `[reserved, reserved_end)`.
    reserved: usize,
    reserved_end: usize,
}

impl Region {
    const fn new() -> Region {
        Region { base: 0, cursor: 0, limit: 0, free: [(0, 0); FREE_RANGES], count: 0, reserved: 0, reserved_end: 0 }
    }

    /// Finds where the region lies, once ([`region_bounds`]).
    fn place(&mut self) {
        if self.limit == 0 {
            (self.base, self.limit) = region_bounds().unwrap_or((0, 1));
            self.cursor = self.base;
        }
    }

    /// `len` bytes of the part mapped ahead, when that much is left.
    fn take_reserved(&mut self, len: usize) -> Option<usize> {
        let start = self.reserved;
        (start != 0 && self.reserved_end - start >= len).then(|| {
            self.reserved += len;
            start
        })
    }

    /// The address for `len` bytes: the first freed range that fits, else the cursor; `None` when the
    /// region is full.
    fn claim(&mut self, len: usize) -> Option<usize> {
        if let Some(i) = self.free[..self.count].iter().position(|&(_, size)| size >= len) {
            let (start, size) = self.free[i];
            if size == len {
                self.count -= 1;
                self.free[i] = self.free[self.count];
            } else {
                self.free[i] = (start + len, size - len);
            }
            return Some(start);
        }
        let start = self.cursor;
        (start.checked_add(len)? <= self.limit).then(|| {
            self.cursor += len;
            start
        })
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

static REGION: spin::Mutex<Region> = spin::Mutex::new(Region::new());

thread_local! {
    /// This thread holds the region's lock (a signal handler mapping now lets the kernel choose).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// Where the region lies, `[base, limit)`: in the gap above the kernel's mapping area and below the
/// main thread's stack, or 1 TiB below this library (which the loader mapped near the top) in the
/// legacy layout or where the maps show no such gap; `None` where neither is an address (a 32-bit
/// layout, a library mapped low).
fn region_bounds() -> Option<(usize, usize)> {
    let here = std::ptr::addr_of!(REGION) as usize;
    // The kernel's usual layout: the libraries near the top (above half the 47-bit address space) and
    // the executable below them. The legacy one puts the libraries at a third of it, growing up.
    let top_down = here >= 1 << 46 && super::process::program_start().is_some_and(|at| at < here);
    let (mut below, mut stack_end) = (0usize, 0usize);
    crate::sys::raw::for_each_line(c"/proc/self/maps", &mut |line| {
        let Some((_, stop, _)) = crate::sys::raw::maps_entry(line) else { return true };
        if line.ends_with(b"[stack]") {
            stack_end = stop;
            return false;
        }
        below = stop;
        true
    });
    let room = STACK_ROOM.max(super::process::stack_limit()).saturating_add(STACK_GUARD_GAP);
    let gap = (below + PAGE, stack_end.saturating_sub(room));
    if top_down && below > here && gap.0 < gap.1 {
        return Some(gap);
    }
    let base = (here & !((1 << 30) - 1)).checked_sub(REGION_OFFSET).filter(|&base| base >= 1 << 32)?;
    Some((base, base + REGION_OFFSET / 2))
}

/// At start-up, before the program's `main` (and any seccomp filter of its own): finds where the
/// region lies, reading `/proc/self/maps`, so no later mapping of racewatch's reads it.
pub fn place() {
    with_region(Region::place);
}

/// The address range the region has handed out so far (`(0, 0)`: none, or this thread holds its lock).
pub fn span() -> (usize, usize) {
    with_region(|region| (region.base, region.cursor)).unwrap_or((0, 0))
}

/// Runs `f` on the region with its lock held; `None` when this thread holds it already.
fn with_region<R>(f: impl FnOnce(&mut Region) -> R) -> Option<R> {
    if HOLDING.with(|holding| holding.replace(true)) {
        return None;
    }
    let mut region = REGION.lock();
    let result = f(&mut region);
    drop(region);
    HOLDING.with(|holding| holding.set(false));
    Some(result)
}

/// Takes the region's lock and keeps it (a `fork`'s prepare handler, after the heap's locks).
pub fn hold_for_fork() {
    std::mem::forget(REGION.lock());
}

/// Releases what [`hold_for_fork`] took (in the parent and in the child, after the fork).
pub fn release_after_fork() {
    // SAFETY: `hold_for_fork` took the lock on this thread, the one that forked, and left it held; nobody
    // else has it.
    unsafe { REGION.force_unlock() };
}

/// Maps `len` bytes (rounded up to pages) of private, readable and writable, zeroed memory for
/// `use_` in the region. `None` when the kernel refuses.
pub fn map(len: usize, use_: Use) -> Option<usize> {
    let len = len.next_multiple_of(PAGE);
    if use_ == Use::Heap {
        if let Some(Some(start)) = with_region(|region| region.take_reserved(len)) {
            return Some(start);
        }
    }
    map_new(len, use_)
}

/// Before `main`: maps `len` bytes of the heap now, for [`map`] to hand out later without a system
/// call, so that what racewatch maps while the program runs (the detector's start, in the program's
/// first `pthread_create`) does not change the program's `VmSize`. Once.
pub fn reserve(len: usize) {
    let len = len.next_multiple_of(PAGE);
    if with_region(|region| region.reserved_end != 0) != Some(false) {
        return;
    }
    if let Some(start) = map_new(len, Use::Heap) {
        with_region(|region| (region.reserved, region.reserved_end) = (start, start + len));
    }
}

/// Unmaps what is left of the heap's part mapped ahead ([`reserve`]): before an `mlockall(MCL_CURRENT)`,
/// which would lock it and count it against the program's budget.
pub fn release_reserve() {
    let left = with_region(|region| {
        let left = (region.reserved, region.reserved_end);
        region.reserved = region.reserved_end;
        left
    });
    if let Some((start, end)) = left.filter(|&(start, end)| start < end) {
        unmap(start, end - start);
    }
}

fn map_new(len: usize, use_: Use) -> Option<usize> {
    let hint = with_region(|region| {
        region.place();
        (region.base != 0).then(|| region.claim(len)).flatten()
    })
    .flatten()
    .unwrap_or(0);
    let noreserve = if use_ == Use::Stacks { libc::MAP_NORESERVE } else { 0 };
    crate::sys::budget::before_mapping(len);
    // A fresh private anonymous mapping; the hint is only a hint (no MAP_FIXED).
    let addr = super::raw::mmap_anonymous(hint, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | noreserve);
    if addr as usize != hint && hint != 0 {
        // Not where asked (the program mapped that range): the range stays the region's to reuse.
        with_region(|region| region.give_back(hint, len));
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
    let here = std::ptr::addr_of!(REGION) as usize;
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

/// Unmaps what [`map`] returned (or a page-aligned part of it), and gives its range back to the region.
pub fn unmap(addr: usize, len: usize) {
    let len = len.next_multiple_of(PAGE);
    // `addr..addr + len` is a mapping of racewatch's that nothing uses any more.
    if crate::sys::raw::munmap(addr, len) {
        with_region(|region| region.give_back(addr, len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region() -> Region {
        let mut region = Region::new();
        (region.base, region.cursor, region.limit) = (1 << 40, 1 << 40, (1 << 40) + 64 * PAGE);
        region
    }

    #[test]
    fn freed_ranges_are_reused_first_fit_and_merge() {
        let mut r = region();
        let a = r.claim(PAGE).unwrap();
        let b = r.claim(4 * PAGE).unwrap();
        let c = r.claim(PAGE).unwrap();
        let d = r.claim(PAGE).unwrap();
        assert_eq!((b - a, c - b, d - c), (PAGE, 4 * PAGE, PAGE));
        r.give_back(b, 4 * PAGE);
        assert_eq!(r.claim(2 * PAGE), Some(b), "a hole that fits is reused");
        assert_eq!(r.claim(3 * PAGE), Some(d + PAGE), "one that does not is passed over");
        r.give_back(a, PAGE);
        r.give_back(c, PAGE);
        assert_eq!(r.count, 2, "a, and the rest of b's hole with c: the two pages in use between them");
        r.give_back(b, 2 * PAGE);
        assert_eq!(r.count, 1);
        assert_eq!(r.free[0], (a, 6 * PAGE), "a, b's four pages and c merged");
        assert_eq!(r.claim(6 * PAGE), Some(a));
        assert_eq!(r.count, 0);
    }

    #[test]
    fn a_range_freed_at_the_end_gives_the_cursor_back_and_a_full_region_none() {
        let mut r = region();
        let start = r.cursor;
        let a = r.claim(PAGE).unwrap();
        let b = r.claim(2 * PAGE).unwrap();
        let c = r.claim(PAGE).unwrap();
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
        assert_eq!(r.claim(65 * PAGE), None, "beyond the limit");
        assert_eq!(r.claim(64 * PAGE), Some(start), "up to it");
    }

    #[test]
    fn mappings_go_above_every_module_below_the_main_stack_and_holes_are_filled() {
        let a = map(PAGE, Use::Stacks).unwrap();
        let b = map(3 * PAGE, Use::Stacks).unwrap();
        let (mut modules_end, mut stack) = (0, 0);
        crate::sys::raw::for_each_line(c"/proc/self/maps", &mut |line| {
            let (start, stop, _) = crate::sys::raw::maps_entry(line).unwrap();
            if line.ends_with(b"[stack]") {
                stack = start;
            } else if line.contains(&b'/') && stack == 0 {
                modules_end = stop;
            }
            true
        });
        assert!(
            modules_end < a && b + 3 * PAGE < stack,
            "{a:#x}, {b:#x}: modules end {modules_end:#x}, stack {stack:#x}"
        );
        assert_eq!(b - a, PAGE, "the next one above");
        unmap(a, PAGE);
        assert_eq!(map(PAGE, Use::Stacks), Some(a), "the hole is filled");
        unmap(b, 3 * PAGE);
        unmap(a, PAGE);
    }
}
