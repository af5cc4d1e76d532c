//! The program's waits that take `SIGTRAP` itself (`sigtimedwait`, `sigwaitinfo`, `sigwait`, the raw
//! `rt_sigtimedwait`).
//!
//! The kernel's masks lack `SIGTRAP` while racewatch runs, so a `SIGTRAP` sent to the process lands on
//! whichever thread runs, not on the one that sleeps in `sigtimedwait` for it; and the kernel may wake
//! that sleeper for it while a busy thread takes it first from the shared queue: the wait then ends with
//! `EINTR` and the signal is handed round (CI: `own_sigtrap_blocked_process_directed_sigtimedwait`, 1
//! run in 60 at the debug rate). A thread in such a wait is listed here while it waits, so a `SIGTRAP`
//! sent to the process is handed to it, thread-directed (no other thread can take it), with the mark of
//! a hand-over ([`hand_on::hand_trap_to`]); the wait gives the program the `siginfo` that was sent, and
//! a signal of racewatch's taken by the wait is dropped and the wait goes on for the rest of its time.

// The pointers here are a C caller's, passed on under the libc function's own contract (null or valid),
// as in `real`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::sys::{cancel, hand_on, raw, setxid, signal, thread};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// Threads in one of the program's waits for `SIGTRAP` (0: a free slot). Full: a further waiter is not
/// listed, and a `SIGTRAP` sent to the process that no listed or unblocking thread takes is kept for the
/// process ([`signal::take_parked`]), which that waiter takes only at its next wait.
static WAITERS: [AtomicI32; 16] = [const { AtomicI32::new(0) }; 16];

/// Whether thread `tid` waits for `SIGTRAP` in one of the program's waits. Async-signal-safe.
pub fn waits(tid: i32) -> bool {
    WAITERS.iter().any(|w| w.load(Ordering::Acquire) == tid)
}

/// The threads that wait for `SIGTRAP` now. Async-signal-safe.
pub fn waiters() -> impl Iterator<Item = i32> {
    WAITERS.iter().map(|w| w.load(Ordering::Acquire)).filter(|&tid| tid > 0)
}

/// In a forked child: the waiters listed were the parent's other threads, which do not exist here.
pub fn forget_after_fork() {
    for waiter in &WAITERS {
        waiter.store(0, Ordering::SeqCst);
    }
}

/// Runs the program's wait for the signals `set` (bits 0..=63 for signals 1..=64), `timeout` as the
/// program passed it: `wait(info, timeout)` makes the call and returns what the libc function returns
/// (a signal number, or -1 with `errno`). Without `SIGTRAP` in `set`, or outside a thread racewatch
/// knows, it is the call alone.
pub fn program_sigwait(
    set: Option<u64>,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
    wait: impl Fn(*mut libc::siginfo_t, *const libc::timespec) -> c_int,
) -> c_int {
    let trap = 1u64 << (libc::SIGTRAP - 1);
    // No system call of racewatch's in a thread that confined itself (its filter may forbid any).
    if set.is_none_or(|set| set & trap == 0) || !signal::is_installed() || !thread::syscalls_allowed() {
        return wait(info, timeout);
    }
    let tid = raw::gettid();
    if thread::known_slot(tid).is_none() {
        return wait(info, timeout);
    }
    // Listed for the wait; unlisted when it returns, or when the thread is cancelled in it (nothing to
    // drop in these frames: see `cancel`).
    let mut listed = (list(tid), tid);
    let arg = &mut listed as *mut (Option<&'static AtomicI32>, i32) as *mut std::ffi::c_void;
    let rc = cancel::on_cancel(unlist, arg, || listed_wait(tid, set.unwrap_or(0), info, timeout, wait));
    unlist(arg);
    rc
}

/// [`program_sigwait`] for a listed thread `tid`.
fn listed_wait(
    tid: i32,
    set: u64,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
    wait: impl Fn(*mut libc::siginfo_t, *const libc::timespec) -> c_int,
) -> c_int {
    let start = thread::monotonic_ns();
    let changes = setxid::changes_begun();
    // The kernel writes the program's `info` (its EFAULT is the program's); without one, a local.
    // SAFETY: zeroed siginfo is a valid out-parameter for the kernel to fill.
    let mut local: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let out = if info.is_null() { &mut local as *mut libc::siginfo_t } else { info };
    let mut rest = None;
    // One sent to the process while no thread let it through waits in racewatch's keeping: taken at once, as
    // the kernel's wait takes one pending.
    if let Some(parked) = signal::take_parked() {
        // SAFETY: `out` is the program's out-parameter or the local.
        unsafe { *out = parked };
        return libc::SIGTRAP;
    }
    loop {
        let rc = wait(out, rest.as_ref().map_or(timeout, |rest| rest as *const libc::timespec));
        // SAFETY: the kernel filled `out` when the wait returned a signal.
        let ours = rc == libc::SIGTRAP && {
            let taken = unsafe { *out };
            hand_on::is_trap_mark(&taken) || signal::is_own_trap(&taken)
        };
        let (eintr, timed_out) = (rc == -1 && errno() == libc::EINTR, rc == -1 && errno() == libc::EAGAIN);
        if eintr && !woken_for_a_trap_taken_elsewhere(tid, set, changes) || !(eintr || timed_out || ours) {
            // The program's signal, a handler's EINTR, or an error: one handed over here meanwhile whose mark
            // merged with a SIGTRAP already pending here is marked again, for the next wait or the handler.
            hand_on::mark_again(tid);
            return rc;
        }
        // A mark, a signal of racewatch's, a wake for nothing of the program's, or the end of the time: one
        // handed over here is the program's (its mark may have merged with a SIGTRAP already pending here).
        if let Some(handed) = hand_on::take_trap_for(tid) {
            // SAFETY: as above.
            unsafe { *out = handed };
            hand_on::mark_again(tid);
            return libc::SIGTRAP;
        }
        match remaining(timeout, start) {
            Some(None) => {}
            Some(Some(left)) => rest = Some(left),
            None => {
                // SAFETY: errno is this thread's; a wait that times out says `EAGAIN`.
                unsafe { *libc::__errno_location() = libc::EAGAIN };
                return -1;
            }
        }
    }
}

thread_local! {
    /// Whether this thread is listed in [`WAITERS`] (a jump out of a handler leaves the wait behind).
    static LISTED: Cell<bool> = const { Cell::new(false) };
}

/// Takes a place in [`WAITERS`] for thread `tid` (none when all are taken).
fn list(tid: i32) -> Option<&'static AtomicI32> {
    forget_me(tid);
    let slot = WAITERS.iter().find(|w| w.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed).is_ok());
    LISTED.with(|l| l.set(slot.is_some()));
    slot
}

/// Gives the place [`list`] took back (`arg`: the place and the thread's id), unless a jump gave it up
/// already (another thread may hold it since).
extern "C" fn unlist(arg: *mut std::ffi::c_void) {
    // SAFETY: `arg` is `program_sigwait`'s pair, alive in its frame while the wait runs or unwinds.
    let (slot, tid) = unsafe { *(arg as *const (Option<&'static AtomicI32>, i32)) };
    if let Some(slot) = slot {
        let _ = slot.compare_exchange(tid, 0, Ordering::SeqCst, Ordering::Relaxed);
    }
    LISTED.with(|l| l.set(false));
}

/// Drops every entry of thread `tid` from [`WAITERS`].
fn forget_me(tid: i32) {
    for waiter in &WAITERS {
        let _ = waiter.compare_exchange(tid, 0, Ordering::SeqCst, Ordering::Relaxed);
    }
}

/// The program jumps (`longjmp` and kin) in this thread: a wait it leaves behind (from a handler that
/// interrupted it) no longer takes `SIGTRAP`. No system call unless the thread is listed.
pub fn before_jump() {
    if LISTED.with(Cell::get) {
        LISTED.with(|l| l.set(false));
        forget_me(raw::gettid());
    }
}

/// The wait for `set` ended with `EINTR` in thread `tid`: whether no handler of the program's can have
/// ended it. The kernel wakes a thread in such a wait for a `SIGTRAP` sent to the process, which a busy
/// thread (whose mask lacks it, as racewatch keeps masks) may take from the shared queue first: that
/// thread hands it over here, and the wait finds nothing (`EINTR`, though no handler ran). True when the
/// hand-over came already, or when no signal that the wait lets through (the mask less `set`) has a
/// handler (a thread that waits for signals usually blocks the rest). glibc's own signals, which no mask
/// blocks, are told apart: its cancellation signal ends such a wait (a cancellation point) by unwinding,
/// never with `EINTR`; its `SIGSETXID` runs in every thread at an identity change (`setuid` and its kin,
/// which racewatch sees begin: `changes` then).
fn woken_for_a_trap_taken_elsewhere(tid: i32, set: u64, changes: u32) -> bool {
    if hand_on::trap_waits_for(tid) {
        return true;
    }
    let Some(mask) = raw::sigprocmask(libc::SIG_BLOCK, None) else { return false };
    let open = !mask & !set & !GLIBC_SIGNALS;
    setxid::changes_begun() == changes
        && !(1..=64).any(|sig: i32| open & (1 << (sig - 1)) != 0 && raw::has_handler(sig) == Some(true))
}

/// glibc's internal signals 32 (cancellation) and 33 (`SIGSETXID`) as bits of the kernel's mask.
const GLIBC_SIGNALS: u64 = 1 << 31 | setxid::SIGSETXID_BIT;

/// This thread's `errno`.
fn errno() -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() }
}

/// What is left of the program's `timeout` since `start`: `Some(None)` without a timeout, `None` when
/// it has passed.
fn remaining(timeout: *const libc::timespec, start: u64) -> Option<Option<libc::timespec>> {
    // SAFETY: a non-null `timeout` is the program's, which the kernel has already read for this wait.
    let Some(timeout) = (unsafe { timeout.as_ref() }) else { return Some(None) };
    let total = (timeout.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(timeout.tv_nsec as u64);
    let left = total.checked_sub(thread::monotonic_ns().saturating_sub(start)).filter(|&left| left > 0)?;
    Some(Some(libc::timespec { tv_sec: (left / 1_000_000_000) as i64, tv_nsec: (left % 1_000_000_000) as i64 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_a_timeout_shrinks_and_ends() {
        let now = thread::monotonic_ns();
        let second = libc::timespec { tv_sec: 1, tv_nsec: 0 };
        assert!(matches!(remaining(std::ptr::null(), now), Some(None)));
        let left = remaining(&second, now).flatten().expect("time left");
        assert!(left.tv_sec == 0 || (left.tv_sec == 1 && left.tv_nsec == 0));
        assert!(remaining(&second, now - 2_000_000_000).is_none());
    }

    #[test]
    fn a_wait_without_sigtrap_is_the_call_alone() {
        let calls = std::cell::Cell::new(0);
        let rc = program_sigwait(Some(1 << (libc::SIGUSR1 - 1)), std::ptr::null_mut(), std::ptr::null(), |_, _| {
            calls.set(calls.get() + 1);
            libc::SIGUSR1
        });
        assert_eq!((rc, calls.get()), (libc::SIGUSR1, 1));
        assert!(waiters().next().is_none());
    }
}
