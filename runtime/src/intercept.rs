//! The libc functions racewatch interposes, to live inside the host program
//! without changing it (DESIGN.md "host contract"). Each wrapper is trivial
//! on the fast path and then calls the real function ([`sys::real`]).
//!
//! - `pthread_create`: starts the detector at the program's second thread;
//!   new threads inherit the program's `SIGTRAP` mask bit and get their stack
//!   bounds (and, for small stacks, an alternate signal stack) recorded.
//! - `sigaction`, `signal`: with `stats=1`, terminating signals the program
//!   left at `SIG_DFL` carry racewatch's stats handler ([`fatal`]) and still
//!   read as `SIG_DFL`. The program's `SIGTRAP` disposition is recorded,
//!   not installed; other handlers run with `SIGTRAP` blocked in the kernel
//!   exactly when they run on an alternate stack ([`blocks_trap_in_kernel`]).
//! - `sigprocmask`, `pthread_sigmask`: `SIGTRAP` is blocked virtually.
//! - `close`, `close_range`, `closefrom`, `dup2`, `dup3`: closing or
//!   replacing a descriptor of ours switches detection off first; closing
//!   descriptor 2 stops the runtime's writes to stderr.
//! - `prctl(PR_SET_SECCOMP)` and `syscall` (`seccomp`, `prctl`, and the
//!   descriptor calls above made as raw syscalls): the detector is switched
//!   off before a sandbox goes in.
//! - `dlclose`: the unwinder's table of mapped `.eh_frame` sections is emptied
//!   (and its readers waited for) before a module can be unmapped, and rebuilt
//!   after.
//!
//! The symbols are exported only with the `preload` feature (the cdylib the
//! CLI embeds); without it they are plain Rust functions (tests, benches).
//!
//! Before the runtime owns `SIGTRAP` (no covered code, or one thread so
//! far), the signal wrappers pass everything through unchanged.

use crate::sys::ptr::{opt_mut, opt_ref};
use crate::sys::real::{self, StartRoutine};
use crate::sys::{fatal, fd, signal, thread, unwind_info};
use crate::{detector, log};
use std::ffi::{c_int, c_long, c_uint, c_ulong, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

/// Signals (bit `sig - 1`) whose program-installed `sa_mask` holds `SIGTRAP` (the kernel's may differ).
static PROGRAM_MASK_HAS_TRAP: AtomicU64 = AtomicU64::new(0);

/// Interposed `pthread_create`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    detector::before_thread_create();
    if !signal::is_installed() || detector::is_sandboxed() {
        return real::pthread_create(thread, attr, start, arg);
    }
    thread::create_hooked(thread, attr, start, arg, detector::thread_hook, signal::trap_blocked())
}

/// Interposed `sigaction`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let old = if fatal::covers(sig) {
        // `stats=1`'s handler stands where the program believes SIG_DFL is.
        if let Some(old) = opt_mut(old) {
            *old = fatal::default_action();
        }
        if act.is_null() {
            return 0;
        }
        fatal::release(sig);
        std::ptr::null_mut()
    } else {
        old
    };
    if !signal::is_installed() {
        return real::sigaction(sig, act, old);
    }
    if sig == libc::SIGTRAP {
        if let Some(old) = opt_mut(old) {
            *old = signal::program_action();
        }
        if let Some(act) = opt_ref(act) {
            signal::set_program_action(act);
        }
        return 0;
    }
    let Some(bit) = signal_bit(sig) else { return real::sigaction(sig, act, old) };
    let program_had_trap = PROGRAM_MASK_HAS_TRAP.load(Ordering::Acquire) & bit != 0;
    let kernel = opt_ref(act).map(|act| {
        let mut copy = *act;
        copy.sa_mask = signal::with_trap(&act.sa_mask, blocks_trap_in_kernel(act.sa_flags));
        (copy, signal::has_trap(&act.sa_mask))
    });
    let rc = real::sigaction(sig, kernel.as_ref().map_or(std::ptr::null(), |(copy, _)| copy), old);
    if rc == 0 {
        if let Some(old) = opt_mut(old) {
            old.sa_mask = signal::with_trap(&old.sa_mask, program_had_trap);
        }
        match kernel {
            Some((_, true)) => PROGRAM_MASK_HAS_TRAP.fetch_or(bit, Ordering::AcqRel),
            Some((_, false)) => PROGRAM_MASK_HAS_TRAP.fetch_and(!bit, Ordering::AcqRel),
            None => 0,
        };
    }
    rc
}

fn signal_bit(sig: c_int) -> Option<u64> {
    (sig as u32).checked_sub(1).and_then(|shift| 1u64.checked_shl(shift))
}

/// Whether a program handler with `flags` runs with `SIGTRAP` blocked in the kernel. On an alternate
/// stack, yes: a signal frame of ours nested there (3.5 KiB with AVX-512 state) could overflow a small
/// alternate stack before any check of ours runs; our signals wait until the handler returns (and
/// are then dropped as late). Elsewhere, no: a blocked signal of ours would be queued where the
/// program's `sigwait`/`signalfd` could take it.
fn blocks_trap_in_kernel(flags: c_int) -> bool {
    flags & libc::SA_ONSTACK != 0
}

/// Brings the handlers the program installed before the runtime took `SIGTRAP` under the rule of
/// [`blocks_trap_in_kernel`], remembering their masks as the program set them.
pub fn adopt_installed_handlers() {
    for sig in 1..=64 {
        let Some(bit) = signal_bit(sig) else { continue };
        if sig == libc::SIGTRAP || sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: zeroed sigaction is a valid out-parameter.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        if real::sigaction(sig, std::ptr::null(), &mut current) != 0 {
            continue;
        }
        let program_has_trap = signal::has_trap(&current.sa_mask);
        if program_has_trap {
            PROGRAM_MASK_HAS_TRAP.fetch_or(bit, Ordering::AcqRel);
        }
        let handler = current.sa_sigaction;
        let wanted = blocks_trap_in_kernel(current.sa_flags);
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN && wanted != program_has_trap {
            current.sa_mask = signal::with_trap(&current.sa_mask, wanted);
            real::sigaction(sig, &current, std::ptr::null_mut());
        }
    }
}

/// Interposed `signal` (glibc's calls its internal `sigaction`, which the interposer above never sees).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if fatal::covers(sig) {
        fatal::release(sig);
        let replaced = real::signal(sig, handler);
        return if replaced == libc::SIG_ERR { replaced } else { libc::SIG_DFL };
    }
    if sig != libc::SIGTRAP || !signal::is_installed() {
        return real::signal(sig, handler);
    }
    let old = signal::program_action().sa_sigaction;
    let mut action = signal::program_action();
    action.sa_sigaction = handler;
    // BSD semantics, as glibc's signal(): restart, and the signal blocked in its own handler.
    action.sa_flags = libc::SA_RESTART;
    action.sa_mask = signal::with_trap(&signal::from_bits(0), true);
    signal::set_program_action(&action);
    old
}

/// Interposed `sigprocmask`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigprocmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    masked(how, set, old, real::sigprocmask)
}

/// Interposed `pthread_sigmask`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    masked(how, set, old, real::pthread_sigmask)
}

type MaskFn = fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// A mask change with `SIGTRAP` kept out of the kernel's mask and its program-visible state kept here.
fn masked(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t, real_fn: MaskFn) -> c_int {
    if !signal::is_installed() {
        return real_fn(how, set, old);
    }
    let was_blocked = signal::trap_blocked();
    let set_ptr = set;
    let set = opt_ref(set);
    let trap = set.is_some_and(signal::has_trap);
    // Unblocking SIGTRAP is always passed on (it may be blocked for real while one of the program's waits).
    let rc = if trap && how != libc::SIG_UNBLOCK {
        let kernel_set = set.map(|s| signal::with_trap(s, false));
        real_fn(how, kernel_set.as_ref().map_or(std::ptr::null(), |s| s), old)
    } else {
        real_fn(how, set_ptr, old)
    };
    if rc != 0 {
        return rc;
    }
    if was_blocked {
        if let Some(old) = opt_mut(old) {
            signal::add_trap(old);
        }
    }
    if set.is_some() {
        let blocked = match how {
            libc::SIG_BLOCK => was_blocked || trap,
            libc::SIG_UNBLOCK => was_blocked && !trap,
            _ => trap,
        };
        signal::set_trap_blocked(blocked);
    }
    rc
}

/// Interposed `close`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn close(fd: c_int) -> c_int {
    closing(fd as u64, fd as u64);
    real::close(fd)
}

/// Interposed `close_range`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        closing(first.into(), last.into());
    }
    real::close_range(first, last, flags)
}

/// Interposed `closefrom`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn closefrom(low: c_int) {
    closing(low.max(0) as u64, u64::MAX);
    real::closefrom(low)
}

/// Interposed `dup2`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    replacing(new);
    real::dup2(old, new)
}

/// Interposed `dup3`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    replacing(new);
    real::dup3(old, new, flags)
}

/// The program closes descriptors `first..=last`.
fn closing(first: u64, last: u64) {
    if fd::any_own_in(first, last) {
        detector::descriptors_taken();
    }
    if (first..=last).contains(&2) {
        log::stderr_closed();
    }
}

/// The program puts a descriptor at `new`.
fn replacing(new: c_int) {
    if fd::is_own(new) {
        detector::descriptors_taken();
    }
    if new == 2 {
        log::stderr_replaced();
    }
}

/// Interposed `prctl` (variadic in C: all five argument words are passed in registers on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn prctl(option: c_int, a2: c_ulong, a3: c_ulong, a4: c_ulong, a5: c_ulong) -> c_int {
    if option == libc::PR_SET_SECCOMP {
        detector::entering_sandbox();
    }
    real::prctl(option, a2, a3, a4, a5)
}

const SECCOMP_SET_MODE_STRICT: c_long = 0;
const SECCOMP_SET_MODE_FILTER: c_long = 1;

/// Interposed `syscall` (variadic in C: six argument words in registers on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn syscall(number: c_long, a: c_long, b: c_long, c: c_long, d: c_long, e: c_long, f: c_long) -> c_long {
    match number {
        libc::SYS_seccomp if a == SECCOMP_SET_MODE_STRICT || a == SECCOMP_SET_MODE_FILTER => {
            detector::entering_sandbox()
        }
        libc::SYS_prctl if a == libc::PR_SET_SECCOMP as c_long => detector::entering_sandbox(),
        libc::SYS_close => closing(a as u64, a as u64),
        libc::SYS_close_range if c & libc::CLOSE_RANGE_CLOEXEC as c_long == 0 => {
            closing(a as c_uint as u64, b as c_uint as u64)
        }
        libc::SYS_dup2 | libc::SYS_dup3 => replacing(b as c_int),
        _ => {}
    }
    real::syscall(number, [a, b, c, d, e, f])
}

/// Interposed `dlclose`: no stack unwind may read a module's `.eh_frame` while the loader unmaps it.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let closing = unwind_info::suspend();
    // A reader of the unwind table that never left (a thread stopped inside a handler) could still
    // read the module: keep it loaded rather than unmap it under that reader.
    let rc = if closing.safe { real::dlclose(handle) } else { 0 };
    unwind_info::closed(&closing);
    rc
}
