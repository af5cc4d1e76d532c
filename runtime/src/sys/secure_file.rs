//! Creating the runtime's files (`log_path`, `coverage_path`, `races_path`) so that no other user can
//! redirect them, and knowing when the process runs in secure-execution mode.
//!
//! The rules, for every file the runtime writes:
//! - The path is walked one component at a time with `openat(O_PATH | O_DIRECTORY | O_NOFOLLOW)` from `/`
//!   (or the working directory for a relative path). A symlink on the way is followed only when it
//!   belongs to root or to the process's effective user: a link another user planted is never followed,
//!   in a directory component or at the end (`fs.protected_symlinks` only covers sticky directories, and
//!   not every system turns it on).
//! - The file itself is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 (reports carry absolute
//!   addresses): nothing that is already there, a symlink included, is ever opened for writing. A file
//!   is reopened only with `O_NOFOLLOW`, and the caller checks it is still the one it created
//!   ([`identity`]).
//! - A file rewritten whole ([`replace`]) is written to a fresh temporary file (`O_EXCL`, same directory)
//!   renamed over the old one, after checking that the old one is still the runtime's.
//! - Directories the runtime creates on the way (`log_path=DIR/`) get mode 0700; root's 0711, so that a
//!   program that gives up root still reaches the files made for it there ([`create_for`]), while no
//!   other user can list them or create anything.
//!
//! Everything here is async-signal-safe: raw system calls (no `errno`), no allocation (paths are copied
//! into fixed buffers on the stack), so a fatal-signal handler may create the log file.

use super::raw::{geteuid, syscall6};
use std::fmt;

/// Mode of every file the runtime creates.
pub const FILE_MODE: u32 = 0o600;
/// Mode of every directory the runtime creates ([`ROOT_DIR_MODE`] for root).
pub const DIR_MODE: u32 = 0o700;
/// Mode of every directory the runtime creates as root: searchable, not listable, by other users.
pub const ROOT_DIR_MODE: u32 = 0o711;

/// Longest path handled (with symlinks expanded), as the kernel's `PATH_MAX`.
const PATH_MAX: usize = 4096;
/// Longest file name, as the kernel's `NAME_MAX`.
const NAME_MAX: usize = 255;
/// Symlinks followed in one walk at most, as the kernel's limit.
const MAX_LINKS: u32 = 40;

/// Why a file was not created or opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A symlink in the path belongs to another user.
    ForeignSymlink,
    /// Something is already there (a file, a symlink) at a name the runtime must create.
    Exists,
    /// The path, or a component of it, is too long; or it holds a NUL byte.
    BadPath,
    /// The system call failed with this errno.
    Os(i32),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::ForeignSymlink => f.write_str("a symlink in the path belongs to another user"),
            Refused::Exists => f.write_str("something is already there"),
            Refused::BadPath => f.write_str("path too long or not a path"),
            Refused::Os(errno) => f.write_str(errno_text(*errno)),
        }
    }
}

/// A short text for the errors a file creation meets (no `strerror`: it is not async-signal-safe).
fn errno_text(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT => "no such file or directory",
        libc::EACCES | libc::EPERM => "permission denied",
        libc::ENOTDIR => "not a directory",
        libc::ELOOP => "too many symlinks",
        libc::EROFS => "read-only file system",
        libc::ENOSPC | libc::EDQUOT => "no space left",
        libc::EMFILE | libc::ENFILE => "too many open files",
        libc::ENAMETOOLONG => "name too long",
        libc::EISDIR => "is a directory",
        _ => "system error",
    }
}

/// Whether the process runs in secure-execution mode (`AT_SECURE`: setuid, setgid, file capabilities,
/// or a security module's say): its environment comes from a less privileged caller.
pub fn secure_execution() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel left; it takes and returns plain integers.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Removes `RACEWATCH_OPTIONS` (and `racewatch run`'s `RACEWATCH_RUN_OPTIONS`) from the environment of a
/// process in secure-execution mode, as the loader
/// removes `LD_PRELOAD`: a program that becomes fully privileged and execs (`setuid(0)`, then a shell) must
/// not hand its caller's options to a process that would honour them. Call from the constructor.
pub fn forget_caller_options() {
    // SAFETY: a NUL-terminated literal. unsetenv is not thread-safe: the runtime's constructor calls this
    // while the process starts, before `main`, as the loader edits the environment in the same case.
    unsafe {
        libc::unsetenv(c"RACEWATCH_OPTIONS".as_ptr());
        libc::unsetenv(c"RACEWATCH_RUN_OPTIONS".as_ptr());
    }
}

/// Creates the file `path` (mode 0600, write-only, appending, close-on-exec) following the rules of the
/// module; fails when anything is already there. Returns the descriptor.
pub fn create_new(path: &[u8]) -> Result<i32, Refused> {
    let (dir, name) = parent(path)?;
    let dir = walk(dir, false)?;
    dir.create(&name)
}

/// Opens the existing file `path` for appending (never through a symlink, and only a regular file).
/// The caller checks it is still the file it created ([`identity`]).
pub fn reopen(path: &[u8]) -> Result<i32, Refused> {
    let (dir, name) = parent(path)?;
    let dir = walk(dir, false)?;
    let fd = check(openat(dir.0, &name, OPEN_FLAGS, 0))?;
    if identity(fd).is_none_or(|(_, _, mode)| mode & libc::S_IFMT != libc::S_IFREG) {
        close(fd);
        return Err(Refused::Os(libc::EINVAL));
    }
    Ok(fd)
}

/// Creates the file `path` as [`create_new`] does, empty, and gives it to the user `uid` (group
/// unchanged): a process about to become that user may reopen it afterwards where it could create none.
/// Returns its identity (device, inode).
pub fn create_for(path: &[u8], uid: u32) -> Result<(u64, u64), Refused> {
    let fd = create_new(path)?;
    let given = give(fd, uid);
    let id = identity(fd);
    close(fd);
    given?;
    id.map(|(dev, ino, _)| (dev, ino)).ok_or(Refused::Os(libc::EIO))
}

/// Gives the open file `fd` to the user `uid` (`fchown`, group unchanged).
pub fn give(fd: i32, uid: u32) -> Result<(), Refused> {
    check(syscall6(libc::SYS_fchown, [fd as u64, u64::from(uid), u64::from(u32::MAX), 0, 0, 0])).map(drop)
}

/// Opens the directory `path` (walking it as the module says), creating missing components (0700, root's 0711)
/// when `create`; `Ok` when it is a directory the runtime may use.
pub fn directory(path: &[u8], create: bool) -> Result<(), Refused> {
    walk(path, create).map(drop)
}

/// Writes `contents` as the whole of `path`: the first time (`ours` is `None`) by creating it (fails when
/// anything is there); later by writing a fresh temporary file beside it and renaming it over `path`,
/// only while `path` is still the file `ours` names (device and inode). Returns the identity of the file
/// now at `path`, for the next call.
pub fn replace(path: &[u8], contents: &[u8], ours: Option<(u64, u64)>) -> Result<(u64, u64), Refused> {
    let (dir_path, name) = parent(path)?;
    let dir = walk(dir_path, false)?;
    let Some(ours) = ours else {
        let fd = dir.create(&name)?;
        return finish(fd, contents);
    };
    // `.<name>.<n>.tmp`: hidden, so that readers listing `<prefix>.*` never take it for a record.
    let mut tmp = Name::new();
    let mut created = None;
    for n in 0..100u32 {
        tmp = Name::new();
        tmp.push(b".").push(name.bytes()).push(b".");
        push_decimal(&mut tmp, u64::from(n));
        tmp.push(b".tmp");
        if tmp.overflow {
            return Err(Refused::BadPath);
        }
        match dir.create(&tmp) {
            Ok(fd) => {
                created = Some(fd);
                break;
            }
            Err(Refused::Exists) => continue,
            // A directory the process may no longer write (it gave up root after its file was made
            // and given to it: [`create_for`]).
            Err(denied @ Refused::Os(libc::EACCES | libc::EPERM)) => {
                return fill_empty(&dir, &name, ours, contents).map_err(|_| denied)
            }
            Err(other) => return Err(other),
        }
    }
    let fd = created.ok_or(Refused::Exists)?;
    let written = finish(fd, contents);
    let current = stat_at(dir.0, &name, libc::AT_SYMLINK_NOFOLLOW).map(|st| (st.st_dev, st.st_ino));
    let result = match (written, current) {
        (Ok(new), Ok(current)) if current == ours => {
            check(syscall6(libc::SYS_renameat, [dir.0 as u64, tmp.ptr(), dir.0 as u64, name.ptr(), 0, 0])).map(|_| new)
        }
        (Err(err), _) | (_, Err(err)) => Err(err),
        // Another file took the place of ours: left alone.
        (Ok(_), Ok(_)) => Err(Refused::Exists),
    };
    if result.is_err() {
        syscall6(libc::SYS_unlinkat, [dir.0 as u64, tmp.ptr(), 0, 0, 0, 0]);
    }
    result
}

/// Writes `contents` into the file `name` of `dir` in place, only while it is still the file `ours` names
/// and still empty (nothing to truncate). For a file made by [`create_for`], where no file can be created
/// beside it for [`replace`]'s rename.
fn fill_empty(dir: &Dir, name: &Name, ours: (u64, u64), contents: &[u8]) -> Result<(u64, u64), Refused> {
    let flags = libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK;
    let fd = check(openat(dir.0, name, flags, 0))?;
    let result = match stat_at(fd, &Name::new(), libc::AT_EMPTY_PATH) {
        Ok(st) if (st.st_dev, st.st_ino) == ours && st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_size == 0 => {
            write_all(fd, contents).map(|()| ours)
        }
        Ok(_) => Err(Refused::Exists),
        Err(err) => Err(err),
    };
    close(fd);
    result
}

/// Writes `contents` to the fresh file `fd`, closes it and returns its identity.
fn finish(fd: i32, contents: &[u8]) -> Result<(u64, u64), Refused> {
    let written = write_all(fd, contents);
    let id = identity(fd);
    close(fd);
    written?;
    id.map(|(dev, ino, _)| (dev, ino)).ok_or(Refused::Os(libc::EIO))
}

fn write_all(fd: i32, mut rest: &[u8]) -> Result<(), Refused> {
    while !rest.is_empty() {
        let n = syscall6(libc::SYS_write, [fd as u64, rest.as_ptr() as u64, rest.len() as u64, 0, 0, 0]);
        if n == -i64::from(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            return Err(Refused::Os(if n == 0 { libc::EIO } else { -n as i32 }));
        }
        rest = &rest[n as usize..];
    }
    Ok(())
}

/// The device, inode and mode of an open descriptor.
pub fn identity(fd: i32) -> Option<(u64, u64, u32)> {
    let st = stat_at(fd, &Name::new(), libc::AT_EMPTY_PATH).ok()?;
    Some((st.st_dev, st.st_ino, st.st_mode))
}

/// Flags of every file the runtime writes: never a terminal made controlling, never through a final
/// symlink, not inherited across `exec`.
const OPEN_FLAGS: i32 = libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NOCTTY;

/// A directory descriptor (`O_PATH`), closed on drop.
struct Dir(i32);

impl Drop for Dir {
    fn drop(&mut self) {
        close(self.0);
    }
}

impl Dir {
    fn create(&self, name: &Name) -> Result<i32, Refused> {
        match check(openat(self.0, name, OPEN_FLAGS | libc::O_CREAT | libc::O_EXCL, FILE_MODE)) {
            Err(Refused::Os(libc::EEXIST)) => Err(Refused::Exists),
            other => other,
        }
    }
}

/// A NUL-terminated file name in a fixed buffer.
struct Name {
    bytes: [u8; NAME_MAX + 1],
    len: usize,
    overflow: bool,
}

impl Name {
    fn new() -> Name {
        Name { bytes: [0; NAME_MAX + 1], len: 0, overflow: false }
    }

    fn push(&mut self, part: &[u8]) -> &mut Name {
        if self.len + part.len() > NAME_MAX || part.contains(&0) {
            self.overflow = true;
            return self;
        }
        self.bytes[self.len..self.len + part.len()].copy_from_slice(part);
        self.len += part.len();
        self.bytes[self.len] = 0;
        self
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn ptr(&self) -> u64 {
        self.bytes.as_ptr() as u64
    }
}

fn push_decimal(name: &mut Name, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    name.push(&digits[i..]);
}

/// Splits `path` into its directory and its last component (which must be a plain name).
fn parent(path: &[u8]) -> Result<(&[u8], Name), Refused> {
    let (dir, last) = match path.iter().rposition(|&b| b == b'/') {
        Some(0) => (&path[..1], &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b"."[..], path),
    };
    if last.is_empty() || last == b"." || last == b".." || last.len() > NAME_MAX {
        return Err(Refused::BadPath);
    }
    let mut name = Name::new();
    name.push(last);
    if name.overflow {
        return Err(Refused::BadPath);
    }
    Ok((dir, name))
}

/// Opens the directory `path` component by component (see the module's rules), creating missing ones
/// when `create`.
fn walk(path: &[u8], create: bool) -> Result<Dir, Refused> {
    if path.is_empty() || path.len() > PATH_MAX || path.contains(&0) {
        return Err(Refused::BadPath);
    }
    let euid = geteuid();
    // What is left to walk: `pending[at..len]`.
    let mut pending = [0u8; PATH_MAX];
    pending[..path.len()].copy_from_slice(path);
    let (mut len, mut at) = (path.len(), 0);
    let mut dir = start(path[0] == b'/')?;
    let mut links = 0;
    loop {
        while at < len && pending[at] == b'/' {
            at += 1;
        }
        if at == len {
            return Ok(dir);
        }
        let end = pending[at..len].iter().position(|&b| b == b'/').map_or(len, |i| at + i);
        let component = &pending[at..end];
        if component == b"." {
            at = end;
            continue;
        }
        if component.len() > NAME_MAX {
            return Err(Refused::BadPath);
        }
        let mut name = Name::new();
        name.push(component);
        let mut made = false;
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let err = loop {
            match check(openat(dir.0, &name, flags, 0)) {
                Ok(fd) => break Ok(fd),
                Err(Refused::Os(libc::ENOENT)) if create && !made => {
                    made = true;
                    let mode = if euid == 0 { ROOT_DIR_MODE } else { DIR_MODE };
                    let rc = syscall6(libc::SYS_mkdirat, [dir.0 as u64, name.ptr(), u64::from(mode), 0, 0, 0]);
                    if rc < 0 && rc != -i64::from(libc::EEXIST) {
                        break Err(Refused::Os(-rc as i32));
                    }
                }
                Err(err) => break Err(err),
            }
        };
        match err {
            Ok(fd) => {
                // O_PATH | O_NOFOLLOW may open a symlink itself: only a directory goes on.
                if identity(fd).is_none_or(|(_, _, mode)| mode & libc::S_IFMT != libc::S_IFDIR) {
                    close(fd);
                    follow_or_refuse(&dir, &name, euid)?;
                } else {
                    dir = Dir(fd);
                    at = end;
                    continue;
                }
            }
            Err(Refused::Os(libc::ELOOP | libc::ENOTDIR)) => follow_or_refuse(&dir, &name, euid)?,
            Err(err) => return Err(err),
        }
        // A symlink we may follow: its target takes its place in what is left to walk.
        links += 1;
        if links > MAX_LINKS {
            return Err(Refused::Os(libc::ELOOP));
        }
        // Keep what is left at the end of the buffer, read the link's target into the front, and put the
        // two together: `<target>/<rest>`.
        let rest = len - end;
        pending.copy_within(end..len, PATH_MAX - rest);
        let room = PATH_MAX - rest - 1;
        let n =
            syscall6(libc::SYS_readlinkat, [dir.0 as u64, name.ptr(), pending.as_mut_ptr() as u64, room as u64, 0, 0]);
        if n <= 0 {
            return Err(Refused::Os(if n == 0 { libc::ENOENT } else { -n as i32 }));
        }
        let n = n as usize;
        if n >= room {
            return Err(Refused::BadPath);
        }
        pending[n] = b'/';
        pending.copy_within(PATH_MAX - rest.., n + 1);
        (len, at) = (n + 1 + rest, 0);
        if pending[0] == b'/' {
            dir = start(true)?;
        }
    }
}

/// `name` in `dir` is no directory: `Ok` when it is a symlink root or `euid` owns (to be followed),
/// else why not.
fn follow_or_refuse(dir: &Dir, name: &Name, euid: u32) -> Result<(), Refused> {
    let st = stat_at(dir.0, name, libc::AT_SYMLINK_NOFOLLOW)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
        return Err(Refused::Os(libc::ENOTDIR));
    }
    if st.st_uid != 0 && st.st_uid != euid {
        return Err(Refused::ForeignSymlink);
    }
    Ok(())
}

/// The directory a walk starts from: `/`, or the working directory.
fn start(absolute: bool) -> Result<Dir, Refused> {
    let mut name = Name::new();
    name.push(if absolute { b"/" } else { b"." });
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    check(openat(libc::AT_FDCWD, &name, flags, 0)).map(Dir)
}

fn openat(dir: i32, name: &Name, flags: i32, mode: u32) -> i64 {
    // The kernel reads the NUL-terminated name in `name`'s buffer, which outlives the call.
    syscall6(libc::SYS_openat, [dir as i64 as u64, name.ptr(), flags as u64, u64::from(mode), 0, 0])
}

fn stat_at(dir: i32, name: &Name, flags: i32) -> Result<libc::stat, Refused> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct; the kernel overwrites it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = syscall6(
        libc::SYS_newfstatat,
        [dir as i64 as u64, name.ptr(), &mut st as *mut libc::stat as u64, flags as u64, 0, 0],
    );
    check(rc).map(|_| st)
}

fn check(rc: i64) -> Result<i32, Refused> {
    if rc < 0 {
        Err(Refused::Os(-rc as i32))
    } else {
        Ok(rc as i32)
    }
}

fn close(fd: i32) {
    syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("racewatch-secure-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn bytes(path: &std::path::Path) -> &[u8] {
        path.as_os_str().as_encoded_bytes()
    }

    #[test]
    fn creates_0600_once_and_never_through_a_symlink() {
        let dir = scratch("create");
        let file = dir.join("log.1");
        let fd = create_new(bytes(&file)).expect("create");
        close(fd);
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(create_new(bytes(&file)), Err(Refused::Exists));
        std::fs::write(dir.join("target"), "precious").unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).unwrap();
        assert_eq!(create_new(bytes(&dir.join("link"))), Err(Refused::Exists));
        assert!(reopen(bytes(&dir.join("link"))).is_err(), "a final symlink is never opened");
        assert_eq!(std::fs::read_to_string(dir.join("target")).unwrap(), "precious");
        let fd = reopen(bytes(&file)).expect("reopen");
        close(fd);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn follows_own_symlinks_in_the_path_and_creates_directories() {
        let dir = scratch("walk");
        std::fs::create_dir(dir.join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.join("rel")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("abs")).unwrap();
        for (i, via) in ["rel", "abs", "rel/../real", "./abs/."].into_iter().enumerate() {
            let path = dir.join(via).join(format!("f.{i}"));
            let fd = create_new(bytes(&path)).unwrap_or_else(|e| panic!("{via}: {e}"));
            close(fd);
        }
        let deep = dir.join("abs/a/b/c");
        directory(bytes(&deep), true).expect("create directories");
        let meta = std::fs::metadata(dir.join("real/a/b")).unwrap();
        let mode = if geteuid() == 0 { ROOT_DIR_MODE } else { DIR_MODE };
        assert!(meta.is_dir() && meta.permissions().mode() & 0o777 == mode);
        assert_eq!(meta.uid(), geteuid());
        assert!(directory(bytes(&dir.join("real/missing")), false).is_err());
        // Another user's symlink, as a directory component or the directory itself: never followed
        // (root can give the link away).
        if geteuid() == 0 {
            std::os::unix::fs::symlink(dir.join("real"), dir.join("theirs")).unwrap();
            std::os::unix::fs::lchown(dir.join("theirs"), Some(12345), Some(12345)).unwrap();
            assert_eq!(create_new(bytes(&dir.join("theirs/f"))), Err(Refused::ForeignSymlink));
            assert_eq!(directory(bytes(&dir.join("theirs")), true), Err(Refused::ForeignSymlink));
            assert_eq!(directory(bytes(&dir.join("theirs/new")), true), Err(Refused::ForeignSymlink));
            assert!(!dir.join("real/f").exists() && !dir.join("real/new").exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replace_renames_over_its_own_file_only() {
        let dir = scratch("replace");
        let file = dir.join("races.7");
        let first = replace(bytes(&file), b"one\n", None).expect("first");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\n");
        let second = replace(bytes(&file), b"two\n", Some(first)).expect("second");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two\n");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        // Someone else's file took its place: left alone, and no temporary file stays behind.
        // (Written before ours goes, so that it cannot take the inode ours freed.)
        std::fs::write(dir.join("theirs"), "theirs").unwrap();
        std::fs::rename(dir.join("theirs"), &file).unwrap();
        assert_eq!(replace(bytes(&file), b"three\n", Some(second)), Err(Refused::Exists));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "theirs");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
