//! The coverage report grouped the way llvm-cov and genhtml group theirs: by source file, the user's
//! own files first, then the dependencies (`~/.cargo/registry`, git checkouts, system headers), the
//! Rust standard library, and the functions without source information, each folded into a group
//! with shortened paths. With run-time profiles every function carries its samples, watches, traps
//! and races; files carry the lines of atomic instructions and of watched accesses.

use super::profile::{ModuleProfile, Profile, RunCounts};
use super::{ModuleCoverage, Summary};
use crate::elf;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Where a source file comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The user's own code.
    User,
    /// A registry or git dependency, or a system header.
    Dependency,
    /// The Rust standard library (`core`, `alloc`, `std`, …).
    Std,
    /// A function without line information.
    Unknown,
}

impl Origin {
    /// The group's heading.
    pub fn title(self) -> &'static str {
        match self {
            Origin::User => "your code",
            Origin::Dependency => "dependencies",
            Origin::Std => "Rust standard library",
            Origin::Unknown => "no source information",
        }
    }
}

/// Sums over functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub functions: usize,
    pub covered_functions: usize,
    /// Functions with at least one sample.
    pub sampled_functions: usize,
    /// Functions with at least one watch.
    pub watched_functions: usize,
    #[serde(flatten)]
    pub run: RunCounts,
    pub atomics: usize,
    pub text_bytes: u64,
    pub covered_text_bytes: u64,
}

impl Totals {
    fn add_merged(&mut self, m: &Merged) {
        self.add(&Totals {
            functions: 1,
            covered_functions: usize::from(m.covered > 0),
            sampled_functions: usize::from(m.run.samples > 0),
            watched_functions: usize::from(m.run.watches > 0),
            run: m.run,
            atomics: m.atomics,
            text_bytes: m.size,
            covered_text_bytes: if m.covered > 0 { m.size } else { 0 },
        });
    }

    fn add(&mut self, other: &Totals) {
        self.functions += other.functions;
        self.covered_functions += other.covered_functions;
        self.sampled_functions += other.sampled_functions;
        self.watched_functions += other.watched_functions;
        self.run.add(&other.run);
        self.atomics += other.atomics;
        self.text_bytes += other.text_bytes;
        self.covered_text_bytes += other.covered_text_bytes;
    }

    /// Covered functions in percent of all (0 for none).
    pub fn covered_percent(&self) -> f64 {
        percent(self.covered_functions, self.functions)
    }
}

/// `part / whole` in percent, one decimal; 0 for an empty whole.
pub fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

/// One function of one binary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_name: Option<String>,
    /// Index into [`Report::binaries`].
    pub binary: usize,
    /// Link-time address.
    pub address: u64,
    pub size: u64,
    pub covered: bool,
    pub features: u64,
    pub feature_names: Vec<&'static str>,
    pub atomics: usize,
    /// Line of the first instruction (0: unknown).
    pub line: u32,
    /// Last line of its own file that its code has (0: unknown; computed for your files).
    pub end_line: u32,
    #[serde(flatten)]
    pub run: RunCounts,
}

/// One source file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct File {
    /// As the debug info names it ("" for functions without line information).
    pub path: String,
    /// Shortened for display.
    pub display: String,
    pub origin: Origin,
    pub totals: Totals,
    /// Sorted by line, then name.
    pub functions: Vec<Row>,
    /// Lines holding tagged atomic instructions (your files only).
    pub atomic_lines: Vec<u32>,
    /// Lines holding memory accesses of covered functions, which the detector can watch (your files only).
    pub access_lines: Vec<u32>,
    /// Lines holding watched accesses, with the watches armed on them.
    pub watched_lines: Vec<(u32, u64)>,
    /// Lines holding an access of a reported race, with the reports.
    pub race_lines: Vec<(u32, u64)>,
}

/// The instances of one function in a file (a generic function's monomorphizations, the same
/// function in several binaries): same line, same name without generic arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Without generic arguments.
    pub name: String,
    pub line: u32,
    pub instances: usize,
    /// Instances carrying metadata.
    pub covered: usize,
    pub atomics: usize,
    pub size: u64,
    pub run: RunCounts,
    /// The binary of the first instance.
    pub binary: usize,
}

impl File {
    /// The functions with the instances of each one merged, in line order.
    pub fn merged(&self) -> Vec<Merged> {
        let mut out: Vec<Merged> = Vec::new();
        let mut at: std::collections::HashMap<(u32, String), usize> = std::collections::HashMap::new();
        for row in &self.functions {
            // Functions without a symbol are told apart by address.
            let name = if row.name == super::UNKNOWN {
                format!("<unknown {:#x}>", row.address)
            } else {
                crate::symbols::without_generics(&row.name)
            };
            let i = *at.entry((row.line, name.clone())).or_insert_with(|| {
                out.push(Merged { name, line: row.line, binary: row.binary, ..Merged::default() });
                out.len() - 1
            });
            let m = &mut out[i];
            m.instances += 1;
            m.covered += usize::from(row.covered);
            m.atomics += row.atomics;
            m.size += row.size;
            m.run.add(&row.run);
        }
        out
    }
}

/// A group of files of one origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Group {
    pub origin: Origin,
    pub name: &'static str,
    pub totals: Totals,
    pub files: Vec<File>,
}

/// Files of one directory of a group (`display` up to its last `/`), with their totals.
pub struct Directory<'a> {
    /// Empty for files whose display path has no directory.
    pub path: &'a str,
    pub totals: Totals,
    pub files: Vec<&'a File>,
}

impl Group {
    /// The group's files by directory, in path order.
    pub fn directories(&self) -> Vec<Directory<'_>> {
        let mut out: Vec<Directory<'_>> = Vec::new();
        for file in &self.files {
            let path = file.display.rsplit_once('/').map_or("", |(dir, _)| dir);
            match out.iter_mut().find(|d| d.path == path) {
                Some(dir) => dir.files.push(file),
                None => out.push(Directory { path, totals: Totals::default(), files: vec![file] }),
            }
        }
        for dir in &mut out {
            for file in &dir.files {
                dir.totals.add(&file.totals);
            }
        }
        out.sort_by(|a, b| a.path.cmp(b.path));
        out
    }
}

/// One binary of the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Binary {
    pub path: String,
    pub build_id: String,
    /// A profile matched it.
    pub profiled: bool,
    pub summary: Summary,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Things a reader should know (no symbol table, no line information).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// What the profiles said overall.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProfileSummary {
    /// Profiles (processes) merged.
    pub processes: usize,
    /// Counts the runtimes could not keep (full tables).
    pub dropped: u64,
    /// Profiled modules that match none of the binaries (`path (build-id)`).
    pub unmatched: Vec<String>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub binaries: Vec<Binary>,
    /// Whether run-time counts are present (`--profile`).
    pub profiled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileSummary>,
    pub totals: Totals,
    pub groups: Vec<Group>,
}

/// The `schema` field of the JSON report.
pub const SCHEMA: &str = "racewatch-coverage/2";

impl Report {
    /// Builds the report of `modules` (already opened), with the run-time counts of `profile`.
    pub fn new(modules: &[elf::Module], profile: Option<&Profile>) -> Report {
        let cwd = std::env::current_dir().unwrap_or_default();
        let mut files: BTreeMap<String, File> = BTreeMap::new();
        let mut binaries = Vec::new();
        let mut matched = vec![false; profile.map_or(0, |p| p.modules.len())];
        for (index, module) in modules.iter().enumerate() {
            let coverage = ModuleCoverage::new(module);
            let build_id = module.build_id();
            let path = module.path.to_string_lossy().into_owned();
            let run = profile.and_then(|p| {
                let at = p.modules.iter().position(|m| m.matches(&build_id, &path))?;
                matched[at] = true;
                Some(&p.modules[at])
            });
            add_binary(&mut files, module, &coverage, index, run, &cwd);
            let mut notes = Vec::new();
            if module.functions.is_empty() {
                notes.push("no symbol table (stripped?): covered functions are named by address".to_string());
            }
            if module.section_data(".debug_line").is_none() {
                notes.push("no line information: rows cannot be placed in source files".to_string());
            }
            binaries.push(Binary {
                path,
                build_id,
                profiled: run.is_some(),
                summary: coverage.summary.clone(),
                errors: coverage.errors.clone(),
                notes,
            });
        }
        let profile_summary = profile.map(|p| ProfileSummary {
            processes: p.processes,
            dropped: p.dropped,
            unmatched: p
                .modules
                .iter()
                .zip(&matched)
                .filter(|(_, m)| !**m)
                .map(|(m, _)| {
                    format!("{} ({})", m.path, if m.build_id.is_empty() { "no build-id" } else { &m.build_id })
                })
                .collect(),
        });
        let mut groups: Vec<Group> = Vec::new();
        for mut file in files.into_values() {
            file.functions.sort_by(|a, b| (a.line, &a.name, a.address).cmp(&(b.line, &b.name, b.address)));
            // One function per source function: a generic's instances, or one function in several
            // binaries, count once.
            for merged in file.merged() {
                file.totals.add_merged(&merged);
            }
            match groups.iter_mut().find(|g| g.origin == file.origin) {
                Some(group) => group.files.push(file),
                None => groups.push(Group {
                    origin: file.origin,
                    name: file.origin.title(),
                    totals: Totals::default(),
                    files: vec![file],
                }),
            }
        }
        groups.sort_by_key(|g| g.origin);
        let mut totals = Totals::default();
        for group in &mut groups {
            group.files.sort_by(|a, b| a.display.cmp(&b.display));
            for file in &group.files {
                group.totals.add(&file.totals);
            }
            totals.add(&group.totals);
        }
        Report { schema: SCHEMA, binaries, profiled: profile.is_some(), profile: profile_summary, totals, groups }
    }
}

fn add_binary(
    files: &mut BTreeMap<String, File>,
    module: &elf::Module,
    coverage: &ModuleCoverage,
    index: usize,
    run: Option<&ModuleProfile>,
    cwd: &Path,
) {
    let sources = module.source_map();
    for f in &coverage.functions {
        let counts = run.and_then(|r| r.functions.get(&f.address)).copied().unwrap_or_default();
        let (path, line) = f.source.as_ref().map_or((String::new(), 0), |s| (s.file.clone(), s.line));
        let file = files.entry(path.clone()).or_insert_with(|| new_file(&path, cwd));
        file.functions.push(row(f, index, line, counts));
    }
    let Some(sources) = sources else { return };
    // Your files' covered functions: their last line, and the lines of their memory accesses.
    for file in files.values_mut().filter(|f| f.origin == Origin::User) {
        for row in file.functions.iter_mut().filter(|r| r.binary == index && r.covered && r.size > 0) {
            let end = row.address.saturating_add(row.size);
            row.end_line = sources.line_span(row.address, end, &file.path).map_or(0, |(_, last)| last);
            let Some(bytes) = module.read_at(row.address, row.size as usize) else { continue };
            for pc in crate::verify::memory_access_pcs(bytes, row.address) {
                if let Some(loc) = sources.outer_location(pc).filter(|l| l.file == file.path) {
                    if let Err(at) = file.access_lines.binary_search(&loc.line) {
                        file.access_lines.insert(at, loc.line);
                    }
                }
            }
        }
    }
    // Lines of atomic instructions, for the user's files (whose source a reader opens).
    for &pc in &module.atomics {
        let Some(loc) = sources.outer_location(pc) else { continue };
        if let Some(file) = files.get_mut(&loc.file).filter(|f| f.origin == Origin::User) {
            if let Err(at) = file.atomic_lines.binary_search(&loc.line) {
                file.atomic_lines.insert(at, loc.line);
            }
        }
    }
    let Some(run) = run else { return };
    for (per_pc, lines_of) in [(&run.accesses, Marks::Watched), (&run.races, Marks::Races)] {
        for (&pc, &count) in per_pc {
            let Some(loc) = sources.outer_location(pc) else { continue };
            let file = files.entry(loc.file.clone()).or_insert_with(|| new_file(&loc.file, cwd));
            let lines = match lines_of {
                Marks::Watched => &mut file.watched_lines,
                Marks::Races => &mut file.race_lines,
            };
            match lines.binary_search_by_key(&loc.line, |(line, _)| *line) {
                Ok(at) => lines[at].1 += count,
                Err(at) => lines.insert(at, (loc.line, count)),
            }
        }
    }
}

/// Which per-line counts a profile's per-PC counts go to.
#[derive(Clone, Copy)]
enum Marks {
    Watched,
    Races,
}

fn row(f: &super::FunctionRow, binary: usize, line: u32, counts: RunCounts) -> Row {
    Row {
        name: f.name.clone(),
        raw_name: f.raw_name.clone(),
        binary,
        address: f.address,
        size: f.size,
        covered: f.covered,
        features: f.features,
        feature_names: f.feature_names.clone(),
        atomics: f.atomics,
        line,
        end_line: 0,
        run: counts,
    }
}

fn new_file(path: &str, cwd: &Path) -> File {
    let (origin, display) = classify(path, cwd);
    File {
        path: path.to_string(),
        display,
        origin,
        totals: Totals::default(),
        functions: Vec::new(),
        atomic_lines: Vec::new(),
        access_lines: Vec::new(),
        watched_lines: Vec::new(),
        race_lines: Vec::new(),
    }
}

/// The origin of a source path and its display form: `std::…/thread/lifecycle.rs` for the standard
/// library, `crossbeam-utils-0.8.21/src/atomic/atomic_cell.rs` for a registry crate, the path relative
/// to `cwd` for the user's files below it.
pub fn classify(path: &str, cwd: &Path) -> (Origin, String) {
    if path.is_empty() {
        return (Origin::Unknown, "(no source information)".to_string());
    }
    if let Some(rest) = std_library_path(path) {
        // `std/src/thread/lifecycle.rs` → `std::…/thread/lifecycle.rs`.
        let display = match rest.split_once("/src/") {
            Some((krate, inner)) => format!("{}::…/{inner}", krate.rsplit('/').next().unwrap_or(krate)),
            None => rest.to_string(),
        };
        return (Origin::Std, display);
    }
    for marker in ["/.cargo/registry/src/", "/.cargo/git/checkouts/"] {
        if let Some(at) = path.find(marker) {
            // Skip the index (or checkout) directory: `<crate-version>/src/…` remains.
            let rest = &path[at + marker.len()..];
            let rest = rest.split_once('/').map_or(rest, |(_, r)| r);
            let rest = if marker.contains("git") { rest.split_once('/').map_or(rest, |(_, r)| r) } else { rest };
            return (Origin::Dependency, rest.to_string());
        }
    }
    if ["/usr/include/", "/usr/lib/", "/usr/local/include/"].iter().any(|p| path.starts_with(p)) {
        return (Origin::Dependency, path.to_string());
    }
    let display = Path::new(path)
        .strip_prefix(cwd)
        .ok()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| path.to_string(), |p| p.to_string_lossy().into_owned());
    (Origin::User, display)
}

/// The part after `library/` of a standard-library source path (`/rustc/<hash>/library/…`, a
/// `rust-src` component's `lib/rustlib/src/rust/library/…`, or rustc's remapped `library/…`).
fn std_library_path(path: &str) -> Option<&str> {
    // The standard library's own dependencies (gimli, addr2line, hashbrown, …) as rustc remaps them.
    if let Some(rest) = path.strip_prefix("/rust/deps/") {
        return Some(rest);
    }
    if let Some(rest) = path.strip_prefix("/rustc/") {
        return rest.split_once("/library/").map(|(_, r)| r);
    }
    if let Some((_, rest)) = path.split_once("/lib/rustlib/src/rust/library/") {
        return Some(rest);
    }
    path.strip_prefix("library/").filter(|r| {
        [
            "core/",
            "alloc/",
            "std/",
            "proc_macro/",
            "panic_unwind/",
            "panic_abort/",
            "test/",
            "backtrace/",
            "portable-simd/",
            "stdarch/",
        ]
        .iter()
        .any(|k| r.starts_with(k))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_and_shortens_paths() {
        let cwd = Path::new("/home/u/proj");
        assert_eq!(
            classify("/rustc/17067e9ac6d7e98f18d4e5b0d4a3b1e2c5f6a7b8/library/std/src/thread/lifecycle.rs", cwd),
            (Origin::Std, "std::…/thread/lifecycle.rs".into())
        );
        assert_eq!(classify("library/core/src/ptr/mod.rs", cwd), (Origin::Std, "core::…/ptr/mod.rs".into()));
        assert_eq!(
            classify("/rust/deps/gimli-0.32.3/src/read/unit.rs", cwd),
            (Origin::Std, "gimli-0.32.3::…/read/unit.rs".into())
        );
        assert_eq!(
            classify(
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/crossbeam-utils-0.8.21/src/lib.rs",
                cwd
            ),
            (Origin::Dependency, "crossbeam-utils-0.8.21/src/lib.rs".into())
        );
        assert_eq!(
            classify("/root/.cargo/git/checkouts/rayon-0123/abcdef/rayon-core/src/lib.rs", cwd),
            (Origin::Dependency, "rayon-core/src/lib.rs".into())
        );
        assert_eq!(classify("/usr/include/stdio.h", cwd).0, Origin::Dependency);
        assert_eq!(classify("/home/u/proj/src/main.rs", cwd), (Origin::User, "src/main.rs".into()));
        assert_eq!(classify("/elsewhere/a.c", cwd), (Origin::User, "/elsewhere/a.c".into()));
        assert_eq!(classify("demos/src/bin/x.rs", cwd), (Origin::User, "demos/src/bin/x.rs".into()));
        assert_eq!(classify("", cwd).0, Origin::Unknown);
    }
}
