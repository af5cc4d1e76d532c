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

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files of the front page and the guide.
fn markdown_files() -> Vec<std::path::PathBuf> {
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "docs/src"] {
        let mut found: Vec<_> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

/// Lines outside fenced code blocks, with their line numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((n + 1, line));
        }
    }
    out
}

/// The anchor mdBook (and GitHub) gives a heading: lower case, letters, digits, `-` and `_` kept,
/// spaces made `-`, anything else (backticks, punctuation) dropped; a repeated heading gets `-1`, `-2`.
fn anchors(text: &str) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut out = std::collections::HashSet::new();
    for (_, line) in prose(text) {
        let Some(title) = line.trim_start_matches('#').strip_prefix(' ').filter(|_| line.starts_with('#')) else {
            continue;
        };
        let slug: String = title
            .trim()
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next().unwrap()),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

/// `[text](target)` links of a line, outside inline code.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => code = !code,
            b']' if !code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_string());
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every relative link of the README and the guide reaches a file that exists, and every `#anchor` a
/// heading of its page; every chapter is in SUMMARY.md; the front page stays a front page.
#[test]
fn guide_and_readme_links_resolve() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in prose(&text) {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let dest = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
                let place = format!("{}:{n}: {target}", file.strip_prefix(root()).unwrap().display());
                if !dest.exists() {
                    broken.push(format!("{place}: no such file"));
                } else if !anchor.is_empty() {
                    let page = std::fs::read_to_string(&dest).unwrap_or_default();
                    if !anchors(&page).contains(anchor) {
                        broken.push(format!("{place}: no heading with that anchor"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 50, "only {checked} links found: is the link parser still working?");

    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    for file in markdown_files().iter().filter(|f| f.parent() == Some(&root().join("docs/src"))) {
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(name == "SUMMARY.md" || summary.contains(&format!("({name})")), "{name} is not in SUMMARY.md");
    }

    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.lines().count() <= 220, "README.md is a front page: {} lines", readme.lines().count());
    assert!(!readme.contains("../shared"), "README.md names ../shared");
}

/// The option keys the runtime parses (the match arms of its parser, `"key" =>`, at the indentation of
/// `"sample_period_us" =>`).
fn runtime_options() -> (Vec<String>, String) {
    let source = std::fs::read_to_string(root().join("runtime/src/options.rs")).unwrap();
    let first = source.lines().find(|l| l.trim_start().starts_with("\"sample_period_us\" =>")).expect("the parser");
    let indent = &first[..first.len() - first.trim_start().len()];
    let keys = source
        .lines()
        .filter_map(|l| l.strip_prefix(indent).filter(|rest| rest.starts_with('"')))
        .filter_map(|l| l[1..].split_once("\" =>").map(|(key, _)| key.to_string()))
        .filter(|key| key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .collect();
    (keys, source)
}

/// The option reference table of the guide (running.md) lists exactly the runtime's options, and its
/// numeric defaults are the runtime's.
#[test]
fn option_table_matches_the_runtime() {
    let (keys, source) = runtime_options();
    assert!(keys.len() >= 20 && keys.iter().any(|k| k == "symbolize"), "parsed keys: {keys:?}");
    let guide = std::fs::read_to_string(root().join("docs/src/running.md")).unwrap();
    let rows: Vec<(String, String)> = guide
        .lines()
        .skip_while(|l| !l.starts_with("| key | default | meaning |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect();
    let mut in_guide: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    let mut in_runtime: Vec<&str> = keys.iter().map(String::as_str).collect();
    in_guide.sort_unstable();
    in_runtime.sort_unstable();
    assert_eq!(in_guide, in_runtime, "running.md's option table and runtime/src/options.rs differ");

    for (key, constant) in [
        ("sample_period_us", "DEFAULT_SAMPLE_PERIOD_US"),
        ("delay_us", "DEFAULT_DELAY_US"),
        ("watchpoints", "DEFAULT_WATCHPOINTS"),
        ("exitcode", "DEFAULT_EXITCODE"),
    ] {
        let line = source.lines().find(|l| l.contains(&format!("const {constant}:"))).expect(constant);
        let value: String = line.rsplit('=').next().unwrap().chars().filter(char::is_ascii_digit).collect();
        let default = &rows.iter().find(|(k, _)| k == key).unwrap().1;
        let shown: String = default.chars().take_while(char::is_ascii_digit).collect();
        assert_eq!(shown, value, "{key}: the guide says {default:?}, the runtime {constant} = {value}");
    }
}

/// A fenced block the guide marks to be run: `<!-- test -->` (a shell block, exit status 0),
/// `<!-- test: status=N -->`, or `<!-- test: file=NAME -->` (the block is written to NAME first).
struct Block {
    place: String,
    file: Option<String>,
    status: i32,
    body: String,
}

fn marked_blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(spec) = line.trim().strip_prefix("<!-- test").and_then(|s| s.strip_suffix("-->")) else { continue };
        let place = format!("{}:{}", path.file_name().unwrap().to_str().unwrap(), i + 1);
        let fence = lines.get(i + 1).copied().unwrap_or("");
        assert!(fence.starts_with("```"), "{place}: a test marker must be followed by a fenced block");
        let end = lines[i + 2..].iter().position(|l| l.starts_with("```")).expect("closing fence") + i + 2;
        let body = lines[i + 2..end].join("\n") + "\n";
        let (mut file, mut status) = (None, 0);
        for word in spec.trim_start_matches(':').split_whitespace() {
            match word.split_once('=') {
                Some(("file", name)) => file = Some(name.to_string()),
                Some(("status", n)) => status = n.parse().unwrap(),
                _ => panic!("{place}: unknown test marker word {word:?}"),
            }
        }
        assert!(file.is_some() || fence == "```sh", "{place}: only sh blocks are run");
        out.push(Block { place, file, status, body });
    }
    out
}

/// The shell commands of the guide that a test can run, run: each chapter's marked blocks in order, in
/// a scratch directory of its own, with this build's racewatch first in PATH (the C quick start:
/// clang-19 with `racewatch flags --c`, coverage, verify, `racewatch run` exiting 66, the production
/// profile's logs ingested by `racewatch triage`).
#[test]
fn guide_commands_run() {
    if common::clang().is_none() {
        return;
    }
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_racewatch")).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin_dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut ran = 0;
    for chapter in markdown_files().iter().filter(|f| f.parent() == Some(&root().join("docs/src"))) {
        let blocks = marked_blocks(chapter);
        if blocks.is_empty() {
            continue;
        }
        let dir = common::scratch(&format!("guide_{}", chapter.file_stem().unwrap().to_str().unwrap()));
        for block in blocks {
            if let Some(name) = &block.file {
                std::fs::write(dir.join(name), &block.body).unwrap();
                continue;
            }
            let out = std::process::Command::new("bash")
                .args(["-euo", "pipefail", "-c", &block.body])
                .current_dir(&dir)
                .env("PATH", &path)
                .env_remove("RACEWATCH_OPTIONS")
                .env_remove("LD_PRELOAD")
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(block.status),
                "{}: exit status of\n{}\nstdout:\n{}\nstderr:\n{}",
                block.place,
                block.body,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 4, "only {ran} guide blocks ran: are the test markers still there?");
}
