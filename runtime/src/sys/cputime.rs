//! The calling thread's CPU time, for measurements on a shared machine (time
//! spent descheduled does not count). Async-signal-safe: one vDSO/syscall.

/// CLOCK_THREAD_CPUTIME_ID in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_PROCESS_CPUTIME_ID in nanoseconds (every thread's user and system time), through the raw system
/// call (no `errno`); 0 if it fails.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let clock = libc::CLOCK_PROCESS_CPUTIME_ID as u64;
    if super::raw::syscall6(libc::SYS_clock_gettime, [clock, &mut ts as *mut libc::timespec as u64, 0, 0, 0, 0]) != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn advances_with_work() {
        let before = super::thread_cpu_ns();
        let mut x = 0u64;
        while super::thread_cpu_ns() - before < 1_000_000 {
            x = std::hint::black_box(x + 1);
        }
        assert!(x > 0);
    }
}
