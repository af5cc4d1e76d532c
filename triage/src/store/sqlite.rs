//! The SQLite store: one file, WAL (readers never wait for a writer), a busy timeout (writers of several
//! `racewatch triage` processes queue), one `BEGIN IMMEDIATE` transaction per batch.

use super::{
    check_version, migration, Batch, Cell, Dialect, Outcome, Param, Store, CREATE_META, FILL_SOURCE_KEY,
    INSERT_REPORT_COLUMNS, INSERT_SYMBOLS, READ_VERSION, SCHEMA_VERSION, UPDATE_COUNT, UPSERT_RACE, WRITE_VERSION,
};
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

pub struct SqliteStore {
    conn: Connection,
}

fn err(what: &str) -> impl Fn(rusqlite::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Null => ToSqlOutput::Owned(Value::Null),
            Param::Int(n) => ToSqlOutput::Owned(Value::Integer(*n)),
            Param::Text(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
        })
    }
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore, String> {
        let name = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(format!("cannot open the store {name}: directory {} does not exist", dir.display()));
            }
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|e| format!("cannot open the store {name}: {e}"))?;
        let what = format!("the store {name}");
        conn.busy_timeout(Duration::from_secs(120)).map_err(err(&what))?;
        // Not a database at all: say so in one line instead of failing on the first statement.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))
            .map_err(|e| format!("cannot open the store {name}: {e}"))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0)).map_err(err(&what))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("{what}: cannot switch to WAL (journal mode {mode})"));
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536").map_err(err(&what))?;
        let mut store = SqliteStore { conn };
        store.migrate().map_err(|e| format!("{what}: {e}"))?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), String> {
        let e = |e: rusqlite::Error| e.to_string();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(e)?;
        tx.execute_batch(CREATE_META).map_err(e)?;
        let found: Option<String> = tx.query_row(READ_VERSION, [], |row| row.get(0)).ok();
        let found: i64 = match found {
            Some(v) => v.parse().map_err(|_| format!("bad schema_version '{v}' in meta"))?,
            None => 0,
        };
        check_version(found)?;
        for version in found + 1..=SCHEMA_VERSION {
            for statement in migration(version, Dialect::Sqlite) {
                tx.execute_batch(&statement).map_err(e)?;
            }
            tx.execute(&q(WRITE_VERSION), [version.to_string()]).map_err(e)?;
        }
        tx.commit().map_err(e)
    }
}

/// The shared SQL's `$n` placeholders as SQLite's `?n` (SQLite numbers `$name` parameters in order of
/// first appearance, not by their digits).
fn q(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

fn cell(value: ValueRef<'_>) -> Cell {
    match value {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(n) => Cell::Int(n),
        ValueRef::Real(f) => Cell::Int(f as i64),
        ValueRef::Text(t) | ValueRef::Blob(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
    }
}

impl Store for SqliteStore {
    fn ingest(&mut self, batch: &Batch) -> Result<Outcome, String> {
        let e = |e: rusqlite::Error| format!("writing to the store: {e}");
        let mut outcome = Outcome::default();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(e)?;
        {
            let mut insert = tx
                .prepare_cached(&q(&format!(
                    "INSERT INTO reports ({INSERT_REPORT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                     ON CONFLICT (ident) DO NOTHING"
                )))
                .map_err(e)?;
            let mut update = tx.prepare_cached(&q(UPDATE_COUNT)).map_err(e)?;
            let mut fill = tx.prepare_cached(&q(FILL_SOURCE_KEY)).map_err(e)?;
            for r in &batch.reports {
                let inserted = insert
                    .execute(rusqlite::params![
                        r.ident,
                        r.race_key,
                        r.source_key,
                        r.host,
                        r.pid,
                        r.start_time,
                        r.seen,
                        r.exe_build_id,
                        r.app_version,
                        r.occurrences
                    ])
                    .map_err(e)?;
                if inserted == 1 {
                    outcome.new_reports += 1;
                    continue;
                }
                if r.occurrences > 1 {
                    update.execute(rusqlite::params![r.ident, r.occurrences]).map_err(e)?;
                }
                if r.source_from_debug_info && r.source_key.is_some() {
                    fill.execute(rusqlite::params![r.ident, r.source_key]).map_err(e)?;
                }
            }
            let mut exists = tx.prepare_cached("SELECT 1 FROM reports WHERE ident = ?1").map_err(e)?;
            for (ident, count) in &batch.counts {
                if update.execute(rusqlite::params![ident, count]).map_err(e)? == 0
                    && !exists.exists([ident]).map_err(e)?
                {
                    outcome.orphan_counts += 1;
                }
            }
            let mut race = tx.prepare_cached(&q(UPSERT_RACE)).map_err(e)?;
            for r in &batch.races {
                race.execute(rusqlite::params![
                    r.race_key,
                    r.source_key,
                    r.summary,
                    r.side_a,
                    r.side_b,
                    r.pc_a,
                    r.pc_b,
                    r.stacks,
                    r.symbolized,
                    r.location
                ])
                .map_err(e)?;
            }
            let mut symbol = tx.prepare_cached(&q(INSERT_SYMBOLS)).map_err(e)?;
            for s in &batch.symbols {
                symbol.execute(rusqlite::params![s.build_id, s.offset, i64::from(s.is_return), s.frames]).map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        Ok(outcome)
    }

    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Cell>>, String> {
        let e = |e: rusqlite::Error| format!("reading the store: {e}");
        let mut statement = self.conn.prepare_cached(&q(sql)).map_err(e)?;
        let columns = statement.column_count();
        let mut rows = statement.query(rusqlite::params_from_iter(params)).map_err(e)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(e)? {
            out.push((0..columns).map(|i| row.get_ref(i).map(cell).unwrap_or(Cell::Null)).collect());
        }
        Ok(out)
    }

    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, String> {
        let e = |e: rusqlite::Error| format!("writing to the store: {e}");
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(e)?;
        let n = tx.execute(&q(sql), rusqlite::params_from_iter(params)).map_err(e)?;
        tx.commit().map_err(e)?;
        Ok(n as u64)
    }
}
