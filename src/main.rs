//! `racewatch`: the command-line front end of the racewatch race detector.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod commands;
mod embedded;
mod terminal;

#[derive(Parser)]
#[command(
    name = "racewatch",
    version,
    about = "Sampling data race detector for production binaries",
    after_help = "Without a command, in a source checkout: build the demos and catch the race in one.\n\
                  The guide: docs/ (mdbook build docs); man racewatch once installed."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Decode every PC-keyed table of an ELF file.
    Dump(commands::dump::Args),
    /// Coverage report: per source file and function, what carries metadata and (with run-time
    /// profiles) where the detector sampled and watched.
    Coverage(commands::coverage::Args),
    /// Check the tables against the machine code.
    Verify(commands::verify::Args),
    /// Print the compiler flags that emit racewatch metadata.
    Flags(commands::flags::Args),
    /// Run cargo with the metadata flags, in its own target directory.
    Cargo(commands::cargo::Args),
    /// Run a program with the runtime preloaded.
    Run(commands::run::Args),
    /// Print the path of the preload runtime (libracewatch.so).
    RuntimePath,
    /// Ingest report logs of many processes into a store and list the distinct races, most frequent first.
    Triage(commands::triage::Args),
    /// Generate the man pages or a shell's completion script (for packagers).
    #[command(hide = true)]
    Generate(commands::generate::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Dump(args)) => commands::dump::run(args),
        Some(Command::Coverage(args)) => commands::coverage::run(args),
        Some(Command::Verify(args)) => commands::verify::run(args),
        Some(Command::Flags(args)) => commands::flags::run(args),
        Some(Command::Cargo(args)) => commands::cargo::run(args),
        Some(Command::Run(args)) => commands::run::run(args),
        Some(Command::RuntimePath) => commands::run::print_runtime_path(),
        Some(Command::Triage(args)) => commands::triage::run(args),
        Some(Command::Generate(args)) => commands::generate::run(args),
        None => commands::demo::run(),
    }
}
