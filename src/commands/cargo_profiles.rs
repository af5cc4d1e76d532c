//! Line tables for `racewatch cargo` builds through cargo's profiles, not a `-Cdebuginfo` flag.
//!
//! Reports need file:line, so every build needs at least line tables. A `-Cdebuginfo=line-tables-only`
//! in the rustflags would come after the profile's own `-C debuginfo` and win, *lowering* a debug
//! build's full debug info (and a release profile's `debug = 1`) to line tables: inlined frames would
//! lose their qualified names. Instead, a profile that would have no line tables gets
//! `CARGO_PROFILE_<NAME>_DEBUG=limited` — line tables plus the function entries that give inlined
//! frames their path-qualified names (`tc::work::bump`, not `bump`), in sections the program never
//! loads — and any other keeps what the project chose.

/// The environment variables to set: one per built-in profile whose debug setting (from the
/// environment, else the workspace manifest, else cargo's default) has no line tables.
pub fn debug_env(manifest: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Vec<(String, &'static str)> {
    // `test` inherits `dev`'s setting and `bench` `release`'s, unless the manifest sets theirs.
    [("dev", true), ("test", true), ("release", false), ("bench", false)]
        .into_iter()
        .filter_map(|(profile, debug_by_default)| {
            let var = format!("CARGO_PROFILE_{}_DEBUG", profile.to_ascii_uppercase());
            if env(&var).is_some() {
                return None;
            }
            let has_lines = match manifest.and_then(|m| profile_debug(m, profile)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(manifest: Option<&str>, set: &[&str]) -> Vec<String> {
        debug_env(manifest, |v| set.contains(&v).then(String::new)).into_iter().map(|(v, _)| v).collect()
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
}
