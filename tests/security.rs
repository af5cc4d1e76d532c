//! docs/SECURITY.md's promises as the attacks they answer, each played for real: a second local user
//! (the tests run as root and act as uid 12345 with `setpriv`) who plants files in the shared
//! temporary directory, hostile report logs, a hostile HTTP server, and a PostgreSQL server reached
//! over TLS. Tests that need root (to be two users) say SKIP and pass when run as another user.

mod common;

use common::racewatch;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The attacker's uid (not in /etc/passwd: nothing of theirs exists but what they make).
const ATTACKER: u32 = 12345;

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

fn is_root() -> bool {
    euid() == 0
}

/// A fresh directory in /tmp (not under target/: the attacker must reach it) with `mode`.
fn shared_dir(name: &str, mode: u32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("racewatch-security-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// Runs `script` with `sh -c` as the attacker; panics when it fails.
fn as_attacker(script: &str) {
    let out = Command::new("setpriv")
        .args([&format!("--reuid={ATTACKER}"), &format!("--regid={ATTACKER}"), "--clear-groups", "--"])
        .args(["sh", "-c", script])
        .output()
        .expect("setpriv");
    common::check(out, &format!("as uid {ATTACKER}: {script}"));
}

/// racewatch with a bare environment (as a service account or `env -i` has it) plus `vars`.
fn racewatch_env(vars: &[(&str, &Path)]) -> Command {
    let mut cmd = racewatch();
    cmd.env_clear().env("PATH", "/usr/bin:/bin");
    for (name, value) in vars {
        cmd.env(name, value);
    }
    cmd
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---- 1. The runtime written to the shared temporary directory ----

/// A shared library whose constructor creates `marker`: what an attacker would have preloaded.
fn planted_library(dir: &Path, marker: &Path) -> Option<PathBuf> {
    let clang = common::clang()?;
    let src = dir.join("planted.c");
    std::fs::write(
        &src,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void planted(void) {{\n\
             int fd = open(\"{}\", O_WRONLY | O_CREAT, 0666);\n if (fd >= 0) close(fd);\n}}\n",
            marker.display()
        ),
    )
    .unwrap();
    let lib = dir.join("planted.so");
    common::check(
        Command::new(clang).args(["-shared", "-fPIC", "-O1"]).arg(&src).arg("-o").arg(&lib).output().unwrap(),
        "clang -shared",
    );
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    Some(lib)
}

/// `racewatch runtime-path` in a bare environment with `TMPDIR=tmp`: the path it printed.
fn runtime_path_in(tmp: &Path) -> PathBuf {
    let out = common::check(racewatch_env(&[("TMPDIR", tmp)]).arg("runtime-path").output().unwrap(), "runtime-path");
    PathBuf::from(stdout(&out).trim())
}

/// With no `$HOME` (a service account, `env -i`), the runtime goes to `$TMPDIR`. Another user who made
/// racewatch's directory there first, with a library of the runtime's exact size at the runtime's
/// path, or a symbolic link to such a directory, gets nothing loaded: racewatch uses a fresh private
/// directory instead. A copy in our own directory that is not byte for byte the runtime is replaced.
#[test]
fn a_runtime_planted_in_the_shared_temp_dir_is_never_preloaded() {
    if !is_root() {
        eprintln!("SKIP: needs root to act as a second user");
        return;
    }
    let work = shared_dir("plant-work", 0o755);
    let marker = work.join("planted-library-ran");
    let Some(planted) = planted_library(&work, &marker) else { return };
    // The plant works when it is loaded: this test can fail.
    common::check(Command::new("/bin/true").env("LD_PRELOAD", &planted).output().unwrap(), "preload the plant");
    assert!(marker.exists(), "the planted library's constructor runs when it is preloaded");
    std::fs::remove_file(&marker).unwrap();

    // Where and how big the runtime is (a private temporary directory of our own).
    let probe = shared_dir("plant-probe", 0o700);
    let real = runtime_path_in(&probe);
    let version = real.parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
    let size = std::fs::metadata(&real).unwrap().len();
    let euid = euid();

    // The attacker plants racewatch-<our uid>/<version>/libracewatch.so, padded to the runtime's size.
    let tmp = shared_dir("plant-tmp", 0o1777);
    let theirs = tmp.join(format!("racewatch-{euid}"));
    let plant = theirs.join(&version).join("libracewatch.so");
    as_attacker(&format!(
        "umask 0 && mkdir -p {dir} && cp {planted} {plant} && truncate -s {size} {plant} && chmod 777 {theirs} {dir}",
        dir = plant.parent().unwrap().display(),
        planted = planted.display(),
        plant = plant.display(),
        theirs = theirs.display(),
    ));
    assert_eq!(std::fs::metadata(&plant).unwrap().len(), size);

    let out = racewatch_env(&[("TMPDIR", &tmp)]).args(["run", "--", "/bin/true"]).output().unwrap();
    common::check(out, "racewatch run -- /bin/true");
    assert!(!marker.exists(), "racewatch run preloaded the library another user planted");
    let used = runtime_path_in(&tmp);
    assert!(!used.starts_with(&theirs), "runtime path {} is in the attacker's directory", used.display());
    let dir = used.parent().unwrap().parent().unwrap();
    let meta = std::fs::symlink_metadata(dir).unwrap();
    assert!(meta.is_dir() && meta.uid() == euid && meta.mode() & 0o777 == 0o700, "{}: {meta:?}", dir.display());
    assert_eq!(std::fs::read(&used).unwrap(), std::fs::read(&real).unwrap(), "the runtime, byte for byte");

    // A symbolic link at the name, to the attacker's directory: not followed.
    let linked = shared_dir("plant-link", 0o1777);
    as_attacker(&format!("ln -s {} {}/racewatch-{euid}", theirs.display(), linked.display()));
    common::check(racewatch_env(&[("TMPDIR", &linked)]).args(["run", "--", "/bin/true"]).output().unwrap(), "run");
    assert!(!marker.exists(), "racewatch run followed a symbolic link to a planted library");
    assert!(!runtime_path_in(&linked).starts_with(linked.join(format!("racewatch-{euid}"))));

    // Our own directory, a copy of the right size that is not the runtime (a truncated write, a
    // tampered file): replaced before use.
    let ours = shared_dir("plant-ours", 0o700);
    let path = runtime_path_in(&ours);
    std::fs::copy(&planted, &path).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(size).unwrap();
    drop(file);
    common::check(racewatch_env(&[("TMPDIR", &ours)]).args(["run", "--", "/bin/true"]).output().unwrap(), "run");
    assert!(!marker.exists(), "racewatch run preloaded a same-size file that is not its runtime");
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&real).unwrap(), "replaced by the runtime");

    // A cache directory under $HOME that someone else owns (root run with another user's HOME).
    let home = std::env::temp_dir().join(format!("racewatch-security-plant-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    as_attacker(&format!(
        "mkdir -p {d} && cp {planted} {d}/libracewatch.so && truncate -s {size} {d}/libracewatch.so",
        d = home.join(".cache/racewatch").join(&version).display(),
        planted = planted.display()
    ));
    let tmp_home = shared_dir("plant-home-tmp", 0o1777);
    let out = racewatch_env(&[("HOME", &home), ("TMPDIR", &tmp_home)]).args(["run", "--", "/bin/true"]).output();
    common::check(out.unwrap(), "run with another user's HOME");
    assert!(!marker.exists(), "racewatch run preloaded a library from a cache directory another user owns");

    for dir in [work, probe, tmp, linked, ours, home, tmp_home] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// ---- Hostile report logs ----

/// A frame as the runtime writes it.
fn frame(function: Option<&str>, file: Option<&str>, module: &str, build_id: &str, offset: u64) -> serde_json::Value {
    serde_json::json!({
        "function": function, "file": file, "line": file.map(|_| 7), "column": null,
        "module": module, "build_id": build_id, "offset": format!("{offset:#x}"), "inlined": false,
    })
}

/// A schema-1 report line with these two stacks; `keys`: its race_key and source_key.
fn report(a: Vec<serde_json::Value>, b: Vec<serde_json::Value>, keys: Option<(&str, &str)>, summary: &str) -> String {
    let mut v = serde_json::json!({
        "kind": "data_race", "schema": 1, "racewatch": "0.1.0", "host": "web-1", "pid": 4242,
        "start_time": 1_700_000_000, "time": 1_700_000_100,
        "exe": {"path": "/srv/app", "build_id": "00112233445566778899aabbccddeeff00112233"},
        "app_version": "v1", "count": 1, "summary": summary,
        "accesses": [{"stack": a}, {"stack": b}], "location": {"kind": "unknown"},
    });
    if let Some((race_key, source_key)) = keys {
        v["race_key"] = race_key.into();
        v["source_key"] = source_key.into();
    }
    v.to_string()
}

/// `racewatch triage --db <dir>/races.db ARGS…` with `envs` (and no debuginfod unless they say).
fn triage(dir: &Path, envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = racewatch();
    cmd.arg("triage").arg("--db").arg(dir.join("races.db")).args(args).current_dir(dir);
    cmd.env_remove("DEBUGINFOD_URLS").env("XDG_CACHE_HOME", dir.join("cache"));
    for (name, value) in envs {
        cmd.env(name, value);
    }
    cmd.output().unwrap()
}

fn ok(out: Output, what: &str) -> (String, String) {
    let out = common::check(out, what);
    (stdout(&out), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A log whose build-id field holds a newline and `race:/` (and whose summary holds line breaks)
/// adds no line to the suppressions file `--format suppressions` writes: every line there is a
/// comment or a `race_key:`/`source_key:`/`pc:` line of hex digits. Ingest says the field was bad.
#[test]
fn a_log_cannot_inject_lines_into_the_suppressions_file() {
    let dir = common::scratch("security-suppressions");
    let forged = "abcd+0x1\nrace:/\n#";
    let a = vec![frame(Some("publish"), Some("src/a.rs"), "/srv/app", forged, 0x10)];
    let b =
        vec![frame(Some("consume"), Some("src/b.rs"), "/srv/app", "00112233445566778899aabbccddeeff00112233", 0x20)];
    let log = dir.join("fleet.log");
    let line = report(a, b, Some(("1111111111111111", "2222222222222222")), "data race\rrace:/\nrace:/");
    std::fs::write(&log, line + "\n").unwrap();
    let (_, stderr) = ok(triage(&dir, &[], &["-q", log.to_str().unwrap()]), "triage ingest");
    assert!(stderr.contains("1 malformed field ignored"), "{stderr}");
    ok(triage(&dir, &[], &["mark", "2222222222222222", "known"]), "triage mark");
    let (suppressions, _) = ok(triage(&dir, &[], &["--format", "suppressions"]), "--format suppressions");
    eprintln!("{suppressions}");
    let hex = |s: &str, len: Option<usize>| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) && len.is_none_or(|n| s.len() == n)
    };
    for line in suppressions.lines() {
        let valid = line.is_empty()
            || line.starts_with('#')
            || line.strip_prefix("race_key:").is_some_and(|k| hex(k, Some(16)))
            || line.strip_prefix("source_key:").is_some_and(|k| hex(k, Some(16)))
            || line
                .strip_prefix("pc:")
                .and_then(|pc| pc.split_once("+0x"))
                .is_some_and(|(id, off)| hex(id, None) && hex(off, None));
        assert!(valid, "a line the log made: {line:?} in\n{suppressions}");
    }
    assert!(suppressions.contains("source_key:2222222222222222\n"), "{suppressions}");
    assert!(suppressions.contains("race_key:1111111111111111\n"), "{suppressions}");
    assert!(suppressions.contains("pc:00112233445566778899aabbccddeeff00112233+0x20\n"), "{suppressions}");
}

/// Terminal escape sequences and line breaks in function names, files, module paths and versions
/// reach no text output raw: not the race list, not `show`, not `mark`'s line, not ingest's notes.
#[test]
fn escape_sequences_in_logs_never_reach_the_terminal() {
    let dir = common::scratch("security-escapes");
    let evil_function = "evil\x1b]0;owned\x07\x1b[2K\rfake row\n";
    let evil_file = "src/\x1b[31mred\u{202e}.rs";
    let a =
        vec![frame(Some(evil_function), Some(evil_file), "/srv/app", "00112233445566778899aabbccddeeff00112233", 0x10)];
    let b = vec![frame(Some("consume"), Some(evil_file), "/srv/app", "00112233445566778899aabbccddeeff00112233", 0x20)];
    let first = report(a, b, Some(("3333333333333333", "4444444444444444")), "data race\x1b[2J in evil");
    // Unsymbolized frames of a module whose path is an escape sequence: ingest's note names it.
    let raw = |offset| frame(None, None, "/srv/\x1b[2Japp\n", "ffeeddccbbaa99887766554433221100ffeeddcc", offset);
    let second = report(vec![raw(0x30)], vec![raw(0x40)], None, "data race");
    let log = dir.join("fleet.log");
    std::fs::write(&log, format!("{first}\n{second}\n")).unwrap();
    let clean = |text: &str, what: &str| {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
            "{what} carries control characters: {text:?}"
        );
    };
    let (list, notes) = ok(triage(&dir, &[], &[log.to_str().unwrap()]), "triage");
    eprintln!("{notes}{list}");
    clean(&list, "the race list");
    clean(&notes, "ingest's notes");
    assert_eq!(list.lines().count(), 3, "a header and one line per race: {list}");
    assert!(list.contains("evil\\x1b]0;owned\\x07\\x1b[2K\\rfake row\\n"), "{list}");
    let (show, _) = ok(triage(&dir, &[], &["show", "4444444444444444"]), "triage show");
    clean(&show, "show");
    assert!(show.contains("src/\\x1b[31mred\\u{202e}.rs"), "{show}");
    let (marked, _) = ok(triage(&dir, &[], &["mark", "4444444444444444", "known"]), "triage mark");
    clean(&marked, "mark");
}
