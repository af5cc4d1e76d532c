//! A wake-up line from signal handlers to the reporter thread: a futex on a
//! static word. [`notify`] is one `FUTEX_WAKE` (async-signal-safe, no
//! descriptor); [`wait`] sleeps in `FUTEX_WAIT` until notified or timed out.

use std::sync::atomic::{AtomicU32, Ordering};

static WORD: AtomicU32 = AtomicU32::new(0);

/// Wakes the waiter. Async-signal-safe.
pub fn notify() {
    WORD.fetch_add(1, Ordering::Release);
    // FUTEX_WAKE on a live static word; no other memory is touched.
    let wake = (libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG) as u64;
    super::raw::syscall6(libc::SYS_futex, [WORD.as_ptr() as u64, wake, 1, 0, 0, 0]);
}

/// The current value of the line: pass it to [`wait`] to sleep only if nothing was notified since.
pub fn token() -> u32 {
    WORD.load(Ordering::Acquire)
}

/// Sleeps until [`notify`] is called after `token` was read, or `timeout_ms` passed.
pub fn wait(token: u32, timeout_ms: u32) {
    let ts = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: ((timeout_ms % 1000) * 1_000_000) as libc::c_long,
    };
    // FUTEX_WAIT reads the live static word and sleeps if it still equals `token`.
    let wait = (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64;
    super::raw::syscall6(libc::SYS_futex, [WORD.as_ptr() as u64, wait, u64::from(token), &ts as *const _ as u64, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn notify_wakes_a_waiter_and_timeouts_expire() {
        // The token is taken before the waiter starts: a notify after it must end the wait, however late
        // the waiter thread gets to run (on a loaded machine, later than the notify).
        let taken = token();
        let waiter = std::thread::spawn(move || {
            let start = Instant::now();
            wait(taken, 10_000);
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        notify();
        assert!(waiter.join().unwrap() < Duration::from_secs(5), "notify must end the wait");
        let start = Instant::now();
        wait(token(), 50);
        assert!(start.elapsed() >= Duration::from_millis(40), "with nothing notified, wait lasts its timeout");
    }
}
