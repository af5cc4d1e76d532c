//! Line tables for `racewatch cargo` builds through cargo's profiles, not a `-Cdebuginfo` flag.
//!
//! Reports need file:line, so every build needs at least line tables. A `-Cdebuginfo=line-tables-only`
//! in the rustflags would come after the profile's own `-C debuginfo` and win, *lowering* a debug
//! build's full debug info (and a release profile's `debug = 1`) to line tables: inlined frames would
//! lose their qualified names. Instead, a profile that would have no line tables gets
//! `CARGO_PROFILE_<NAME>_DEBUG=limited` — line tables plus the function entries that give inlined
//! frames their path-qualified names (`tc::work::bump`, not `bump`), in sections the program never
//! loads — and any other keeps what the project chose. Release builds are also kept unstripped.

/// The texts that can set a profile's `debug`, lowest precedence first: the workspace manifest, then
/// cargo's configuration files (`$CARGO_HOME/config.toml`, then `.cargo/config.toml` from the root
/// down to `cwd`; the environment, above them all, is read by [`debug_env`]).
pub fn settings_texts(workspace_root: Option<&Path>, cwd: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = workspace_root.map(|root| root.join("Cargo.toml")).into_iter().collect();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let mut config_dirs: Vec<PathBuf> = cwd.ancestors().map(|dir| dir.join(".cargo")).collect();
    config_dirs.reverse();
    for dir in cargo_home.into_iter().chain(config_dirs) {
        files.extend(["config", "config.toml"].map(|name| dir.join(name)));
    }
    files.dedup();
    files.iter().filter_map(|file| std::fs::read_to_string(file).ok()).collect()
}

/// Every profile variable `racewatch cargo` sets: [`debug_env`]'s, and `strip = false` for the
/// release-based profiles (cargo strips their debug info by default, line tables included), each
/// unless the user's environment sets it.
pub fn profile_env(texts: &[String], env: impl Fn(&str) -> Option<String>) -> Vec<(String, &'static str)> {
    let strip = ["CARGO_PROFILE_RELEASE_STRIP", "CARGO_PROFILE_BENCH_STRIP"]
        .into_iter()
        .filter(|var| env(var).is_none())
        .map(|var| (var.to_string(), "false"));
    let mut vars = debug_env(texts, &env);
    vars.extend(strip);
    vars
}

/// The environment variables to set: one per built-in profile whose debug setting (from the
/// environment, else the last of `texts` that sets it, else cargo's default) has no line tables.
fn debug_env(texts: &[String], env: impl Fn(&str) -> Option<String>) -> Vec<(String, &'static str)> {
    // `test` inherits `dev`'s setting and `bench` `release`'s, unless the manifest sets theirs.
    [("dev", true), ("test", true), ("release", false), ("bench", false)]
        .into_iter()
        .filter_map(|(profile, debug_by_default)| {
            let var = format!("CARGO_PROFILE_{}_DEBUG", profile.to_ascii_uppercase());
            if env(&var).is_some() {
                return None;
            }
            let has_lines = match texts.iter().rev().find_map(|text| profile_debug(text, profile)) {
                Some(value) => has_line_tables(&value),
                // Only dev and release need a decision; test and bench follow them.
                None if matches!(profile, "test" | "bench") => true,
                None => debug_by_default,
            };
            (!has_lines).then_some((var, "limited"))
        })
        .collect()
}

/// Whether a `debug = …` value of a cargo profile includes line tables.
fn has_line_tables(value: &str) -> bool {
    matches!(
        value.trim_matches(|c| c == '"' || c == '\''),
        "1" | "2" | "true" | "limited" | "full" | "line-tables-only"
    )
}

/// The `debug` value of `[profile.<name>]` in a Cargo.toml (`debug = 1` under the table header, or the
/// dotted `profile.<name>.debug = 1`); only what a line scan can tell, which covers manifests as
/// people write them.
fn profile_debug(manifest: &str, profile: &str) -> Option<String> {
    let table = format!("profile.{profile}");
    let mut section = String::new();
    let mut found = None;
    for line in manifest.lines() {
        let line = strip_comment(line).trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = header.trim().replace(' ', "");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim().replace(' ', "");
        let full_key = if section.is_empty() { key } else { format!("{section}.{key}") };
        if full_key == format!("{table}.debug") {
            found = Some(value.trim().to_string());
        }
    }
    found
}

/// The line without a `#` comment (a `#` inside a string is kept).
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '#' if !in_string => return &line[..i],
            _ => {}
        }
    }
    line
}

use std::path::{Path, PathBuf};

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(manifest: Option<&str>, set: &[&str]) -> Vec<String> {
        let texts: Vec<String> = manifest.map(str::to_string).into_iter().collect();
        debug_env(&texts, |v| set.contains(&v).then(String::new)).into_iter().map(|(v, _)| v).collect()
    }

    #[test]
    fn only_profiles_without_line_tables_get_them() {
        // Cargo's defaults: dev has full debug info, release none.
        assert_eq!(vars(None, &[]), ["CARGO_PROFILE_RELEASE_DEBUG"]);
        assert_eq!(vars(Some("[package]\nname = \"x\"\n"), &[]), ["CARGO_PROFILE_RELEASE_DEBUG"]);
        // ripgrep: `debug = 1` in release is kept.
        let rg = "[profile.release]\ndebug = 1 # symbols\n\n[profile.deb]\ninherits = \"release\"\ndebug = false\n";
        assert!(vars(Some(rg), &[]).is_empty());
        // A project that turns dev debug info off for faster builds gets line tables back.
        let fast = "[profile.dev]\ndebug = false\n[profile.release]\ndebug = \"limited\"\n";
        assert_eq!(vars(Some(fast), &[]), ["CARGO_PROFILE_DEV_DEBUG"]);
        let dotted = "profile.release.debug = \"line-tables-only\"\nprofile.dev.debug = 0\n";
        assert_eq!(vars(Some(dotted), &[]), ["CARGO_PROFILE_DEV_DEBUG"]);
        // A package override is not the profile's own setting; `none` has no lines.
        let package = "[profile.release.package.\"*\"]\ndebug = 2\n[profile.bench]\ndebug = \"none\"\n";
        assert_eq!(vars(Some(package), &[]), ["CARGO_PROFILE_RELEASE_DEBUG", "CARGO_PROFILE_BENCH_DEBUG"]);
        // The user's own environment wins.
        assert!(vars(None, &["CARGO_PROFILE_RELEASE_DEBUG"]).is_empty());
        assert_eq!(strip_comment("debug = \"a#b\" # c"), "debug = \"a#b\" ");
    }

    #[test]
    fn release_builds_stay_unstripped_unless_the_user_says() {
        let strip = |set: &[&str]| -> Vec<String> {
            profile_env(&[], |v| set.contains(&v).then(String::new))
                .into_iter()
                .filter(|(v, value)| v.ends_with("_STRIP") && *value == "false")
                .map(|(v, _)| v)
                .collect()
        };
        assert_eq!(strip(&[]), ["CARGO_PROFILE_RELEASE_STRIP", "CARGO_PROFILE_BENCH_STRIP"]);
        assert_eq!(strip(&["CARGO_PROFILE_RELEASE_STRIP"]), ["CARGO_PROFILE_BENCH_STRIP"]);
    }

    #[test]
    fn configuration_files_override_the_manifest() {
        let dir = std::env::temp_dir().join(format!("rw-cargo-profiles-{}", std::process::id()));
        let project = dir.join("project");
        std::fs::create_dir_all(project.join(".cargo")).unwrap();
        std::fs::write(project.join("Cargo.toml"), "[profile.release]\ndebug = 0\n").unwrap();
        std::fs::write(project.join(".cargo/config.toml"), "[profile.release]\ndebug = 2\n").unwrap();
        let texts = settings_texts(Some(&project), &project);
        assert_eq!(texts.first().map(String::as_str), Some("[profile.release]\ndebug = 0\n"));
        assert!(debug_env(&texts, |_| None).is_empty(), "the config's full debug info is kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
