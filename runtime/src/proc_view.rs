//! The program's own `/proc` files, as they would read without racewatch.
//!
//! While the detector runs, the kernel's view of the process carries racewatch's state: `SigCgt`
//! has `SIGTRAP` (racewatch's handler), `SigBlk` lacks a `SIGTRAP` the program blocked (kept
//! virtual), `Threads:` and `/proc/self/stat`'s thread count include the reporter thread, and the
//! listings of `/proc/self/task` and `/proc/self/fd` show the reporter and racewatch's descriptors.
//! A program that opens its own `status` or `stat` (`open*`, `fopen`) gets a snapshot with the
//! program's values when they differ (a memory file, read from its start), and its `opendir`
//! listings of `task` and `fd` skip racewatch's entries. A file whose text is already the
//! program's is opened for real; so is every file when no detector runs.
//!
//! This module parses paths and rewrites text (no system calls); [`crate::sys::memfile`] makes the
//! snapshot and [`crate::intercept`] holds the entry points.

use crate::reporter;
use crate::sys::budget::Footprint;
use crate::sys::memfile::Dest;
use crate::sys::{environ, fd, raw, signal};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How every path [`classify`] knows starts.
pub const PREFIX: &[u8] = b"/proc/";

/// One of the process's own files whose text carries racewatch's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `status` of thread `tid` (`/proc/self/status` is the main thread's).
    Status { tid: i32 },
    /// `stat` of thread `tid`.
    Stat { tid: i32 },
    /// The directory listing the process's threads.
    TaskDir,
    /// A directory listing its descriptors (`fd`, `fdinfo`, of the process or one of its threads).
    FdDir,
    /// `environ`: the environment the process started with.
    Environ,
    /// `limits`: the process's resource limits.
    Limits,
    /// `statm`: the process's memory in pages.
    Statm,
    /// The `task` listing of the parent that forked this process ([`crate::parent_view`]).
    ParentTaskDir,
}

/// What `path` names, for a process `pid` asked by its thread `caller` (`own_thread`: whether a number
/// other than `pid` is one of its threads, `/proc/<tid>/…`); `None` for anything else (relative paths,
/// other processes, other files).
pub fn classify(path: &[u8], pid: i32, caller: i32, own_thread: impl Fn(i32) -> bool) -> Option<Target> {
    let mut parts = path.split(|&b| b == b'/').filter(|p| !p.is_empty() && *p != b".");
    if !path.starts_with(b"/") || parts.next()? != b"proc" {
        return None;
    }
    let who = parts.next()?;
    let (tid, thread_self) = match who {
        b"self" => (pid, false),
        b"thread-self" => (caller, true),
        digits => match number(digits)? {
            n if n == pid => (n, false),
            // Another thread's own directory: its status and stat, like `thread-self`.
            n if n == caller || own_thread(n) => (n, true),
            _ => return None,
        },
    };
    let target = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(b"status"), None, ..) => Target::Status { tid },
        (Some(b"stat"), None, ..) => Target::Stat { tid },
        // The descriptor table is the process's: every thread's listing of it shows the same.
        (Some(b"fd" | b"fdinfo"), None, ..) => Target::FdDir,
        (Some(b"task"), Some(_), Some(b"fd" | b"fdinfo"), None) if !thread_self => Target::FdDir,
        (Some(b"environ"), None, ..) => Target::Environ,
        (Some(b"limits"), None, ..) => Target::Limits,
        (Some(b"statm"), None, ..) => Target::Statm,
        (Some(b"task"), Some(_), Some(b"statm"), None) if !thread_self => Target::Statm,
        (Some(b"task"), Some(_), Some(b"limits"), None) if !thread_self => Target::Limits,
        (Some(b"task"), Some(_), Some(b"environ"), None) if !thread_self => Target::Environ,
        (Some(b"task"), None, ..) if !thread_self => Target::TaskDir,
        (Some(b"task"), Some(n), Some(b"status"), None) if !thread_self => Target::Status { tid: number(n)? },
        (Some(b"task"), Some(n), Some(b"stat"), None) if !thread_self => Target::Stat { tid: number(n)? },
        _ => return None,
    };
    Some(target)
}

pub fn number(digits: &[u8]) -> Option<i32> {
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0i32, |n, &d| n * 10 + i32::from(d - b'0')))
}

/// The program's facts where the kernel shows racewatch's (`None`: the kernel's is the program's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Whether the program catches `SIGTRAP` (`SigCgt`).
    pub trap_caught: Option<bool>,
    /// Whether the program ignores `SIGTRAP` (`SigIgn`).
    pub trap_ignored: Option<bool>,
    /// Whether the thread has `SIGTRAP` blocked (`SigBlk`).
    pub trap_blocked: Option<bool>,
    /// The thread's whole `SigBlk` while racewatch's handler runs in it (which blocks every signal
    /// meanwhile): the mask of the code the handler interrupted.
    pub blocked_in_handler: Option<u64>,
    /// Whether a `SIGTRAP` pending for the thread shows (`SigPnd`): `Some(false)` while the program lets
    /// `SIGTRAP` through, where one pending is racewatch's, on its way to the handler.
    pub trap_pending: Option<bool>,
    /// Threads of racewatch's to leave out of the count.
    pub hidden_threads: u32,
    /// The size of the descriptor table without racewatch's descriptors (`FDSize`).
    pub fd_table: Option<u64>,
    /// racewatch's own mappings, left out of the address space (`VmPeak`, `VmSize`, `vsize`) and the
    /// data (`VmData`) the file shows.
    pub own: Footprint,
}

const TRAP_BIT: u64 = 1 << (libc::SIGTRAP - 1);

/// `status` text with the program's facts; `None` when it does not fit `out`.
pub fn rewrite_status(text: &[u8], facts: &Facts, out: &mut [u8]) -> Option<usize> {
    let mut w = Writer { out, len: 0 };
    for line in text.split_inclusive(|&b| b == b'\n') {
        let fixed = [
            (&b"SigPnd:"[..], facts.trap_pending),
            (b"SigBlk:", facts.trap_blocked),
            (b"SigIgn:", facts.trap_ignored),
            (b"SigCgt:", facts.trap_caught),
        ]
        .into_iter()
        .find_map(|(key, fact)| Some((key, fact?)).filter(|_| line.starts_with(key)));
        if let Some((key, set)) = fixed {
            let Some(bits) = hex_field(&line[key.len()..]) else {
                w.put(line)?;
                continue;
            };
            let bits = program_bits(key == b"SigBlk:", bits, set, facts);
            w.put(key)?;
            w.put_fmt(format_args!("\t{bits:016x}\n"))?;
        } else if let (true, Some(n)) = (line.starts_with(b"Threads:"), decimal_field(&line[b"Threads:".len()..])) {
            w.put_fmt(format_args!("Threads:\t{}\n", less(n, facts.hidden_threads)))?;
        } else if let (true, Some(size)) = (line.starts_with(b"FDSize:"), facts.fd_table) {
            w.put_fmt(format_args!("FDSize:\t{size}\n"))?;
        } else if let Some((key, kb, own)) = memory_line(line, facts.own) {
            w.put(key)?;
            w.put_fmt(format_args!("\t{:>8} kB\n", kb.saturating_sub(own >> 10)))?;
        } else {
            w.put(line)?;
        }
    }
    Some(w.len)
}

/// A `status` line of the process's memory that racewatch's footprint `own` counts in: its key, the
/// kernel's value in KiB and racewatch's part of it in bytes.
fn memory_line(line: &[u8], own: Footprint) -> Option<(&[u8], u64, u64)> {
    let (key, own) = [(&b"VmPeak:"[..], own.address_space), (b"VmSize:", own.address_space), (b"VmData:", own.data)]
        .into_iter()
        .find(|(key, own)| *own != 0 && line.starts_with(key))?;
    let value = line[key.len()..].trim_ascii().strip_suffix(b" kB")?;
    Some((key, decimal_field(value)?, own))
}

/// `statm` text (sizes in pages: total, resident, shared, text, library, data and stack, 0) without
/// racewatch's mappings in the total and the data.
pub fn rewrite_statm(text: &[u8], own: Footprint, out: &mut [u8]) -> Option<usize> {
    let mut w = Writer { out, len: 0 };
    let line = text.strip_suffix(b"\n").unwrap_or(text);
    for (i, field) in line.split(|&b| b == b' ').enumerate() {
        if i > 0 {
            w.put(b" ")?;
        }
        let less = match i {
            0 => own.address_space / 4096,
            5 => own.data / 4096,
            _ => 0,
        };
        match decimal_field(field) {
            Some(n) if less != 0 => w.put_fmt(format_args!("{}", n.saturating_sub(less)))?,
            _ => w.put(field)?,
        }
    }
    w.put(b"\n")?;
    Some(w.len)
}

/// A signal set the kernel shows (`bits`) with the program's `SIGTRAP` bit (`set`). A mask (`blocked`) is the
/// interrupted code's while racewatch's handler runs in the thread, and keeps a `SIGTRAP` the kernel
/// blocks: racewatch never blocks it for real where the program does not, but a program's handler whose
/// `sa_mask` has it runs with it blocked for real (set 17 p42).
fn program_bits(blocked: bool, bits: u64, set: bool, facts: &Facts) -> u64 {
    let bits = if blocked { facts.blocked_in_handler.unwrap_or(bits) } else { bits };
    if set {
        bits | TRAP_BIT
    } else if blocked {
        bits
    } else {
        bits & !TRAP_BIT
    }
}

/// glibc's internal signals (`SIGCANCEL`, 32, and `SIGSETXID`, 33) as `SigBlk` bits: no libc call of
/// the program's blocks them, racewatch's handler does.
const GLIBC_INTERNAL: u64 = (1 << 31) | (1 << 32);

/// Whether a status text's `SigBlk` holds glibc's internal signals, as racewatch's handler's mask does.
pub fn shows_handler_mask(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"SigBlk:"))
        .and_then(hex_field)
        .is_some_and(|bits| bits & GLIBC_INTERNAL == GLIBC_INTERNAL)
}

/// Whether `status` text shows `SIGTRAP` in the thread's `SigPnd`.
fn shows_pending_trap(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"SigPnd:"))
        .and_then(hex_field)
        .is_some_and(|bits| bits & TRAP_BIT != 0)
}

/// `stat` text with the program's thread count (field 20, `num_threads`) and signal sets (fields 31 to 34:
/// pending, blocked, ignored, caught; decimal, the first 31 signals).
pub fn rewrite_stat(text: &[u8], facts: &Facts, out: &mut [u8]) -> Option<usize> {
    // The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
    let close = text.iter().rposition(|&b| b == b')')?;
    let mut w = Writer { out, len: 0 };
    w.put(&text[..=close])?;
    // After ") " field 3 comes first: num_threads is the 18th field from there.
    for (i, field) in text[close + 1..].split(|&b| b == b' ').enumerate() {
        if i > 0 {
            w.put(b" ")?;
        }
        let signals = match i {
            29 => Some((false, facts.trap_pending)),
            30 => Some((true, facts.trap_blocked)),
            31 => Some((false, facts.trap_ignored)),
            32 => Some((false, facts.trap_caught)),
            _ => None,
        };
        match (i, decimal_field(field), signals) {
            (18, Some(n), _) => w.put_fmt(format_args!("{}", less(n, facts.hidden_threads)))?,
            // Field 23, `vsize`, in bytes.
            (STAT_VSIZE, Some(n), _) if facts.own.address_space != 0 => {
                w.put_fmt(format_args!("{}", n.saturating_sub(facts.own.address_space)))?
            }
            (_, Some(bits), Some((blocked, Some(set)))) => {
                w.put_fmt(format_args!("{}", program_bits(blocked, bits, set, facts) & 0x7fff_ffff))?
            }
            _ => w.put(field)?,
        }
    }
    Some(w.len)
}

/// Field 23 of `stat`, `vsize` (the address space in bytes), counted from 0 after the command name.
const STAT_VSIZE: usize = 21;

fn less(n: u64, hidden: u32) -> u64 {
    n.saturating_sub(u64::from(hidden)).max(1)
}

/// A hexadecimal field after a tab, up to the end of the line.
fn hex_field(rest: &[u8]) -> Option<u64> {
    let digits = rest.trim_ascii();
    if digits.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

fn decimal_field(rest: &[u8]) -> Option<u64> {
    let digits = rest.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Writes into a fixed buffer (no allocation: `open` may be called from a signal handler).
struct Writer<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len.checked_add(bytes.len()).filter(|&end| end <= self.out.len())?;
        self.out[self.len..end].copy_from_slice(bytes);
        self.len = end;
        Some(())
    }

    /// `args` formatted (integers: no allocation).
    fn put_fmt(&mut self, args: std::fmt::Arguments) -> Option<()> {
        std::fmt::Write::write_fmt(self, args).ok()
    }
}

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.put(s.as_bytes()).ok_or(std::fmt::Error)
    }
}

/// Whether a file the program opened as `path` might be one of its own `/proc` files under a name
/// [`classify`] does not know (relative to a directory, through `..`, by a symlink's name under
/// `/proc`): the opened descriptor's own name is then asked of the kernel. Not while nothing of
/// racewatch's shows, nor for absolute paths that never mention `proc` (no system call for those).
pub fn worth_identifying(path: &[u8]) -> bool {
    (!path.starts_with(b"/") || path.windows(4).any(|w| w == b"proc"))
        && (anything_to_hide() || crate::sys::budget::any_kept())
}

/// Whether anything of racewatch's shows in the process's `/proc` files now (never in a `vfork` child:
/// the records are its parent's). Not asked in a thread's own seccomp sandbox, where making the view
/// takes system calls the filter may kill: the program reads the kernel's file there.
fn anything_to_hide() -> bool {
    let shows = signal::is_installed() || reporter::kernel_count() != Some(0) || fd::table_grown();
    let here = !crate::sys::confined::here() && !signal::in_borrowed_memory();
    (shows && here) || own_memory_shows()
}

/// Whether the process's memory figures are shown without racewatch's mappings (which a preloaded
/// racewatch always has): not in a seccomp sandbox (making the view takes system calls a filter may
/// kill) nor in a `vfork` child (the records are its parent's).
fn own_memory_shows() -> bool {
    cfg!(feature = "preload")
        && !crate::sys::confined::here()
        && !crate::detector::is_sandboxed()
        && !signal::in_borrowed_memory()
}

/// The program's facts for thread `tid`, asked by thread `caller`.
fn facts_for(tid: i32, caller: i32) -> Facts {
    let installed = signal::is_installed();
    let handler = signal::program_action().sa_sigaction;
    let blocked = if tid == caller { Some(signal::trap_blocked()) } else { signal::trap_blocked_in(tid) };
    Facts {
        trap_caught: installed.then_some(handler != libc::SIG_DFL && handler != libc::SIG_IGN),
        trap_ignored: installed.then_some(handler == libc::SIG_IGN),
        trap_blocked: blocked.filter(|_| installed),
        blocked_in_handler: None,
        trap_pending: (installed && blocked == Some(false)).then_some(false),
        hidden_threads: reporter::kernel_count().unwrap_or(1),
        fd_table: fd::table_grown().then(|| fd::program_table_size(fd::highest_open_of_program())).flatten(),
        own: Footprint::default(),
    }
}

/// racewatch's footprint to leave out of the memory figures of `text`, the kernel's `status`, `stat` or
/// `statm` ([`Target`]'s kind), which show the process's whole address space
/// ([`crate::sys::budget::footprint_at`]); nothing when the figures are shown as the kernel's.
fn footprint_in(text: &[u8], target: Target) -> Footprint {
    if !own_memory_shows() {
        return Footprint::default();
    }
    let total = match target {
        Target::Status { .. } => text
            .split(|&b| b == b'\n')
            .find_map(|line| line.strip_prefix(b"VmSize:"))
            .and_then(|value| decimal_field(value.trim_ascii().strip_suffix(b" kB")?))
            .map(|kb| kb << 10),
        Target::Stat { .. } => text
            .iter()
            .rposition(|&b| b == b')')
            .and_then(|close| text[close + 1..].split(|&b| b == b' ').nth(STAT_VSIZE))
            .and_then(decimal_field),
        Target::Statm => text.split(|&b| b == b' ').next().and_then(decimal_field).map(|pages| pages * 4096),
        _ => None,
    };
    crate::sys::budget::footprint_at(total.unwrap_or(u64::MAX))
}

/// Whether `path` names one of racewatch's descriptors in the process's own `fd` or `fdinfo` directory
/// (`/proc/self/fd/<n>`): not there for the program, as its listing leaves it out.
pub fn names_own_descriptor(path: &[u8]) -> bool {
    let Some(slash) = path.iter().rposition(|&b| b == b'/') else { return false };
    let own = number(&path[slash + 1..]).is_some_and(fd::is_own);
    own && classify(&path[..slash], raw::getpid(), raw::gettid(), raw::thread_alive) == Some(Target::FdDir)
}

/// For an `open` of `path` with `flags` by the program: a descriptor of a snapshot holding the
/// program's text, or `None` to open the file for real (not one of the process's own files that
/// show racewatch's state, nothing to hide, or no snapshot could be made).
pub fn open(path: &std::ffi::CStr, flags: libc::c_int) -> Option<libc::c_int> {
    let bytes = path.to_bytes();
    if !bytes.starts_with(PREFIX) || flags & libc::O_ACCMODE != libc::O_RDONLY {
        return None;
    }
    // The kernel's answer for the file itself (`O_DIRECT`: EINVAL for a `/proc` file; a memory file would
    // take it).
    if flags & (libc::O_CREAT | libc::O_DIRECTORY | libc::O_PATH | libc::O_TMPFILE | libc::O_DIRECT) != 0 {
        return None;
    }
    let caller = raw::gettid();
    if reporter::is_reporter_thread(caller) {
        return None; // racewatch's own reads (the tracer check) see the kernel's text.
    }
    let Some(target) = classify(bytes, raw::getpid(), caller, raw::thread_alive) else {
        return open_parents(path, flags);
    };
    let fd = make(path, target, caller, Dest::New { flags })?;
    crate::view_fds::register(
        fd,
        crate::view_fds::Viewed { target, in_task: crate::view_fds::names_task(bytes), pid: 0 },
    );
    Some(fd)
}

/// A seek or `pread` of the program's on `fd`, its view of `target` (at `path`): the view gets the file's
/// text of now.
pub fn view_again(fd: libc::c_int, path: &std::ffi::CStr, target: Target) {
    make(path, target, raw::gettid(), Dest::Existing(fd));
}

/// The program's view of `target`, the file at `path`, asked by thread `caller`, put where `into` says
/// ([`crate::sys::memfile::rewritten`]); `None` when there is nothing to hide in it.
fn make(path: &std::ffi::CStr, target: Target, caller: i32, into: Dest) -> Option<libc::c_int> {
    if target == Target::Environ {
        if !environ::hid_anything() || signal::in_borrowed_memory() {
            return None;
        }
        return crate::sys::memfile::rewritten(path, into, |_| true, environ::rewrite_proc_environ);
    }
    if target == Target::Limits {
        if !crate::sys::budget::any_kept() || signal::in_borrowed_memory() {
            return None;
        }
        return crate::sys::memfile::rewritten(path, into, |_| true, crate::sys::budget::rewrite_limits);
    }
    if target == Target::Statm {
        if !own_memory_shows() {
            return None;
        }
        let rewrite = |text: &[u8], out: &mut [u8]| rewrite_statm(text, footprint_in(text, target), out);
        return crate::sys::memfile::rewritten(path, into, |_| true, rewrite);
    }
    if !anything_to_hide() {
        return None;
    }
    let (tid, stat) = match target {
        Target::Status { tid } => (tid, false),
        Target::Stat { tid } => (tid, true),
        Target::TaskDir | Target::FdDir | Target::Environ | Target::Limits | Target::Statm | Target::ParentTaskDir => {
            return None
        }
    };
    let facts = facts_for(tid, caller);
    let rewrite = |text: &[u8], out: &mut [u8]| {
        // Looked at once the text is read: whether the thread is in racewatch's handler as it was read.
        let in_handler = if tid == caller { None } else { signal::mask_in_handler(tid) };
        // Likewise whether the kernel counted a reporter thread in the text: one starting or retiring
        // right then is counted there while racewatch's own state says otherwise.
        let hidden_threads = reporter::kernel_count().unwrap_or(facts.hidden_threads);
        let own = footprint_in(text, target);
        let facts = Facts { blocked_in_handler: in_handler, hidden_threads, own, ..facts };
        if stat {
            rewrite_stat(text, &facts, out)
        } else {
            rewrite_status(text, &facts, out)
        }
    };
    // Another thread's status read while racewatch's handler enters or leaves there (before it noted
    // the interrupted mask, or after) shows the handler's mask: read again.
    // Likewise one read while a reporter thread is being started, before its id is known.
    // Likewise the caller's own status showing a `SIGTRAP` of racewatch's pending (a sample that fired
    // while the program blocks `SIGTRAP`): taken back as `sigpending` does, and read again.
    let settled = |text: &[u8]| {
        let mask_settled = stat || tid == caller || !shows_handler_mask(text) || signal::mask_in_handler(tid).is_some();
        let own_pending = !stat && tid == caller && shows_pending_trap(text) && signal::own_trap_taken_back();
        mask_settled && !own_pending && reporter::kernel_count().is_some()
    };
    crate::sys::memfile::rewritten(path, into, settled, rewrite)
}

/// [`open`] for a file of the parent that forked this process ([`crate::parent_view`]): its `status` or
/// `stat` with the parent program's values.
fn open_parents(path: &std::ffi::CStr, flags: libc::c_int) -> Option<libc::c_int> {
    parents(path, Dest::New { flags })
}

/// [`view_again`] for a view of the parent's file that this forked process holds (opened before the fork,
/// or by [`open_parents`]): the parent's text of now, as the kernel would make it at a seek.
pub fn parents_again(fd: libc::c_int, path: &std::ffi::CStr) {
    parents(path, Dest::Existing(fd));
}

/// The parent's `status` or `stat` at `path` with the parent program's values, put where `into` says.
fn parents(path: &std::ffi::CStr, into: Dest) -> Option<libc::c_int> {
    let (target, parent) = crate::parent_view::classify(path.to_bytes())?;
    let (tid, stat) = match target {
        Target::Status { tid } => (tid, false),
        Target::Stat { tid } => (tid, true),
        _ => return None,
    };
    let rewrite = |text: &[u8], out: &mut [u8]| {
        let facts = crate::parent_view::facts_for(parent, tid);
        if stat {
            rewrite_stat(text, &facts, out)
        } else {
            rewrite_status(text, &facts, out)
        }
    };
    // The parent's thread caught inside racewatch's handler (every signal blocked): read again.
    let settled = |text: &[u8]| stat || !shows_handler_mask(text);
    crate::sys::memfile::rewritten(path, into, settled, rewrite)
}

/// The `open` flags of an `fopen` mode that only reads (`None`: one that writes, never rewritten).
pub fn fopen_flags(mode: &[u8]) -> Option<libc::c_int> {
    let reads_only = mode.first() == Some(&b'r') && !mode.contains(&b'+');
    reads_only.then_some(libc::O_RDONLY | if mode.contains(&b'e') { libc::O_CLOEXEC } else { 0 })
}

/// Whether the entry `name` of a listing of `dir` is racewatch's (the reporter thread, one of its
/// descriptors).
pub fn hidden_entry(dir: Target, name: &[u8]) -> bool {
    let Some(n) = number(name) else { return false };
    match dir {
        Target::TaskDir => reporter::is_reporter_thread(n),
        Target::FdDir => fd::is_own(n),
        Target::ParentTaskDir => crate::parent_view::hidden_in_listing(n),
        Target::Status { .. } | Target::Stat { .. } | Target::Environ | Target::Limits | Target::Statm => false,
    }
}

/// After the program read `bytes`, `linux_dirent64` records, from descriptor `fd` (a raw
/// `getdents64`, which `opendir` listings do not go through): when `fd` lists the process's `fd` or
/// `task` directory, racewatch's entries are taken out (the rest move up, in order). The bytes left;
/// 0 when every record read was racewatch's (the caller reads again: 0 means the end).
pub fn filter_dirents(fd: libc::c_int, bytes: &mut [u8]) -> usize {
    let len = bytes.len();
    if len == 0 || !(anything_to_hide() || crate::parent_view::any()) {
        return len;
    }
    let mut link = [0u8; 64];
    let mut name = crate::fixed::FixedBuf::<32>::new();
    let _ = std::fmt::Write::write_fmt(&mut name, format_args!("/proc/self/fd/{fd}\0"));
    let n = raw::syscall6(
        libc::SYS_readlink,
        [name.as_bytes().as_ptr() as u64, link.as_mut_ptr() as u64, link.len() as u64, 0, 0, 0],
    );
    let Ok(n) = usize::try_from(n) else { return len };
    let Some(dir) = listed(&link[..n]) else { return len };
    let (mut read, mut kept) = (0, 0);
    while let Some(entry) = dirent_at(bytes, read) {
        let Ok((reclen, name)) = entry else { return len };
        if !hidden_entry(dir, name) {
            bytes.copy_within(read..read + reclen, kept);
            kept += reclen;
        }
        read += reclen;
    }
    kept
}

/// The `linux_dirent64` record at offset `at` of `bytes` (as `getdents64` reads them): its length and
/// name; `None` past the last, `Err` for a malformed one.
pub fn dirent_at(bytes: &[u8], at: usize) -> Option<Result<(usize, &[u8]), ()>> {
    if at + 19 >= bytes.len() {
        return None;
    }
    let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
    if reclen == 0 || at + reclen > bytes.len() {
        return Some(Err(()));
    }
    let name = &bytes[at + 19..at + reclen];
    Some(Ok((reclen, &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())])))
}

/// For an `opendir` of `path` by the program: the listing whose entries [`hidden_entry`] filters.
pub fn listing(path: &std::ffi::CStr) -> Option<Target> {
    let bytes = path.to_bytes();
    if !bytes.starts_with(PREFIX) || reporter::is_reporter_thread(raw::gettid()) {
        return None;
    }
    listed(bytes)
}

/// Which listing with entries of racewatch's the directory `path` is: the process's own `task` or `fd`
/// (while anything of racewatch's shows), or its parent's `task` ([`crate::parent_view`]).
fn listed(path: &[u8]) -> Option<Target> {
    let own = anything_to_hide().then(|| classify(path, raw::getpid(), raw::gettid(), raw::thread_alive));
    match own.flatten() {
        Some(target @ (Target::TaskDir | Target::FdDir)) => Some(target),
        Some(_) => None,
        None => {
            crate::parent_view::classify(path).filter(|(t, _)| *t == Target::TaskDir).map(|_| Target::ParentTaskDir)
        }
    }
}

/// Open listings of `task` and `fd` (a `DIR` pointer, 16-byte aligned by `malloc`, with the kind in
/// its low bits); 0: free. A listing that finds no free entry is shown unfiltered.
static LISTINGS: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
/// How many entries of [`LISTINGS`] are in use (every `readdir` of the program reads it first).
static OPEN_LISTINGS: AtomicUsize = AtomicUsize::new(0);
const TASK_TAG: usize = 1;
const FD_TAG: usize = 2;
const PARENT_TASK_TAG: usize = 3;

/// Records `dir`, an `opendir` of `target`, for [`listing_of`].
pub fn note_listing(dir: usize, target: Target) {
    let tag = match target {
        Target::TaskDir => TASK_TAG,
        Target::FdDir => FD_TAG,
        Target::ParentTaskDir => PARENT_TASK_TAG,
        Target::Status { .. } | Target::Stat { .. } | Target::Environ | Target::Limits | Target::Statm => return,
    };
    if dir & 0xf != 0 {
        return;
    }
    OPEN_LISTINGS.fetch_add(1, Ordering::AcqRel);
    if !LISTINGS.iter().any(|l| l.compare_exchange(0, dir | tag, Ordering::AcqRel, Ordering::Relaxed).is_ok()) {
        OPEN_LISTINGS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What `dir` lists, when it is one of the listings [`note_listing`] recorded.
pub fn listing_of(dir: usize) -> Option<Target> {
    if OPEN_LISTINGS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let entry = LISTINGS.iter().map(|l| l.load(Ordering::Acquire)).find(|&e| e != 0 && e & !0xf == dir)?;
    Some(match entry & 0xf {
        TASK_TAG => Target::TaskDir,
        PARENT_TASK_TAG => Target::ParentTaskDir,
        _ => Target::FdDir,
    })
}

/// Forgets `dir` (the program closes it).
pub fn forget_listing(dir: usize) {
    if OPEN_LISTINGS.load(Ordering::Acquire) == 0 {
        return;
    }
    for l in &LISTINGS {
        let entry = l.load(Ordering::Acquire);
        if entry != 0
            && entry & !0xf == dir
            && l.compare_exchange(entry, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            OPEN_LISTINGS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_are_told_from_others() {
        let c = |p: &str| classify(p.as_bytes(), 100, 105, |n| n == 107);
        assert_eq!(c("/proc/self/status"), Some(Target::Status { tid: 100 }));
        assert_eq!(c("/proc/100/status"), Some(Target::Status { tid: 100 }));
        assert_eq!(c("//proc/./self//stat"), Some(Target::Stat { tid: 100 }));
        assert_eq!(c("/proc/thread-self/status"), Some(Target::Status { tid: 105 }));
        assert_eq!(c("/proc/self/task/107/status"), Some(Target::Status { tid: 107 }));
        assert_eq!(c("/proc/100/task/107/stat"), Some(Target::Stat { tid: 107 }));
        assert_eq!(c("/proc/self/task"), Some(Target::TaskDir));
        assert_eq!(c("/proc/self/task/"), Some(Target::TaskDir));
        assert_eq!(c("/proc/thread-self/fd"), Some(Target::FdDir));
        assert_eq!(c("/proc/107/status"), Some(Target::Status { tid: 107 }));
        assert_eq!(c("/proc/105/stat"), Some(Target::Stat { tid: 105 }));
        assert_eq!(c("/proc/107/task"), None);
        assert_eq!(c("/proc/self/statm"), Some(Target::Statm));
        assert_eq!(c("/proc/100/limits"), Some(Target::Limits));
        for other in ["/proc/101/status", "/proc/self/smaps", "proc/self/status", "/proc/self/task/x/status"] {
            assert_eq!(c(other), None, "{other}");
        }
        assert_eq!(c("/proc/self/../1/status"), None);
        assert_eq!(c("/proc/self/task/107/status/x"), None);
    }

    const STATUS: &str = "Name:\tprog\nState:\tS (sleeping)\nFDSize:\t2048\nThreads:\t3\nSigQ:\t0/1000\n\
        SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n\
        SigIgn:\t0000000000001000\nSigCgt:\t0000000180000010\nCapInh:\t0000000000000000\n";

    fn status_with(facts: Facts) -> String {
        let mut out = [0u8; 1024];
        let len = rewrite_status(STATUS.as_bytes(), &facts, &mut out).unwrap();
        String::from_utf8(out[..len].to_vec()).unwrap()
    }

    #[test]
    fn a_thread_inside_racewatchs_handler_shows_the_mask_it_was_interrupted_with() {
        let busy = STATUS.replace("SigBlk:\t0000000000000000", "SigBlk:\tfffffffffffbfeef");
        let facts = Facts { trap_blocked: Some(false), blocked_in_handler: Some(0xa01), ..Facts::default() };
        let mut out = [0u8; 1024];
        let len = rewrite_status(busy.as_bytes(), &facts, &mut out).unwrap();
        let text = String::from_utf8(out[..len].to_vec()).unwrap();
        assert!(text.contains("\nSigBlk:\t0000000000000a01\n"), "{text}");
    }

    #[test]
    fn status_shows_the_programs_signals_and_threads() {
        let facts = Facts {
            trap_caught: Some(false),
            trap_ignored: Some(false),
            trap_blocked: Some(true),
            blocked_in_handler: None,
            trap_pending: None,
            hidden_threads: 1,
            fd_table: Some(256),
            own: Footprint::default(),
        };
        let text = status_with(facts);
        assert!(text.contains("\nSigBlk:\t0000000000000010\n"), "{text}");
        assert!(text.contains("\nSigCgt:\t0000000180000000\n"), "{text}");
        assert!(text.contains("\nSigIgn:\t0000000000001000\n"), "{text}");
        assert!(text.contains("\nThreads:\t2\n"), "{text}");
        assert!(text.contains("\nFDSize:\t256\n"), "{text}");
        assert!(
            text.starts_with("Name:\tprog\nState:\tS (sleeping)\n") && text.ends_with("CapInh:\t0000000000000000\n")
        );
        assert_eq!(status_with(Facts::default()), STATUS, "nothing to change: the kernel's text");
        let pending = STATUS.replace("SigPnd:\t0000000000000000", "SigPnd:\t0000000000000210");
        let mut out = [0u8; 1024];
        let facts = Facts { trap_pending: Some(false), ..Facts::default() };
        let len = rewrite_status(pending.as_bytes(), &facts, &mut out).unwrap();
        assert!(std::str::from_utf8(&out[..len]).unwrap().contains("\nSigPnd:\t0000000000000200\n"));
    }

    #[test]
    fn memory_figures_leave_racewatchs_mappings_out() {
        let text =
            "Name:\tprog\nVmPeak:\t   30000 kB\nVmSize:\t   26000 kB\nVmLck:\t       0 kB\nVmData:\t    9000 kB\n";
        let facts = Facts { own: Footprint { address_space: 8 << 20, data: 6 << 20 }, ..Facts::default() };
        let mut out = [0u8; 256];
        let len = rewrite_status(text.as_bytes(), &facts, &mut out).unwrap();
        let want =
            "Name:\tprog\nVmPeak:\t   21808 kB\nVmSize:\t   17808 kB\nVmLck:\t       0 kB\nVmData:\t    2856 kB\n";
        assert_eq!(std::str::from_utf8(&out[..len]).unwrap(), want);
        let len = rewrite_statm(b"6500 1350 900 5 0 2250 0\n", facts.own, &mut out).unwrap();
        assert_eq!(std::str::from_utf8(&out[..len]).unwrap(), "4452 1350 900 5 0 714 0\n");
    }

    #[test]
    fn a_sigtrap_the_kernel_blocks_stays_in_the_mask() {
        // A program handler whose sa_mask has SIGTRAP runs with it blocked for real.
        let blocked = STATUS.replace("SigBlk:\t0000000000000000", "SigBlk:\t0000000000000a10");
        let mut out = [0u8; 1024];
        let facts = Facts { trap_blocked: Some(false), ..Facts::default() };
        let len = rewrite_status(blocked.as_bytes(), &facts, &mut out).unwrap();
        assert!(std::str::from_utf8(&out[..len]).unwrap().contains("\nSigBlk:\t0000000000000a10\n"));
    }

    #[test]
    fn stat_shows_the_programs_signal_sets_and_threads() {
        // Fields 31-34 (pending, blocked, ignored, caught): racewatch's handler is caught, the program
        // blocks SIGTRAP (bit 4, 16) for itself.
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 3 0 12345 1000000 200 \
                    18446744073709551615 1 1 0 0 0 0 0 4096 2576 0 0 0 17 1 0 0 0 0 0\n";
        let facts = Facts {
            trap_caught: Some(false),
            trap_ignored: Some(false),
            trap_blocked: Some(true),
            blocked_in_handler: None,
            trap_pending: Some(false),
            hidden_threads: 1,
            fd_table: None,
            own: Footprint { address_space: 4096, data: 0 },
        };
        let mut out = [0u8; 1024];
        let len = rewrite_stat(stat.as_bytes(), &facts, &mut out).unwrap();
        let want = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 2 0 12345 995904 200 \
                    18446744073709551615 1 1 0 0 0 0 16 4096 2560 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(std::str::from_utf8(&out[..len]).unwrap(), want);
    }

    #[test]
    fn the_handler_mask_is_told_by_glibc_internal_signals() {
        let busy = STATUS.replace("SigBlk:\t0000000000000000", "SigBlk:\tfffffffffffbfeef");
        assert!(shows_handler_mask(busy.as_bytes()));
        // What a program gets from sigfillset and pthread_sigmask: glibc keeps 32 and 33 out.
        let program = STATUS.replace("SigBlk:\t0000000000000000", "SigBlk:\tfffffffe7ffbfeff");
        assert!(!shows_handler_mask(program.as_bytes()));
        assert!(!shows_handler_mask(STATUS.as_bytes()));
    }

    #[test]
    fn a_status_too_long_for_the_buffer_is_not_rewritten() {
        let mut out = [0u8; 16];
        assert_eq!(rewrite_status(STATUS.as_bytes(), &Facts::default(), &mut out), None);
    }

    #[test]
    fn stat_counts_the_programs_threads() {
        let stat = b"4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 3 0 12345 1000 200\n";
        let facts = Facts { hidden_threads: 1, ..Facts::default() };
        let mut out = [0u8; 256];
        let len = rewrite_stat(stat, &facts, &mut out).unwrap();
        assert_eq!(
            std::str::from_utf8(&out[..len]).unwrap(),
            "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 2 0 12345 1000 200\n"
        );
    }
}
