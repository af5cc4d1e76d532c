//! File descriptors: the runtime's own (kept above the program's, tracked so
//! that the program's `close`/`dup2` over them can be noticed), and raw output
//! that never raises `SIGPIPE` in the program and never blocks for long.

use crate::sys::real;
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, Ordering};

/// How many descriptors the runtime may hold at once (sampler + 4 watchpoints, with room).
const MAX_OWN: usize = 8;
static OWN: [AtomicI32; MAX_OWN] = [const { AtomicI32::new(-1) }; MAX_OWN];

/// Below this soft `RLIMIT_NOFILE` the runtime takes no descriptor the program could have had.
const SMALL_LIMIT: u64 = 4096;
/// With a large limit and no room above it, descriptors go this far below the limit (or 64 Ki).
const HIGH_CEILING: u64 = 1 << 16;

/// Moves `fd` (a fresh close-on-exec descriptor of ours) out of the program's way and records it as ours.
///
/// Preferred: just above the soft `RLIMIT_NOFILE` (raised for the `F_DUPFD` and restored at once, the
/// hard limit too when it leaves no room and the process may raise it), where the program's own `open`s
/// can never land and `getdtablesize()` loops never reach, so the program can open exactly as many
/// descriptors as without racewatch. When that is not possible and the limit is small, the descriptor is
/// refused (`EMFILE`): the caller runs without detection. With a large limit it goes high below it. Call while no other thread changes the limit (the first `pthread_create`).
pub fn keep_high(fd: i32) -> std::io::Result<i32> {
    let moved = relocate(fd);
    real::close(fd);
    let moved = moved?;
    if !OWN.iter().any(|slot| slot.compare_exchange(-1, moved, Ordering::AcqRel, Ordering::Relaxed).is_ok()) {
        real::close(moved);
        return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
    }
    Ok(moved)
}

/// Reads a whole file for the runtime's own use (the reporter reading an ELF file for symbols)
/// through a descriptor above the soft `RLIMIT_NOFILE`. A program that closes every descriptor
/// meanwhile (a daemon's close loop) can close ours, and its next `open` can get the same number:
/// our close would then close the program's file. The program is never given a number that high,
/// so only the few microseconds between the `open` and the move remain exposed, not the read.
pub fn read_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::FromRawFd;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c_path` is NUL-terminated and outlives the call.
    let low = unsafe { libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if low < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let high = relocate(low);
    real::close(low);
    // SAFETY: `high` is a descriptor this function just made and nothing else owns; the File
    // closes it when dropped.
    let mut file = unsafe { std::fs::File::from_raw_fd(high?) };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn relocate(fd: i32) -> std::io::Result<i32> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a live rlimit the kernel fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let soft = limit.rlim_cur;
    if soft < libc::RLIM_INFINITY - 2 * MAX_OWN as u64 {
        // Raising the hard limit too needs CAP_SYS_RESOURCE (it fails harmlessly without); lowering it
        // back never does.
        let wanted = soft + 2 * MAX_OWN as u64;
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max.max(wanted) };
        // SAFETY: both rlimits are live; the limits are restored right after the dup.
        unsafe {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, soft as libc::c_int);
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                if moved >= 0 {
                    return Ok(moved);
                }
            }
        }
    }
    if soft < SMALL_LIMIT {
        return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
    }
    let floor = soft.min(HIGH_CEILING) - 4 * MAX_OWN as u64;
    // SAFETY: plain fcntl on our own descriptor.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor as libc::c_int) };
    if moved < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(moved)
    }
}

/// Whether `fd` is one of the runtime's descriptors. Lock-free.
pub fn is_own(fd: i32) -> bool {
    fd >= 0 && OWN.iter().any(|slot| slot.load(Ordering::Acquire) == fd)
}

/// Whether any of the runtime's descriptors lies in `first..=last`.
pub fn any_own_in(first: u64, last: u64) -> bool {
    OWN.iter().any(|slot| {
        let fd = slot.load(Ordering::Acquire);
        fd >= 0 && (first..=last).contains(&(fd as u64))
    })
}

/// Drops `fd` from the runtime's set; true when it was there (and so may still be closed by us).
pub fn forget_own(fd: i32) -> bool {
    OWN.iter().any(|slot| slot.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed).is_ok())
}

/// Forgets every descriptor of ours without closing it (the program closed them).
pub fn forget_all_own() {
    for slot in &OWN {
        slot.store(-1, Ordering::Release);
    }
}

/// Closes and forgets every descriptor of ours (a forked child's copies of the parent's).
pub fn close_all_own() {
    for slot in &OWN {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            real::close(fd);
        }
    }
}

/// Whether `fd` is an open descriptor.
pub fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only inspects the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// The largest write that a pipe with any free room takes without blocking.
const CHUNK: usize = 4096;

/// Writes `bytes` to `fd` in chunks, each after waiting at most `wait_ms` for room; gives up (returns
/// false) on a reader that does not keep up or on any error. Never raises `SIGPIPE` in the program: the
/// signal is blocked around the write and a `SIGPIPE` it raised is taken back.
pub fn write_all(fd: i32, bytes: &[u8], wait_ms: i32) -> bool {
    let _quiet = QuietPipe::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let mut pollfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
        // SAFETY: one live pollfd.
        let ready = unsafe { libc::poll(&mut pollfd, 1, wait_ms) };
        if ready < 0 && errno() == libc::EINTR {
            continue;
        }
        if ready <= 0 || pollfd.revents & (libc::POLLERR | libc::POLLNVAL | libc::POLLHUP) != 0 {
            return false;
        }
        let len = rest.len().min(CHUNK);
        // SAFETY: `rest` is a live slice; write(2) reads at most `len` bytes of it.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), len) };
        if n > 0 {
            rest = &rest[n as usize..];
        } else if n < 0 && errno() == libc::EINTR {
            continue;
        } else {
            return false;
        }
    }
    true
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Blocks `SIGPIPE` in this thread while alive; on drop, takes back a `SIGPIPE` that became pending
/// meanwhile (unless the program already had one pending) and restores the mask.
struct QuietPipe {
    old: libc::sigset_t,
    had_pending: bool,
}

impl QuietPipe {
    fn new() -> QuietPipe {
        // SAFETY: sigset operations on live locals; the real pthread_sigmask changes only this thread.
        unsafe {
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            let mut old: libc::sigset_t = std::mem::zeroed();
            real::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            QuietPipe { old, had_pending: libc::sigismember(&pending, libc::SIGPIPE) == 1 }
        }
    }
}

impl Drop for QuietPipe {
    fn drop(&mut self) {
        // SAFETY: as in `new`; sigtimedwait with a zero timeout only dequeues a pending SIGPIPE.
        unsafe {
            if !self.had_pending {
                let mut pipe: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut pipe);
                libc::sigaddset(&mut pipe, libc::SIGPIPE);
                let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                while libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
            }
            real::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// The device and inode of an open descriptor.
pub fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: `st` is a live stat buffer the kernel fills.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Creates `path` (0644, close-on-exec, write-only, appending); fails when anything exists there
/// already, a symlink included.
pub fn create_new(path: &CStr) -> std::io::Result<i32> {
    open(path, libc::O_CREAT | libc::O_EXCL)
}

/// Opens an existing `path` for appending without following a symlink at it.
pub fn reopen(path: &CStr) -> std::io::Result<i32> {
    open(path, 0)
}

fn open(path: &CStr, extra: i32) -> std::io::Result<i32> {
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY | extra;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o644) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Closes a descriptor of the runtime's (a perf event it forgot, a log file opened for one write).
pub fn close(fd: i32) {
    real::close(fd);
}
