//! `stats=1` when the program dies of a signal: a handler on the terminating signals the program left at
//! their default action prints the counters, then the signal takes its default action as before (the
//! same exit status, the same core dump).
//!
//! The handler is installed with `SA_RESETHAND`, so the kernel restores `SIG_DFL` as it enters. A fault
//! (`SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL` raised by an instruction) returns and faults again; a sent
//! signal is sent again to the same thread and, blocked while the handler runs, is delivered the moment
//! it returns. The program keeps seeing `SIG_DFL`: the interposed `sigaction`/`signal` report it
//! ([`covers`]), and installing its own disposition simply replaces ours ([`release`]).

use super::real;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The signals whose default action terminates the process and that a handler can catch.
const SIGNALS: [c_int; 15] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGILL,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGSEGV,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGXCPU,
    libc::SIGXFSZ,
];

/// Bit `sig - 1`: our handler is installed where the program believes `SIG_DFL` is.
static COVERED: AtomicU64 = AtomicU64::new(0);
static CALLBACK: AtomicUsize = AtomicUsize::new(0);
static FIRED: AtomicBool = AtomicBool::new(false);

fn bit(sig: c_int) -> u64 {
    if (1..=64).contains(&sig) {
        1 << (sig - 1)
    } else {
        0
    }
}

/// Installs the handler on every terminating signal still at `SIG_DFL`; `callback` runs (once per
/// process) when one arrives and must be async-signal-safe.
pub fn install(callback: fn()) {
    CALLBACK.store(callback as usize, Ordering::Release);
    for sig in SIGNALS {
        // SAFETY: zeroed `sigaction` is a valid value for the kernel to fill (`old`) and a valid
        // "default, empty mask" base for ours, which gets our handler and flags.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if real::own_sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_fatal as *const () as usize;
            // Not SA_ONSTACK: a program's alternate stack can be a few KiB (Rust gives each thread
            // 8 KiB for its SIGSEGV handler); the callback moves to a runtime stack when it can.
            new.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND;
            COVERED.fetch_or(bit(sig), Ordering::AcqRel);
            if real::own_sigaction(sig, &new, std::ptr::null_mut()) != 0 {
                COVERED.fetch_and(!bit(sig), Ordering::AcqRel);
            }
        }
    }
}

/// Whether `sig` carries our handler where the program believes `SIG_DFL` is.
pub fn covers(sig: c_int) -> bool {
    COVERED.load(Ordering::Acquire) & bit(sig) != 0
}

/// The program installs its own disposition for `sig`: ours is forgotten (the program's replaces it).
pub fn release(sig: c_int) {
    COVERED.fetch_and(!bit(sig), Ordering::AcqRel);
}

/// What the program sees for a signal we cover: the default action, no flags, an empty mask.
pub fn default_action() -> libc::sigaction {
    // SAFETY: all-zero is `SIG_DFL` with no flags and an empty mask.
    unsafe { std::mem::zeroed() }
}

/// The handler: the callback once per process, then the default action.
extern "C" fn on_fatal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    COVERED.fetch_and(!bit(sig), Ordering::AcqRel);
    if !FIRED.swap(true, Ordering::AcqRel) {
        let callback = CALLBACK.load(Ordering::Acquire);
        if callback != 0 {
            // SAFETY: `CALLBACK` only ever holds a `fn()` stored by `install`.
            let callback: fn() = unsafe { std::mem::transmute(callback) };
            if !super::stacks::run_on_runtime_stack(ctx as usize, &mut || callback()) {
                callback();
            }
        }
    }
    // SAFETY: a non-null `info` is the kernel's siginfo for this delivery.
    let code = unsafe { info.as_ref() }.map_or(0, |info| info.si_code);
    // BUS_MCEERR_AO: an asynchronous machine-check report, not raised by an instruction.
    const BUS_MCEERR_AO: c_int = 5;
    let fault = matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL)
        && code > 0
        && !(sig == libc::SIGBUS && code == BUS_MCEERR_AO);
    if !fault {
        // tgkill to this very thread; the signal is blocked while we run, so it stays pending and takes
        // its default action (restored by SA_RESETHAND) when the handler returns.
        crate::sys::raw::tgkill(crate::sys::raw::getpid(), crate::sys::raw::gettid(), sig);
    }
}
