//! SIGTRAPs that are not the runtime's reach the handler the program installed first.

use racewatch::sys::perf::{WatchKind, Watchpoint};
use racewatch::sys::signal::{self, PerfSignal};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

static PROGRAM_CALLS: AtomicU32 = AtomicU32::new(0);
static PROGRAM_LAST_CODE: AtomicI32 = AtomicI32::new(0);
static RUNTIME_CALLS: AtomicU32 = AtomicU32::new(0);

extern "C" fn program_handler(_sig: i32, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    PROGRAM_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    PROGRAM_LAST_CODE.store(unsafe { (*info).si_code }, Ordering::SeqCst);
}

/// Claims only watchpoint traps whose sig_data is 1.
fn claims(sig_data: u64) -> bool {
    sig_data == 1
}

fn runtime_callback(_: &PerfSignal) {
    RUNTIME_CALLS.fetch_add(1, Ordering::SeqCst);
    // A failing syscall sets errno (EFAULT) inside the handler.
    assert!(racewatch::sys::mem::read_u64(8).is_none());
}

#[test]
fn foreign_sigtraps_are_chained_and_ours_are_not() {
    // SAFETY: installs a plain SA_SIGINFO handler, as a host program would.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = program_handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        assert_eq!(libc::sigaction(libc::SIGTRAP, &action, std::ptr::null_mut()), 0);
    }
    signal::install(claims, runtime_callback).unwrap();

    // A user-sent SIGTRAP (si_code SI_TKILL) is not a perf signal: chained.
    // SAFETY: raise(3) sends SIGTRAP to this thread; both handlers are installed.
    unsafe { libc::raise(libc::SIGTRAP) };
    assert_eq!(PROGRAM_CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(PROGRAM_LAST_CODE.load(Ordering::SeqCst), libc::SI_TKILL);
    assert_eq!(RUNTIME_CALLS.load(Ordering::SeqCst), 0);

    // errno survives a handled perf signal.
    static VAR: AtomicU64 = AtomicU64::new(0);
    let wp = Watchpoint::open(0).unwrap();
    wp.arm(VAR.as_ptr() as u64, 8, WatchKind::Write, 1).unwrap();
    std::thread::spawn(|| {
        racewatch::sys::thread::register_current();
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = 1234 };
        VAR.store(5, Ordering::Relaxed);
        // SAFETY: as above.
        assert_eq!(unsafe { *libc::__errno_location() }, 1234);
    })
    .join()
    .unwrap();
    assert_eq!(RUNTIME_CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(PROGRAM_CALLS.load(Ordering::SeqCst), 1, "a claimed perf signal is not chained");

    // In a thread the runtime does not know (not created through its pthread_create), a claimed perf
    // signal is dropped untouched: neither the callback nor the program sees it.
    wp.arm(VAR.as_ptr() as u64, 8, WatchKind::Write, 1).unwrap();
    std::thread::spawn(|| VAR.store(7, Ordering::Relaxed)).join().unwrap();
    assert_eq!(RUNTIME_CALLS.load(Ordering::SeqCst), 1, "an unknown thread's perf signal is dropped");
    assert_eq!(PROGRAM_CALLS.load(Ordering::SeqCst), 1, "and not chained to the program either");

    // A perf signal the callback declines goes to the program.
    wp.arm(VAR.as_ptr() as u64, 8, WatchKind::Write, 2).unwrap();
    std::thread::spawn(|| {
        racewatch::sys::thread::register_current();
        VAR.store(6, Ordering::Relaxed)
    })
    .join()
    .unwrap();
    assert_eq!(RUNTIME_CALLS.load(Ordering::SeqCst), 1, "a declined perf signal is not the runtime's");
    assert_eq!(PROGRAM_CALLS.load(Ordering::SeqCst), 2);
    assert_eq!(PROGRAM_LAST_CODE.load(Ordering::SeqCst), signal::TRAP_PERF);
    wp.disarm().unwrap();
}
