//! The documentation an installed racewatch and its users rely on: the man pages and shell
//! completions generated from the command-line definition (`racewatch generate`), and the guide in
//! `docs/` (an mdBook).

mod common;

use std::path::Path;

/// The commands `racewatch --help` lists (not clap's `help`), and the help text itself.
fn listed_commands() -> (Vec<String>, String) {
    let out = common::check(common::racewatch().arg("--help").output().unwrap(), "racewatch --help");
    let help = String::from_utf8(out.stdout).unwrap();
    let commands = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect();
    (commands, help)
}

/// `racewatch generate man DIR` writes racewatch.1, which names every command, and a page per command;
/// `racewatch generate completions bash` completes every command. The generator itself is hidden, and
/// `--help` stays a short summary.
#[test]
fn man_pages_and_completions_cover_every_command() {
    let (commands, help) = listed_commands();
    for expected in ["run", "cargo", "flags", "triage", "verify", "coverage", "dump", "runtime-path"] {
        assert!(commands.iter().any(|c| c == expected), "--help lists {expected}:\n{help}");
    }
    assert!(!commands.iter().any(|c| c == "generate"), "generate is hidden:\n{help}");
    assert!(help.lines().count() <= 25, "--help stays short ({} lines):\n{help}", help.lines().count());

    let dir = common::scratch("docs_man");
    common::check(common::racewatch().args(["generate", "man"]).arg(&dir).output().unwrap(), "generate man");
    let top = std::fs::read_to_string(dir.join("racewatch.1")).expect("racewatch.1 written");
    assert!(top.contains("\n.TH racewatch 1 "), "a roff man page:\n{top}");
    for section in ["DESCRIPTION", "SUBCOMMANDS", "ENVIRONMENT", "EXIT STATUS", "SEE ALSO"] {
        assert!(top.contains(&format!(".SH {section}")) || top.contains(&format!(".SH \"{section}\"")), "{section}");
    }
    for command in &commands {
        // roff escapes the hyphen: racewatch\-run(1).
        let roff_name = format!("racewatch\\-{}", command.replace('-', "\\-"));
        assert!(top.contains(&roff_name), "racewatch.1 names {command}");
        let page = dir.join(format!("racewatch-{command}.1"));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(text.contains(".SH SYNOPSIS"), "{} has a synopsis", page.display());
    }
    assert!(!dir.join("racewatch-generate.1").exists() && !top.contains("generate"), "no page for the hidden command");
    // Without DIR: racewatch.1 on stdout.
    let out = common::check(common::racewatch().args(["generate", "man"]).output().unwrap(), "generate man");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), top);

    let out = common::check(
        common::racewatch().args(["generate", "completions", "bash"]).arg(&dir).output().unwrap(),
        "generate completions",
    );
    let written = String::from_utf8(out.stdout).unwrap();
    let script = std::fs::read_to_string(written.trim()).expect("the completion script's path is printed");
    assert!(Path::new(written.trim()).starts_with(&dir));
    assert!(script.contains("complete -F _racewatch"), "a bash completion script");
    let top_level = script.lines().find(|l| l.contains("opts=\"") && l.contains("--version")).expect("top-level opts");
    for command in &commands {
        assert!(top_level.split(['"', ' ']).any(|w| w == command), "bash completes {command}: {top_level}");
    }
    assert!(!script.contains("generate"), "the hidden command is not completed");
    // The triage command's own options are completed too.
    assert!(script.contains("--debug-dir") && script.contains("--format"), "triage's options");
}
