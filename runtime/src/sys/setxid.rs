//! glibc's identity changes kept apart from a thread start in racewatch's signal handler.
//!
//! `setuid` and its kin (`setgid`, `seteuid`, `setresuid`, `setgroups`, `initgroups`, …) change the
//! credentials of every thread: glibc takes its lock on the list of thread stacks, sends each thread
//! its internal signal 33 (`SIGSETXID`) and waits until every one has answered. racewatch's sampling
//! handler runs with every signal held, 33 included. When it starts the reporter thread there
//! (`pthread_create`, which takes that same lock) while another thread is inside such a change, each
//! waits for the other and the process hangs.
//!
//! So the two never overlap: a change waits until a start under way has left `pthread_create`, and a
//! start that finds a change under way is put off to a later signal ([`begin_start`], [`change`]).
//! Outside signal handlers racewatch creates its threads with 33 deliverable, and its own threads take
//! it for their whole life ([`crate::sys::thread`]), so glibc's protocol itself works there.

use std::sync::atomic::{AtomicU32, Ordering};

/// Identity changes under way (in [`change`]).
static CHANGES: AtomicU32 = AtomicU32::new(0);
/// Identity changes begun since the process started: each sends every thread `SIGSETXID`.
static BEGUN: AtomicU32 = AtomicU32::new(0);
/// Thread starts under way from signal handlers (a live [`Start`]).
static STARTS: AtomicU32 = AtomicU32::new(0);

/// How long a change waits for starts under way (a `pthread_create` takes microseconds; this only
/// bounds a start that itself waits for something the changing thread holds, which would hang anyway).
const WAIT_NS: u64 = 2_000_000_000;

/// The signal `SIGSETXID` (33) as a bit of the kernel's mask.
pub const SIGSETXID_BIT: u64 = 1 << (33 - 1);

/// A thread start from a signal handler under way ([`begin_start`]); ends when dropped.
pub struct Start(());

impl Drop for Start {
    fn drop(&mut self) {
        STARTS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Before a signal handler creates a thread: `None` while an identity change is under way (try again
/// later). Async-signal-safe.
pub fn begin_start() -> Option<Start> {
    // Announce, then look: with [`change`] doing the same in the other order (both sequentially
    // consistent), either the start sees the change or the change sees the start.
    STARTS.fetch_add(1, Ordering::SeqCst);
    if CHANGES.load(Ordering::SeqCst) != 0 {
        STARTS.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    Some(Start(()))
}

/// Runs glibc's identity change `real` once no thread start from a signal handler is under way.
/// Async-signal-safe (POSIX lets a handler call `setuid`); `errno` is `real`'s.
pub fn change<T>(real: impl FnOnce() -> T) -> T {
    CHANGES.fetch_add(1, Ordering::SeqCst);
    BEGUN.fetch_add(1, Ordering::SeqCst);
    let begun = super::thread::monotonic_ns();
    while STARTS.load(Ordering::SeqCst) != 0 && super::thread::monotonic_ns().saturating_sub(begun) < WAIT_NS {
        super::raw::yield_cpu();
    }
    let result = real();
    CHANGES.fetch_sub(1, Ordering::SeqCst);
    result
}

/// How many identity changes have begun: one more since an earlier reading means glibc's handler of
/// `SIGSETXID` may have run in every thread meanwhile (ending a wait there with `EINTR`).
pub fn changes_begun() -> u32 {
    BEGUN.load(Ordering::SeqCst)
}

/// In a forked child: the starts and changes under way were the parent's other threads', which do not
/// exist here.
pub fn forget_after_fork() {
    STARTS.store(0, Ordering::SeqCst);
    CHANGES.store(0, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    // One test: the counters are process-wide.
    #[test]
    fn changes_and_starts_never_overlap() {
        // No change under way: a start goes ahead, and a change waits until it has ended.
        let start = begin_start().expect("nothing under way");
        let changed = std::sync::Arc::new(AtomicBool::new(false));
        let flag = changed.clone();
        let changer = std::thread::spawn(move || change(|| flag.store(true, Ordering::SeqCst)));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!changed.load(Ordering::SeqCst), "the change waits for the start under way");
        drop(start);
        changer.join().unwrap();
        assert!(changed.load(Ordering::SeqCst));

        // A change under way puts a start off, and gives way once it is done.
        let (inside, leave) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let (tell, wait) = (inside.0, leave.1);
        let changer = std::thread::spawn(move || {
            change(|| {
                tell.send(()).unwrap();
                wait.recv().unwrap();
            })
        });
        inside.1.recv().unwrap();
        assert!(begin_start().is_none(), "a start waits while a change is under way");
        leave.0.send(()).unwrap();
        changer.join().unwrap();
        assert!(begin_start().is_some());

        // A start that never ends (a stale count) holds a change up only for the bound.
        std::mem::forget(begin_start().unwrap());
        let begun = Instant::now();
        change(|| ());
        assert!(begun.elapsed() >= Duration::from_millis(1900));
        forget_after_fork();
        let begun = Instant::now();
        change(|| ());
        assert!(begun.elapsed() < Duration::from_millis(1000), "forgotten after a fork");
    }
}
