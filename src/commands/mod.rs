//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod cargo;
mod cargo_profiles;
pub mod coverage;
pub mod demo;
pub mod dump;
pub mod flags;
pub mod generate;
mod races;
pub mod run;
pub mod triage;
pub mod verify;

use racewatch_instrument::elf::Module;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// Writes a command's output to `file`, or to stdout. A reader that went away (`| head`) ends the
/// output quietly; any other failure is one line on stderr and exit status 2.
pub fn emit(out: &str, file: Option<&Path>) -> Result<(), ExitCode> {
    let result = match file {
        Some(path) => std::fs::write(path, out).map_err(|e| format!("cannot write {}: {e}", path.display())),
        None => match std::io::stdout().lock().write_all(out.as_bytes()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("cannot write the output: {e}")),
            _ => Ok(()),
        },
    };
    result.map_err(|why| {
        eprintln!("racewatch: {why}");
        ExitCode::from(2)
    })
}

/// Output format of `dump` and `verify`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Reads an ELF file; on failure prints one line (`<prefix>: <error>`) and
/// gives the exit status 2 that every inspecting command uses for unreadable input.
pub fn open_module(path: &Path, prefix: &str) -> Result<Module, ExitCode> {
    Module::open(path).map_err(|e| {
        eprintln!("{prefix}: {e}");
        ExitCode::from(2)
    })
}
