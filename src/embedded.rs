//! The preload runtime, embedded at build time (see build.rs) and written once
//! to a per-user cache so it can be named in `LD_PRELOAD`.
//!
//! Cache path: `$XDG_CACHE_HOME/racewatch/<version>-<hash>/libracewatch.so`,
//! else `~/.cache/racewatch/...`, else `$TMPDIR/racewatch-<uid>/...`. The hash
//! is the content hash of the embedded file, so a rebuilt runtime never reuses
//! a stale copy. The file is written to a temporary name and renamed into
//! place, so concurrent first runs are safe. `RACEWATCH_RUNTIME=<path>`
//! overrides all of this (for runtime development).

use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
    /// No candidate cache directory could hold the file; the last error.
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

/// Path of a `libracewatch.so` ready for `LD_PRELOAD`, extracting the
/// embedded copy on first use.
pub fn runtime_path() -> Result<PathBuf, RuntimeError> {
    if let Some(path) = std::env::var_os("RACEWATCH_RUNTIME").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() { Ok(path) } else { Err(RuntimeError::OverrideMissing(path)) };
    }
    let mut tries = Vec::new();
    for base in cache_bases() {
        let dir = base.join(format!("{}-{RUNTIME_HASH}", env!("CARGO_PKG_VERSION")));
        match install_into(&dir) {
            Ok(path) => return Ok(path),
            Err(err) => tries.push((dir, err)),
        }
    }
    Err(RuntimeError::NoWritableCache(tries))
}

/// Candidate parent directories, in order of preference.
fn cache_bases() -> Vec<PathBuf> {
    let nonempty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    let mut bases = Vec::new();
    if let Some(xdg) = nonempty(std::env::var_os("XDG_CACHE_HOME")).filter(|p| p.is_absolute()) {
        bases.push(xdg.join("racewatch"));
    }
    if let Some(home) = nonempty(std::env::var_os("HOME")) {
        bases.push(home.join(".cache").join("racewatch"));
    }
    // The owner of /proc/self is this process's user.
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    bases.push(std::env::temp_dir().join(format!("racewatch-{uid}")));
    bases
}

/// Makes sure `dir/libracewatch.so` holds the embedded runtime.
fn install_into(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(FILE_NAME);
    if let Ok(meta) = std::fs::metadata(&path) {
        if meta.is_file() && meta.len() == RUNTIME.len() as u64 {
            return Ok(path);
        }
    }
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".{FILE_NAME}.{}.{nanos}.tmp", std::process::id()));
    let result = write_file(&tmp).and_then(|()| std::fs::rename(&tmp, &path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| path)
}

fn write_file(path: &Path) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(RUNTIME)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    file.sync_all()
}
