//! `racewatch cargo`'s summary of the races its programs reported. Every process that printed races
//! writes `<dir>/races.<pid>` at exit (runtime option `races_path`, see the runtime's `exit_status`):
//! its executable and one line per race, keyed by the unordered pair of source locations. After cargo
//! ends they are read here, races are counted once per binary (the processes nextest starts for one
//! binary, forked children), and one line sums them up.

use racewatch_instrument::coverage::text::plural;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// File name prefix of the records in the directory (`races_path=<dir>/races`).
pub const PREFIX: &str = "races";
/// First line of a record (the runtime's `races_file::MAGIC`).
const MAGIC: &str = "racewatch-races 1";

/// Distinct races (their keys) per binary, by the name the summary gives the binary.
pub type Found = BTreeMap<String, BTreeSet<String>>;

/// Creates `dir` (and its parents) without records of an earlier run.
pub fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&format!("{PREFIX}.")) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The races recorded in `dir` (records that cannot be read or parsed are skipped).
pub fn collect(dir: &Path) -> Found {
    let mut found = Found::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&format!("{PREFIX}.")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        if let Some((exe, races)) = parse(&text) {
            found.entry(binary_name(&exe)).or_default().extend(races);
        }
    }
    found.retain(|_, races| !races.is_empty());
    found
}

/// A record's executable and race keys; `None` when it is no record.
fn parse(text: &str) -> Option<(String, Vec<String>)> {
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let mut exe = String::new();
    let mut races = Vec::new();
    for line in lines {
        if let Some(path) = line.strip_prefix("exe ") {
            exe = path.to_string();
        } else if let Some(key) = line.strip_prefix("race ") {
            races.push(key.to_string());
        }
    }
    Some((exe, races))
}

/// How the summary names a binary: its file name (`racy-1a2b3c4d5e6f7a8b` for an integration test,
/// the hash cargo gives it included), `doctests` for rustdoc's `rust_out`s (one temporary directory
/// per doctest).
fn binary_name(exe: &str) -> String {
    let path = Path::new(exe);
    let name = path.file_name().map_or_else(|| exe.to_string(), |n| n.to_string_lossy().into_owned());
    let in_doctest_dir = path
        .parent()
        .and_then(|dir| dir.file_name())
        .is_some_and(|dir| dir.to_string_lossy().starts_with("rustdoctest"));
    if name == "rust_out" && in_doctest_dir {
        "doctests".to_string()
    } else if name.is_empty() {
        "(unknown program)".to_string()
    } else {
        name
    }
}

/// The summary line (no newline): `found 3 distinct data races in 2 test binaries: a-1f (2), b-2e (1)`,
/// or that none was reported. `noun` is what the programs are (`test binary`, `binary`).
pub fn summary(found: &Found, noun: &str) -> String {
    if found.is_empty() {
        return "racewatch: no data race reported".to_string();
    }
    let total: usize = found.values().map(BTreeSet::len).sum();
    // A binary's name is whatever the file is called: printed with its control characters escaped.
    let each: Vec<String> =
        found.iter().map(|(name, races)| format!("{} ({})", crate::terminal::escape(name), races.len())).collect();
    format!(
        "racewatch: found {} in {}: {}",
        plural(total as u64, "distinct data race"),
        plural(found.len() as u64, noun),
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(exe: &str, races: &[&str]) -> String {
        let mut text = format!("{MAGIC}\nexe {exe}\n");
        for race in races {
            text.push_str(&format!("race {race}\n"));
        }
        text
    }

    #[test]
    fn races_are_counted_once_per_binary_across_processes() {
        let dir = std::env::temp_dir().join(format!("racewatch-races-unit-{}", std::process::id()));
        fresh_dir(&dir).unwrap();
        let racy = "/t/racewatch/debug/deps/racy-1a2b";
        std::fs::write(dir.join("races.10"), record(racy, &["src/a.rs:3\tsrc/a.rs:3"])).unwrap();
        std::fs::write(dir.join("races.11"), record(racy, &["src/a.rs:3\tsrc/a.rs:3", "x.rs:1\ty.rs:2"])).unwrap();
        std::fs::write(dir.join("races.12"), record("/t/deps/other-9f", &["z.rs:5\tz.rs:5"])).unwrap();
        std::fs::write(dir.join("races.13"), record("/tmp/rustdoctestAb/rust_out", &["d.rs:1\td.rs:1"])).unwrap();
        std::fs::write(dir.join("races.14"), "not a record\n").unwrap();
        std::fs::write(dir.join("profile.15"), record(racy, &["ignored"])).unwrap();
        let found = collect(&dir);
        assert_eq!(
            summary(&found, "test binary"),
            "racewatch: found 4 distinct data races in 3 test binaries: doctests (1), other-9f (1), racy-1a2b (2)"
        );
        // A fresh run starts without the records of this one (other files stay).
        fresh_dir(&dir).unwrap();
        assert!(collect(&dir).is_empty());
        assert!(dir.join("profile.15").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_race_and_none() {
        let mut found = Found::new();
        assert_eq!(summary(&found, "test binary"), "racewatch: no data race reported");
        found.entry("app-77".into()).or_default().insert("k".into());
        assert_eq!(summary(&found, "binary"), "racewatch: found 1 distinct data race in 1 binary: app-77 (1)");
    }
}
