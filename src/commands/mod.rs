//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod cargo;
pub mod coverage;
pub mod demo;
pub mod dump;
pub mod flags;
pub mod run;
pub mod verify;

use racewatch_instrument::elf::Module;
use std::path::Path;
use std::process::ExitCode;

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
