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

/// Whether the test runs as root; says why it is skipped when not.
fn is_root(why: &str) -> bool {
    let root = euid() == 0;
    if !root {
        eprintln!("SKIP: needs root {why}");
    }
    root
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
    if !is_root("to act as a second user") {
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
    // Written by us alone; root's is readable by every user (see the privilege-dropping test below).
    let mode = if euid == 0 { 0o755 } else { 0o700 };
    assert!(meta.is_dir() && meta.uid() == euid && meta.mode() & 0o777 == mode, "{}: {meta:?}", dir.display());
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

/// Run by root, a program that drops its privileges and then starts other programs (a service's
/// privilege separation) keeps the runtime in them: root's copy lies where every user can read it and
/// only root can write it (`/var/cache/racewatch` with a `$HOME`, `$TMPDIR/racewatch-0` without), so
/// the loader prints no error into the program's stderr. Both places are checked: modes 0755, owned by
/// root.
#[test]
fn a_program_that_drops_root_keeps_the_runtime_in_the_programs_it_starts() {
    if !is_root("to drop its privileges") {
        return;
    }
    let tmp = shared_dir("drop-root-tmp", 0o1777);
    for (label, home) in [("with $HOME", Some(Path::new("/root"))), ("without $HOME", None)] {
        let mut vars = vec![("TMPDIR", tmp.as_path())];
        vars.extend(home.map(|h| ("HOME", h)));
        let out = racewatch_env(&vars)
            .args(["run", "--", "setpriv", &format!("--reuid={ATTACKER}"), &format!("--regid={ATTACKER}")])
            // The runtime hides its LD_PRELOAD item from the shell: where it was loaded from, `grep` reads
            // in the shell's maps.
            .args(["--clear-groups", "--", "sh", "-c", "grep -m1 -o '/[^ ]*libracewatch.so' /proc/$$/maps; id -u"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{label}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("cannot be preloaded"), "{label}: the loader failed in the child: {stderr}");
        let text = stdout(&out);
        let mut lines = text.lines();
        let preload = PathBuf::from(lines.next().unwrap_or_default());
        assert_eq!(lines.next(), Some(ATTACKER.to_string().as_str()), "{label}: {text}");
        assert!(preload.ends_with("libracewatch.so"), "{label}: {text}");
        if home.is_some() {
            assert!(preload.starts_with("/var/cache/racewatch"), "{label}: {}", preload.display());
        } else {
            assert!(preload.starts_with(tmp.join("racewatch-0")), "{label}: {}", preload.display());
        }
        for dir in preload.ancestors().skip(1).take(2) {
            let meta = std::fs::symlink_metadata(dir).unwrap();
            assert!(meta.uid() == 0 && meta.mode() & 0o777 == 0o755, "{label}: {}: {meta:?}", dir.display());
        }
    }
    let _ = std::fs::remove_dir_all(tmp);
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

/// A C program built with DWARF and the build-id `build_id` (40 hex digits): `dir/name`, and the
/// offset of `function` in it.
fn program_with_build_id(dir: &Path, name: &str, function: &str, build_id: &str) -> Option<(PathBuf, u64)> {
    let clang = common::clang()?;
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, format!("__attribute__((noinline)) int {function}(int x) {{ return x * 3 + 1; }}\nint main(int c, char **v) {{ (void)v; return {function}(c) & 1; }}\n")).unwrap();
    let bin = dir.join(name);
    common::check(
        Command::new(clang)
            .args(["-g", "-O1", &format!("-Wl,--build-id=0x{build_id}")])
            .arg(&src)
            .arg("-o")
            .arg(&bin)
            .output()
            .unwrap(),
        "clang",
    );
    let nm = common::check(Command::new("nm").arg(&bin).output().unwrap(), "nm");
    let address = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(&format!(" {function}")))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .expect("the function's address");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some((bin, address))
}

/// A report of `symbolize=0` frames of the module `module` with `build_id` at `offset`.
fn raw_report(module: &str, build_id: &str, offset: u64) -> String {
    let raw = |o| frame(None, None, module, build_id, o);
    report(vec![raw(offset)], vec![raw(offset + 1)], None, "data race")
}

/// Without `$HOME`, the debuginfod cache is a directory in the shared temporary directory. Another
/// user who made it first, with a debug file that names the victim's build-id as they please, names
/// nothing: the victim's triage uses a fresh private directory instead (and says so), and what it
/// downloads there is the victim's alone (directory 0700, file 0600).
#[test]
fn a_debug_file_planted_in_the_shared_debuginfod_cache_names_nothing() {
    if !is_root("to act as a second user") {
        return;
    }
    let work = shared_dir("dbg-work", 0o755);
    let build_id = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";
    let Some((planted, offset)) = program_with_build_id(&work, "planted", "named_by_the_attacker", build_id) else {
        return;
    };
    let tmp = shared_dir("dbg-tmp", 0o1777);
    let theirs = tmp.join(format!("racewatch-debuginfod-{}", euid()));
    as_attacker(&format!(
        "umask 0 && mkdir -p {theirs}/{build_id} && cp {planted} {theirs}/{build_id}/debuginfo && chmod -R a+rwX {theirs}",
        theirs = theirs.display(),
        planted = planted.display()
    ));
    let log = work.join("fleet.log");
    std::fs::write(&log, raw_report("/srv/app", build_id, offset) + "\n").unwrap();
    let db = work.join("races.db");
    let bare = |args: &[&str]| {
        let mut cmd = racewatch_env(&[("TMPDIR", &tmp)]);
        cmd.arg("triage").arg("--db").arg(&db).args(args);
        cmd
    };
    let (_, notes) = ok(bare(&["-q", log.to_str().unwrap()]).output().unwrap(), "triage ingest");
    eprintln!("{notes}");
    let (races, _) = ok(bare(&["--format", "json"]).output().unwrap(), "triage --format json");
    assert!(!races.contains("named_by_the_attacker"), "the planted debug file named the race: {races}");
    assert!(notes.contains(&format!("debuginfod cache {} not used", theirs.display())), "{notes}");

    // A real download (a local HTTP server with the real debug file) lands in a private directory.
    let build_id2 = "600d600d600d600d600d600d600d600d600d600d";
    let Some((real, offset2)) = program_with_build_id(&work, "real", "named_by_its_debug_info", build_id2) else {
        return;
    };
    let body = std::fs::read(&real).unwrap();
    let server = Server::start(move |_, _| Reply::Body(body.clone(), true));
    std::fs::write(&log, raw_report("/srv/app2", build_id2, offset2) + "\n").unwrap();
    let mut cmd = bare(&["-q", log.to_str().unwrap()]);
    ok(cmd.env("DEBUGINFOD_URLS", server.url()).output().unwrap(), "triage ingest with debuginfod");
    let (races, _) = ok(bare(&["--format", "json"]).output().unwrap(), "triage --format json");
    assert!(races.contains("named_by_its_debug_info"), "{races}");
    let cached: Vec<PathBuf> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(build_id2).join("debuginfo").exists())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let meta = std::fs::symlink_metadata(&cached[0]).unwrap();
    assert!(meta.is_dir() && meta.uid() == euid() && meta.mode() & 0o777 == 0o700, "{}: {meta:?}", cached[0].display());
    let file = std::fs::metadata(cached[0].join(build_id2).join("debuginfo")).unwrap();
    assert_eq!(file.mode() & 0o777, 0o600);
    for dir in [work, tmp] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// ---- A hostile debuginfod server ----

/// What the test server does with one request.
enum Reply {
    /// `200 OK` and this body, with its `Content-Length` (true) or delimited by closing (false).
    Body(Vec<u8>, bool),
    /// `200 OK` announcing `len` bytes (or none), then `len` zero bytes as fast as the client reads.
    Huge(u64, bool),
    /// `200 OK` announcing a megabyte, then one byte a second, `n` bytes.
    Drip(u64),
    /// A redirect to this URL.
    Redirect(String),
}

/// A local HTTP server on its own thread; per connection, the bytes it managed to send.
struct Server {
    port: u16,
    sent: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

impl Server {
    fn start(reply: impl Fn(usize, &str) -> Reply + Send + 'static) -> Server {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = sent.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { continue };
                let mut request = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    request.push_str(&line);
                    line.clear();
                }
                let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut total = 0u64;
                let mut send = |bytes: &[u8], total: &mut u64| -> bool {
                    let ok = stream.write_all(bytes).is_ok();
                    if ok {
                        *total += bytes.len() as u64;
                    }
                    ok
                };
                match reply(n, &path) {
                    Reply::Body(body, with_length) => {
                        let length =
                            if with_length { format!("Content-Length: {}\r\n", body.len()) } else { String::new() };
                        let head = format!("HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n");
                        let _ = send(head.as_bytes(), &mut total) && send(&body, &mut total);
                    }
                    Reply::Huge(len, announce) => {
                        let length = if announce { format!("Content-Length: {len}\r\n") } else { String::new() };
                        let head = format!("HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n");
                        let chunk = vec![0u8; 1 << 20];
                        if send(head.as_bytes(), &mut total) {
                            for _ in 0..len >> 20 {
                                if !send(&chunk, &mut total) {
                                    break;
                                }
                            }
                        }
                    }
                    Reply::Drip(n) => {
                        let head = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n";
                        if send(head.as_bytes(), &mut total) {
                            for _ in 0..n {
                                std::thread::sleep(std::time::Duration::from_secs(1));
                                if !send(b"x", &mut total) {
                                    break;
                                }
                            }
                        }
                    }
                    Reply::Redirect(to) => {
                        let head = format!(
                            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                        let _ = send(head.as_bytes(), &mut total);
                    }
                }
                record.lock().unwrap().push(total);
            }
        });
        Server { port, sent }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn sent(&self) -> Vec<u64> {
        self.sent.lock().unwrap().clone()
    }
}

/// `racewatch triage -q` of one `symbolize=0` report whose build-id only the server `url` could have,
/// with `envs`: how long it took, and its notes.
fn ingest_with_server(name: &str, url: &str, envs: &[(&str, &str)]) -> (std::time::Duration, String) {
    let dir = common::scratch(name);
    let log = dir.join("fleet.log");
    std::fs::write(&log, raw_report("/srv/app", "abababababababababababababababababababab", 0x1000) + "\n").unwrap();
    let mut all = vec![("DEBUGINFOD_URLS", url), ("DEBUGINFOD_TIMEOUT", "2")];
    all.extend_from_slice(envs);
    let started = std::time::Instant::now();
    let (_, notes) = ok(triage(&dir, &all, &["-q", log.to_str().unwrap()]), "triage with a hostile server");
    (started.elapsed(), notes)
}

/// A server that sends one byte a second (each read well within `DEBUGINFOD_TIMEOUT`) costs one
/// `DEBUGINFOD_MAXTIME`, not the length of its drip.
#[test]
fn a_dripping_debuginfod_server_costs_at_most_the_deadline() {
    let server = Server::start(|_, _| Reply::Drip(30));
    let (elapsed, notes) = ingest_with_server("security-drip", &server.url(), &[("DEBUGINFOD_MAXTIME", "3")]);
    eprintln!("{notes}drip server: triage took {elapsed:?} with DEBUGINFOD_MAXTIME=3 (the drip lasts 30 s)");
    assert!(elapsed < std::time::Duration::from_secs(10), "{elapsed:?}");
    assert!(notes.contains("DEBUGINFOD_MAXTIME"), "{notes}");
}

/// A 400 MiB answer is not read: refused by its `Content-Length` (the default cap, 256 MiB), or cut
/// at `DEBUGINFOD_MAXSIZE` when it has none; nothing is left in the cache either way.
#[test]
fn a_huge_debuginfod_answer_is_never_read_whole() {
    const HUGE: u64 = 400 << 20;
    let announced = Server::start(|_, _| Reply::Huge(HUGE, true));
    let (elapsed, notes) = ingest_with_server("security-huge-announced", &announced.url(), &[]);
    let sent = announced.sent();
    eprintln!("{notes}400 MiB announced: {elapsed:?}, bytes sent per request {sent:?}");
    assert!(notes.contains("DEBUGINFOD_MAXSIZE"), "{notes}");
    assert!(sent.iter().all(|&n| n < 64 << 20), "{sent:?}");

    let unannounced = Server::start(|_, _| Reply::Huge(HUGE, false));
    let dir_name = "security-huge-unannounced";
    let (elapsed, notes) = ingest_with_server(dir_name, &unannounced.url(), &[("DEBUGINFOD_MAXSIZE", "1048576")]);
    let sent = unannounced.sent();
    eprintln!(
        "{notes}400 MiB without a length, DEBUGINFOD_MAXSIZE=1 MiB: {elapsed:?}, bytes sent per request {sent:?}"
    );
    assert!(notes.contains("DEBUGINFOD_MAXSIZE"), "{notes}");
    assert!(sent.iter().all(|&n| n < 64 << 20), "{sent:?}");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir_name).join("cache");
    let leftovers: Vec<_> = walk(&cache).into_iter().filter(|p| p.is_file()).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.extend(walk(&path));
        out.push(path);
    }
    out
}

/// A redirect to another origin (another port here) is not followed; one to the same origin is.
#[test]
fn debuginfod_redirects_stay_on_the_same_origin() {
    let elsewhere = Server::start(|_, _| Reply::Body(b"\x7fELF".to_vec(), true));
    let to = format!("{}/buildid/x/debuginfo", elsewhere.url());
    let redirecting = Server::start(move |_, _| Reply::Redirect(to.clone()));
    let (_, notes) = ingest_with_server("security-redirect", &redirecting.url(), &[]);
    eprintln!("{notes}");
    assert!(elsewhere.sent().is_empty(), "a redirect to another origin was followed");
    assert!(notes.contains("another origin"), "{notes}");

    // The same origin: followed (the second request gets the 404-free answer, a non-ELF body here).
    let same = Server::start(|n, path| {
        if n % 2 == 0 {
            Reply::Redirect(format!("{path}/moved"))
        } else {
            Reply::Body(b"not an ELF file".to_vec(), true)
        }
    });
    let (_, notes) = ingest_with_server("security-redirect-same", &same.url(), &[]);
    eprintln!("{notes}");
    assert!(same.sent().len() >= 2, "the same-origin redirect was not followed: {notes}");
    assert!(!notes.contains("another origin"), "{notes}");
}

/// Runs `cmd` (its output to files in `dir`) and waits for it with `wait4`: its exit status, its peak
/// resident memory in KiB, how long it took, and its stderr.
fn run_measured(mut cmd: Command, dir: &Path) -> (i32, u64, std::time::Duration, String) {
    let err = dir.join("stderr");
    cmd.stdout(std::fs::File::create(dir.join("stdout")).unwrap()).stderr(std::fs::File::create(&err).unwrap());
    let started = std::time::Instant::now();
    let child = cmd.spawn().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, filling the two live locals; the Child is never waited on again.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    std::mem::forget(child);
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64, started.elapsed(), std::fs::read_to_string(err).unwrap())
}

/// A log that names a 1 GiB file as its module, with 16 build-ids none of which is the file's, makes
/// triage read the file's headers and notes only, once: no gigabyte of memory, no 16 GiB read.
#[test]
fn a_large_file_named_as_a_module_is_never_read_whole() {
    let dir = common::scratch("security-large-module");
    let big = dir.join("big");
    std::fs::copy("/bin/true", &big).unwrap();
    std::fs::OpenOptions::new().write(true).open(&big).unwrap().set_len(1 << 30).unwrap();
    let lines: Vec<String> =
        (1..=16u64).map(|i| raw_report(big.to_str().unwrap(), &format!("{i:040x}"), 0x1000)).collect();
    let log = dir.join("fleet.log");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let mut cmd = racewatch();
    cmd.arg("triage").arg("--db").arg(dir.join("races.db")).arg("-q").arg(&log);
    cmd.env_remove("DEBUGINFOD_URLS").env("XDG_CACHE_HOME", dir.join("cache"));
    let (status, rss_kib, elapsed, stderr) = run_measured(cmd, &dir);
    eprintln!("{stderr}a 1 GiB module named with 16 build-ids: peak RSS {} MiB, {elapsed:?}", rss_kib >> 10);
    assert_eq!(status, 0, "{stderr}");
    assert!(stderr.contains("16 reports read"), "{stderr}");
    assert!(stderr.contains("another build"), "{stderr}");
    assert!(rss_kib < 256 << 10, "peak RSS {} MiB: the file was read whole", rss_kib >> 10);
}

// ---- The PostgreSQL store over TLS ----

/// A PostgreSQL server (Debian's packages, in a temporary directory) that takes TLS connections only
/// (`hostnossl … reject`), with password authentication and a certificate signed by a test CA.
struct PgTls {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

const PG_PASSWORD: &str = "s3cret-Tr0ub4dor";

impl PgTls {
    fn command(&self, tool: &str) -> Command {
        let mut cmd = Command::new("setpriv");
        if euid() == 0 {
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        }
        cmd.arg(self.bin.join(tool));
        cmd
    }

    fn start() -> Option<PgTls> {
        let Some(bin) = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").is_file())
            .max()
        else {
            eprintln!("SKIP: PostgreSQL is not installed (apt-get install postgresql)");
            return None;
        };
        if Command::new("openssl").arg("version").output().is_err() {
            eprintln!("SKIP: openssl is not installed (apt-get install openssl)");
            return None;
        }
        let dir = shared_dir("pg-tls", 0o700);
        let sh = |script: &str| {
            common::check(Command::new("sh").arg("-c").arg(script).current_dir(&dir).output().unwrap(), script);
        };
        sh("openssl req -x509 -new -nodes -newkey rsa:2048 -keyout ca.key -out ca.crt -days 2 -subj /CN=racewatch-test-ca \
            && openssl req -x509 -new -nodes -newkey rsa:2048 -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca \
            && openssl req -new -nodes -newkey rsa:2048 -keyout server.key -out server.csr -subj /CN=localhost \
            && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext \
            && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile san.ext \
            && chmod 600 server.key");
        std::fs::write(dir.join("pw"), format!("{PG_PASSWORD}\n")).unwrap();
        if euid() == 0 {
            sh("chown -R 65534:65534 . && chmod 755 .");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pg = PgTls { dir, bin, port };
        let data = pg.dir.join("data");
        let mut initdb = pg.command("initdb");
        initdb.arg("-D").arg(&data).args(["-U", "racewatch", "-A", "scram-sha-256"]);
        common::check(initdb.arg(format!("--pwfile={}", pg.dir.join("pw").display())).output().unwrap(), "initdb");
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 127.0.0.1/32 reject\n",
        )
        .unwrap();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={d} -c ssl=on \
             -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key",
            pg.port,
            d = pg.dir.display()
        );
        let log = pg.dir.join("log");
        let mut pg_ctl = pg.command("pg_ctl");
        pg_ctl.arg("-D").arg(&data).arg("-l").arg(&log).args(["-w", "-o", &options, "start"]);
        let out = pg_ctl.stdout(std::process::Stdio::null()).output().unwrap();
        assert!(out.status.success(), "pg_ctl start: {}", std::fs::read_to_string(&log).unwrap_or_default());
        Some(pg)
    }

    fn url(&self, password: &str, params: &str) -> String {
        format!("postgres://racewatch:{password}@127.0.0.1:{}/postgres?{params}", self.port)
    }
}

impl Drop for PgTls {
    fn drop(&mut self) {
        let _ = self.command("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sslmode=require` reaches a server that takes TLS only; `verify-full` checks the certificate
/// against `sslrootcert` (another CA: refused); `disable` is refused by that server. No message
/// carries the password, however the URL spells it.
#[test]
fn the_postgres_store_speaks_tls_and_never_prints_the_password() {
    let Some(pg) = PgTls::start() else { return };
    let dir = common::scratch("security-pg-tls");
    let run = |url: &str| racewatch().arg("triage").arg("--db").arg(url).current_dir(&dir).output().unwrap();
    let (list, _) = ok(run(&pg.url(PG_PASSWORD, "sslmode=require")), "sslmode=require");
    assert!(list.contains("no races in the store"), "{list}");
    let ca = pg.dir.join("ca.crt");
    let verify_full = format!("sslmode=verify-full&sslrootcert={}", ca.display());
    ok(run(&pg.url(PG_PASSWORD, &verify_full)), "sslmode=verify-full");
    let verify_ca = format!("sslmode=verify-ca&sslrootcert={}", ca.display());
    ok(run(&pg.url(PG_PASSWORD, &verify_ca)), "sslmode=verify-ca");

    let refused = |url: &str, secret: &str, why: &str| {
        let out = run(url);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!("{stderr}");
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(!stderr.contains(secret), "the password {secret:?} is in the message: {stderr}");
        assert!(stderr.contains(why), "{url}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    };
    let other_ca = format!("sslmode=verify-full&sslrootcert={}", pg.dir.join("other-ca.crt").display());
    refused(&pg.url(PG_PASSWORD, &other_ca), PG_PASSWORD, "cannot connect");
    refused(&pg.url(PG_PASSWORD, "sslmode=disable"), PG_PASSWORD, "cannot connect");
    refused(&pg.url("Wr0ng-pa55word", "sslmode=require"), "Wr0ng-pa55word", "password authentication failed");
    refused(&pg.url("wr%40ng-encoded", "sslmode=require"), "wr@ng-encoded", "password authentication failed");
    refused(&pg.url("wr@ng-unencoded", "sslmode=require"), "wr@ng-unencoded", "cannot connect");
    let in_query = format!("postgres://racewatch@127.0.0.1:{}/postgres?sslmode=require&password=Qu3ry-pa55", pg.port);
    refused(&in_query, "Qu3ry-pa55", "password authentication failed");
}
