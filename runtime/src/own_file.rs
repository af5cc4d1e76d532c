//! The files a process writes whole, and may write again (`coverage_path`, `races_path`):
//! `<prefix>.<pid>`, mode 0600, created by [`secure_file`] (never through another user's symlink,
//! `O_EXCL`: a name something already holds, a planted symlink or another file, is left alone and the
//! record is not written). A later write replaces the process's own file by a fresh one renamed over it,
//! and only while it is still the file this process created. A forked child writes its own file.

use crate::fixed::FixedBuf;
use crate::sys::{secure_file, thread};
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};

const NONE: u8 = 0;
const WRITTEN: u8 = 1;
const REFUSED: u8 = 2;

/// One `<prefix>.<pid>` file of this process.
pub struct OwnFile {
    pid: AtomicI32,
    state: AtomicU8,
    /// The file written: its identity, and the pid its name carries (this process's, or the one whose
    /// handed-over file it filled).
    id: FileIdentity,
    /// The file this process, or the parent it was forked from, made and handed over before giving up
    /// root ([`OwnFile::hand_to`]).
    handed: FileIdentity,
}

/// A file of racewatch's: the pid its name carries, its device and inode. Lock-free, so a handler may
/// read it; the pid is stored last.
pub struct FileIdentity {
    pid: AtomicI32,
    dev: AtomicU64,
    ino: AtomicU64,
}

impl Default for FileIdentity {
    fn default() -> Self {
        FileIdentity::new()
    }
}

impl FileIdentity {
    pub const fn new() -> FileIdentity {
        FileIdentity { pid: AtomicI32::new(0), dev: AtomicU64::new(0), ino: AtomicU64::new(0) }
    }

    pub fn set(&self, pid: i32, (dev, ino): (u64, u64)) {
        self.dev.store(dev, Ordering::Release);
        self.ino.store(ino, Ordering::Release);
        self.pid.store(pid, Ordering::Release);
    }

    pub fn get(&self) -> (i32, (u64, u64)) {
        (self.pid.load(Ordering::Acquire), (self.dev.load(Ordering::Acquire), self.ino.load(Ordering::Acquire)))
    }

    /// Whether the open file `fd` is this file.
    pub fn is(&self, fd: i32) -> bool {
        secure_file::identity(fd).map(|(dev, ino, _)| (dev, ino)) == Some(self.get().1)
    }
}

/// Why the file was not written.
#[derive(Debug)]
pub enum NotWritten {
    /// This time.
    Refused(secure_file::Refused),
    /// An earlier write of this process was refused: nothing more is written.
    Before,
}

impl fmt::Display for NotWritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotWritten::Refused(why) => {
                write!(f, "{why}; racewatch writes only a file it created, never through another user's symlink")
            }
            NotWritten::Before => f.write_str("an earlier write was refused"),
        }
    }
}

impl Default for OwnFile {
    fn default() -> Self {
        OwnFile::new()
    }
}

impl OwnFile {
    pub const fn new() -> OwnFile {
        OwnFile {
            pid: AtomicI32::new(0),
            state: AtomicU8::new(NONE),
            id: FileIdentity::new(),
            handed: FileIdentity::new(),
        }
    }

    /// Writes `contents` as the whole of `<prefix>.<pid>`; returns that path. In a forked child that may
    /// not create a file there (its parent gave up root), the parent's handed-over file instead, while it
    /// is still empty. Calls do not overlap (one thread writes each file).
    pub fn write(&self, prefix: &str, contents: &str) -> Result<String, NotWritten> {
        let pid = self.this_process();
        let (name_pid, ours) = match self.state.load(Ordering::Acquire) {
            NONE => (pid, None),
            WRITTEN => {
                let (name_pid, id) = self.id.get();
                (name_pid, Some(id))
            }
            _ => return Err(NotWritten::Before),
        };
        let path = format!("{prefix}.{name_pid}");
        let result = match secure_file::replace(path.as_bytes(), contents.as_bytes(), ours) {
            Ok(id) => Ok((path, name_pid, id)),
            Err(denied @ secure_file::Refused::Os(libc::EACCES | libc::EPERM)) if ours.is_none() => {
                self.fill_handed(prefix, pid, contents).ok_or(denied)
            }
            Err(why) => Err(why),
        };
        match result {
            Ok((path, name_pid, id)) => {
                self.written(name_pid, id);
                Ok(path)
            }
            Err(why) => {
                self.state.store(REFUSED, Ordering::Release);
                Err(NotWritten::Refused(why))
            }
        }
    }

    /// The handed-over file of the process this one was forked from, filled with `contents` (only while
    /// still empty: [`secure_file::replace`]).
    fn fill_handed(&self, prefix: &str, pid: i32, contents: &str) -> Option<(String, i32, (u64, u64))> {
        let (handed_pid, handed) = self.handed.get();
        if handed_pid == 0 || handed_pid == pid {
            return None;
        }
        let path = format!("{prefix}.{handed_pid}");
        let id = secure_file::replace(path.as_bytes(), contents.as_bytes(), Some(handed)).ok()?;
        Some((path, handed_pid, id))
    }

    /// Before the process becomes the user `uid` (it gives up root): creates `<prefix>.<pid>` now, empty,
    /// and gives it to that user, so that a later [`write`](Self::write) (this process's, or a forked
    /// child's) can fill it in a directory that user may not write to. Nothing once the file exists, or
    /// when it cannot be made (the later write then says why). Async-signal-safe: no allocation.
    pub fn hand_to(&self, prefix: &str, uid: u32) {
        let pid = self.this_process();
        if self.state.load(Ordering::Acquire) != NONE {
            return;
        }
        let mut path = FixedBuf::<4096>::new();
        if write!(path, "{prefix}.{pid}").is_ok() {
            if let Ok(id) = secure_file::create_for(path.as_bytes(), uid) {
                self.written(pid, id);
                self.handed.set(pid, id);
            }
        }
    }

    /// This process's pid; a forked child forgets its parent's file (but for the one handed over).
    fn this_process(&self) -> i32 {
        let pid = thread::getpid();
        if self.pid.swap(pid, Ordering::AcqRel) != pid {
            self.state.store(NONE, Ordering::Release);
        }
        pid
    }

    fn written(&self, name_pid: i32, id: (u64, u64)) {
        self.id.set(name_pid, id);
        self.state.store(WRITTEN, Ordering::Release);
    }
}
