//! Where the runtime's text goes: stderr, or `<log_path>.<pid>`, or — when `log_path` names a directory
//! (an existing one, or any path ending in `/`) — `<dir>/racewatch.<exe>.<host>.<pid>.<start>.log`, one
//! file per process that never collides with another's (`<start>`: the process start in seconds since
//! the epoch; a recycled pid starts later).
//!
//! The log file is created only when there is something to write, mode 0600, by
//! [`secure_file`]: `O_CREAT | O_EXCL | O_NOFOLLOW` in a directory reached without
//! following another user's symlink. racewatch never appends to a file it did
//! not create, and never writes through a symlink. It is opened for each write and
//! closed again, so the runtime holds no descriptor the program could close
//! and reuse; a reopen that finds another file there falls back to stderr. A
//! forked child writes to its own `<log_path>.<child pid>`.
//!
//! stderr is the program's descriptor 2: once the program closes it, the
//! runtime stops writing there (the number may now be the program's data
//! file) until the program puts something at 2 again with `dup2`/`dup3`.
//!
//! Writes never raise `SIGPIPE` and wait for a slow reader only briefly
//! ([`fd::write_all`]); what could not be written is counted in `stats`.
//! [`write`] does not allocate (the path of a log file is formatted into a
//! fixed buffer), so a fatal-signal handler may call it; [`line`] and
//! [`warn`] format into a `String`: ordinary threads only.

use crate::fixed::FixedBuf;
use crate::own_file::FileIdentity;
use crate::stats::{self, Counter};
use crate::sys::{fd, secure_file, thread};
use std::ffi::CStr;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

/// How long one chunk of output may wait for room in a pipe.
const WAIT_MS: i32 = 200;

static STDERR_OK: AtomicBool = AtomicBool::new(true);
static LOG_PATH: OnceLock<LogPath> = OnceLock::new();

/// Where log files go.
enum LogPath {
    /// `<base>.<pid>`.
    Base(String),
    /// `<prefix><pid>.<start>.log`, the prefix being `<dir>/racewatch.<exe>.<host>.`.
    Directory(String),
}

/// The start time (seconds since the epoch) of process `START_PID`, for directory log names.
static START: AtomicU64 = AtomicU64::new(0);
static START_PID: AtomicI32 = AtomicI32::new(0);

const FILE_NONE: u8 = 0;
const FILE_CREATING: u8 = 1;
const FILE_CREATED: u8 = 2;
const FILE_REFUSED: u8 = 3;

/// The log file of process `FILE_PID`: its state, and its identity with the pid its name carries (its
/// own, or that of the process that handed it over before giving up root, [`hand_to`]).
static FILE_STATE: AtomicU8 = AtomicU8::new(FILE_NONE);
static FILE_PID: AtomicI32 = AtomicI32::new(0);
static FILE: FileIdentity = FileIdentity::new();

/// The file a process handed to the user it became ([`hand_to`]), and the `<start>` in its name. A
/// forked child that may not create a file of its own in the directory appends to it.
static HANDED: FileIdentity = FileIdentity::new();
static HANDED_START: AtomicU64 = AtomicU64::new(0);

/// Sends all further output to `<path>.<pid>`, or into the directory `path` names (see the module's
/// documentation); `host` is part of a directory log's name. The file is created on the first write.
pub fn set_log_path(path: &str, host: &str) {
    let is_dir = path.ends_with('/') || secure_file::directory(path.as_bytes(), false).is_ok();
    let target = if is_dir {
        // A fleet's directory may not exist yet on a fresh host (made with mode 0700, never through
        // another user's symlink); when it cannot be made, the first write says so and falls back to
        // stderr.
        let _ = secure_file::directory(path.as_bytes(), true);
        let exe = crate::modules::main_program_path();
        let exe = exe.as_ref().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        let dir = path.trim_end_matches('/');
        LogPath::Directory(format!(
            "{dir}/racewatch.{}.{}.",
            name_part(exe.as_deref().unwrap_or("unknown")),
            name_part(host)
        ))
    } else {
        LogPath::Base(path.to_string())
    };
    let _ = LOG_PATH.set(target);
    note_start();
}

/// A file-name-safe spelling of `text`: path separators, spaces and control characters become `_`.
fn name_part(text: &str) -> String {
    text.chars().map(|c| if c == '/' || c.is_whitespace() || c.is_control() { '_' } else { c }).collect()
}

/// Notes this process's start time for directory log names (a forked child names its file by the time
/// of its first write instead).
fn note_start() {
    let start = crate::sys::identity::start_time().unwrap_or_else(crate::sys::identity::now);
    START.store(start, Ordering::Release);
    START_PID.store(thread::getpid(), Ordering::Release);
}

/// Notes whether descriptor 2 is open now (call at start-up).
pub fn check_stderr() {
    STDERR_OK.store(fd::is_open(2), Ordering::Release);
}

/// The program closed descriptor 2 (or is about to): stop writing there.
pub fn stderr_closed() {
    STDERR_OK.store(false, Ordering::Release);
}

/// The program put a descriptor at 2 on purpose (`dup2`/`dup3`): that is its stderr now.
pub fn stderr_replaced() {
    STDERR_OK.store(true, Ordering::Release);
}

/// Writes `text` as is; counts it in `stats` when it could not be written.
pub fn write(text: &str) {
    if let Some(target) = LOG_PATH.get() {
        if let Some(file) = log_file(target) {
            let ok = fd::write_all(file, text.as_bytes(), WAIT_MS);
            fd::close(file);
            if ok {
                return;
            }
        }
    }
    if !write_stderr(text) {
        stats::bump(Counter::OutputDropped);
    }
}

fn write_stderr(text: &str) -> bool {
    STDERR_OK.load(Ordering::Acquire) && fd::with_stderr(|fd| fd::write_all(fd, text.as_bytes(), WAIT_MS)) == Some(true)
}

/// Writes `racewatch: <message>\n`.
pub fn line(message: fmt::Arguments<'_>) {
    write(&format!("racewatch: {message}\n"));
}

/// Writes `racewatch: warning: <message>\n`.
pub fn warn(message: fmt::Arguments<'_>) {
    write(&format!("racewatch: warning: {message}\n"));
}

/// A fresh descriptor of this process's log file, or `None` (then stderr is used).
/// Room for `<log_path>.<pid>` and its NUL (a longer log_path falls back to stderr).
type PathBuf = FixedBuf<4096>;

fn log_file(target: &LogPath) -> Option<i32> {
    let pid = this_process();
    if FILE_STATE.load(Ordering::Acquire) == FILE_REFUSED {
        return None;
    }
    let mut buf = PathBuf::new();
    // Another thread is creating the file: wait briefly (a bounded wait, so that a handler that
    // interrupted that very thread, at a fatal signal, falls back to stderr instead of spinning).
    for _ in 0..1000 {
        match FILE_STATE.compare_exchange(FILE_NONE, FILE_CREATING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                return match file_path(target, pid, &mut buf) {
                    Ok(path) => create(target, path),
                    Err(why) => refuse(target.base(), why),
                }
            }
            Err(FILE_CREATED) => {
                return match file_path(target, FILE.get().0, &mut buf) {
                    Ok(path) => reopen(path),
                    Err(why) => refuse(target.base(), why),
                }
            }
            Err(FILE_CREATING) => std::thread::yield_now(),
            Err(_) => return None,
        }
    }
    None
}

/// Before the process becomes the user `uid` (it gives up root: `setuid`): makes its log file now, empty,
/// and gives it to that user, who may not be allowed to create files in the log directory; a file made
/// earlier is given too. Quiet: a file that cannot be made now is tried again, and explained, at the
/// first write. Async-signal-safe (POSIX lets a handler call `setuid`).
pub fn hand_to(uid: u32) {
    let Some(target) = LOG_PATH.get() else { return };
    let pid = this_process();
    let mut buf = PathBuf::new();
    let Ok(path) = file_path(target, pid, &mut buf) else { return };
    match FILE_STATE.compare_exchange(FILE_NONE, FILE_CREATING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => match secure_file::create_for(path.to_bytes(), uid) {
            Ok(id) => {
                created(pid, id);
                handed(pid, id);
            }
            Err(_) => FILE_STATE.store(FILE_NONE, Ordering::Release),
        },
        Err(FILE_CREATED) => {
            let mut buf = PathBuf::new();
            let (name_pid, id) = FILE.get();
            let Ok(path) = file_path(target, name_pid, &mut buf) else { return };
            if let Ok(file) = secure_file::reopen(path.to_bytes()) {
                if FILE.is(file) && secure_file::give(file, uid).is_ok() {
                    handed(name_pid, id);
                }
                fd::close(file);
            }
        }
        Err(_) => {}
    }
}

fn handed(pid: i32, id: (u64, u64)) {
    HANDED_START.store(start_of(pid), Ordering::Release);
    HANDED.set(pid, id);
}

/// This process's pid; the first call in a forked child forgets the parent's file, and names the child's
/// by the time of that call (a directory log's `<start>`).
fn this_process() -> i32 {
    let pid = thread::getpid();
    if FILE_PID.load(Ordering::Acquire) != pid {
        FILE_STATE.store(FILE_NONE, Ordering::Release);
        FILE_PID.store(pid, Ordering::Release);
        if START_PID.load(Ordering::Acquire) != pid {
            START.store(crate::sys::identity::now(), Ordering::Release);
            START_PID.store(pid, Ordering::Release);
        }
    }
    pid
}

/// The NUL-terminated path of process `pid`'s log file (this process's, or the one whose handed-over
/// file it uses), formatted into `buf`.
fn file_path<'a>(target: &LogPath, pid: i32, buf: &'a mut PathBuf) -> Result<&'a CStr, &'static str> {
    let formatted = match target {
        LogPath::Base(base) => write!(buf, "{base}.{pid}\0"),
        LogPath::Directory(prefix) => {
            write!(buf, "{prefix}{pid}.{}.log\0", start_of(pid))
        }
    };
    formatted.map_err(|_| "path too long")?;
    CStr::from_bytes_until_nul(buf.as_bytes()).map_err(|_| "path has a NUL byte")
}

/// The `<start>` in the name of process `pid`'s directory log: this process's, or the handed-over file's.
fn start_of(pid: i32) -> u64 {
    match START_PID.load(Ordering::Acquire) == pid {
        true => START.load(Ordering::Acquire),
        false => HANDED_START.load(Ordering::Acquire),
    }
}

impl LogPath {
    fn base(&self) -> &str {
        match self {
            LogPath::Base(base) | LogPath::Directory(base) => base,
        }
    }
}

fn created(name_pid: i32, id: (u64, u64)) {
    FILE.set(name_pid, id);
    FILE_STATE.store(FILE_CREATED, Ordering::Release);
}

fn create(target: &LogPath, path: &CStr) -> Option<i32> {
    match secure_file::create_new(path.to_bytes()) {
        Ok(file) => {
            let (dev, ino, _) = secure_file::identity(file).unwrap_or((0, 0, 0));
            created(thread::getpid(), (dev, ino));
            Some(file)
        }
        Err(err @ secure_file::Refused::Os(libc::EACCES | libc::EPERM)) => {
            adopt_handed(target).or_else(|| refuse(path_text(path), err))
        }
        Err(err) => refuse(path_text(path), err),
    }
}

/// In a forked child that may not create a file of its own (its parent gave up root and handed its file
/// over: a daemon's `fork` after `setuid`): the parent's file, opened for appending while it is still the
/// one handed over. Reports name their process (`pid=`).
fn adopt_handed(target: &LogPath) -> Option<i32> {
    let (pid, id) = HANDED.get();
    if pid == 0 || pid == thread::getpid() {
        return None;
    }
    let mut buf = PathBuf::new();
    let path = file_path(target, pid, &mut buf).ok()?;
    let file = secure_file::reopen(path.to_bytes()).ok()?;
    if !HANDED.is(file) {
        fd::close(file);
        return None;
    }
    created(pid, id);
    Some(file)
}

fn reopen(path: &CStr) -> Option<i32> {
    let file = match secure_file::reopen(path.to_bytes()) {
        Ok(file) => file,
        Err(err) => return refuse(path_text(path), err),
    };
    if FILE.is(file) {
        return Some(file);
    }
    fd::close(file);
    refuse(path_text(path), "replaced by another file")
}

fn path_text(path: &CStr) -> &str {
    path.to_str().unwrap_or("the log file")
}

fn refuse(path: &str, why: impl fmt::Display) -> Option<i32> {
    FILE_STATE.store(FILE_REFUSED, Ordering::Release);
    let mut text = FixedBuf::<8192>::new();
    let _ = writeln!(
        text,
        "racewatch: warning: log_path: cannot use {path} ({why}; racewatch only writes to a file it created); \
         logging to stderr"
    );
    write_stderr(text.as_str());
    None
}
