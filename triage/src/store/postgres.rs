//! The PostgreSQL store: the fleet's shared database. Ingesters write with multi-row
//! `INSERT … ON CONFLICT` in one transaction per batch, rows sorted so that concurrent writers lock in
//! the same order; a deadlock or serialization failure retries the batch.

use super::{
    check_version, migration, Batch, Cell, Dialect, Outcome, Param, Store, CREATE_META, INSERT_REPORT_COLUMNS,
    INSERT_SYMBOLS, READ_VERSION, SCHEMA_VERSION, UPDATE_COUNT, UPSERT_RACE, WRITE_VERSION,
};
use postgres::types::{ToSql, Type};
use postgres::{Client, Transaction};

pub struct PgStore {
    client: Client,
}

/// Rows per multi-row statement (10 parameters each; PostgreSQL takes at most 65535).
const ROWS_PER_STATEMENT: usize = 1000;
/// Any lock id: the one migrating process holds it, the others wait.
const MIGRATION_LOCK: i64 = 0x7261_6365_7761_7463;

fn err(e: postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

fn retryable(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
            || *c == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
            || *c == postgres::error::SqlState::UNIQUE_VIOLATION
    })
}

impl PgStore {
    /// Connects (TLS as the URL's `sslmode` says: see [`super::pg_connect`]) and migrates. No message
    /// carries the password.
    pub fn open(url: &str) -> Result<PgStore, String> {
        let redactor = super::pg_connect::Redactor::new(url);
        let shown = redactor.scrub(url);
        let client =
            super::pg_connect::connect(url, &redactor).map_err(|e| format!("cannot connect to {shown}: {e}"))?;
        let mut store = PgStore { client };
        store.migrate().map_err(|e| redactor.scrub(&format!("{shown}: {e}")))?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), String> {
        let mut tx = self.client.transaction().map_err(err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(err)?;
        tx.batch_execute(CREATE_META).map_err(err)?;
        let found = match tx.query_opt(READ_VERSION, &[]).map_err(err)? {
            Some(row) => {
                let v: String = row.get(0);
                v.parse().map_err(|_| format!("bad schema_version '{v}' in meta"))?
            }
            None => 0,
        };
        check_version(found)?;
        for version in found + 1..=SCHEMA_VERSION {
            for statement in migration(version, Dialect::Postgres) {
                tx.batch_execute(&statement).map_err(err)?;
            }
            tx.execute(WRITE_VERSION, &[&version.to_string()]).map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    fn write(tx: &mut Transaction<'_>, batch: &Batch) -> Result<Outcome, postgres::Error> {
        let mut outcome = Outcome::default();
        for chunk in batch.reports.chunks(ROWS_PER_STATEMENT) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let b = i * 10;
                    format!(
                        "(${},${},${},${},${},${},${},${},${},${})",
                        b + 1,
                        b + 2,
                        b + 3,
                        b + 4,
                        b + 5,
                        b + 6,
                        b + 7,
                        b + 8,
                        b + 9,
                        b + 10
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO reports ({INSERT_REPORT_COLUMNS}) VALUES {} ON CONFLICT (ident) DO NOTHING RETURNING ident",
                values.join(",")
            );
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(chunk.len() * 10);
            for r in chunk {
                params.extend_from_slice(&[
                    &r.ident,
                    &r.race_key,
                    &r.source_key,
                    &r.host,
                    &r.pid,
                    &r.start_time,
                    &r.seen,
                    &r.exe_build_id,
                    &r.app_version,
                    &r.occurrences,
                ]);
            }
            let inserted = tx.query(&sql, &params)?;
            outcome.new_reports += inserted.len() as u64;
            // Reports already stored: a larger count wins.
            if inserted.len() < chunk.len() {
                let new: std::collections::HashSet<Vec<u8>> = inserted.iter().map(|row| row.get(0)).collect();
                let raised: Vec<(&Vec<u8>, i64)> = chunk
                    .iter()
                    .filter(|r| r.occurrences > 1 && !new.contains(&r.ident))
                    .map(|r| (&r.ident, r.occurrences))
                    .collect();
                Self::raise_counts(tx, &raised)?;
                let keyed: Vec<(&Vec<u8>, &String)> = chunk
                    .iter()
                    .filter(|r| r.source_from_debug_info && !new.contains(&r.ident))
                    .filter_map(|r| Some((&r.ident, r.source_key.as_ref()?)))
                    .collect();
                Self::fill_source_keys(tx, &keyed)?;
            }
        }
        let counts: Vec<(&Vec<u8>, i64)> = batch.counts.iter().map(|(ident, count)| (ident, *count)).collect();
        if !counts.is_empty() {
            let idents: Vec<&Vec<u8>> = counts.iter().map(|(ident, _)| *ident).collect();
            let found = tx.query("SELECT count(*) FROM reports WHERE ident = ANY($1)", &[&idents])?;
            let found: i64 = found[0].get(0);
            outcome.orphan_counts = counts.len() as u64 - found as u64;
            Self::raise_counts(tx, &counts)?;
        }
        if !batch.races.is_empty() {
            let race = tx.prepare(UPSERT_RACE)?;
            for r in &batch.races {
                tx.execute(
                    &race,
                    &[
                        &r.race_key,
                        &r.source_key,
                        &r.summary,
                        &r.side_a,
                        &r.side_b,
                        &r.pc_a,
                        &r.pc_b,
                        &r.stacks,
                        &r.symbolized,
                        &r.location,
                    ],
                )?;
            }
        }
        if !batch.symbols.is_empty() {
            let symbol = tx.prepare(INSERT_SYMBOLS)?;
            for s in &batch.symbols {
                tx.execute(&symbol, &[&s.build_id, &s.offset, &i64::from(s.is_return), &s.frames])?;
            }
        }
        Ok(outcome)
    }

    /// Source keys from debug info for reports stored before it was found (`FILL_SOURCE_KEY`, batched).
    fn fill_source_keys(tx: &mut Transaction<'_>, keyed: &[(&Vec<u8>, &String)]) -> Result<(), postgres::Error> {
        if keyed.is_empty() {
            return Ok(());
        }
        let idents: Vec<&Vec<u8>> = keyed.iter().map(|(ident, _)| *ident).collect();
        let keys: Vec<&String> = keyed.iter().map(|(_, key)| *key).collect();
        tx.execute(
            "UPDATE reports SET source_key = v.k
             FROM unnest($1::bytea[], $2::text[]) AS v(ident, k)
             WHERE reports.ident = v.ident AND reports.source_key IS DISTINCT FROM v.k",
            &[&idents, &keys],
        )?;
        Ok(())
    }

    fn raise_counts(tx: &mut Transaction<'_>, counts: &[(&Vec<u8>, i64)]) -> Result<(), postgres::Error> {
        if counts.is_empty() {
            return Ok(());
        }
        if counts.len() == 1 {
            tx.execute(UPDATE_COUNT, &[counts[0].0, &counts[0].1])?;
            return Ok(());
        }
        let idents: Vec<&Vec<u8>> = counts.iter().map(|(ident, _)| *ident).collect();
        let values: Vec<i64> = counts.iter().map(|(_, count)| *count).collect();
        tx.execute(
            "UPDATE reports SET occurrences = v.c
             FROM unnest($1::bytea[], $2::bigint[]) AS v(ident, c)
             WHERE reports.ident = v.ident AND reports.occurrences < v.c",
            &[&idents, &values],
        )?;
        Ok(())
    }
}

fn cell(row: &postgres::Row, i: usize) -> Cell {
    let ty = row.columns()[i].type_();
    let text = |v: Option<String>| v.map_or(Cell::Null, Cell::Text);
    if *ty == Type::INT8 {
        row.get::<_, Option<i64>>(i).map_or(Cell::Null, Cell::Int)
    } else if *ty == Type::INT4 {
        row.get::<_, Option<i32>>(i).map_or(Cell::Null, |n| Cell::Int(n.into()))
    } else if *ty == Type::BOOL {
        row.get::<_, Option<bool>>(i).map_or(Cell::Null, |b| Cell::Int(b.into()))
    } else if *ty == Type::BYTEA {
        row.get::<_, Option<Vec<u8>>>(i).map_or(Cell::Null, |b| Cell::Text(String::from_utf8_lossy(&b).into_owned()))
    } else {
        row.try_get::<_, Option<String>>(i).map(text).unwrap_or(Cell::Null)
    }
}

fn params(params: &[Param]) -> Vec<Box<dyn ToSql + Sync>> {
    params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync> {
            match p {
                Param::Null => Box::new(Option::<String>::None),
                Param::Int(n) => Box::new(*n),
                Param::Text(t) => Box::new(t.clone()),
            }
        })
        .collect()
}

impl Store for PgStore {
    fn ingest(&mut self, batch: &Batch) -> Result<Outcome, String> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.client.transaction().map_err(|e| format!("writing to the store: {}", err(e)))?;
            let result = Self::write(&mut tx, batch).and_then(|outcome| tx.commit().map(|()| outcome));
            match result {
                Ok(outcome) => return Ok(outcome),
                Err(e) if attempt < 10 && retryable(&e) => {
                    std::thread::sleep(std::time::Duration::from_millis(20 * attempt));
                }
                Err(e) => return Err(format!("writing to the store: {}", err(e))),
            }
        }
    }

    fn query(&mut self, sql: &str, values: &[Param]) -> Result<Vec<Vec<Cell>>, String> {
        let boxed = params(values);
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
        let rows = self.client.query(sql, &refs).map_err(|e| format!("reading the store: {}", err(e)))?;
        Ok(rows.iter().map(|row| (0..row.len()).map(|i| cell(row, i)).collect()).collect())
    }

    fn execute(&mut self, sql: &str, values: &[Param]) -> Result<u64, String> {
        let boxed = params(values);
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
        self.client.execute(sql, &refs).map_err(|e| format!("writing to the store: {}", err(e)))
    }
}
