//! The program's descriptors of a view of one of its own `/proc` files (a snapshot in a memory file that
//! [`crate::proc_view`] made), kept in step with the file they stand for: the kernel makes such a file's
//! text again at every seek and `pread`, and so does racewatch for the view (a monitor that keeps
//! `/proc/self/status` open reads its current thread count); `fstat`, `fstatfs`, `statx` and the
//! descriptor's `/proc/self/fd` link show the file, not the memory file; its `fdinfo` flags are those
//! of a read-only open.
//!
//! A record is checked against the descriptor's inode before it is used: a number the program closed
//! by a way racewatch does not see (`fclose`, a raw `close`) and opened again for another file is not
//! taken for a view.

use crate::proc_view::{self, Target};
use crate::sys::raw;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

const SLOTS: usize = 64;

/// Which file a view stands for.
const STATUS: u64 = 1;
const STAT: u64 = 2;
const STATM: u64 = 3;
const LIMITS: u64 = 4;
const ENVIRON: u64 = 5;

struct Slot {
    fd: AtomicI32,
    /// The process whose file it is (a forked child holds its parent's).
    pid: AtomicI32,
    /// kind | in a `task` directory << 8 | tid << 16.
    what: AtomicU64,
    /// The memory file's inode.
    ino: AtomicU64,
}

static SLOT: [Slot; SLOTS] = [const {
    Slot { fd: AtomicI32::new(-1), pid: AtomicI32::new(0), what: AtomicU64::new(0), ino: AtomicU64::new(0) }
}; SLOTS];
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// What a view stands for: the file, whether the program named it in a `task` directory, and the
/// process whose file it is (0: this one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Viewed {
    pub target: Target,
    pub in_task: bool,
    pub pid: i32,
}

impl Viewed {
    fn pack(self) -> Option<u64> {
        let (kind, tid) = match self.target {
            Target::Status { tid } => (STATUS, tid),
            Target::Stat { tid } => (STAT, tid),
            Target::Statm => (STATM, 0),
            Target::Limits => (LIMITS, 0),
            Target::Environ => (ENVIRON, 0),
            Target::TaskDir | Target::FdDir | Target::ParentTaskDir => return None,
        };
        Some(kind | u64::from(self.in_task) << 8 | u64::from(tid as u32) << 16)
    }

    fn unpack(packed: u64) -> Option<Viewed> {
        let tid = (packed >> 16) as u32 as i32;
        let target = match packed & 0xff {
            STATUS => Target::Status { tid },
            STAT => Target::Stat { tid },
            STATM => Target::Statm,
            LIMITS => Target::Limits,
            ENVIRON => Target::Environ,
            _ => return None,
        };
        Some(Viewed { target, in_task: packed & 0x100 != 0, pid: 0 })
    }

    /// The file's name as the kernel gives it in the descriptor's link: `/proc/<pid>/status`, or
    /// `/proc/<pid>/task/<tid>/status` when named in a `task` directory.
    pub fn path(self) -> FileName {
        let pid = if self.pid > 0 { self.pid } else { raw::getpid() };
        let (name, tid) = match self.target {
            Target::Status { tid } => ("status", tid),
            Target::Stat { tid } => ("stat", tid),
            Target::Statm => ("statm", pid),
            Target::Limits => ("limits", pid),
            _ => ("environ", pid),
        };
        let mut out = [0u8; 64];
        let mut w = std::io::Cursor::new(&mut out[..]);
        let written = if self.in_task {
            std::io::Write::write_fmt(&mut w, format_args!("/proc/{pid}/task/{tid}/{name}\0"))
        } else {
            std::io::Write::write_fmt(&mut w, format_args!("/proc/{pid}/{name}\0"))
        };
        let len = if written.is_ok() { w.position() as usize - 1 } else { 0 };
        FileName { bytes: out, len }
    }
}

/// The name of the file a view stands for, as the kernel gives it.
pub struct FileName {
    bytes: [u8; 64],
    len: usize,
}

impl FileName {
    pub fn as_cstr(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_with_nul(&self.bytes[..=self.len]).unwrap_or(c"/proc/self/status")
    }
}

/// Whether the program named the file in a `task` directory (`/proc/self/task/<tid>/…`,
/// `/proc/thread-self/…`): its link then names it there.
pub fn names_task(path: &[u8]) -> bool {
    path.windows(5).any(|w| w == b"task/") || path.windows(11).any(|w| w == b"thread-self")
}

/// The inode of what descriptor `fd` refers to.
fn inode(fd: i32) -> Option<u64> {
    // SAFETY: a zeroed `stat` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = raw::syscall6(libc::SYS_fstat, [fd as u64, &mut st as *mut libc::stat as u64, 0, 0, 0, 0]);
    (rc == 0).then_some(st.st_ino)
}

/// Descriptor `fd` of the program's now holds a view of `viewed`.
pub fn register(fd: i32, viewed: Viewed) {
    let (Some(packed), Some(ino)) = (viewed.pack(), inode(fd)) else { return };
    forget(fd);
    for slot in &SLOT {
        if slot.fd.compare_exchange(-1, -2, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            slot.what.store(packed, Ordering::Release);
            slot.pid.store(if viewed.pid > 0 { viewed.pid } else { raw::getpid() }, Ordering::Release);
            slot.ino.store(ino, Ordering::Release);
            slot.fd.store(fd, Ordering::Release);
            COUNT.fetch_add(1, Ordering::AcqRel);
            return;
        }
    }
}

/// Descriptor `from`, a view, is now number `to` (`from` closed).
pub fn moved(from: i32, to: i32) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    forget(to);
    if let Some(slot) = SLOT.iter().find(|slot| slot.fd.load(Ordering::Acquire) == from) {
        slot.fd.store(to, Ordering::Release);
    }
}

/// The program duplicated view `old` as `new` (`dup`, `dup2`, `dup3`, `F_DUPFD`): `new` is the same view.
pub fn duplicated(old: i32, new: i32) {
    if old != new && new >= 0 {
        if let Some(viewed) = lookup(old) {
            register(new, viewed);
        }
    }
}

/// The program closed `fd` (or a `dup2` replaced it).
pub fn forget(fd: i32) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    for slot in &SLOT {
        if slot.fd.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            COUNT.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether the program holds any view.
pub fn any() -> bool {
    COUNT.load(Ordering::Acquire) != 0
}

/// The program closes `first..=last`.
pub fn forget_range(first: u64, last: u64) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    for slot in &SLOT {
        let fd = slot.fd.load(Ordering::Acquire);
        if fd >= 0 && (first..=last).contains(&(fd as u64)) {
            forget(fd);
        }
    }
}

/// What `fd` is a view of, when it is one.
pub fn lookup(fd: i32) -> Option<Viewed> {
    if COUNT.load(Ordering::Acquire) == 0 || fd < 0 {
        return None;
    }
    let slot = SLOT.iter().find(|slot| slot.fd.load(Ordering::Acquire) == fd)?;
    let mut viewed = Viewed::unpack(slot.what.load(Ordering::Acquire))?;
    viewed.pid = slot.pid.load(Ordering::Acquire);
    if inode(fd) != Some(slot.ino.load(Ordering::Acquire)) {
        forget(fd); // Closed unseen, and the number taken again.
        return None;
    }
    Some(viewed)
}

/// Before a seek or a `pread` of the program's on `fd`: a view gets the file's current text, as the
/// kernel makes it again.
pub fn refresh(fd: i32) {
    let Some(viewed) = lookup(fd) else { return };
    if viewed.pid == raw::getpid() {
        proc_view::view_again(fd, viewed.path().as_cstr(), viewed.target);
    } else {
        // A forked child's view of its parent's file, made again with the parent program's values (a
        // grandchild's is left as it is).
        proc_view::parents_again(fd, viewed.path().as_cstr());
    }
}

/// The path `fstat`, `fstatfs` and `statx` of view `fd` look at instead (the file it stands for).
pub fn stands_for(fd: i32) -> Option<FileName> {
    lookup(fd).map(Viewed::path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_pack_and_name_their_files() {
        for target in
            [Target::Status { tid: 77 }, Target::Stat { tid: 5 }, Target::Statm, Target::Limits, Target::Environ]
        {
            for in_task in [false, true] {
                let viewed = Viewed { target, in_task, pid: 0 };
                assert_eq!(Viewed::unpack(viewed.pack().unwrap()), Some(viewed));
            }
        }
        assert_eq!(Viewed { target: Target::TaskDir, in_task: false, pid: 0 }.pack(), None);
        let pid = raw::getpid();
        let name = |viewed: Viewed| viewed.path().as_cstr().to_str().unwrap().to_string();
        assert_eq!(
            name(Viewed { target: Target::Status { tid: 77 }, in_task: true, pid: 0 }),
            format!("/proc/{pid}/task/77/status")
        );
        assert_eq!(name(Viewed { target: Target::Statm, in_task: false, pid: 0 }), format!("/proc/{pid}/statm"));
        assert_eq!(
            name(Viewed { target: Target::Limits, in_task: false, pid: 42 }),
            "/proc/42/limits",
            "a forked child's view of its parent's file"
        );
        assert!(names_task(b"/proc/thread-self/status") && names_task(b"/proc/self/task/5/stat"));
        assert!(!names_task(b"/proc/self/status"));
    }

    #[test]
    fn a_number_taken_again_is_not_a_view() {
        let file = std::fs::File::open("/proc/self/cmdline").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        register(fd, Viewed { target: Target::Statm, in_task: false, pid: 0 });
        assert!(lookup(fd).is_some());
        drop(file);
        let other = std::fs::File::open("/dev/null").unwrap();
        let again = std::os::fd::AsRawFd::as_raw_fd(&other);
        assert_eq!(again, fd, "the lowest number again");
        assert_eq!(lookup(again), None, "another inode");
        assert_eq!(lookup(again), None);
    }
}
