//! Thread identity, time and stalling for the signal path (all async-signal-safe),
//! and the set of the runtime's own threads, which are never sampled.

use crate::sys::{creation, raw, real};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The kernel thread id of the caller.
pub fn gettid() -> i32 {
    raw::gettid()
}

/// The process id of the caller (a forked child sees its own).
pub fn getpid() -> i32 {
    raw::getpid()
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps `us` microseconds of wall time, resuming after interruptions. Never a cancellation point:
/// a `pthread_cancel` cannot act inside the runtime's signal handler.
pub fn sleep_us(us: u64) {
    raw::sleep_ns(us.saturating_mul(1000));
}

/// Starts a runtime thread running `body` with every signal blocked for its whole life (it inherits the
/// full mask), a small stack, and no racewatch start-up of its own (the real `pthread_create`).
/// Returns its handle.
pub fn spawn_runtime_thread(body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void) -> Option<libc::pthread_t> {
    const STACK: usize = 256 << 10;
    let old = raw::sigprocmask(libc::SIG_SETMASK, Some(u64::MAX));
    // SAFETY: attr is initialised before use and destroyed after; the thread handle is written by
    // pthread_create on success.
    let thread = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstacksize(&mut attr, STACK);
        let mut thread: libc::pthread_t = 0;
        let rc = real::pthread_create(&mut thread, &attr, body, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0).then_some(thread)
    };
    if let Some(old) = old {
        raw::sigprocmask(libc::SIG_SETMASK, Some(old));
    }
    thread
}

/// What a thread created through [`create_hooked`] carries to its start.
#[derive(Clone, Copy)]
struct Start {
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    hook: fn(&ThreadStart),
    info: ThreadStart,
    /// The creating thread's side, for reports.
    creation: creation::Creation,
}

/// What the creating thread knows of a new thread, handed to the hook that runs in it first.
#[derive(Clone, Copy, Debug)]
pub struct ThreadStart {
    /// Whether the program had `SIGTRAP` blocked (virtually) in the creating thread.
    pub trap_blocked: bool,
    /// The size of the new thread's stack.
    pub stack: usize,
    /// The size of the alternate signal stack to give it (0: none).
    pub alt_stack: usize,
}

/// Start records in flight: a fixed pool, so that neither the creating nor the new thread calls
/// `malloc`/`free` for them (glibc's first `free` in a thread gives it a 64 MiB malloc arena).
const RECORDS: usize = 64;
static RECORD_BUSY: [AtomicBool; RECORDS] = [const { AtomicBool::new(false) }; RECORDS];
static RECORD: [spin::Mutex<Option<Start>>; RECORDS] = [const { spin::Mutex::new(None) }; RECORDS];

// SAFETY: a `Start` holds a C function pointer and the program's argument pointer, which the
// program hands to another thread anyway (that is what pthread_create does).
unsafe impl Send for Start {}

/// The real `pthread_create`, with `hook(info)` run in the new thread before `start(arg)`. Falls back
/// to a plain creation when every start record is in flight.
pub fn create_hooked(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    hook: fn(&ThreadStart),
    info: ThreadStart,
) -> libc::c_int {
    let Some(index) =
        RECORD_BUSY.iter().position(|b| b.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        return real::pthread_create(thread, attr, start, arg);
    };
    let creation = creation::capture();
    *RECORD[index].lock() = Some(Start { start, arg, hook, info, creation });
    let rc = real::pthread_create(thread, attr, hooked_start, index as *mut libc::c_void);
    if rc != 0 {
        RECORD[index].lock().take();
        RECORD_BUSY[index].store(false, Ordering::Release);
    }
    rc
}

extern "C" fn hooked_start(index: *mut libc::c_void) -> *mut libc::c_void {
    let index = index as usize;
    let start = RECORD[index].lock().take().expect("a start record for every hooked thread");
    RECORD_BUSY[index].store(false, Ordering::Release);
    creation::started(&start.creation, start.info.stack);
    (start.hook)(&start.info);
    (start.start)(start.arg)
}

// ---- The program threads the runtime knows ----
//
// A thread is known once it registered here: the thread that started the detector and every thread
// created through the interposed `pthread_create`. The signal handler looks the caller's tid up before
// it touches anything thread-local: a thread made with a raw `clone` (a green-thread runtime's, or one
// sharing its parent's TLS) is not known, and the runtime's own signals are dropped there untouched.
// There is no exit hook (it would cost the program a `pthread_key` or a malloc in every thread): the
// slot of a thread that ended is taken over by a later registration once the kernel says the tid is
// gone, and a tid the kernel gave again replaces its stale entry.

/// Slots of the known-thread table.
pub const KNOWN_SLOTS: usize = super::KNOWN_THREADS;
/// How many slots from a tid's home slot it may occupy.
const PROBES: usize = 32;
static KNOWN: [AtomicI32; KNOWN_SLOTS] = [const { AtomicI32::new(0) }; KNOWN_SLOTS];

fn probe(tid: i32) -> impl Iterator<Item = usize> {
    let home = (tid as u32).wrapping_mul(0x9e37_79b9) as usize % KNOWN_SLOTS;
    (0..PROBES).map(move |i| (home + i) % KNOWN_SLOTS)
}

/// Registers the calling thread as known; returns its slot (a slot that an ended thread held before
/// is handed over: the caller may reuse what it left there), or `None` when the table has no room.
pub fn register_current() -> Option<usize> {
    let tid = raw::gettid();
    if let Some(slot) = known_slot(tid) {
        return Some(slot);
    }
    for slot in probe(tid) {
        if KNOWN[slot].compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Some(slot);
        }
    }
    probe(tid).find(|&slot| {
        let old = KNOWN[slot].load(Ordering::Acquire);
        old != 0
            && !raw::thread_alive(old)
            && KNOWN[slot].compare_exchange(old, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    })
}

/// The slot of thread `tid` when it is known. Async-signal-safe, touches no thread-local storage.
pub fn known_slot(tid: i32) -> Option<usize> {
    probe(tid).find(|&slot| KNOWN[slot].load(Ordering::Acquire) == tid)
}

/// Forgets every known thread (in a forked child, only the forking thread lives on; it registers
/// again when the child starts its own detector).
pub fn forget_known_threads() {
    for slot in &KNOWN {
        slot.store(0, Ordering::Release);
    }
}

/// Runs `child` in the child of every `fork` (not `vfork`, `_Fork` or raw `clone`).
pub fn at_fork_child(child: extern "C" fn()) {
    // SAFETY: registers a plain function with no prepare or parent handler.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// Names the calling thread (at most 15 bytes show in `/proc/<pid>/task/<tid>/comm`).
pub fn set_name(name: &std::ffi::CStr) {
    // SAFETY: `name` is NUL-terminated and outlives the call.
    unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
}

/// Waits up to `timeout_ms` for a runtime thread to end; false when it did not.
pub fn join_for(thread: libc::pthread_t, timeout_ms: u64) -> bool {
    let mut deadline = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: fills a live timespec; pthread_timedjoin_np takes a thread of ours and the deadline.
    unsafe {
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut deadline);
        let ns = deadline.tv_nsec as u64 + (timeout_ms % 1000) * 1_000_000;
        deadline.tv_sec += (timeout_ms / 1000 + ns / 1_000_000_000) as libc::time_t;
        deadline.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
        libc::pthread_timedjoin_np(thread, std::ptr::null_mut(), &deadline) == 0
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

/// Forgets every runtime thread (in a forked child, where none of them exists).
pub fn forget_runtime_threads() {
    for slot in &RUNTIME_TIDS {
        slot.store(0, Ordering::Release);
    }
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
