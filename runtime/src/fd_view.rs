//! The program's calls that look at descriptors by number, answered as if racewatch's own were free
//! numbers: `fstat`, `fstatat` and `statx` of one fail with `EBADF`, `poll` and `ppoll` mark it
//! `POLLNVAL`, `select` and `pselect` with one in a set fail with `EBADF`, `epoll_ctl` refuses it, a
//! `stat` of the process's own `/proc/<pid>/fd` directory counts only the program's descriptors in
//! `st_size` (the kernel gives the number of open descriptors there), and its entry for one of
//! racewatch's (`/proc/self/fd/<n>`, `fdinfo/<n>`) is not there for `readlink`, `stat` or `open`. With `close`, `fcntl` and the
//! listings of [`crate::proc_view`], a scan of every number by any of these finds the program's own.

use crate::proc_view::{self, Target};
use crate::sys::{fd, ptr, raw, real};
use std::ffi::{c_char, c_int, c_uint};

/// A number no descriptor can have (above the kernel's largest table): `poll` marks it `POLLNVAL`.
const NO_DESCRIPTOR: c_int = c_int::MAX;

/// Fails the program's call with `errno` = `code` (-1).
fn failed(code: c_int) -> c_int {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = code };
    -1
}

/// Interposed `fstat`: racewatch's descriptors are not there for the program.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fd::is_own(fd) {
        return failed(libc::EBADF);
    }
    real::fstat(false, fd, buf)
}

/// Interposed `fstat64` (see [`fstat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fd::is_own(fd) {
        return failed(libc::EBADF);
    }
    real::fstat(true, fd, buf)
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
    by_path(path, buf, || real::fstatat(false, dir, path, buf, flags))
}

/// Interposed `fstatat64` (see [`fstatat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn fstatat64(dir: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
    if through_own(dir, path) {
        return failed(libc::EBADF);
    }
    by_path(path, buf, || real::fstatat(true, dir, path, buf, flags))
}

/// Interposed `stat`: the process's own `fd` directory counts the program's descriptors only, its `task`
/// directory the program's threads.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    by_path(path, buf, || real::stat(real::StatFn::Stat, path, buf))
}

/// Interposed `stat64` (see [`stat`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    by_path(path, buf, || real::stat(real::StatFn::Stat64, path, buf))
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
    let rc = real::statx(dir, path, flags, mask, buf);
    if let (0, Some((entries, threads)), Some(buf)) = (rc, hidden_in(path), ptr::opt_mut(buf)) {
        buf.stx_size = buf.stx_size.saturating_sub(entries);
        buf.stx_nlink = buf.stx_nlink.saturating_sub(threads as u32);
    }
    rc
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
    real::readlink(path, buf, len)
}

/// Interposed `readlinkat` (see [`readlink`]).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn readlinkat(dir: c_int, path: *const c_char, buf: *mut c_char, len: usize) -> isize {
    if names_own_descriptor(path) {
        return failed(libc::ENOENT) as isize;
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
