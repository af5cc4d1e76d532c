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
