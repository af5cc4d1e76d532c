//! racewatch-triage: report logs of many processes into a store (SQLite or PostgreSQL), and the
//! distinct races in it, most frequent first (the guide's "Production and triage" chapter; the design
//! in "From a fleet to findings"). The `racewatch triage` command parses its arguments and prints
//! what these functions return.
//!
//! - [`report`]: reading JSON (schema 1) and text reports;
//! - [`ingest`]: inputs, line by line, batched into the store; bad input skipped and counted;
//! - [`store`]: the store trait, its schema and migrations, SQLite and PostgreSQL;
//! - [`views`]: distinct races, their status, and text, JSON, SARIF and suppressions output;
//! - [`symbolize`]: offline symbolization by build-id of `symbolize=0` reports;
//! - [`escape`]: text from logs made safe for a terminal (every view uses it).
//!
//! Depends on `racewatch-instrument` (frames, keys, the DWARF symbolizer) and on no other part of
//! racewatch.

mod escape;
pub mod ingest;
pub mod report;
pub mod store;
pub mod symbolize;
pub mod views;

pub use escape::escape;
pub use ingest::Input;
pub use store::{open, Store};

use std::path::{Path, PathBuf};

/// Output of the race list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    New,
    Known,
    Suppressed,
    Fixed,
}

impl Status {
    /// The word the store keeps.
    pub fn word(self) -> &'static str {
        match self {
            Status::New => "new",
            Status::Known => "known",
            Status::Suppressed => "suppressed",
            Status::Fixed => "fixed",
        }
    }
}

/// The inputs named on the command line (files, directories, `-`), each checked to exist before
/// anything is read.
pub fn inputs(args: &[String]) -> Result<Vec<Input>, String> {
    ingest::inputs(args)
}

/// Ingests `inputs` into `store`, symbolizing `symbolize=0` reports with the debug files found in
/// `debug_dirs` (and the system's places, and debuginfod). Returns the notes and the totals of
/// skipped input, one message each, not yet escaped for a terminal.
pub fn ingest(store: &mut dyn Store, inputs: &[Input], debug_dirs: Vec<PathBuf>) -> Result<Vec<String>, String> {
    let mut ingester = ingest::Ingester::new(store, debug_dirs);
    for input in inputs {
        ingester.read(input).and_then(|()| ingester.flush())?;
    }
    Ok(ingester.notes.iter().cloned().chain(ingester.totals.messages()).collect())
}

/// The distinct races of the store, most frequent first, in `format`. SARIF locations are made
/// relative to `source_root`.
pub fn list(store: &mut dyn Store, format: Format, source_root: Option<&Path>) -> Result<String, String> {
    let races = views::races(store, false)?;
    Ok(match format {
        Format::Text => views::text(&races),
        Format::Json => views::json(&races),
        Format::Sarif => views::sarif(&races, source_root),
        Format::Suppressions => views::suppressions(&races),
    })
}

/// One race (a source_key or race_key, or a unique prefix of one): its keys, versions and stacks, as
/// text or (`json`) one pretty-printed object.
pub fn show(store: &mut dyn Store, key: &str, json: bool) -> Result<String, String> {
    let races = views::races(store, true)?;
    let race = views::resolve(&races, key)?;
    Ok(match json {
        true => format!("{}\n", serde_json::to_string_pretty(race).unwrap_or_default()),
        false => views::show(race),
    })
}

/// Sets a race's status (`fixed_in`: the app version that has the fix, only with [`Status::Fixed`]).
/// Returns the line that says what was marked, escaped for a terminal.
pub fn mark(store: &mut dyn Store, key: &str, status: Status, fixed_in: Option<&str>) -> Result<String, String> {
    if fixed_in.is_some() && status != Status::Fixed {
        return Err("--in VERSION goes with `fixed`".to_string());
    }
    let races = views::races(store, false)?;
    let race = views::resolve(&races, key)?;
    let word = status.word();
    views::mark(store, &race.key, word, fixed_in, now())?;
    let fixed_in = fixed_in.map(|v| format!(" in {}", escape(v))).unwrap_or_default();
    Ok(format!("{}: {word}{fixed_in} ({})\n", escape(&race.key), escape(&race.summary)))
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
