//! Ingest: report logs (files, directories, stdin; plain or gzip) read line by line, never whole, into
//! batches of rows written one transaction each. Bad input is skipped and counted by kind.

use crate::report::{
    fnv128, is_key, is_unsymbolized, needs_symbols, Body, Header, JsonFrame, TextEvent, TextParser, TextReport,
    FNV128_OFFSET, SCHEMA,
};
use crate::store::{Batch, RaceRow, ReportRow, Store, SymbolRow};
use crate::symbolize::OfflineSymbolizer;
use racewatch_instrument::frames::{racing_frames, short_backtrace, summary, Frame, Paths};
use racewatch_instrument::keys;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Lines longer than this are skipped (a report is a few KiB; a deep stack a few hundred).
pub const MAX_LINE: usize = 16 << 20;
/// Reports per transaction.
const BATCH: usize = 20_000;

/// The largest occurrence count a report line may carry (a process seeing one race a million times a
/// second for a year stays below it).
const MAX_COUNT: i64 = 1 << 45;

/// Kinds of input that is skipped, each reported once with its count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Skip {
    TruncatedJson,
    MalformedJson,
    UnknownSchema,
    UnknownKind,
    Binary,
    TooLong,
    TruncatedText,
    OrphanCount,
    Unreadable,
    /// A field that must be a key (16 hex digits) or a build-id (hex) and is not: left out of the report.
    BadField,
}

impl Skip {
    fn describe(self, n: u64) -> String {
        let s = |one: &str, many: &str| if n == 1 { one.to_string() } else { many.to_string() };
        match self {
            Skip::TruncatedJson => format!("{n} truncated JSON {} skipped", s("line", "lines")),
            Skip::MalformedJson => format!("{n} malformed JSON {} skipped", s("line", "lines")),
            Skip::UnknownSchema => {
                format!(
                    "{n} {} of a JSON schema newer than {SCHEMA} skipped (use a newer racewatch)",
                    s("report", "reports")
                )
            }
            Skip::UnknownKind => format!("{n} JSON {} of an unknown kind skipped", s("line", "lines")),
            Skip::Binary => format!("{n} {} of binary data skipped", s("line", "lines")),
            Skip::TooLong => format!("{n} {} longer than {} MiB skipped", s("line", "lines"), MAX_LINE >> 20),
            Skip::TruncatedText => format!("{n} truncated text {} skipped", s("report", "reports")),
            Skip::OrphanCount => {
                format!("{n} race_count {} without {} report skipped", s("line", "lines"), s("its", "their"))
            }
            Skip::Unreadable => format!("{n} {} could not be read to the end", s("input", "inputs")),
            Skip::BadField => format!(
                "{n} malformed {} ignored (a race_key or source_key that is not 16 hex digits, a build-id that is not hex)",
                s("field", "fields")
            ),
        }
    }
}

/// Counts of one ingest run.
#[derive(Default)]
pub struct Totals {
    pub inputs: u64,
    pub reports: u64,
    pub new_reports: u64,
    pub counts: u64,
    /// Per kind: how many, and the first place (`file:line`) with the error when there is one.
    pub skipped: HashMap<Skip, (u64, String)>,
}

impl Totals {
    /// The run in one line, then one line per kind of skipped input.
    pub fn messages(&self) -> Vec<String> {
        let mut out = vec![format!(
            "{} report{} read from {} input{} ({} new){}",
            self.reports,
            if self.reports == 1 { "" } else { "s" },
            self.inputs,
            if self.inputs == 1 { "" } else { "s" },
            self.new_reports,
            if self.counts > 0 { format!(", {} race counts", self.counts) } else { String::new() }
        )];
        let mut kinds: Vec<_> = self.skipped.iter().collect();
        kinds.sort();
        for (kind, (n, at)) in kinds {
            let place = if at.is_empty() { String::new() } else { format!(" (first at {at})") };
            out.push(format!("{}{place}", kind.describe(*n)));
        }
        out
    }
}

/// One input to read: a file, or stdin.
pub enum Input {
    File(PathBuf),
    Stdin,
}

impl Input {
    pub fn name(&self) -> String {
        match self {
            Input::File(path) => path.display().to_string(),
            Input::Stdin => "<stdin>".to_string(),
        }
    }
}

/// The inputs the arguments name: files, the files of directories (recursively, sorted), `-` for stdin.
/// A missing path is an error (nothing is read then).
pub fn inputs(args: &[String]) -> Result<Vec<Input>, String> {
    let mut out = Vec::new();
    for arg in args {
        if arg == "-" {
            out.push(Input::Stdin);
            continue;
        }
        let path = Path::new(arg);
        let meta = std::fs::metadata(path).map_err(|e| format!("{arg}: {}", io_error(&e)))?;
        if meta.is_dir() {
            walk(path, &mut out).map_err(|e| format!("{arg}: {e}"))?;
        } else {
            out.push(Input::File(path.to_path_buf()));
        }
    }
    Ok(out)
}

fn io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    }
}

fn walk(dir: &Path, out: &mut Vec<Input>) -> Result<(), String> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {}", dir.display(), io_error(&e)))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        // Symbolic links to directories are not followed (no cycles); to files they are.
        let Ok(link) = std::fs::symlink_metadata(&path) else { continue };
        if link.is_dir() {
            walk(&path, out)?;
        } else if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            out.push(Input::File(path));
        }
    }
    Ok(())
}

/// One line of a capped reader.
enum Line {
    Text,
    TooLong,
}

/// Reads the next line into `buf` (without its newline), never holding more than `cap` bytes of it.
fn next_line(reader: &mut dyn BufRead, buf: &mut Vec<u8>, cap: usize) -> std::io::Result<Option<Line>> {
    buf.clear();
    let (mut any, mut too_long) = (false, false);
    loop {
        let available = match reader.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any.then_some(if too_long { Line::TooLong } else { Line::Text }));
        }
        any = true;
        let (end, found) = match find_newline(available) {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if !too_long {
            if buf.len() + end > cap {
                too_long = true;
                buf.clear();
                buf.shrink_to(64 << 10);
            } else {
                buf.extend_from_slice(&available[..end]);
            }
        }
        reader.consume(if found { end + 1 } else { end });
        if found {
            return Ok(Some(if too_long { Line::TooLong } else { Line::Text }));
        }
    }
}

/// The first `\n` in `bytes`, eight bytes at a time.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const NL: u64 = LO * b'\n' as u64;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes")) ^ NL;
        // The lowest byte that is zero sets the lowest bit here (bits above it may be spurious).
        let zero = word.wrapping_sub(LO) & !word & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| b == b'\n').map(|i| at + i)
}

/// Opens an input, unwrapping gzip (by its magic bytes, whatever the file is called).
fn open(input: &Input) -> std::io::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = match input {
        Input::File(path) => Box::new(std::fs::File::open(path)?),
        Input::Stdin => Box::new(std::io::stdin()),
    };
    let mut reader = BufReader::with_capacity(256 << 10, raw);
    let head = reader.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(256 << 10, flate2::bufread::MultiGzDecoder::new(reader))))
    } else {
        Ok(Box::new(reader))
    }
}

/// A report of a race the run has not written yet, or one better than what it wrote.
struct RaceSeen {
    symbolized: bool,
    /// The key this run gave the race: a later report of the same race_key (the same PCs) gets it too.
    source_key: Option<String>,
}

/// Reads inputs into a store.
pub struct Ingester<'a> {
    store: &'a mut dyn Store,
    symbolizer: OfflineSymbolizer,
    batch: Batch,
    /// Races written in this run (their stacks need not be read again).
    races: HashMap<String, RaceSeen>,
    /// Symbolization results of this run, by (build-id, offset, return address).
    symbols: HashMap<(String, u64, bool), Option<Vec<Frame>>>,
    /// Symbols asked of the store already (hits and misses).
    asked: HashSet<(String, u64, bool)>,
    pub totals: Totals,
    now: i64,
    /// Where the current line is, for messages.
    place: (String, u64),
    pub notes: Vec<String>,
}

impl<'a> Ingester<'a> {
    pub fn new(store: &'a mut dyn Store, debug_dirs: Vec<PathBuf>) -> Ingester<'a> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        Ingester {
            store,
            symbolizer: OfflineSymbolizer::new(debug_dirs),
            batch: Batch::default(),
            races: HashMap::new(),
            symbols: HashMap::new(),
            asked: HashSet::new(),
            totals: Totals::default(),
            now,
            place: (String::new(), 0),
            notes: Vec::new(),
        }
    }

    fn skip(&mut self, kind: Skip) {
        let at = format!("{}:{}", self.place.0, self.place.1);
        let entry = self.totals.skipped.entry(kind).or_insert((0, at));
        entry.0 += 1;
    }

    /// Reads one input to its end (or to a read error, which is counted and ends only this input).
    pub fn read(&mut self, input: &Input) -> Result<(), String> {
        self.totals.inputs += 1;
        self.place = (input.name(), 0);
        let mut reader = match open(input) {
            Ok(r) => r,
            Err(e) => {
                self.place.1 = 0;
                self.skip(Skip::Unreadable);
                self.notes.push(format!("{}: {}", input.name(), io_error(&e)));
                return Ok(());
            }
        };
        let mut text = TextParser::default();
        let mut buf = Vec::with_capacity(64 << 10);
        loop {
            let line = match next_line(&mut *reader, &mut buf, MAX_LINE) {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    self.skip(Skip::Unreadable);
                    self.notes.push(format!("{}: {} (after line {})", input.name(), e, self.place.1));
                    break;
                }
            };
            self.place.1 += 1;
            match line {
                Line::TooLong => self.skip(Skip::TooLong),
                Line::Text => self.line(&buf, &mut text)?,
            }
            if self.batch.len() >= BATCH {
                self.flush()?;
            }
        }
        if text.finish() {
            self.skip(Skip::TruncatedText);
        }
        Ok(())
    }

    fn line(&mut self, bytes: &[u8], text: &mut TextParser) -> Result<(), String> {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
        if bytes.get(start) == Some(&b'{') && !text.in_report() {
            self.json(&bytes[start..]);
            return Ok(());
        }
        let Some(line) = printable(bytes) else {
            self.skip(Skip::Binary);
            return Ok(());
        };
        match text.line(line) {
            TextEvent::None => {}
            TextEvent::Truncated => self.skip(Skip::TruncatedText),
            TextEvent::Report(report) => self.text_report(report),
        }
        Ok(())
    }

    fn json(&mut self, line: &[u8]) {
        // Parsed straight from the bytes (serde_json checks UTF-8 where it matters); a line that fails
        // is then told apart: binary data, cut short, or otherwise malformed.
        let header: Header = match serde_json::from_slice(line) {
            Ok(h) => h,
            Err(_) if printable(line).is_none() => return self.skip(Skip::Binary),
            Err(e) if e.is_eof() => return self.skip(Skip::TruncatedJson),
            Err(_) => return self.skip(Skip::MalformedJson),
        };
        if header.schema.is_some_and(|s| s > SCHEMA) {
            return self.skip(Skip::UnknownSchema);
        }
        match header.kind.as_deref() {
            Some("data_race") => self.json_report(line, &header),
            Some("race_count") => {
                let (Some(host), Some(pid), Some(start), Some(race_key), Some(count)) =
                    (header.host.as_deref(), header.pid, header.start_time, header.race_key.as_deref(), header.count)
                else {
                    return self.skip(Skip::MalformedJson);
                };
                self.totals.counts += 1;
                self.batch.counts.push((process_ident(host, pid, start, race_key), count));
            }
            _ => self.skip(Skip::UnknownKind),
        }
    }

    fn json_report(&mut self, line: &[u8], header: &Header<'_>) {
        // Beyond any real count (a number this large is a corrupt or forged line, and would skew the list).
        if header.count.is_some_and(|n| !(1..=MAX_COUNT).contains(&n)) || header.pid.is_some_and(|p| p < 0) {
            return self.skip(Skip::MalformedJson);
        }
        // Keys and build-ids end up in suppressions files and file names: anything but hex is dropped.
        let mut checked = |field: Option<&str>, valid: fn(&str) -> bool| match field {
            Some(value) if valid(value) => Some(value.to_string()),
            Some(_) => {
                self.skip(Skip::BadField);
                None
            }
            None => None,
        };
        let race_key = checked(header.race_key.as_deref(), is_key);
        let mut source_key = checked(header.source_key.as_deref(), is_key);
        let exe_build_id = checked(header.exe.as_ref().and_then(|e| e.build_id.as_deref()), is_hex_id);
        // Written in this run already: with both keys given, the stacks need not be read again.
        let seen = race_key.as_ref().and_then(|k| self.races.get(k));
        let mut seen_with_files = false;
        let (race_key, race) = if let (Some(seen), Some(_)) = (seen, &source_key) {
            // The same PCs symbolize the same way: the key this run made for them, not one the process
            // made without files.
            if seen.source_key.is_some() {
                source_key = seen.source_key.clone();
                seen_with_files = seen.symbolized;
            }
            (race_key.expect("seen"), None)
        } else {
            let body: Body = match serde_json::from_slice::<Body>(line) {
                // A report is two accesses, each with a stack; anything less reports nothing.
                Ok(b) if b.accesses.len() == 2 && b.accesses.iter().all(|a| !a.stack.is_empty()) => b,
                _ => return self.skip(Skip::MalformedJson),
            };
            let location = body.location;
            let mut stacks = body.accesses.into_iter().map(|a| a.stack.iter().map(JsonFrame::to_frame).collect());
            let mut a: Vec<Frame> = stacks.next().unwrap_or_default();
            let mut b: Vec<Frame> = stacks.next().unwrap_or_default();
            for frame in a.iter_mut().chain(b.iter_mut()) {
                if frame.build_id.as_deref().is_some_and(|id| !is_hex_id(id)) {
                    frame.build_id = None;
                    self.skip(Skip::BadField);
                }
            }
            let race_key = race_key.unwrap_or_else(|| keys::race_key(&a, &b));
            let symbolized_here = needs_symbols(&a) || needs_symbols(&b);
            let (a, b) = if symbolized_here { (self.symbolize(a), self.symbolize(b)) } else { (a, b) };
            // The report's own key was made without files (a process with symbolize=1 on a stripped
            // binary names functions only): the debug info found here makes the key every build shares.
            let (side_a, side_b) = racing_frames(&a, &b);
            let files_here = symbolized_here && [side_a, side_b].iter().flatten().any(|f| f.file.is_some());
            if source_key.is_none() || files_here {
                source_key = keys::source_key(&a, &b);
            }
            let summary = match (&header.summary, symbolized_here) {
                (Some(summary), false) => summary.to_string(),
                _ => summary(&a, &b, Paths::Full),
            };
            let mut race = race_row(&race_key, &source_key, summary, &a, &b);
            race.location = location.map(|l| self.located(l).to_string());
            (race_key, Some(race))
        };
        let host = header.host.as_deref().unwrap_or("unknown");
        let pid = header.pid.unwrap_or(0);
        let ident = match (header.host.as_deref(), header.start_time) {
            (Some(host), Some(start)) => process_ident(host, pid, start, &race_key),
            // Today's runtime names neither host nor start: the line itself is the identity.
            _ => ident(header.time.unwrap_or(0), fnv128(fnv128(FNV128_OFFSET, b"line\0"), line)),
        };
        let app_version = header
            .app_version
            .as_deref()
            .map(str::to_string)
            .or_else(|| exe_build_id.as_ref().map(|id| id.chars().take(12).collect()));
        let source_from_debug_info = seen_with_files || race.as_ref().is_some_and(|r| r.symbolized != 0);
        self.add(
            ReportRow {
                ident,
                race_key,
                source_key,
                source_from_debug_info,
                host: host.to_string(),
                pid,
                start_time: header.start_time.unwrap_or(0),
                seen: header.time.or(header.start_time).unwrap_or(self.now),
                exe_build_id,
                app_version,
                occurrences: header.count.unwrap_or(1).max(1),
            },
            race,
        );
    }

    fn text_report(&mut self, report: TextReport) {
        let [a, b] = report.stacks;
        let race_key = report.race_key.unwrap_or_else(|| keys::race_key(&a, &b));
        let source_key = match report.source_key {
            Some(k) => Some(k),
            None => keys::source_key(&a, &b),
        };
        let summary = report.summary.unwrap_or_else(|| summary(&a, &b, Paths::Full));
        let race = race_row(&race_key, &source_key, summary, &a, &b);
        let ident = ident(0, fnv128(fnv128(FNV128_OFFSET, b"text\0"), &report.hash.to_be_bytes()));
        let source_from_debug_info = race.symbolized != 0;
        self.add(
            ReportRow {
                ident,
                race_key,
                source_key,
                source_from_debug_info,
                host: "unknown".to_string(),
                pid: report.pid,
                start_time: 0,
                seen: self.now,
                exe_build_id: None,
                app_version: None,
                occurrences: 1,
            },
            Some(race),
        );
    }

    fn add(&mut self, row: ReportRow, race: Option<RaceRow>) {
        if let Some(race) = race {
            let symbolized = race.symbolized != 0;
            let better = match self.races.get(&race.race_key) {
                None => true,
                Some(old) => symbolized && !old.symbolized,
            };
            if better {
                let source_key = race.source_key.clone();
                self.races.insert(race.race_key.clone(), RaceSeen { symbolized, source_key });
                self.batch.races.push(race);
            }
        }
        self.totals.reports += 1;
        self.batch.reports.push(row);
    }

    /// The report's `location`, with an address in a module's data (a `symbolize=0` report) named by the
    /// module's symbol table: `{"kind": "global", "name", "size", "module", "offset"}`.
    fn located(&mut self, location: serde_json::Value) -> serde_json::Value {
        if location["kind"] != "module" {
            return location;
        }
        let offset = location["offset"].as_str().and_then(|o| u64::from_str_radix(o.trim_start_matches("0x"), 16).ok());
        let (Some(build_id), Some(offset)) = (location["build_id"].as_str(), offset) else { return location };
        let module = location["module"].as_str();
        match self.symbolizer.data_symbol(build_id, module, offset) {
            Some((name, size, start)) => serde_json::json!({
                "kind": "global",
                "name": name,
                "size": size,
                "module": module,
                "offset": format!("{start:#x}"),
            }),
            None => location,
        }
    }

    /// Frames named by offline symbolization where the report has only build-id and offset.
    fn symbolize(&mut self, stack: Vec<Frame>) -> Vec<Frame> {
        let mut out = Vec::with_capacity(stack.len());
        for (i, frame) in stack.into_iter().enumerate() {
            if !is_unsymbolized(&frame) {
                out.push(frame);
                continue;
            }
            let key = (frame.build_id.clone().unwrap_or_default(), frame.offset, i > 0);
            match self.lookup(key, frame.module.as_deref()) {
                Some(frames) => out.extend(frames.into_iter().map(|f| Frame {
                    module: frame.module.clone(),
                    build_id: frame.build_id.clone(),
                    offset: frame.offset,
                    in_runtime: frame.in_runtime,
                    memory_function: frame.memory_function,
                    function: f.function.or_else(|| frame.function.clone()),
                    ..f
                })),
                None => out.push(frame),
            }
        }
        // Cut as the runtime cuts the stacks it symbolizes itself (thread start-up, panic machinery).
        short_backtrace(out)
    }

    /// One PC's frames: this run's results, else the store's cache, else the debug info.
    fn lookup(&mut self, key: (String, u64, bool), module: Option<&str>) -> Option<Vec<Frame>> {
        if let Some(found) = self.symbols.get(&key) {
            return found.clone();
        }
        let mut found = None;
        if self.asked.insert(key.clone()) {
            let cached = self.store.query(
                "SELECT frames FROM symbols WHERE build_id = $1 AND pc_offset = $2 AND is_return = $3",
                &[key.0.clone().into_param(), (key.1 as i64).into_param(), i64::from(key.2).into_param()],
            );
            if let Some(text) = cached.ok().and_then(|rows| rows.into_iter().next()).and_then(|r| r[0].string()) {
                found = serde_json::from_str::<Vec<JsonFrame>>(&text)
                    .ok()
                    .map(|frames| frames.iter().map(JsonFrame::to_frame).collect());
            }
        }
        if found.is_none() {
            found = self.symbolizer.symbolize(&key.0, module, key.1, key.2);
            // Only what the debug info says is kept for good: names from a symbol table alone (no debug
            // file found this time) are looked up again by the next ingest.
            if let Some(frames) = found.as_ref().filter(|frames| frames.iter().any(|f| f.file.is_some())) {
                let json: Vec<JsonFrame> = frames.iter().map(JsonFrame::from_frame).collect();
                self.batch.symbols.push(SymbolRow {
                    build_id: key.0.clone(),
                    offset: key.1 as i64,
                    is_return: key.2,
                    frames: serde_json::to_string(&json).unwrap_or_default(),
                });
            }
        }
        self.symbols.insert(key, found.clone());
        found
    }

    /// Writes what is batched.
    pub fn flush(&mut self) -> Result<(), String> {
        self.notes.extend(self.symbolizer.take_messages());
        if self.batch.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.batch);
        batch.normalize();
        let outcome = self.store.ingest(&batch)?;
        self.totals.new_reports += outcome.new_reports;
        if outcome.orphan_counts > 0 {
            let entry = self.totals.skipped.entry(Skip::OrphanCount).or_insert((0, String::new()));
            entry.0 += outcome.orphan_counts;
        }
        Ok(())
    }
}

trait IntoParam {
    fn into_param(self) -> crate::store::Param;
}

impl IntoParam for String {
    fn into_param(self) -> crate::store::Param {
        crate::store::Param::Text(self)
    }
}

impl IntoParam for i64 {
    fn into_param(self) -> crate::store::Param {
        crate::store::Param::Int(self)
    }
}

/// A report's identity in the store: a time (big-endian, so that a fleet's logs, read roughly in time
/// order, insert near the end of the store's B-tree instead of all over it), then a 128-bit hash.
fn ident(time: i64, hash: u128) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&time.to_be_bytes());
    out.extend_from_slice(&hash.to_be_bytes());
    out
}

/// The identity of a JSON report: who reported it (host, pid, process start) and which race.
fn process_ident(host: &str, pid: i64, start: i64, race_key: &str) -> Vec<u8> {
    let text = format!("json\0{host}\0{pid}\0{start}\0{race_key}");
    ident(start, fnv128(FNV128_OFFSET, text.as_bytes()))
}

/// A build-id as a report may carry it: hex digits, an even number of them, at most 128 (a frame of a
/// module without one has none at all).
fn is_hex_id(id: &str) -> bool {
    !id.is_empty() && id.len() % 2 == 0 && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The line as text when it is text: UTF-8 without NULs or control characters other than tab and escape.
fn printable(bytes: &[u8]) -> Option<&str> {
    let line = std::str::from_utf8(bytes).ok()?;
    (!line.bytes().any(|b| b < 0x20 && b != b'\t' && b != 0x1b)).then_some(line)
}

/// A side as the views show it: `{"file", "line", "column", "function", "module", "offset"}` JSON.
fn side_json(frame: Option<&Frame>) -> Option<String> {
    let frame = frame?;
    let mut side = serde_json::json!({
        "file": frame.file,
        "line": frame.line.filter(|&l| l > 0),
        "column": frame.column.filter(|&c| c > 0),
        "function": frame.function,
        "module": frame.module,
        "offset": format!("{:#x}", frame.offset),
    });
    if frame.line_approximate {
        side["line_approximate"] = true.into();
    }
    Some(side.to_string())
}

fn race_row(race_key: &str, source_key: &Option<String>, summary: String, a: &[Frame], b: &[Frame]) -> RaceRow {
    let (side_a, side_b) = racing_frames(a, b);
    let stacks: [Vec<JsonFrame>; 2] =
        [a.iter().map(JsonFrame::from_frame).collect(), b.iter().map(JsonFrame::from_frame).collect()];
    let symbolized = [side_a, side_b].iter().flatten().any(|f| f.file.is_some());
    RaceRow {
        race_key: race_key.to_string(),
        source_key: source_key.clone(),
        summary,
        side_a: side_json(side_a),
        side_b: side_json(side_b),
        pc_a: keys::race_side(a),
        pc_b: keys::race_side(b),
        stacks: serde_json::to_string(&stacks).unwrap_or_default(),
        symbolized: i64::from(symbolized),
        location: None,
    }
}
