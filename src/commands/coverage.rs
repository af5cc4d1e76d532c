//! `racewatch coverage [--format text|json|html|lcov] [--profile P]… [FILE…]`: per source file and
//! function, what carries race-detector metadata and — with run-time profiles (`coverage_path`) —
//! where the detector sampled and watched.
//!
//! Without FILEs, the binaries are the modules the profiles name (those still on disk).
//! Exit status: 0 when every input was read cleanly, 1 when a table is malformed or a profile is
//! unreadable (reported; the rest is used), 2 when no binary could be read.

use racewatch_instrument::coverage::profile::{self, Profile};
use racewatch_instrument::coverage::report::Report;
use racewatch_instrument::coverage::{html, json, lcov, text};
use racewatch_instrument::elf::Module;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
    Html,
    Lcov,
}

#[derive(clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Run-time coverage profiles, summed: files written by `coverage_path=PREFIX`, directories of
    /// them, or PREFIX itself (its PREFIX.* files). ELF files among them are taken as FILES.
    #[arg(long = "profile", short = 'p', value_name = "PROFILE", num_args = 1..)]
    profiles: Vec<PathBuf>,
    /// Text: list the files and functions of every group (by default only your code's).
    #[arg(long)]
    all: bool,
    /// Write the output to FILE instead of stdout.
    #[arg(long = "output", short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// ELF executables or shared libraries (default: the modules the profiles name).
    files: Vec<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    // `--profile P… BINARY…`: the list after --profile runs to the end; the ELF files in it are binaries.
    let (binaries, profiles): (Vec<PathBuf>, Vec<PathBuf>) = args.profiles.iter().cloned().partition(|p| is_elf(p));
    let files: Vec<PathBuf> = args.files.iter().cloned().chain(binaries).collect();
    match report(&files, &profiles) {
        Ok((report, status)) => {
            let out = render(&report, args.format, args.all, args.output.as_deref());
            if let Err(failed) = super::emit(&out, args.output.as_deref()) {
                return failed;
            }
            ExitCode::from(status)
        }
        Err(status) => status,
    }
}

/// Builds the report of `files` (or of the profiled modules) with `profiles`; the exit status for
/// the inputs that were read with problems (1), or `Err(2)` when there is nothing to report.
pub fn report(files: &[PathBuf], profiles: &[PathBuf]) -> Result<(Report, u8), ExitCode> {
    let mut status = 0;
    let profile = if profiles.is_empty() {
        None
    } else {
        let mut merged = Profile::default();
        for path in profile::expand(profiles) {
            if !path.exists() {
                eprintln!(
                    "racewatch: profile {}: no such file, and no {}.* profiles beside it",
                    path.display(),
                    path.display()
                );
                status = 1;
            } else if let Err(e) = merged.add_file(&path) {
                eprintln!("racewatch: profile {e}");
                status = 1;
            }
        }
        if merged.processes == 0 {
            eprintln!("racewatch: no racewatch profile found in {}", list(profiles));
            return Err(ExitCode::from(2));
        }
        Some(merged)
    };
    let files: Vec<PathBuf> = if files.is_empty() {
        match &profile {
            Some(p) => profiled_binaries(p),
            None => {
                eprintln!("racewatch: coverage needs binaries (FILE…) or --profile");
                return Err(ExitCode::from(2));
            }
        }
    } else {
        files.to_vec()
    };
    let mut modules = Vec::new();
    for path in &files {
        match Module::open(path) {
            Ok(m) => {
                for e in m.decode_errors() {
                    eprintln!("racewatch: {}: {e}", path.display());
                    status = 1;
                }
                modules.push(m);
            }
            Err(e) => {
                eprintln!("racewatch: {e}");
                status = 2;
            }
        }
    }
    if modules.is_empty() {
        if files.is_empty() {
            let named: Vec<&str> = profile.iter().flat_map(|p| &p.modules).map(|m| m.path.as_str()).take(3).collect();
            eprintln!(
                "racewatch: the profiles name no binary that is still on disk ({}); pass the binaries as FILE",
                named.join(", ")
            );
        }
        return Err(ExitCode::from(2));
    }
    Ok((Report::new(&modules, profile.as_ref()), status))
}

/// The profiled modules that carry covered code and still exist, each once (the runtime lists every
/// loaded module with counts, and the modules with metadata).
fn profiled_binaries(profile: &Profile) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> =
        profile.modules.iter().map(|m| PathBuf::from(&m.path)).filter(|p| p.is_file()).collect();
    paths.sort();
    paths.dedup();
    paths
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"\x7fELF"
}

fn list(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// The report in `format`; text fits the terminal when it goes to one.
pub fn render(report: &Report, format: Format, all: bool, output: Option<&Path>) -> String {
    match format {
        Format::Text => {
            let width = crate::terminal::width(output.is_none()).unwrap_or(text::DEFAULT_WIDTH);
            text::render(report, text::Layout { width, all })
        }
        Format::Json => json::render(report),
        Format::Html => html::render(report),
        Format::Lcov => {
            let (out, skipped) = lcov::render(report);
            if skipped > 0 {
                let files: usize = report.groups.iter().map(|g| g.files.len()).sum();
                eprintln!(
                    "racewatch: lcov: left out {skipped} of {files} source files: not on this machine, or no line \
                     information"
                );
            }
            out
        }
    }
}
