//! `racewatch triage`: the command line of the triage library (`triage/`, crate `racewatch-triage`),
//! which ingests report logs of many processes into a store (SQLite or PostgreSQL) and lists the
//! distinct races in it, most frequent first. This module parses the arguments and prints.

use racewatch_triage as triage;
use std::path::PathBuf;
use std::process::ExitCode;

/// Output of the race list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per race.
    #[default]
    Text,
    /// A JSON array, one object per race (stable field names).
    Json,
    /// SARIF 2.1.0, one result per race.
    Sarif,
    /// The runtime's suppressions file for the races marked known or suppressed.
    Suppressions,
}

impl From<Format> for triage::Format {
    fn from(format: Format) -> triage::Format {
        match format {
            Format::Text => triage::Format::Text,
            Format::Json => triage::Format::Json,
            Format::Sarif => triage::Format::Sarif,
            Format::Suppressions => triage::Format::Suppressions,
        }
    }
}

/// A race's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Status {
    New,
    Known,
    Suppressed,
    Fixed,
}

impl From<Status> for triage::Status {
    fn from(status: Status) -> triage::Status {
        match status {
            Status::New => triage::Status::New,
            Status::Known => triage::Status::Known,
            Status::Suppressed => triage::Status::Suppressed,
            Status::Fixed => triage::Status::Fixed,
        }
    }
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Print one race: its keys, versions and stacks.
    Show {
        /// A source_key or race_key, or a unique prefix of one.
        key: String,
    },
    /// Set a race's status: known, suppressed (both go to --format suppressions), fixed, new.
    Mark {
        /// A source_key or race_key, or a unique prefix of one.
        key: String,
        status: Status,
        /// With `fixed`: the app version that has the fix (a report from it or a later version makes
        /// the race `new` again, regressed).
        #[arg(long = "in", value_name = "VERSION")]
        version: Option<String>,
    },
}

/// `racewatch triage [OPTIONS] [INPUT]...`: ingest, then list. `show KEY`, `mark KEY STATUS`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// The store: a SQLite file, or a PostgreSQL connection string (postgres://user@host/db).
    #[arg(long, global = true, value_name = "PATH|URL", default_value = "racewatch.db")]
    db: String,
    /// Where debug files are, for reports of `symbolize=0` runs (repeatable; also /usr/lib/debug and
    /// DEBUGINFOD_URLS).
    #[arg(long = "debug-dir", value_name = "DIR", global = true)]
    debug_dirs: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t, global = true)]
    format: Format,
    /// SARIF file locations are made relative to this directory (the checkout the binaries were
    /// built from, as their debug info spells it); default: the current directory.
    #[arg(long = "source-root", value_name = "DIR", global = true)]
    source_root: Option<PathBuf>,
    /// Only ingest; print no race list.
    #[arg(long, short)]
    quiet: bool,
    /// Report logs: files, directories (read recursively), `-` for stdin; gzip is unpacked. With none,
    /// the races already in the store are listed.
    #[arg(value_name = "INPUT")]
    inputs: Vec<String>,
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("racewatch triage: {}", triage::escape(&message.to_string()));
    ExitCode::from(2)
}

fn print(out: &str) -> ExitCode {
    match super::emit(out, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

pub fn run(args: Args) -> ExitCode {
    match args.action {
        Some(Action::Show { ref key }) => return show(&args, key),
        Some(Action::Mark { ref key, status, ref version }) => return mark(&args, key, status, version.as_deref()),
        None => {}
    }
    // Every input must exist before anything is read.
    let inputs = match triage::inputs(&args.inputs) {
        Ok(inputs) => inputs,
        Err(why) => return fail(why),
    };
    let mut store = match triage::open(&args.db) {
        Ok(store) => store,
        Err(why) => return fail(why),
    };
    if !args.inputs.is_empty() {
        match triage::ingest(&mut *store, &inputs, args.debug_dirs.clone()) {
            // Notes name modules, files and build-ids that came from the logs.
            Ok(messages) => messages.iter().for_each(|m| eprintln!("racewatch triage: {}", triage::escape(m))),
            Err(why) => return fail(why),
        }
    }
    if args.quiet {
        return ExitCode::SUCCESS;
    }
    let root = args.source_root.clone().or_else(|| std::env::current_dir().ok());
    match triage::list(&mut *store, args.format.into(), root.as_deref()) {
        Ok(out) => print(&out),
        Err(why) => fail(why),
    }
}

fn show(args: &Args, key: &str) -> ExitCode {
    if !matches!(args.format, Format::Text | Format::Json) {
        return fail("show prints text or json");
    }
    let shown =
        triage::open(&args.db).and_then(|mut store| triage::show(&mut *store, key, args.format == Format::Json));
    match shown {
        Ok(out) => print(&out),
        Err(why) => fail(why),
    }
}

fn mark(args: &Args, key: &str, status: Status, version: Option<&str>) -> ExitCode {
    if version.is_some() && status != Status::Fixed {
        return fail("--in VERSION goes with `fixed`");
    }
    match triage::open(&args.db).and_then(|mut store| triage::mark(&mut *store, key, status.into(), version)) {
        Ok(line) => print(&line),
        Err(why) => fail(why),
    }
}
