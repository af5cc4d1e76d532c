//! Private-memory bias: a region that only one thread was ever seen to use is watched less often.
//!
//! A race needs two threads on the same bytes. Most memory a thread touches is its own (its heap
//! objects, its buffers): a watch there stalls the thread for a whole window and can never trap. The
//! sampler sees which thread makes each watched access, so each region of memory remembers the first thread
//! whose access was watched on it and how often; a region is *shared* from the moment a second thread's
//! access lands on it, or a watch on it traps in another thread. A sample on a shared region is watched
//! as before; on a region only its own thread was seen on, the first [`GRACE`] watches happen as before
//! and then one sample in [`PRIVATE_ODDS`], thinning with each watch to one in [`MAX_PRIVATE_ODDS`]. Regions are 64 KiB ([`REGION_SHIFT`]): a thread's buffer
//! of a megabyte is 16 of them, so its grace is soon spent; a global or a shared array lies in a region
//! both threads are seen on. A clean program whose threads each stream over their own
//! memory then arms a small fraction of the watches it used to (issue 24: the test profile's cost on
//! such a workload), while any region two threads were seen on (a shared array, a global, a queue's
//! slots) keeps every watch.
//!
//! Used where the cold-code bias ([`crate::bias`]) is off, the test profile: at the production and
//! debug rates that bias already thins hot loops, and a race on a rarely run path must be watched from
//! its first samples (here they would be thinned until the other thread's samples landed there too:
//! the default rate's time to a cold race went from 6 s to 10 s, median of 5).
//!
//! Async-signal-safe: one fixed table of atomics ([`KeySlots`]), no allocation, no lock. A full
//! neighbourhood, or a lost update between two threads, only ever errs towards watching.

use crate::fixed::KeySlots;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// Table slots (a power of two): distinct regions remembered.
const SLOTS: usize = 1 << 13;
/// log2 of the bytes of a region.
const REGION_SHIFT: u32 = 16;
/// Watches a region gets as before while only one thread was seen on it.
const GRACE: u32 = 2;
/// After that, a private region's next watch happens with probability 1 / PRIVATE_ODDS (a power of two),
/// and each watch after it halves the odds, down to 1 / [`MAX_PRIVATE_ODDS`]: a region seen private
/// again and again earns its thinning (a thread's own buffer is sampled hundreds of times a second).
const PRIVATE_ODDS: u64 = 8;
/// The thinnest a private region gets (a power of two).
const MAX_PRIVATE_ODDS: u64 = 256;
/// `WATCHES` bit: a second thread was seen in the region.
const SHARED: u32 = 1 << 31;

static REGIONS: KeySlots<SLOTS> = KeySlots::new();
static OWNERS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
static WATCHES: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];

/// The region key of `addr` (never 0: the key 0 marks a free slot).
fn region(addr: u64) -> u64 {
    (addr >> REGION_SHIFT).max(1)
}

/// Whether to watch an access of thread `tid` at `addr` now, given a uniform random `random`; notes the
/// access (and the watch, when yes).
pub fn should_watch(addr: u64, tid: i32, random: u64) -> bool {
    let Some(slot) = REGIONS.claim(region(addr)) else { return true };
    let owner = match OWNERS[slot].compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => tid,
        Err(owner) => owner,
    };
    if owner != tid {
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

/// The odds against watching a private region that was watched `watches` (>= [`GRACE`]) times.
fn private_odds(watches: u32) -> u64 {
    let doublings = (watches - GRACE).min(MAX_PRIVATE_ODDS.trailing_zeros());
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
    for (owner, watches) in OWNERS.iter().zip(&WATCHES) {
        owner.store(0, Ordering::Relaxed);
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
        let next = (0..2 * PRIVATE_ODDS).filter(|&r| should_watch(private + 64, 41, r)).count();
        assert_eq!(next, 1, "then one in twice as many");
        for _ in 0..64 {
            (0..MAX_PRIVATE_ODDS).for_each(|r| {
                should_watch(private + 64, 41, r);
            });
        }
        let thinnest = (0..4 * MAX_PRIVATE_ODDS).filter(|&r| should_watch(private + 64, 41, r)).count();
        assert_eq!(thinnest, 4, "down to one in {MAX_PRIVATE_ODDS}");
        assert!(!is_shared(private));
        assert!(should_watch(private + 60_000, 42, 1), "another thread's access in the region is watched");
        assert!(is_shared(private));
        assert_eq!((0..64u64).filter(|&r| should_watch(private, 41, r)).count(), 64, "shared: every sample");
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
