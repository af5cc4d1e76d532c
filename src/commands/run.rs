//! `racewatch run [--option k=v]… -- PROGRAM ARGS…`: run a program with the
//! runtime preloaded, and `racewatch runtime-path`.
//!
//! The program replaces racewatch (exec), so its pid, stdio, signals and exit
//! status are its own: a shell sees its exit code, or 128+signo when it dies
//! from a signal. One exception, TSan's convention: a program that reported a
//! race and would exit 0 exits with `exitcode` (66) instead, so a script or a
//! test runner sees the failure (the runtime option `fail_on_race=1`, set here
//! unless `-o fail_on_race=0` or `RACEWATCH_OPTIONS` says otherwise; a bare
//! `LD_PRELOAD` leaves the status alone). A program that cannot be found exits
//! 127 (126 when it exists but cannot be executed), as in a shell.

use crate::embedded;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Environment variable carrying the runtime's options (DESIGN.md contract).
pub const OPTIONS_VAR: &str = "RACEWATCH_OPTIONS";
/// The variable `racewatch run` passes the merged options in (the runtime reads it first, and takes it
/// out of the program's environment).
pub const RUN_OPTIONS_VAR: &str = "RACEWATCH_RUN_OPTIONS";

/// Set by `racewatch run` unless the user chose: a program that reported a race and would exit 0
/// exits with `exitcode` (66).
pub const FAIL_ON_RACE: &str = "fail_on_race=1";

#[derive(clap::Args)]
#[command(after_help = "Exit status: the program's own, except that a program that reported a race and would exit 0 \
                        exits 66 (-o exitcode=N to change it, -o fail_on_race=0 to keep 0).")]
pub struct Args {
    /// A runtime option `key=value` (see RACEWATCH_OPTIONS); repeatable, later wins.
    #[arg(long = "option", short = 'o', value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Set by `racewatch cargo` in the runner it gives cargo (see `merged_doctest_env`).
    #[arg(long, hide = true)]
    cargo_runner: bool,
    /// The program to run and its arguments (put them after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> ExitCode {
    let (program, rest) = args.command.split_first().expect("clap requires PROGRAM");
    let options = with_fail_on_race(&args.options, std::env::var(OPTIONS_VAR).ok().as_deref());
    let mut changes = match preload_env(&options) {
        Ok(changes) => changes,
        Err(msg) => {
            eprintln!("racewatch: {msg}");
            return ExitCode::from(2);
        }
    };
    if args.cargo_runner {
        if let Some((var, path)) = merged_doctest_env(program) {
            changes.push((var.into(), Some(path.into_os_string())));
        }
    }
    // Only returns on failure.
    let err = exec_in_order(program, rest, &changes);
    eprintln!("racewatch: cannot run `{}`: {err}", program.to_string_lossy());
    ExitCode::from(exec_failure_status(&err))
}

/// Replaces this process with `program` and `args`, in this process's environment with `changes` made
/// where the variables stand (a new one at the end, `None` removes it): the program lists its
/// variables in the order it would without racewatch (a `Command` with changes sorts them), and the
/// runtime, which takes its own out again, leaves exactly them. Returns only on failure.
fn exec_in_order(program: &OsStr, args: &[OsString], changes: &[(OsString, Option<OsString>)]) -> std::io::Error {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput));
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (key, value) in changes {
        let at = env.iter().position(|(k, _)| k == key);
        match (at, value) {
            (Some(at), Some(value)) => env[at].1 = value.clone(),
            (Some(at), None) => drop(env.remove(at)),
            (None, Some(value)) => env.push((key.clone(), value.clone())),
            (None, None) => {}
        }
    }
    let built = (|| -> Result<(CString, Vec<CString>, Vec<CString>), std::io::Error> {
        let argv =
            std::iter::once(program).chain(args.iter().map(OsString::as_os_str)).map(c).collect::<Result<_, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut entry = k.clone();
                entry.push("=");
                entry.push(v);
                c(&entry)
            })
            .collect::<Result<_, _>>()?;
        Ok((c(program)?, argv, envp))
    })();
    let (file, argv, envp) = match built {
        Ok(built) => built,
        Err(err) => return err,
    };
    let argv: Vec<*const libc::c_char> =
        argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        envp.iter().map(|e| e.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    // SAFETY: NUL-terminated strings and NULL-terminated arrays that live across the call. SIGPIPE goes
    // back to its default first, as `Command` does: Rust's runtime ignores it in racewatch itself.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::execvpe(file.as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
    std::io::Error::last_os_error()
}

/// `fail_on_race=1` before the user's `-o` options, unless they or `RACEWATCH_OPTIONS` (`env`) set it.
fn with_fail_on_race(user: &[String], env: Option<&str>) -> Vec<String> {
    let key = FAIL_ON_RACE.split_once('=').map_or(FAIL_ON_RACE, |(key, _)| key);
    let default = (!sets_option(key, user, env)).then(|| FAIL_ON_RACE.to_string());
    default.into_iter().chain(user.iter().cloned()).collect()
}

/// Whether `-o` options `user` or the option string `env` set `key`.
pub fn sets_option(key: &str, user: &[String], env: Option<&str>) -> bool {
    let sets = |kv: &str| kv.split(':').any(|kv| kv.split_once('=').is_some_and(|(k, _)| k.trim() == key));
    user.iter().any(|o| sets(o)) || env.is_some_and(sets)
}

/// Shell convention: 127 when the program is not found, 126 otherwise.
fn exec_failure_status(err: &std::io::Error) -> u8 {
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

pub fn print_runtime_path() -> ExitCode {
    match embedded::runtime_path() {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("racewatch: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A command for `program` with the runtime in `LD_PRELOAD` (before any
/// existing entries) and `RACEWATCH_OPTIONS` = the inherited value with
/// `options` (`key=value`, later wins) merged in.
pub fn preloaded(program: &OsStr, options: &[String]) -> Result<Command, String> {
    let mut cmd = Command::new(program);
    for (key, value) in preload_env(options)? {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    Ok(cmd)
}

/// The environment changes that preload the runtime: `LD_PRELOAD` with the runtime first, and
/// [`RUN_OPTIONS_VAR`] = `RACEWATCH_OPTIONS` with `options` merged in (none when that is empty). The
/// user's `RACEWATCH_OPTIONS` stays as it is: the program lists it as it would without racewatch, and
/// the runtime takes its own variables out.
fn preload_env(options: &[String]) -> Result<Vec<(OsString, Option<OsString>)>, String> {
    let runtime = embedded::runtime_path().map_err(|e| e.to_string())?;
    let preload = ld_preload(&runtime, std::env::var_os("LD_PRELOAD"))?;
    let inherited = std::env::var(OPTIONS_VAR).unwrap_or_default();
    let merged = merge_options(&inherited, options)?;
    let options = (!merged.is_empty()).then(|| merged.into());
    Ok(vec![("LD_PRELOAD".into(), Some(preload)), (RUN_OPTIONS_VAR.into(), options)])
}

fn ld_preload(runtime: &std::path::Path, existing: Option<OsString>) -> Result<OsString, String> {
    let rt = runtime.as_os_str();
    if rt.as_encoded_bytes().iter().any(|b| matches!(b, b':' | b' ' | b'\t' | b'\n')) {
        return Err(format!(
            "runtime path {} contains a separator LD_PRELOAD cannot express; set RACEWATCH_RUNTIME or XDG_CACHE_HOME",
            runtime.display()
        ));
    }
    let mut value = OsString::from(rt);
    if let Some(existing) = existing.filter(|e| !e.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    Ok(value)
}

/// Merges `key=value` overrides into a `k=v:k=v` option string. Entries of
/// the inherited string are kept in order (the runtime judges their validity);
/// an override replaces the entry with the same key, or is appended.
pub fn merge_options(inherited: &str, overrides: &[String]) -> Result<String, String> {
    let mut entries: Vec<String> = inherited.split(':').filter(|e| !e.is_empty()).map(str::to_owned).collect();
    // `-o a=1:b=2` is two options, as in RACEWATCH_OPTIONS.
    for opt in overrides.iter().flat_map(|o| o.split(':')).filter(|o| !o.is_empty()) {
        let Some((key, value)) = opt.split_once('=') else {
            return Err(format!("--option {opt:?}: expected KEY=VALUE"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("--option {opt:?}: expected KEY=VALUE with a non-empty key"));
        }
        let entry = format!("{key}={value}");
        let same_key = |e: &String| e.split_once('=').map_or(e.as_str(), |(k, _)| k).trim() == key;
        match entries.iter().position(same_key) {
            Some(i) => entries[i] = entry,
            None => entries.push(entry),
        }
    }
    Ok(entries.join(":"))
}

/// rustdoc's merged doctests (edition 2024) run each test in a process of its own only when their binary
/// (`rustdoctest*/rust_out`) finds its own path in `RUSTDOC_DOCTEST_BIN_PATH`, which rustdoc does not
/// set when a runner starts the binary: they would all share one process (rayon-core's doctests then
/// fail). The variable to set for `program`, when it is such a binary and the variable is not set.
fn merged_doctest_env(program: &OsStr) -> Option<(&'static str, PathBuf)> {
    const VAR: &str = "RUSTDOC_DOCTEST_BIN_PATH";
    let path = std::path::Path::new(program);
    let in_doctest_dir = path.parent()?.file_name()?.to_str()?.starts_with("rustdoctest");
    (path.file_name()? == "rust_out" && in_doctest_dir && std::env::var_os(VAR).is_none())
        .then(|| (VAR, path.to_path_buf()))
}

/// The racewatch executable itself (for cargo runners).
pub fn self_exe() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("racewatch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_doctest_binaries_get_their_own_path() {
        let bundle = OsStr::new("/tmp/rustdoctestAb12/rust_out");
        assert_eq!(merged_doctest_env(bundle), Some(("RUSTDOC_DOCTEST_BIN_PATH", PathBuf::from(bundle))));
        assert_eq!(merged_doctest_env(OsStr::new("/tmp/other/rust_out")), None);
        assert_eq!(merged_doctest_env(OsStr::new("/tmp/rustdoctestAb12/prog")), None);
    }

    #[test]
    fn fail_on_race_is_on_unless_the_user_chose() {
        assert_eq!(with_fail_on_race(&[], None), [FAIL_ON_RACE]);
        assert_eq!(with_fail_on_race(&["stats=1".into()], Some("seed=1")), [FAIL_ON_RACE, "stats=1"]);
        assert_eq!(with_fail_on_race(&["fail_on_race=0".into()], None), ["fail_on_race=0"]);
        assert!(with_fail_on_race(&[], Some("stats=1: fail_on_race=0")).is_empty());
        // Another key that merely contains the name does not count.
        assert_eq!(with_fail_on_race(&["no_fail_on_race=0".into()], None), [FAIL_ON_RACE, "no_fail_on_race=0"]);
    }

    #[test]
    fn later_option_wins_and_inherited_entries_stay() {
        let merged = merge_options("verbosity=1:stats=1", &["sample_period_us=1000".into(), "stats=0".into()]).unwrap();
        assert_eq!(merged, "verbosity=1:stats=0:sample_period_us=1000");
        let merged = merge_options("", &["a=1".into(), "a=2".into()]).unwrap();
        assert_eq!(merged, "a=2");
    }

    #[test]
    fn malformed_options_are_rejected() {
        assert!(merge_options("", &["novalue".into()]).is_err());
        assert!(merge_options("", &["=1".into()]).is_err());
        assert!(merge_options("", &["log_path=a:b".into()]).is_err());
        // One -o may hold several options, as RACEWATCH_OPTIONS does.
        let merged = merge_options("stats=1", &["report_format=json:symbolize=0".into(), "stats=0".into()]).unwrap();
        assert_eq!(merged, "stats=0:report_format=json:symbolize=0");
    }

    #[test]
    fn runtime_goes_first_in_ld_preload() {
        let rt = std::path::Path::new("/c/libracewatch.so");
        assert_eq!(ld_preload(rt, None).unwrap(), "/c/libracewatch.so");
        assert_eq!(ld_preload(rt, Some("/x.so".into())).unwrap(), "/c/libracewatch.so:/x.so");
        assert!(ld_preload(std::path::Path::new("/a b/l.so"), None).is_err());
    }
}
