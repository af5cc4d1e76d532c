//! Checks over the runtime's own sources (test builds only).

use std::path::PathBuf;

/// Every `.rs` file under the runtime's `src/`, with its text.
pub fn runtime_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path, text));
            }
        }
    }
    files
}

/// A file's text before its unit tests (`#[cfg(test)]` followed by `mod tests`).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests").map_or(text, |at| &text[..at])
}

/// The names racewatch exports in place of the C library's (`no_mangle` under the `preload` feature).
fn interposed_names(sources: &[(PathBuf, String)]) -> Vec<String> {
    let mut names = Vec::new();
    for (_, text) in sources {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim() != "#[cfg_attr(feature = \"preload\", no_mangle)]" {
                continue;
            }
            let Some(decl) = lines[i + 1..].iter().find(|l| l.contains(" fn ")) else { continue };
            let after = &decl[decl.find(" fn ").unwrap() + 4..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
        // Interposers the scandir macro defines: its first argument ends with the name.
        for (at, _) in text.match_indices("interpose_scandir!(") {
            let args = &text[at + "interpose_scandir!(".len()..];
            let args = &args[..args.find(')').unwrap_or(args.len())];
            let last_ident = args
                .split(',')
                .next()
                .and_then(|first| first.split_whitespace().last())
                .map(|w| w.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).to_string());
            names.extend(last_ident.filter(|n| !n.is_empty()));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// A call of `libc::open(...)` from inside the runtime binds to racewatch's own `open` (the library
/// defines it), not to the C library's: it runs the program's side of the interposer (a `/proc` view,
/// `unshare` ending the reporter thread, which then waited for itself while the program joined it).
/// The runtime's own calls go through `sys::real` or `sys::raw`.
#[test]
fn the_runtime_never_calls_its_own_interposers() {
    let sources = runtime_sources();
    let names = interposed_names(&sources);
    for expected in ["open", "unshare", "munmap", "sigpending", "syscall", "scandir", "pthread_create"] {
        assert!(names.iter().any(|n| n == expected), "interposer {expected} not found in {names:?}");
    }
    let mut found = Vec::new();
    for (path, text) in sources.iter().filter(|(path, _)| !path.ends_with("source_checks.rs")) {
        let code = without_tests(text);
        for name in &names {
            let call = format!("libc::{name}(");
            for (at, _) in code.match_indices(&call) {
                let line = code[..at].matches('\n').count() + 1;
                found.push(format!("{}:{line}: {call}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "the runtime calls its own interposers:\n{}", found.join("\n"));
}
