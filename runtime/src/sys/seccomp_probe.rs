//! Whether a seccomp filter the process inherited (a container runtime's, systemd's
//! `SystemCallFilter=`, a sandboxing launcher's) kills one of the system calls racewatch makes.
//!
//! A filter is inherited across `exec` and cannot be read back without `CAP_SYS_ADMIN`, and a call
//! it forbids with `SECCOMP_RET_KILL_*` or `SECCOMP_RET_TRAP` ends the process (or the calling
//! thread, leaving the rest hung) before racewatch sees an error. So when `/proc/self/status` says a
//! filter is in force (`Seccomp: 2`), racewatch makes each of its system calls first in a throwaway
//! child: a plain `clone` with no exit signal (the program gets no `SIGCHLD`, and a `wait` for any
//! child does not see it), its own memory (a kill's core-dump handling then reaches only the child),
//! made non-dumpable and with `SIGSYS` at its default before the first probed call. The child runs
//! only `syscall` instructions on buffers of its own stack, exits with `exit_group`, and is reaped
//! with `__WALL`. A child that dies from a signal names the call it was making.
//!
//! Calls a filter answers with an error (`SECCOMP_RET_ERRNO`) are not judged here: racewatch already
//! copes with each failing (perf_event_open's is one warning).

use super::perf;
use super::raw::syscall6;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No filter is in force (or the kernel has no seccomp): nothing was probed.
    NoFilter,
    /// A filter is in force and every probed call returned.
    Survived,
    /// The child died from `signal` making the system call `call`.
    Killed { call: &'static str, signal: i32 },
    /// The child could not be started or waited for (`errno`): unknown.
    Unknown(i32),
}

/// Whether `/proc/self/status` shows a seccomp filter (mode 2) or strict mode (1) in force.
pub fn filter_in_force() -> bool {
    let mut buf = [0u8; 4096];
    match super::raw::read_whole(c"/proc/self/status", &mut buf) {
        Some(len) => seccomp_mode(&buf[..len]).is_some_and(|mode| mode != 0),
        // No `/proc` (a container or chroot without it): the kernel says it too.
        None => syscall6(libc::SYS_prctl, [libc::PR_GET_SECCOMP as u64, 0, 0, 0, 0, 0]) > 0,
    }
}

/// The `Seccomp:` field of a status text.
fn seccomp_mode(status: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(status).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Seccomp:")).and_then(|v| v.trim().parse().ok())
}

/// Probes racewatch's system calls in a child when a filter is in force.
pub fn probe() -> Verdict {
    if !filter_in_force() {
        return Verdict::NoFilter;
    }
    match run_child(None) {
        Err(errno) => Verdict::Unknown(errno),
        Ok(None) => Verdict::Survived,
        // Which call it was: one child per call, up to the first that dies.
        Ok(Some(signal)) => {
            let call = (0..CALLS.len()).find(|&k| matches!(run_child(Some(k)), Ok(Some(_))));
            Verdict::Killed { call: call.map_or("a system call", |k| CALLS[k]), signal }
        }
    }
}

/// Runs a child that makes call `only` of [`CALLS`], or all of them, and reaps it: `Some(signal)`
/// when it died from one, `Err(errno)` when it could not be started or waited for.
fn run_child(only: Option<usize>) -> Result<Option<i32>, i32> {
    let pid = start_child();
    if pid == 0 {
        match only {
            // The preparing calls come first in `CALLS`: a child for call `k` makes those before it too.
            Some(k) if k < PREPARING => (0..=k).for_each(one_call),
            Some(k) => (0..PREPARING).chain([k]).for_each(one_call),
            None => (0..CALLS.len()).for_each(one_call),
        }
        loop {
            syscall6(libc::SYS_exit_group, [0; 6]);
        }
    }
    if pid < 0 {
        return Err(-pid as i32);
    }
    let mut status: i32 = 0;
    loop {
        let rc = syscall6(libc::SYS_wait4, [pid as u64, &mut status as *mut i32 as u64, libc::__WALL as u64, 0, 0, 0]);
        if rc == pid {
            break;
        }
        if rc != -i64::from(libc::EINTR) {
            return Err(-rc as i32);
        }
    }
    Ok(libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)))
}

/// Set by [`on_sigsys`]: the filter trapped the probe's `clone` itself.
static CLONE_TRAPPED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigsys(_: c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    CLONE_TRAPPED.store(true, Ordering::Relaxed);
}

/// Starts the probe child: a plain clone, no CLONE_VM (the child runs on a copy of this memory), exit
/// signal 0; 0 in the child, its pid in the parent, `-errno` when none started. A filter may trap the
/// start of a process while it lets threads start (a launcher that allows no child process): `SIGSYS`
/// is racewatch's for the call, so the trap is seen (`-ENOSYS`: unknown) instead of ending the process
/// before `main`.
fn start_child() -> i64 {
    // SAFETY: plain-data structures, zeroed, then filled in.
    let (mut ours, mut theirs): (libc::sigaction, libc::sigaction) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    ours.sa_sigaction = on_sigsys as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
    ours.sa_flags = libc::SA_SIGINFO;
    let caught = super::real::own_sigaction(libc::SIGSYS, &ours, &mut theirs) == 0;
    let mask = super::raw::sigprocmask(libc::SIG_UNBLOCK, Some(1 << (libc::SIGSYS - 1)));
    let pid = syscall6(libc::SYS_clone, [0, 0, 0, 0, 0, 0]);
    if pid == 0 {
        return 0; // The child: its first calls put `SIGSYS` back to its default.
    }
    if let Some(mask) = mask {
        super::raw::sigprocmask(libc::SIG_SETMASK, Some(mask));
    }
    if caught {
        super::real::own_sigaction(libc::SIGSYS, &theirs, std::ptr::null_mut());
    }
    if CLONE_TRAPPED.swap(false, Ordering::Relaxed) {
        return -i64::from(libc::ENOSYS);
    }
    pid
}

/// How many of [`CALLS`] prepare the child: no core dump (a kill must leave no crash report),
/// `SIGSYS` at its default and unblocked (a program's handler, copied into the child, must not run
/// there). They are probed too.
const PREPARING: usize = 3;

/// The probed calls, in the order the child makes them.
const CALLS: &[&str] = &[
    "prctl",
    "rt_sigaction",
    "rt_sigprocmask",
    "perf_event_open",
    "ioctl",
    "fcntl",
    "close",
    "sigaltstack",
    "tgkill",
    "kill",
    "rt_tgsigqueueinfo",
    "rt_sigqueueinfo",
    "process_vm_readv",
    "futex",
    "clock_nanosleep",
    "sched_yield",
    "openat",
    "pread64",
    "getrusage",
    "mmap",
    "munmap",
    "prlimit64",
    "memfd_create",
    "pidfd_open",
    "pidfd_getfd",
    "close_range",
    "pidfd_send_signal",
    "munlock",
    "write",
    "uname",
];

/// Makes call `k` of `CALLS` with arguments shaped like racewatch's own (a filter may look at them),
/// on buffers of this stack; descriptors it opens are closed by the child's exit.
fn one_call(k: usize) {
    let pid = syscall6(libc::SYS_getpid, [0; 6]) as u64;
    let tid = syscall6(libc::SYS_gettid, [0; 6]) as u64;
    let timer = perf::sample_timer_attr(1_000_000_000);
    let watch = perf::Watchpoint::base(0);
    let mut buf = [0u8; 256];
    let mut word = 0u64;
    let info = [0u64; 16]; // a zeroed siginfo_t (128 bytes)
    let name = c"racewatch";
    let open_timer = || syscall6(libc::SYS_perf_event_open, [&timer as *const _ as u64, 0, u64::MAX, u64::MAX, 8, 0]);
    match CALLS[k] {
        "prctl" => {
            syscall6(libc::SYS_prctl, [libc::PR_SET_DUMPABLE as u64, 0, 0, 0, 0, 0]);
            syscall6(libc::SYS_prctl, [libc::PR_GET_NAME as u64, buf.as_mut_ptr() as u64, 0, 0, 0, 0]);
        }
        "rt_sigaction" => {
            let default = [libc::SIG_DFL as u64, 0u64, 0, 0];
            syscall6(libc::SYS_rt_sigaction, [libc::SIGSYS as u64, default.as_ptr() as u64, 0, 8, 0, 0]);
            syscall6(libc::SYS_rt_sigaction, [libc::SIGTRAP as u64, 0, buf.as_mut_ptr() as u64, 8, 0, 0]);
        }
        "rt_sigprocmask" => {
            let sigsys = 1u64 << (libc::SIGSYS - 1);
            syscall6(libc::SYS_rt_sigprocmask, [libc::SIG_UNBLOCK as u64, &sigsys as *const u64 as u64, 0, 8, 0, 0]);
            syscall6(libc::SYS_rt_sigprocmask, [libc::SIG_BLOCK as u64, 0, &mut word as *mut u64 as u64, 8, 0, 0]);
        }
        "perf_event_open" => {
            open_timer();
            syscall6(libc::SYS_perf_event_open, [&watch as *const _ as u64, 0, u64::MAX, u64::MAX, 8, 0]);
        }
        "ioctl" => {
            let fd = open_timer() as u64;
            syscall6(libc::SYS_ioctl, [fd, perf::PERF_EVENT_IOC_DISABLE, 0, 0, 0, 0]);
            syscall6(libc::SYS_ioctl, [fd, perf::PERF_EVENT_IOC_MODIFY_ATTRIBUTES, &watch as *const _ as u64, 0, 0, 0]);
        }
        "fcntl" => {
            syscall6(libc::SYS_fcntl, [2, libc::F_GETFD as u64, 0, 0, 0, 0]);
            syscall6(libc::SYS_fcntl, [2, libc::F_DUPFD_CLOEXEC as u64, 64, 0, 0, 0]);
        }
        "close" => {
            let fd = syscall6(libc::SYS_fcntl, [2, libc::F_DUPFD_CLOEXEC as u64, 64, 0, 0, 0]);
            syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        }
        "sigaltstack" => {
            syscall6(libc::SYS_sigaltstack, [0, buf.as_mut_ptr() as u64, 0, 0, 0, 0]);
        }
        "tgkill" => {
            syscall6(libc::SYS_tgkill, [pid, tid, 0, 0, 0, 0]);
        }
        "kill" => {
            syscall6(libc::SYS_kill, [pid, 0, 0, 0, 0, 0]);
        }
        "rt_tgsigqueueinfo" => {
            syscall6(libc::SYS_rt_tgsigqueueinfo, [pid, tid, 0, info.as_ptr() as u64, 0, 0]);
        }
        "rt_sigqueueinfo" => {
            syscall6(libc::SYS_rt_sigqueueinfo, [pid, 0, info.as_ptr() as u64, 0, 0, 0]);
        }
        "process_vm_readv" => {
            let local = [buf.as_mut_ptr() as u64, 8u64];
            let remote = [&word as *const u64 as u64, 8u64];
            syscall6(libc::SYS_process_vm_readv, [pid, local.as_ptr() as u64, 1, remote.as_ptr() as u64, 1, 0]);
        }
        "futex" => {
            let futex_wake_private = (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64;
            syscall6(libc::SYS_futex, [&mut word as *mut u64 as u64, futex_wake_private, 1, 0, 0, 0]);
        }
        "clock_nanosleep" => {
            let req = [0u64, 1u64];
            syscall6(libc::SYS_clock_nanosleep, [libc::CLOCK_MONOTONIC as u64, 0, req.as_ptr() as u64, 0, 0, 0]);
        }
        "sched_yield" => {
            syscall6(libc::SYS_sched_yield, [0; 6]);
        }
        "openat" | "pread64" => {
            let path = c"/proc/self/status";
            let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
            let fd = syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0, 0, 0]);
            if CALLS[k] == "pread64" && fd >= 0 {
                syscall6(libc::SYS_pread64, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]);
                syscall6(libc::SYS_read, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]);
            }
        }
        "getrusage" => {
            syscall6(libc::SYS_getrusage, [libc::RUSAGE_THREAD as u64, buf.as_mut_ptr() as u64, 0, 0, 0, 0]);
        }
        "mmap" | "munmap" => {
            let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
            let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
            let addr = syscall6(libc::SYS_mmap, [0, 4096, prot, flags, u64::MAX, 0]);
            if CALLS[k] == "munmap" && addr > 0 {
                syscall6(libc::SYS_madvise, [addr as u64, 4096, libc::MADV_DONTNEED as u64, 0, 0, 0]);
                syscall6(libc::SYS_mprotect, [addr as u64, 4096, libc::PROT_NONE as u64, 0, 0, 0]);
                syscall6(libc::SYS_munmap, [addr as u64, 4096, 0, 0, 0, 0]);
            }
        }
        "prlimit64" => {
            syscall6(libc::SYS_prlimit64, [0, libc::RLIMIT_NOFILE as u64, 0, buf.as_mut_ptr() as u64, 0, 0]);
        }
        "memfd_create" => {
            syscall6(libc::SYS_memfd_create, [name.as_ptr() as u64, libc::MFD_CLOEXEC as u64, 0, 0, 0, 0]);
        }
        "pidfd_open" | "pidfd_getfd" => {
            let pidfd = syscall6(libc::SYS_pidfd_open, [pid, 0, 0, 0, 0, 0]);
            if CALLS[k] == "pidfd_getfd" && pidfd >= 0 {
                syscall6(libc::SYS_pidfd_getfd, [pidfd as u64, 2, 0, 0, 0, 0]);
            }
        }
        "munlock" => {
            syscall6(libc::SYS_munlock, [buf.as_ptr() as u64 & !4095, 4096, 0, 0, 0, 0]);
        }
        "pidfd_send_signal" => {
            let pidfd = super::raw::PIDFD_SELF_THREAD as u64;
            syscall6(libc::SYS_pidfd_send_signal, [pidfd, 0, 0, super::raw::PIDFD_SIGNAL_THREAD_GROUP, 0, 0]);
        }
        "close_range" => {
            let fd = syscall6(libc::SYS_fcntl, [2, libc::F_DUPFD_CLOEXEC as u64, 64, 0, 0, 0]);
            if fd >= 0 {
                syscall6(libc::SYS_close_range, [fd as u64, fd as u64, 0, 0, 0, 0]);
            }
        }
        "write" => {
            syscall6(libc::SYS_write, [2, buf.as_ptr() as u64, 0, 0, 0, 0]);
        }
        "uname" => {
            let mut uts = [0u8; std::mem::size_of::<libc::utsname>()];
            syscall6(libc::SYS_uname, [uts.as_mut_ptr() as u64, 0, 0, 0, 0, 0]);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seccomp_mode_is_read_from_the_status_text() {
        assert_eq!(seccomp_mode(b"Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t1\n"), Some(2));
        assert_eq!(seccomp_mode(b"Name:\tx\nSeccomp:\t0\n"), Some(0));
        assert_eq!(seccomp_mode(b"Name:\tx\n"), None);
    }

    #[test]
    fn without_a_filter_nothing_is_probed() {
        // The test runner has no filter of its own on this project's machines.
        if !filter_in_force() {
            assert_eq!(probe(), Verdict::NoFilter);
        }
    }
}
