//! `racewatch triage`: report logs of many processes into a store (SQLite or PostgreSQL), and the
//! distinct races in it, most frequent first (DESIGN.md "From a fleet to findings").
//!
//! - [`report`]: reading JSON (schema 1) and text reports;
//! - [`ingest`]: inputs, line by line, batched into the store; bad input skipped and counted;
//! - [`store`]: the store trait, its schema and migrations, SQLite and PostgreSQL;
//! - [`views`]: distinct races, their status, and text, JSON, SARIF and suppressions output;
//! - [`symbolize`]: offline symbolization by build-id of `symbolize=0` reports.

mod ingest;
mod report;
mod store;
pub mod symbolize;
mod views;

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

/// A race's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Status {
    New,
    Known,
    Suppressed,
    Fixed,
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
    eprintln!("racewatch triage: {}", crate::terminal::escape(&message.to_string()));
    ExitCode::from(2)
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

pub fn run(args: Args) -> ExitCode {
    match args.action {
        Some(Action::Show { ref key }) => return show(&args, key),
        Some(Action::Mark { ref key, status, ref version }) => return mark(&args, key, status, version.as_deref()),
        None => {}
    }
    // Every input must exist before anything is read.
    let inputs = match ingest::inputs(&args.inputs) {
        Ok(inputs) => inputs,
        Err(why) => return fail(why),
    };
    let mut store = match store::open(&args.db) {
        Ok(store) => store,
        Err(why) => return fail(why),
    };
    if !args.inputs.is_empty() {
        let mut ingester = ingest::Ingester::new(&mut *store, args.debug_dirs.clone());
        for input in &inputs {
            if let Err(why) = ingester.read(input).and_then(|()| ingester.flush()) {
                return fail(why);
            }
        }
        for message in ingester.notes.iter().chain(&ingester.totals.messages()) {
            // Notes name modules, files and build-ids that came from the logs.
            eprintln!("racewatch triage: {}", crate::terminal::escape(message));
        }
    }
    if args.quiet {
        return ExitCode::SUCCESS;
    }
    let races = match views::races(&mut *store, false) {
        Ok(races) => races,
        Err(why) => return fail(why),
    };
    let out = match args.format {
        Format::Text => views::text(&races),
        Format::Json => views::json(&races),
        Format::Sarif => {
            let root = args.source_root.clone().or_else(|| std::env::current_dir().ok());
            views::sarif(&races, root.as_deref())
        }
        Format::Suppressions => views::suppressions(&races),
    };
    match super::emit(&out, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// The store and its distinct races (with their stacks when `with_stacks`), or the failure's exit code.
fn open_with_races(args: &Args, with_stacks: bool) -> Result<(Box<dyn store::Store>, Vec<views::Race>), ExitCode> {
    let mut store = store::open(&args.db).map_err(fail)?;
    let races = views::races(&mut *store, with_stacks).map_err(fail)?;
    Ok((store, races))
}

fn show(args: &Args, key: &str) -> ExitCode {
    if !matches!(args.format, Format::Text | Format::Json) {
        return fail("show prints text or json");
    }
    let (_, races) = match open_with_races(args, true) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let race = match views::resolve(&races, key) {
        Ok(race) => race,
        Err(why) => return fail(why),
    };
    let out = match args.format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(race).unwrap_or_default()),
        _ => views::show(race),
    };
    match super::emit(&out, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn mark(args: &Args, key: &str, status: Status, version: Option<&str>) -> ExitCode {
    if version.is_some() && status != Status::Fixed {
        return fail("--in VERSION goes with `fixed`");
    }
    let (mut store, races) = match open_with_races(args, false) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let race = match views::resolve(&races, key) {
        Ok(race) => race,
        Err(why) => return fail(why),
    };
    let word = match status {
        Status::New => "new",
        Status::Known => "known",
        Status::Suppressed => "suppressed",
        Status::Fixed => "fixed",
    };
    if let Err(why) = views::mark(&mut *store, &race.key, word, version, now()) {
        return fail(why);
    }
    let esc = crate::terminal::escape;
    let fixed_in = version.map(|v| format!(" in {}", esc(v))).unwrap_or_default();
    println!("{}: {word}{fixed_in} ({})", esc(&race.key), esc(&race.summary));
    ExitCode::SUCCESS
}
