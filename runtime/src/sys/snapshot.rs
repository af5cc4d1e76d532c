//! An atomically replaceable, immutable value with lock-free, allocation-free
//! readers (safe to use from signal handlers) and a reclaiming writer.
//!
//! Protocol: a reader picks the current epoch's slot, counts itself in, and
//! re-checks the epoch (retrying if a writer flipped it meanwhile) before it
//! loads the pointer. A writer swaps the pointer, flips the epoch and waits
//! until the previous epoch's slot drains; only then is the old value freed.
//! Any reader that can still hold the old pointer counted itself in that slot
//! before loading it, and writers serialise, so a reader confirmed in an older
//! epoch kept an earlier writer waiting until it left. If the old epoch's
//! readers do not drain within [`DRAIN_TIMEOUT`] (a reader stopped for good, or
//! counted by a thread that did not survive `fork`), the old value is leaked.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

/// How long `replace` waits for the old value's readers before leaking it instead.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(200);

/// See the module documentation.
pub struct SnapshotCell<T: 'static> {
    current: AtomicPtr<T>,
    initial: &'static T,
    epoch: AtomicUsize,
    readers: [AtomicUsize; 2],
    writer: Mutex<()>,
}

impl<T: Send + Sync + 'static> SnapshotCell<T> {
    /// A cell holding `initial` (never freed) until the first [`SnapshotCell::replace`].
    pub const fn new(initial: &'static T) -> Self {
        SnapshotCell {
            current: AtomicPtr::new(std::ptr::null_mut()),
            initial,
            epoch: AtomicUsize::new(0),
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            writer: Mutex::new(()),
        }
    }

    /// Runs `f` on the current value. Never blocks, never allocates.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let slot = loop {
            let epoch = self.epoch.load(SeqCst);
            self.readers[epoch & 1].fetch_add(1, SeqCst);
            if self.epoch.load(SeqCst) == epoch {
                break &self.readers[epoch & 1];
            }
            self.readers[epoch & 1].fetch_sub(1, SeqCst);
        };
        struct Leave<'a>(&'a AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, SeqCst);
            }
        }
        let _leave = Leave(slot);
        let ptr = self.current.load(SeqCst);
        let value = if ptr.is_null() {
            self.initial
        } else {
            // SAFETY: non-null pointers in `current` come from `Box::into_raw` in
            // `replace`, which frees a pointer only after swapping it out and waiting
            // for every reader counted in the epoch it was loaded under (this one
            // counted itself in `slot` and confirmed the epoch before the load).
            unsafe { &*ptr }
        };
        f(value)
    }

    /// Publishes `value`; returns once the previous value is freed. Not for signal handlers.
    pub fn replace(&self, value: T) {
        self.replace_if(value, || true);
    }

    /// Publishes `value` if `still_valid()`, checked under the writer lock (so no other writer
    /// publishes between the check and this one). `Some(drained)`: published, and whether every
    /// reader of the previous value left in time (false: the old value was leaked, a reader may
    /// still hold it); `None`: not published.
    pub fn replace_if(&self, value: T, still_valid: impl FnOnce() -> bool) -> Option<bool> {
        let _writer = self.writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !still_valid() {
            return None;
        }
        let new = Box::into_raw(Box::new(value));
        let old = self.current.swap(new, SeqCst);
        let epoch = self.epoch.fetch_add(1, SeqCst);
        let deadline = super::thread::monotonic_ns() + DRAIN_TIMEOUT.as_nanos() as u64;
        while self.readers[epoch & 1].load(SeqCst) != 0 {
            if super::thread::monotonic_ns() > deadline {
                // A reader that never leaves (a thread stopped inside `read`, or
                // one that vanished at `fork`): leak the old value rather than wait
                // forever or free it under the reader.
                return Some(false);
            }
            crate::sys::raw::yield_cpu();
        }
        if !old.is_null() {
            // SAFETY: `old` came from `Box::into_raw` above (an earlier call), is no
            // longer reachable through `current`, and every reader that loaded it
            // has left (see the module documentation).
            drop(unsafe { Box::from_raw(old) });
        }
        Some(true)
    }

    /// In a forked child: readers counted by threads that did not survive the fork are forgotten.
    pub fn forget_readers_after_fork(&self) {
        for readers in &self.readers {
            readers.store(0, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    static ZERO: [u64; 64] = [0; 64];

    #[test]
    fn readers_never_see_freed_or_torn_values() {
        static CELL: SnapshotCell<[u64; 64]> = SnapshotCell::new(&ZERO);
        static STOP: AtomicBool = AtomicBool::new(false);
        let readers: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    let mut reads = 0u64;
                    while reads == 0 || !STOP.load(SeqCst) {
                        CELL.read(|v| {
                            let first = v[0];
                            assert!(v.iter().all(|&x| x == first), "torn value");
                        });
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for round in 1..=2000u64 {
            CELL.replace([round; 64]);
        }
        STOP.store(true, SeqCst);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        assert_eq!(CELL.read(|v| v[63]), 2000);
    }

    /// A reader that never leaves (as after `fork` in another thread) must not hang the writer.
    #[test]
    fn stuck_reader_does_not_block_the_writer() {
        static CELL: SnapshotCell<[u64; 64]> = SnapshotCell::new(&ZERO);
        let (entered, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let (entered_tx, entered_rx) = entered;
        let (release_tx, release_rx) = release;
        let reader = std::thread::spawn(move || {
            CELL.read(|v| {
                entered_tx.send(v[0]).unwrap();
                release_rx.recv().unwrap();
                v[0]
            })
        });
        assert_eq!(entered_rx.recv().unwrap(), 0);
        let started = std::time::Instant::now();
        CELL.replace([1; 64]);
        CELL.replace([2; 64]);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(CELL.read(|v| v[0]), 2);
        release_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap(), 0);
    }
}
