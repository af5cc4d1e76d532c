//! racewatch's heap: the allocator the runtime's Rust code uses, on mappings of its own in the heap's
//! region ([`crate::sys::region`]), never the program's `malloc`.
//!
//! - Blocks of 16 B to 32 KiB come from twelve power-of-two size classes, carved from 64 KiB slabs (a
//!   class's first: 16 KiB, or one block) and
//!   kept on one free list per class; larger ones (or alignments above a page) are mappings of their
//!   own, unmapped when freed (their range goes back to the region for the next one).
//! - Not being the program's `malloc`, racewatch's allocations (a report's symbolization, start-up's
//!   tables) take no arena of glibc's and change none of the figures `mallinfo2`, `malloc_stats` or
//!   `malloc_info` print, and a program that brings its own allocator (jemalloc, mimalloc, a bump
//!   allocator) never sees them.
//! - **Re-entry**: a signal handler that allocated while its thread was inside the heap would wait
//!   for itself; such a nested call maps its block directly (a nested free of a small block leaks it,
//!   counted in [`leaked`] and `stats=1`). `fork` takes every class's lock and the region's first and
//!   releases them on both sides ([`guard_forks`]), so a child never finds one held by a thread it
//!   does not have.

use crate::sys::region::{self, Use};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const PAGE: usize = 4096;
const MIN_SHIFT: u32 = 4;
const MAX_SHIFT: u32 = 15;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
const SLAB: usize = 64 << 10;
/// The size of a class's first slab (or its block, when larger).
const FIRST_SLAB: usize = 16 << 10;
static LEAKED: AtomicU64 = AtomicU64::new(0);

/// Small blocks freed from a nested call, which could not take their class's lock: never reused.
pub fn leaked() -> u64 {
    LEAKED.load(Ordering::Relaxed)
}

fn map(len: usize) -> Option<usize> {
    region::map(len, Use::Heap)
}

fn unmap(addr: usize, len: usize) {
    region::unmap(addr, len);
}

/// One size class: its free list (a block's first word links to the next) and the unused rest of its
/// newest slab.
struct Class {
    free: usize,
    bump: usize,
    end: usize,
}

static HEAP: [spin::Mutex<Class>; CLASSES] = [const { spin::Mutex::new(Class { free: 0, bump: 0, end: 0 }) }; CLASSES];

thread_local! {
    /// This thread is inside the heap (a signal handler that allocates now must not wait for its lock).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The size class of a block of `size` bytes aligned to `align`; `None` for a mapping of its own.
fn class_of(size: usize, align: usize) -> Option<usize> {
    let need = size.max(align).max(1 << MIN_SHIFT).checked_next_power_of_two()?;
    (need <= 1 << MAX_SHIFT && align <= PAGE).then(|| (need.trailing_zeros() - MIN_SHIFT) as usize)
}

/// Runs `f` on class `class` with its lock held; `None` when this thread is inside the heap already.
fn with_class<R>(class: usize, f: impl FnOnce(&mut Class) -> R) -> Option<R> {
    if INSIDE.with(|inside| inside.replace(true)) {
        return None;
    }
    let result = f(&mut HEAP[class].lock());
    INSIDE.with(|inside| inside.set(false));
    Some(result)
}

/// A block of `size` bytes aligned to `align` (a power of two); null when no memory could be had.
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    let Some(class) = class_of(size, align) else { return map_large(size, align) };
    let block = 1usize << (class as u32 + MIN_SHIFT);
    let taken = with_class(class, |c| {
        if c.free != 0 {
            let head = c.free;
            // SAFETY: a free block of this class: its first word is the link written by `dealloc`.
            c.free = unsafe { *(head as *const usize) };
            return head;
        }
        if c.bump + block > c.end {
            // A class's first slab is small: a process that allocates little (no report) maps little,
            // which `mlockall(MCL_FUTURE)` would lock whole (twelve 64 KiB slabs: 0.75 MiB).
            let len = if c.end == 0 { FIRST_SLAB.max(block) } else { SLAB };
            let Some(slab) = map(len) else { return 0 };
            (c.bump, c.end) = (slab, slab + len);
        }
        c.bump += block;
        c.bump - block
    });
    match taken {
        Some(0) => std::ptr::null_mut(),
        Some(addr) => addr as *mut u8,
        // Nested: a mapping of its own; once freed it joins its class's free list like any block.
        None => map(block).map_or(std::ptr::null_mut(), |addr| addr as *mut u8),
    }
}

/// A zeroed block (see [`alloc`]).
pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
    let block = alloc(size, align);
    if !block.is_null() && class_of(size, align).is_some() {
        // SAFETY: `block` is at least `size` writable bytes just allocated (a reused small block may
        // hold old data; mappings are zero already).
        unsafe { std::ptr::write_bytes(block, 0, size) };
    }
    block
}

/// Frees a block [`alloc`] returned for the same `size` and `align`.
///
/// # Safety
/// `ptr` came from [`alloc`], [`alloc_zeroed`] or [`realloc`] with this `size` and `align`, and is not
/// used after this call.
pub unsafe fn dealloc(ptr: *mut u8, size: usize, align: usize) {
    let Some(class) = class_of(size, align) else {
        unmap(ptr as usize, size);
        return;
    };
    let freed = with_class(class, |c| {
        // SAFETY: the caller gives back a block of this class it no longer uses: its first word
        // becomes the free list's link.
        unsafe { *(ptr as *mut usize) = c.free };
        c.free = ptr as usize;
    });
    if freed.is_none() {
        LEAKED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Resizes a block of `size` bytes aligned to `align` to `new_size` bytes: in place when the class (or
/// the pages of a large one) stays the same, else into a new block (copied, the old one freed); null,
/// leaving the old block as it was, when no memory could be had.
///
/// # Safety
/// As for [`dealloc`]: `ptr` is a live block of this `size` and `align`; on success it is not used
/// again (the returned block replaces it).
pub unsafe fn realloc(ptr: *mut u8, size: usize, align: usize, new_size: usize) -> *mut u8 {
    let same = match (class_of(size, align), class_of(new_size, align)) {
        (Some(old), Some(new)) => old == new,
        (None, None) => size.next_multiple_of(PAGE) == new_size.next_multiple_of(PAGE),
        _ => false,
    };
    if same {
        return ptr;
    }
    let new = alloc(new_size, align);
    if !new.is_null() {
        // SAFETY: both blocks are live and distinct; the old one holds at least `size` bytes, the
        // new one `new_size`.
        unsafe { std::ptr::copy_nonoverlapping(ptr, new, size.min(new_size)) };
        // SAFETY: the caller's block, copied and no longer used.
        unsafe { dealloc(ptr, size, align) };
    }
    new
}

/// A mapping of its own for a large block (aligned beyond a page: mapped larger and trimmed).
fn map_large(size: usize, align: usize) -> *mut u8 {
    let len = size.next_multiple_of(PAGE);
    if align <= PAGE {
        return map(len).map_or(std::ptr::null_mut(), |addr| addr as *mut u8);
    }
    let Some(raw) = map(len + align) else { return std::ptr::null_mut() };
    let start = raw.next_multiple_of(align);
    if start > raw {
        unmap(raw, start - raw);
    }
    let tail = raw + len + align - (start + len);
    if tail > 0 {
        unmap(start + len, tail);
    }
    start as *mut u8
}

/// Registers the `fork` handlers that keep the heap and the region whole in a child (once, before the
/// program's `main`): every class's lock and the region's are taken before the fork and released after it
/// on both sides (a thread mapping its alternate stack at the fork would otherwise leave the child's
/// region locked for good).
pub fn guard_forks() {
    extern "C" fn prepare() {
        for class in &HEAP {
            std::mem::forget(class.lock());
        }
        // Then the region's (a slab is mapped with its class's lock held: the same order).
        region::hold_for_fork();
    }
    extern "C" fn release() {
        region::release_after_fork();
        for class in &HEAP {
            // SAFETY: `prepare` took every lock on this thread, the one that forked, and left them
            // held; nobody else has them.
            unsafe { class.force_unlock() };
        }
    }
    // SAFETY: registers plain functions that only take and release spin locks.
    unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_distinct_and_reused() {
        let sizes = [1usize, 8, 16, 24, 100, 4096, 5000, 32 << 10, (32 << 10) + 1, 1 << 20];
        for &size in &sizes {
            for align in [1usize, 8, 64, 4096, 1 << 16] {
                let a = alloc(size, align);
                let b = alloc(size, align);
                assert!(!a.is_null() && !b.is_null() && a != b, "size {size} align {align}");
                assert_eq!(a as usize % align, 0, "size {size} align {align}");
                // SAFETY: both are `size` writable bytes of ours.
                unsafe {
                    std::ptr::write_bytes(a, 0xa5, size);
                    std::ptr::write_bytes(b, 0x5a, size);
                    assert_eq!(*a.add(size - 1), 0xa5);
                }
                // SAFETY: blocks of this size and alignment, no longer used.
                unsafe {
                    dealloc(b, size, align);
                    dealloc(a, size, align);
                }
            }
        }
        // A freed small block can be handed out again; a zeroed one is zero even when reused.
        let a = alloc(48, 8);
        // SAFETY: a 48-byte block, no longer used.
        unsafe { dealloc(a, 48, 8) };
        let z = alloc_zeroed(48, 8);
        // SAFETY: 48 zeroed bytes of ours.
        assert!(unsafe { std::slice::from_raw_parts(z, 48) }.iter().all(|&b| b == 0));
        // SAFETY: as above.
        unsafe { dealloc(z, 48, 8) };
    }

    #[test]
    fn realloc_keeps_the_contents_across_classes_and_mappings() {
        let mut size = 10;
        let p = alloc(size, 8);
        // SAFETY: `size` writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(b"racewatch!".as_ptr(), p, size) };
        let mut p = p;
        for new_size in [12, 200, 40_000, 3 << 20, 100, 10] {
            // SAFETY: `p` is the live block of `size` bytes.
            p = unsafe { realloc(p, size, 8, new_size) };
            assert!(!p.is_null());
            // SAFETY: at least 10 bytes kept from the first write.
            assert_eq!(unsafe { std::slice::from_raw_parts(p, 10) }, b"racewatch!");
            size = new_size;
        }
        // SAFETY: as above.
        unsafe { dealloc(p, size, 8) };
    }
}
