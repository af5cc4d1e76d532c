//! The runtime's global allocator: racewatch's own heap ([`crate::sys::heap`], not the program's
//! `malloc`), except when it fails.
//!
//! Rust ends the process when an allocation fails. Inside someone else's process that would turn the
//! program's own memory pressure (an `RLIMIT_DATA`, `mlockall(MCL_FUTURE)` with a memlock budget, a
//! full machine) into a crash of the host caused by racewatch. So an allocation that fails waits for
//! memory instead, retrying every 10 ms:
//!
//! - on the *patient* thread (the reporter, [`set_patient_thread`]) for as long as it takes: a report
//!   is late, never the process dead. While it waits it calls the hook it was given (the check that
//!   ends the process, as glibc would, once the program's last thread is gone), so a waiting reporter
//!   never keeps a finished program alive; at exit a reporter waiting for memory is not waited for:
//!   what it had not printed is counted as dropped;
//! - on any other thread (the runtime's work at start-up, on `dlopen`, at exit) for at most 2 s, then
//!   it fails as Rust's allocator does.
//!
//! Every wait is counted ([`waits`], `stats=1`'s "allocations that waited for memory").

use crate::sys::{heap, raw, thread};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// How long a thread other than the patient one waits for memory.
const IMPATIENT_WAIT_NS: u64 = 2_000_000_000;
/// Between two tries.
const RETRY_US: u64 = 10_000;

static PATIENT_TID: AtomicI32 = AtomicI32::new(0);
static WAIT_HOOK: AtomicUsize = AtomicUsize::new(0);
/// The hook runs at most once at a time (it may allocate, and so wait, itself).
static IN_HOOK: AtomicBool = AtomicBool::new(false);
static WAITS: AtomicU64 = AtomicU64::new(0);
/// The patient thread is waiting for memory now.
static PATIENT_WAITING: AtomicBool = AtomicBool::new(false);

/// Makes `tid` wait for memory as long as it takes, calling `on_wait` between tries.
pub fn set_patient_thread(tid: i32, on_wait: fn()) {
    WAIT_HOOK.store(on_wait as usize, Ordering::Release);
    PATIENT_TID.store(tid, Ordering::Release);
}

/// Whether the patient thread is waiting for memory now (at exit it is not waited for).
pub fn patient_is_waiting() -> bool {
    PATIENT_WAITING.load(Ordering::Acquire)
}

/// Allocations that found no memory at first and waited for it.
pub fn waits() -> u64 {
    WAITS.load(Ordering::Relaxed)
}

/// racewatch's heap, waiting for memory rather than failing (see the module comment).
pub struct WaitingAllocator;

// SAFETY: every block comes from `heap::alloc` for its layout's size and alignment and goes back to
// `heap::dealloc`/`heap::realloc` with the same ones (the contract `GlobalAlloc`'s callers keep); a
// retry after a failure repeats the same call, which left `ptr` untouched when it failed.
unsafe impl GlobalAlloc for WaitingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        or_wait(|| heap::alloc(layout.size(), layout.align()))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        or_wait(|| heap::alloc_zeroed(layout.size(), layout.align()))
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above; a failed realloc leaves `ptr` allocated, so it can be tried again.
        or_wait(|| unsafe { heap::realloc(ptr, layout.size(), layout.align(), new_size) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { heap::dealloc(ptr, layout.size(), layout.align()) }
    }
}

fn or_wait(mut attempt: impl FnMut() -> *mut u8) -> *mut u8 {
    let block = attempt();
    if !block.is_null() {
        return block;
    }
    WAITS.fetch_add(1, Ordering::Relaxed);
    let patient = PATIENT_TID.load(Ordering::Acquire) == raw::gettid();
    let start = thread::monotonic_ns();
    if patient {
        PATIENT_WAITING.store(true, Ordering::Release);
    }
    let block = loop {
        thread::sleep_us(RETRY_US);
        if patient {
            run_hook();
        }
        let block = attempt();
        if !block.is_null() || (!patient && thread::monotonic_ns() - start >= IMPATIENT_WAIT_NS) {
            break block;
        }
    };
    if patient {
        PATIENT_WAITING.store(false, Ordering::Release);
    }
    block
}

fn run_hook() {
    let hook = WAIT_HOOK.load(Ordering::Acquire);
    if hook == 0 || IN_HOOK.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: WAIT_HOOK only ever holds a `fn()` stored by `set_patient_thread`.
    let hook: fn() = unsafe { std::mem::transmute::<usize, fn()>(hook) };
    hook();
    IN_HOOK.store(false, Ordering::Release);
}
