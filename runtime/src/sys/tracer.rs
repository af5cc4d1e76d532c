//! Whether a tracer (a debugger, `strace`, a ptrace supervisor) is attached to this process: the
//! `TracerPid` line of `/proc/self/status`, read through one descriptor kept open (and placed like
//! the runtime's other descriptors), so that a check costs one `pread` and no `open`.

use crate::sys::fd;
use std::sync::atomic::{AtomicI32, Ordering};

static STATUS: AtomicI32 = AtomicI32::new(-1);

/// Opens `/proc/self/status` for [`tracer_pid`] (once per process). False when it cannot be opened
/// (tracers then go unnoticed).
pub fn open() -> bool {
    if STATUS.load(Ordering::Acquire) >= 0 {
        return true;
    }
    // SAFETY: a NUL-terminated literal path; the descriptor is ours.
    let low = unsafe { libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if low < 0 {
        return false;
    }
    match fd::keep_high(low) {
        Ok(high) => {
            STATUS.store(high, Ordering::Release);
            true
        }
        Err(_) => false,
    }
}

/// The pid of the process tracing this one (`None`: not traced, or unknown).
pub fn tracer_pid() -> Option<i32> {
    let fd = STATUS.load(Ordering::Acquire);
    if fd < 0 || !fd::is_own(fd) {
        return None;
    }
    let mut buf = [0u8; 2048];
    // SAFETY: pread into a live buffer of its length from a descriptor of ours.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    parse(buf.get(..usize::try_from(n).ok()?)?)
}

fn parse(status: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(status).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("TracerPid:"))?;
    line.trim().parse().ok().filter(|&pid| pid != 0)
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
        assert_eq!(parse(b"Name:\tx\nTracerPid:\t0\nUid:\t0\n"), None);
        assert_eq!(parse(b"Name:\tx\nTracerPid:\t4321\nUid:\t0\n"), Some(4321));
        assert_eq!(parse(b"Name:\tx\n"), None);
    }
}
