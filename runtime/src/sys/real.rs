//! The libc functions racewatch interposes, reached past its own definitions
//! with `dlsym(RTLD_NEXT, name)`; and, for racewatch's own calls (its threads,
//! its `SIGTRAP` handler), libc's definitions themselves, so that another
//! interposer preloaded after racewatch sees only the program's calls.
//!
//! [`resolve_all`] runs in the constructor, so later calls (possibly from a
//! signal handler: programs call `sigprocmask` there) only load a pointer.
//! A call that comes before the constructor (another library's constructor
//! ran first) resolves its own function on the spot. A function that cannot
//! be found fails with `ENOSYS` instead of crashing.
// The pointers here are a C caller's, passed on under the libc function's own contract (null
// or valid); making these functions `unsafe` would only move the same promise into the callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `pthread_create`'s start routine.
pub type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
/// The function a child made by `clone` runs.
pub type CloneFn = extern "C" fn(*mut c_void) -> c_int;
/// A C `main` as `__libc_start_main` calls it: `argc`, `argv`, `envp`.
pub type MainFn = extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

struct Real {
    name: &'static CStr,
    addr: AtomicUsize,
    /// Resolved in libc itself rather than in the next object.
    in_libc: bool,
}

impl Real {
    const fn new(name: &'static CStr) -> Real {
        Real { name, addr: AtomicUsize::new(0), in_libc: false }
    }

    const fn libc_own(name: &'static CStr) -> Real {
        Real { name, addr: AtomicUsize::new(0), in_libc: true }
    }

    /// The definition's address, or 0 when there is none.
    fn get(&self) -> usize {
        let addr = self.addr.load(Ordering::Acquire);
        if addr != 0 {
            return addr;
        }
        let found = match self.in_libc.then(|| crate::sys::dl::Loaded::find(c"libc.so.6")).flatten() {
            Some(libc) => libc.symbol(self.name).unwrap_or(0) as usize,
            None => 0,
        };
        let found = if found != 0 {
            found
        } else {
            // SAFETY: `name` is NUL-terminated; RTLD_NEXT asks the dynamic linker for the
            // next object's definition, which is what an interposer must call.
            unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) as usize }
        };
        self.addr.store(found, Ordering::Release);
        found
    }
}

static PTHREAD_CREATE: Real = Real::new(c"pthread_create");
static SIGACTION: Real = Real::new(c"sigaction");
static SIGNAL: Real = Real::new(c"signal");
static SIGPROCMASK: Real = Real::new(c"sigprocmask");
static PTHREAD_SIGMASK: Real = Real::new(c"pthread_sigmask");
static CLOSE: Real = Real::new(c"close");
static CLOSE_RANGE: Real = Real::new(c"close_range");
static CLOSEFROM: Real = Real::new(c"closefrom");
static DUP: Real = Real::new(c"dup");
static DUP2: Real = Real::new(c"dup2");
static FCNTL: Real = Real::new(c"fcntl");
static FCNTL64: Real = Real::new(c"fcntl64");
static IOCTL: Real = Real::new(c"ioctl");
static DUP3: Real = Real::new(c"dup3");
static PRCTL: Real = Real::new(c"prctl");
static SYSCALL: Real = Real::new(c"syscall");
static DLCLOSE: Real = Real::new(c"dlclose");
static LIBC_START_MAIN: Real = Real::new(c"__libc_start_main");
static EXIT: Real = Real::new(c"exit");
static PTHREAD_KEY_CREATE: Real = Real::new(c"pthread_key_create");
static PTHREAD_JOIN: Real = Real::new(c"pthread_join");
static SETRLIMIT: Real = Real::new(c"setrlimit");
static MLOCKALL: Real = Real::new(c"mlockall");
static MUNLOCKALL: Real = Real::new(c"munlockall");
static UNSHARE: Real = Real::new(c"unshare");
static SETNS: Real = Real::new(c"setns");
static PRLIMIT: Real = Real::new(c"prlimit");
static EXECVE: Real = Real::new(c"execve");
static EXECV: Real = Real::new(c"execv");
static EXECVP: Real = Real::new(c"execvp");
static EXECVPE: Real = Real::new(c"execvpe");
static FEXECVE: Real = Real::new(c"fexecve");
static POSIX_SPAWN: Real = Real::new(c"posix_spawn");
static POSIX_SPAWNP: Real = Real::new(c"posix_spawnp");
static SYSTEM: Real = Real::new(c"system");
static POPEN: Real = Real::new(c"popen");
static SWAPCONTEXT: Real = Real::new(c"swapcontext");
static SETCONTEXT: Real = Real::new(c"setcontext");
static LONGJMP: Real = Real::new(c"longjmp");
static UNDERSCORE_LONGJMP: Real = Real::new(c"_longjmp");
static SIGLONGJMP: Real = Real::new(c"siglongjmp");
static LONGJMP_CHK: Real = Real::new(c"__longjmp_chk");
static SIGSETJMP: Real = Real::new(c"__sigsetjmp");
static OPEN: Real = Real::new(c"open");
static OPEN64: Real = Real::new(c"open64");
static OPENAT: Real = Real::new(c"openat");
static OPENAT64: Real = Real::new(c"openat64");
static FOPEN: Real = Real::new(c"fopen");
static FOPEN64: Real = Real::new(c"fopen64");
static OPENDIR: Real = Real::new(c"opendir");
static SOCKET: Real = Real::new(c"socket");
static SOCKETPAIR: Real = Real::new(c"socketpair");
static ACCEPT: Real = Real::new(c"accept");
static ACCEPT4: Real = Real::new(c"accept4");
static PIPE: Real = Real::new(c"pipe");
static PIPE2: Real = Real::new(c"pipe2");
static EPOLL_CREATE1: Real = Real::new(c"epoll_create1");
static EVENTFD: Real = Real::new(c"eventfd");
static FDOPENDIR: Real = Real::new(c"fdopendir");
static READDIR: Real = Real::new(c"readdir");
static READDIR64: Real = Real::new(c"readdir64");
static CLOSEDIR: Real = Real::new(c"closedir");
static SCANDIR: Real = Real::new(c"scandir");
static SCANDIR64: Real = Real::new(c"scandir64");
static SCANDIRAT: Real = Real::new(c"scandirat");
static SCANDIRAT64: Real = Real::new(c"scandirat64");
static MUNMAP: Real = Real::new(c"munmap");
static SIGQUEUE: Real = Real::new(c"sigqueue");
static SIGSUSPEND: Real = Real::new(c"sigsuspend");
static SIGTIMEDWAIT: Real = Real::new(c"sigtimedwait");
static SIGNALFD: Real = Real::new(c"signalfd");
static PPOLL: Real = Real::new(c"ppoll");
static PSELECT: Real = Real::new(c"pselect");
static EPOLL_PWAIT: Real = Real::new(c"epoll_pwait");
static PTHREAD_SIGQUEUE: Real = Real::new(c"pthread_sigqueue");
static PTHREAD_KILL: Real = Real::new(c"pthread_kill");
static RAISE: Real = Real::new(c"raise");
static CLONE: Real = Real::new(c"clone");
static TGKILL: Real = Real::new(c"tgkill");
static SETUID: Real = Real::new(c"setuid");
static SETGID: Real = Real::new(c"setgid");
static SETEUID: Real = Real::new(c"seteuid");
static SETEGID: Real = Real::new(c"setegid");
static SETREUID: Real = Real::new(c"setreuid");
static SETREGID: Real = Real::new(c"setregid");
static SETRESUID: Real = Real::new(c"setresuid");
static SETRESGID: Real = Real::new(c"setresgid");
static SETGROUPS: Real = Real::new(c"setgroups");
static INITGROUPS: Real = Real::new(c"initgroups");
static FSTAT: Real = Real::new(c"fstat");
static FSTAT64: Real = Real::new(c"fstat64");
static FSTATAT: Real = Real::new(c"fstatat");
static FSTATAT64: Real = Real::new(c"fstatat64");
static STAT: Real = Real::new(c"stat");
static STAT64: Real = Real::new(c"stat64");
static LSTAT: Real = Real::new(c"lstat");
static LSTAT64: Real = Real::new(c"lstat64");
static STATX: Real = Real::new(c"statx");
static POLL: Real = Real::new(c"poll");
static SELECT: Real = Real::new(c"select");
static POLL_CHK: Real = Real::new(c"__poll_chk");
static PPOLL_CHK: Real = Real::new(c"__ppoll_chk");
static EPOLL_CTL: Real = Real::new(c"epoll_ctl");
static READLINK: Real = Real::new(c"readlink");
static LSEEK: Real = Real::new(c"lseek");
static PREAD: Real = Real::new(c"pread");
static FSEEKO: Real = Real::new(c"fseeko");
static REWIND: Real = Real::new(c"rewind");
static FSETPOS: Real = Real::new(c"fsetpos");
static STATFS: Real = Real::new(c"statfs");
static FSTATFS: Real = Real::new(c"fstatfs");
static FSTATVFS: Real = Real::new(c"fstatvfs");
static MMAP: Real = Real::new(c"mmap");
static OWN_MMAP: Real = Real::libc_own(c"mmap");
static STATVFS: Real = Real::new(c"statvfs");
static FSYNC: Real = Real::new(c"fsync");
static FDATASYNC: Real = Real::new(c"fdatasync");
static SENDFILE: Real = Real::new(c"sendfile");
static READLINKAT: Real = Real::new(c"readlinkat");
static OWN_PTHREAD_CREATE: Real = Real::libc_own(c"pthread_create");
static OWN_SIGACTION: Real = Real::libc_own(c"sigaction");

const ALL: &[&Real] = &[
    &SOCKET,
    &SOCKETPAIR,
    &ACCEPT,
    &ACCEPT4,
    &PIPE,
    &PIPE2,
    &EPOLL_CREATE1,
    &EVENTFD,
    &SIGQUEUE,
    &PTHREAD_SIGQUEUE,
    &PTHREAD_KILL,
    &RAISE,
    &TGKILL,
    &PTHREAD_CREATE,
    &SIGACTION,
    &SIGNAL,
    &SIGPROCMASK,
    &PTHREAD_SIGMASK,
    &CLOSE,
    &CLOSE_RANGE,
    &CLOSEFROM,
    &DUP,
    &DUP2,
    &FCNTL,
    &FCNTL64,
    &IOCTL,
    &DUP3,
    &PRCTL,
    &SYSCALL,
    &DLCLOSE,
    &LIBC_START_MAIN,
    &EXIT,
    &PTHREAD_KEY_CREATE,
    &PTHREAD_JOIN,
    &SETRLIMIT,
    &PRLIMIT,
    &EXECVE,
    &EXECV,
    &EXECVP,
    &EXECVPE,
    &FEXECVE,
    &POSIX_SPAWN,
    &POSIX_SPAWNP,
    &SYSTEM,
    &POPEN,
    &SWAPCONTEXT,
    &SETCONTEXT,
    &LONGJMP,
    &UNDERSCORE_LONGJMP,
    &SIGLONGJMP,
    &LONGJMP_CHK,
    &SIGSETJMP,
    &OPEN,
    &OPEN64,
    &OPENAT,
    &OPENAT64,
    &FOPEN,
    &FOPEN64,
    &OPENDIR,
    &FDOPENDIR,
    &READDIR,
    &READDIR64,
    &CLOSEDIR,
    &SCANDIR,
    &SCANDIR64,
    &SCANDIRAT,
    &SCANDIRAT64,
    &MUNMAP,
    &SETUID,
    &SETGID,
    &SETEUID,
    &SETEGID,
    &SETREUID,
    &SETREGID,
    &SETRESUID,
    &SETRESGID,
    &SETGROUPS,
    &INITGROUPS,
    &FSTAT,
    &FSTAT64,
    &FSTATAT,
    &FSTATAT64,
    &STAT,
    &STAT64,
    &LSTAT,
    &LSTAT64,
    &STATX,
    &POLL,
    &SELECT,
    &EPOLL_CTL,
    &READLINK,
    &READLINKAT,
    &OWN_PTHREAD_CREATE,
    &OWN_SIGACTION,
    &CLONE,
    // The program's allocators call `mmap` (through racewatch's, [`crate::fd_view`]).
    &MMAP,
    &OWN_MMAP,
    &FSTATVFS,
    &STATVFS,
    &FSYNC,
    &FDATASYNC,
    &SENDFILE,
];

/// Resolves every real function now (call from the constructor).
pub fn resolve_all() {
    for real in ALL {
        real.get();
    }
}

fn enosys<T>(failed: T) -> T {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    failed
}

macro_rules! call {
    ($real:expr, $failed:expr, fn($($ty:ty),* $(,)?) -> $ret:ty, $($arg:expr),* $(,)?) => {
        call!($real, $failed, extern "C" fn($($ty),*) -> $ret, $($arg),*)
    };
    // `extern "C-unwind"`: a cancellation point, whose cancellation unwinds through the caller.
    ($real:expr, $failed:expr, extern $abi:literal fn($($ty:ty),* $(,)?) -> $ret:ty, $($arg:expr),* $(,)?) => {{
        let addr = $real.get();
        if addr == 0 {
            enosys($failed)
        } else {
            // SAFETY: `addr` is the libc definition of this very symbol, whose C
            // signature is the one spelled here; the arguments are the caller's.
            let f: unsafe extern $abi fn($($ty),*) -> $ret = unsafe { std::mem::transmute(addr) };
            unsafe { f($($arg),*) }
        }
    }};
}

/// The real `pthread_create`.
pub fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    create_with(&PTHREAD_CREATE, thread, attr, start, arg)
}

/// libc's `pthread_create`, for racewatch's own threads.
pub fn own_pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    create_with(&OWN_PTHREAD_CREATE, thread, attr, start, arg)
}

fn create_with(
    real: &Real,
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    call!(
        real,
        libc::ENOSYS,
        fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartRoutine, *mut c_void) -> c_int,
        thread,
        attr,
        start,
        arg
    )
}

/// libc's `sigaction`, for the actions racewatch sets or reads for itself.
pub fn own_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    action_with(&OWN_SIGACTION, sig, act, old)
}

fn action_with(real: &Real, sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    call!(real, -1, fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int, sig, act, old)
}

/// The real `pthread_join`.
pub fn pthread_join(thread: libc::pthread_t, value: *mut *mut c_void) -> c_int {
    call!(PTHREAD_JOIN, libc::ENOSYS, fn(libc::pthread_t, *mut *mut c_void) -> c_int, thread, value)
}

/// The real `pthread_key_create`.
pub fn pthread_key_create(key: *mut libc::pthread_key_t, destr: Option<unsafe extern "C" fn(*mut c_void)>) -> c_int {
    call!(
        PTHREAD_KEY_CREATE,
        libc::ENOSYS,
        fn(*mut libc::pthread_key_t, Option<unsafe extern "C" fn(*mut c_void)>) -> c_int,
        key,
        destr
    )
}

/// The real `sigaction`.
pub fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    action_with(&SIGACTION, sig, act, old)
}

/// The real `signal`.
pub fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    call!(SIGNAL, libc::SIG_ERR, fn(c_int, libc::sighandler_t) -> libc::sighandler_t, sig, handler)
}

/// The real `sigprocmask`.
pub fn sigprocmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    call!(SIGPROCMASK, -1, fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int, how, set, old)
}

/// The real `pthread_sigmask`.
pub fn pthread_sigmask(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int {
    call!(PTHREAD_SIGMASK, libc::ENOSYS, fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int, how, set, old)
}

/// The real `close`.
pub fn close(fd: c_int) -> c_int {
    call!(CLOSE, -1, fn(c_int) -> c_int, fd)
}

/// The real `close_range`.
pub fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    call!(CLOSE_RANGE, -1, fn(c_uint, c_uint, c_int) -> c_int, first, last, flags)
}

/// The real `closefrom`.
pub fn closefrom(low: c_int) {
    call!(CLOSEFROM, (), fn(c_int) -> (), low)
}

/// The real `dup`.
/// The real `sigsuspend`.
pub fn sigsuspend(set: *const libc::sigset_t) -> c_int {
    call!(SIGSUSPEND, -1, extern "C-unwind" fn(*const libc::sigset_t) -> c_int, set)
}

/// The real `sigtimedwait` (a cancellation point; `sigwaitinfo` and `sigwait` are it without a timeout).
pub fn sigtimedwait(set: *const libc::sigset_t, info: *mut libc::siginfo_t, timeout: *const libc::timespec) -> c_int {
    call!(
        SIGTIMEDWAIT,
        -1,
        extern "C-unwind" fn(*const libc::sigset_t, *mut libc::siginfo_t, *const libc::timespec) -> c_int,
        set,
        info,
        timeout
    )
}

/// The real `signalfd`.
pub fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int {
    call!(SIGNALFD, -1, fn(c_int, *const libc::sigset_t, c_int) -> c_int, fd, mask, flags)
}

/// The real `ppoll`.
pub fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    call!(
        PPOLL,
        -1,
        extern "C-unwind" fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int,
        fds,
        n,
        timeout,
        mask
    )
}

/// Which of the C library's `stat` functions a call is: the layouts are the same on x86-64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatFn {
    Stat,
    Stat64,
    Lstat,
    Lstat64,
}

/// The real `fstat` (`fstat64` when `large`).
pub fn fstat(large: bool, fd: c_int, buf: *mut libc::stat) -> c_int {
    call!(if large { &FSTAT64 } else { &FSTAT }, -1, fn(c_int, *mut libc::stat) -> c_int, fd, buf)
}

/// The real `fstatat` (`fstatat64` when `large`).
pub fn fstatat(large: bool, dir: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    call!(
        if large { &FSTATAT64 } else { &FSTATAT },
        -1,
        fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int,
        dir,
        path,
        buf,
        flags
    )
}

/// The real `stat`, `stat64`, `lstat` or `lstat64`.
pub fn stat(which: StatFn, path: *const c_char, buf: *mut libc::stat) -> c_int {
    let real = match which {
        StatFn::Stat => &STAT,
        StatFn::Stat64 => &STAT64,
        StatFn::Lstat => &LSTAT,
        StatFn::Lstat64 => &LSTAT64,
    };
    call!(real, -1, fn(*const c_char, *mut libc::stat) -> c_int, path, buf)
}

/// The real `statx`.
pub fn statx(dir: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int {
    call!(STATX, -1, fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int, dir, path, flags, mask, buf)
}

/// The real `poll` (a cancellation point).
pub fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    call!(POLL, -1, extern "C-unwind" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int, fds, n, timeout)
}

/// The real `__poll_chk` (its check fails the program where the array overruns `len`).
pub fn poll_chk(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int, len: usize) -> c_int {
    call!(
        POLL_CHK,
        -1,
        extern "C-unwind" fn(*mut libc::pollfd, libc::nfds_t, c_int, usize) -> c_int,
        fds,
        n,
        timeout,
        len
    )
}

/// The real `__ppoll_chk` (see [`poll_chk`]).
pub fn ppoll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
    len: usize,
) -> c_int {
    call!(
        PPOLL_CHK,
        -1,
        extern "C-unwind" fn(
            *mut libc::pollfd,
            libc::nfds_t,
            *const libc::timespec,
            *const libc::sigset_t,
            usize,
        ) -> c_int,
        fds,
        n,
        timeout,
        mask,
        len
    )
}

/// The real `select` (a cancellation point).
pub fn select(
    n: c_int,
    read: *mut libc::fd_set,
    write: *mut libc::fd_set,
    except: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    call!(
        SELECT,
        -1,
        extern "C-unwind" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::timeval,
        ) -> c_int,
        n,
        read,
        write,
        except,
        timeout
    )
}

/// The real `lseek` (the same function as `lseek64` on x86-64).
pub fn lseek(fd: c_int, offset: libc::off_t, whence: c_int) -> libc::off_t {
    call!(LSEEK, -1, fn(c_int, libc::off_t, c_int) -> libc::off_t, fd, offset, whence)
}

/// The real `pread` (the same function as `pread64` on x86-64): a cancellation point.
pub fn pread(fd: c_int, buf: *mut c_void, len: usize, offset: libc::off_t) -> isize {
    call!(PREAD, -1, extern "C-unwind" fn(c_int, *mut c_void, usize, libc::off_t) -> isize, fd, buf, len, offset)
}

/// The real `fseeko` (the same function as `fseek`'s and `fseeko64`'s on x86-64, where `long` and
/// `off_t` are both 64 bits).
pub fn fseeko(file: *mut libc::FILE, offset: libc::off_t, whence: c_int) -> c_int {
    call!(FSEEKO, -1, fn(*mut libc::FILE, libc::off_t, c_int) -> c_int, file, offset, whence)
}

/// The real `rewind`.
pub fn rewind(file: *mut libc::FILE) {
    call!(REWIND, (), fn(*mut libc::FILE) -> (), file)
}

/// The real `fsetpos` (the same function as `fsetpos64` on x86-64).
pub fn fsetpos(file: *mut libc::FILE, pos: *const libc::fpos_t) -> c_int {
    call!(FSETPOS, -1, fn(*mut libc::FILE, *const libc::fpos_t) -> c_int, file, pos)
}

/// The real `statfs` (the same function as `statfs64` on x86-64).
pub fn statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    call!(STATFS, -1, fn(*const c_char, *mut libc::statfs) -> c_int, path, buf)
}

/// The real `fstatfs` (the same function as `fstatfs64` on x86-64).
pub fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int {
    call!(FSTATFS, -1, fn(c_int, *mut libc::statfs) -> c_int, fd, buf)
}

/// The real `statvfs` (the same function as `statvfs64` on x86-64).
pub fn statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    call!(STATVFS, -1, fn(*const c_char, *mut libc::statvfs) -> c_int, path, buf)
}

/// The real `fstatvfs` (the same function as `fstatvfs64` on x86-64).
pub fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    call!(FSTATVFS, -1, fn(c_int, *mut libc::statvfs) -> c_int, fd, buf)
}

/// Where racewatch's `mmap` goes on ([`crate::fd_view`]): the next definition (a wrapper preloaded after
/// racewatch, else libc's), or libc's own for racewatch's own calls (`own`); 0 when there is none.
pub fn mmap_address(own: bool) -> usize {
    if own {
        OWN_MMAP.get()
    } else {
        MMAP.get()
    }
}

/// The real `fsync`: a cancellation point.
pub fn fsync(fd: c_int) -> c_int {
    call!(FSYNC, -1, extern "C-unwind" fn(c_int) -> c_int, fd)
}

/// The real `fdatasync`: a cancellation point.
pub fn fdatasync(fd: c_int) -> c_int {
    call!(FDATASYNC, -1, extern "C-unwind" fn(c_int) -> c_int, fd)
}

/// The real `sendfile` (the same function as `sendfile64` on x86-64).
pub fn sendfile(out: c_int, input: c_int, offset: *mut libc::off_t, count: usize) -> isize {
    call!(SENDFILE, -1, fn(c_int, c_int, *mut libc::off_t, usize) -> isize, out, input, offset, count)
}

/// The real `readlink`.
pub fn readlink(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    call!(READLINK, -1, fn(*const c_char, *mut c_char, usize) -> isize, path, buf, len)
}

/// The real `readlinkat`.
pub fn readlinkat(dir: c_int, path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    call!(READLINKAT, -1, fn(c_int, *const c_char, *mut c_char, usize) -> isize, dir, path, buf, len)
}

/// The real `epoll_ctl`.
pub fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
    call!(EPOLL_CTL, -1, fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int, epfd, op, fd, event)
}

/// The real `pselect`.
pub fn pselect(
    n: c_int,
    read: *mut libc::fd_set,
    write: *mut libc::fd_set,
    except: *mut libc::fd_set,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    call!(
        PSELECT,
        -1,
        extern "C-unwind" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *const libc::timespec,
            *const libc::sigset_t,
        ) -> c_int,
        n,
        read,
        write,
        except,
        timeout,
        mask
    )
}

/// The real `epoll_pwait`.
pub fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    call!(
        EPOLL_PWAIT,
        -1,
        extern "C-unwind" fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int,
        epfd,
        events,
        max,
        timeout,
        mask
    )
}

/// The real `sigqueue`.
pub fn sigqueue(pid: libc::pid_t, sig: c_int, value: libc::sigval) -> c_int {
    call!(SIGQUEUE, -1, fn(libc::pid_t, c_int, libc::sigval) -> c_int, pid, sig, value)
}

/// The real `pthread_sigqueue`.
pub fn pthread_sigqueue(thread: libc::pthread_t, sig: c_int, value: libc::sigval) -> c_int {
    call!(PTHREAD_SIGQUEUE, libc::ENOSYS, fn(libc::pthread_t, c_int, libc::sigval) -> c_int, thread, sig, value)
}

pub fn pthread_kill(thread: libc::pthread_t, sig: c_int) -> c_int {
    call!(PTHREAD_KILL, libc::ENOSYS, fn(libc::pthread_t, c_int) -> c_int, thread, sig)
}

/// glibc's `clone` wrapper (variadic in C: its last three arguments are read only when `flags` asks for
/// them, and are passed on as the program gave them).
#[allow(clippy::too_many_arguments)]
pub fn clone(
    start: Option<CloneFn>,
    stack: *mut c_void,
    flags: c_int,
    arg: *mut c_void,
    parent_tid: *mut libc::pid_t,
    tls: *mut c_void,
    child_tid: *mut libc::pid_t,
) -> c_int {
    call!(
        CLONE,
        -1,
        fn(Option<CloneFn>, *mut c_void, c_int, *mut c_void, *mut libc::pid_t, *mut c_void, *mut libc::pid_t) -> c_int,
        start,
        stack,
        flags,
        arg,
        parent_tid,
        tls,
        child_tid
    )
}

pub fn raise(sig: c_int) -> c_int {
    call!(RAISE, -1, fn(c_int) -> c_int, sig)
}

pub fn tgkill(tgid: libc::pid_t, tid: libc::pid_t, sig: c_int) -> c_int {
    call!(TGKILL, -1, fn(libc::pid_t, libc::pid_t, c_int) -> c_int, tgid, tid, sig)
}

pub fn dup(fd: c_int) -> c_int {
    call!(DUP, -1, fn(c_int) -> c_int, fd)
}

/// The real `fcntl` (`fcntl64` when `large`), with its one optional argument word.
pub fn fcntl(large: bool, fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    call!(if large { &FCNTL64 } else { &FCNTL }, -1, fn(c_int, c_int, c_ulong) -> c_int, fd, cmd, arg)
}

/// The real `ioctl`, with its one optional argument word.
pub fn ioctl(fd: c_int, request: c_ulong, arg: usize) -> c_int {
    call!(IOCTL, -1, fn(c_int, c_ulong, usize) -> c_int, fd, request, arg)
}

/// The real `dup2`.
pub fn dup2(old: c_int, new: c_int) -> c_int {
    call!(DUP2, -1, fn(c_int, c_int) -> c_int, old, new)
}

/// The real `dup3`.
pub fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    call!(DUP3, -1, fn(c_int, c_int, c_int) -> c_int, old, new, flags)
}

/// The real `prctl` (all five argument words).
pub fn prctl(option: c_int, a2: c_ulong, a3: c_ulong, a4: c_ulong, a5: c_ulong) -> c_int {
    call!(PRCTL, -1, fn(c_int, c_ulong, c_ulong, c_ulong, c_ulong) -> c_int, option, a2, a3, a4, a5)
}

/// The real `syscall` (all six argument words; on x86-64 a variadic call passes them in the same
/// registers as a fixed one).
pub fn syscall(number: c_long, args: [c_long; 6]) -> c_long {
    let [a, b, c, d, e, f] = args;
    call!(SYSCALL, -1, fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long, number, a, b, c, d, e, f)
}

/// The real `dlclose`.
pub fn dlclose(handle: *mut c_void) -> c_int {
    call!(DLCLOSE, -1, fn(*mut c_void) -> c_int, handle)
}

/// The address of the real `__libc_start_main` (glibc's entry from `_start`); 0 when not found.
pub fn libc_start_main_address() -> usize {
    LIBC_START_MAIN.get()
}

/// The address of the real `exit` (atexit handlers, destructors, stdio flushed); 0 when not found.
pub fn exit_address() -> usize {
    EXIT.get()
}

/// The real `setrlimit`.
pub fn setrlimit(resource: c_int, limit: *const libc::rlimit) -> c_int {
    call!(SETRLIMIT, -1, fn(c_int, *const libc::rlimit) -> c_int, resource, limit)
}

/// The real `mlockall`.
pub fn mlockall(flags: c_int) -> c_int {
    call!(MLOCKALL, -1, fn(c_int) -> c_int, flags)
}

/// The real `munlockall`.
pub fn munlockall() -> c_int {
    call!(MUNLOCKALL, -1, fn() -> c_int,)
}

/// The real `setuid`.
pub fn setuid(uid: libc::uid_t) -> c_int {
    call!(SETUID, -1, fn(libc::uid_t) -> c_int, uid)
}

/// The real `setgid`.
pub fn setgid(gid: libc::gid_t) -> c_int {
    call!(SETGID, -1, fn(libc::gid_t) -> c_int, gid)
}

/// The real `seteuid`.
pub fn seteuid(uid: libc::uid_t) -> c_int {
    call!(SETEUID, -1, fn(libc::uid_t) -> c_int, uid)
}

/// The real `setegid`.
pub fn setegid(gid: libc::gid_t) -> c_int {
    call!(SETEGID, -1, fn(libc::gid_t) -> c_int, gid)
}

/// The real `setreuid`.
pub fn setreuid(ruid: libc::uid_t, euid: libc::uid_t) -> c_int {
    call!(SETREUID, -1, fn(libc::uid_t, libc::uid_t) -> c_int, ruid, euid)
}

/// The real `setregid`.
pub fn setregid(rgid: libc::gid_t, egid: libc::gid_t) -> c_int {
    call!(SETREGID, -1, fn(libc::gid_t, libc::gid_t) -> c_int, rgid, egid)
}

/// The real `setresuid`.
pub fn setresuid(ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t) -> c_int {
    call!(SETRESUID, -1, fn(libc::uid_t, libc::uid_t, libc::uid_t) -> c_int, ruid, euid, suid)
}

/// The real `setresgid`.
pub fn setresgid(rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t) -> c_int {
    call!(SETRESGID, -1, fn(libc::gid_t, libc::gid_t, libc::gid_t) -> c_int, rgid, egid, sgid)
}

/// The real `setgroups`.
pub fn setgroups(size: libc::size_t, groups: *const libc::gid_t) -> c_int {
    call!(SETGROUPS, -1, fn(libc::size_t, *const libc::gid_t) -> c_int, size, groups)
}

/// The real `initgroups`.
pub fn initgroups(user: *const c_char, group: libc::gid_t) -> c_int {
    call!(INITGROUPS, -1, fn(*const c_char, libc::gid_t) -> c_int, user, group)
}

/// The real `unshare`.
pub fn unshare(flags: c_int) -> c_int {
    call!(UNSHARE, -1, fn(c_int) -> c_int, flags)
}

/// The real `setns`.
pub fn setns(fd: c_int, nstype: c_int) -> c_int {
    call!(SETNS, -1, fn(c_int, c_int) -> c_int, fd, nstype)
}

/// The real `prlimit`.
pub fn prlimit(pid: libc::pid_t, resource: c_int, new: *const libc::rlimit, old: *mut libc::rlimit) -> c_int {
    call!(PRLIMIT, -1, fn(libc::pid_t, c_int, *const libc::rlimit, *mut libc::rlimit) -> c_int, pid, resource, new, old)
}

type Argv = *const *const libc::c_char;

/// The real `execve`.
pub fn execve(path: *const libc::c_char, argv: Argv, envp: Argv) -> c_int {
    call!(EXECVE, -1, fn(*const libc::c_char, Argv, Argv) -> c_int, path, argv, envp)
}

/// The real `execv`.
pub fn execv(path: *const libc::c_char, argv: Argv) -> c_int {
    call!(EXECV, -1, fn(*const libc::c_char, Argv) -> c_int, path, argv)
}

/// The real `execvp`.
pub fn execvp(file: *const libc::c_char, argv: Argv) -> c_int {
    call!(EXECVP, -1, fn(*const libc::c_char, Argv) -> c_int, file, argv)
}

/// The real `execvpe`.
pub fn execvpe(file: *const libc::c_char, argv: Argv, envp: Argv) -> c_int {
    call!(EXECVPE, -1, fn(*const libc::c_char, Argv, Argv) -> c_int, file, argv, envp)
}

/// The real `fexecve`.
pub fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    call!(FEXECVE, -1, fn(c_int, Argv, Argv) -> c_int, fd, argv, envp)
}

/// `posix_spawn`'s and `posix_spawnp`'s signature (a path or a file name to look up).
pub type SpawnFn = fn(
    *mut libc::pid_t,
    *const libc::c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    Argv,
    Argv,
) -> c_int;

/// The real `posix_spawn`.
pub fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> c_int {
    spawn(&POSIX_SPAWN, pid, path, actions, attr, argv, envp)
}

/// The real `posix_spawnp`.
pub fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> c_int {
    spawn(&POSIX_SPAWNP, pid, file, actions, attr, argv, envp)
}

fn spawn(
    real: &Real,
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: Argv,
    envp: Argv,
) -> c_int {
    call!(
        real,
        libc::ENOSYS,
        fn(
            *mut libc::pid_t,
            *const libc::c_char,
            *const libc::posix_spawn_file_actions_t,
            *const libc::posix_spawnattr_t,
            Argv,
            Argv,
        ) -> c_int,
        pid,
        path,
        actions,
        attr,
        argv,
        envp,
    )
}

/// The real `system`.
pub fn system(command: *const libc::c_char) -> c_int {
    call!(SYSTEM, -1, fn(*const libc::c_char) -> c_int, command)
}

/// The real `popen`.
pub fn popen(command: *const libc::c_char, mode: *const libc::c_char) -> *mut libc::FILE {
    call!(POPEN, std::ptr::null_mut(), fn(*const libc::c_char, *const libc::c_char) -> *mut libc::FILE, command, mode)
}

/// The real `swapcontext`.
pub fn swapcontext(old: *mut libc::ucontext_t, new: *const libc::ucontext_t) -> c_int {
    call!(SWAPCONTEXT, -1, fn(*mut libc::ucontext_t, *const libc::ucontext_t) -> c_int, old, new)
}

/// The real `setcontext`.
pub fn setcontext(new: *const libc::ucontext_t) -> c_int {
    call!(SETCONTEXT, -1, fn(*const libc::ucontext_t) -> c_int, new)
}

/// The C library's jumps out of the current context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jump {
    Longjmp,
    UnderscoreLongjmp,
    Siglongjmp,
    LongjmpChk,
}

/// The address of the C library's `__sigsetjmp` (`sigsetjmp`), which racewatch's entry jumps to with
/// the caller's stack as it was; 0 when there is none.
pub fn sigsetjmp_addr() -> usize {
    SIGSETJMP.get()
}

/// The real `longjmp`, `_longjmp`, `siglongjmp` or `__longjmp_chk` (never returns; a missing one
/// aborts, as a jump that cannot be made must not return to its caller).
pub fn jump(which: Jump, env: *mut c_void, val: c_int) -> ! {
    let real = match which {
        Jump::Longjmp => &LONGJMP,
        Jump::UnderscoreLongjmp => &UNDERSCORE_LONGJMP,
        Jump::Siglongjmp => &SIGLONGJMP,
        Jump::LongjmpChk => &LONGJMP_CHK,
    };
    let addr = real.get();
    if addr == 0 {
        std::process::abort();
    }
    // SAFETY: `addr` is the C library's definition of this jump, `void (jmp_buf, int)`, noreturn;
    // the arguments are the program's.
    let f: unsafe extern "C" fn(*mut c_void, c_int) -> ! = unsafe { std::mem::transmute(addr) };
    unsafe { f(env, val) }
}

/// The real `open` (`open64` when `large`); `mode` is passed on whatever the flags (the callee reads it
/// only with `O_CREAT` or `O_TMPFILE`, as a variadic argument in the same register).
pub fn open(large: bool, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let real = if large { &OPEN64 } else { &OPEN };
    call!(real, -1, fn(*const c_char, c_int, c_uint) -> c_int, path, flags, mode)
}

/// The real `openat` (`openat64` when `large`).
pub fn openat(large: bool, dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let real = if large { &OPENAT64 } else { &OPENAT };
    call!(real, -1, fn(c_int, *const c_char, c_int, c_uint) -> c_int, dir, path, flags, mode)
}

/// The real `fopen` (`fopen64` when `large`).
pub fn fopen(large: bool, path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    let real = if large { &FOPEN64 } else { &FOPEN };
    call!(real, std::ptr::null_mut(), fn(*const c_char, *const c_char) -> *mut libc::FILE, path, mode)
}

/// The real `socket`.
pub fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    call!(SOCKET, -1, fn(c_int, c_int, c_int) -> c_int, domain, kind, protocol)
}

/// The real `socketpair`.
pub fn socketpair(domain: c_int, kind: c_int, protocol: c_int, fds: *mut c_int) -> c_int {
    call!(SOCKETPAIR, -1, fn(c_int, c_int, c_int, *mut c_int) -> c_int, domain, kind, protocol, fds)
}

/// The real `accept4` (`accept`, without `flags`, unless `four`); a cancellation point.
pub fn accept4(four: bool, fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int {
    if four {
        call!(
            ACCEPT4,
            -1,
            extern "C-unwind" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int,
            fd,
            addr,
            len,
            flags
        )
    } else {
        call!(
            ACCEPT,
            -1,
            extern "C-unwind" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int,
            fd,
            addr,
            len
        )
    }
}

/// The real `pipe2` (`pipe`, without `flags`, unless `two`).
pub fn pipe2(two: bool, fds: *mut c_int, flags: c_int) -> c_int {
    if two {
        call!(PIPE2, -1, fn(*mut c_int, c_int) -> c_int, fds, flags)
    } else {
        call!(PIPE, -1, fn(*mut c_int) -> c_int, fds)
    }
}

/// The real `epoll_create1`.
pub fn epoll_create1(flags: c_int) -> c_int {
    call!(EPOLL_CREATE1, -1, fn(c_int) -> c_int, flags)
}

/// The real `eventfd`.
pub fn eventfd(initval: c_uint, flags: c_int) -> c_int {
    call!(EVENTFD, -1, fn(c_uint, c_int) -> c_int, initval, flags)
}

/// The real `opendir`.
pub fn opendir(path: *const c_char) -> *mut libc::DIR {
    call!(OPENDIR, std::ptr::null_mut(), fn(*const c_char) -> *mut libc::DIR, path)
}

/// The real `fdopendir`.
pub fn fdopendir(fd: c_int) -> *mut libc::DIR {
    call!(FDOPENDIR, std::ptr::null_mut(), fn(c_int) -> *mut libc::DIR, fd)
}

/// The real `readdir` (`readdir64` when `large`; the same layout on x86-64).
pub fn readdir(large: bool, dir: *mut libc::DIR) -> *mut libc::dirent64 {
    let real = if large { &READDIR64 } else { &READDIR };
    call!(real, std::ptr::null_mut(), fn(*mut libc::DIR) -> *mut libc::dirent64, dir)
}

/// The real `closedir`.
pub fn closedir(dir: *mut libc::DIR) -> c_int {
    call!(CLOSEDIR, -1, fn(*mut libc::DIR) -> c_int, dir)
}

/// `scandir`'s filter: whether an entry is kept.
pub type ScanFilter = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
/// `scandir`'s order: a `qsort` comparison of two entries.
pub type ScanOrder = Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;

/// The real `scandirat` (`scandirat64` when `large`; the same layout on x86-64), or `scandir`
/// (`scandir64`) when `dir` is `None`.
pub fn scandir(
    large: bool,
    dir: Option<c_int>,
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    filter: ScanFilter,
    order: ScanOrder,
) -> c_int {
    match dir {
        None => {
            let real = if large { &SCANDIR64 } else { &SCANDIR };
            call!(
                real,
                -1,
                fn(*const c_char, *mut *mut *mut libc::dirent64, ScanFilter, ScanOrder) -> c_int,
                path,
                list,
                filter,
                order
            )
        }
        Some(fd) => {
            let real = if large { &SCANDIRAT64 } else { &SCANDIRAT };
            call!(
                real,
                -1,
                fn(c_int, *const c_char, *mut *mut *mut libc::dirent64, ScanFilter, ScanOrder) -> c_int,
                fd,
                path,
                list,
                filter,
                order
            )
        }
    }
}

/// The real `munmap`.
pub fn munmap(addr: *mut c_void, len: usize) -> c_int {
    call!(MUNMAP, -1, fn(*mut c_void, usize) -> c_int, addr, len)
}
