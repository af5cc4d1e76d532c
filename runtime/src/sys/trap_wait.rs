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

use crate::sys::{hand_on, raw, setxid, signal, thread};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// Threads in one of the program's waits for `SIGTRAP` (0: a free slot). Full: a further waiter is not
/// listed and gets a process-directed `SIGTRAP` as before (handed round, then racewatch steps aside).
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
    let listed = WAITERS.iter().find(|w| w.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed).is_ok());
    let start = thread::monotonic_ns();
    let changes = setxid::changes_begun();
    // SAFETY: zeroed siginfo is a valid out-parameter for the kernel to fill.
    let mut taken: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut rest = None;
    // One sent to the process while no thread let it through waits in racewatch's keeping: taken at once, as
    // the kernel's wait takes one pending.
    let parked = signal::take_parked();
    let rc = loop {
        if let Some(parked) = parked {
            taken = parked;
            break libc::SIGTRAP;
        }
        let rc = wait(&mut taken, rest.as_ref().map_or(timeout, |rest| rest as *const libc::timespec));
        if rc == -1 && errno() == libc::EINTR {
            if !woken_for_a_trap_taken_elsewhere(tid, set.unwrap_or(0), changes) {
                break rc;
            }
        } else if rc != libc::SIGTRAP {
            break rc;
        } else if hand_on::is_trap_mark(&taken) {
            if let Some(handed) = hand_on::take_trap_for(tid) {
                taken = handed;
                // Others handed over meanwhile merged with this mark: it comes again for them.
                hand_on::mark_again(tid);
                break rc;
            }
        } else if !signal::is_own_trap(&taken) {
            break rc;
        }
        // Woken for nothing of the program's, a mark whose signals already ran, or a signal of racewatch's:
        // wait for the rest of the time.
        match remaining(timeout, start) {
            Some(None) => {}
            Some(Some(left)) => rest = Some(left),
            None => {
                // SAFETY: errno is this thread's; a wait that times out says `EAGAIN`.
                unsafe { *libc::__errno_location() = libc::EAGAIN };
                break -1;
            }
        }
    };
    if let Some(slot) = listed {
        slot.store(0, Ordering::Release);
    }
    if rc > 0 && !info.is_null() {
        // SAFETY: a non-null `info` is the program's out-parameter for this call, which the kernel
        // accepted for writing (the wait returned a signal).
        unsafe { *info = taken };
    }
    rc
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
