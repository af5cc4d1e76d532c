//! The calling thread's CPU time, for measurements on a shared machine (time
//! spent descheduled does not count). Async-signal-safe: one vDSO/syscall.

/// CLOCK_THREAD_CPUTIME_ID in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let ts = super::thread::clock(libc::CLOCK_THREAD_CPUTIME_ID);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The process's user and system CPU time so far (every thread's, `getrusage(RUSAGE_SELF)`), in
/// nanoseconds, through the raw system call (no `errno`); `None` if it fails. Async-signal-safe.
pub fn process_user_system_ns() -> Option<(u64, u64)> {
    // SAFETY: zeroed is a valid rusage for the kernel to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let who = libc::RUSAGE_SELF as u64;
    if super::raw::syscall6(libc::SYS_getrusage, [who, &mut usage as *mut libc::rusage as u64, 0, 0, 0, 0]) != 0 {
        return None;
    }
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    Some((ns(usage.ru_utime), ns(usage.ru_stime)))
}

/// How many times the calling thread blocked so far (its voluntary context switches,
/// `getrusage(RUSAGE_THREAD).ru_nvcsw`); `None` if the call fails. Async-signal-safe.
pub fn thread_voluntary_switches() -> Option<u64> {
    // SAFETY: zeroed is a valid rusage for the kernel to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let who = libc::RUSAGE_THREAD as u64;
    if super::raw::syscall6(libc::SYS_getrusage, [who, &mut usage as *mut libc::rusage as u64, 0, 0, 0, 0]) != 0 {
        return None;
    }
    Some(usage.ru_nvcsw as u64)
}

/// Whether the calling thread runs under a real-time policy (`SCHED_FIFO`, `SCHED_RR`, with or without
/// `SCHED_RESET_ON_FORK`). One raw system call; async-signal-safe.
pub fn real_time_policy() -> bool {
    let policy = super::raw::syscall6(libc::SYS_sched_getscheduler, [0; 6]) & !(libc::SCHED_RESET_ON_FORK as i64);
    policy == i64::from(libc::SCHED_FIFO) || policy == i64::from(libc::SCHED_RR)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sleep_is_a_voluntary_switch_and_a_yield_is_not() {
        let start = super::thread_voluntary_switches().expect("getrusage");
        for _ in 0..100 {
            crate::sys::raw::yield_cpu();
        }
        assert_eq!(super::thread_voluntary_switches(), Some(start));
        crate::sys::raw::sleep_ns(100_000);
        assert!(super::thread_voluntary_switches().expect("getrusage") > start);
    }

    #[test]
    fn advances_with_work() {
        let before = super::thread_cpu_ns();
        let mut x = 0u64;
        while super::thread_cpu_ns() - before < 1_000_000 {
            x = std::hint::black_box(x + 1);
        }
        assert!(x > 0);
    }

    #[test]
    fn the_process_user_time_grows_with_user_work() {
        // User time is charged per scheduler tick, so work in user mode (not in the clock's own
        // system call) until it shows, within a bound far above a tick.
        let (user, _) = super::process_user_system_ns().unwrap();
        let before = super::thread_cpu_ns();
        let mut later = user;
        while later == user && super::thread_cpu_ns() - before < 2_000_000_000 {
            let mut x = 0u64;
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            later = super::process_user_system_ns().unwrap().0;
        }
        assert!(later > user, "no user time charged after 2 s of user work");
    }
}
