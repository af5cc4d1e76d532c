//! The program's calls that look at descriptors by number, answered as if racewatch's own were free
//! numbers: `fstat`, `fstatat` and `statx` of one fail with `EBADF`, `poll` and `ppoll` mark it
//! `POLLNVAL`, `select` and `pselect` with one in a set fail with `EBADF`, `epoll_ctl` refuses it, a
//! `stat` of the process's own `/proc/<pid>/fd` directory counts only the program's descriptors in
//! `st_size` (the kernel gives the number of open descriptors there), and its entry for one of
//! racewatch's (`/proc/self/fd/<n>`, `fdinfo/<n>`) is not there for `readlink`, `stat` or `open`. With `close`, `fcntl` and the
//! listings of [`crate::proc_view`], a scan of every number by any of these finds the program's own.

use crate::proc_view::{self, Target};
use crate::sys::process::Jump;
use crate::sys::{fd, ptr, raw, real};
use crate::view_fds;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// A number no descriptor can have (above the kernel's largest table): `poll` marks it `POLLNVAL`.
const NO_DESCRIPTOR: c_int = c_int::MAX;

/// Fails the program's call with `errno` = `code` (-1).
fn failed(code: c_int) -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = code };
    -1
}

/// Interposed `fstat`: racewatch's descriptors are not there for the program, and a view of one of the
/// process's own files ([`view_fds`]) is that file.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    fstat_of(false, fd, buf)
}

/// Interposed `fstat64` (see [`fstat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    fstat_of(true, fd, buf)
}

fn fstat_of(large: bool, fd: c_int, buf: *mut libc::stat) -> c_int {
    if fd::is_own(fd) {
        return failed(libc::EBADF);
    }
    if let Some(file) = view_fds::stands_for(fd) {
        let which = if large { real::StatFn::Stat64 } else { real::StatFn::Stat };
        return real::stat(which, file.as_cstr().as_ptr(), buf);
    }
    real::fstat(large, fd, buf)
}

/// Interposed `fstatfs`: a view of one of the process's own files is on `/proc` ([`view_fds`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatfs(fd: c_int, buf: *mut libc::statfs) -> c_int {
    on_view_file(fd, |path| real::statfs(path, buf), || real::fstatfs(fd, buf))
}

/// Interposed `ioctl` (its optional third argument is one register wide, as every request's is):
/// racewatch's descriptors are not there for the program (`EBADF`), and a view of one of the process's
/// own files ([`view_fds`]) answers as that file. `FIONREAD` gives the file's size as the kernel keeps it
/// for `/proc` (0) less the position; the descriptor's own flags (`FIOCLEX`, `FIONCLEX`, `FIONBIO`,
/// `FIOASYNC`) change on the view itself; any other request goes to the file itself, opened for the call
/// (`FS_IOC_GETFLAGS`: `ENOTTY`, where the memory file behind the view answered with its flags).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn ioctl(fd: c_int, request: libc::c_ulong, arg: usize) -> c_int {
    if fd::is_own(fd) {
        return failed(libc::EBADF);
    }
    match view_fds::stands_for(fd) {
        Some(file) => view_ioctl(fd, file.as_cstr(), request, arg),
        None => real::ioctl(fd, request, arg),
    }
}

fn view_ioctl(fd: c_int, file: &std::ffi::CStr, request: libc::c_ulong, arg: usize) -> c_int {
    let answer = match request {
        libc::FIONREAD => {
            let at = raw::syscall6(libc::SYS_lseek, [fd as u64, 0, libc::SEEK_CUR as u64, 0, 0, 0]);
            match ptr::opt_mut(arg as *mut c_int) {
                _ if at < 0 => at,
                Some(count) => {
                    *count = at.wrapping_neg() as c_int;
                    0
                }
                None => -i64::from(libc::EFAULT),
            }
        }
        libc::FIOCLEX | libc::FIONCLEX | libc::FIONBIO | libc::FIOASYNC => return real::ioctl(fd, request, arg),
        _ => {
            let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
            let path = file.as_ptr() as u64;
            let own = raw::syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, path, flags, 0, 0, 0]);
            if own < 0 {
                own
            } else {
                let rc = raw::syscall6(libc::SYS_ioctl, [own as u64, request, arg as u64, 0, 0, 0]);
                raw::syscall6(libc::SYS_close, [own as u64, 0, 0, 0, 0, 0]);
                rc
            }
        }
    };
    if answer < 0 {
        return failed(-answer as c_int);
    }
    answer as c_int
}

/// `by_path` on the path of the file that view `fd` stands for ([`view_fds`]), else `by_fd`.
fn on_view_file(fd: c_int, by_path: impl FnOnce(*const c_char) -> c_int, by_fd: impl FnOnce() -> c_int) -> c_int {
    match view_fds::stands_for(fd) {
        Some(file) => by_path(file.as_cstr().as_ptr()),
        None => by_fd(),
    }
}

/// Interposed `fstatfs64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatfs64(fd: c_int, buf: *mut libc::statfs) -> c_int {
    fstatfs(fd, buf)
}

/// Interposed `fstatvfs` (glibc's calls its own `fstatfs`, not the interposed one): see [`fstatfs`].
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatvfs(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    on_view_file(fd, |path| real::statvfs(path, buf), || real::fstatvfs(fd, buf))
}

/// Interposed `fstatvfs64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs) -> c_int {
    fstatvfs(fd, buf)
}

// A view is a memory file where the program's descriptor stands for a `/proc` file, which the kernel
// makes as it is read: no end or data to seek to, no mapping, no seals, no `sendfile` out of it,
// nothing to sync. The calls that could tell the two apart get the file's answers.

/// Whether `fd` is one of the program's views ([`view_fds`]).
fn is_view(fd: c_int) -> bool {
    view_fds::lookup(fd).is_some()
}

/// Interposed `lseek`: a view of one of the process's own files gets the file's text of now, as the
/// kernel makes the file's text again at a seek ([`view_fds`]); it seeks from its start or where it is
/// only (`SEEK_END`, `SEEK_DATA`, `SEEK_HOLE`: `EINVAL`).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn lseek(fd: c_int, offset: libc::off_t, whence: c_int) -> libc::off_t {
    if whence != libc::SEEK_SET && whence != libc::SEEK_CUR && is_view(fd) {
        return failed(libc::EINVAL).into();
    }
    view_fds::refresh(fd);
    real::lseek(fd, offset, whence)
}

// Interposed `mmap` and `mmap64` (one function on x86-64): a view of one of the process's own files
// cannot be mapped (`ENODEV`), as the file cannot. Every other call jumps on with its caller's return
// address, so a library preloaded after racewatch that wraps `mmap` (a memory profiler) sees the
// program's calls as the program's; racewatch's own (its standard library's) go to libc's.
crate::sys::process::naked_jump!(mmap, "mmap", mmap_target);
crate::sys::process::naked_jump!(mmap64, "mmap64", mmap_target);

/// racewatch's own module: `[start, end)` (0, 0 until [`note_own_module`]).
static OWN_MODULE: [std::sync::atomic::AtomicU64; 2] = [const { std::sync::atomic::AtomicU64::new(0) }; 2];

/// Notes where racewatch's own module lies, for [`mmap_target`]. Call at start-up.
pub fn note_own_module() {
    let here = (note_own_module as fn()) as usize as u64;
    if let Some((start, end)) = crate::sys::dl::Loaded::range_containing(here) {
        OWN_MODULE[0].store(start, std::sync::atomic::Ordering::Release);
        OWN_MODULE[1].store(end, std::sync::atomic::Ordering::Release);
    }
}

/// Where `mmap(addr, _, _, flags, fd, _)` called from `caller` goes: on to the next definition (libc's own
/// for racewatch's calls), or nowhere (`MAP_FAILED`, errno set) for a view.
extern "C" fn mmap_target(addr: usize, _: usize, _: c_int, flags: c_int, fd: c_int, caller: u64) -> Jump {
    let failed_with = |code| {
        failed(code);
        Jump { first: libc::MAP_FAILED as usize, to: 0 }
    };
    if flags & libc::MAP_ANONYMOUS == 0 && is_view(fd) {
        return failed_with(libc::ENODEV);
    }
    let own = (OWN_MODULE[0].load(std::sync::atomic::Ordering::Acquire)
        ..OWN_MODULE[1].load(std::sync::atomic::Ordering::Acquire))
        .contains(&caller);
    match real::mmap_address(own) {
        0 => failed_with(libc::ENOSYS),
        next => Jump { first: addr, to: next },
    }
}

/// Interposed `fsync`: nothing to sync in a view (`EINVAL`, as for the file).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn fsync(fd: c_int) -> c_int {
    if is_view(fd) {
        return failed(libc::EINVAL);
    }
    real::fsync(fd)
}

/// Interposed `fdatasync` (see [`fsync`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn fdatasync(fd: c_int) -> c_int {
    if is_view(fd) {
        return failed(libc::EINVAL);
    }
    real::fdatasync(fd)
}

/// Interposed `sendfile`: a view is not copied out by the kernel (`EINVAL`, as for the file).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sendfile(out: c_int, input: c_int, offset: *mut libc::off_t, count: usize) -> isize {
    if is_view(input) {
        return failed(libc::EINVAL) as isize;
    }
    real::sendfile(out, input, offset, count)
}

/// Interposed `sendfile64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn sendfile64(out: c_int, input: c_int, offset: *mut libc::off_t, count: usize) -> isize {
    sendfile(out, input, offset, count)
}

/// Whether `fcntl` command `cmd` on view `fd` gets `EINVAL` from the kernel for the file itself: seals
/// are a memory file's.
pub fn refused_on_view(fd: c_int, cmd: c_int) -> bool {
    (cmd == libc::F_GET_SEALS || cmd == libc::F_ADD_SEALS) && is_view(fd)
}

/// Interposed `lseek64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn lseek64(fd: c_int, offset: libc::off_t, whence: c_int) -> libc::off_t {
    lseek(fd, offset, whence)
}

/// Interposed `pread` (see [`lseek`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pread(fd: c_int, buf: *mut c_void, len: usize, offset: libc::off_t) -> isize {
    view_fds::refresh(fd);
    real::pread(fd, buf, len, offset)
}

/// Interposed `pread64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn pread64(fd: c_int, buf: *mut c_void, len: usize, offset: libc::off_t) -> isize {
    pread(fd, buf, len, offset)
}

/// A stream's descriptor, when it is a view's: made again before the stream seeks (glibc's own
/// `lseek` is not the interposed one).
fn refresh_stream(file: *mut libc::FILE) {
    if let Some(fd) = ptr::fileno(file) {
        view_fds::refresh(fd);
    }
}

/// Interposed `fseek` (see [`refresh_stream`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fseek(file: *mut libc::FILE, offset: std::ffi::c_long, whence: c_int) -> c_int {
    refresh_stream(file);
    real::fseeko(file, offset, whence)
}

/// Interposed `fseeko` (see [`refresh_stream`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fseeko(file: *mut libc::FILE, offset: libc::off_t, whence: c_int) -> c_int {
    refresh_stream(file);
    real::fseeko(file, offset, whence)
}

/// Interposed `fseeko64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fseeko64(file: *mut libc::FILE, offset: libc::off_t, whence: c_int) -> c_int {
    fseeko(file, offset, whence)
}

/// Interposed `rewind` (see [`refresh_stream`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn rewind(file: *mut libc::FILE) {
    refresh_stream(file);
    real::rewind(file)
}

/// Interposed `fsetpos` (see [`refresh_stream`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fsetpos(file: *mut libc::FILE, pos: *const libc::fpos_t) -> c_int {
    refresh_stream(file);
    real::fsetpos(file, pos)
}

/// Interposed `fsetpos64` (the same function on x86-64).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fsetpos64(file: *mut libc::FILE, pos: *const libc::fpos_t) -> c_int {
    fsetpos(file, pos)
}

/// Whether a call names its descriptor itself (`AT_EMPTY_PATH` with an empty path).
fn empty_path(path: *const c_char, flags: c_int) -> bool {
    flags & libc::AT_EMPTY_PATH != 0 && ptr::opt_cstr(path).is_some_and(|p| p.is_empty())
}

/// Whether a call relative to directory `dir` with `path` names racewatch's descriptor itself, or a path
/// under it (the kernel looks the descriptor up for every path that is not absolute).
fn through_own(dir: c_int, path: *const c_char) -> bool {
    fd::is_own(dir) && !ptr::cstr_starts_with(path, b"/")
}

/// Interposed `fstatat` (see [`fstat`] and [`stat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatat(dir: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    if through_own(dir, path) {
        return failed(libc::EBADF);
    }
    if empty_path(path, flags) && view_fds::lookup(dir).is_some() {
        return fstat_of(false, dir, buf);
    }
    through_view_link(path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, |path| {
        by_path(path, buf, || real::fstatat(false, dir, path, buf, flags))
    })
}

/// Interposed `fstatat64` (see [`fstatat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatat64(dir: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    if through_own(dir, path) {
        return failed(libc::EBADF);
    }
    if empty_path(path, flags) && view_fds::lookup(dir).is_some() {
        return fstat_of(true, dir, buf);
    }
    through_view_link(path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, |path| {
        by_path(path, buf, || real::fstatat(true, dir, path, buf, flags))
    })
}

/// Interposed `stat`: the process's own `fd` directory counts the program's descriptors only, its `task`
/// directory the program's threads; a view's `/proc/self/fd/<n>` link leads to the file it stands for.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    through_view_link(path, true, |path| by_path(path, buf, || real::stat(real::StatFn::Stat, path, buf)))
}

/// Interposed `stat64` (see [`stat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    through_view_link(path, true, |path| by_path(path, buf, || real::stat(real::StatFn::Stat64, path, buf)))
}

/// Interposed `lstat` (see [`stat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    by_path(path, buf, || real::stat(real::StatFn::Lstat, path, buf))
}

/// Interposed `lstat64` (see [`stat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    by_path(path, buf, || real::stat(real::StatFn::Lstat64, path, buf))
}

/// Interposed `statx` (see [`fstat`] and [`stat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn statx(dir: c_int, path: *const c_char, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int {
    if through_own(dir, path) {
        return failed(libc::EBADF);
    }
    if names_own_descriptor(path) {
        return failed(libc::ENOENT);
    }
    if let (true, Some(file)) = (empty_path(path, flags), view_fds::stands_for(dir)) {
        // A view's `statx` by its descriptor: the file it stands for's.
        return real::statx(libc::AT_FDCWD, file.as_cstr().as_ptr(), flags & !libc::AT_EMPTY_PATH, mask, buf);
    }
    through_view_link(path, flags & libc::AT_SYMLINK_NOFOLLOW == 0, |path| {
        let rc = real::statx(dir, path, flags, mask, buf);
        if let (0, Some((entries, threads)), Some(buf)) = (rc, hidden_in(path), ptr::opt_mut(buf)) {
            buf.stx_size = buf.stx_size.saturating_sub(entries);
            buf.stx_nlink = buf.stx_nlink.saturating_sub(threads as u32);
        }
        rc
    })
}

/// Whether `path` is `/proc/self/fd/<n>` (or `fdinfo`, of any name for the process) for one of
/// racewatch's descriptors (no system call for a path outside `/proc`).
pub fn names_own_descriptor(path: *const c_char) -> bool {
    if !ptr::cstr_starts_with(path, proc_view::PREFIX) || fd::own_count() == 0 {
        return false;
    }
    ptr::opt_cstr(path).is_some_and(|path| proc_view::names_own_descriptor(path.to_bytes()))
}

/// Interposed `readlink`: `/proc/self/fd/<n>` of one of racewatch's descriptors is not there (a probe of
/// every number by its link reads the program's own).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn readlink(path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    if names_own_descriptor(path) {
        return failed(libc::ENOENT) as isize;
    }
    if let Some(n) = view_link(path, buf, len) {
        return n;
    }
    real::readlink(path, buf, len)
}

/// `readlink` of `/proc/self/fd/<n>` for a view of one of the process's own files ([`view_fds`]): the
/// file's name, as the kernel gives it for the file itself; `None` for any other path.
fn view_link(path: *const c_char, buf: *mut c_char, len: usize) -> Option<isize> {
    let file = view_named(path)?;
    let name = file.as_cstr().to_bytes();
    let n = name.len().min(len);
    // SAFETY: `buf` is the caller's buffer of `len` bytes; `n` is at most that.
    unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), buf as *mut u8, n) };
    Some(n as isize)
}

/// The file a view stands for when `path` is its `/proc/self/fd/<n>` (or `/dev/fd/<n>`) link
/// ([`view_fds`]); `None` for any other path (no system call for a path outside `/proc`).
fn view_named(path: *const c_char) -> Option<view_fds::FileName> {
    if !view_fds::any() {
        return None;
    }
    if ptr::cstr_starts_with(path, b"/dev/fd/") {
        // `/dev/fd` is a link to `/proc/self/fd`.
        let number = ptr::opt_cstr(path)?.to_bytes().strip_prefix(b"/dev/fd/")?;
        return view_fds::stands_for(proc_view::number(number)?);
    }
    if !ptr::cstr_starts_with(path, proc_view::PREFIX) {
        return None;
    }
    let path = ptr::opt_cstr(path)?.to_bytes();
    let slash = path.iter().rposition(|&b| b == b'/')?;
    let fd = proc_view::number(&path[slash + 1..])?;
    let dir = proc_view::classify(&path[..slash], raw::getpid(), raw::gettid(), raw::thread_alive);
    view_fds::stands_for(fd).filter(|_| dir == Some(Target::FdDir))
}

/// `call` on `path`, or, when `path` is a view's link and the call follows links (`follows`), on the
/// file the view stands for.
fn through_view_link(path: *const c_char, follows: bool, call: impl FnOnce(*const c_char) -> c_int) -> c_int {
    let file = if follows { view_named(path) } else { None };
    call(file.as_ref().map_or(path, |file| file.as_cstr().as_ptr()))
}

/// Interposed `readlinkat` (see [`readlink`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn readlinkat(dir: c_int, path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    if names_own_descriptor(path) {
        return failed(libc::ENOENT) as isize;
    }
    if let Some(n) = view_link(path, buf, len) {
        return n;
    }
    real::readlinkat(dir, path, buf, len)
}

/// A `stat` of `path` into `buf` made by `call`: racewatch's own entries in `/proc/self/fd` are not
/// there, and the `fd` and `task` directories count the program's ([`with_fd_count`]).
fn by_path(path: *const c_char, buf: *mut libc::stat, call: impl FnOnce() -> c_int) -> c_int {
    if names_own_descriptor(path) {
        return failed(libc::ENOENT);
    }
    with_fd_count(path, call(), buf)
}

/// After a successful `stat` of `path` into `buf` (`rc` 0): the process's own `fd` directory's size
/// without racewatch's descriptors, its `task` directory's link count without racewatch's thread.
fn with_fd_count(path: *const c_char, rc: c_int, buf: *mut libc::stat) -> c_int {
    if let (0, Some((entries, threads)), Some(buf)) = (rc, hidden_in(path), ptr::opt_mut(buf)) {
        buf.st_size = buf.st_size.saturating_sub(entries as i64).max(0);
        buf.st_nlink = buf.st_nlink.saturating_sub(threads);
    }
    rc
}

/// For the process's own `fd` directory (whose size the kernel gives as the number of open descriptors)
/// and `task` directory (whose link count is its threads + 2): racewatch's descriptors and threads
/// counted there. `None` for any other path (no system call for a path outside `/proc`).
fn hidden_in(path: *const c_char) -> Option<(u64, u64)> {
    if !ptr::cstr_starts_with(path, proc_view::PREFIX) {
        return None;
    }
    let path = ptr::opt_cstr(path)?;
    match proc_view::classify(path.to_bytes(), raw::getpid(), raw::gettid(), raw::thread_alive)? {
        Target::FdDir => Some((fd::own_count() as u64, 0)),
        Target::TaskDir => Some((0, u64::from(crate::reporter::kernel_count().unwrap_or(0)))),
        _ => None,
    }
}

/// Interposed `poll`: racewatch's descriptors read as closed (`POLLNVAL`), as free numbers do.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    with_own_closed(fds, n, || real::poll(fds, n, timeout))
}

/// Interposed `__poll_chk` (`poll` under `_FORTIFY_SOURCE`): [`poll`] once the array fits its buffer;
/// the C library's own check fails the call otherwise.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn __poll_chk(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int, len: usize) -> c_int {
    if fits(n, len) {
        poll(fds, n, timeout)
    } else {
        real::poll_chk(fds, n, timeout, len)
    }
}

/// Interposed `__ppoll_chk` (`ppoll` under `_FORTIFY_SOURCE`; see [`__poll_chk`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn __ppoll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
    len: usize,
) -> c_int {
    if fits(n, len) {
        crate::intercept::ppoll(fds, n, timeout, mask)
    } else {
        real::ppoll_chk(fds, n, timeout, mask, len)
    }
}

fn fits(n: libc::nfds_t, len: usize) -> bool {
    (n as usize).checked_mul(std::mem::size_of::<libc::pollfd>()).is_some_and(|need| need <= len)
}

/// Runs a `poll` of the `n` entries at `fds` with racewatch's descriptors there replaced by a number no
/// descriptor has (`POLLNVAL`, as a free number), and puts them back after.
pub(crate) fn with_own_closed(fds: *mut libc::pollfd, n: libc::nfds_t, poll: impl FnOnce() -> c_int) -> c_int {
    let own = fd::own_numbers();
    let Some(lowest) = own.iter().flatten().min().copied().filter(|_| !fds.is_null()) else { return poll() };
    // SAFETY: `fds` is the caller's array of `n` entries, which `poll` reads and writes.
    let entries = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    let mut replaced = [usize::MAX; 8];
    let mut count = 0;
    for (i, entry) in entries.iter_mut().enumerate() {
        // One comparison for each of the program's (racewatch's sit above them).
        if count < replaced.len() && entry.fd >= lowest && own.contains(&Some(entry.fd)) {
            replaced[count] = i;
            count += 1;
        }
    }
    if count == 0 {
        return poll();
    }
    let numbers: [c_int; 8] = std::array::from_fn(|k| if k < count { entries[replaced[k]].fd } else { -1 });
    for &i in &replaced[..count] {
        entries[i].fd = NO_DESCRIPTOR;
    }
    let rc = poll();
    for (k, &i) in replaced[..count].iter().enumerate() {
        entries[i].fd = numbers[k];
    }
    rc
}

/// Whether any of racewatch's descriptors is in one of the `select` sets (of `n` numbers).
pub(crate) fn sets_hold_own(n: c_int, sets: [*mut libc::fd_set; 3]) -> bool {
    if fd::own_count() == 0 {
        return false;
    }
    let numbers = 0..n.min(libc::FD_SETSIZE as c_int);
    sets.into_iter().filter_map(|set| ptr::opt_ref(set.cast_const())).any(|set| {
        fd::own_numbers().into_iter().flatten().filter(|own| numbers.contains(own)).any(|own| {
            // SAFETY: `set` is the caller's live fd_set and `own` is below FD_SETSIZE.
            unsafe { libc::FD_ISSET(own, set) }
        })
    })
}

/// Interposed `select`: one of racewatch's descriptors in a set fails the call with `EBADF`, as a free
/// number does.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C-unwind" fn select(
    n: c_int,
    read: *mut libc::fd_set,
    write: *mut libc::fd_set,
    except: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    if sets_hold_own(n, [read, write, except]) {
        return failed(libc::EBADF);
    }
    real::select(n, read, write, except, timeout)
}

/// Interposed `epoll_ctl`: racewatch's descriptors are not there to add, change or remove.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
    if fd::is_own(epfd) || fd::is_own(fd) {
        return failed(libc::EBADF);
    }
    real::epoll_ctl(epfd, op, fd, event)
}
