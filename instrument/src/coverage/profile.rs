//! Run-time coverage profiles (`coverage_path=PREFIX` writes `PREFIX.<pid>` per process): parsing and
//! merging.
//!
//! The format, one record per line (unknown record kinds are skipped, so later versions can add some):
//!
//! ```text
//! racewatch-profile 1
//! pid 4242
//! dropped 0
//! module <build-id hex, or -> <path>
//! fn <link-time start, hex> <samples> <watches> <traps> <races>
//! pc <link-time address, hex> <watches> <races>
//! ```
//!
//! `fn` and `pc` lines belong to the `module` line above them. Profiles merge by summing: modules are
//! the same when their build-ids are equal (or, without a build-id, their paths).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The first line of every profile.
pub const MAGIC: &str = "racewatch-profile 1";

/// Run-time counts of one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunCounts {
    /// Timer samples that interrupted a thread in the function.
    pub samples: u64,
    /// Watchpoints armed on the function's accesses.
    pub watches: u64,
    /// Watchpoint traps taken in the function (another thread touched a watched address).
    pub traps: u64,
    /// Race reports with an access in the function.
    pub races: u64,
}

impl RunCounts {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &RunCounts) {
        self.samples += other.samples;
        self.watches += other.watches;
        self.traps += other.traps;
        self.races += other.races;
    }
}

/// One module's merged counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleProfile {
    /// Lower-case hex; empty when the module had no build-id.
    pub build_id: String,
    pub path: String,
    /// By link-time function start.
    pub functions: BTreeMap<u64, RunCounts>,
    /// Watches armed per access, by link-time address.
    pub accesses: BTreeMap<u64, u64>,
    /// Race reports per access, by link-time address.
    pub races: BTreeMap<u64, u64>,
}

impl ModuleProfile {
    /// Whether this is the module with `build_id` at `path`: equal build-ids, or, when neither has one,
    /// the same file (paths may differ in spelling).
    pub fn matches(&self, build_id: &str, path: &str) -> bool {
        if self.build_id.is_empty() && build_id.is_empty() {
            self.path == path
                || matches!((std::fs::canonicalize(&self.path), std::fs::canonicalize(path)), (Ok(a), Ok(b)) if a == b)
        } else {
            self.build_id == build_id
        }
    }
}

/// Any number of profiles, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    pub modules: Vec<ModuleProfile>,
    /// Profiles (processes) merged.
    pub processes: usize,
    /// Counts the runtimes could not keep (their tables were full).
    pub dropped: u64,
}

/// A profile that could not be read.
#[derive(Debug)]
pub struct ProfileError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for ProfileError {}

impl Profile {
    /// Reads one profile file and adds it.
    pub fn add_file(&mut self, path: &Path) -> Result<(), ProfileError> {
        let error = |message: String| ProfileError { path: path.to_path_buf(), message };
        let bytes = std::fs::read(path).map_err(|e| error(e.to_string()))?;
        let text =
            String::from_utf8(bytes).map_err(|_| error(format!("not a racewatch profile (expected `{MAGIC}`)")))?;
        self.add_text(&text).map_err(|(line, why)| error(format!("line {line}: {why}")))
    }

    /// Adds the profile `text`; `Err((line number, why))` when it is not a profile (nothing is added).
    pub fn add_text(&mut self, text: &str) -> Result<(), (usize, String)> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, MAGIC)) => {}
            _ => return Err((1, format!("not a racewatch profile (expected `{MAGIC}`)"))),
        }
        let mut parsed = Profile { processes: 1, ..Profile::default() };
        for (i, line) in lines {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let bad = |why: &str| (i + 1, format!("{why}: `{line}`"));
            match fields.as_slice() {
                ["module", build_id, path @ ..] if !path.is_empty() => {
                    let build_id = if *build_id == "-" { "" } else { build_id };
                    parsed.modules.push(ModuleProfile {
                        build_id: build_id.to_ascii_lowercase(),
                        path: path.join(" "),
                        ..ModuleProfile::default()
                    });
                }
                ["fn", addr, samples, watches, traps, races] => {
                    let module = parsed.modules.last_mut().ok_or_else(|| bad("fn before module"))?;
                    let counts = RunCounts {
                        samples: number(samples).ok_or_else(|| bad("bad count"))?,
                        watches: number(watches).ok_or_else(|| bad("bad count"))?,
                        traps: number(traps).ok_or_else(|| bad("bad count"))?,
                        races: number(races).ok_or_else(|| bad("bad count"))?,
                    };
                    let addr = hex(addr).ok_or_else(|| bad("bad address"))?;
                    module.functions.entry(addr).or_default().add(&counts);
                }
                ["pc", addr, watches, races @ ..] if races.len() <= 1 => {
                    let module = parsed.modules.last_mut().ok_or_else(|| bad("pc before module"))?;
                    let addr = hex(addr).ok_or_else(|| bad("bad address"))?;
                    let watches = number(watches).ok_or_else(|| bad("bad count"))?;
                    if watches > 0 {
                        *module.accesses.entry(addr).or_default() += watches;
                    }
                    if let Some(races) = races.first() {
                        let races = number(races).ok_or_else(|| bad("bad count"))?;
                        if races > 0 {
                            *module.races.entry(addr).or_default() += races;
                        }
                    }
                }
                ["dropped", n] => parsed.dropped += number(n).ok_or_else(|| bad("bad count"))?,
                ["module", ..] | ["fn", ..] | ["pc", ..] => return Err(bad("malformed record")),
                _ => {}
            }
        }
        self.merge(parsed);
        Ok(())
    }

    /// Sums `other` into `self`.
    pub fn merge(&mut self, other: Profile) {
        self.processes += other.processes;
        self.dropped += other.dropped;
        for module in other.modules {
            match self.modules.iter_mut().find(|m| m.matches(&module.build_id, &module.path)) {
                Some(mine) => {
                    for (addr, counts) in &module.functions {
                        mine.functions.entry(*addr).or_default().add(counts);
                    }
                    for (addr, watches) in &module.accesses {
                        *mine.accesses.entry(*addr).or_default() += watches;
                    }
                    for (addr, races) in &module.races {
                        *mine.races.entry(*addr).or_default() += races;
                    }
                }
                None => self.modules.push(module),
            }
        }
    }

    /// The merged counts of the module with this build-id (or, when neither has one, this path).
    pub fn module(&self, build_id: &str, path: &str) -> Option<&ModuleProfile> {
        self.modules.iter().find(|m| m.matches(build_id, path))
    }
}

fn number(s: &str) -> Option<u64> {
    s.parse().ok()
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// The profile files named by `paths`: files as given; the profiles in a directory; and for a prefix
/// that is no file (`coverage_path`'s value), the profiles `PREFIX.*` beside it.
pub fn expand(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for path in paths {
        if !path.exists() {
            // `PREFIX` or `PREFIX.`: the profiles `PREFIX.<pid>` beside it.
            let trimmed = path.to_string_lossy().trim_end_matches('.').to_string();
            let path = &PathBuf::from(trimmed);
            let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                out.push(path.clone());
                continue;
            };
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            let prefix = format!("{}.", name.to_string_lossy());
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .filter(|p| p.is_file() && starts_with_magic(p))
                .collect();
            found.sort();
            if found.is_empty() {
                out.push(path.clone());
            }
            out.extend(found);
        } else if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file() && starts_with_magic(p))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    out
}

fn starts_with_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; MAGIC.len()];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == MAGIC.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "racewatch-profile 1\npid 7\ndropped 1\nmodule abc /bin/app\nfn 0x10 5 2 1 0\npc 0x14 2 1\n\
                       module - /lib/x.so\nfn 0x20 1 0 0 0\nfuture-record 1 2 3\n";

    #[test]
    fn parses_and_sums_by_build_id_or_path() {
        let mut p = Profile::default();
        p.add_text(ONE).unwrap();
        // Same build-id under another path (a copied binary) and the same path-only library.
        p.add_text(
            "racewatch-profile 1\nmodule ABC /tmp/app-copy\nfn 0x10 1 1 1 1\nfn 0x30 1 0 0 0\npc 0x14 3\n\
                    module - /lib/x.so\nfn 0x20 2 0 0 0\n",
        )
        .unwrap();
        assert_eq!((p.processes, p.dropped, p.modules.len()), (2, 1, 2));
        let app = p.module("abc", "/anything").unwrap();
        assert_eq!(app.functions[&0x10], RunCounts { samples: 6, watches: 3, traps: 2, races: 1 });
        assert_eq!(app.functions[&0x30].samples, 1);
        assert_eq!(app.accesses[&0x14], 5);
        assert_eq!(app.races[&0x14], 1);
        assert_eq!(p.module("", "/lib/x.so").unwrap().functions[&0x20].samples, 3);
        assert!(p.module("", "/lib/y.so").is_none());
    }

    #[test]
    fn rejects_what_is_not_a_profile_without_adding_anything() {
        let mut p = Profile::default();
        assert_eq!(p.add_text("hello\n").unwrap_err().0, 1);
        assert!(p.add_text("racewatch-profile 1\nfn 0x10 1 1 1 1\n").unwrap_err().1.contains("before module"));
        assert!(p.add_text("racewatch-profile 1\nmodule - /a\nfn 0x10 x 1 1 1\n").unwrap_err().1.contains("bad count"));
        assert_eq!(p, Profile::default());
    }
}
