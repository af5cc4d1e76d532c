//! The triage store: one trait, two implementations (SQLite in a file, PostgreSQL for a fleet), the same
//! schema and, where the dialects allow, the same SQL. The schema carries its version in `meta` and
//! migrates forward when a store is opened.

use std::collections::HashMap;

mod pg_connect;
mod postgres;
mod sqlite;

pub use self::postgres::PgStore;
pub use self::sqlite::SqliteStore;

/// The schema version this racewatch writes.
pub const SCHEMA_VERSION: i64 = 2;

/// One value read from the store.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Text(String),
}

impl Cell {
    pub fn int(&self) -> i64 {
        match self {
            Cell::Int(n) => *n,
            Cell::Text(t) => t.parse().unwrap_or(0),
            Cell::Null => 0,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Cell::Text(t) => Some(t),
            _ => None,
        }
    }

    pub fn string(&self) -> Option<String> {
        match self {
            Cell::Text(t) => Some(t.clone()),
            Cell::Int(n) => Some(n.to_string()),
            Cell::Null => None,
        }
    }
}

/// One value passed to the store.
#[derive(Clone, Debug)]
pub enum Param {
    Null,
    Int(i64),
    Text(String),
}

impl From<Option<String>> for Param {
    fn from(value: Option<String>) -> Param {
        value.map_or(Param::Null, Param::Text)
    }
}

/// One report of one process (a JSON report or a text report), ready to store.
#[derive(Clone, Debug)]
pub struct ReportRow {
    /// 24 bytes: a time (the process start, big-endian: logs read in time order insert near the end of
    /// the B-tree), then FNV-1a 128 of `(host, pid, start_time, race_key)` or of a text report's lines.
    /// No other index: a per-batch insert touches few pages (the views scan the table anyway).
    pub ident: Vec<u8>,
    pub race_key: String,
    pub source_key: Option<String>,
    /// The source_key comes from debug info (the racing frames have files): it replaces a stored one
    /// computed without (see [`FILL_SOURCE_KEY`]).
    pub source_from_debug_info: bool,
    pub host: String,
    pub pid: i64,
    pub start_time: i64,
    /// When the report was written (unix seconds; the ingest time when the report does not say).
    pub seen: i64,
    pub exe_build_id: Option<String>,
    pub app_version: Option<String>,
    pub occurrences: i64,
}

/// What triage keeps of one exact race (one `race_key`): the frames its views name and its stacks.
#[derive(Clone, Debug)]
pub struct RaceRow {
    pub race_key: String,
    pub source_key: Option<String>,
    pub summary: String,
    /// `file:line function` of the frame each side's summary names.
    pub side_a: Option<String>,
    pub side_b: Option<String>,
    /// `<build-id>+0x<offset>` of each side's access frame (`race_key`'s sides).
    pub pc_a: String,
    pub pc_b: String,
    /// JSON: `[[frame…], [frame…]]`, the two accesses' stacks.
    pub stacks: String,
    /// 1 when the stacks have source lines.
    pub symbolized: i64,
    /// JSON: what the memory is (the report's `location`, a module offset resolved to its variable).
    pub location: Option<String>,
}

/// A symbolization result: the frames of `build_id+offset`, JSON.
#[derive(Clone, Debug)]
pub struct SymbolRow {
    pub build_id: String,
    pub offset: i64,
    pub is_return: bool,
    pub frames: String,
}

/// What one ingest transaction writes.
#[derive(Default, Debug)]
pub struct Batch {
    pub reports: Vec<ReportRow>,
    /// `race_count` lines: a report's identity and its count so far (the larger count wins).
    pub counts: Vec<(Vec<u8>, i64)>,
    pub races: Vec<RaceRow>,
    pub symbols: Vec<SymbolRow>,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.reports.is_empty() && self.counts.is_empty() && self.races.is_empty() && self.symbols.is_empty()
    }

    pub fn len(&self) -> usize {
        self.reports.len() + self.counts.len()
    }

    /// One row per identity (the largest count), sorted: concurrent writers then take row locks in the
    /// same order and never deadlock, and a multi-row upsert never touches a row twice.
    pub fn normalize(&mut self) {
        let mut reports: HashMap<Vec<u8>, ReportRow> = HashMap::with_capacity(self.reports.len());
        for row in self.reports.drain(..) {
            match reports.get_mut(&row.ident) {
                Some(old) => old.occurrences = old.occurrences.max(row.occurrences),
                None => {
                    reports.insert(row.ident.clone(), row);
                }
            }
        }
        // A count for a report of this very batch raises the report itself.
        let mut counts: HashMap<Vec<u8>, i64> = HashMap::new();
        for (ident, count) in self.counts.drain(..) {
            match reports.get_mut(&ident) {
                Some(row) => row.occurrences = row.occurrences.max(count),
                None => {
                    let c = counts.entry(ident).or_insert(count);
                    *c = (*c).max(count);
                }
            }
        }
        self.reports = reports.into_values().collect();
        self.reports.sort_by(|a, b| a.ident.cmp(&b.ident));
        self.counts = counts.into_iter().collect();
        self.counts.sort();
        let mut races: HashMap<String, RaceRow> = HashMap::new();
        for race in self.races.drain(..) {
            match races.get(&race.race_key) {
                Some(old) if old.symbolized >= race.symbolized => {}
                _ => {
                    races.insert(race.race_key.clone(), race);
                }
            }
        }
        self.races = races.into_values().collect();
        self.races.sort_by(|a, b| a.race_key.cmp(&b.race_key));
        self.symbols.sort_by(|a, b| (&a.build_id, a.offset, a.is_return).cmp(&(&b.build_id, b.offset, b.is_return)));
        self.symbols.dedup_by(|a, b| (&a.build_id, a.offset, a.is_return) == (&b.build_id, b.offset, b.is_return));
    }
}

/// What an ingest transaction did.
#[derive(Default, Debug, Clone, Copy)]
pub struct Outcome {
    /// Reports stored for the first time.
    pub new_reports: u64,
    /// `race_count` lines whose report is not in the store (nothing to update).
    pub orphan_counts: u64,
}

/// The store behind `racewatch triage`.
pub trait Store {
    /// Writes one batch in one transaction (retried when the database asks for it).
    fn ingest(&mut self, batch: &Batch) -> Result<Outcome, String>;
    /// Runs a query; every row as cells.
    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Cell>>, String>;
    /// Runs a statement in its own transaction; the number of rows it changed.
    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, String>;
}

/// Opens the store `db` names: `postgres://…` or `postgresql://…` (a connection string), else the path
/// of a SQLite file (created when missing).
pub fn open(db: &str) -> Result<Box<dyn Store>, String> {
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        Ok(Box::new(PgStore::open(db)?))
    } else if let Some((scheme, _)) = db.split_once("://").filter(|(s, _)| s.bytes().all(|b| b.is_ascii_alphanumeric()))
    {
        Err(format!("{scheme}:// is not a store racewatch knows: give a SQLite file's path or a postgres:// URL"))
    } else {
        Ok(Box::new(SqliteStore::open(std::path::Path::new(db))?))
    }
}

/// The SQL dialect a statement is written for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// The statements that bring a store from version `to - 1` to `to`, in the dialect's types.
/// A new version appends a step here; a store is migrated step by step, each step in the same
/// transaction as the new version number.
pub fn migration(to: i64, dialect: Dialect) -> Vec<String> {
    let (blob, no_rowid) = match dialect {
        Dialect::Sqlite => ("BLOB", " WITHOUT ROWID"),
        Dialect::Postgres => ("BYTEA", ""),
    };
    match to {
        1 => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS reports (
                    ident {blob} PRIMARY KEY,
                    race_key TEXT NOT NULL,
                    source_key TEXT,
                    host TEXT NOT NULL,
                    pid BIGINT NOT NULL,
                    start_time BIGINT NOT NULL,
                    seen BIGINT NOT NULL,
                    exe_build_id TEXT,
                    app_version TEXT,
                    occurrences BIGINT NOT NULL
                ){no_rowid}"
            ),
            "CREATE TABLE IF NOT EXISTS races (
                race_key TEXT PRIMARY KEY,
                source_key TEXT,
                summary TEXT NOT NULL,
                side_a TEXT,
                side_b TEXT,
                pc_a TEXT NOT NULL,
                pc_b TEXT NOT NULL,
                stacks TEXT NOT NULL,
                symbolized BIGINT NOT NULL
            )"
            .to_string(),
            "CREATE TABLE IF NOT EXISTS race_status (
                group_key TEXT PRIMARY KEY,
                status TEXT NOT NULL,
                fixed_in TEXT,
                marked_at BIGINT NOT NULL
            )"
            .to_string(),
            format!(
                "CREATE TABLE IF NOT EXISTS symbols (
                    build_id TEXT NOT NULL,
                    pc_offset BIGINT NOT NULL,
                    is_return BIGINT NOT NULL,
                    frames TEXT NOT NULL,
                    PRIMARY KEY (build_id, pc_offset, is_return)
                ){no_rowid}"
            ),
        ],
        // What the raced-on memory is (JSON: a global named offline, a thread's stack, unknown).
        2 => vec!["ALTER TABLE races ADD COLUMN location TEXT".to_string()],
        _ => Vec::new(),
    }
}

/// The version a store's `meta` table names; a store newer than this racewatch is refused.
pub fn check_version(found: i64) -> Result<(), String> {
    if found > SCHEMA_VERSION {
        return Err(format!(
            "the store has schema version {found}, newer than this racewatch's {SCHEMA_VERSION}: use a newer racewatch"
        ));
    }
    Ok(())
}

pub const CREATE_META: &str = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)";
pub const READ_VERSION: &str = "SELECT value FROM meta WHERE name = 'schema_version'";
pub const WRITE_VERSION: &str = "INSERT INTO meta (name, value) VALUES ('schema_version', $1)
     ON CONFLICT (name) DO UPDATE SET value = excluded.value";

pub const INSERT_REPORT_COLUMNS: &str =
    "ident, race_key, source_key, host, pid, start_time, seen, exe_build_id, app_version, occurrences";
/// A report stored before its debug info was found gets the source_key the debug info gives when it is
/// ingested again (no debug info at the first ingest: none, or one of module and symbol names).
pub const FILL_SOURCE_KEY: &str =
    "UPDATE reports SET source_key = $2 WHERE ident = $1 AND source_key IS DISTINCT FROM $2";
pub const UPDATE_COUNT: &str = "UPDATE reports SET occurrences = $2 WHERE ident = $1 AND occurrences < $2";
pub const UPSERT_RACE: &str =
    "INSERT INTO races (race_key, source_key, summary, side_a, side_b, pc_a, pc_b, stacks, symbolized, location)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
     ON CONFLICT (race_key) DO UPDATE SET source_key = excluded.source_key, summary = excluded.summary,
         side_a = excluded.side_a, side_b = excluded.side_b, stacks = excluded.stacks, symbolized = excluded.symbolized,
         location = excluded.location
     WHERE excluded.symbolized > races.symbolized";
pub const INSERT_SYMBOLS: &str = "INSERT INTO symbols (build_id, pc_offset, is_return, frames) VALUES ($1, $2, $3, $4)
     ON CONFLICT (build_id, pc_offset, is_return) DO NOTHING";
