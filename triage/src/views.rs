//! What the store says about distinct races: one row per race (grouped by `source_key`, else
//! `race_key`), its status, and the four ways to print them (text, JSON, SARIF 2.1.0, suppressions).

use crate::escape as esc;
use crate::report::JsonFrame;
use crate::store::{Cell, Param, Store};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// The grouping of reports into distinct races (the same expression in both dialects).
const GROUP: &str = "COALESCE(source_key, race_key)";

/// One side of a race: the frame its summary names.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Side {
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub function: Option<String>,
    pub module: Option<String>,
    pub offset: Option<String>,
    /// The line is the nearest real one of the same code (the PC's own is line 0): shown with `~`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub line_approximate: bool,
}

impl Side {
    /// `file:line function` (`(module+0xoff) function` without a file), control characters escaped.
    pub fn display(&self) -> String {
        let place = match (&self.file, self.line) {
            (Some(file), Some(line)) => {
                format!("{}:{}{line}", esc(file), if self.line_approximate { "~" } else { "" })
            }
            (Some(file), None) => esc(file).into_owned(),
            (None, _) => {
                let module = self.module.as_deref().map_or("?", |m| m.rsplit('/').next().unwrap_or(m));
                format!("({}+{})", esc(module), esc(self.offset.as_deref().unwrap_or("?")))
            }
        };
        format!("{place} {}", esc(self.function.as_deref().unwrap_or("<unknown>")))
    }
}

/// One exact race (race_key) of a distinct race.
#[derive(Clone, Debug, Serialize)]
pub struct RaceKeyRow {
    pub race_key: String,
    pub occurrences: i64,
    /// `<build-id>+0x<offset>` of each side's access frame.
    pub pcs: [String; 2],
}

/// One app version a distinct race was seen in.
#[derive(Clone, Debug, Serialize)]
pub struct VersionRow {
    pub version: String,
    pub first_seen: i64,
    pub last_seen: i64,
}

/// One distinct race: the `--format json` row (field names are stable; see the README).
#[derive(Clone, Debug, Serialize)]
pub struct Race {
    /// `source_key` when any report of it had one, else its `race_key`.
    pub key: String,
    pub source_key: Option<String>,
    pub race_keys: Vec<RaceKeyRow>,
    pub summary: String,
    /// The frame each side's summary names.
    pub sides: [Option<Side>; 2],
    pub occurrences: i64,
    pub processes: i64,
    pub hosts: i64,
    /// Distinct executables (by build-id).
    pub binaries: i64,
    pub app_versions: Vec<VersionRow>,
    /// Unix seconds.
    pub first_seen: i64,
    pub last_seen: i64,
    /// `new`, `known`, `suppressed` or `fixed`; a fixed race seen again in a later version is `new`
    /// with `regressed` set.
    pub status: String,
    pub fixed_in: Option<String>,
    pub regressed: bool,
    pub note: Option<String>,
    /// What the raced-on memory is (the report's `location`; a `symbolize=0` report's module offset named
    /// from the module's symbol table): `kind` global (name, size, module, offset), stack, module or unknown.
    pub location: Option<serde_json::Value>,
    /// The two accesses' stacks of the race_key seen most (only for `show`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stacks: Option<[Vec<JsonFrame>; 2]>,
}

/// Every distinct race in the store, most frequent first. `with_stacks` reads the stacks too.
pub fn races(store: &mut dyn Store, with_stacks: bool) -> Result<Vec<Race>, String> {
    let groups = store.query(
        &format!(
            "SELECT {GROUP}, CAST(SUM(occurrences) AS BIGINT), COUNT(DISTINCT host || ' ' || pid || ' ' || start_time),
                    COUNT(DISTINCT host), COUNT(DISTINCT exe_build_id), MIN(seen), MAX(seen), MAX(source_key)
             FROM reports GROUP BY {GROUP}"
        ),
        &[],
    )?;
    let keys = store.query(
        &format!("SELECT {GROUP}, race_key, CAST(SUM(occurrences) AS BIGINT) FROM reports GROUP BY {GROUP}, race_key"),
        &[],
    )?;
    let versions = store.query(
        &format!(
            "SELECT {GROUP}, app_version, MIN(seen), MAX(seen) FROM reports
             WHERE app_version IS NOT NULL GROUP BY {GROUP}, app_version"
        ),
        &[],
    )?;
    let version_first: HashMap<String, i64> = store
        .query("SELECT app_version, MIN(seen) FROM reports WHERE app_version IS NOT NULL GROUP BY app_version", &[])?
        .into_iter()
        .filter_map(|r| Some((r[0].string()?, r[1].int())))
        .collect();
    let stacks_column = if with_stacks { "stacks" } else { "''" };
    let race_rows = store.query(
        &format!(
            "SELECT race_key, summary, side_a, side_b, pc_a, pc_b, symbolized, {stacks_column}, location FROM races"
        ),
        &[],
    )?;
    let statuses: HashMap<String, (String, Option<String>, i64)> = store
        .query("SELECT group_key, status, fixed_in, marked_at FROM race_status", &[])?
        .into_iter()
        .filter_map(|r| Some((r[0].string()?, (r[1].string()?, r[2].string(), r[3].int()))))
        .collect();
    let race_info: HashMap<String, &Vec<Cell>> = race_rows.iter().filter_map(|r| Some((r[0].string()?, r))).collect();

    let mut by_group: BTreeMap<String, Vec<RaceKeyRow>> = BTreeMap::new();
    for r in keys.iter() {
        let (Some(group), Some(race_key)) = (r[0].string(), r[1].string()) else { continue };
        let pcs = race_info
            .get(&race_key)
            .map(|info| [info[4].string().unwrap_or_default(), info[5].string().unwrap_or_default()])
            .unwrap_or_default();
        by_group.entry(group).or_default().push(RaceKeyRow { race_key, occurrences: r[2].int(), pcs });
    }
    let mut group_versions: BTreeMap<String, Vec<VersionRow>> = BTreeMap::new();
    for r in versions.iter() {
        let (Some(group), Some(version)) = (r[0].string(), r[1].string()) else { continue };
        group_versions.entry(group).or_default().push(VersionRow {
            version,
            first_seen: r[2].int(),
            last_seen: r[3].int(),
        });
    }

    let mut out = Vec::new();
    for g in groups.iter() {
        let Some(key) = g[0].string() else { continue };
        let mut race_keys = by_group.remove(&key).unwrap_or_default();
        race_keys.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then(a.race_key.cmp(&b.race_key)));
        // The best race_key to show: symbolized, then the most frequent.
        let best = race_keys
            .iter()
            .filter_map(|k| race_info.get(&k.race_key))
            .max_by_key(|info| info[6].int())
            .or_else(|| race_keys.first().and_then(|k| race_info.get(&k.race_key)));
        let side = |cell: &Cell| cell.text().and_then(|t| serde_json::from_str::<Side>(t).ok());
        let mut app_versions = group_versions.remove(&key).unwrap_or_default();
        app_versions.sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then(a.version.cmp(&b.version)));
        let mut race = Race {
            source_key: g[7].string(),
            summary: best.and_then(|b| b[1].string()).unwrap_or_else(|| "data race".to_string()),
            sides: best.map_or([None, None], |b| [side(&b[2]), side(&b[3])]),
            occurrences: g[1].int(),
            processes: g[2].int(),
            hosts: g[3].int(),
            binaries: g[4].int(),
            first_seen: g[5].int(),
            last_seen: g[6].int(),
            status: "new".to_string(),
            fixed_in: None,
            regressed: false,
            note: None,
            stacks: best.filter(|_| with_stacks).and_then(|b| serde_json::from_str(b[7].text()?).ok()),
            location: best.and_then(|b| serde_json::from_str(b[8].text()?).ok()),
            app_versions,
            race_keys,
            key,
        };
        if let Some((status, fixed_in, marked_at)) = statuses.get(&race.key) {
            apply_status(&mut race, status, fixed_in.as_deref(), *marked_at, &version_first);
        }
        out.push(race);
    }
    out.sort_by(|a, b| b.occurrences.cmp(&a.occurrences).then(a.key.cmp(&b.key)));
    Ok(out)
}

/// A race's status. `fixed` (in version V) holds while the race is not seen in V or in any version first
/// seen after V; without a version, in any version first seen after it was marked. Seen again, it is
/// `new` and `regressed`.
fn apply_status(race: &mut Race, status: &str, fixed_in: Option<&str>, marked_at: i64, first: &HashMap<String, i64>) {
    race.status = status.to_string();
    race.fixed_in = fixed_in.map(str::to_string);
    if status != "fixed" {
        return;
    }
    let threshold = match fixed_in {
        Some(v) => match first.get(v) {
            Some(&t) => t,
            None => return, // V not seen anywhere yet: nothing is after it.
        },
        None => marked_at,
    };
    // The version it was seen in last, of those that should have had the fix.
    let again = race
        .app_versions
        .iter()
        .filter(|v| first.get(&v.version).is_some_and(|&t| t >= threshold))
        .max_by_key(|v| (v.last_seen, v.first_seen));
    if let Some(v) = again {
        race.status = "new".to_string();
        race.regressed = true;
        race.note = Some(match fixed_in {
            Some(fixed) => format!("regressed: marked fixed in {fixed}, seen again in {}", v.version),
            None => format!("regressed: marked fixed, seen again in {}", v.version),
        });
    }
}

/// The races a key names: a group key, a race_key of a group, or a unique prefix of either.
pub fn resolve<'r>(races: &'r [Race], key: &str) -> Result<&'r Race, String> {
    let key = key.trim().to_ascii_lowercase();
    if key.is_empty() {
        return Err("an empty key".to_string());
    }
    let exact = |r: &&Race| r.key == key || r.race_keys.iter().any(|k| k.race_key == key);
    if let Some(race) = races.iter().find(exact) {
        return Ok(race);
    }
    let matches: Vec<&Race> = races
        .iter()
        .filter(|r| r.key.starts_with(&key) || r.race_keys.iter().any(|k| k.race_key.starts_with(&key)))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("no race with key {key} in the store")),
        many => Err(format!(
            "key {key} is ambiguous: {} races match ({}); give more digits",
            many.len(),
            many.iter().take(4).map(|r| r.key.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// Sets a race's status.
pub fn mark(store: &mut dyn Store, key: &str, status: &str, fixed_in: Option<&str>, now: i64) -> Result<(), String> {
    store.execute(
        "INSERT INTO race_status (group_key, status, fixed_in, marked_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (group_key) DO UPDATE SET status = excluded.status, fixed_in = excluded.fixed_in,
             marked_at = excluded.marked_at",
        &[
            Param::Text(key.to_string()),
            Param::Text(status.to_string()),
            fixed_in.map(str::to_string).into(),
            Param::Int(now),
        ],
    )?;
    Ok(())
}

// ---- Output ----

/// `YYYY-MM-DD HH:MM` (UTC) of unix seconds.
pub fn date(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
}

fn versions_cell(race: &Race) -> String {
    let names: Vec<std::borrow::Cow<'_, str>> = race.app_versions.iter().map(|v| esc(&v.version)).collect();
    match names.len() {
        0 => "-".to_string(),
        1..=3 => names.join(","),
        n => format!("{},+{}", names[n - 3..].join(","), n - 3),
    }
}

fn sides_cell(race: &Race) -> String {
    match &race.sides {
        [Some(a), Some(b)] if a == b => a.display(),
        [Some(a), Some(b)] => format!("{} / {}", a.display(), b.display()),
        [Some(s), None] | [None, Some(s)] => s.display(),
        [None, None] => esc(&race.summary).into_owned(),
    }
}

/// The default view: a header and one line per race.
pub fn text(races: &[Race]) -> String {
    let mut out = String::new();
    if races.is_empty() {
        out.push_str("no races in the store\n");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<16}  {:>11}  {:>5}  {:>5}  {:>4}  {:<16}  {:<16}  {:<16}  {:<10}  RACE",
        "KEY", "OCCURRENCES", "PROCS", "HOSTS", "BINS", "VERSIONS", "FIRST SEEN", "LAST SEEN", "STATUS"
    );
    for race in races {
        let status = if race.regressed { "new (regr.)".to_string() } else { esc(&race.status).into_owned() };
        let _ = writeln!(
            out,
            "{:<16}  {:>11}  {:>5}  {:>5}  {:>4}  {:<16}  {:<16}  {:<16}  {:<10}  {}",
            esc(&race.key),
            race.occurrences,
            race.processes,
            race.hosts,
            race.binaries,
            versions_cell(race),
            date(race.first_seen),
            date(race.last_seen),
            status,
            sides_cell(race)
        );
        if let Some(note) = &race.note {
            let _ = writeln!(out, "{:<16}  note: {}", "", esc(note));
        }
    }
    out
}

/// `--format json`: an array, one race per line.
pub fn json(races: &[Race]) -> String {
    let mut out = String::from("[");
    for (i, race) in races.iter().enumerate() {
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str(&serde_json::to_string(race).unwrap_or_default());
    }
    out.push_str(if races.is_empty() { "]\n" } else { "\n]\n" });
    out
}

/// `racewatch triage show`: one race, its keys, versions and the stacks of its most frequent race_key.
/// A report's `location` in words, as the runtime's text report puts it.
fn location_text(location: &serde_json::Value) -> String {
    let text = |key: &str| esc(location[key].as_str().unwrap_or("?")).into_owned();
    let module = |key: &str| text(key).rsplit('/').next().unwrap_or("?").to_string();
    match text("kind").as_str() {
        "global" => format!(
            "global '{}' of size {} ({}+{})",
            text("name"),
            location["size"].as_u64().unwrap_or(0),
            module("module"),
            text("offset")
        ),
        "stack" => format!("stack of thread {} (tid {})", text("thread"), esc(&location["tid"].to_string())),
        "module" => format!("in the data of {} ({}+{})", module("module"), module("module"), text("offset")),
        _ => "heap or unknown memory".to_string(),
    }
}

pub fn show(race: &Race) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "race {}", esc(&race.key));
    let _ = writeln!(out, "  {}", esc(&race.summary));
    let status = match (&race.status[..], &race.fixed_in) {
        ("fixed", Some(v)) => format!("fixed in {}", esc(v)),
        (s, _) => esc(s).into_owned(),
    };
    let _ =
        writeln!(out, "  status: {status}{}", race.note.as_ref().map(|n| format!(" ({})", esc(n))).unwrap_or_default());
    let _ = writeln!(out, "  source_key: {}", esc(race.source_key.as_deref().unwrap_or("- (not symbolized)")));
    for (i, side) in race.sides.iter().enumerate() {
        if let Some(side) = side {
            let _ = writeln!(out, "  side {}: {}", ["A", "B"][i], side.display());
        }
    }
    if let Some(location) = race.location.as_ref().map(location_text) {
        let _ = writeln!(out, "  location: {location}");
    }
    let _ = writeln!(
        out,
        "  {} occurrences in {} processes on {} hosts, {} binaries; first seen {}, last seen {} (UTC)",
        race.occurrences,
        race.processes,
        race.hosts,
        race.binaries,
        date(race.first_seen),
        date(race.last_seen)
    );
    for v in &race.app_versions {
        let _ = writeln!(out, "  version {}: {} .. {}", esc(&v.version), date(v.first_seen), date(v.last_seen));
    }
    for k in &race.race_keys {
        let _ = writeln!(
            out,
            "  race_key {}: {} occurrences; access PCs {} / {}",
            esc(&k.race_key),
            k.occurrences,
            esc(&k.pcs[0]),
            esc(&k.pcs[1])
        );
    }
    if let Some(stacks) = &race.stacks {
        for (i, stack) in stacks.iter().enumerate() {
            let _ = writeln!(out, "  {} access:", ["First", "Other"][i]);
            if stack.is_empty() {
                let _ = writeln!(out, "    <empty stack>");
            }
            let mut number = 0;
            for frame in stack {
                if frame.elided_frames > 0 {
                    let n = frame.elided_frames;
                    let _ = writeln!(out, "    #{number}..#{} ({n} frames left out)", number + n - 1);
                    number += n;
                    continue;
                }
                let f = frame.to_frame();
                let function = esc(f.function.as_deref().unwrap_or("<unknown>"));
                let module = esc(f.module.as_deref().map_or("?", |m| m.rsplit('/').next().unwrap_or(m)));
                let place = if f.file.is_some() {
                    format!(
                        " {}",
                        esc(&racewatch_instrument::frames::location(&f, racewatch_instrument::frames::Paths::Full))
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(out, "    #{number} {function}{place} ({module}+{:#x})", f.offset);
                number += 1;
            }
        }
    }
    out
}

/// A SARIF artifact URI for a source path: relative paths as they are, absolute ones under the
/// current directory relative to it, other absolute ones as `file://` URIs.
fn uri(file: &str, root: Option<&std::path::Path>) -> String {
    if !file.starts_with('/') {
        return file.to_string();
    }
    if let Some(rel) = root.and_then(|root| std::path::Path::new(file).strip_prefix(root).ok()) {
        return rel.to_string_lossy().into_owned();
    }
    if let Some(at) = file.find("/library/").filter(|_| file.starts_with("/rustc/")) {
        return file[at + 1..].to_string();
    }
    format!("file://{file}")
}

fn sarif_location(side: &Side, id: usize, what: &str, root: Option<&std::path::Path>) -> Option<serde_json::Value> {
    let file = side.file.as_deref()?;
    let mut region = serde_json::Map::new();
    if let Some(line) = side.line {
        region.insert("startLine".into(), line.into());
        if let Some(column) = side.column {
            region.insert("startColumn".into(), column.into());
        }
    }
    let mut physical = serde_json::json!({"artifactLocation": {"uri": uri(file, root)}});
    if !region.is_empty() {
        physical["region"] = serde_json::Value::Object(region);
    }
    let mut location = serde_json::json!({"id": id, "physicalLocation": physical, "message": {"text": what}});
    if let Some(function) = &side.function {
        location["logicalLocations"] = serde_json::json!([{"name": function, "kind": "function"}]);
    }
    Some(location)
}

/// SARIF 2.1.0: one result per distinct race.
/// File paths under `root` become relative to it (what code-scanning services place in a repository).
pub fn sarif(races: &[Race], root: Option<&std::path::Path>) -> String {
    let results: Vec<serde_json::Value> = races
        .iter()
        .map(|race| {
            let locations: Vec<serde_json::Value> = race
                .sides
                .iter()
                .enumerate()
                .filter_map(|(i, side)| sarif_location(side.as_ref()?, i, ["one access", "the other access"][i], root))
                .collect();
            let mut fingerprints = serde_json::Map::new();
            match &race.source_key {
                Some(k) => fingerprints.insert("racewatchSourceKey/v1".into(), k.clone().into()),
                None => fingerprints.insert("racewatchRaceKey/v1".into(), race.key.clone().into()),
            };
            let mut result = serde_json::json!({
                "ruleId": "racewatch/data-race",
                "ruleIndex": 0,
                "level": "warning",
                "message": {"text": race.summary},
                "locations": locations.first().cloned().into_iter().collect::<Vec<_>>(),
                "relatedLocations": locations.iter().skip(1).cloned().collect::<Vec<_>>(),
                "partialFingerprints": fingerprints,
                "occurrenceCount": race.occurrences,
                "properties": {
                    "key": race.key,
                    "raceKeys": race.race_keys.iter().map(|k| k.race_key.clone()).collect::<Vec<_>>(),
                    "processes": race.processes,
                    "hosts": race.hosts,
                    "status": race.status,
                    "regressed": race.regressed,
                },
            });
            if race.status == "known" || race.status == "suppressed" {
                result["suppressions"] = serde_json::json!([{"kind": "external", "status": "accepted",
                    "justification": format!("marked {} in racewatch triage", race.status)}]);
            }
            result
        })
        .collect();
    let log = serde_json::json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "racewatch",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": [{
                    "id": "racewatch/data-race",
                    "name": "DataRace",
                    "shortDescription": {"text": "Data race"},
                    "fullDescription": {"text": "Two threads accessed the same memory without synchronization, at least one of them writing (found by sampling in running processes)."},
                    "defaultConfiguration": {"level": "warning"},
                }],
            }},
            "results": results,
        }],
    });
    let mut out = serde_json::to_string_pretty(&log).unwrap_or_default();
    out.push('\n');
    out
}

/// The runtime's suppressions file for the races marked known or suppressed. Every line is built from
/// a validated value only (a key of 16 hex digits, a hex build-id and offset, rebuilt from their
/// numbers): whatever a report log put in the store, nothing else reaches the file, and the comment
/// line has its control characters escaped, so no field can start a line of its own.
pub fn suppressions(races: &[Race]) -> String {
    let mut out = String::from("# racewatch suppressions, written by `racewatch triage --format suppressions`\n");
    for race in races.iter().filter(|r| r.status == "known" || r.status == "suppressed") {
        let _ = writeln!(out, "\n# {} ({}, {} occurrences)", esc(&race.summary), esc(&race.status), race.occurrences);
        if let Some(k) = race.source_key.as_deref().and_then(valid_key) {
            let _ = writeln!(out, "source_key:{k}");
        }
        for k in race.race_keys.iter().filter_map(|k| valid_key(&k.race_key)) {
            let _ = writeln!(out, "race_key:{k}");
        }
        let mut pcs: Vec<String> = Vec::new();
        for pc in race.race_keys.iter().flat_map(|k| &k.pcs).filter_map(|pc| valid_pc(pc)) {
            if !pcs.contains(&pc) {
                pcs.push(pc);
            }
        }
        for pc in pcs {
            let _ = writeln!(out, "pc:{pc}");
        }
    }
    out
}

/// A race_key or source_key: 16 hex digits (lower case), else `None`.
fn valid_key(key: &str) -> Option<String> {
    (key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit())).then(|| key.to_ascii_lowercase())
}

/// `<build-id>+0x<offset>` rebuilt from a hex build-id (an even number of digits, at most 128) and a
/// hex offset, else `None` (a module known only by its file name has no `pc:` line).
fn valid_pc(pc: &str) -> Option<String> {
    let (id, offset) = pc.split_once('+')?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let offset = offset.strip_prefix("0x")?;
    if !(hex(id) && id.len() % 2 == 0 && id.len() <= 128 && hex(offset) && offset.len() <= 16) {
        return None;
    }
    let offset = u64::from_str_radix(offset, 16).ok()?;
    Some(format!("{}+{offset:#x}", id.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc() {
        assert_eq!(super::date(0), "1970-01-01 00:00");
        assert_eq!(super::date(1_700_000_000), "2023-11-14 22:13");
    }

    #[test]
    fn a_borrowed_line_keeps_its_tilde_and_a_side_without_a_file_names_its_module() {
        let side: super::Side = serde_json::from_str(
            r#"{"file":"racy.c","line":26,"column":5,"function":"worker","module":"/srv/racyd","offset":"0x1300",
                "line_approximate":true}"#,
        )
        .unwrap();
        assert_eq!(side.display(), "racy.c:~26 worker");
        let exact = super::Side { line_approximate: false, ..side.clone() };
        assert_eq!(exact.display(), "racy.c:26 worker");
        // Stored before the field existed: exact.
        let old: super::Side = serde_json::from_str(r#"{"file":"racy.c","line":26}"#).unwrap();
        assert!(!old.line_approximate);
        let raw = super::Side { file: None, line: None, ..side };
        assert_eq!(raw.display(), "(racyd+0x1300) worker");
    }

    #[test]
    fn suppression_lines_come_from_validated_values_only() {
        assert_eq!(super::valid_pc("00ff+0x10"), Some("00ff+0x10".to_string()));
        assert_eq!(super::valid_pc("00FF+0x010"), Some("00ff+0x10".to_string()));
        assert_eq!(super::valid_pc("ab+0x1\nrace:/+0x2"), None);
        assert_eq!(super::valid_pc("abc+0x1"), None, "odd length");
        assert_eq!(super::valid_pc("app+0x1"), None, "a file name");
        assert_eq!(super::valid_key("0123456789abcdef"), Some("0123456789abcdef".to_string()));
        assert_eq!(super::valid_key("0123456789abcde\n"), None);
    }
}
