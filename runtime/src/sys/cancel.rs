//! Clean-up when `pthread_cancel` unwinds a program thread out of one of the waits racewatch interposes.
//!
//! glibc acts on a cancellation in a wait (a cancellation point) with a forced unwind, driven by the
//! system's `libgcc_s`. racewatch links its own unwinder in, so a Rust frame with a landing pad (a
//! value to drop) on that path calls racewatch's personality, which hands `libgcc_s`'s unwind context
//! to racewatch's own `_Unwind_SetGR`: the layouts differ, and it aborts the process (a thread
//! cancelled in an interposed `sigsuspend`, `ppoll`, `pselect`, `epoll_pwait` or `sigtimedwait`
//! aborted it). So the Rust frames around such a wait hold nothing to drop, and what must be undone
//! when the thread is cancelled there is registered with glibc's own clean-up list
//! (`_pthread_cleanup_push`, what C's `pthread_cleanup_push` uses without exceptions), which glibc's
//! unwinder runs as it leaves the frame that registered it.

// `arg` is never read here, only handed to the caller's own `undo`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_int, c_void};

/// glibc's `struct _pthread_cleanup_buffer`.
#[repr(C)]
struct CleanupBuffer {
    routine: usize,
    arg: usize,
    canceltype: c_int,
    prev: usize,
}

extern "C" {
    fn _pthread_cleanup_push(buffer: *mut CleanupBuffer, routine: extern "C" fn(*mut c_void), arg: *mut c_void);
    fn _pthread_cleanup_pop(buffer: *mut CleanupBuffer, execute: c_int);
}

/// Runs `wait` (a cancellation point) with `undo(arg)` registered to run if the thread is cancelled in
/// it; not run when `wait` returns (the caller undoes then). `wait` must hold nothing to drop.
pub fn on_cancel<R>(undo: extern "C" fn(*mut c_void), arg: *mut c_void, wait: impl FnOnce() -> R) -> R {
    let mut buffer = CleanupBuffer { routine: 0, arg: 0, canceltype: 0, prev: 0 };
    // SAFETY: the buffer lives in this frame until the pop below, which unlinks it; glibc runs `undo`
    // only while the frame is being unwound by a cancellation.
    unsafe { _pthread_cleanup_push(&mut buffer, undo, arg) };
    let result = wait();
    // SAFETY: the buffer pushed above, the innermost one of this thread's.
    unsafe { _pthread_cleanup_pop(&mut buffer, 0) };
    result
}
