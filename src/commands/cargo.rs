//! `racewatch cargo [-o KEY=VALUE]… <cargo args…>`: cargo with the metadata
//! flags, in its own target directory (`<target dir>/racewatch`), so the
//! user's normal build is untouched; every profile keeps at least line tables
//! (see [`cargo_profiles`]; cargo would strip release builds'). For `test`, `run`, `bench` and
//! `nextest` the built programs
//! run with the runtime preloaded (`racewatch run -o … --` as the cargo
//! runner), with the test profile ([`TEST_PROFILE`]: the test rate `sample_period_us=250`, all four
//! watchpoints, the cold-code bias off), each option unless the user set it: tests want detection,
//! not 0.1% overhead, and a test hammers its racing line, which the bias would stop watching (tokio
//! 1.13's oneshot race: 1 run in 13 found with the bias, 3 in 4 without; with the test rate and four
//! watchpoints, 10 in 10 2-second runs). Doctests are compiled with
//! the metadata flags too (RUSTDOCFLAGS) and run through the same runner.
//!
//! The programs run with `fail_on_race=1` (`racewatch run`'s default): a test binary that reported a
//! race exits 66 at its end, so cargo counts it failed, and `racewatch cargo` fails with cargo. Each
//! process that reported races leaves a record in `<target dir>/racewatch/races/<pid of racewatch>/`
//! (`races_path`); after cargo ends, one line says how many distinct races were found in which
//! binaries ([`races`]).
//!
//! `--coverage FORMAT` (before or after the cargo subcommand) also collects run-time coverage: every
//! program cargo runs writes a profile into `<target dir>/racewatch/coverage/`, and after cargo ends
//! the merged report of the whole suite is printed (text) or written there (`index.html`,
//! `lcov.info`, `coverage.json`).

use super::cargo_profiles;
use super::coverage;
use super::races;
use super::run::{self_exe, sets_option};
use racewatch_instrument::toolchain::{self, RUST_DEBUGINFO_FLAG, RUST_FLAGS};
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Args)]
pub struct Args {
    /// A runtime option `key=value` for the programs cargo runs (test, run, bench); repeatable, before
    /// or after the cargo subcommand (not after `--`, which is the programs').
    #[arg(long = "option", short = 'o', value_name = "KEY=VALUE")]
    options: Vec<String>,
    /// Also report where the detector looked, for the whole run (test, run, bench): text (the
    /// default), html, lcov or json. May also follow the cargo subcommand (`racewatch cargo test
    /// --coverage html`).
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "text")]
    coverage: Option<String>,
    /// Arguments for cargo, e.g. `build --release` or `test`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "CARGO_ARGS")]
    args: Vec<OsString>,
}

/// Subcommands (and their aliases) whose programs are run by cargo.
const RUNNING_SUBCOMMANDS: &[&str] = &["test", "t", "run", "r", "bench", "nextest"];

/// The sampling rate of programs run by `racewatch cargo test|run|bench` unless the user chose one:
/// 4000 samples per CPU-second of each thread, 400 times the production default. A test runs its
/// racing code for a second or less, and the rarer interleavings (tokio 1.13.0's oneshot race) need
/// thousands of watches to be caught once.
pub const TEST_RATE: &str = "sample_period_us=250";
/// What `racewatch cargo` sets for the programs it runs, each unless the user set that option: the test
/// rate; every debug register, so that the threads of a test can watch at once (with one, a second
/// thread's samples find it busy); and the cold-code bias off, since a test's racing line is hot by
/// design and the bias (meant for production sampling) would stop watching it.
const TEST_PROFILE: [(&str, &str); 3] =
    [("sample_period_us", TEST_RATE), ("watchpoints", "watchpoints=4"), ("cold_bias", "cold_bias=0")];

/// cargo's global options that take a separate value.
const GLOBAL_OPTIONS_WITH_VALUE: &[&str] = &["--config", "-Z", "-C", "--color"];

pub fn run(mut args: Args) -> ExitCode {
    // `racewatch cargo --coverage test`: a bare --coverage (text) took the subcommand as its value.
    if let Some(value) = args.coverage.clone().filter(|v| coverage_format(v).is_err() && !v.is_empty()) {
        args.args.insert(0, value.into());
        args.coverage = Some("text".to_string());
    }
    if let Some(format) = take_option(&mut args.args, "--coverage") {
        args.coverage = Some(format);
    }
    // `racewatch cargo test -o stats=1`: cargo has no `-o`; the option is racewatch's, as before the
    // subcommand (after `--` it stays the test harness's).
    match take_runtime_options(&mut args.args) {
        Ok(options) => args.options.extend(options),
        Err(flag) => {
            eprintln!("racewatch: {flag} needs a value KEY=VALUE (racewatch cargo -o KEY=VALUE test …)");
            return ExitCode::from(2);
        }
    }
    let coverage = match args.coverage.as_deref().map(coverage_format) {
        None => None,
        Some(Ok(format)) => Some(format),
        Some(Err(bad)) => {
            eprintln!(
                "racewatch: --coverage {bad}: expected text, html, lcov or json (a test filter goes after a \
                 format: --coverage text {bad})"
            );
            return ExitCode::from(2);
        }
    };
    // `racewatch cargo +stable test`: check the compiler of that toolchain.
    let toolchain_arg = args.args.first().and_then(|a| a.to_str()).and_then(|a| a.strip_prefix('+'));
    let rustc = match toolchain::check_rustc_for(toolchain_arg) {
        Ok(info) => info,
        Err(err) => {
            eprintln!("racewatch: {err}");
            return ExitCode::FAILURE;
        }
    };
    // `+toolchain` needs rustup's proxy; `$CARGO` (set inside cargo) is a toolchain's own binary.
    let cargo = match toolchain_arg {
        Some(_) => OsString::from("cargo"),
        None => std::env::var_os("CARGO").filter(|c| !c.is_empty()).unwrap_or_else(|| "cargo".into()),
    };
    let mut cmd = Command::new(&cargo);
    cmd.args(&args.args);

    let user_flags = user_rustflags(std::env::var_os("CARGO_ENCODED_RUSTFLAGS"), std::env::var_os("RUSTFLAGS"));
    // Line tables come from the profiles (below), so the project's own debug info is not lowered.
    cmd.env("CARGO_ENCODED_RUSTFLAGS", encoded_rustflags(&user_flags, false));
    cmd.env_remove("RUSTFLAGS");
    // Doctests too: rustdoc compiles them with the metadata flags, and they run through the runner.
    let user_doc_flags =
        user_rustflags(std::env::var_os("CARGO_ENCODED_RUSTDOCFLAGS"), std::env::var_os("RUSTDOCFLAGS"));
    cmd.env("CARGO_ENCODED_RUSTDOCFLAGS", encoded_rustflags(&user_doc_flags, true));
    cmd.env_remove("RUSTDOCFLAGS");

    let workspace = workspace(&cargo, &args.args);
    let racewatch_target = match option_value(&args.args, "--target-dir") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => workspace.as_ref().map(|w| w.target_directory.join("racewatch")),
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let settings = cargo_profiles::settings_texts(workspace.as_ref().map(|w| w.root.as_path()), &cwd);
    for (var, value) in cargo_profiles::profile_env(&settings, |var| std::env::var(var).ok()) {
        cmd.env(var, value);
    }
    if !has_option(&args.args, "--target-dir") {
        if let Some(dir) = &racewatch_target {
            cmd.env("CARGO_TARGET_DIR", dir);
        }
    }

    let subcommand = subcommand(&args.args);
    // `test --no-run` builds only: no runner, no test-rate line, no summary of races nobody looked for.
    let runs_programs =
        subcommand.is_some_and(|s| RUNNING_SUBCOMMANDS.contains(&s)) && !has_option(&args.args, "--no-run");
    let profiles = match (coverage, runs_programs) {
        (Some(_), true) => {
            let dir = racewatch_target.clone().unwrap_or_else(|| PathBuf::from("target/racewatch")).join("coverage");
            match fresh_profile_dir(&dir) {
                Ok(()) => Some(dir),
                Err(err) => {
                    eprintln!("racewatch: --coverage: cannot prepare {}: {err}", dir.display());
                    return ExitCode::from(2);
                }
            }
        }
        (Some(_), false) => {
            eprintln!("racewatch: --coverage needs a subcommand that runs programs (test, run, bench, nextest)");
            return ExitCode::from(2);
        }
        _ => None,
    };

    let mut races_dir = None;
    if runs_programs {
        let triple = option_value(&args.args, "--target").or(rustc.host);
        if let Some(triple) = triple {
            let env_options = std::env::var("RACEWATCH_OPTIONS").ok();
            let test_rate = !sets_option("sample_period_us", &args.options, env_options.as_deref());
            let mut options = runner_options(&args.options, env_options.as_deref());
            if let Some(dir) = &profiles {
                options.push(format!("coverage_path={}", dir.join(PROFILE_PREFIX).display()));
            }
            let target = racewatch_target.clone().unwrap_or_else(|| PathBuf::from("target/racewatch"));
            races_dir = races_record_dir(&target.join("races").join(std::process::id().to_string()));
            if let Some(dir) = &races_dir {
                options.push(format!("races_path={}", dir.join(races::PREFIX).display()));
            }
            if test_rate {
                eprintln!(
                    "racewatch: programs run at the test rate {TEST_RATE} (`racewatch cargo -o sample_period_us=N …` \
                     to change)"
                );
            }
            let mut runner = format!("{} run --cargo-runner", self_exe().display());
            for option in &options {
                runner.push_str(&format!(" -o {option}"));
            }
            runner.push_str(" --");
            cmd.env(runner_var(&triple), runner);
        }
    }

    if profiles.is_none() && races_dir.is_none() {
        let err = cmd.exec();
        eprintln!("racewatch: cannot run `{}`: {err}", cargo.to_string_lossy());
        return ExitCode::from(127);
    }
    let status = match cmd.status() {
        Ok(status) => status,
        Err(err) => {
            eprintln!("racewatch: cannot run `{}`: {err}", cargo.to_string_lossy());
            return ExitCode::from(127);
        }
    };
    if let (Some(dir), Some(format)) = (profiles, coverage) {
        coverage_report(&dir, format);
    }
    if let Some(dir) = races_dir {
        let noun = if matches!(subcommand, Some("test" | "t" | "nextest")) { "test binary" } else { "binary" };
        eprintln!("{}", races::summary(&races::collect(&dir), noun));
        let _ = std::fs::remove_dir_all(&dir);
    }
    // cargo's own status (a signal death as 128 + signal, as a shell reports it).
    use std::os::unix::process::ExitStatusExt;
    let code = status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Prepares `dir` for the records of this run's races; `None` (no summary, with a warning) when it
/// cannot be created or its path cannot be passed in a runner option.
fn races_record_dir(dir: &std::path::Path) -> Option<PathBuf> {
    let text = dir.to_string_lossy();
    if text.contains(|c: char| c == ':' || c.is_whitespace()) {
        eprintln!("racewatch: warning: no race summary: {} cannot be passed to the runtime (':' or a space)", text);
        return None;
    }
    match races::fresh_dir(dir) {
        Ok(()) => Some(dir.to_path_buf()),
        Err(err) => {
            eprintln!("racewatch: warning: no race summary: cannot prepare {text}: {err}");
            None
        }
    }
}

/// File name prefix of the profiles under the coverage directory.
const PROFILE_PREFIX: &str = "profile";

fn coverage_format(name: &str) -> Result<coverage::Format, String> {
    match name {
        "text" => Ok(coverage::Format::Text),
        "html" => Ok(coverage::Format::Html),
        "lcov" => Ok(coverage::Format::Lcov),
        "json" => Ok(coverage::Format::Json),
        other => Err(other.to_string()),
    }
}

/// Creates `dir` and removes the profiles of an earlier run from it.
fn fresh_profile_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&format!("{PROFILE_PREFIX}.")) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The merged report of the run's profiles: printed (text) or written beside them.
fn coverage_report(dir: &std::path::Path, format: coverage::Format) {
    let Ok((report, _)) = coverage::report(&[], &[dir.join(PROFILE_PREFIX)]) else { return };
    let file = match format {
        coverage::Format::Text => None,
        coverage::Format::Html => Some(dir.join("index.html")),
        coverage::Format::Lcov => Some(dir.join("lcov.info")),
        coverage::Format::Json => Some(dir.join("coverage.json")),
    };
    let out = coverage::render(&report, format, false, file.as_deref());
    let processes = report.profile.as_ref().map_or(0, |p| p.processes);
    if super::emit(&out, file.as_deref()).is_ok() {
        if let Some(file) = file {
            let plural = racewatch_instrument::coverage::text::plural;
            eprintln!(
                "racewatch: coverage of {} ({}) written to {}",
                plural(report.binaries.len() as u64, "binary"),
                plural(processes as u64, "process"),
                file.display()
            );
        }
    }
}

/// Removes `name FORMAT`, `name=FORMAT` or a bare `name` (text) from the cargo arguments (before any
/// `--`) and returns the format; the word after a bare `name` is kept when it is no format.
fn take_option(args: &mut Vec<OsString>, name: &str) -> Option<String> {
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let at = args[..end].iter().position(|a| a == name || a.to_string_lossy().starts_with(&format!("{name}=")))?;
    let arg = args.remove(at).to_string_lossy().into_owned();
    if let Some((_, value)) = arg.split_once('=') {
        return Some(value.to_string());
    }
    let next = args.get(at).filter(|_| at < end - 1).map(|a| a.to_string_lossy().into_owned());
    // A word after it is its value, checked by the caller: `--coverage xml` is an error, not text and
    // a test filter `xml` (write `--coverage=text xml` for that).
    match next {
        Some(value) if !value.starts_with('-') => {
            args.remove(at);
            Some(value)
        }
        _ => Some("text".to_string()),
    }
}

/// Takes racewatch's `-o KEY=VALUE` / `--option KEY=VALUE` (also `-oKEY=VALUE`, `--option=KEY=VALUE`)
/// out of the cargo arguments before `--`; the flag itself when its value is missing.
fn take_runtime_options(args: &mut Vec<OsString>) -> Result<Vec<String>, String> {
    let mut options = Vec::new();
    let mut i = 0;
    while i < args.len() && args[i] != "--" {
        let arg = args[i].to_string_lossy().into_owned();
        let inline = arg.strip_prefix("--option=").or_else(|| arg.strip_prefix("-o").filter(|v| !v.is_empty()));
        if let Some(value) = inline {
            options.push(value.to_string());
            args.remove(i);
        } else if arg == "-o" || arg == "--option" {
            let value = args.get(i + 1).map(|v| v.to_string_lossy().into_owned());
            match value.filter(|v| v.contains('=') && v != "--") {
                Some(value) => {
                    options.push(value);
                    args.drain(i..i + 2);
                }
                None => return Err(arg),
            }
        } else {
            i += 1;
        }
    }
    Ok(options)
}

/// The `-o` options of the runner: the test profile first, each option unless the user's `-o` options or
/// `RACEWATCH_OPTIONS` set it, then the user's `-o` options (later wins in `racewatch run`).
fn runner_options(user: &[String], env: Option<&str>) -> Vec<String> {
    TEST_PROFILE
        .into_iter()
        .filter(|(key, _)| !sets_option(key, user, env))
        .map(|(_, option)| option.to_string())
        .chain(user.iter().cloned())
        .collect()
}

/// The user's own rustflags: CARGO_ENCODED_RUSTFLAGS wins over RUSTFLAGS,
/// as in cargo.
fn user_rustflags(encoded: Option<OsString>, plain: Option<OsString>) -> Vec<String> {
    if let Some(encoded) = encoded {
        let encoded = encoded.to_string_lossy().into_owned();
        return encoded.split('\x1f').filter(|f| !f.is_empty()).map(str::to_owned).collect();
    }
    plain.map(|p| p.to_string_lossy().split_whitespace().map(str::to_owned).collect()).unwrap_or_default()
}

/// The user's flags followed by the metadata flags, in cargo's encoding.
fn encoded_rustflags(user: &[String], debuginfo: bool) -> String {
    let ours = RUST_FLAGS
        .iter()
        .copied()
        .filter(|f| debuginfo || *f != RUST_DEBUGINFO_FLAG)
        .filter(|f| !user.iter().any(|u| u == f));
    user.iter().map(String::as_str).chain(ours).collect::<Vec<_>>().join("\x1f")
}

/// `CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER` for `x86_64-unknown-linux-gnu`.
fn runner_var(triple: &str) -> String {
    let upper: String =
        triple.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("CARGO_TARGET_{upper}_RUNNER")
}

/// The cargo subcommand: the first argument that is neither an option, an
/// option's value, nor a `+toolchain`.
fn subcommand(args: &[OsString]) -> Option<&str> {
    let mut iter = args.iter().map(|a| a.to_str().unwrap_or(""));
    while let Some(arg) = iter.next() {
        if GLOBAL_OPTIONS_WITH_VALUE.contains(&arg) {
            iter.next();
        } else if !arg.starts_with('-') && !arg.starts_with('+') {
            return Some(arg);
        }
    }
    None
}

fn has_option(args: &[OsString], name: &str) -> bool {
    option_value(args, name).is_some() || args.iter().any(|a| a == name)
}

/// The value of `--name value` or `--name=value` before any `--`.
fn option_value(args: &[OsString], name: &str) -> Option<String> {
    let mut iter = args.iter().map(|a| a.to_string_lossy()).take_while(|a| a != "--");
    while let Some(arg) = iter.next() {
        if arg == name {
            return iter.next().map(|v| v.into_owned());
        }
        if let Some(value) = arg.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
            return Some(value.to_owned());
        }
    }
    None
}

/// The project's target directory as cargo resolves it (CARGO_TARGET_DIR,
/// config, workspace root), from `cargo metadata`; `None` outside a project.
/// Where cargo puts a workspace's build output, and the workspace's root directory.
struct Workspace {
    target_directory: PathBuf,
    root: PathBuf,
}

fn workspace(cargo: &OsStr, args: &[OsString]) -> Option<Workspace> {
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--no-deps", "--format-version", "1"]);
    if let Some(manifest) = option_value(args, "--manifest-path") {
        cmd.arg("--manifest-path").arg(manifest);
    }
    let output = cmd.stderr(std::process::Stdio::null()).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let path = |key: &str| json.get(key)?.as_str().map(PathBuf::from);
    Some(Workspace { target_directory: path("target_directory")?, root: path("workspace_root")? })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn runtime_options_after_the_subcommand_are_racewatch_s() {
        let mut args = os(&["test", "--release", "-o", "stats=1", "-odelay_us=50", "--option=seed=3", "x", "--", "-o"]);
        assert_eq!(take_runtime_options(&mut args).unwrap(), ["stats=1", "delay_us=50", "seed=3"]);
        assert_eq!(args, os(&["test", "--release", "x", "--", "-o"]));
        assert_eq!(take_runtime_options(&mut os(&["test", "-o"])), Err("-o".to_string()));
        assert_eq!(take_runtime_options(&mut os(&["test", "--option", "--", "x"])), Err("--option".to_string()));
    }

    #[test]
    fn subcommand_skips_global_options() {
        assert_eq!(subcommand(&os(&["test", "--release"])), Some("test"));
        assert_eq!(subcommand(&os(&["+nightly", "-v", "--config", "x=1", "run", "--", "a"])), Some("run"));
        assert_eq!(subcommand(&os(&["--version"])), None);
    }

    #[test]
    fn options_are_found_in_both_spellings() {
        assert_eq!(option_value(&os(&["build", "--target", "t1"]), "--target").as_deref(), Some("t1"));
        assert_eq!(option_value(&os(&["build", "--target=t2"]), "--target").as_deref(), Some("t2"));
        assert_eq!(option_value(&os(&["run", "--", "--target", "x"]), "--target"), None);
        assert!(has_option(&os(&["build", "--target-dir", "d"]), "--target-dir"));
        assert!(!has_option(&os(&["build", "--target", "d"]), "--target-dir"));
    }

    #[test]
    fn user_rustflags_are_kept_before_ours() {
        let user = user_rustflags(None, Some("-C target-cpu=native".into()));
        assert_eq!(user, ["-C", "target-cpu=native"]);
        let encoded = encoded_rustflags(&user, false);
        assert!(encoded.starts_with("-C\x1ftarget-cpu=native\x1f-Cpasses=sanmd-module"), "{encoded:?}");
        let enc = user_rustflags(Some("-Ca b\x1f-Cb".into()), Some("ignored".into()));
        assert_eq!(enc, ["-Ca b", "-Cb"]);
        assert_eq!(encoded_rustflags(&[], true).split('\x1f').count(), RUST_FLAGS.len());
        // Builds get their line tables from the profiles, doctests (rustdoc) from the flag.
        assert!(!encoded_rustflags(&[], false).contains(RUST_DEBUGINFO_FLAG));
        assert!(encoded_rustflags(&[], true).contains(RUST_DEBUGINFO_FLAG));
    }

    #[test]
    fn the_test_profile_applies_unless_the_user_chose_each_option() {
        let [rate, watchpoints, bias] = TEST_PROFILE.map(|(_, option)| option);
        assert_eq!(runner_options(&[], None), [rate, watchpoints, bias]);
        assert_eq!(runner_options(&["stats=1".into()], Some("verbosity=1")), [rate, watchpoints, bias, "stats=1"]);
        assert_eq!(runner_options(&["sample_period_us=5".into()], None), [watchpoints, bias, "sample_period_us=5"]);
        assert_eq!(runner_options(&["cold_bias=1".into()], None), [rate, watchpoints, "cold_bias=1"]);
        assert_eq!(runner_options(&["watchpoints=1".into()], None), [rate, bias, "watchpoints=1"]);
        assert_eq!(runner_options(&[], Some("stats=1:sample_period_us=100000")), [watchpoints, bias]);
    }

    #[test]
    fn coverage_option_is_taken_from_the_cargo_arguments() {
        let mut args = os(&["test", "--coverage", "html", "--release", "--", "--coverage", "x"]);
        assert_eq!(take_option(&mut args, "--coverage").as_deref(), Some("html"));
        assert_eq!(args, os(&["test", "--release", "--", "--coverage", "x"]));
        let mut args = os(&["test", "--coverage=lcov"]);
        assert_eq!(take_option(&mut args, "--coverage").as_deref(), Some("lcov"));
        assert_eq!(args, os(&["test"]));
        assert_eq!(take_option(&mut os(&["test", "--", "--coverage", "a"]), "--coverage"), None);
        // Bare: text, and the next cargo argument stays.
        let mut args = os(&["test", "--coverage", "--release"]);
        assert_eq!(take_option(&mut args, "--coverage").as_deref(), Some("text"));
        assert_eq!(args, os(&["test", "--release"]));
        // A word is its value, even a wrong one (the caller rejects it), not a test filter.
        let mut args = os(&["test", "--coverage", "xml"]);
        assert_eq!(take_option(&mut args, "--coverage").as_deref(), Some("xml"));
        assert_eq!(args, os(&["test"]));
    }

    #[test]
    fn runner_variable_name() {
        assert_eq!(runner_var("x86_64-unknown-linux-gnu"), "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER");
    }
}
