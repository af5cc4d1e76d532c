//! racewatch's own calls into libc go to libc.
//!
//! The loader binds each function racewatch imports (`mmap`, `ioctl`, `write`, `open`, `clock_gettime`,
//! …) to the first definition in the process's global scope, and a library the program links, or
//! preloads after racewatch, comes before libc there. Its wrapper (a memory profiler's `mmap`, a
//! tracer's `ioctl`, a clock library) would then see racewatch's calls, answer them its own way, or be
//! unsafe where racewatch calls it: in a signal handler, a wrapper that calls `dlsym` deadlocks on the
//! loader's lock held by the thread it interrupted. At start, each such binding in racewatch's global
//! offset table is pointed at libc's own definition (its default version, which is what racewatch was
//! linked against) instead.
//!
//! Left as the loader bound them: the `malloc` family (glibc allocates with the program's `malloc`, so
//! what racewatch frees of glibc's goes back to it), data objects (a copy in the executable is the one in
//! use) and everything racewatch defines itself (its interposers).

use super::dl::Loaded;
use super::raw;

const PAGE: u64 = 4096;

/// Kept bound to the program's allocator.
const ALLOCATOR: &[&[u8]] = &[
    b"malloc",
    b"free",
    b"calloc",
    b"realloc",
    b"reallocarray",
    b"posix_memalign",
    b"aligned_alloc",
    b"memalign",
    b"valloc",
    b"pvalloc",
    b"malloc_usable_size",
];

/// Points racewatch's imports of libc functions bound elsewhere at libc's definitions; how many it
/// moved. Call from the constructor, before racewatch's own threads and handlers exist.
pub fn bind_to_libc() -> usize {
    let Some(libc) = Loaded::find(c"libc.so.6") else { return 0 };
    let Some((own, relro)) = Loaded::containing((bind_to_libc as fn() -> usize) as usize as u64) else { return 0 };
    // No allocation here: racewatch's heap maps its memory with `mmap`, one of the imports to move.
    let moves = || {
        own.imports()
            .filter(|import| !ALLOCATOR.contains(&import.name.to_bytes()))
            .filter_map(|import| Some((import.slot, libc.function(import.name)?)))
            // SAFETY: the loader's slot for this import, mapped with racewatch's module.
            .filter(|&(slot, target)| unsafe { slot.read() } != target)
    };
    if moves().next().is_none() {
        return 0;
    }
    // The slots of a BIND_NOW build are in its RELRO range, whose whole pages the loader made read-only
    // after relocating (as it does: start and end rounded down): writable only while they are written.
    let pages = relro.map(|(start, end)| (start & !(PAGE - 1), end & !(PAGE - 1))).filter(|(start, end)| end > start);
    let protect = |prot: i32| match pages {
        Some((start, end)) => raw::syscall6(libc::SYS_mprotect, [start, end - start, prot as u64, 0, 0, 0]) == 0,
        None => true,
    };
    if !protect(libc::PROT_READ | libc::PROT_WRITE) {
        return 0;
    }
    let mut moved = 0;
    for (slot, target) in moves() {
        // SAFETY: a slot of racewatch's own offset table, writable now; no racewatch code that calls
        // through it runs concurrently before the constructor finishes (and a call that did would get
        // either address, both whole).
        unsafe { std::ptr::write_volatile(slot, target) };
        moved += 1;
    }
    protect(libc::PROT_READ);
    moved
}
