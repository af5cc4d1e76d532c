//! The PCs of known races (`pc:` lines of the suppressions file): the sampler never watches them, so a
//! race the fleet already knows stops spending its watches.
//!
//! Written once, before sampling starts, and read by the signal handler: a fixed table of atomics,
//! sorted, searched by bisection; no allocation, no lock.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Most PCs kept (more are warned about and left out).
pub const CAPACITY: usize = 4096;

static PCS: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];
static LEN: AtomicUsize = AtomicUsize::new(0);

/// Installs the run-time PCs never to watch; returns how many were left out for lack of room.
pub fn install(mut pcs: Vec<u64>) -> usize {
    pcs.sort_unstable();
    pcs.dedup();
    let kept = pcs.len().min(CAPACITY);
    LEN.store(0, Ordering::Release);
    for (slot, &pc) in PCS.iter().zip(&pcs[..kept]) {
        slot.store(pc, Ordering::Relaxed);
    }
    LEN.store(kept, Ordering::Release);
    pcs.len() - kept
}

/// Whether `pc` is the access of a suppressed race. Async-signal-safe.
pub fn contains(pc: u64) -> bool {
    let (mut lo, mut hi) = (0, LEN.load(Ordering::Acquire));
    while lo < hi {
        let mid = (lo + hi) / 2;
        match PCS[mid].load(Ordering::Relaxed).cmp(&pc) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// Resolves `pc:<build-id>+0x<offset>` entries against the loaded modules `(build-id, load bias)`: the
/// run-time PCs of those in a loaded module (entries of modules not loaded are left out).
pub fn resolve(entries: &[(String, u64)], modules: &[(String, u64)]) -> Vec<u64> {
    entries
        .iter()
        .filter_map(|(build_id, offset)| {
            let (_, bias) = modules.iter().find(|(id, _)| !id.is_empty() && id.eq_ignore_ascii_case(build_id))?;
            Some(bias.wrapping_add(*offset))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_pcs_are_found_and_others_are_not() {
        let left_out = install(vec![0x5000, 0x1000, 0x3000, 0x1000]);
        assert_eq!(left_out, 0);
        assert!(contains(0x1000) && contains(0x3000) && contains(0x5000));
        assert!(!contains(0x2000) && !contains(0) && !contains(0x6000));
        install(Vec::new());
        assert!(!contains(0x1000));
    }

    #[test]
    fn entries_resolve_only_in_loaded_modules() {
        let modules = vec![("abcd".to_string(), 0x5555_0000), (String::new(), 0x7000_0000)];
        let entries = vec![("ABCD".to_string(), 0x1234), ("ffff".to_string(), 0x10), (String::new(), 0x10)];
        assert_eq!(resolve(&entries, &modules), vec![0x5555_1234]);
    }
}
