//! File descriptors: the runtime's own (kept above the program's, hidden from its `close`,
//! `fcntl` and `dup` calls, moved out of the way of its `dup2`), and raw output that never raises
//! `SIGPIPE` in the program and never blocks for long.

use crate::sys::real;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// How many descriptors the runtime may hold at once (sampler + 4 watchpoints, with room).
const MAX_OWN: usize = 8;
static OWN: [AtomicI32; MAX_OWN] = [const { AtomicI32::new(-1) }; MAX_OWN];

/// Below this soft `RLIMIT_NOFILE` the runtime takes no descriptor the program could have had.
const SMALL_LIMIT: u64 = 4096;
/// With a large limit and no room above it, descriptors go this far below the limit (or 64 Ki).
const HIGH_CEILING: u64 = 1 << 16;

/// The lowest number the runtime's long-lived descriptors may take (besides the soft limit): the
/// soft `RLIMIT_NOFILE` the program is about to set (see [`set_floor`]).
static FLOOR: AtomicU64 = AtomicU64::new(0);

/// The program is about to set its soft `RLIMIT_NOFILE` to `soft`: descriptors placed from now on go
/// at or above it too.
pub fn set_floor(soft: u64) {
    FLOOR.store(soft, Ordering::Release);
}

/// Moves `fd` (a fresh close-on-exec descriptor of ours) out of the program's way and records it as ours.
///
/// Preferred: just above the soft `RLIMIT_NOFILE` (raised for the `F_DUPFD` and restored at once, the
/// hard limit too when it leaves no room and the process may raise it), where the program's own `open`s
/// can never land and `getdtablesize()` loops never reach, so the program can open exactly as many
/// descriptors as without racewatch. When that is not possible and the limit is small, the descriptor is
/// refused ([`NoRoom`] says why): the caller runs without detection. With a large limit it goes high
/// below it. Call while no other thread changes the limit (the first `pthread_create`, or the
/// program's own `setrlimit` before its threads start).
pub fn keep_high(fd: i32) -> std::io::Result<Kept> {
    if TABLE_BEFORE.load(Ordering::Acquire) == 0 {
        note_table_before();
    }
    let moved = relocate(fd);
    real::close(fd);
    let moved = moved?;
    let Some(slot) =
        OWN.iter().position(|slot| slot.compare_exchange(-1, moved, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        real::close(moved);
        return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
    };
    Ok(Kept(slot))
}

// ---- The size of the program's descriptor table ----
//
// The kernel's table grows to the next power of two above the highest number ever used (at least 64)
// and never shrinks; `/proc/self/status` shows its size as `FDSize`. racewatch's descriptors, high up,
// grow it (256 to 2,048 above a soft limit of 1,024): the program's view of its own status says what
// the size would be without them, from the size before racewatch's first and the highest number the
// program has used since.

/// `FDSize` just before racewatch placed its first descriptor (0: it never did).
static TABLE_BEFORE: AtomicU64 = AtomicU64::new(0);
/// The highest descriptor number the program's calls made since (-1: none).
static HIGHEST_MADE: AtomicI32 = AtomicI32::new(-1);

fn note_table_before() {
    let mut size = 0;
    crate::sys::raw::for_each_line(c"/proc/self/status", &mut |line| match line.strip_prefix(b"FDSize:") {
        Some(rest) => {
            size = std::str::from_utf8(rest).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
            false
        }
        None => true,
    });
    let _ = TABLE_BEFORE.compare_exchange(0, size, Ordering::AcqRel, Ordering::Acquire);
}

/// The program's call made descriptor `fd` (negative: none).
pub fn note_made(fd: i32) {
    if fd >= 0 && TABLE_BEFORE.load(Ordering::Relaxed) != 0 {
        HIGHEST_MADE.fetch_max(fd, Ordering::AcqRel);
    }
}

/// The size the kernel gives a table that holds descriptor `highest`.
pub fn table_size_for(highest: i32) -> u64 {
    match u64::try_from(highest) {
        Ok(n) if n >= 64 => (n + 1).next_power_of_two(),
        _ => 64,
    }
}

/// `FDSize` as without racewatch, for a table whose highest open descriptor of the program's is
/// `highest_open`; `None` when racewatch never grew it.
pub fn program_table_size(highest_open: i32) -> Option<u64> {
    let before = TABLE_BEFORE.load(Ordering::Acquire);
    (before != 0).then(|| before.max(table_size_for(HIGHEST_MADE.load(Ordering::Acquire).max(highest_open))))
}

/// Whether racewatch ever put a descriptor in the table (its size may show it).
pub fn table_grown() -> bool {
    TABLE_BEFORE.load(Ordering::Acquire) != 0
}

/// The highest descriptor open in the process's table that is not racewatch's (-1: none, or the
/// listing could not be read): raw calls, a buffer on the stack.
pub fn highest_open_of_program() -> i32 {
    let flags = (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    let path = c"/proc/self/fd";
    let raw = crate::sys::raw::syscall6;
    let dir = raw(libc::SYS_openat, [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0, 0, 0]);
    if dir < 0 {
        return -1;
    }
    let mut highest = -1;
    let mut buf = [0u8; 4096];
    loop {
        let n = raw(libc::SYS_getdents64, [dir as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]);
        let Ok(n) = usize::try_from(n) else { break };
        if n == 0 {
            break;
        }
        let mut at = 0;
        while let Some(Ok((len, name))) = crate::proc_view::dirent_at(&buf[..n], at) {
            if let Some(fd) = crate::proc_view::number(name).filter(|&fd| i64::from(fd) != dir && !is_own(fd)) {
                highest = highest.max(fd);
            }
            at += len;
        }
    }
    raw(libc::SYS_close, [dir as u64, 0, 0, 0, 0, 0]);
    highest
}

/// The size of the descriptor table a new image started now (an `exec` after a fork, a spawn) would
/// have without racewatch's descriptors: a copy sized for this process's highest descriptor, at least
/// 64. `None` when racewatch never grew the table. Raw calls.
pub fn child_table_size() -> Option<u64> {
    table_grown().then(|| table_size_for(highest_open_of_program()))
}

/// In a new image, before `main`: the table it started with would have had `size` entries without the
/// racewatch of the process that started it (0: not known).
pub fn note_inherited_table(size: u64) {
    if size >= 64 {
        let _ = TABLE_BEFORE.compare_exchange(0, size, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// In a forked child: its table was made for the parent's highest descriptor, racewatch's too; without
/// them it would fit the program's (at least 64).
pub fn note_fork_table() {
    if table_grown() {
        TABLE_BEFORE.store(64, Ordering::Release);
        HIGHEST_MADE.store(-1, Ordering::Release);
    }
}

/// One of the runtime's kept descriptors, named by the slot that records its number: the number can
/// change (the program's `dup2` onto it moves it, [`move_out_of_the_way`]), the slot does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept(usize);

impl Kept {
    /// The slot, to store in an atomic (see [`Kept::from_key`]).
    pub fn key(self) -> i32 {
        self.0 as i32
    }

    /// The descriptor a [`Kept::key`] names (`None` for a negative key: none).
    pub fn from_key(key: i32) -> Option<Kept> {
        usize::try_from(key).ok().filter(|&slot| slot < MAX_OWN).map(Kept)
    }

    /// Its number now; -1 once forgotten (closed, or the detector stepped aside). Lock-free.
    pub fn number(self) -> i32 {
        OWN[self.0].load(Ordering::Acquire)
    }

    /// Forgets the descriptor and closes it, in the reporter's own table too (waiting for that about
    /// `wait_ms` at most): a copy there would keep a perf event (and a debug register) alive.
    pub fn close(self, wait_ms: u64) {
        let fd = OWN[self.0].swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            close_everywhere(fd, wait_ms);
        }
    }
}

/// The program is about to put a descriptor of its own at `fd` (`dup2`, `dup3`), where one of the
/// runtime's is: that one moves to another free number first, with its slot, so that its perf event
/// lives on and the program's call does what it would without racewatch. False when no number could
/// be had (the caller steps aside). Not in a `vfork` child (its table is its own copy).
pub fn move_out_of_the_way(fd: i32) -> bool {
    let Some(slot) = OWN.iter().find(|slot| fd >= 0 && slot.load(Ordering::Acquire) == fd) else { return true };
    let Some(moved) = place_lower(fd) else { return false };
    if slot.compare_exchange(fd, moved, Ordering::AcqRel, Ordering::Acquire).is_err() {
        real::close(moved);
        return true;
    }
    note_private_move(fd, moved);
    true
}

/// The slot and number of racewatch's lowest descriptor in `lowest..end`.
/// Whether one of racewatch's descriptors lies in `[lowest, end)` (no system call).
pub fn own_between(lowest: i32, end: i32) -> bool {
    lowest_own_in(lowest, end).is_some()
}

fn lowest_own_in(lowest: i32, end: i32) -> Option<(usize, i32)> {
    OWN.iter()
        .enumerate()
        .map(|(slot, fd)| (slot, fd.load(Ordering::Acquire)))
        .filter(|&(_, fd)| fd >= lowest.max(0) && fd < end)
        .min_by_key(|&(_, fd)| fd)
}

/// The program's call found no free number at or above `lowest` (`EMFILE`) where one of racewatch's
/// descriptors sits: the lowest such moves below `lowest`, to a free number (the program's call made
/// again gets its old one, as without racewatch). False when none is free there (the caller steps
/// aside).
pub fn make_room(lowest: i32) -> bool {
    let Ok((soft, _)) = nofile_limit() else { return false };
    let Some((slot, own)) = lowest_own_in(lowest, i32::try_from(soft).unwrap_or(i32::MAX)) else { return false };
    let Some(moved) = place_lower(own) else { return false };
    // Only a number below `lowest` leaves the program one more (a pipe that needs two numbers could
    // take the last free one above).
    if moved >= lowest || OWN[slot].compare_exchange(own, moved, Ordering::AcqRel, Ordering::Acquire).is_err() {
        real::close(moved);
        return false;
    }
    note_private_move(own, moved);
    real::close(own);
    true
}

/// The program's call just made descriptor `got`, the lowest free number at or above `lowest`. Where
/// the kernel skipped one of racewatch's descriptors to get there (they sit in the program's range when
/// its limit leaves no room above it), the program gets that number, as without racewatch, and
/// racewatch's moves to another free one; returns the program's number. With no other free number
/// `step_aside` runs (it closes racewatch's descriptors), and the number is the program's all the same.
/// Not in a `vfork` child (its table is its own copy).
pub fn in_order(got: i32, lowest: i32, step_aside: impl FnOnce()) -> i32 {
    let Some((slot, own)) = lowest_own_in(lowest, got) else { return got };
    match place_lower(own) {
        Some(moved) if OWN[slot].compare_exchange(own, moved, Ordering::AcqRel, Ordering::Acquire).is_ok() => {
            note_private_move(own, moved);
        }
        Some(moved) => {
            real::close(moved);
            return got;
        }
        None => {
            step_aside();
            if is_own(own) {
                return got;
            }
        }
    }
    let raw = super::raw::syscall6;
    let flags = raw(libc::SYS_fcntl, [got as u64, libc::F_GETFD as u64, 0, 0, 0, 0]);
    let cloexec = if flags > 0 && flags & i64::from(libc::FD_CLOEXEC) != 0 { libc::O_CLOEXEC as u64 } else { 0 };
    if raw(libc::SYS_dup3, [got as u64, own as u64, cloexec, 0, 0, 0]) != i64::from(own) {
        return got;
    }
    raw(libc::SYS_close, [got as u64, 0, 0, 0, 0, 0]);
    own
}

/// A copy of `fd` at the lowest free number of the highest free stretch below the top of the
/// program's range (where [`relocate`] puts descriptors when none fits above the limit), trying
/// further down, 64 at a time, while the program fills the top itself (a server parking descriptors
/// at fixed high numbers), to half the limit at most.
fn place_lower(fd: i32) -> Option<i32> {
    let (soft, _) = nofile_limit().ok()?;
    let top = soft.min(HIGH_CEILING);
    let lowest = top / 2;
    let mut floor = top.checked_sub(4 * MAX_OWN as u64)?;
    loop {
        match dup_at_least(fd, floor) {
            Ok(moved) => return Some(moved),
            Err(err) if err == libc::EMFILE && floor >= lowest + 64 => floor -= 64,
            Err(_) => return None,
        }
    }
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, floor)` made raw (racewatch's own `fcntl` hides its descriptors from
/// the program); the error is the kernel's errno.
fn dup_at_least(fd: i32, floor: u64) -> Result<i32, i32> {
    let rc = super::raw::syscall6(libc::SYS_fcntl, [fd as u64, libc::F_DUPFD_CLOEXEC as u64, floor, 0, 0, 0]);
    if rc < 0 {
        Err(-rc as i32)
    } else {
        Ok(rc as i32)
    }
}

/// Why [`keep_high`] refused: the descriptor limit leaves no room above the program's descriptors.
#[derive(Debug)]
pub struct NoRoom {
    pub soft: u64,
    pub hard: u64,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the descriptor limit (RLIMIT_NOFILE {}/{}) leaves no room for racewatch's descriptors above the \
             program's, and racewatch may not raise it; raise the hard limit by {} (e.g. `ulimit -Hn {}`) to run \
             with detection",
            self.soft,
            self.hard,
            2 * MAX_OWN,
            self.soft + 2 * MAX_OWN as u64
        )
    }
}

impl std::error::Error for NoRoom {}

/// The message of a [`NoRoom`] refusal, if `err` is one.
pub fn no_room_message(err: &std::io::Error) -> Option<String> {
    err.get_ref().and_then(|e| e.downcast_ref::<NoRoom>()).map(ToString::to_string)
}

// ---- The reporter's own descriptor table ----
//
// The reporter opens files to symbolize (ELF and DWARF of every module in a stack, through addr2line's
// loader too), each for a moment. In the process's descriptor table such a moment can cost a program
// that opens descriptors up to its limit one of them (EMFILE), and a program closing every descriptor
// meanwhile (a daemon's close loop) could hand the number to a file of its own that racewatch would
// then close. So before its first report the reporter thread takes a descriptor table of its own
// (`unshare(CLONE_FILES)`), keeping only copies of the runtime's descriptors: the program's table never
// sees its files. It writes to the program's stderr through a duplicate of the process's descriptor 2
// fetched for each write (`pidfd_getfd`), so it follows the program's `dup2` over 2 and never holds
// the program's stderr open. Closing one of the runtime's descriptors in the process's table also
// closes the reporter's copy ([`close_everywhere`]): a copy would keep a perf event alive.

thread_local! {
    /// In the thread with a descriptor table of its own: the pidfd of this process there (-1: none).
    static PRIVATE_PIDFD: std::cell::Cell<i32> = const { std::cell::Cell::new(-1) };
}
/// The thread that has a descriptor table of its own (0: none).
static PRIVATE_TID: AtomicI32 = AtomicI32::new(0);
/// Runtime descriptors closed in the process's table whose copies the private table still holds.
static PRIVATE_CLOSES: [AtomicI32; MAX_OWN] = [const { AtomicI32::new(-1) }; MAX_OWN];
/// Runtime descriptors moved in the process's table (`from << 32 | to`; `NO_MOVE`: none) that the
/// private table holds at the old number still.
static PRIVATE_MOVES: [AtomicU64; MAX_OWN] = [const { AtomicU64::new(NO_MOVE) }; MAX_OWN];
const NO_MOVE: u64 = u64::MAX;

const CLONE_FILES: libc::c_int = 0x0000_0400;

/// Gives the calling thread (the reporter, before it opens any file) a descriptor table of its own
/// holding only copies of the runtime's descriptors. Does nothing when the kernel cannot give it a
/// way to the process's stderr (pidfd) or refuses.
pub fn enter_private_table() {
    if PRIVATE_PIDFD.with(std::cell::Cell::get) >= 0 {
        return;
    }
    // The kernel's call, not the program's `unshare` that racewatch interposes (it would first end the
    // reporter thread, this very thread, while the program runs on one thread).
    if crate::sys::raw::syscall6(libc::SYS_unshare, [CLONE_FILES as u64, 0, 0, 0, 0, 0]) != 0 {
        return;
    }
    let pid = crate::sys::raw::getpid();
    let pidfd = crate::sys::raw::syscall6(libc::SYS_pidfd_open, [pid as u64, 0, 0, 0, 0, 0]) as i32;
    let mut keep: Vec<i32> = OWN.iter().map(|slot| slot.load(Ordering::Acquire)).filter(|&fd| fd >= 0).collect();
    keep.push(if pidfd >= 0 { pidfd } else { 2 });
    keep.sort_unstable();
    let mut first: u64 = 0;
    for fd in keep {
        if fd as u64 > first {
            close_range_raw(first, fd as u64 - 1);
        }
        first = fd as u64 + 1;
    }
    close_range_raw(first, u64::from(u32::MAX));
    PRIVATE_PIDFD.with(|p| p.set(pidfd));
    PRIVATE_TID.store(crate::sys::raw::gettid(), Ordering::Release);
}

fn close_range_raw(first: u64, last: u64) {
    crate::sys::raw::syscall6(libc::SYS_close_range, [first, last, 0, 0, 0, 0]);
}

/// Runs `f` with a descriptor for the program's stderr: 2 itself, or in the thread with a private
/// table a duplicate of the process's descriptor 2, closed after. `None` when there is none.
pub fn with_stderr<T>(f: impl FnOnce(i32) -> T) -> Option<T> {
    let pidfd = PRIVATE_PIDFD.with(std::cell::Cell::get);
    if pidfd < 0 {
        return Some(f(2));
    }
    let mut fd = crate::sys::raw::syscall6(libc::SYS_pidfd_getfd, [pidfd as u64, 2, 0, 0, 0, 0]);
    if fd < 0 {
        fd = stderr_through_a_thread();
    }
    if fd < 0 {
        return None;
    }
    let result = f(fd as i32);
    real::close(fd as i32);
    Some(result)
}

/// The process's descriptor 2 taken through one of its live threads (`PIDFD_THREAD`, Linux 6.9): the
/// process's pidfd names the main thread, whose table is gone once `main` called `pthread_exit` (a
/// report then was not written). Negative when none gives it.
fn stderr_through_a_thread() -> i64 {
    const PIDFD_THREAD: u64 = libc::O_EXCL as u64;
    let me = crate::sys::raw::gettid();
    for tid in crate::sys::thread::known_tids().filter(|&tid| tid != me) {
        let thread = crate::sys::raw::syscall6(libc::SYS_pidfd_open, [tid as u64, PIDFD_THREAD, 0, 0, 0, 0]);
        if thread < 0 {
            continue;
        }
        let fd = crate::sys::raw::syscall6(libc::SYS_pidfd_getfd, [thread as u64, 2, 0, 0, 0, 0]);
        real::close(thread as i32);
        if fd >= 0 {
            return fd;
        }
    }
    -1
}

/// Closes the runtime's descriptor `fd` in the process's table and has the private table's copy
/// closed too (the reporter does it at once when woken; waits for it about `wait_ms` at most).
pub fn close_everywhere(fd: i32, wait_ms: u64) {
    real::close(fd);
    if PRIVATE_TID.load(Ordering::Acquire) == 0 {
        return;
    }
    if !PRIVATE_CLOSES.iter().any(|slot| slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed).is_ok()) {
        return;
    }
    crate::sys::wake::notify();
    let deadline = crate::sys::thread::monotonic_ns() + wait_ms * 1_000_000;
    while PRIVATE_CLOSES.iter().any(|slot| slot.load(Ordering::Acquire) == fd)
        && crate::sys::thread::monotonic_ns() < deadline
    {
        crate::sys::thread::sleep_us(200);
    }
}

/// Has the private table's copy of a runtime descriptor moved from `from` to `to` as well (the
/// reporter does it when woken).
fn note_private_move(from: i32, to: i32) {
    if PRIVATE_TID.load(Ordering::Acquire) == 0 {
        return;
    }
    let entry = (from as u64) << 32 | to as u32 as u64;
    if PRIVATE_MOVES
        .iter()
        .any(|slot| slot.compare_exchange(NO_MOVE, entry, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    {
        crate::sys::wake::notify();
    }
}

/// In the thread with a private table: moves and closes the copies of descriptors moved and closed in
/// the process's table (raw calls: racewatch's own `dup3` would move them again).
pub fn apply_private_closes() {
    if PRIVATE_PIDFD.with(std::cell::Cell::get) < 0 {
        return;
    }
    for slot in &PRIVATE_MOVES {
        let entry = slot.swap(NO_MOVE, Ordering::AcqRel);
        if entry != NO_MOVE {
            let (from, to) = (entry >> 32, entry & u64::from(u32::MAX));
            crate::sys::raw::syscall6(libc::SYS_dup3, [from, to, libc::O_CLOEXEC as u64, 0, 0, 0]);
            crate::sys::raw::syscall6(libc::SYS_close, [from, 0, 0, 0, 0, 0]);
        }
    }
    for slot in &PRIVATE_CLOSES {
        let fd = slot.load(Ordering::Acquire);
        if fd >= 0 {
            real::close(fd);
            slot.store(-1, Ordering::Release);
        }
    }
}

/// The private table went with its thread (the reporter ended), or a forked child has none.
pub fn forget_private_table() {
    PRIVATE_TID.store(0, Ordering::Release);
    for slot in &PRIVATE_CLOSES {
        slot.store(-1, Ordering::Release);
    }
    for slot in &PRIVATE_MOVES {
        slot.store(NO_MOVE, Ordering::Release);
    }
}

/// Reads a whole file for the runtime's own use (the reporter reading an ELF file for symbols). In
/// the reporter's own descriptor table the program never sees the descriptor. Elsewhere (a drain at
/// exit without a reporter thread) it is moved to the top of the program's range at once: a program
/// closing every descriptor meanwhile (a daemon's close loop) can hardly hand that number to a file
/// of its own; the limit itself is never touched (a thread of the program may be changing and
/// reading it).
pub fn read_file(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::FromRawFd;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let low = real::open(false, c_path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if low < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let private = PRIVATE_PIDFD.with(std::cell::Cell::get) >= 0;
    let (soft, _) = nofile_limit()?;
    let top = soft.min(HIGH_CEILING).saturating_sub(4 * MAX_OWN as u64).max(low as u64 + 1);
    let high = if private { -1 } else { dup_at_least(low, top).unwrap_or(-1) };
    let fd = if high >= 0 {
        real::close(low);
        high
    } else {
        low
    };
    // SAFETY: `fd` is a descriptor this function just made and nothing else owns; the File
    // closes it when dropped.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The hard `RLIMIT_NOFILE`.
pub fn nofile_hard_limit() -> Option<u64> {
    nofile_limit().ok().map(|(_, hard)| hard)
}

/// The soft and hard `RLIMIT_NOFILE`.
fn nofile_limit() -> std::io::Result<(u64, u64)> {
    super::raw::limit(libc::RLIMIT_NOFILE).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn relocate(fd: i32) -> std::io::Result<i32> {
    let limit = {
        let (soft, hard) = nofile_limit()?;
        libc::rlimit { rlim_cur: soft, rlim_max: hard }
    };
    let soft = limit.rlim_cur;
    let floor = soft.max(FLOOR.load(Ordering::Acquire));
    if floor < libc::RLIM_INFINITY - 2 * MAX_OWN as u64 {
        // Raising the hard limit too needs CAP_SYS_RESOURCE (it fails harmlessly without); lowering it
        // back never does.
        let wanted = floor + 2 * MAX_OWN as u64;
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: limit.rlim_max.max(wanted) };
        // The limits are restored right after the dup.
        if real::setrlimit(libc::RLIMIT_NOFILE as libc::c_int, &raised) == 0 {
            let moved = dup_at_least(fd, floor);
            real::setrlimit(libc::RLIMIT_NOFILE as libc::c_int, &limit);
            if let Ok(moved) = moved {
                return Ok(moved);
            }
        }
    }
    if soft < SMALL_LIMIT {
        return Err(std::io::Error::other(NoRoom { soft, hard: limit.rlim_max }));
    }
    let floor = soft.min(HIGH_CEILING) - 4 * MAX_OWN as u64;
    dup_at_least(fd, floor).map_err(std::io::Error::from_raw_os_error)
}

/// Whether `fd` is one of the runtime's descriptors. Lock-free.
pub fn is_own(fd: i32) -> bool {
    fd >= 0 && OWN.iter().any(|slot| slot.load(Ordering::Acquire) == fd)
}

/// How many descriptors racewatch holds in the program's table now. Lock-free.
pub fn own_count() -> usize {
    OWN.iter().filter(|slot| slot.load(Ordering::Acquire) >= 0).count()
}

/// The numbers of racewatch's descriptors now (`None`: a free slot). Lock-free.
pub fn own_numbers() -> [Option<i32>; MAX_OWN] {
    std::array::from_fn(|i| Some(OWN[i].load(Ordering::Acquire)).filter(|&fd| fd >= 0))
}

/// Whether a descriptor of ours sits at or above `lowest` below the soft `RLIMIT_NOFILE` (where
/// [`keep_high`] found no room above it): one number fewer for the program's own there. Makes a
/// system call.
pub fn own_in_program_range(lowest: i32) -> bool {
    let Ok((soft, _)) = nofile_limit() else { return false };
    let lowest = u64::try_from(lowest).unwrap_or(0);
    OWN.iter().any(|slot| (lowest..soft).contains(&(slot.load(Ordering::Acquire) as i64 as u64)))
}

/// Runs `retire` (which stops every use of our descriptors and forgets them) and then closes the
/// descriptors that were ours: their numbers are the program's again.
pub fn release_all_own(retire: impl FnOnce()) {
    let fds: [i32; MAX_OWN] = std::array::from_fn(|i| OWN[i].load(Ordering::Acquire));
    retire();
    for fd in fds.into_iter().filter(|&fd| fd >= 0) {
        real::close(fd);
    }
}

/// Forgets every descriptor of ours without closing it (the program closed them).
pub fn forget_all_own() {
    for slot in &OWN {
        slot.store(-1, Ordering::Release);
    }
}

/// Closes and forgets every descriptor of ours (a forked child's copies of the parent's).
pub fn close_all_own() {
    for slot in &OWN {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            real::close(fd);
        }
    }
}

/// Whether `fd` is an open descriptor (of the program's: racewatch's own `fcntl` hides racewatch's).
pub fn is_open(fd: i32) -> bool {
    super::raw::syscall6(libc::SYS_fcntl, [fd as u64, libc::F_GETFD as u64, 0, 0, 0, 0]) >= 0 && !is_own(fd)
}

/// Runs `close(first, last)` over the stretches of `first..=last` that hold no descriptor of the
/// runtime's, lowest first; returns the first failure's result, else 0. The program's `close_range`
/// and `closefrom` over racewatch's descriptors close all of its own and none of racewatch's: as
/// without racewatch, where those numbers were free.
pub fn around_own(first: u64, last: u64, close: impl FnMut(u64, u64) -> libc::c_int) -> libc::c_int {
    let mut own: Vec<u64> =
        OWN.iter().map(|slot| slot.load(Ordering::Acquire)).filter(|&fd| fd >= 0).map(|fd| fd as u64).collect();
    own.sort_unstable();
    for_gaps(first, last, &own, close)
}

/// Calls `close(from, to)` for each stretch of `first..=last` between the numbers of `own` (sorted),
/// lowest first; the first failure's result, else 0.
fn for_gaps(first: u64, last: u64, own: &[u64], mut close: impl FnMut(u64, u64) -> libc::c_int) -> libc::c_int {
    let mut rc = 0;
    let mut from = first;
    for &fd in own.iter().filter(|&&fd| (first..=last).contains(&fd)) {
        if fd > from {
            let done = close(from, fd - 1);
            rc = if rc == 0 { done } else { rc };
        }
        from = fd + 1;
    }
    if from <= last {
        let done = close(from, last);
        rc = if rc == 0 { done } else { rc };
    }
    rc
}

/// The largest write that a pipe with any free room takes without blocking.
const CHUNK: usize = 4096;

/// Writes `bytes` to `fd` in chunks, each after waiting at most `wait_ms` for room; gives up (returns
/// false) on a reader that does not keep up or on any error. Never raises `SIGPIPE` in the program: the
/// signal is blocked around the write and a `SIGPIPE` it raised is taken back.
pub fn write_all(fd: i32, bytes: &[u8], wait_ms: i32) -> bool {
    let _quiet = QuietPipe::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let mut pollfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
        let ready = real::poll(&mut pollfd, 1, wait_ms);
        if ready < 0 && errno() == libc::EINTR {
            continue;
        }
        if ready <= 0 || pollfd.revents & (libc::POLLERR | libc::POLLNVAL | libc::POLLHUP) != 0 {
            return false;
        }
        let len = rest.len().min(CHUNK);
        // SAFETY: `rest` is a live slice; write(2) reads at most `len` bytes of it.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), len) };
        if n > 0 {
            rest = &rest[n as usize..];
        } else if n < 0 && errno() == libc::EINTR {
            continue;
        } else {
            return false;
        }
    }
    true
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Blocks `SIGPIPE` in this thread while alive; on drop, takes back a `SIGPIPE` that became pending
/// meanwhile (unless the program already had one pending) and restores the mask.
struct QuietPipe {
    old: libc::sigset_t,
    had_pending: bool,
}

impl QuietPipe {
    fn new() -> QuietPipe {
        // SAFETY: sigset operations on live locals; the real pthread_sigmask changes only this thread.
        unsafe {
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            let mut old: libc::sigset_t = std::mem::zeroed();
            real::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
            let pending = crate::sys::raw::sigpending().unwrap_or(0);
            QuietPipe { old, had_pending: pending & 1 << (libc::SIGPIPE - 1) != 0 }
        }
    }
}

impl Drop for QuietPipe {
    fn drop(&mut self) {
        if !self.had_pending {
            // rt_sigtimedwait with a zero timeout only dequeues a pending SIGPIPE.
            let pipe: u64 = 1 << (libc::SIGPIPE - 1);
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            let args = [&pipe as *const u64 as u64, 0, &zero as *const libc::timespec as u64, 8, 0, 0];
            while super::raw::syscall6(libc::SYS_rt_sigtimedwait, args) == i64::from(libc::SIGPIPE) {}
        }
        real::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
    }
}

/// Closes a descriptor of the runtime's (a perf event it forgot, a log file opened for one write).
pub fn close(fd: i32) {
    real::close(fd);
}

/// `fdopen(fd, mode)`: a stream over a descriptor of the caller's (`mode`: a C string, as the
/// program passed it to `fopen`).
pub fn fdopen(fd: i32, mode: &std::ffi::CStr) -> Option<*mut libc::FILE> {
    // SAFETY: `mode` is NUL-terminated; `fd` is open and owned by the caller.
    let file = unsafe { libc::fdopen(fd, mode.as_ptr()) };
    (!file.is_null()).then_some(file)
}

/// `statfs.f_type` of procfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// The name the kernel gives descriptor `fd` when it is a file or directory of procfs
/// (`/proc/1234/status`, `/proc/1234/task`), whatever name it was opened by (relative to a directory
/// descriptor, through `..`, `thread-self`), written to `out`; `None` for anything else. Two raw system
/// calls (`fstatfs`, then `readlink` of `/proc/self/fd/N` for procfs only).
pub fn procfs_name(fd: i32, out: &mut [u8; 128]) -> Option<usize> {
    // SAFETY: a zeroed `statfs` is a valid out-parameter; fstatfs writes at most its size.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = crate::sys::raw::syscall6(libc::SYS_fstatfs, [fd as u64, &mut fs as *mut libc::statfs as u64, 0, 0, 0, 0]);
    if rc != 0 || fs.f_type != PROC_SUPER_MAGIC {
        return None;
    }
    let mut link = crate::fixed::FixedBuf::<32>::new();
    use std::fmt::Write as _;
    write!(link, "/proc/self/fd/{fd}\0").ok()?;
    let args =
        [libc::AT_FDCWD as u64, link.as_bytes().as_ptr() as u64, out.as_mut_ptr() as u64, out.len() as u64 - 1, 0, 0];
    let n = crate::sys::raw::syscall6(libc::SYS_readlinkat, args);
    let n = usize::try_from(n).ok().filter(|&n| n > 0 && n < out.len())?;
    out[n] = 0;
    Some(n)
}

/// Puts the file `with` refers to in place of descriptor `fd` (the same number, close-on-exec as
/// `cloexec` says) and closes `with`. False when the kernel refused (`fd` is left as it was).
pub fn replace_with(with: i32, fd: i32, cloexec: bool) -> bool {
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    let done =
        crate::sys::raw::syscall6(libc::SYS_dup3, [with as u64, fd as u64, flags as u64, 0, 0, 0]) == i64::from(fd);
    real::close(with);
    done
}

#[cfg(test)]
mod tests {
    use super::for_gaps;

    fn gaps(first: u64, last: u64, own: &[u64]) -> Vec<(u64, u64)> {
        let mut seen = Vec::new();
        for_gaps(first, last, own, |a, b| {
            seen.push((a, b));
            0
        });
        seen
    }

    #[test]
    fn closing_a_range_skips_the_runtimes_descriptors() {
        assert_eq!(gaps(3, 100, &[]), [(3, 100)]);
        assert_eq!(gaps(3, u64::MAX, &[4168, 4169, 4171]), [(3, 4167), (4170, 4170), (4172, u64::MAX)]);
        assert_eq!(gaps(3, 10, &[3, 10]), [(4, 9)]);
        assert_eq!(gaps(5, 5, &[5]), []);
        assert_eq!(gaps(5, 6, &[5]), [(6, 6)]);
        assert_eq!(gaps(3, 10, &[1, 20]), [(3, 10)], "descriptors outside the range change nothing");
    }

    #[test]
    fn the_first_failure_is_returned_and_every_stretch_is_still_closed() {
        let mut calls = 0;
        let rc = for_gaps(3, 20, &[10], |a, _| {
            calls += 1;
            if a == 3 {
                -1
            } else {
                0
            }
        });
        assert_eq!((rc, calls), (-1, 2));
    }
}
