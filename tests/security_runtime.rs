//! End to end: the preloaded runtime with two local users on one machine, a victim (root) and an
//! attacker (uid 12345, through `setpriv`). Every scenario is a real program preloaded with the real
//! runtime (a copy of the file `racewatch runtime-path` names, in a directory both users can read):
//!
//! - secure execution: a setuid, setgid or file-capability program the attacker runs, with the runtime
//!   in `/etc/ld.so.preload` (a private mount namespace lays an overlay over `/etc`, as a fleet deploys a
//!   preload library), ignores the attacker's `RACEWATCH_OPTIONS`: no file created or written where it
//!   names, no root-only file read, one line says so;
//! - `coverage_path` and `races_path`: a symlink the attacker plants at the predictable `<path>.<pid>`
//!   (the victim's process waits in a shell until it is planted, then execs the program with that pid)
//!   is never written through, and the program's output and exit status stay its own;
//! - `log_path`: a symlinked directory the attacker planted, as the directory of `log_path=DIR/` or a
//!   component of `log_path=DIR/name`, is never followed; root's own symlink is;
//! - the files and directories the runtime creates are 0600 and 0700 (directories root creates: 0711).
//!
//! The tests need root (to act as two users, make setuid programs and mount), `setpriv`, `unshare`
//! and clang-19; without them they say SKIP and pass.

mod common;

use common::{build_c, check, clang, racewatch, retry_for, scratch, REPORT_HEADER};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const COMMON_C: &str = include_str!("host/common.c");
/// Two threads race for `argv[1]` seconds in covered code; the output never depends on timing. With
/// `exec PROGRAM` after that, it then becomes root through and through (a setuid-root program that
/// runs a helper as root, as `su` runs a shell) and execs PROGRAM with `argv[1]`: that process is not in
/// secure-execution mode.
const RACER_C: &str = r#"
int main(int argc, char **argv) {
  rw_start(2, argc > 1 ? atof(argv[1]) : 1.0, 0);
  rw_join();
  if (argc > 3 && strcmp(argv[2], "exec") == 0) {
    if (setgid(0) != 0 || setuid(0) != 0) return 3;
    execl(argv[3], argv[3], argv[1], (char *)0);
    return 4;
  }
  printf("done\n");
  return 0;
}
"#;
/// The attacker.
const ATTACKER: u32 = 12345;
/// The content of the victim's files, which must stay as they are.
const PRECIOUS: &str = "precious: the victim's own file\n";
/// A root-only file the attacker would like to read (as `/etc/shadow`).
const SECRET: &str = "topsecret-4242:$y$j9T$notahash:19000:0:99999:7:::\n";
/// How long to try for a run that printed a race (for `races_path`).
const RACE_BUDGET: Duration = Duration::from_secs(40);

/// One scenario's directory: the racy program and a copy of the runtime, both readable by everyone.
struct Setup {
    dir: PathBuf,
    program: PathBuf,
    runtime: PathBuf,
}

/// Builds the program and copies the runtime into a fresh directory, or `None` (SKIP) where the
/// scenario cannot run here.
fn setup(name: &str) -> Option<Setup> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: not root: the two-user scenarios need root");
        return None;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIP: setpriv not found");
        return None;
    }
    let clang = clang()?;
    let dir = scratch(name);
    let source = format!("#line 1 \"common.c\"\n{COMMON_C}\n#line 1 \"racer.c\"\n{RACER_C}");
    let program = build_c(&clang, &dir, "racer", &source, &["-pthread"]);
    let out = check(racewatch().arg("runtime-path").output().unwrap(), "racewatch runtime-path");
    let runtime = dir.join("libracewatch.so");
    std::fs::copy(String::from_utf8(out.stdout).unwrap().trim(), &runtime).expect("copy the runtime");
    // The attacker must reach the program and the runtime: every directory above is searchable.
    for path in dir.ancestors() {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        if mode & 0o001 == 0 {
            chmod(path, mode | 0o001);
        }
    }
    chmod(&dir, 0o755);
    chmod(&program, 0o755);
    chmod(&runtime, 0o755);
    Some(Setup { dir, program, runtime })
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

/// A directory every user may create files in (sticky, as /tmp).
fn shared_dir(parent: &Path) -> PathBuf {
    let dir = parent.join("shared");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o1777);
    dir
}

/// A root-only directory of the victim's with `name` holding [`PRECIOUS`] (mode 0600).
fn victim_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join("victim");
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&dir, 0o700);
    let file = dir.join(name);
    std::fs::write(&file, PRECIOUS).unwrap();
    chmod(&file, 0o600);
    dir
}

/// Runs `script` with `sh -c` as the attacker (uid and gid [`ATTACKER`], no groups).
fn as_attacker(script: &str) -> Output {
    let ids = ATTACKER.to_string();
    Command::new("setpriv")
        .args(["--reuid", &ids, "--regid", &ids, "--clear-groups", "sh", "-c", script])
        .env_remove("LD_PRELOAD")
        .env_remove("RACEWATCH_OPTIONS")
        .output()
        .unwrap()
}

/// A shell-quoted path.
fn quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The victim (root) runs the racy program for `seconds` with the runtime preloaded and `options`; the
/// process waits in a shell until `plant(pid)` has run, then execs the program with that pid.
fn run_as_victim(setup: &Setup, options: &str, seconds: &str, plant: impl FnOnce(u32)) -> Output {
    let mut child = Command::new("sh")
        .args(["-c", r#"read go && exec "$0" "$@""#])
        .arg(&setup.program)
        .arg(seconds)
        .env("LD_PRELOAD", &setup.runtime)
        .env("RACEWATCH_OPTIONS", options)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the victim");
    plant(child.id());
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The program's own behaviour is unchanged: exit status 0, its one line on stdout.
fn assert_program_unchanged(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(0), "{what}: exit status {}\n{}", out.status, text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n", "{what}: stdout\n{}", text(&out.stderr));
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("racewatch: warning: ")).collect()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn planted_symlinks_at_coverage_and_races_files_are_never_written_through() {
    let Some(setup) = setup("security_runtime_planted") else { return };
    let shared = shared_dir(&setup.dir);
    let victim = victim_dir(&setup.dir, "precious");
    let options = format!(
        "sample_period_us=1000:coverage_path={}:races_path={}",
        shared.join("cov").display(),
        shared.join("races").display()
    );
    // The symlinks point at the victim's file and at a name in the victim's directory that does not
    // exist (a write would create it). Tried until a run printed a race, so that races_path was written.
    let (_, runs) = retry_for(RACE_BUDGET, || {
        for entry in std::fs::read_dir(&shared).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let out = run_as_victim(&setup, &options, "1", |pid| {
            let plant = format!(
                "ln -s {} {} && ln -s {} {}",
                quote(&victim.join("precious")),
                quote(&shared.join(format!("cov.{pid}"))),
                quote(&victim.join("created")),
                quote(&shared.join(format!("races.{pid}")))
            );
            check(as_attacker(&plant), "the attacker plants symlinks");
        });
        let stderr = text(&out.stderr);
        assert_program_unchanged(&out, "with planted symlinks");
        assert_eq!(std::fs::read_to_string(victim.join("precious")).unwrap(), PRECIOUS, "{stderr}");
        assert_eq!(names(&victim), ["precious"], "a file was created through a symlink:\n{stderr}");
        let links = names(&shared);
        for name in &links {
            let meta = std::fs::symlink_metadata(shared.join(name)).unwrap();
            assert!(meta.file_type().is_symlink() && meta.uid() == ATTACKER, "{name} replaced:\n{stderr}");
        }
        assert_eq!(links.len(), 2, "{links:?}\n{stderr}");
        let warned = warnings(&stderr);
        assert!(
            warned.iter().any(|w| w.contains("coverage_path: cannot write") && w.contains("already there")),
            "one warning names the refused coverage file:\n{stderr}"
        );
        if !stderr.contains(REPORT_HEADER) {
            return Ok(None);
        }
        let races_warnings = warned.iter().filter(|w| w.contains("races_path: cannot write")).count();
        assert_eq!(races_warnings, 1, "one warning for the refused races file, however many races:\n{stderr}");
        Ok(Some(()))
    })
    .unwrap_or_else(|why: String| panic!("{why}"));
    eprintln!("a race was printed after {runs} run(s)");
}

#[test]
fn files_the_runtime_creates_are_private() {
    let Some(setup) = setup("security_runtime_modes") else { return };
    let logs = setup.dir.join("logs/new");
    let options = format!(
        "sample_period_us=1000:stats=1:log_path={}/:coverage_path={}:races_path={}",
        logs.display(),
        setup.dir.join("cov").display(),
        setup.dir.join("races").display()
    );
    let (pid, runs) = retry_for(RACE_BUDGET, || {
        let _ = std::fs::remove_dir_all(setup.dir.join("logs"));
        let mut pid = 0;
        let out = run_as_victim(&setup, &options, "1", |p| pid = p);
        assert_program_unchanged(&out, "with log_path, coverage_path and races_path");
        assert_eq!(text(&out.stderr), "", "everything goes to the log");
        let log = std::fs::read_dir(&logs).unwrap().next().expect("a log file").unwrap().path();
        let reported = std::fs::read_to_string(&log).unwrap().contains(REPORT_HEADER);
        Ok(reported.then_some(pid))
    })
    .unwrap_or_else(|why: String| panic!("{why}"));
    eprintln!("a race was printed after {runs} run(s)");
    // The log directory and its parent were created (0711 by root: no one else lists them, and a
    // program that gives up root still reaches the files made for it there), one log file (0600).
    assert_eq!(mode(&setup.dir.join("logs")), 0o711);
    assert_eq!(mode(&logs), 0o711);
    let log = std::fs::read_dir(&logs).unwrap().next().unwrap().unwrap().path();
    assert_eq!(mode(&log), 0o600, "{}", log.display());
    for name in [format!("cov.{pid}"), format!("races.{pid}")] {
        assert_eq!(mode(&setup.dir.join(&name)), 0o600, "{name}");
    }
    // The races file was rewritten by renames: no temporary file stays behind.
    let left: Vec<String> = names(&setup.dir).into_iter().filter(|n| n.contains(".tmp")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn log_path_never_follows_another_users_symlinked_directory() {
    let Some(setup) = setup("security_runtime_log_dir") else { return };
    let shared = shared_dir(&setup.dir);
    let victim = victim_dir(&setup.dir, "precious");
    // The attacker's symlinks to the victim's directory: one where a log directory is expected, one as
    // a directory component of a `<log_path>.<pid>` path.
    let plant = format!(
        "ln -s {v} {} && ln -s {v} {}",
        quote(&shared.join("logs")),
        quote(&shared.join("via")),
        v = quote(&victim)
    );
    check(as_attacker(&plant), "the attacker plants symlinks");
    for log_path in [format!("{}/", shared.join("logs").display()), format!("{}/rw", shared.join("via").display())] {
        let options = format!("sample_period_us=1000:stats=1:log_path={log_path}");
        let out = run_as_victim(&setup, &options, "0.3", |_| {});
        let stderr = text(&out.stderr);
        assert_program_unchanged(&out, &log_path);
        assert_eq!(names(&victim), ["precious"], "log_path={log_path} wrote in the victim's directory:\n{stderr}");
        let refused: Vec<&str> = warnings(&stderr).into_iter().filter(|w| w.contains("log_path: cannot use")).collect();
        assert_eq!(refused.len(), 1, "log_path={log_path}: one warning:\n{stderr}");
        assert!(refused[0].contains("symlink in the path belongs to another user"), "{}", refused[0]);
        assert!(stderr.contains("racewatch: stats: samples"), "the output goes to stderr instead:\n{stderr}");
    }
    // Root's own symlink (a trusted one) is followed.
    let own = setup.dir.join("own");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::symlink(&own, shared.join("mine")).unwrap();
    let options = format!("stats=1:log_path={}/", shared.join("mine").display());
    let out = run_as_victim(&setup, &options, "0.3", |_| {});
    assert_program_unchanged(&out, "through root's own symlink");
    assert_eq!(text(&out.stderr), "");
    assert_eq!(names(&own).len(), 1, "one log file through root's symlink");
}

/// How the attacker's copy of the program is made privileged, and the arguments it runs with after the
/// seconds (`setuid-exec`: the setuid-root program execs the plain program as root).
const PRIVILEGES: [(&str, &str, &str); 4] = [
    ("setuid", "chmod 4755", ""),
    ("setgid", "chmod 2755", ""),
    ("capability", "setcap cap_net_bind_service+ep", ""),
    ("setuid-exec", "chmod 4755", "exec"),
];

#[test]
fn secure_execution_ignores_the_callers_options() {
    let Some(setup) = setup("security_runtime_secure") else { return };
    if !Command::new("unshare").args(["--mount", "true"]).status().is_ok_and(|s| s.success()) {
        eprintln!("SKIP: unshare --mount does not work here");
        return;
    }
    let victim = victim_dir(&setup.dir, "precious");
    let shadow = victim.join("shadow");
    std::fs::write(&shadow, SECRET.repeat(3)).unwrap();
    chmod(&shadow, 0o600);
    let etc = setup.dir.join("etc");
    for (kind, make, then) in PRIVILEGES {
        if kind == "capability" && Command::new("setcap").arg("-v").output().is_err() {
            eprintln!("SKIP: setcap not found: no file-capability case");
            continue;
        }
        let program = setup.dir.join(format!("racer-{kind}"));
        std::fs::copy(&setup.program, &program).unwrap();
        let make = format!("{make} {}", quote(&program));
        check(Command::new("sh").args(["-c", &make]).output().unwrap(), &make);
        // The attacker's directory, where the options point.
        let attacker = setup.dir.join(format!("attacker-{kind}"));
        std::fs::create_dir(&attacker).unwrap();
        chown(&attacker, ATTACKER);
        let options = [
            "sample_period_us=1000",
            "stats=1",
            "verbosity=1",
            "fail_on_race=1",
            "exitcode=9",
            &format!("log_path={}/", attacker.join("logs").display()),
            &format!("coverage_path={}", attacker.join("cov").display()),
            &format!("races_path={}", attacker.join("races").display()),
            &format!("suppressions={}", shadow.display()),
        ]
        .join(":");
        // The attacker plants a symlink at the coverage file of the process it is about to exec (`$$`).
        let then = if then.is_empty() { String::new() } else { format!("{then} {}", quote(&setup.program)) };
        let attack = format!(
            "ln -s {} {}/cov.$$ && exec env RACEWATCH_OPTIONS={} {} 1 {then}",
            quote(&victim.join("precious")),
            quote(&attacker),
            quote(Path::new(&options)),
            quote(&program)
        );
        let out = preloaded_system_wide(&setup, &etc, &attack);
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("topsecret"), "{kind}: the root-only file leaked:\n{stderr}");
        assert_eq!(std::fs::read_to_string(victim.join("precious")).unwrap(), PRECIOUS, "{kind}:\n{stderr}");
        assert_eq!(names(&victim), ["precious", "shadow"], "{kind}:\n{stderr}");
        let planted = names(&attacker);
        assert!(planted.len() == 1 && planted[0].starts_with("cov."), "{kind}: files created: {planted:?}\n{stderr}");
        assert_program_unchanged(&out, kind);
        let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with("racewatch: ")).collect();
        assert_eq!(
            ours,
            ["racewatch: warning: secure execution (setuid, setgid or file capabilities): RACEWATCH_OPTIONS \
              ignored, defaults used"],
            "{kind}: one line, and no option honoured (stats, verbosity):\n{stderr}"
        );
    }
}

/// Runs `script` as the attacker in a private mount namespace whose `/etc/ld.so.preload` names the
/// runtime (an overlay over `/etc`, so the machine's own `/etc` is untouched).
fn preloaded_system_wide(setup: &Setup, etc: &Path, script: &str) -> Output {
    let (upper, work) = (etc.join("upper"), etc.join("work"));
    let _ = std::fs::remove_dir_all(etc);
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let ids = ATTACKER.to_string();
    let inner = format!(
        "mount --make-rprivate / && mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc && \
         echo {} > /etc/ld.so.preload && \
         exec setpriv --reuid {ids} --regid {ids} --clear-groups sh -c {}",
        upper.display(),
        work.display(),
        quote(&setup.runtime),
        quote(Path::new(script)),
    );
    Command::new("unshare")
        .args(["--mount", "sh", "-c", &inner])
        .env_remove("LD_PRELOAD")
        .env_remove("RACEWATCH_OPTIONS")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}
