//! Whether a timer signal may start the reporter thread where it landed.
//!
//! At production rates the reporter thread is started only when it has work (a race to print, a tracer
//! to watch, a module to scan): from the program's next call into an interposed function, or from a
//! sampling signal whose interrupted thread holds no lock that `pthread_create` takes. That is the case
//! when the thread was running the program's own code, called from nothing but its entry (`_start` and
//! `__libc_start_main`, or `start_thread`) — not from inside libc (a `qsort` comparator, a
//! `dl_iterate_phdr` callback, an `atexit` handler), not from a signal handler (whose frame may sit on
//! top of `malloc`, holding its arena), and where `malloc` is libc's own (a program's allocator in its
//! own code could be interrupted holding its lock). Checked by unwinding the interrupted stack
//! ([`crate::unwind::capture`]); async-signal-safe.

use crate::sys::code;
use crate::sys::signal::{self, Regs};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// The executable segments of libc, the loader and racewatch itself (start, end), set by [`init`].
const RANGES: usize = 8;
static STARTS: [AtomicU64; RANGES] = [const { AtomicU64::new(0) }; RANGES];
static ENDS: [AtomicU64; RANGES] = [const { AtomicU64::new(0) }; RANGES];
/// The program's entry point (`AT_ENTRY`): `_start`, the main thread's outermost frame.
static ENTRY: AtomicU64 = AtomicU64::new(0);
/// Whether `malloc`, `calloc` and `free` are libc's own and libc is glibc 2.35 or later, whose
/// `pthread_create` takes a lock of its own for thread-local storage where earlier ones took the
/// loader's lock, held while a `dlopen`ed library's constructors run (set by [`init`]).
static LIBC_MALLOC: AtomicBool = AtomicBool::new(false);
/// The process [`init`] ran in: a `vfork` child, which shares the parent's memory, never creates a thread.
static PID: AtomicI32 = AtomicI32::new(0);

/// Whether the process runs under a seccomp filter (`Seccomp:` of its status, read now and then): a
/// filter may forbid creating a thread, or kill the process for trying.
static FILTERED: AtomicBool = AtomicBool::new(false);

/// Records whether a seccomp filter is in force (from a reading of `/proc/self/status`).
/// Async-signal-safe.
pub fn set_filtered(filtered: bool) {
    if filtered {
        FILTERED.store(true, Ordering::Release);
    }
}

/// Frames unwound at most; a deeper stack is never a spawn point (the next signal may be).
const MAX_FRAMES: usize = 128;

/// Records where libc, the loader and racewatch lie, and whether the allocator is libc's. Call at the
/// detector's start, outside signal handlers.
pub fn init() {
    let own = init as *const () as u64;
    let mut slot = 0;
    code::for_each(&mut |_, module| {
        let file = module.name.rsplit('/').next().unwrap_or("");
        let system = file.starts_with("libc.so") || file.starts_with("ld-linux");
        let ours = module.segments.iter().any(|&(start, bytes)| (start..start + bytes.len() as u64).contains(&own));
        if !(system || ours) {
            return;
        }
        for &(start, bytes) in &module.segments {
            if slot < RANGES {
                STARTS[slot].store(start, Ordering::Relaxed);
                ENDS[slot].store(start + bytes.len() as u64, Ordering::Release);
                slot += 1;
            }
        }
    });
    ENTRY.store(crate::sys::process::entry_point(), Ordering::Relaxed);
    let libc_allocator =
        [c"malloc", c"calloc", c"free"].iter().all(|name| crate::sys::dl::global_symbol(name).is_some_and(in_system));
    LIBC_MALLOC.store(slot > 0 && libc_allocator && glibc_at_least(2, 35), Ordering::Release);
    PID.store(crate::sys::raw::getpid(), Ordering::Release);
}

/// Whether the C library is glibc `major.minor` or later.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let version = crate::sys::identity::glibc_version();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Whether sampling signals may start the reporter thread in this process at all (after [`init`]):
/// libc's own allocator, glibc 2.35 or later, no seccomp filter seen.
pub fn possible() -> bool {
    LIBC_MALLOC.load(Ordering::Acquire) && !FILTERED.load(Ordering::Acquire)
}

/// Whether `pc` is in libc, the loader or racewatch.
fn in_system(pc: u64) -> bool {
    (0..RANGES).any(|i| (STARTS[i].load(Ordering::Relaxed)..ENDS[i].load(Ordering::Acquire)).contains(&pc))
}

/// Whether the thread interrupted at `regs` (in the program's covered code) may create a thread from
/// its signal handler. Async-signal-safe.
pub fn here(regs: &Regs) -> bool {
    if !LIBC_MALLOC.load(Ordering::Acquire) || FILTERED.load(Ordering::Acquire) || in_system(regs.rip) {
        return false;
    }
    if crate::sys::raw::getpid() != PID.load(Ordering::Acquire) {
        return false;
    }
    // Only a thread glibc made (the one that started the detector, or one created through
    // `pthread_create`): a raw `clone` thread may share another thread's TLS, glibc's thread
    // descriptor included, and `pthread_create` there would corrupt that thread's state.
    if crate::sys::thread::known_slot(crate::sys::raw::gettid()).is_none() {
        return false;
    }
    let mut frames = [0u64; MAX_FRAMES];
    let n = crate::unwind::capture(regs, &mut frames);
    let entry = ENTRY.load(Ordering::Relaxed);
    let is_entry = |pc: u64| entry != 0 && (entry..entry + 64).contains(&pc);
    frames_allow_spawn(&frames[..n], MAX_FRAMES, signal::libc_restorer(), in_system, is_entry)
}

/// The rule of [`here`] over the unwound return addresses (`frames`, innermost first, the interrupted
/// PC excluded; `capacity`: how many the walk could have returned): the walk ended at a thread's
/// entry (its last frame in libc, or `_start`), passed no signal frame (glibc's restorer), and from
/// the first frame in libc, the loader or racewatch down, every frame is there too (but `_start`).
fn frames_allow_spawn(
    frames: &[u64],
    capacity: usize,
    restorer: usize,
    system: impl Fn(u64) -> bool,
    is_entry: impl Fn(u64) -> bool,
) -> bool {
    let Some(&last) = frames.last() else { return false };
    if frames.len() >= capacity || !(system(last) || is_entry(last)) {
        return false;
    }
    if restorer != 0 && frames.contains(&(restorer as u64)) {
        return false;
    }
    let Some(first) = frames.iter().position(|&pc| system(pc)) else { return false };
    frames[first..frames.len() - 1].iter().all(|&pc| system(pc))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Addresses below 0x1000 are "system" (libc, the loader, racewatch); 0x5000.. is the program;
    // 0x9000 is `_start`; 0x777 is glibc's restorer.
    fn allowed(frames: &[u64]) -> bool {
        frames_allow_spawn(frames, 8, 0x777, |pc| pc < 0x1000, |pc| pc == 0x9000)
    }

    #[test]
    fn program_code_called_from_a_threads_entry_may_spawn() {
        // worker ← racewatch's entry ← start_thread ← clone3
        assert!(allowed(&[0x5010, 0x100, 0x200, 0x300]));
        // main ← __libc_start_call_main ← __libc_start_main ← _start
        assert!(allowed(&[0x5020, 0x100, 0x200, 0x9000]));
    }

    #[test]
    fn callbacks_from_libc_and_signal_frames_may_not() {
        // comparator ← qsort (libc) ← main ← libc ← _start
        assert!(!allowed(&[0x100, 0x5020, 0x200, 0x9000]));
        // handler ← restorer (the walk stops at the signal frame)
        assert!(!allowed(&[0x5030, 0x777]));
        // through the restorer and on to the thread's entry
        assert!(!allowed(&[0x777, 0x100, 0x200]));
    }

    #[test]
    fn a_walk_that_stopped_early_or_ran_out_may_not() {
        assert!(!allowed(&[]), "nothing unwound");
        assert!(!allowed(&[0x5010, 0x5020]), "stopped in the program's code");
        assert!(!allowed(&[0x5010; 8]), "as deep as the walk goes");
    }
}
