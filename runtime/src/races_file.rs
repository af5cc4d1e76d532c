//! The record of its races a process leaves for `racewatch cargo`'s summary (`races_path`): rewritten
//! each time the process prints a new race (the reporter's only way to print one), so it is complete
//! however the process ends: at exit, at `halt_on_error`, or dying of a signal or an abort. Each version
//! is written whole to a fresh file renamed over the last (mode 0600, never through another user's
//! symlink, never over a file this process did not create: see [`OwnFile`]).

use crate::own_file::{NotWritten, OwnFile};
use crate::{log, options};
use std::fmt::Write as _;

/// First line of a `races_path` file.
pub const MAGIC: &str = "racewatch-races 1";

/// With `races_path`, writes `<races_path>.<pid>` listing `races` (nothing when there are none).
pub fn write(races: &[String]) {
    let Some(prefix) = options::get().races_path.as_deref() else { return };
    if races.is_empty() {
        return;
    }
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.display().to_string()).unwrap_or_default();
    static FILE: OwnFile = OwnFile::new();
    match FILE.write(prefix, &render(&exe, races)) {
        Ok(_) | Err(NotWritten::Before) => {}
        Err(err) => log::warn(format_args!("races_path: cannot write {prefix}.{}: {err}", std::process::id())),
    }
}

/// The text of a `races_path` file: the magic line, `exe <path>`, then one `race <key>` line per race
/// (the key is the unordered pair of source locations, `file:line<TAB>file:line`).
pub fn render(exe: &str, races: &[String]) -> String {
    let mut out = format!("{MAGIC}\nexe {}\n", exe.replace('\n', " "));
    for race in races {
        let _ = writeln!(out, "race {race}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_names_the_executable_and_each_race() {
        let races = ["src/a.rs:3\tsrc/a.rs:3".to_string(), "src/a.rs:3\tsrc/b.rs:9".to_string()];
        assert_eq!(
            render("/t/deps/app-1f2e", &races),
            "racewatch-races 1\nexe /t/deps/app-1f2e\nrace src/a.rs:3\tsrc/a.rs:3\nrace src/a.rs:3\tsrc/b.rs:9\n"
        );
    }
}
