//! The preload runtime, embedded at build time (see build.rs) and written to a per-user cache so it
//! can be named in `LD_PRELOAD`.
//!
//! Cache path: `$XDG_CACHE_HOME/racewatch/<version>-<hash>/libracewatch.so`, else
//! `~/.cache/racewatch/...` (for root with a `$HOME`: `/var/cache/racewatch/...` first), else
//! `$TMPDIR/racewatch-<euid>/...`. Root's copy outside its home is one every user can read (directory
//! modes 0755, written by root alone): a program that drops its privileges and then runs other programs
//! still preloads it, where root's home (mode 0700) made the loader print an error in each of them. The hash is the content hash of the
//! embedded file, so a rebuilt runtime never reuses a stale copy. `RACEWATCH_RUNTIME=<path>`
//! overrides all of this (for runtime development).
//!
//! The file on disk is preloaded into every program `racewatch run` starts, so it is trusted only when
//! it is exactly what this racewatch embeds (docs/SECURITY.md):
//!
//! - the directories racewatch controls (`racewatch/` or `racewatch-<euid>/`, and `<version>-<hash>/`)
//!   are created with mode 0700; before every use each must be a real directory (not a symbolic
//!   link), owned by the effective user, and writable by no one else;
//! - the file is opened with `O_NOFOLLOW` and must be a regular file owned by the effective user,
//!   writable by no one else, and equal byte for byte to the embedded runtime; anything else is
//!   replaced: written to a fresh name with `O_CREAT|O_EXCL|O_NOFOLLOW`, then renamed into place;
//! - the shared fallback (`$TMPDIR`) is never trusted as found: when `racewatch-<euid>` there is not a
//!   directory of ours that only we can write (another user made it first), a fresh private directory
//!   `racewatch-<euid>.<random>` is made with `mkdir` (which fails when the name exists) for this run;
//!   and a shared parent that others may write must have the sticky bit (`/tmp` has it), or no one
//!   else could be kept from renaming our directory away and putting theirs in its place.

use std::ffi::OsString;
use std::fmt;
use std::fs::{DirBuilder, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The runtime library built by build.rs.
static RUNTIME: &[u8] = include_bytes!(env!("RACEWATCH_RUNTIME_SO"));
const RUNTIME_HASH: &str = env!("RACEWATCH_RUNTIME_HASH");
const FILE_NAME: &str = "libracewatch.so";

/// Why the runtime could not be made available on disk.
#[derive(Debug)]
pub enum RuntimeError {
    /// `RACEWATCH_RUNTIME` names a file that does not exist.
    OverrideMissing(PathBuf),
    /// No candidate cache directory could hold the file; why, per candidate.
    NoWritableCache(Vec<(PathBuf, std::io::Error)>),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::OverrideMissing(path) => {
                write!(f, "RACEWATCH_RUNTIME={} does not exist", path.display())
            }
            RuntimeError::NoWritableCache(tries) => {
                write!(f, "cannot write the runtime to any cache directory")?;
                for (dir, err) in tries {
                    write!(f, "; {}: {err}", dir.display())?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for RuntimeError {}

/// Path of a `libracewatch.so` ready for `LD_PRELOAD`, extracting the embedded copy on first use and
/// checking it on every use.
pub fn runtime_path() -> Result<PathBuf, RuntimeError> {
    if let Some(path) = std::env::var_os("RACEWATCH_RUNTIME").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() { Ok(path) } else { Err(RuntimeError::OverrideMissing(path)) };
    }
    let version_dir = format!("{}-{RUNTIME_HASH}", env!("CARGO_PKG_VERSION"));
    let mut tries = Vec::new();
    for base in cache_bases() {
        let result = match &base {
            Base::Private(dir) => private_dir(dir, 0o700).map(|()| dir.clone()),
            Base::System { parent, name } => system_base(parent, name),
            Base::Shared { parent, name } => shared_base(parent, name, base.dir_mode()),
        };
        let dir = match result {
            Ok(dir) => dir.join(&version_dir),
            Err(err) => {
                tries.push((base.path(), err));
                continue;
            }
        };
        let mode = base.dir_mode();
        match install_into(&dir, mode) {
            Ok(path) => return Ok(path),
            Err(err) => tries.push((dir, err)),
        }
    }
    Err(RuntimeError::NoWritableCache(tries))
}

/// A candidate parent directory of the runtime's version directory.
enum Base {
    /// Under the user's own cache directory: `dir` itself is racewatch's.
    Private(PathBuf),
    /// `parent/name` in a directory other users may write (the temporary directory).
    Shared { parent: PathBuf, name: String },
    /// `parent/name` in a directory of root's that only root writes (`/var/cache`), for root: readable by
    /// every user.
    System { parent: PathBuf, name: String },
}

impl Base {
    /// The mode of the directories racewatch makes here: root's outside its home are readable by every
    /// user (a program that drops its privileges still loads the runtime from there); written by root
    /// alone either way.
    fn dir_mode(&self) -> u32 {
        match self {
            Base::Private(_) => 0o700,
            Base::System { .. } => 0o755,
            Base::Shared { .. } if euid() == 0 => 0o755,
            Base::Shared { .. } => 0o700,
        }
    }

    fn path(&self) -> PathBuf {
        match self {
            Base::Private(dir) => dir.clone(),
            Base::Shared { parent, name } | Base::System { parent, name } => parent.join(name),
        }
    }
}

/// Candidate parent directories, in order of preference.
fn cache_bases() -> Vec<Base> {
    let nonempty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    let mut bases = Vec::new();
    if let Some(xdg) = nonempty(std::env::var_os("XDG_CACHE_HOME")).filter(|p| p.is_absolute()) {
        bases.push(Base::Private(xdg.join("racewatch")));
    }
    if let Some(home) = nonempty(std::env::var_os("HOME")).filter(|p| p.is_absolute()) {
        if euid() == 0 {
            bases.push(Base::System { parent: PathBuf::from("/var/cache"), name: "racewatch".into() });
        }
        bases.push(Base::Private(home.join(".cache").join("racewatch")));
    }
    bases.push(Base::Shared { parent: std::env::temp_dir(), name: format!("racewatch-{}", euid()) });
    bases
}

/// The effective user id: the owner every file racewatch trusts must have.
fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

fn untrusted(path: &Path, why: impl fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("{}: not trusted: {why}", path.display()))
}

/// `parent/name` for root: `parent` must be a real directory of root's that no one else can write;
/// `name` is made there (mode 0755) and checked as [`private_dir`] checks.
fn system_base(parent: &Path, name: &str) -> std::io::Result<PathBuf> {
    check_private_dir(parent)?;
    let dir = parent.join(name);
    private_dir(&dir, 0o755)?;
    Ok(dir)
}

/// Makes sure `dir` is a directory of ours that no one else can write: created (with `mode`, and
/// missing parents) when missing; when it exists, not a symbolic link, owned by the effective user,
/// and without group or other write permission.
fn private_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && std::fs::symlink_metadata(parent).is_err() {
            // Parents that are not racewatch's (`~/.cache`) are made as mkdir -p would.
            std::fs::create_dir_all(parent)?;
        }
    }
    match DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err),
    }
    check_private_dir(dir)?;
    open_to_all(dir, mode)
}

/// Gives a directory of ours that should be readable by every user (`mode` 0755) that mode, when an
/// earlier racewatch made it private.
fn open_to_all(dir: &Path, mode: u32) -> std::io::Result<()> {
    if mode == 0o755 && std::fs::symlink_metadata(dir)?.mode() & 0o777 != 0o755 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Whether `dir` (as it is now) is a directory of ours that no one else can write.
fn check_private_dir(dir: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(untrusted(dir, "a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(untrusted(dir, "not a directory"));
    }
    if meta.uid() != euid() {
        return Err(untrusted(dir, format!("owned by uid {}, not by uid {}", meta.uid(), euid())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(untrusted(dir, format!("mode {:04o}: others may write it", meta.mode() & 0o7777)));
    }
    Ok(())
}

/// `parent/name`, ours and private; else, when another user holds that name, a fresh private
/// directory `parent/name.<random>` made for this run. `parent` must keep others from renaming
/// what is ours: writable by no one else, or sticky.
fn shared_base(parent: &Path, name: &str, mode: u32) -> std::io::Result<PathBuf> {
    let meta = std::fs::metadata(parent)?;
    let others_write = meta.mode() & 0o022 != 0;
    let sticky = meta.mode() & 0o1000 != 0;
    if !meta.is_dir() || (others_write && !sticky) || (meta.uid() != euid() && meta.uid() != 0) {
        return Err(untrusted(
            parent,
            format!(
                "mode {:04o}, owner uid {}: others could rename racewatch's directory there (set XDG_CACHE_HOME)",
                meta.mode() & 0o7777,
                meta.uid()
            ),
        ));
    }
    let dir = parent.join(name);
    match DirBuilder::new().mode(mode).create(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err),
    }
    if check_private_dir(&dir).is_ok() {
        open_to_all(&dir, mode)?;
        return Ok(dir);
    }
    // Someone else's (or a link, or open to others): never used. A name nobody can hold yet instead.
    for _ in 0..16 {
        let fresh = parent.join(format!("{name}.{:016x}", random()));
        match DirBuilder::new().mode(mode).create(&fresh) {
            Ok(()) => {
                check_private_dir(&fresh)?;
                return Ok(fresh);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
    Err(untrusted(&dir, "no fresh private directory could be made beside it"))
}

/// 64 random bits (the standard library's per-process random hash keys).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Makes sure `dir/libracewatch.so` is the embedded runtime (`dir` made with `mode` and checked, the
/// file checked, and replaced when it is anything else).
fn install_into(dir: &Path, mode: u32) -> std::io::Result<PathBuf> {
    private_dir(dir, mode)?;
    let path = dir.join(FILE_NAME);
    if is_embedded_runtime(&path)? {
        return Ok(path);
    }
    let tmp = dir.join(format!(".{FILE_NAME}.{}.{:016x}.tmp", std::process::id(), random()));
    let result = write_new(&tmp).and_then(|()| std::fs::rename(&tmp, &path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    // The directory is ours alone: what was renamed there is what is there; checked all the same.
    if is_embedded_runtime(&path)? {
        Ok(path)
    } else {
        Err(untrusted(&path, "changed while it was written"))
    }
}

/// Whether `path` is a regular file of ours, writable by no one else, holding exactly the embedded
/// runtime. A symbolic link, someone else's file or other contents are `false` (to be replaced).
fn is_embedded_runtime(path: &Path) -> std::io::Result<bool> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        // ELOOP: a symbolic link; anything else unreadable is replaced too.
        Err(_) => return Ok(false),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.uid() != euid() || meta.mode() & 0o022 != 0 || meta.len() != RUNTIME.len() as u64 {
        return Ok(false);
    }
    let mut contents = Vec::with_capacity(RUNTIME.len());
    file.take(RUNTIME.len() as u64 + 1).read_to_end(&mut contents)?;
    Ok(contents == RUNTIME)
}

/// Writes the runtime to `path`, a name that must not exist yet (never through a link).
fn write_new(path: &Path) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o755)
        .open(path)?;
    file.write_all(RUNTIME)?;
    file.sync_all()
}
