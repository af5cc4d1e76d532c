//! Cold-code bias: a PC is watched less often the more often it was watched.
//!
//! Timer samples land where threads spend their CPU time, so nearly every
//! watch would go to a few hot loops, while races tend to hide in code that
//! runs rarely (LiteRace, PLDI 2009). Each access PC keeps a count of its
//! watches in a fixed table beside the index; a sample whose access PC was
//! watched `n` times arms a watch with probability `2^-(n / STEP)`, never
//! below `2^-MAX_HALVINGS`. The first `STEP` watches of every PC always
//! happen, so a hot race is still caught on its first samples; after that a
//! hot PC gives way, and the sampling rate can be higher for the same cost:
//! a declined sample costs a few microseconds, a watch hundreds.
//!
//! Async-signal-safe: one fixed table of atomics, linear probing over a few
//! slots, no allocation, no lock. A full neighbourhood counts the PC as new.

use crate::fixed::KeySlots;
use std::sync::atomic::{AtomicU32, Ordering};

/// Table slots (a power of two): distinct access PCs remembered.
const SLOTS: usize = 1 << 13;
/// Watches per halving of the probability.
const STEP: u32 = 2;
/// Lowest probability: 2^-MAX_HALVINGS.
const MAX_HALVINGS: u32 = 8;

static KEYS: KeySlots<SLOTS> = KeySlots::new();
static COUNTS: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];

/// How many times `pc` was watched (as far as the table remembers). Only looks: a PC asked about is not
/// given a slot (the sampler asks about every access ahead, and watches one).
pub fn watches(pc: u64) -> u32 {
    KEYS.find(pc).map_or(0, |slot| COUNTS[slot].load(Ordering::Relaxed))
}

/// Whether to watch an access at `pc` now, given a uniform random `random`; counts the watch when yes.
pub fn should_watch(pc: u64, random: u64) -> bool {
    let Some(slot) = KEYS.claim(pc) else { return true };
    let halvings = (COUNTS[slot].load(Ordering::Relaxed) / STEP).min(MAX_HALVINGS);
    let mask = (1u64 << halvings) - 1;
    if random & mask != 0 {
        return false;
    }
    COUNTS[slot].fetch_add(1, Ordering::Relaxed);
    true
}

/// Counts a watch of `pc` without the bias deciding (`cold_bias=0`: the sampler still prefers the least
/// watched of the accesses ahead). Async-signal-safe.
pub fn count_watch(pc: u64) {
    if let Some(slot) = KEYS.claim(pc) {
        COUNTS[slot].fetch_add(1, Ordering::Relaxed);
    }
}

/// Forgets every count (a forked child starts afresh).
pub fn reset() {
    KEYS.clear();
    for count in &COUNTS {
        count.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_watches_always_happen_then_a_pc_backs_off() {
        let pc = 0x5555_1234;
        let mut rng = fastrand::Rng::with_seed(7);
        assert!((0..STEP).all(|_| should_watch(pc, rng.u64(..))), "the first watches of a PC always happen");
        let watched = (0..100_000).filter(|_| should_watch(pc, rng.u64(..))).count();
        // It quickly reaches the floor of 1 in 2^MAX_HALVINGS: a few hundred watches, not 100,000.
        assert!(watched < 100_000 >> (MAX_HALVINGS - 1), "{watched} watches of a hot PC");
        assert!(watched > 100_000 >> (MAX_HALVINGS + 1), "{watched}: never below the floor");
        // A cold PC next to it is still new.
        assert_eq!(watches(pc + 1), 0);
        assert!(should_watch(pc + 1, rng.u64(..)));
    }

    #[test]
    fn asking_takes_no_slot_and_counted_watches_count() {
        let pc = 0x7777_0040;
        assert_eq!(watches(pc), 0);
        assert!(KEYS.find(pc).is_none(), "a look took a slot");
        count_watch(pc);
        count_watch(pc);
        assert_eq!(watches(pc), 2);
    }
}
