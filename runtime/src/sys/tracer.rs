//! What the reporter's periodic check reads of `/proc/self/status`: whether a tracer (a debugger,
//! `strace`, a ptrace supervisor) is attached (`TracerPid`), and whether any thread of the program's
//! is still alive (`Threads`, and `State` of the main thread, a zombie once `main` called
//! `pthread_exit`); and, for the trampoline of [`super::hand_on`], which signals the main thread
//! lets through now (`SigBlk`). Read through one descriptor kept open (and placed like the runtime's
//! other descriptors), so that a reading costs one `pread` and no `open`.

use crate::sys::fd;
use std::sync::atomic::{AtomicI32, Ordering};

/// The kept status descriptor's key ([`fd::Kept::key`]); -1: none.
static STATUS: AtomicI32 = AtomicI32::new(-1);

/// Opens `/proc/self/status` for [`tracer_pid`] (once per process). False when it cannot be opened
/// (tracers then go unnoticed).
pub fn open() -> bool {
    if STATUS.load(Ordering::Acquire) >= 0 {
        return true;
    }
    // The raw call, not libc's `open`: racewatch's own interposer would hand a program thread the
    // program's view of the file (crate::proc_view), a snapshot without the later TracerPid.
    let path = c"/proc/self/status";
    let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    let low = super::raw::syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0, 0, 0]);
    if low < 0 {
        return false;
    }
    let low = low as i32;
    match fd::keep_high(low) {
        Ok(kept) => {
            STATUS.store(kept.key(), Ordering::Release);
            true
        }
        Err(_) => false,
    }
}

/// One reading of the process's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The pid of the process tracing this one (`None`: not traced, or unknown).
    pub tracer: Option<i32>,
    /// Every thread of the program's has ended: the only live thread is the calling one (a runtime
    /// thread), beside a main thread that is a zombie (it called `pthread_exit`).
    pub only_caller_alive: bool,
    /// The main thread's signal mask as the kernel holds it (`SigBlk`, bits 0..=63 for signals
    /// 1..=64); `None` when unknown or the main thread is gone.
    pub main_mask: Option<u64>,
    /// The signals pending for the main thread alone (`SigPnd`; 0 when unknown).
    pub main_pending: u64,
    /// A seccomp mode is in force (`Seccomp:` is not 0).
    pub seccomp: bool,
    /// The process's threads (`Threads:`).
    pub threads: Option<u32>,
    /// The process is in a PID namespace below the initial one (`NSpid:` has more than one pid): there
    /// the pids it and its children get are its own to predict.
    pub nested_pid_namespace: bool,
}

/// Reads the status now (`Status::default()` when it cannot be read). Async-signal-safe, never a
/// cancellation point.
pub fn read() -> Status {
    let fd = fd::Kept::from_key(STATUS.load(Ordering::Acquire)).map_or(-1, fd::Kept::number);
    if fd < 0 {
        return Status::default();
    }
    let mut buf = [0u8; 4096];
    // The raw call: libc's `pread` is a cancellation point, and a sampling signal's handler reads this
    // in program threads (a cancel pending there would unwind through racewatch's frames).
    let n = super::raw::syscall6(libc::SYS_pread64, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]);
    usize::try_from(n).ok().and_then(|n| buf.get(..n)).map(parse).unwrap_or_default()
}

/// The pid of the process tracing this one (`None`: not traced, or unknown).
pub fn tracer_pid() -> Option<i32> {
    read().tracer
}

fn parse(status: &[u8]) -> Status {
    let Ok(text) = std::str::from_utf8(status) else { return Status::default() };
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let tracer = field("TracerPid:").and_then(|v| v.parse().ok()).filter(|&pid: &i32| pid != 0);
    let threads: Option<u32> = field("Threads:").and_then(|v| v.parse().ok());
    // `State` is the main thread's: `Z (zombie)` once it called `pthread_exit` while others run on.
    let main_gone = field("State:").is_some_and(|v| v.starts_with('Z') || v.starts_with('X'));
    let only_caller_alive = match threads {
        Some(1) => true,
        Some(2) => main_gone,
        _ => false,
    };
    let main_mask = field("SigBlk:").and_then(|v| u64::from_str_radix(v, 16).ok()).filter(|_| !main_gone);
    let main_pending = field("SigPnd:").and_then(|v| u64::from_str_radix(v, 16).ok()).unwrap_or(0);
    let seccomp = field("Seccomp:").is_some_and(|v| v != "0");
    let nested_pid_namespace = field("NSpid:").is_some_and(|v| v.split_whitespace().count() > 1);
    Status { tracer, only_caller_alive, main_mask, main_pending, seccomp, threads, nested_pid_namespace }
}

/// The status read now without keeping a descriptor (the raw calls: the program's view of the file,
/// [`crate::proc_view`], is not racewatch's; and no `malloc` of the program's, as `opendir` would
/// take). `Status::default()` when it cannot be read.
pub fn read_now() -> Status {
    let mut buf = [0u8; 4096];
    super::raw::read_whole(c"/proc/self/status", &mut buf).map(|len| parse(&buf[..len])).unwrap_or_default()
}

/// The calling thread's own status (`/proc/thread-self/status`: its `Seccomp:` is its own filter's),
/// read as [`read_now`] reads the process's; `None` when it cannot be read (no `/proc` in a chroot).
pub fn read_thread_now() -> Option<Status> {
    let mut buf = [0u8; 4096];
    super::raw::read_whole(c"/proc/thread-self/status", &mut buf).map(|len| parse(&buf[..len]))
}

/// Whether a tracer is attached now, read without keeping a descriptor ([`read_now`]). False when it
/// cannot be read.
pub fn traced_now() -> bool {
    read_now().tracer.is_some()
}

/// In a forked child, whose copy of the descriptor (closed with the runtime's others) named the parent.
pub fn forget_after_fork() {
    STATUS.store(-1, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracer_pid_is_read_from_the_status_text() {
        assert_eq!(parse(b"Name:\tx\nTracerPid:\t0\nUid:\t0\n").tracer, None);
        assert_eq!(parse(b"Name:\tx\nTracerPid:\t4321\nUid:\t0\n").tracer, Some(4321));
        assert_eq!(parse(b"Name:\tx\n").tracer, None);
        assert_eq!(parse(b"State:\tS (sleeping)\nSigBlk:\t0000000000002010\n").main_mask, Some(0x2010));
        assert_eq!(parse(b"State:\tZ (zombie)\nSigBlk:\t0000000000002010\n").main_mask, None);
        assert_eq!(parse(b"SigPnd:\t0000000000002000\nShdPnd:\t0000000000000001\n").main_pending, 0x2000);
    }

    #[test]
    fn the_program_is_gone_when_only_the_caller_and_a_zombie_main_thread_are_left() {
        let status = |state: &str, threads: u32| {
            parse(format!("Name:\tx\nState:\t{state}\nTracerPid:\t0\nThreads:\t{threads}\n").as_bytes())
        };
        assert!(status("S (sleeping)", 1).only_caller_alive);
        assert!(status("Z (zombie)", 2).only_caller_alive);
        assert!(!status("S (sleeping)", 2).only_caller_alive, "the main thread still runs");
        assert!(!status("Z (zombie)", 3).only_caller_alive, "a worker still runs");
        assert!(!parse(b"Name:\tx\n").only_caller_alive, "unknown is alive");
    }
}
