//! Thread identity, time and stalling for the signal path (all async-signal-safe),
//! and the set of the runtime's own threads, which are never sampled.

use std::sync::atomic::{AtomicI32, Ordering};

/// The kernel thread id of the caller.
pub fn gettid() -> i32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps `us` microseconds of wall time, resuming after interruptions.
pub fn sleep_us(us: u64) {
    let mut req = libc::timespec { tv_sec: (us / 1_000_000) as libc::time_t, tv_nsec: ((us % 1_000_000) * 1000) as _ };
    loop {
        let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: both timespecs are live locals.
        let rc = unsafe { libc::nanosleep(&req, &mut rem) };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
        req = rem;
    }
}

/// Capacity of the runtime-thread table.
const MAX_RUNTIME_THREADS: usize = 8;
static RUNTIME_TIDS: [AtomicI32; MAX_RUNTIME_THREADS] = [const { AtomicI32::new(0) }; MAX_RUNTIME_THREADS];

/// Marks the calling thread as the runtime's own (e.g. the reporter); false if the table is full.
pub fn mark_runtime_thread() -> bool {
    let tid = gettid();
    if is_runtime_thread(tid) {
        return true;
    }
    RUNTIME_TIDS.iter().any(|slot| slot.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok())
}

/// Whether `tid` was marked with [`mark_runtime_thread`].
pub fn is_runtime_thread(tid: i32) -> bool {
    RUNTIME_TIDS.iter().any(|slot| slot.load(Ordering::Acquire) == tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_about_as_long_as_asked_and_marks_threads() {
        let start = monotonic_ns();
        sleep_us(2000);
        let elapsed = monotonic_ns() - start;
        assert!((2_000_000..200_000_000).contains(&elapsed), "slept {elapsed} ns");
        let tid = std::thread::spawn(|| {
            assert!(mark_runtime_thread());
            gettid()
        })
        .join()
        .unwrap();
        assert!(is_runtime_thread(tid));
        assert!(!is_runtime_thread(gettid()));
    }
}
