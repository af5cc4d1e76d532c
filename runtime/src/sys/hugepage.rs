//! Read-mostly arrays backed by their own anonymous mapping, aligned to 2 MiB
//! and advised `MADV_HUGEPAGE`, so random reads across a few MiB miss the TLB
//! far less. The tail beyond the last whole huge page stays on 4 KiB pages, so
//! the mapping wastes less than one 4 KiB page. Reads are plain slice reads
//! (async-signal-safe); creating and dropping one is not for signal handlers.

use std::ops::Deref;

const HUGE: usize = 2 << 20;
const PAGE: usize = 4096;

/// An immutable `[u64]` in its own mapping (a plain `Vec` when small or when mapping fails).
#[derive(Debug)]
pub struct HugeSlice {
    /// The data: the mapping, or `fallback`'s buffer (dangling when empty), so a
    /// read is one pointer away whichever holds it.
    ptr: *mut u64,
    len: usize,
    /// Bytes mapped (0: `fallback` holds the data).
    mapped: usize,
    fallback: Vec<u64>,
}

// SAFETY: the mapping is owned, written only in `from_slice` before the value is
// shared, then only read; it is unmapped once, in `drop`.
unsafe impl Send for HugeSlice {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for HugeSlice {}

impl HugeSlice {
    /// An empty slice (no mapping).
    pub const fn empty() -> HugeSlice {
        HugeSlice { ptr: std::ptr::NonNull::dangling().as_ptr(), len: 0, mapped: 0, fallback: Vec::new() }
    }

    /// `data` in an ordinary heap buffer.
    fn on_heap(data: &[u64]) -> HugeSlice {
        let mut fallback = data.to_vec();
        // The buffer stays put when the `Vec` (and `self`) moves.
        HugeSlice { ptr: fallback.as_mut_ptr(), len: fallback.len(), mapped: 0, fallback }
    }

    /// Copies `data` into a huge-page mapping when it spans at least one huge page.
    pub fn from_slice(data: &[u64]) -> HugeSlice {
        let bytes = std::mem::size_of_val(data);
        if bytes < HUGE {
            return HugeSlice::on_heap(data);
        }
        let mapped = bytes.div_ceil(PAGE) * PAGE;
        // Reserve one huge page more, keep the 2 MiB-aligned part, unmap the rest.
        let reserve = mapped + HUGE;
        let Some(raw) = super::mem::map_private(reserve) else {
            return HugeSlice::on_heap(data);
        };
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE);
        let (head, tail) = (aligned - start, start + reserve - (aligned + mapped));
        // Both ranges lie inside the mapping just made and outside the kept part.
        if head > 0 {
            super::raw::munmap(start, head);
        }
        if tail > 0 {
            super::raw::munmap(aligned + mapped, tail);
        }
        super::budget::note_own(aligned, mapped);
        // SAFETY: advice only, on the kept part of the mapping just made; failure (THP disabled) leaves
        // ordinary pages.
        unsafe { libc::madvise(aligned as *mut libc::c_void, mapped, libc::MADV_HUGEPAGE) };
        let ptr = aligned as *mut u64;
        // SAFETY: `ptr` is page-aligned, writable, `mapped >= bytes` long and owned here.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        HugeSlice { ptr, len: data.len(), mapped, fallback: Vec::new() }
    }

    /// Bytes held (the mapping, or the fallback's capacity).
    pub fn memory_bytes(&self) -> usize {
        if self.mapped > 0 {
            self.mapped
        } else {
            self.fallback.capacity() * std::mem::size_of::<u64>()
        }
    }
}

impl Default for HugeSlice {
    fn default() -> HugeSlice {
        HugeSlice::empty()
    }
}

impl Deref for HugeSlice {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        // SAFETY: `ptr` (the mapping or `fallback`'s buffer, never reallocated;
        // dangling only for `len == 0`) holds `len` initialised u64s for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for HugeSlice {
    fn drop(&mut self) {
        if self.mapped > 0 {
            // The mapping is ours and no borrow of it outlives `self`.
            super::raw::munmap(self.ptr as usize, self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_hold_their_data() {
        for n in [0, 10, HUGE / 8 - 1, HUGE / 8 + 12345] {
            let data: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
            let huge = HugeSlice::from_slice(&data);
            assert_eq!(&huge[..], &data[..]);
            assert!(huge.memory_bytes() >= n * 8 && huge.memory_bytes() < n * 8 + PAGE + 1024, "{n}");
            if n * 8 >= HUGE {
                assert_eq!(huge.as_ptr() as usize % HUGE, 0);
            }
        }
        assert!(HugeSlice::empty().is_empty());
    }
}
