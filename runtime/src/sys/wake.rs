//! A wake-up line from signal handlers to the reporter thread: an eventfd.
//! [`notify`] is one `write(2)` (async-signal-safe); [`wait`] blocks in
//! `poll(2)`, so an idle reporter costs no wake-ups.

use std::sync::atomic::{AtomicI32, Ordering};

static FD: AtomicI32 = AtomicI32::new(-1);

/// Creates the eventfd (once). Without it, [`wait`] just sleeps for its timeout.
pub fn init() -> std::io::Result<()> {
    if FD.load(Ordering::Acquire) >= 0 {
        return Ok(());
    }
    // SAFETY: eventfd(2) takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if FD.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire).is_err() {
        // SAFETY: `fd` is ours and unused: another thread installed its eventfd first.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Wakes the waiter. Async-signal-safe; errors (no eventfd, counter full) are ignored.
pub fn notify() {
    let fd = FD.load(Ordering::Acquire);
    if fd >= 0 {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to our eventfd.
        let _ = unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
    }
}

/// Blocks until [`notify`] was called or `timeout_ms` passed, then clears the line.
pub fn wait(timeout_ms: i32) {
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 {
        std::thread::sleep(std::time::Duration::from_millis(timeout_ms.max(0) as u64));
        return;
    }
    let mut pollfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd on the stack for the duration of the call.
    unsafe { libc::poll(&mut pollfd, 1, timeout_ms) };
    let mut count = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live local buffer; non-blocking.
    let _ = unsafe { libc::read(fd, count.as_mut_ptr().cast(), count.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn notify_wakes_a_waiter_and_timeouts_expire() {
        init().unwrap();
        let waiter = std::thread::spawn(|| {
            let start = Instant::now();
            wait(10_000);
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        notify();
        assert!(waiter.join().unwrap() < Duration::from_secs(5), "notify must end the wait");
        let start = Instant::now();
        wait(50);
        assert!(start.elapsed() >= Duration::from_millis(40), "with nothing pending, wait lasts its timeout");
    }
}
