//! Private-memory bias: memory that only one thread was ever seen to use is watched less often.
//!
//! A race needs two threads on the same bytes. Most memory a thread touches is its own (its heap
//! objects, its buffers): a watch there stalls the thread for a whole window and can never trap. The
//! sampler sees which thread makes each sampled access, so each region of memory ([`REGION_SHIFT`]:
//! 64 KiB) remembers the first two threads whose accesses landed in it and, for each, which of its
//! 64 blocks of 1 KiB they touched. The region becomes *shared* once the two threads were seen in one
//! block, a third thread's access lands in it, or a watch on it traps in another thread. A sample on a
//! shared region is watched as before; on a region each thread uses its own blocks of, the first
//! [`GRACE`] watches happen as before, then one sample in [`PRIVATE_ODDS`], thinning with each watch to
//! one in [`MAX_PRIVATE_ODDS`]. A thread's buffer of a megabyte is 16 regions, so its grace is soon
//! spent; two buffers that lie next to each other (adjacent `mmap`s) share a region but no block; a
//! global, a shared array or a queue's slots lie in blocks both threads are seen in. A clean program
//! whose threads each stream over their own memory then arms a small fraction of the watches it used
//! to (issue 24: the test profile's cost on such a workload), while any block two threads were seen in
//! keeps its region's every watch.
//!
//! Used where the cold-code bias ([`crate::bias`]) is off, the test profile: at the production and
//! debug rates that bias already thins hot loops, and a race on a rarely run path must be watched from
//! its first samples (here they would be thinned until the other thread's samples landed there too:
//! the default rate's time to a cold race went from 6 s to 10 s, median of 5).
//!
//! Async-signal-safe: one fixed table of atomics ([`KeySlots`]), no allocation, no lock. A full
//! neighbourhood, or a lost update between two threads, only ever errs towards watching.

use crate::fixed::KeySlots;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Table slots (a power of two): distinct regions remembered.
const SLOTS: usize = 1 << 13;
/// log2 of the bytes of a region.
const REGION_SHIFT: u32 = 16;
/// log2 of the bytes of a block: 64 blocks per region, one bit each.
const BLOCK_SHIFT: u32 = REGION_SHIFT - 6;
/// Watches a region gets as before while only one thread was seen on it.
const GRACE: u32 = 2;
/// After that, a private region's next watch happens with probability 1 / PRIVATE_ODDS (a power of two),
/// and each watch after it quarters the odds, down to 1 / [`MAX_PRIVATE_ODDS`]: a region seen private
/// again and again earns its thinning (a thread's own buffer is sampled hundreds of times a second).
const PRIVATE_ODDS: u64 = 8;
/// The thinnest a private region gets (a power of two).
const MAX_PRIVATE_ODDS: u64 = 256;
/// `WATCHES` bit: two threads were seen in one block of the region (or three in it).
const SHARED: u32 = 1 << 31;

static REGIONS: KeySlots<SLOTS> = KeySlots::new();
/// The first two threads seen in each region, and the blocks each was seen in.
static OWNERS: [[AtomicI32; 2]; SLOTS] = [const { [const { AtomicI32::new(0) }; 2] }; SLOTS];
static BLOCKS: [[AtomicU64; 2]; SLOTS] = [const { [const { AtomicU64::new(0) }; 2] }; SLOTS];
static WATCHES: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];

/// The region key of `addr` (never 0: the key 0 marks a free slot).
fn region(addr: u64) -> u64 {
    (addr >> REGION_SHIFT).max(1)
}

/// Whether to watch an access of thread `tid` at `addr` now, given a uniform random `random`; notes the
/// access (and the watch, when yes).
pub fn should_watch(addr: u64, tid: i32, random: u64) -> bool {
    let Some(slot) = REGIONS.claim(region(addr)) else { return true };
    if !note_block(slot, addr, tid) {
        WATCHES[slot].fetch_or(SHARED, Ordering::Relaxed);
        return true;
    }
    let watches = WATCHES[slot].load(Ordering::Relaxed);
    if watches & SHARED == 0 && watches >= GRACE && random % private_odds(watches) != 0 {
        return false;
    }
    WATCHES[slot].fetch_add(1, Ordering::Relaxed);
    true
}

/// Notes that `tid` touched `addr`'s block in the region at `slot`; false when that makes the region
/// shared (the other owner was seen in the block, or `tid` is a third thread). The bit is set before the
/// other's is read (both sequentially consistent), so of two threads reaching one block at once at least
/// one sees the other's.
fn note_block(slot: usize, addr: u64, tid: i32) -> bool {
    let owners = &OWNERS[slot];
    let Some(mine) = (0..2).find(|&i| match owners[i].compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(owner) => owner == tid,
    }) else {
        return false;
    };
    let block = 1u64 << ((addr >> BLOCK_SHIFT) & 63);
    BLOCKS[slot][mine].fetch_or(block, Ordering::SeqCst);
    BLOCKS[slot][1 - mine].load(Ordering::SeqCst) & block == 0
}

/// The odds against watching a private region that was watched `watches` (>= [`GRACE`]) times.
fn private_odds(watches: u32) -> u64 {
    let doublings = (watches - GRACE).saturating_mul(2).min(MAX_PRIVATE_ODDS.trailing_zeros());
    (PRIVATE_ODDS << doublings).min(MAX_PRIVATE_ODDS)
}

/// A watch on `addr` trapped in a thread other than the watcher: its region is shared.
pub fn trapped_elsewhere(addr: u64) {
    if let Some(slot) = REGIONS.claim(region(addr)) {
        WATCHES[slot].fetch_or(SHARED, Ordering::Relaxed);
    }
}

/// Whether `addr`'s region is known to be shared.
#[cfg(test)]
fn is_shared(addr: u64) -> bool {
    REGIONS.find(region(addr)).is_some_and(|slot| WATCHES[slot].load(Ordering::Relaxed) & SHARED != 0)
}

/// Forgets every region (a forked child starts afresh).
pub fn reset() {
    REGIONS.clear();
    for ((owners, blocks), watches) in OWNERS.iter().zip(&BLOCKS).zip(&WATCHES) {
        owners.iter().for_each(|owner| owner.store(0, Ordering::Relaxed));
        blocks.iter().for_each(|block| block.store(0, Ordering::Relaxed));
        watches.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_of_one_thread_is_thinned_after_its_grace_and_a_second_thread_shares_it() {
        let private = 0x7100_0000_0000u64;
        let watched = (0..GRACE as u64).filter(|&r| should_watch(private + r * 8, 41, r * PRIVATE_ODDS + 1)).count();
        assert_eq!(watched, GRACE as usize, "the first watches of a region happen as before");
        let later = (0..PRIVATE_ODDS).filter(|&r| should_watch(private + 64, 41, r)).count();
        assert_eq!(later, 1, "then one sample in {PRIVATE_ODDS}");
        let next = (0..4 * PRIVATE_ODDS).filter(|&r| should_watch(private + 64, 41, r)).count();
        assert_eq!(next, 1, "then one in four times as many");
        for _ in 0..64 {
            (0..MAX_PRIVATE_ODDS).for_each(|r| {
                should_watch(private + 64, 41, r);
            });
        }
        let thinnest = (0..4 * MAX_PRIVATE_ODDS).filter(|&r| should_watch(private + 64, 41, r)).count();
        assert_eq!(thinnest, 4, "down to one in {MAX_PRIVATE_ODDS}");
        assert!(!is_shared(private));
        should_watch(private + 60_000, 42, 1);
        assert!(!is_shared(private), "another thread in blocks of its own: still private (adjacent buffers)");
        assert!(should_watch(private + 100, 42, 1), "another thread's access in the first one's block is watched");
        assert!(is_shared(private));
        assert_eq!((0..64u64).filter(|&r| should_watch(private, 41, r)).count(), 64, "shared: every sample");
    }

    #[test]
    fn a_third_thread_makes_a_region_shared() {
        let base = 0x7300_0000_0000u64;
        should_watch(base, 61, 1);
        should_watch(base + 2048, 62, 1);
        assert!(!is_shared(base));
        assert!(should_watch(base + 4096, 63, 1));
        assert!(is_shared(base));
    }

    #[test]
    fn a_trap_from_another_thread_makes_a_region_shared() {
        let addr = 0x7200_0000_1234u64;
        for r in 0..GRACE as u64 * 2 {
            should_watch(addr, 51, r * PRIVATE_ODDS);
        }
        assert!(!should_watch(addr, 51, 1));
        trapped_elsewhere(addr + 8);
        assert!(should_watch(addr, 51, 1));
    }
}
