//! What a child reads of its parent's (or an earlier ancestor's) `/proc` files, as they would read
//! without racewatch.
//!
//! A child the program starts often reports on its parent: a supervisor's helper prints the parent's
//! `SigCgt`, a test checks the parent's thread count, a `system("grep Sig /proc/<pid>/status")` does the
//! same through a shell. Racewatch in the parent shows there (its `SIGTRAP` handler in `SigCgt`, a
//! `SIGTRAP` it kept virtual missing from `SigBlk`, its reporter thread in `Threads:` and the `task`
//! listing). A forked child runs the same racewatch (its memory is a copy of the parent's): at the fork
//! it notes what the parent's program had set for `SIGTRAP`. A new image (`exec`, a spawn, `system`,
//! `popen`) is told in its environment (`RACEWATCH_VIEW`, which its racewatch takes out of `environ`
//! with racewatch's other variables, and passes on to its own children): the process's pid, its
//! program's `SIGTRAP` disposition and its main thread's `SIGTRAP` mask bit, for the process that starts
//! it and those that process was told about (8 at most). Reads of those processes' `status`, `stat` and
//! `task` listing then get their programs' own values, as their own reads do ([`crate::proc_view`]).
//! Their reporter threads are told by name. The item `fd<size>` tells the new image the size its
//! descriptor table would have without racewatch's descriptors ([`crate::sys::fd::child_table_size`]),
//! which its own `status` then shows as `FDSize`. What a program changes of `SIGTRAP` after the fork or the
//! `exec` is not seen (the bits then stay as they were); a program without racewatch (a static binary)
//! sees the variable, as it sees racewatch in `LD_PRELOAD`.

use crate::proc_view::{self, Facts, Target};
use crate::sys::{raw, real, signal};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a process's program had set for `SIGTRAP` when this one was forked from it or started by it (or
/// by one it started): packed by [`View::pack`], 0 for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct View {
    pid: i32,
    /// [`DEFAULT`], [`IGNORED`] or [`CAUGHT`].
    action: u8,
    /// Whether its main thread had `SIGTRAP` blocked: [`UNKNOWN`], [`NO`] or [`YES`].
    blocked: u8,
}

const DEFAULT: u8 = 0;
const IGNORED: u8 = 1;
const CAUGHT: u8 = 2;
const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

impl View {
    fn pack(self) -> u64 {
        u64::from(self.pid as u32) << 16 | u64::from(self.action) << 8 | u64::from(self.blocked)
    }

    fn unpack(packed: u64) -> Option<View> {
        let pid = (packed >> 16) as i32;
        let (action, blocked) = ((packed >> 8) as u8, packed as u8);
        (pid > 0 && action <= CAUGHT && blocked <= YES).then_some(View { pid, action, blocked })
    }

    /// This process's, when racewatch's `SIGTRAP` handler is in the kernel (else the kernel shows the
    /// program's).
    fn own() -> Option<View> {
        if !signal::is_installed() {
            return None;
        }
        // The process the records are for (not `getpid`/`getppid` in a fork handler: a seccomp deny-list
        // of calls racewatch never makes may have them, and the fork handler runs in every child).
        let pid = signal::recorded_process();
        let action = match signal::program_action().sa_sigaction {
            libc::SIG_DFL => DEFAULT,
            libc::SIG_IGN => IGNORED,
            _ => CAUGHT,
        };
        let blocked = match signal::trap_blocked_in(pid) {
            None => UNKNOWN,
            Some(false) => NO,
            Some(true) => YES,
        };
        Some(View { pid, action, blocked })
    }
}

/// The parent this process was forked from, when racewatch's handler was in its kernel at the fork.
static FORKED: AtomicU64 = AtomicU64::new(0);
/// The processes this one's environment told of (`RACEWATCH_VIEW`), in its order.
const TOLD_SLOTS: usize = 8;
static TOLD: [AtomicU64; TOLD_SLOTS] = [const { AtomicU64::new(0) }; TOLD_SLOTS];

/// The environment variable a new image is told of in.
pub const VARIABLE: &[u8] = b"RACEWATCH_VIEW=";

/// The name racewatch's reporter thread gives itself (`comm`, 15 bytes at most).
const REPORTER_NAME: &[u8] = b"racewatch-repor";

/// In a forked child, first thing (the `pthread_atfork` child handler, before the parent's state is
/// forgotten): notes the parent and what its program had set for `SIGTRAP`.
pub fn note_fork() {
    FORKED.store(View::own().map_or(0, View::pack), Ordering::Release);
}

/// Before `main`: notes the processes `value` (of [`VARIABLE`]: `pid:action:blocked` items, comma
/// separated) tells of; malformed items are skipped, and so is this process's own pid (an `exec` keeps
/// it: the new image's reads of its own files are its own program's).
pub fn note_told(value: &[u8]) {
    // The size this image's descriptor table would have without racewatch (`fd<size>`, see
    // [`for_new_image`]).
    if let Some(size) = value.split(|&b| b == b',').find_map(|item| item.strip_prefix(FD_TABLE)) {
        crate::sys::fd::note_inherited_table(proc_view::number(size).map_or(0, |n| n as u64));
    }
    // The program's memory budgets (`as<soft>:<hard>`, `data<soft>:<hard>`, see [`for_new_image`]).
    value.split(|&b| b == b',').for_each(crate::sys::budget::note_told);
    let own = raw::getpid();
    let items = value
        .split(|&b| b == b',')
        .filter(|item| proc_view::number(item.split(|&b| b == b':').next().unwrap_or_default()) != Some(own))
        .filter_map(|item| {
            let mut fields = item.split(|&b| b == b':');
            let pid = proc_view::number(fields.next()?)?;
            let action = fields.next()?.first()?.wrapping_sub(b'0');
            let blocked = fields.next()?.first()?.wrapping_sub(b'0');
            View::unpack(View { pid, action, blocked }.pack())
        });
    for (slot, view) in TOLD.iter().zip(items) {
        slot.store(view.pack(), Ordering::Release);
    }
}

/// Every process this one has a view of: its fork parent first, then those it was told of.
fn views() -> impl Iterator<Item = View> {
    std::iter::once(&FORKED).chain(&TOLD).filter_map(|slot| View::unpack(slot.load(Ordering::Acquire)))
}

/// The value of [`VARIABLE`] a new image started now gets (`None`: nothing to tell): this process's
/// view, its fork parent's and those it was told of, each process once, 8 at most.
pub fn for_new_image() -> Option<Vec<u8>> {
    let mut value = Vec::new();
    let mut told = 0;
    let mut seen = [0i32; TOLD_SLOTS];
    for view in View::own().into_iter().chain(views()) {
        if told == TOLD_SLOTS || seen[..told].contains(&view.pid) {
            continue;
        }
        seen[told] = view.pid;
        told += 1;
        if !value.is_empty() {
            value.push(b',');
        }
        value.extend_from_slice(format!("{}:{}:{}", view.pid, view.action, view.blocked).as_bytes());
    }
    // The descriptor table a new image starts with is this process's (an `exec`) or a copy sized for its
    // highest descriptor (a spawn, a fork before the `exec`): grown by racewatch's descriptors, which
    // the image's `FDSize` would show (set 39's forked `grep`: 32768 for 64).
    if let Some(size) = crate::sys::fd::child_table_size() {
        if !value.is_empty() {
            value.push(b',');
        }
        value.extend_from_slice(FD_TABLE);
        value.extend_from_slice(size.to_string().as_bytes());
    }
    // The program's memory budgets, which the kernel's limits exceed by racewatch's footprint.
    let budgets = crate::sys::budget::items();
    if !budgets.is_empty() {
        if !value.is_empty() {
            value.push(b',');
        }
        value.extend_from_slice(&budgets);
    }
    (!value.is_empty()).then_some(value)
}

/// The item of [`VARIABLE`] that gives the new image's descriptor table size without racewatch.
const FD_TABLE: &[u8] = b"fd";

/// Whether this process has a view of any other process's files ([`classify`] may find one). Not in a
/// sandbox (the child's own seccomp filter may kill the reads that make the view).
pub fn any() -> bool {
    views().next().is_some() && !crate::sys::confined::here() && !crate::detector::is_sandboxed()
}

/// What `path` names of the files of a process this one has a view of (`Target::TaskDir` for its `task`
/// listing), with that process's pid; `None` for anything else (the process's own files, other
/// processes', or none to speak for). (A process that is gone has no files to read; its pid taken again
/// by an unrelated process before this one reads it would get the gone program's `SIGTRAP` bits.)
pub fn classify(path: &[u8]) -> Option<(Target, i32)> {
    if !any() {
        return None;
    }
    let rest = path.strip_prefix(b"/proc/")?;
    let pid = proc_view::number(&rest[..rest.iter().position(|&b| b == b'/')?])?;
    views().find(|view| view.pid == pid)?;
    let target = proc_view::classify(path, pid, 0, |tid| thread_of(pid, tid))?;
    matches!(target, Target::Status { .. } | Target::Stat { .. } | Target::TaskDir).then_some((target, pid))
}

/// The facts of thread `tid` of `process` (one [`classify`] named), as its program's own reads would
/// show them.
pub fn facts_for(process: i32, tid: i32) -> Facts {
    let view =
        views().find(|view| view.pid == process).unwrap_or(View { pid: process, action: DEFAULT, blocked: UNKNOWN });
    let blocked = match view.blocked {
        NO if tid == process => Some(false),
        YES if tid == process => Some(true),
        _ => None,
    };
    Facts {
        trap_caught: Some(view.action == CAUGHT),
        trap_ignored: Some(view.action == IGNORED),
        trap_blocked: blocked,
        blocked_in_handler: None,
        trap_pending: (blocked == Some(false)).then_some(false),
        hidden_threads: reporter_threads(process),
        fd_table: None,
        own: Default::default(),
    }
}

/// Whether entry `tid` of a `task` listing of a process this one has a view of is racewatch's
/// reporter there.
pub fn hidden_in_listing(tid: i32) -> bool {
    any() && views().any(|view| hidden_task(view.pid, tid))
}

/// Whether `tid` is a thread of process `parent`.
fn thread_of(parent: i32, tid: i32) -> bool {
    raw::tgkill(parent, tid, 0) != -i64::from(libc::ESRCH)
}

/// Whether thread `tid` of `parent`, an entry of its `task` listing, is racewatch's reporter (its name).
fn hidden_task(parent: i32, tid: i32) -> bool {
    let mut path = crate::fixed::FixedBuf::<64>::new();
    let _ = std::fmt::Write::write_fmt(&mut path, format_args!("/proc/{parent}/task/{tid}/comm\0"));
    let fd = real::open(false, path.as_bytes().as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC, 0);
    if fd < 0 {
        return false;
    }
    let mut name = [0u8; 32];
    let n = raw::syscall6(libc::SYS_read, [fd as u64, name.as_mut_ptr() as u64, name.len() as u64, 0, 0, 0]);
    real::close(fd);
    usize::try_from(n).is_ok_and(|n| name[..n].strip_suffix(b"\n").unwrap_or(&name[..n]) == REPORTER_NAME)
}

/// How many of the parent's threads are racewatch's reporter now (0 or 1).
fn reporter_threads(parent: i32) -> u32 {
    let mut path = crate::fixed::FixedBuf::<32>::new();
    let _ = std::fmt::Write::write_fmt(&mut path, format_args!("/proc/{parent}/task\0"));
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let fd = real::open(false, path.as_bytes().as_ptr().cast(), flags, 0);
    if fd < 0 {
        return 0;
    }
    let mut count = 0;
    let mut buf = [0u8; 2048];
    loop {
        let n = raw::syscall6(libc::SYS_getdents64, [fd as u64, buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0]);
        let Ok(len) = usize::try_from(n) else { break };
        if len == 0 {
            break;
        }
        let mut at = 0;
        while let Some(Ok((reclen, name))) = proc_view::dirent_at(&buf[..len], at) {
            count += u32::from(proc_view::number(name).is_some_and(|tid| hidden_task(parent, tid)));
            at += reclen;
        }
    }
    real::close(fd);
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_a_new_image_is_told_of_is_read_back_and_passed_on() {
        let own = format!("{}:2:2,", raw::getpid());
        note_told(format!("{own}123:2:1,abc,456:0:2,7:9:0,-5:0:0").as_bytes());
        let told: Vec<View> = TOLD.iter().filter_map(|slot| View::unpack(slot.load(Ordering::Acquire))).collect();
        assert_eq!(
            told,
            [View { pid: 123, action: CAUGHT, blocked: NO }, View { pid: 456, action: DEFAULT, blocked: YES }]
        );
        assert_eq!(facts_for(456, 456).trap_blocked, Some(true));
        assert_eq!(facts_for(123, 124).trap_blocked, None, "only the main thread's bit is known");
        assert_eq!(facts_for(123, 123).trap_caught, Some(true));
        // No handler of racewatch's in this process: only what it was told of goes on.
        assert_eq!(for_new_image().as_deref(), Some(&b"123:2:1,456:0:2"[..]));
    }
}
