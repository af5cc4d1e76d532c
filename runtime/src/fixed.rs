//! Fixed storage for paths that must not allocate (signal handlers, a process dying of a fatal signal
//! whose heap may be corrupt): formatted text ([`FixedBuf`]) and a table of keys ([`KeySlots`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A table of `N` (a power of two) slots for non-zero `u64` keys, beside which a user keeps its own
/// per-slot atomics: a key lives in one of [`KeySlots::PROBES`] slots after its hash, the first free one
/// it claimed. No allocation, no lock; a full neighbourhood gives no slot. Async-signal-safe.
pub struct KeySlots<const N: usize> {
    keys: [AtomicU64; N],
}

impl<const N: usize> KeySlots<N> {
    /// Slots probed per lookup.
    pub const PROBES: usize = 8;

    pub const fn new() -> Self {
        KeySlots { keys: [const { AtomicU64::new(0) }; N] }
    }

    /// The slots `key` may occupy, in probe order.
    fn probes(key: u64) -> impl Iterator<Item = usize> {
        let start = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - N.ilog2())) as usize;
        (0..Self::PROBES).map(move |i| (start + i) & (N - 1))
    }

    /// `key`'s slot, taken for it when it has none yet.
    pub fn claim(&self, key: u64) -> Option<usize> {
        Self::probes(key).find(|&slot| {
            match self.keys[slot].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(held) => held == key,
            }
        })
    }

    /// `key`'s slot, when it has one (only looks).
    pub fn find(&self, key: u64) -> Option<usize> {
        Self::probes(key).find(|&slot| self.keys[slot].load(Ordering::Acquire) == key)
    }

    /// Frees every slot.
    pub fn clear(&self) {
        for key in &self.keys {
            key.store(0, Ordering::Relaxed);
        }
    }
}

impl<const N: usize> Default for KeySlots<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Up to `N` bytes of formatted text; what does not fit is cut at a character boundary.
pub struct FixedBuf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> FixedBuf<N> {
    pub const fn new() -> Self {
        FixedBuf { bytes: [0; N], len: 0 }
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn as_str(&self) -> &str {
        let bytes = &self.bytes[..self.len];
        match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(cut) => std::str::from_utf8(&bytes[..cut.valid_up_to()]).unwrap_or_default(),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl<const N: usize> Default for FixedBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for FixedBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = N - self.len;
        let take = s.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        if take < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn a_key_claims_one_slot_and_is_found_there_until_cleared() {
        let table = KeySlots::<16>::new();
        assert_eq!(table.find(7), None, "a look takes no slot");
        let slot = table.claim(7).expect("a free slot");
        assert_eq!(table.claim(7), Some(slot));
        assert_eq!(table.find(7), Some(slot));
        // Every key whose neighbourhood is full gets none.
        let claimed = (1..200u64).filter_map(|key| table.claim(key)).count();
        assert!(claimed <= 16, "{claimed} keys in 16 slots");
        table.clear();
        assert_eq!(table.find(7), None);
    }

    #[test]
    fn keeps_what_fits_and_cuts_at_a_character() {
        let mut buf = FixedBuf::<8>::new();
        assert!(write!(buf, "ab{}", 12).is_ok());
        assert_eq!(buf.as_str(), "ab12");
        assert!(write!(buf, "éééé").is_err());
        assert_eq!(buf.as_str(), "ab12éé");
        buf.clear();
        assert_eq!(buf.as_str(), "");
    }
}
