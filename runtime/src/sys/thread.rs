//! Thread identity, time and stalling for the signal path (all async-signal-safe),
//! and the set of the runtime's own threads, which are never sampled.

use crate::sys::{real, signal};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The kernel thread id of the caller.
pub fn gettid() -> i32 {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// The process id of the caller (a forked child sees its own).
pub fn getpid() -> i32 {
    // SAFETY: getpid(2) has no arguments and cannot fail.
    unsafe { libc::getpid() }
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

/// Starts a runtime thread running `body` with every signal blocked for its whole life (it inherits the
/// full mask), a small stack, and no racewatch start-up of its own (the real `pthread_create`).
/// Returns its handle.
pub fn spawn_runtime_thread(body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void) -> Option<libc::pthread_t> {
    const STACK: usize = 256 << 10;
    let old = signal::block_all();
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
    signal::restore_mask(&old);
    thread
}

/// What a thread created through [`create_hooked`] carries to its start.
#[derive(Clone, Copy)]
struct Start {
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    hook: fn(bool, usize),
    trap_blocked: bool,
    stack: usize,
}

/// Start records in flight: a fixed pool, so that neither the creating nor the new thread calls
/// `malloc`/`free` for them (glibc's first `free` in a thread gives it a 64 MiB malloc arena).
const RECORDS: usize = 64;
static RECORD_BUSY: [AtomicBool; RECORDS] = [const { AtomicBool::new(false) }; RECORDS];
static RECORD: [spin::Mutex<Option<Start>>; RECORDS] = [const { spin::Mutex::new(None) }; RECORDS];

// SAFETY: a `Start` holds a C function pointer and the program's argument pointer, which the
// program hands to another thread anyway (that is what pthread_create does).
unsafe impl Send for Start {}

/// The real `pthread_create`, with `hook(trap_blocked, stack size)` run in the new thread before
/// `start(arg)`. Falls back to a plain creation when every start record is in flight.
pub fn create_hooked(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    hook: fn(bool, usize),
    trap_blocked: bool,
) -> libc::c_int {
    let Some(index) =
        RECORD_BUSY.iter().position(|b| b.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        return real::pthread_create(thread, attr, start, arg);
    };
    let stack = crate::sys::stacks::stack_size_of(attr);
    *RECORD[index].lock() = Some(Start { start, arg, hook, trap_blocked, stack });
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
    (start.hook)(start.trap_blocked, start.stack);
    (start.start)(start.arg)
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

static EXIT_KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();

/// Makes `on_exit` run in every thread that called [`call_at_exit`], when it exits (returns from its
/// start routine or calls `pthread_exit`). Call once, before threads use it.
pub fn init_exit_hook(on_exit: extern "C" fn(*mut libc::c_void)) {
    EXIT_KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: creates a key with a destructor; `key` is written on success.
        if unsafe { libc::pthread_key_create(&mut key, Some(on_exit)) } != 0 {
            return libc::pthread_key_t::MAX;
        }
        key
    });
}

/// Arranges for the exit hook to run when the calling thread exits.
pub fn call_at_exit() {
    if let Some(&key) = EXIT_KEY.get().filter(|&&k| k != libc::pthread_key_t::MAX) {
        // SAFETY: a non-null value makes the key's destructor run at thread exit.
        unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<libc::c_void>()) };
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
