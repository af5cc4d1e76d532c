//! `racewatch` with no arguments (`cargo run --release`): build the demos
//! workspace with the metadata flags, run the default racy demo with the
//! runtime preloaded, pass its output through and say whether a race report
//! was seen.
//!
//! Its exit status answers "does racewatch work here?": 0 when the demo's
//! known race was reported, 1 when it was not (or nothing could be built or
//! run). That is the opposite of `racewatch run`, on purpose: `run` judges
//! *your* program, where a race is a failure (`fail_on_race`: 66, as
//! ThreadSanitizer exits), while the demo is a self-check whose race is the
//! expected outcome, so a working set-up must not end `cargo run --release`
//! with cargo's "process didn't exit successfully". The demo program itself
//! runs without `fail_on_race` (its own status is shown as it is).

use super::run::preloaded;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The demos workspace of the source tree racewatch was built from.
const DEMOS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/demos");

/// The demo shown by default, and what it does.
const DEFAULT_DEMO: &str = "racy_counter";
const DEFAULT_DEMO_WHAT: &str = "two threads bump a `static mut` counter in `bump()` with no synchronisation";

/// Sample every millisecond of thread CPU time so the race is caught quickly.
const DEMO_OPTIONS: &[&str] = &["sample_period_us=1000"];

/// The report header every race report starts with (DESIGN.md contract).
const REPORT_HEADER: &str = "WARNING: racewatch: data race";

/// Environment that would change how the demos are built (the flags come from
/// demos/.cargo/config.toml, which RUSTFLAGS would override).
const BUILD_ENV_CLEARED: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "RUSTC_WORKSPACE_WRAPPER",
];

pub fn run() -> ExitCode {
    let demos = Path::new(DEMOS_DIR);
    if !demos.join("Cargo.toml").is_file() {
        eprintln!(
            "racewatch: the demos live in the racewatch source tree, which is not at {} any more; \
             run `cargo run --release` in a checkout, or see `racewatch --help`",
            demos.display()
        );
        return ExitCode::FAILURE;
    }
    let bin_dir = match build_demos(demos) {
        Ok(dir) => dir,
        Err(msg) => {
            eprintln!("racewatch: {msg}");
            return ExitCode::FAILURE;
        }
    };
    let program = bin_dir.join(DEFAULT_DEMO);
    let options: Vec<String> = DEMO_OPTIONS.iter().map(|s| s.to_string()).collect();
    let mut cmd = match preloaded(program.as_os_str(), &options) {
        Ok(cmd) => cmd,
        Err(msg) => {
            eprintln!("racewatch: {msg}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "racewatch: running demos/src/bin/{DEFAULT_DEMO}.rs ({DEFAULT_DEMO_WHAT}) with the runtime preloaded, \
         options {}",
        DEMO_OPTIONS.join(":")
    );
    match run_and_watch(&mut cmd) {
        Ok((status, reports)) => {
            if reports > 0 {
                eprintln!(
                    "racewatch: the demo exited ({status}); {reports} race report(s) shown above: \
                     the detector works here (`racewatch run` would exit 66)"
                );
            } else {
                eprintln!(
                    "racewatch: the demo exited ({status}) and no race report was seen; \
                     the race is in bump() in demos/src/bin/{DEFAULT_DEMO}.rs"
                );
            }
            ExitCode::from(verdict(reports))
        }
        Err(err) => {
            eprintln!("racewatch: cannot run {}: {err}", program.display());
            ExitCode::FAILURE
        }
    }
}

/// The demo's exit status: 0 when the race was reported (the detector works), 1 when it was missed.
fn verdict(reports: usize) -> u8 {
    if reports > 0 {
        0
    } else {
        1
    }
}

/// `cargo build --release` in demos/ (so its .cargo/config.toml applies) with
/// the cargo that built racewatch when known; returns the binaries' directory.
fn build_demos(demos: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").filter(|c| !c.is_empty()).unwrap_or_else(|| "cargo".into());
    let target_dir = demos.join("target");
    eprintln!("racewatch: building the demos (cargo build --release in {})", demos.display());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(demos).args(["build", "--release", "--bins", "--target-dir"]).arg(&target_dir);
    for var in BUILD_ENV_CLEARED {
        cmd.env_remove(var);
    }
    let status = cmd.status().map_err(|e| format!("cannot run {}: {e}", cargo.to_string_lossy()))?;
    if !status.success() {
        return Err(format!("building the demos failed ({status})"));
    }
    Ok(target_dir.join("release"))
}

/// Runs `cmd` with stdout inherited and stderr passed through line by line,
/// counting race report headers.
fn run_and_watch(cmd: &mut Command) -> std::io::Result<(std::process::ExitStatus, usize)> {
    let mut child = cmd.stdin(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut reports = 0;
    let mut out = std::io::stderr().lock();
    for line in BufReader::new(stderr).split(b'\n') {
        let line = line?;
        if line.windows(REPORT_HEADER.len()).any(|w| w == REPORT_HEADER.as_bytes()) {
            reports += 1;
        }
        out.write_all(&line)?;
        out.write_all(b"\n")?;
    }
    drop(out);
    Ok((child.wait()?, reports))
}

#[cfg(test)]
mod tests {
    /// The self-check's convention, the inverse of `racewatch run`'s (module documentation).
    #[test]
    fn a_reported_race_is_success_and_a_missed_one_failure() {
        assert_eq!(super::verdict(1), 0);
        assert_eq!(super::verdict(3), 0);
        assert_eq!(super::verdict(0), 1);
    }
}
