//! The libc functions racewatch interposes, to live inside the host program
//! without changing it (DESIGN.md "host contract"). Each wrapper is trivial
//! on the fast path and then calls the real function ([`sys::real`]).
//!
//! - `pthread_create`: starts the detector at the program's second thread;
//!   new threads inherit the program's `SIGTRAP` mask bit and get their stack
//!   bounds (and, for small stacks, an alternate signal stack) recorded.
//! - `pthread_key_create`: racewatch's key ([`thread_end`]) goes to the program when glibc would
//!   number the program's next key after it.
//! - `pthread_join`: a program back to one thread gets the reporter out of the way before the join
//!   returns (the first 64 times; after that only before `unshare` or `setns`, also made raw).
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
//! - `open`, `open64`, `openat`, `openat64`, `fopen`, `fopen64`, `opendir`, `readdir`, `readdir64`,
//!   `closedir`: the program's own `/proc` status files and its `task` and `fd` listings read as
//!   without racewatch ([`proc_view`]).
//! - `munmap`: another thread's alternate stack in the kernel stays mapped.
//! - `setuid`, `setgid`, `seteuid`, `setegid`, `setreuid`, `setregid`, `setresuid`, `setresgid`,
//!   `setgroups`, `initgroups`: glibc's broadcast to every thread waits until a reporter start in a
//!   signal handler has left `pthread_create` ([`setxid`]).
//! - `dlclose`: the unwinder's table of mapped `.eh_frame` sections is emptied
//!   (and its readers waited for) before a module can be unmapped, and rebuilt
//!   after.
//!
//! The symbols are exported only with the `preload` feature (the cdylib the
//! CLI embeds); without it they are plain Rust functions (tests, benches).
//!
//! The kernel masks of the program's other handlers are kept in [`handlers`].
//!
//! Before the runtime owns `SIGTRAP` (no covered code, or one thread so
//! far), the signal wrappers pass everything through unchanged.

use crate::sys::ptr::{self, opt_cstr, opt_mut, opt_ref};
use crate::sys::real::{self, StartRoutine};
use crate::sys::{
    budget, confined, environ, fatal, fd, hand_on, handlers, raw, setxid, signal, stacks, thread, thread_end,
    trap_wait, unwind_info,
};
use crate::{detector, handover, log, proc_view, seccomp_filter};
use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

/// Interposed `pthread_create`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    detector::before_thread_create();
    if detector::is_sandboxed() {
        return real::pthread_create(thread, attr, start, arg);
    }
    // The new thread inherits the sandbox (whether or not the detector runs yet: it must never start
    // the detector from there).
    if confined::here() {
        return thread::create_confined(thread, attr, start, arg, signal::trap_blocked());
    }
    if !signal::is_installed() {
        return real::pthread_create(thread, attr, start, arg);
    }
    let stack = stacks::stack_size_of(attr);
    let info = thread::ThreadStart {
        trap_blocked: signal::trap_blocked(),
        stack,
        alt_stack: if detector::is_running() { stacks::alt_stack_size(stacks::glibc_stack_size(attr)) } else { 0 },
        confined: false,
    };
    let blocked = signal::before_thread_create();
    let mut rc = thread::create_hooked(thread, attr, start, arg, detector::thread_hook, info);
    // A stack that cannot be mapped (a size beyond the address space, a memory limit) fails the same
    // way without the reporter: it is kept, and the program gets its EAGAIN at once.
    if rc == libc::EAGAIN && stacks::stack_would_map(attr) && detector::give_back_reporter_thread() {
        // The program is at its thread limit (RLIMIT_NPROC, threads-max): the reporter thread was
        // racewatch's one thread in it, and the program gets it back. The kernel counts an ended thread
        // off a little after `pthread_join` returns, later on a loaded machine (50 tries lost the
        // program a thread in 2 of 6 runs while a test suite shared the 2 cores): up to 250 tries, a
        // millisecond apart (only a program at its limit, which would fail without them, waits).
        for _ in 0..250 {
            rc = thread::create_hooked(thread, attr, start, arg, detector::thread_hook, info);
            if rc != libc::EAGAIN {
                break;
            }
            thread::sleep_us(1000);
        }
    }
    if blocked {
        signal::after_thread_create();
    }
    rc
}

/// Interposed `pthread_key_create`: the program's keys are numbered as without racewatch, and it can
/// create as many ([`thread_end::make_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_key_create(
    key: *mut libc::pthread_key_t,
    destr: Option<unsafe extern "C" fn(*mut c_void)>,
) -> c_int {
    thread_end::make_room();
    real::pthread_key_create(key, destr)
}

/// Interposed `pthread_join`: a program back to one thread is single-threaded again for the kernel and
/// `/proc` when the join returns ([`detector::after_join`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_join(thread: libc::pthread_t, value: *mut *mut c_void) -> c_int {
    let rc = real::pthread_join(thread, value);
    if rc == 0 {
        detector::after_join();
    }
    rc
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
    if !signal::is_installed() || signal::in_borrowed_memory() {
        // A vfork child's dispositions are its own (the kernel copied the table); the records are the
        // parent's, read here and never written.
        let wrapped = hand_on::recorded(sig);
        let rc = real::sigaction(sig, act, old);
        if let Some(old) = opt_mut(old).filter(|_| rc == 0) {
            hand_on::from_kernel(old, wrapped);
        }
        return rc;
    }
    if sig == libc::SIGTRAP {
        if let Some(old) = opt_mut(old) {
            *old = signal::program_action();
        }
        if let Some(act) = opt_ref(act) {
            handlers::set_program_trap_action(act);
        }
        return 0;
    }
    handlers::program_sigaction(sig, act, old)
}

/// Interposed `signal` (glibc's calls its internal `sigaction`, which the interposer above never sees):
/// BSD semantics, as glibc's: the handler restarts system calls and has its own signal blocked.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESTART, true)
}

/// Interposed `bsd_signal` (glibc's `signal` under another name).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESTART, true)
}

/// Interposed `ssignal` (glibc's `signal` under another name).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn ssignal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESTART, true)
}

/// Interposed `__sysv_signal`: what `signal` is in a program built for strict ISO C or POSIX
/// (`-std=c11`): a one-shot handler, not blocked in itself, that interrupts system calls.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    install_simple(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, false)
}

/// Interposed `sysv_signal`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    __sysv_signal(sig, handler)
}

/// `SIG_HOLD` of System V's `sigset` (glibc's value).
const SIG_HOLD: libc::sighandler_t = 2;

/// Interposed `sigset` (System V): installs a handler with an empty mask and unblocks the signal, or
/// with `SIG_HOLD` blocks it; returns `SIG_HOLD` when the signal was blocked before.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigset(sig: c_int, disposition: libc::sighandler_t) -> libc::sighandler_t {
    let Some(set) = single(sig) else { return libc::SIG_ERR };
    // SAFETY: zeroed sigset/sigaction are valid out-parameters.
    let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let how = if disposition == SIG_HOLD { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
    if disposition != SIG_HOLD {
        let act = simple_action(disposition, 0, None);
        if sigaction(sig, &act, &mut old) != 0 {
            return libc::SIG_ERR;
        }
    } else if sigaction(sig, std::ptr::null(), &mut old) != 0 {
        return libc::SIG_ERR;
    }
    if masked(how, &set, &mut old_mask, real::sigprocmask) != 0 {
        return libc::SIG_ERR;
    }
    // SAFETY: reads the live local set.
    if unsafe { libc::sigismember(&old_mask, sig) } == 1 {
        SIG_HOLD
    } else {
        old.sa_sigaction
    }
}

/// Interposed `sigignore` (System V).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigignore(sig: c_int) -> c_int {
    sigaction(sig, &simple_action(libc::SIG_IGN, 0, None), std::ptr::null_mut())
}

/// Interposed `sighold` (System V).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sighold(sig: c_int) -> c_int {
    single(sig).map_or(-1, |set| masked(libc::SIG_BLOCK, &set, std::ptr::null_mut(), real::sigprocmask))
}

/// Interposed `sigrelse` (System V).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigrelse(sig: c_int) -> c_int {
    single(sig).map_or(-1, |set| masked(libc::SIG_UNBLOCK, &set, std::ptr::null_mut(), real::sigprocmask))
}

/// Interposed `siginterrupt`: whether the signal's handler interrupts system calls (`SA_RESTART` off).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn siginterrupt(sig: c_int, interrupt: c_int) -> c_int {
    // SAFETY: zeroed sigaction is a valid out-parameter.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    if sigaction(sig, std::ptr::null(), &mut action) != 0 {
        return -1;
    }
    if interrupt != 0 {
        action.sa_flags &= !libc::SA_RESTART;
    } else {
        action.sa_flags |= libc::SA_RESTART;
    }
    sigaction(sig, &action, std::ptr::null_mut())
}

/// The set holding only `sig` (`None`, with `EINVAL`, for a signal number libc refuses).
fn single(sig: c_int) -> Option<libc::sigset_t> {
    // SAFETY: sigemptyset/sigaddset write only the live local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        (libc::sigaddset(&mut set, sig) == 0).then_some(set)
    }
}

/// A `sigaction` for `handler` with `flags`, blocking `blocked` (or nothing) while it runs.
fn simple_action(handler: libc::sighandler_t, flags: c_int, blocked: Option<c_int>) -> libc::sigaction {
    // SAFETY: zeroed sigaction is SIG_DFL with an empty mask; the fields are then set.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    if let Some(set) = blocked.and_then(single) {
        act.sa_mask = set;
    }
    act
}

/// The `signal` family: installs `handler` through the `sigaction` interposer; returns the previous
/// handler, or `SIG_ERR`.
fn install_simple(sig: c_int, handler: libc::sighandler_t, flags: c_int, block_self: bool) -> libc::sighandler_t {
    let act = simple_action(handler, flags, block_self.then_some(sig));
    // SAFETY: zeroed sigaction is a valid out-parameter.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if sigaction(sig, &act, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Interposed `sigaltstack`: the program sees and sets only its own alternate stack (the runtime's,
/// given to every thread it knows, is hidden; [`stacks::program_sigaltstack`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigaltstack(new: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    errno_result(stacks::program_sigaltstack(opt_ref(new), opt_mut(old)))
}

/// 0, or -1 with `errno` set from a `-errno` result.
fn errno_result(rc: i32) -> c_int {
    if rc >= 0 {
        return 0;
    }
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = -rc };
    -1
}

/// Interposed `sigpending`: what glibc's does (`rt_sigpending` with the kernel's 8-byte set), after a
/// `SIGTRAP` of racewatch's left pending on this thread was taken back ([`signal::before_program_sigpending`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigpending(set: *mut libc::sigset_t) -> c_int {
    signal::before_program_sigpending();
    // SAFETY: the kernel writes at most 8 bytes to the program's `sigset_t` (128 bytes), or fails with
    // EFAULT, which `syscall` reports through errno as glibc's `sigpending` does.
    let rc = real::syscall(libc::SYS_rt_sigpending, [set as c_long, 8, 0, 0, 0, 0]) as c_int;
    if rc == 0 && signal::trap_parked() && !signal::in_borrowed_memory() {
        if let Some(set) = opt_mut(set) {
            signal::add_trap(set);
        }
    }
    rc
}

/// Interposed `sigsuspend`: the program's mask for the wait is also its view of `SIGTRAP` meanwhile
/// ([`signal::during_program_wait`]), as for `ppoll`, `pselect` and `epoll_pwait`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn sigsuspend(set: *const libc::sigset_t) -> c_int {
    signal::during_program_wait(opt_ref(set).map(signal::to_bits), || real::sigsuspend(set))
}

/// Interposed `sigtimedwait`: a wait for `SIGTRAP` is where a `SIGTRAP` sent to the process goes, with the
/// `siginfo` it was sent with ([`trap_wait`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
) -> c_int {
    trap_wait::program_sigwait(opt_ref(set).map(signal::to_bits), info, timeout, |info, timeout| {
        real::sigtimedwait(set, info, timeout)
    })
}

/// Interposed `sigwaitinfo`: `sigtimedwait` without a timeout, as glibc's is.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn sigwaitinfo(set: *const libc::sigset_t, info: *mut libc::siginfo_t) -> c_int {
    sigtimedwait(set, info, std::ptr::null())
}

/// Interposed `sigwait`: `sigtimedwait` without a timeout, again after `EINTR`, with the signal stored
/// and the error returned, as glibc's is.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn sigwait(set: *const libc::sigset_t, sig: *mut c_int) -> c_int {
    loop {
        let rc = sigtimedwait(set, std::ptr::null_mut(), std::ptr::null());
        if rc > 0 {
            if let Some(sig) = opt_mut(sig) {
                *sig = rc;
            }
            return 0;
        }
        if errno() != libc::EINTR {
            return errno();
        }
    }
}

/// Interposed `signalfd`: one that reads `SIGTRAP` is noted ([`signal::note_signalfd`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int {
    if let Some(mask) = opt_ref(mask) {
        signal::note_signalfd(signal::to_bits(mask));
    }
    real::signalfd(fd, mask, flags)
}

/// Interposed `ppoll` (see [`sigsuspend`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    crate::fd_view::with_own_closed(fds, n, || {
        signal::during_program_wait(opt_ref(mask).map(signal::to_bits), || real::ppoll(fds, n, timeout, mask))
    })
}

/// Interposed `pselect` (see [`sigsuspend`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn pselect(
    n: c_int,
    read: *mut libc::fd_set,
    write: *mut libc::fd_set,
    except: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    if crate::fd_view::sets_hold_own(n, [read, write, except]) {
        return errno_result(-libc::EBADF);
    }
    signal::during_program_wait(opt_ref(mask).map(signal::to_bits), || {
        real::pselect(n, read, write, except, timeout, mask)
    })
}

/// Interposed `epoll_pwait` (see [`sigsuspend`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    signal::during_program_wait(opt_ref(mask).map(signal::to_bits), || {
        real::epoll_pwait(epfd, events, max, timeout, mask)
    })
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
    let set_ptr = set;
    let set = opt_ref(set);
    let trap = set.is_some_and(signal::has_trap);
    let after = |was_blocked: bool| match how {
        libc::SIG_BLOCK => was_blocked || trap,
        libc::SIG_UNBLOCK => was_blocked && !trap,
        _ => trap,
    };
    if set.is_some() && signal::in_borrowed_memory() {
        // A vfork child (or a `clone(CLONE_VM)` one): its kernel mask is its own, the bit here its
        // parent's; its own state, once it changed it, is noted apart (set 19 p10: a child that blocked
        // everything and then set a mask without SIGTRAP exec'd with SIGTRAP blocked).
        let rc = real_fn(how, set_ptr, old);
        if rc == 0 {
            signal::note_borrowed_trap_state(after(signal::trap_blocked_for_exec()));
        }
        return rc;
    }
    let was_blocked = signal::trap_blocked();
    let blocked = after(was_blocked);
    // The program's view changes first: a SIGTRAP pending for real is delivered as soon as the kernel
    // mask lets it (on the way out of the call below), and the handler must then see it unblocked.
    if set.is_some() {
        signal::set_trap_blocked(blocked);
    }
    // Unblocking SIGTRAP is always passed on (it may be blocked for real while one of the program's waits).
    let rc = if trap && how != libc::SIG_UNBLOCK {
        let kernel_set = set.map(|s| signal::with_trap(s, false));
        real_fn(how, kernel_set.as_ref().map_or(std::ptr::null(), |s| s), old)
    } else {
        real_fn(how, set_ptr, old)
    };
    if rc != 0 {
        signal::set_trap_blocked(was_blocked);
        return rc;
    }
    if was_blocked {
        if let Some(old) = opt_mut(old) {
            signal::add_trap(old);
        }
        if set.is_some() && !blocked {
            signal::take_parked_on_unblock();
        }
    }
    rc
}

/// Interposed `close`. racewatch's own descriptors are not there for the program: closing one fails
/// with `EBADF`, as closing a free number does, and the descriptor stays (a daemon's close loop or a
/// `closefrom` keeps detection on).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn close(fd: c_int) -> c_int {
    if fd::is_own(fd) {
        return errno_result(-libc::EBADF);
    }
    closing(fd as u64, fd as u64);
    real::close(fd)
}

/// Interposed `close_range`: the stretches around racewatch's descriptors (see [`close`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 || first > last {
        return real::close_range(first, last, flags);
    }
    closing(first.into(), last.into());
    fd::around_own(first.into(), last.into(), |a, b| real::close_range(a as c_uint, b as c_uint, flags))
}

/// Interposed `closefrom`: the stretches around racewatch's descriptors (see [`close`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn closefrom(low: c_int) {
    let low = low.max(0) as u64;
    closing(low, u64::MAX);
    fd::around_own(low, u64::MAX, |a, b| {
        if b == u64::MAX {
            real::closefrom(a.min(c_int::MAX as u64) as c_int);
        } else {
            close_each(a, b);
        }
        0
    });
}

/// Closes `first..=last` with `close_range`, or one by one where the kernel has none.
fn close_each(first: u64, last: u64) {
    if real::close_range(first as c_uint, last as c_uint, 0) != 0 {
        for fd in first..=last {
            real::close(fd as c_int);
        }
    }
}

/// Interposed `dup`: racewatch's descriptors are not there for the program (see [`close`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dup(fd: c_int) -> c_int {
    if fd::is_own(fd) {
        return errno_result(-libc::EBADF);
    }
    let new = made_fd(0, || real::dup(fd));
    duplicated_view(fd, new);
    new
}

/// A descriptor of a view of one of the process's own files, duplicated, is the same view
/// ([`crate::view_fds`]); not in a `vfork` child, whose records are its parent's.
fn duplicated_view(old: c_int, new: c_int) {
    if crate::view_fds::any() && !signal::in_borrowed_memory() {
        crate::view_fds::duplicated(old, new);
    }
}

/// Makes a descriptor with `call`; where it fails with `EMFILE` while racewatch's own descriptors sit
/// in the program's range (a soft `RLIMIT_NOFILE` equal to the hard one, no right to raise it),
/// racewatch steps aside and gives their numbers back ([`detector::descriptors_exhausted`]), and the
/// call is made again: the program opens as many descriptors as without racewatch.
fn with_room(call: impl Fn() -> c_int) -> c_int {
    with_room_from(0, call)
}

/// [`with_room`] for a call that takes the lowest free number at or above `lowest`.
fn with_room_from(lowest: c_int, call: impl Fn() -> c_int) -> c_int {
    loop {
        let rc = call();
        // Each round moves or gives back one of racewatch's (a pipe may need two numbers).
        if rc >= 0 || !out_of_numbers(lowest) {
            return rc;
        }
    }
}

/// Makes one descriptor with `call` ([`with_room`]), the lowest free number at or above `lowest`: the
/// number the program would get without racewatch ([`fd::in_order`]).
fn made_fd(lowest: c_int, call: impl Fn() -> c_int) -> c_int {
    let made = with_room_from(lowest, call);
    // The cheap look first: a tracer counting the program's system calls sees no `getpid` of racewatch's
    // where no descriptor of racewatch's is in the way (set 41 p14).
    let made = if made >= 0 && fd::own_between(lowest, made) && !signal::in_borrowed_memory() {
        fd::in_order(made, lowest, detector::descriptors_exhausted)
    } else {
        made
    };
    fd::note_made(made);
    made
}

/// Whether `fcntl` command `cmd` makes a descriptor (at or above its argument).
fn duplicates(cmd: c_int) -> bool {
    cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC
}

/// [`with_room`] for a call that returns a null pointer on failure.
fn with_room_ptr<T>(call: impl Fn() -> *mut T) -> *mut T {
    loop {
        let made = call();
        if !made.is_null() || !out_of_numbers(0) {
            return made;
        }
    }
}

/// The failed call found no free descriptor number at or above `lowest` where racewatch holds one, and
/// racewatch moved one of its own below (or, with no number free there, gave them all back): try again.
fn out_of_numbers(lowest: c_int) -> bool {
    if errno() != libc::EMFILE || !fd::own_in_program_range(lowest) {
        return false;
    }
    if !signal::in_borrowed_memory() && fd::make_room(lowest) {
        set_errno(libc::EMFILE);
        return true;
    }
    detector::descriptors_exhausted();
    set_errno(libc::EMFILE);
    !fd::own_in_program_range(lowest)
}

/// Interposed `socket` (see [`with_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    made_fd(0, || real::socket(domain, kind, protocol))
}

/// Interposed `socketpair` (see [`with_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn socketpair(domain: c_int, kind: c_int, protocol: c_int, fds: *mut c_int) -> c_int {
    with_room(|| real::socketpair(domain, kind, protocol, fds))
}

/// Interposed `accept` (see [`with_room`]; a cancellation point).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
    made_fd(0, || real::accept4(false, fd, addr, len, 0))
}

/// Interposed `accept4` (see [`with_room`]; a cancellation point).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    made_fd(0, || real::accept4(true, fd, addr, len, flags))
}

/// Interposed `pipe` (see [`with_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pipe(fds: *mut c_int) -> c_int {
    with_room(|| real::pipe2(false, fds, 0))
}

/// Interposed `pipe2` (see [`with_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    with_room(|| real::pipe2(true, fds, flags))
}

/// Interposed `epoll_create1` (see [`with_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn epoll_create1(flags: c_int) -> c_int {
    made_fd(0, || real::epoll_create1(flags))
}

/// Interposed `eventfd` (see [`with_room`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn eventfd(initval: c_uint, flags: c_int) -> c_int {
    made_fd(0, || real::eventfd(initval, flags))
}

/// Interposed `dup2`: a descriptor of racewatch's at `new` moves out of the way first.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if fd::is_own(old) {
        return errno_result(-libc::EBADF);
    }
    if old != new {
        replacing(new);
    }
    let rc = real::dup2(old, new);
    fd::note_made(if rc >= 0 { new } else { -1 });
    if rc >= 0 {
        duplicated_view(old, new);
    }
    rc
}

/// Interposed `dup3` (see [`dup2`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if fd::is_own(old) {
        return errno_result(-libc::EBADF);
    }
    if old != new {
        replacing(new);
    }
    let rc = real::dup3(old, new, flags);
    fd::note_made(if rc >= 0 { new } else { -1 });
    if rc >= 0 {
        duplicated_view(old, new);
    }
    rc
}

/// Interposed `fcntl` (variadic in C: its one optional argument is a register word on x86-64):
/// racewatch's descriptors are not there for the program (see [`close`]), so a scan of every number
/// with `F_GETFD` counts the program's own.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if fd::is_own(fd) {
        return errno_result(-libc::EBADF);
    }
    if crate::fd_view::refused_on_view(fd, cmd) {
        return errno_result(-libc::EINVAL);
    }
    if duplicates(cmd) {
        let new = made_fd(arg.min(c_int::MAX as c_ulong) as c_int, || real::fcntl(false, fd, cmd, arg));
        duplicated_view(fd, new);
        return new;
    }
    with_room(|| real::fcntl(false, fd, cmd, arg))
}

/// Interposed `fcntl64` (see [`fcntl`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    if fd::is_own(fd) {
        return errno_result(-libc::EBADF);
    }
    if crate::fd_view::refused_on_view(fd, cmd) {
        return errno_result(-libc::EINVAL);
    }
    if duplicates(cmd) {
        let new = made_fd(arg.min(c_int::MAX as c_ulong) as c_int, || real::fcntl(true, fd, cmd, arg));
        duplicated_view(fd, new);
        return new;
    }
    with_room(|| real::fcntl(true, fd, cmd, arg))
}

/// The program closes descriptors `first..=last` (none of racewatch's, see [`close`]): its stderr
/// among them is noticed.
fn closing(first: u64, last: u64) {
    let stderr = (first..=last).contains(&2);
    if !(crate::view_fds::any() || stderr) || signal::in_borrowed_memory() {
        return;
    }
    crate::view_fds::forget_range(first, last);
    if stderr {
        log::stderr_closed();
    }
}

/// The program puts a descriptor at `new`. One of racewatch's there moves out of the way first (in a
/// `vfork` child the descriptor table is the child's own copy, while racewatch's records are its
/// parent's: nothing of the parent's changes); where it cannot, racewatch steps aside.
fn replacing(new: c_int) {
    if crate::view_fds::any() && !signal::in_borrowed_memory() {
        crate::view_fds::forget(new);
    }
    let ours = fd::is_own(new);
    if !(ours || new == 2) || signal::in_borrowed_memory() {
        return;
    }
    if ours && !fd::move_out_of_the_way(new) {
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
        // Strict mode and a filter set this way are the calling thread's (no `TSYNC` here).
        return detector::sandbox_call(false, || real::prctl(option, a2, a3, a4, a5));
    }
    before_prctl(option as c_long, a2 as c_long);
    let rc = real::prctl(option, a2, a3, a4, a5);
    after_prctl(option as c_long, a2 as c_long, rc.into());
    rc
}

/// What racewatch must know before a `prctl` of the program's (`option`, its first argument `arg`).
fn before_prctl(option: c_long, arg: c_long) {
    if option == libc::PR_SET_TSC as c_long && arg == libc::PR_TSC_SIGSEGV as c_long {
        thread::tsc_may_fault();
    }
    // Syscall User Dispatch (Wine, binary translators): from now on a system call from outside the
    // region the program allows (racewatch's own code) may arrive as `SIGSYS` at the program's
    // emulator, or kill the process inside racewatch's handler. The thread makes none of racewatch's.
    if option == PR_SET_SYSCALL_USER_DISPATCH && arg == PR_SYS_DISPATCH_ON && !confined::list_current(thread::gettid())
    {
        detector::switch_off("the program dispatches its own system calls (PR_SET_SYSCALL_USER_DISPATCH) in more threads than racewatch can leave alone", false);
    }
}

/// What follows a `prctl` of the program's that returned `rc`.
fn after_prctl(option: c_long, arg: c_long, rc: c_long) {
    if option == PR_SET_SYSCALL_USER_DISPATCH && rc == 0 && arg == PR_SYS_DISPATCH_OFF {
        confined::unlist_current();
    }
}

/// Whether the seccomp filter the program installs on every thread from `fprog` leaves racewatch alone
/// ([`seccomp_filter::installing_leaves_racewatch_alone`]). Not judged in a thread already under a
/// filter racewatch could not judge, nor once racewatch stepped aside: reading the filter is a system
/// call (`process_vm_readv`), which racewatch makes in neither.
fn filter_leaves_racewatch_alone(fprog: u64) -> bool {
    !confined::here() && !detector::is_sandboxed() && seccomp_filter::installing_leaves_racewatch_alone(fprog)
}

/// `prctl`'s Syscall User Dispatch option and its two settings (Linux 5.11).
const PR_SET_SYSCALL_USER_DISPATCH: c_long = 59;
const PR_SYS_DISPATCH_OFF: c_long = 0;
const PR_SYS_DISPATCH_ON: c_long = 1;

const SECCOMP_SET_MODE_STRICT: c_long = 0;
const SECCOMP_SET_MODE_FILTER: c_long = 1;
/// `seccomp(2)`'s flag that puts the filter on every thread of the process.
const SECCOMP_FILTER_FLAG_TSYNC: c_long = 1;

/// Interposed `syscall` (variadic in C: six argument words in registers on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn syscall(number: c_long, a: c_long, b: c_long, c: c_long, d: c_long, e: c_long, f: c_long) -> c_long {
    match number {
        // A filter for every thread that cannot reach racewatch's own calls changes nothing for it. (A
        // thread's own filter, even such a one, still leaves the thread confined: a reporter thread it
        // started would inherit the filter, and the program's later `TSYNC` would fail on that thread.)
        libc::SYS_seccomp
            if a == SECCOMP_SET_MODE_FILTER
                && b & SECCOMP_FILTER_FLAG_TSYNC != 0
                && filter_leaves_racewatch_alone(c as u64) => {}
        // Strict mode with flags or arguments, which the kernel refuses (`EINVAL`): libseccomp's probe of
        // whether `seccomp(2)` exists, made before every filter it loads.
        libc::SYS_seccomp if a == SECCOMP_SET_MODE_STRICT && (b != 0 || c != 0) => {}
        libc::SYS_seccomp if a == SECCOMP_SET_MODE_STRICT || a == SECCOMP_SET_MODE_FILTER => {
            let whole_process = a == SECCOMP_SET_MODE_FILTER && b & SECCOMP_FILTER_FLAG_TSYNC != 0;
            return detector::sandbox_call(whole_process, || real::syscall(number, [a, b, c, d, e, f]));
        }
        libc::SYS_prctl if a == libc::PR_SET_SECCOMP as c_long => {
            return detector::sandbox_call(false, || real::syscall(number, [a, b, c, d, e, f]));
        }
        libc::SYS_prctl => {
            before_prctl(a, b);
            let rc = real::syscall(number, [a, b, c, d, e, f]);
            after_prctl(a, b, rc);
            return rc;
        }
        libc::SYS_close | libc::SYS_dup | libc::SYS_fcntl | libc::SYS_fstat | libc::SYS_epoll_ctl
            if fd::is_own(a as c_int) =>
        {
            return errno_result(-libc::EBADF).into()
        }
        libc::SYS_epoll_ctl if fd::is_own(c as c_int) => return errno_result(-libc::EBADF).into(),
        libc::SYS_newfstatat | libc::SYS_statx if fd::is_own(a as c_int) && !ptr::cstr_starts_with(a_ptr(b), b"/") => {
            return errno_result(-libc::EBADF).into()
        }
        libc::SYS_ioctl => return crate::fd_view::ioctl(a as c_int, b as c_ulong, c as usize).into(),
        libc::SYS_close => closing(a as u64, a as u64),
        libc::SYS_close_range if c & libc::CLOSE_RANGE_CLOEXEC as c_long == 0 && a as c_uint <= b as c_uint => {
            return close_range(a as c_uint, b as c_uint, c as c_int).into()
        }
        libc::SYS_dup2 | libc::SYS_dup3 if fd::is_own(a as c_int) => return errno_result(-libc::EBADF).into(),
        libc::SYS_dup2 | libc::SYS_dup3 if a != b => replacing(b as c_int),
        // The signal calls the runtime virtualises, made raw: the same doors as their libc wrappers.
        // glibc's internal signals (32, 33) are the kernel's to answer: its `sigaction` refuses them.
        libc::SYS_rt_sigaction if signal::is_installed() && d == 8 && !(32..=33).contains(&a) => {
            return raw_sigaction(a as c_int, a_ptr(b), a_ptr::<KernelSigaction>(c) as *mut KernelSigaction).into()
        }
        // The process's own status files, as through `open` (set 17 p51: read raw, they showed racewatch's
        // `SIGTRAP` handler and mask).
        libc::SYS_open => {
            return proc_open(a_ptr(a), b as c_int)
                .unwrap_or_else(|| identified(real::syscall(number, [a, b, c, d, e, f]) as c_int, a_ptr(a), b as c_int))
                .into()
        }
        libc::SYS_openat => {
            return proc_open(a_ptr(b), c as c_int)
                .unwrap_or_else(|| identified(real::syscall(number, [a, b, c, d, e, f]) as c_int, a_ptr(b), c as c_int))
                .into()
        }
        // `openat2` (no glibc function in 2.36): its flags are the first field of its `struct open_how`; with
        // resolve flags of its own the kernel opens the file and the result is looked at.
        libc::SYS_openat2 if d >= OPEN_HOW_SIZE => {
            if let Some(&[flags, _mode, resolve]) = opt_ref(a_ptr::<[u64; 3]>(c)) {
                let open = || identified(real::syscall(number, [a, b, c, d, e, f]) as c_int, a_ptr(b), flags as c_int);
                let viewed = if resolve == 0 { proc_open(a_ptr(b), flags as c_int) } else { None };
                return viewed.unwrap_or_else(open).into();
            }
        }
        libc::SYS_rt_sigprocmask if signal::is_installed() && d == 8 => {
            return raw_sigprocmask(a as c_int, a_ptr(b), a_ptr::<u64>(c) as *mut u64).into()
        }
        // Waits with a mask of their own (the kernel's 8-byte sets): see `sigsuspend`.
        libc::SYS_rt_sigsuspend if b == 8 => {
            return signal::during_program_wait(raw_mask(a), || real::syscall(number, [a, b, c, d, e, f]))
        }
        libc::SYS_ppoll if e == 8 => {
            return signal::during_program_wait(raw_mask(d), || real::syscall(number, [a, b, c, d, e, f]))
        }
        libc::SYS_epoll_pwait if f == 8 => {
            return signal::during_program_wait(raw_mask(e), || real::syscall(number, [a, b, c, d, e, f]))
        }
        // The kernel's 8-byte set, with a `SIGTRAP` kept for the process (see `sigpending`).
        libc::SYS_rt_sigpending if b == 8 => {
            signal::before_program_sigpending();
            let rc = real::syscall(number, [a, b, c, d, e, f]);
            if rc == 0 && signal::trap_parked() && !signal::in_borrowed_memory() {
                if let Some(set) = opt_mut(a as usize as *mut u64) {
                    *set |= 1 << (libc::SIGTRAP - 1);
                }
            }
            return rc;
        }
        libc::SYS_rt_sigtimedwait if d == 8 => {
            return trap_wait::program_sigwait(
                raw_mask(a),
                a_ptr::<libc::siginfo_t>(b) as *mut _,
                a_ptr(c),
                |info, time| real::syscall(number, [a, info as c_long, time as c_long, d, 0, 0]) as c_int,
            )
            .into()
        }
        libc::SYS_signalfd | libc::SYS_signalfd4 if c == 8 => {
            if let Some(mask) = raw_mask(b) {
                signal::note_signalfd(mask);
            }
        }
        libc::SYS_perf_event_open => return perf_event_open([a, b, c, d, e, f]),
        // `SIGTRAP`s the kernel would discard, sent raw (see `pthread_kill`).
        libc::SYS_kill | libc::SYS_tkill | libc::SYS_tgkill if trap_sent_and_ignored(number, [a, b, c]) => return 0,
        libc::SYS_tkill | libc::SYS_tgkill => {
            if let Some(rc) = trap_to_own_thread(number, [a, b, c]) {
                return rc.into();
            }
        }
        libc::SYS_setrlimit => limiting(0, a as c_int, a_ptr(b)),
        libc::SYS_prlimit64 => limiting(a as libc::pid_t, b as c_int, a_ptr(c)),
        libc::SYS_unshare | libc::SYS_setns => detector::before_single_threaded_call(),
        libc::SYS_sigaltstack => return sigaltstack(a_ptr(a), a_ptr::<libc::stack_t>(b) as *mut libc::stack_t).into(),
        libc::SYS_getdents64 => {
            return listing_read(a as c_int, b as *mut u8, || real::syscall(number, [a, b, c, d, e, f]))
        }
        libc::SYS_rt_sigqueueinfo | libc::SYS_rt_tgsigqueueinfo => {
            return retried_if_full(
                || real::syscall(number, [a, b, c, d, e, f]),
                |rc| rc == -1 && errno() == libc::EAGAIN,
            )
        }
        _ => {}
    }
    real::syscall(number, [a, b, c, d, e, f])
}

/// Interposed `sigqueue`: see [`retried_if_full`].
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sigqueue(pid: libc::pid_t, sig: c_int, value: libc::sigval) -> c_int {
    if sig == libc::SIGTRAP && signal::is_own_process(pid) {
        if signal::discarded_as_ignored(pid) {
            return 0;
        }
        if let Some(rc) = signal::route_own_process_trap(libc::SI_QUEUE, value.sival_ptr as u64) {
            return rc;
        }
    }
    retried_if_full(|| real::sigqueue(pid, sig, value), |rc| rc == -1 && errno() == libc::EAGAIN)
}

/// Interposed `kill`: a `SIGTRAP` the program sends its own process goes to the thread the kernel would
/// pick by the program's masks ([`signal::route_own_process_trap`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn kill(pid: libc::pid_t, sig: c_int) -> c_int {
    if sig == libc::SIGTRAP && signal::is_own_process(pid) {
        if signal::discarded_as_ignored(pid) {
            return 0;
        }
        if let Some(rc) = signal::route_own_process_trap(libc::SI_USER, 0) {
            return rc;
        }
    }
    errno_result(crate::sys::raw::syscall6(libc::SYS_kill, [pid as u64, sig as u64, 0, 0, 0, 0]) as i32)
}

/// Interposed `pthread_sigqueue`: see [`retried_if_full`] and [`pthread_kill`].
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_sigqueue(thread: libc::pthread_t, sig: c_int, value: libc::sigval) -> c_int {
    if sig == libc::SIGTRAP && ignored_by(thread) {
        return 0;
    }
    // Its `SI_QUEUE` looks like `sigqueue`'s to the process: noted, so the thread runs it itself.
    let tid = signal::is_installed().then(|| crate::sys::creation::tid_of(thread)).flatten();
    let noted = tid.is_some_and(|tid| hand_on::note_directed(tid, sig));
    let rc = retried_if_full(|| real::pthread_sigqueue(thread, sig, value), |rc| rc == libc::EAGAIN);
    if rc != 0 && noted {
        hand_on::undo_directed(tid.unwrap_or(0), sig);
    }
    rc
}

/// Whether raw `kill`/`tkill`/`tgkill` arguments send `SIGTRAP` to a thread of this process that would
/// discard it ([`signal::discarded_as_ignored`]).
fn trap_sent_and_ignored(number: c_long, [a, b, c]: [c_long; 3]) -> bool {
    let trap = libc::SIGTRAP as c_long;
    match number {
        libc::SYS_kill => b == trap && signal::is_own_process(a as libc::pid_t) && signal::discarded_as_ignored(a as _),
        libc::SYS_tkill => b == trap && signal::discarded_as_ignored(a as _),
        _ => c == trap && signal::is_own_process(a as libc::pid_t) && signal::discarded_as_ignored(b as _),
    }
}

/// A `SIGTRAP` that raw `tkill`/`tgkill` arguments send to another thread of this process, handed over
/// ([`signal::send_trap_to_thread`]): `Some(0)` when it was; `None` to make the call.
fn trap_to_own_thread(number: c_long, [a, b, c]: [c_long; 3]) -> Option<c_int> {
    let (tid, sig) = match number {
        libc::SYS_tkill => (a, b),
        _ if signal::is_own_process(a as libc::pid_t) => (b, c),
        _ => return None,
    };
    if sig != libc::SIGTRAP as c_long {
        return None;
    }
    if tid == c_long::from(thread::gettid()) {
        return signal::raise_trap_here().map(|rc| errno_result(rc as i32));
    }
    signal::send_trap_to_thread(tid as libc::pid_t)
}

/// Interposed `pthread_kill`: a `SIGTRAP` the kernel would discard (the program ignores it and the thread
/// does not block it) is not sent ([`signal::discarded_as_ignored`]); one to another thread that lets it
/// through is handed over, so that no sample of racewatch's pending there swallows it
/// ([`signal::send_trap_to_thread`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pthread_kill(thread: libc::pthread_t, sig: c_int) -> c_int {
    if sig == libc::SIGTRAP && signal::is_installed() {
        let tid = crate::sys::creation::tid_of(thread);
        if tid.is_some_and(signal::discarded_as_ignored) {
            return 0;
        }
        if tid == Some(thread::gettid()) {
            if let Some(rc) = signal::raise_trap_here() {
                return -(rc as c_int);
            }
        } else if let Some(rc) = tid.and_then(signal::send_trap_to_thread) {
            return rc;
        }
    }
    real::pthread_kill(thread, sig)
}

/// Whether a `SIGTRAP` sent to `thread` would be discarded (its kernel id is known to racewatch).
fn ignored_by(thread: libc::pthread_t) -> bool {
    signal::is_installed() && crate::sys::creation::tid_of(thread).is_some_and(signal::discarded_as_ignored)
}

/// Interposed `raise` (and `gsignal`, its other name): see [`pthread_kill`].
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn raise(sig: c_int) -> c_int {
    if sig == libc::SIGTRAP {
        if signal::discarded_as_ignored(thread::gettid()) {
            return 0;
        }
        if let Some(rc) = signal::raise_trap_here() {
            return errno_result(rc as i32);
        }
    }
    real::raise(sig)
}

/// A child [`clone`] is making: the program's function and argument, and its `SIGTRAP` to put in the
/// kernel first.
struct CloneStart {
    start: real::CloneFn,
    arg: usize,
    trap: signal::ChildTrap,
}

/// Children being made by [`clone`] (a slot is free again once its child took it).
static CLONE_STARTS: [spin::Mutex<Option<CloneStart>>; 8] = [const { spin::Mutex::new(None) }; 8];

/// Interposed `clone` (glibc's wrapper; variadic in C, its last three arguments passed on as given): a
/// child that shares the process's memory without being one of its threads (`CLONE_VM` without
/// `CLONE_THREAD`) starts with `SIGTRAP` blocked and handled in the kernel as the program set it,
/// before the program's function runs (set 41 p12: such a child's own `status` showed `SIGTRAP`
/// unblocked and caught, racewatch's handler, where the program had blocked it).
#[cfg_attr(feature = "preload", no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn clone(
    start: Option<real::CloneFn>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    parent_tid: *mut libc::pid_t,
    tls: *mut c_void,
    child_tid: *mut libc::pid_t,
) -> c_int {
    let shares_memory = flags & libc::CLONE_VM != 0 && flags & libc::CLONE_THREAD == 0;
    let trap = (shares_memory && start.is_some())
        .then(|| signal::ChildTrap::for_child(flags & libc::CLONE_SIGHAND != 0))
        .flatten();
    let slot = trap.and_then(|trap| {
        CLONE_STARTS.iter().position(|slot| {
            let Some(mut free) = slot.try_lock().filter(|s| s.is_none()) else { return false };
            *free = start.map(|start| CloneStart { start, arg: arg as usize, trap });
            true
        })
    });
    let Some(slot) = slot else { return real::clone(start, stack, flags, arg, parent_tid, tls, child_tid) };
    let made = real::clone(Some(clone_child), stack, flags, slot as *mut c_void, parent_tid, tls, child_tid);
    if made < 0 {
        *CLONE_STARTS[slot].lock() = None;
    }
    made
}

/// The start of a child [`clone`] made: the program's `SIGTRAP` first, then the program's function.
extern "C" fn clone_child(slot: *mut c_void) -> c_int {
    let Some(child) = CLONE_STARTS[slot as usize].lock().take() else { return 0 };
    child.trap.put();
    (child.start)(child.arg as *mut c_void)
}

/// Interposed `gsignal`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn gsignal(sig: c_int) -> c_int {
    raise(sig)
}

/// Interposed `tgkill`: see [`pthread_kill`].
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn tgkill(tgid: libc::pid_t, tid: libc::pid_t, sig: c_int) -> c_int {
    if trap_sent_and_ignored(libc::SYS_tgkill, [tgid.into(), tid.into(), sig.into()]) {
        return 0;
    }
    if let Some(rc) = trap_to_own_thread(libc::SYS_tgkill, [tgid.into(), tid.into(), sig.into()]) {
        return rc;
    }
    real::tgkill(tgid, tid, sig)
}

/// A signal the program queues found the queue full (`EAGAIN` under `RLIMIT_SIGPENDING`): a sampling
/// signal of racewatch's counts against the same limit from the timer's overflow to its delivery, a
/// few microseconds, and may hold a slot at that moment (at the debug rate a program queueing up to a
/// limit of 40 beside three busy workers queued 39 in 1 run of 5). While the detector runs the call is
/// tried again, for about a millisecond at most: a queue full of the program's own signals still fails.
fn retried_if_full<R: Copy>(call: impl Fn() -> R, full: impl Fn(R) -> bool) -> R {
    let mut rc = call();
    if !full(rc) || !detector::is_running() {
        return rc;
    }
    for _ in 0..20 {
        thread::sleep_us(50);
        rc = call();
        if !full(rc) {
            break;
        }
    }
    rc
}

/// This thread's `errno`.
fn errno() -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's `errno`.
fn set_errno(value: c_int) {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = value };
}

/// Interposed `getdents64` (glibc 2.30): a listing of the process's `fd` or `task` directory read
/// without `opendir` leaves racewatch's entries out, as `readdir` does.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn getdents64(fd: c_int, buf: *mut c_void, count: libc::size_t) -> libc::ssize_t {
    let read = || real::syscall(libc::SYS_getdents64, [fd as c_long, buf as c_long, count as c_long, 0, 0, 0]);
    listing_read(fd, buf.cast(), read) as libc::ssize_t
}

/// A raw directory read into `buf` by `read`, with racewatch's entries taken out of the process's own
/// `fd` and `task` listings; a read that held only those reads on (0 would say the end).
fn listing_read(fd: c_int, buf: *mut u8, read: impl Fn() -> c_long) -> c_long {
    loop {
        let n = read();
        if n <= 0 {
            return n;
        }
        if buf.is_null() {
            return n;
        }
        // SAFETY: the kernel just wrote `n` bytes of records into the caller's buffer there.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf, n as usize) };
        let kept = proc_view::filter_dirents(fd, bytes);
        if kept > 0 {
            return kept as c_long;
        }
    }
}

/// `perf_event_attr.type` of a hardware breakpoint.
const PERF_TYPE_BREAKPOINT: u32 = 5;

/// The program's `perf_event_open`: a hardware breakpoint it cannot have because racewatch's
/// watchpoints hold the debug registers gets one of them back (detection goes on with fewer).
fn perf_event_open(args: [c_long; 6]) -> c_long {
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
    let first_try = thread::monotonic_ns();
    loop {
        let rc = real::syscall(libc::SYS_perf_event_open, args);
        // SAFETY: errno is this thread's.
        let no_space = rc < 0 && unsafe { *libc::__errno_location() } == libc::ENOSPC;
        // The attr's first word is its type (the kernel reads it from the same pointer).
        let breakpoint = opt_ref(a_ptr::<u32>(args[0])).is_some_and(|&kind| kind == PERF_TYPE_BREAKPOINT);
        if !(no_space && breakpoint) {
            return rc;
        }
        // The kernel frees a closed watchpoint's per-thread events (and their debug registers) after an
        // RCU grace period, longer on a loaded machine: the one given back last, by this thread or
        // another (threads asking at once, one of which gives back the last), is waited for (200 ms at
        // most after it was given back, 1 s in all) before another is given back or the program gets
        // ENOSPC.
        let now = thread::monotonic_ns();
        let given_at = GIVEN_BACK_NS.load(Acquire);
        let recent = given_at != 0 && now.saturating_sub(given_at) < 200_000_000;
        if recent || GIVING_BACK.load(Acquire) > 0 {
            if now.saturating_sub(first_try) > 1_000_000_000 {
                return rc;
            }
            thread::sleep_us(1000);
            continue;
        }
        GIVING_BACK.fetch_add(1, AcqRel);
        let gave = detector::give_back_watchpoint();
        if gave {
            GIVEN_BACK_NS.store(thread::monotonic_ns(), Release);
        }
        GIVING_BACK.fetch_sub(1, AcqRel);
        if !gave {
            return rc;
        }
    }
}

/// When racewatch last gave a debug register back to the program (monotonic ns; 0: never).
static GIVEN_BACK_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Program threads giving a debug register back now.
static GIVING_BACK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A raw system call's pointer argument.
fn a_ptr<T>(word: c_long) -> *const T {
    word as usize as *const T
}

/// The kernel's `struct sigaction` on x86-64 (what raw `rt_sigaction` takes).
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelSigaction {
    handler: usize,
    flags: c_ulong,
    restorer: usize,
    mask: u64,
}

/// Raw `rt_sigaction`, through the `sigaction` interposer.
fn raw_sigaction(sig: c_int, act: *const KernelSigaction, old: *mut KernelSigaction) -> c_int {
    let act = opt_ref(act).map(|k| {
        // SAFETY: zeroed sigaction is SIG_DFL with an empty mask; the fields are then set.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = k.handler;
        act.sa_flags = k.flags as c_int & !signal::SA_RESTORER;
        act.sa_mask = signal::from_bits(k.mask);
        act
    });
    // SAFETY: zeroed sigaction is a valid out-parameter.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    let rc = sigaction(sig, act.as_ref().map_or(std::ptr::null(), |a| a), &mut previous);
    if rc == 0 {
        if let Some(old) = opt_mut(old) {
            *old = KernelSigaction {
                handler: previous.sa_sigaction,
                flags: previous.sa_flags as c_ulong,
                restorer: previous.sa_restorer.map_or(0, |r| r as usize),
                mask: signal::to_bits(&previous.sa_mask),
            };
        }
    }
    rc
}

/// Raw `rt_sigprocmask`, through the mask interposer.
/// The kernel's 8-byte signal set at `word` (a raw system call's argument), if any.
fn raw_mask(word: c_long) -> Option<u64> {
    opt_ref(a_ptr::<u64>(word)).copied()
}

fn raw_sigprocmask(how: c_int, set: *const u64, old: *mut u64) -> c_int {
    let set = opt_ref(set).map(|bits| signal::from_bits(*bits));
    // SAFETY: zeroed sigset is a valid out-parameter.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    let rc = masked(how, set.as_ref().map_or(std::ptr::null(), |s| s), &mut previous, real::sigprocmask);
    if rc == 0 {
        if let Some(old) = opt_mut(old) {
            *old = signal::to_bits(&previous);
        }
    }
    rc
}

// ---- exec: a SIGTRAP the program blocked stays blocked in the new image ----

type Argv = *const *const libc::c_char;

/// Interposed `execve`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn execve(path: *const libc::c_char, argv: Argv, envp: Argv) -> c_int {
    let child = environ::for_explicit(envp);
    let envp = child.as_ref().map_or(envp, |c| c.as_ptr());
    exec(Image::New, || real::execve(path, argv, envp))
}

/// Interposed `execv`: `execve` with the program's environment (and racewatch's variables).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn execv(path: *const libc::c_char, argv: Argv) -> c_int {
    match environ::for_child(std::ptr::null()) {
        Some(child) => exec(Image::New, || real::execve(path, argv, child.as_ptr())),
        None => exec(Image::New, || real::execv(path, argv)),
    }
}

/// Interposed `execvp`: `execvpe` with the program's environment (and racewatch's variables).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn execvp(file: *const libc::c_char, argv: Argv) -> c_int {
    match environ::for_child(std::ptr::null()) {
        Some(child) => exec(Image::New, || real::execvpe(file, argv, child.as_ptr())),
        None => exec(Image::New, || real::execvp(file, argv)),
    }
}

/// Interposed `execvpe`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn execvpe(file: *const libc::c_char, argv: Argv, envp: Argv) -> c_int {
    let child = environ::for_explicit(envp);
    let envp = child.as_ref().map_or(envp, |c| c.as_ptr());
    exec(Image::New, || real::execvpe(file, argv, envp))
}

/// Interposed `fexecve`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    let child = environ::for_explicit(envp);
    let envp = child.as_ref().map_or(envp, |c| c.as_ptr());
    exec(Image::New, || real::fexecve(fd, argv, envp))
}

/// Interposed `posix_spawn`: the child starts with the caller's mask unless the attributes set one.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> c_int {
    spawn(real::posix_spawn, pid, path, actions, attr, argv, envp)
}

/// Interposed `posix_spawnp`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> c_int {
    spawn(real::posix_spawnp, pid, file, actions, attr, argv, envp)
}

/// A spawn whose child gets the caller's mask (no `POSIX_SPAWN_SETSIGMASK`) runs as an `exec` does; the
/// child's environment gets racewatch's variables back.
fn spawn(
    real_fn: real::SpawnFn,
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> c_int {
    let child = environ::for_explicit(envp);
    let envp = child.as_ref().map_or(envp, |c| c.as_ptr());
    if sets_own_mask(attr) {
        return real_fn(pid, path, actions, attr, argv, envp);
    }
    exec(Image::Child, || real_fn(pid, path, actions, attr, argv, envp))
}

/// Interposed `system`: its shell starts with the caller's mask (glibc spawns it internally), and with
/// racewatch's variables in its environment.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn system(command: *const libc::c_char) -> c_int {
    environ::with_child_environ(|| exec(Image::Child, || real::system(command)))
}

/// Interposed `popen`: the same for its child.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn popen(command: *const libc::c_char, mode: *const libc::c_char) -> *mut libc::FILE {
    let mut stream = std::ptr::null_mut();
    environ::with_child_environ(|| {
        exec(Image::Child, || {
            stream = real::popen(command, mode);
            0
        })
    });
    stream
}

/// Whether spawn attributes give the child a mask of their own (`POSIX_SPAWN_SETSIGMASK`): the kernel
/// then applies exactly the program's.
fn sets_own_mask(attr: *const libc::posix_spawnattr_t) -> bool {
    let Some(attr) = opt_ref(attr) else { return false };
    let mut flags: libc::c_short = 0;
    // SAFETY: a live attributes object of the caller's and a live out-parameter.
    let rc = unsafe { libc::posix_spawnattr_getflags(attr, &mut flags) };
    rc == 0 && flags & libc::POSIX_SPAWN_SETSIGMASK as libc::c_short != 0
}

/// Runs an `exec` (or a call that starts a child with the caller's mask: `posix_spawn`, `system`,
/// `popen`) with `SIGTRAP` blocked in the kernel when the program has it blocked (the mask survives
/// `exec`, and the new image must see it), unblocked again when the call returns. In a `vfork` child
/// (CPython's `subprocess`, a `clone(CLONE_VM | CLONE_VFORK)`) the kernel mask is the child's own copy
/// of its parent's, without `SIGTRAP`: it is blocked there as the parent's thread had it, or as the
/// child set it since.
fn exec(image: Image, call: impl FnOnce() -> c_int) -> c_int {
    // The new image's memory budgets are the program's, without racewatch's footprint.
    let lowered = image == Image::New && budget::before_exec();
    let ignoring = signal::ignore_trap_for_exec();
    let rc = exec_with_mask(image, call);
    let errno = errno();
    if ignoring {
        signal::handle_trap_after_exec();
    }
    if lowered {
        budget::after_failed_exec();
    }
    set_errno(errno);
    rc
}

/// What [`exec`] runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Image {
    /// This process's new image (`execve` and kin): a signal pending for the process stays pending there.
    New,
    /// A child's (`posix_spawn`, `system`, `popen`): it starts with nothing pending.
    Child,
}

/// [`exec`] for the mask.
fn exec_with_mask(image: Image, call: impl FnOnce() -> c_int) -> c_int {
    if !signal::is_installed() {
        return call();
    }
    if !signal::trap_blocked_for_exec() {
        // Not blocked for the program, but maybe held in the kernel by racewatch: an `exec` from a
        // program handler that racewatch runs with every signal held while it moves (an `SA_ONSTACK`
        // one). The new image gets the program's mask.
        let held = signal::release_trap_for_exec();
        let rc = call();
        if held {
            signal::hold_trap_after_exec();
        }
        return rc;
    }
    // In a `vfork` child the sampling timers are the parent's, and stay as they are.
    let borrowed = signal::in_borrowed_memory();
    let blocked = if borrowed {
        signal::block_trap_in_borrowed_memory()
    } else {
        signal::block_trap_for_exec(image == Image::New)
    };
    let rc = call();
    // Raw: the failed exec's errno stays what the program reads.
    if blocked {
        signal::unblock_trap_after_exec(!borrowed);
    }
    rc
}

// ---- ucontext: masks switched with a context ----

/// Interposed `swapcontext`: the new context's mask has `SIGTRAP` blocked only for the program; the
/// saved context resumes with the state this thread has now. Runs on the program's stack, which may be
/// a fiber's of a few KiB: only a context whose mask has `SIGTRAP` is copied (about 1 KiB), in a frame of
/// its own (a copy in every call used 2 KiB of each fiber's stack, where glibc's `swapcontext` uses 72 bytes).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn swapcontext(old: *mut libc::ucontext_t, new: *const libc::ucontext_t) -> c_int {
    let Some(target) = opt_ref(new).filter(|_| signal::is_installed()) else {
        return real::swapcontext(old, new);
    };
    let was_blocked = signal::trap_blocked();
    let rc = if signal::has_trap(&target.uc_sigmask) {
        with_trap_out_of_mask(target, |copy| real::swapcontext(old, copy))
    } else {
        signal::set_trap_blocked(false);
        real::swapcontext(old, new)
    };
    signal::set_trap_blocked(was_blocked);
    rc
}

/// Interposed `setcontext` (as [`swapcontext`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setcontext(new: *const libc::ucontext_t) -> c_int {
    let Some(target) = opt_ref(new).filter(|_| signal::is_installed()) else {
        return real::setcontext(new);
    };
    let was_blocked = signal::trap_blocked();
    let rc = if signal::has_trap(&target.uc_sigmask) {
        with_trap_out_of_mask(target, |copy| real::setcontext(copy))
    } else {
        signal::set_trap_blocked(false);
        real::setcontext(new)
    };
    signal::set_trap_blocked(was_blocked);
    rc
}

/// Switches to a copy of `target` with `SIGTRAP` out of its kernel mask and in the thread's virtual state
/// instead.
#[cold]
#[inline(never)]
fn with_trap_out_of_mask(target: &libc::ucontext_t, switch: impl FnOnce(&libc::ucontext_t) -> c_int) -> c_int {
    let mut copy = *target;
    signal::set_trap_blocked(true);
    copy.uc_sigmask = signal::with_trap(&copy.uc_sigmask, false);
    switch(&copy)
}

/// Interposed `setrlimit`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setrlimit(resource: c_int, limit: *const libc::rlimit) -> c_int {
    prlimit(0, resource, limit, std::ptr::null_mut())
}

/// Interposed `setrlimit64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setrlimit64(resource: c_int, limit: *const libc::rlimit) -> c_int {
    setrlimit(resource, limit)
}

/// Interposed `getrlimit`: the program's memory budgets as it set them ([`budget`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn getrlimit(resource: c_int, limit: *mut libc::rlimit) -> c_int {
    prlimit(0, resource, std::ptr::null(), limit)
}

/// Interposed `getrlimit64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn getrlimit64(resource: c_int, limit: *mut libc::rlimit) -> c_int {
    getrlimit(resource, limit)
}

// ---- identity changes: glibc's broadcast to every thread never meets a thread start in a handler ----

/// Interposed `setuid` (see [`setxid`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setuid(uid: libc::uid_t) -> c_int {
    setxid::change(|| {
        handover::before_user_change(uid);
        real::setuid(uid)
    })
}

/// Interposed `setgid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setgid(gid: libc::gid_t) -> c_int {
    setxid::change(|| real::setgid(gid))
}

/// Interposed `seteuid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn seteuid(uid: libc::uid_t) -> c_int {
    setxid::change(|| {
        handover::before_user_change(uid);
        real::seteuid(uid)
    })
}

/// Interposed `setegid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setegid(gid: libc::gid_t) -> c_int {
    setxid::change(|| real::setegid(gid))
}

/// Interposed `setreuid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setreuid(ruid: libc::uid_t, euid: libc::uid_t) -> c_int {
    setxid::change(|| {
        handover::before_user_change(euid);
        real::setreuid(ruid, euid)
    })
}

/// Interposed `setregid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setregid(rgid: libc::gid_t, egid: libc::gid_t) -> c_int {
    setxid::change(|| real::setregid(rgid, egid))
}

/// Interposed `setresuid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setresuid(ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t) -> c_int {
    setxid::change(|| {
        handover::before_user_change(euid);
        real::setresuid(ruid, euid, suid)
    })
}

/// Interposed `setresgid`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setresgid(rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t) -> c_int {
    setxid::change(|| real::setresgid(rgid, egid, sgid))
}

/// Interposed `setgroups`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setgroups(size: libc::size_t, groups: *const libc::gid_t) -> c_int {
    setxid::change(|| real::setgroups(size, groups))
}

/// Interposed `initgroups` (glibc's calls `setgroups` inside libc, past the interposed one).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn initgroups(user: *const c_char, group: libc::gid_t) -> c_int {
    setxid::change(|| real::initgroups(user, group))
}

/// Interposed `mlockall`: with `MCL_FUTURE`, every page racewatch maps from now on is locked memory of the
/// program's budget, so its alternate stacks for new threads are the smallest; with `MCL_CURRENT`, what
/// racewatch mapped ahead before `main` and does not use yet is unmapped first, and racewatch's own
/// module is unlocked afterwards ([`crate::sys::prefault::unlock_own_module`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn mlockall(flags: c_int) -> c_int {
    if flags & libc::MCL_CURRENT != 0 {
        crate::sys::region::open_gap_above_own_module();
        detector::before_locking_all();
    }
    let rc = real::mlockall(flags);
    if rc == 0 {
        stacks::set_locking_future(flags & libc::MCL_FUTURE != 0);
        if flags & libc::MCL_CURRENT != 0 {
            crate::sys::prefault::unlock_own_module();
        }
    }
    rc
}

/// Interposed `munlockall`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn munlockall() -> c_int {
    let rc = real::munlockall();
    if rc == 0 {
        stacks::set_locking_future(false);
    }
    rc
}

/// Interposed `unshare`: a user namespace needs a single-threaded process (see
/// [`detector::before_single_threaded_call`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn unshare(flags: c_int) -> c_int {
    detector::before_single_threaded_call();
    real::unshare(flags)
}

/// Interposed `setns`: entering a user or mount namespace needs a single-threaded process.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn setns(fd: c_int, nstype: c_int) -> c_int {
    detector::before_single_threaded_call();
    real::setns(fd, nstype)
}

/// Interposed `prlimit`: this process's memory budgets (`RLIMIT_AS`, `RLIMIT_DATA`) are the program's,
/// with racewatch's footprint on top in the kernel ([`budget`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn prlimit(
    pid: libc::pid_t,
    resource: c_int,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    let ours = pid == 0 || pid == thread::getpid();
    let Some(resource) = u32::try_from(resource).ok().filter(|&r| ours && budget::is_budget(r)) else {
        limiting(pid, resource, new);
        return real::prlimit(pid, resource, new, old);
    };
    let before = budget::program_limit(resource)
        .or_else(|| raw::limit(resource).map(|(soft, hard)| budget::Limit { soft, hard }));
    if let Some(new) = opt_ref(new) {
        if let Err(code) = budget::program_sets(resource, budget::Limit { soft: new.rlim_cur, hard: new.rlim_max }) {
            set_errno(code);
            return -1;
        }
    }
    if let (Some(old), Some(before)) = (opt_mut(old), before) {
        *old = libc::rlimit { rlim_cur: before.soft, rlim_max: before.hard };
    }
    0
}

/// Interposed `prlimit64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn prlimit64(
    pid: libc::pid_t,
    resource: c_int,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    prlimit(pid, resource, new, old)
}

/// Process `pid` (0: this one) is about to get `limit` for `resource`.
fn limiting(pid: libc::pid_t, resource: c_int, limit: *const libc::rlimit) {
    let ours = pid == 0 || pid == thread::getpid();
    if let (true, libc::RLIMIT_NOFILE, Some(limit)) = (ours, resource as u32, opt_ref(limit)) {
        detector::before_nofile_limit(limit.rlim_cur, limit.rlim_max);
    }
}

/// Interposed `dlclose`: no stack unwind may read a module's `.eh_frame` while the loader unmaps it, and
/// no module file of an unloaded library stays mapped for its symbols ([`crate::reporter::module_unloaded`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let closing = unwind_info::suspend();
    // A reader of the unwind table that never left (a thread stopped inside a handler) could still
    // read the module: keep it loaded rather than unmap it under that reader.
    let rc = if closing.safe { real::dlclose(handle) } else { 0 };
    unwind_info::closed(&closing);
    if rc == 0 && closing.safe {
        crate::reporter::module_unloaded();
    }
    rc
}

/// Interposed `open`: the program's own `/proc` status files read as without racewatch
/// ([`proc_view`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    proc_open(path, flags)
        .unwrap_or_else(|| identified(made_fd(0, || real::open(false, path, flags, mode)), path, flags))
}

/// Interposed `open64`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    proc_open(path, flags)
        .unwrap_or_else(|| identified(made_fd(0, || real::open(true, path, flags, mode)), path, flags))
}

/// Interposed `openat` (a path relative to `dir` is identified by what it opened).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn openat(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    proc_open(path, flags)
        .unwrap_or_else(|| identified(made_fd(0, || real::openat(false, dir, path, flags, mode)), path, flags))
}

/// The size of `struct open_how` (`flags`, `mode`, `resolve`) that `openat2` takes.
const OPEN_HOW_SIZE: c_long = 24;

/// Interposed `openat64`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn openat64(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    proc_open(path, flags)
        .unwrap_or_else(|| identified(made_fd(0, || real::openat(true, dir, path, flags, mode)), path, flags))
}

fn proc_open(path: *const c_char, flags: c_int) -> Option<c_int> {
    if !ptr::cstr_starts_with(path, proc_view::PREFIX) {
        return None;
    }
    let path = opt_cstr(path)?;
    if crate::fd_view::names_own_descriptor(path.as_ptr()) {
        return Some(errno_result(-libc::ENOENT));
    }
    proc_view::open(path, flags)
}

/// Descriptor `fd`, which the program opened as `path`: when the kernel names it one of the process's
/// own status files ([`proc_view`]) under a name the path did not spell out (`openat` of `status` in a
/// descriptor of `/proc/self`, `/proc/self/../self/status`, a relative path after `chdir("/proc/self")`),
/// the same number now refers to the program's view of it.
fn identified(fd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if fd < 0 || !opt_cstr(path).is_some_and(|p| proc_view::worth_identifying(p.to_bytes())) {
        return fd;
    }
    let mut name = [0u8; 128];
    let Some(len) = fd::procfs_name(fd, &mut name) else { return fd };
    let Ok(name) = std::ffi::CStr::from_bytes_with_nul(&name[..=len]) else { return fd };
    if let Some(view) = proc_view::open(name, flags) {
        if fd::replace_with(view, fd, flags & libc::O_CLOEXEC != 0) {
            crate::view_fds::moved(view, fd);
        }
    }
    fd
}

/// What directory descriptor `fd`, opened as `path` (`None`: handed over by the program, `fdopendir`),
/// lists when the kernel names it the process's `task` or `fd` directory under another name.
fn identified_listing(fd: c_int, path: Option<&std::ffi::CStr>) -> Option<proc_view::Target> {
    if !path.map_or(proc_view::worth_identifying(b""), |p| proc_view::worth_identifying(p.to_bytes())) {
        return None;
    }
    let mut name = [0u8; 128];
    let len = fd::procfs_name(fd, &mut name)?;
    proc_view::listing(std::ffi::CStr::from_bytes_with_nul(&name[..=len]).ok()?)
}

/// Interposed `fopen`: as `open`, for reading.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    own_descriptor_stream(path)
        .unwrap_or_else(|| identified_file(with_room_ptr(|| real::fopen(false, path, mode)), path, mode))
}

/// Interposed `fopen64`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    own_descriptor_stream(path)
        .unwrap_or_else(|| identified_file(with_room_ptr(|| real::fopen(true, path, mode)), path, mode))
}

/// An `fopen` of `/proc/self/fd/<n>` for one of racewatch's descriptors: no stream (`ENOENT`), as for a
/// free number. Other files of the process's own are opened for real first and then replaced by their
/// view ([`identified_file`]): the stream's allocation (the process's first `malloc` makes its heap)
/// comes before the text is read, as without racewatch, where the kernel makes it at the first read.
fn own_descriptor_stream(path: *const c_char) -> Option<*mut libc::FILE> {
    if !ptr::cstr_starts_with(path, proc_view::PREFIX)
        || !crate::fd_view::names_own_descriptor(opt_cstr(path)?.as_ptr())
    {
        return None;
    }
    set_errno(libc::ENOENT);
    Some(std::ptr::null_mut())
}

/// A stream the program opened as `path` for reading, its descriptor [`identified`].
fn identified_file(file: *mut libc::FILE, path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let flags = opt_cstr(mode).and_then(|mode| proc_view::fopen_flags(mode.to_bytes()));
    if let (Some(flags), Some(fd)) = (flags, ptr::fileno(file)) {
        identified(fd, path, flags);
    }
    file
}

/// Interposed `opendir`: listings of the process's threads and descriptors leave racewatch's out.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    let dir = with_room_ptr(|| real::opendir(path));
    if dir.is_null() {
        return dir;
    }
    let spelled =
        opt_cstr(path).filter(|_| ptr::cstr_starts_with(path, proc_view::PREFIX)).and_then(proc_view::listing);
    let target = spelled.or_else(|| ptr::dir_fd(dir).and_then(|n| identified_listing(n, opt_cstr(path))));
    if let Some(target) = target {
        proc_view::note_listing(dir as usize, target);
    }
    dir
}

/// Interposed `fdopendir`: a listing of the process's threads or descriptors through a descriptor
/// (`openat` of `task` in a descriptor of `/proc/self`) leaves racewatch's out, as [`opendir`] does.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fdopendir(n: c_int) -> *mut libc::DIR {
    let dir = real::fdopendir(n);
    if !dir.is_null() {
        if let Some(target) = identified_listing(n, None) {
            proc_view::note_listing(dir as usize, target);
        }
    }
    dir
}

/// Interposed `readdir`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn readdir(dir: *mut libc::DIR) -> *mut libc::dirent64 {
    read_listing(false, dir)
}

/// Interposed `readdir64` (the same layout on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn readdir64(dir: *mut libc::DIR) -> *mut libc::dirent64 {
    read_listing(true, dir)
}

fn read_listing(large: bool, dir: *mut libc::DIR) -> *mut libc::dirent64 {
    let Some(target) = proc_view::listing_of(dir as usize) else { return real::readdir(large, dir) };
    loop {
        let entry = real::readdir(large, dir);
        match ptr::dirent_name(entry) {
            Some(name) if proc_view::hidden_entry(target, name) => continue,
            _ => return entry,
        }
    }
}

/// Interposes `scandir` and its kin: a listing of the process's threads or descriptors made with them
/// (libuv's, so node's `fs.readdirSync`) leaves racewatch's out, as [`opendir`] does. `large`: the
/// `64` name (the same layout on x86-64); with a directory descriptor, a path relative to it is never
/// one of the process's own listings.
macro_rules! interpose_scandir {
    ($(#[$doc:meta])* $name:ident, $large:expr) => {
        $(#[$doc])*
        #[cfg_attr(feature = "preload", no_mangle)]
        pub extern "C" fn $name(
            path: *const c_char,
            list: *mut *mut *mut libc::dirent64,
            filter: real::ScanFilter,
            order: real::ScanOrder,
        ) -> c_int {
            scanned(path, list, real::scandir($large, None, path, list, filter, order))
        }
    };
    ($(#[$doc:meta])* at $name:ident, $large:expr) => {
        $(#[$doc])*
        #[cfg_attr(feature = "preload", no_mangle)]
        pub extern "C" fn $name(
            dir: c_int,
            path: *const c_char,
            list: *mut *mut *mut libc::dirent64,
            filter: real::ScanFilter,
            order: real::ScanOrder,
        ) -> c_int {
            scanned(path, list, real::scandir($large, Some(dir), path, list, filter, order))
        }
    };
}

interpose_scandir!(
    /// Interposed `scandir`.
    scandir,
    false
);
interpose_scandir!(
    /// Interposed `scandir64`.
    scandir64,
    true
);
interpose_scandir!(
    /// Interposed `scandirat`.
    at scandirat,
    false
);
interpose_scandir!(
    /// Interposed `scandirat64`.
    at scandirat64,
    true
);

/// What a `scandir` of `path` that returned `count` entries in `*list` returns to the program.
fn scanned(path: *const c_char, list: *mut *mut *mut libc::dirent64, count: c_int) -> c_int {
    if count <= 0 || !ptr::cstr_starts_with(path, proc_view::PREFIX) {
        return count;
    }
    match opt_cstr(path).and_then(proc_view::listing) {
        Some(target) => ptr::drop_scanned(list, count, |name| proc_view::hidden_entry(target, name)),
        None => count,
    }
}

/// Interposed `closedir`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn closedir(dir: *mut libc::DIR) -> c_int {
    proc_view::forget_listing(dir as usize);
    real::closedir(dir)
}

/// Interposed `munmap`: another thread's alternate stack in the kernel stays mapped, so its signal frames
/// never land in a hole ([`stacks::keeps_mapped`]: Rust's `process::exit` unmaps the
/// main thread's from the exiting thread).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    match stacks::keeps_mapped(addr as usize, len) {
        Some((from, to)) => stacks::unmap_keeping(addr as usize, len, from, to),
        None => real::munmap(addr, len),
    }
}
