//! What a forked child reads of its parent's `/proc` files, as they would read without racewatch.
//!
//! A child the program forks often reports on its parent: a supervisor's helper prints the parent's
//! `SigCgt`, a test checks the parent's thread count. Racewatch in the parent shows there (its
//! `SIGTRAP` handler in `SigCgt`, a `SIGTRAP` it kept virtual missing from `SigBlk`, its reporter thread
//! in `Threads:` and the `task` listing). The child runs the same racewatch (its memory is a copy of
//! the parent's): at the fork it notes what the parent's program had set for `SIGTRAP`, and its reads of
//! the parent's `status`, `stat` and `task` listing get the parent's own values, as the parent's own
//! reads do ([`crate::proc_view`]). The parent's reporter thread is told by its name. What the parent's
//! program changes of `SIGTRAP` after the fork is not seen (the bits then stay as the fork left them).

use crate::proc_view::{self, Facts, Target};
use crate::sys::{raw, real, signal};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

/// The parent's pid, when racewatch's `SIGTRAP` handler was installed there at the fork (0: nothing to
/// hide of the parent).
static PARENT: AtomicI32 = AtomicI32::new(0);
/// The parent program's `SIGTRAP` disposition at the fork: [`DEFAULT`], [`IGNORED`] or [`CAUGHT`].
static TRAP_ACTION: AtomicU8 = AtomicU8::new(DEFAULT);
/// Whether the parent program had `SIGTRAP` blocked in its main thread: [`UNKNOWN`], [`NO`] or [`YES`].
static MAIN_BLOCKED: AtomicU8 = AtomicU8::new(UNKNOWN);

const DEFAULT: u8 = 0;
const IGNORED: u8 = 1;
const CAUGHT: u8 = 2;
const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

/// The name racewatch's reporter thread gives itself (`comm`, 15 bytes at most).
const REPORTER_NAME: &[u8] = b"racewatch-repor";

/// In a forked child, first thing (the `pthread_atfork` child handler, before the parent's state is
/// forgotten): notes the parent and what its program had set for `SIGTRAP`.
pub fn note_fork() {
    if !signal::is_installed() {
        PARENT.store(0, Ordering::Release);
        return;
    }
    // The process the records were the parent's (not `getppid`: a seccomp deny-list of calls racewatch
    // never makes may have it, and the fork handler runs in every child).
    let parent = signal::recorded_process();
    let handler = signal::program_action().sa_sigaction;
    let action = match handler {
        libc::SIG_DFL => DEFAULT,
        libc::SIG_IGN => IGNORED,
        _ => CAUGHT,
    };
    let blocked = match signal::trap_blocked_in(parent) {
        None => UNKNOWN,
        Some(false) => NO,
        Some(true) => YES,
    };
    TRAP_ACTION.store(action, Ordering::Release);
    MAIN_BLOCKED.store(blocked, Ordering::Release);
    PARENT.store(parent, Ordering::Release);
}

/// The parent noted at the fork. (Not checked against `getppid`, a call racewatch never makes: a
/// filter may deny it. A parent that is gone has no files to read; its pid taken again by an unrelated
/// process before this child reads it would get the parent program's `SIGTRAP` bits and reporter count.)
pub fn parent() -> Option<i32> {
    let parent = PARENT.load(Ordering::Acquire);
    // Not in a sandbox (the child's own seccomp filter may kill the reads that make the view).
    let free = || !crate::sys::confined::here() && !crate::detector::is_sandboxed();
    (parent != 0 && free()).then_some(parent)
}

/// What `path` names of the parent's files (`Target::TaskDir` for its `task` listing), with the parent's
/// pid; `None` for anything else (the child's own files, other processes', or no parent to speak for).
pub fn classify(path: &[u8]) -> Option<(Target, i32)> {
    let parent = parent()?;
    let mut digits = crate::fixed::FixedBuf::<16>::new();
    let _ = std::fmt::Write::write_fmt(&mut digits, format_args!("/proc/{parent}/"));
    if !path.starts_with(digits.as_bytes()) {
        return None;
    }
    let target = proc_view::classify(path, parent, 0, |tid| thread_of(parent, tid))?;
    matches!(target, Target::Status { .. } | Target::Stat { .. } | Target::TaskDir).then_some((target, parent))
}

/// The parent program's facts for its thread `tid`, as its own reads would show them.
pub fn facts_for(parent: i32, tid: i32) -> Facts {
    let action = TRAP_ACTION.load(Ordering::Acquire);
    let blocked = match MAIN_BLOCKED.load(Ordering::Acquire) {
        NO if tid == parent => Some(false),
        YES if tid == parent => Some(true),
        _ => None,
    };
    Facts {
        trap_caught: Some(action == CAUGHT),
        trap_ignored: Some(action == IGNORED),
        trap_blocked: blocked,
        blocked_in_handler: None,
        trap_pending: (blocked == Some(false)).then_some(false),
        hidden_threads: reporter_threads(parent),
    }
}

/// Whether `tid` is a thread of process `parent`.
fn thread_of(parent: i32, tid: i32) -> bool {
    raw::tgkill(parent, tid, 0) != -i64::from(libc::ESRCH)
}

/// Whether thread `tid` of `parent`, an entry of its `task` listing, is racewatch's reporter (its name).
pub fn hidden_task(parent: i32, tid: i32) -> bool {
    let mut path = crate::fixed::FixedBuf::<64>::new();
    let _ = std::fmt::Write::write_fmt(&mut path, format_args!("/proc/{parent}/task/{tid}/comm\0"));
    let fd = real::open(false, path.as_bytes().as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return false;
    }
    let mut name = [0u8; 32];
    let n = raw::syscall6(libc::SYS_read, [fd as u64, name.as_mut_ptr() as u64, name.len() as u64, 0, 0, 0]);
    real::close(fd);
    usize::try_from(n).is_ok_and(|n| name[..n].strip_suffix(b"\n").unwrap_or(&name[..n]) == REPORTER_NAME)
}

/// How many of the parent's threads are racewatch's reporter now (0 or 1).
fn reporter_threads(parent: i32) -> u32 {
    let mut path = crate::fixed::FixedBuf::<32>::new();
    let _ = std::fmt::Write::write_fmt(&mut path, format_args!("/proc/{parent}/task\0"));
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let fd = real::open(false, path.as_bytes().as_ptr().cast(), flags, 0);
    if fd < 0 {
        return 0;
    }
    let mut count = 0;
    let mut buf = [0u8; 2048];
    loop {
        let n = raw::syscall6(libc::SYS_getdents64, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]);
        let Ok(len) = usize::try_from(n) else { break };
        if len == 0 {
            break;
        }
        let mut at = 0;
        while let Some(Ok((reclen, name))) = proc_view::dirent_at(&buf[..len], at) {
            count += u32::from(proc_view::number(name).is_some_and(|tid| hidden_task(parent, tid)));
            at += reclen;
        }
    }
    real::close(fd);
    count
}
