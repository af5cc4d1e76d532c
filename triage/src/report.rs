//! Reading report lines: JSON schema 1 (DESIGN.md "JSON report, schema 1") into typed structs with only
//! the fields triage needs, and the text report (`WARNING: racewatch: data race` … `SUMMARY:`) with a
//! small line-by-line state machine.

use racewatch_instrument::frames::Frame;
use serde::Deserialize;
use std::borrow::Cow;

/// The newest JSON schema this triage reads.
pub const SCHEMA: u64 = 1;

/// The top-level fields of a JSON line; the others (`accesses`) are skipped without building anything.
#[derive(Deserialize)]
pub struct Header<'a> {
    #[serde(borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default)]
    pub schema: Option<u64>,
    #[serde(borrow, default)]
    pub host: Option<Cow<'a, str>>,
    #[serde(default)]
    pub pid: Option<i64>,
    #[serde(default)]
    pub start_time: Option<i64>,
    #[serde(default)]
    pub time: Option<i64>,
    #[serde(borrow, default)]
    pub exe: Option<Exe<'a>>,
    #[serde(borrow, default)]
    pub app_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub race_key: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub source_key: Option<Cow<'a, str>>,
    #[serde(default)]
    pub count: Option<i64>,
    #[serde(borrow, default)]
    pub summary: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub struct Exe<'a> {
    #[serde(borrow, default)]
    pub build_id: Option<Cow<'a, str>>,
}

/// The accesses of a JSON report: read only when triage needs the stacks (the first time it sees a
/// race in a run, or when the report carries no keys).
#[derive(Deserialize)]
pub struct Body {
    #[serde(default)]
    pub accesses: Vec<JsonAccess>,
    /// What the memory is, as the runtime wrote it.
    #[serde(default)]
    pub location: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub struct JsonAccess {
    #[serde(default)]
    pub stack: Vec<JsonFrame>,
}

/// A frame as the runtime writes it (and as triage stores it).
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct JsonFrame {
    #[serde(default)]
    pub function: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub line: Option<u32>,
    #[serde(default)]
    pub column: Option<u32>,
    #[serde(default)]
    pub module: Option<String>,
    #[serde(default)]
    pub build_id: Option<String>,
    /// `"0x…"`; null for the placeholder of elided frames.
    #[serde(default)]
    pub offset: Option<String>,
    #[serde(default)]
    pub inlined: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub line_approximate: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub memory_function: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub in_runtime: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elided_frames: usize,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `0x1f` or `1f` as a number.
pub fn parse_hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}

impl JsonFrame {
    pub fn to_frame(&self) -> Frame {
        Frame {
            function: self.function.clone(),
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            module: self.module.clone(),
            build_id: self.build_id.clone().filter(|id| !id.is_empty()),
            offset: self.offset.as_deref().and_then(parse_hex).unwrap_or(0),
            inlined: self.inlined,
            in_runtime: self.in_runtime,
            memory_function: self.memory_function,
            line_approximate: self.line_approximate,
            elided: self.elided_frames,
        }
    }

    pub fn from_frame(frame: &Frame) -> JsonFrame {
        JsonFrame {
            function: frame.function.clone(),
            file: frame.file.clone(),
            line: frame.line,
            column: frame.column,
            module: frame.module.clone(),
            build_id: frame.build_id.clone(),
            offset: (frame.elided == 0).then(|| format!("{:#x}", frame.offset)),
            inlined: frame.inlined,
            line_approximate: frame.line_approximate,
            memory_function: frame.memory_function,
            in_runtime: frame.in_runtime,
            elided_frames: frame.elided,
        }
    }
}

/// A frame that only a build-id and an offset name (the runtime ran with `symbolize=0`).
pub fn is_unsymbolized(frame: &Frame) -> bool {
    frame.elided == 0 && frame.file.is_none() && frame.line.is_none() && frame.build_id.is_some()
}

/// Whether a stack has frames that offline symbolization could name.
pub fn needs_symbols(stack: &[Frame]) -> bool {
    stack.iter().any(is_unsymbolized)
}

// ---- Text reports ----

/// One text report, as read back from its lines.
#[derive(Debug, Default, Clone)]
pub struct TextReport {
    pub pid: i64,
    /// The two accesses' stacks (current, previous), frames as printed (file names, no build-ids).
    pub stacks: [Vec<Frame>; 2],
    pub summary: Option<String>,
    pub race_key: Option<String>,
    pub source_key: Option<String>,
    /// FNV-1a 128 of the report's lines: its identity.
    pub hash: u128,
}

/// Where the text parser is in a report.
#[derive(Default)]
pub struct TextParser {
    current: Option<TextReport>,
    /// Which stack the next frame lines belong to: 0, 1, or none (creation stacks, location).
    side: Option<usize>,
    accesses_seen: usize,
}

pub const TEXT_HEADER: &str = "WARNING: racewatch: data race";
const SUMMARY_PREFIX: &str = "SUMMARY: racewatch: ";

/// What a line did to the text parser.
pub enum TextEvent {
    /// Not part of a report (program output, racewatch notices) or consumed inside one.
    None,
    /// A report ended with its SUMMARY line.
    Report(TextReport),
    /// A report began before the previous one ended: that one was cut short.
    Truncated,
}

impl TextParser {
    pub fn in_report(&self) -> bool {
        self.current.is_some()
    }

    pub fn line(&mut self, line: &str) -> TextEvent {
        if let Some(rest) = line.strip_prefix(TEXT_HEADER) {
            let truncated = self.current.is_some();
            let pid = rest.trim().strip_prefix("(pid=").and_then(|r| r.strip_suffix(')')).and_then(|p| p.parse().ok());
            let mut report = TextReport { pid: pid.unwrap_or(0), ..TextReport::default() };
            report.hash = fnv128(FNV128_OFFSET, line.as_bytes());
            self.current = Some(report);
            self.side = None;
            self.accesses_seen = 0;
            return if truncated { TextEvent::Truncated } else { TextEvent::None };
        }
        let Some(report) = self.current.as_mut() else { return TextEvent::None };
        report.hash = fnv128(fnv128(report.hash, b"\n"), line.as_bytes());
        if let Some(summary) = line.strip_prefix(SUMMARY_PREFIX) {
            report.summary = Some(summary.trim_end().to_string());
            self.side = None;
            return TextEvent::Report(self.current.take().expect("in a report"));
        }
        if let Some(keys) = line.trim_start().strip_prefix("Keys:") {
            for word in keys.split_whitespace() {
                if let Some(k) = word.strip_prefix("race_key=") {
                    report.race_key = is_key(k).then(|| k.to_string());
                } else if let Some(k) = word.strip_prefix("source_key=") {
                    report.source_key = is_key(k).then(|| k.to_string());
                }
            }
            return TextEvent::None;
        }
        if line.starts_with("  ") && !line.starts_with("   ") {
            // An access header (`  Write of size 8 at 0x… by thread T2 (tid 5678):`), the location,
            // a creation header.
            let is_access =
                line.contains(" of size ") && line.trim_end().ends_with(':') && !line.contains(" created by ");
            self.side = if is_access && self.accesses_seen < 2 {
                self.accesses_seen += 1;
                Some(self.accesses_seen - 1)
            } else {
                None
            };
            return TextEvent::None;
        }
        if let (Some(side), Some(frame)) = (self.side, parse_text_frame(line)) {
            report.stacks[side].push(frame);
        }
        TextEvent::None
    }

    /// The end of the input: a report still open was cut short.
    pub fn finish(&mut self) -> bool {
        self.current.take().is_some()
    }
}

/// 16 hex digits.
pub fn is_key(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `    #3 name file:line:col (module+0xoff)`; `None` for folded runs (`#1..#6 (…)`) and other lines.
fn parse_text_frame(line: &str) -> Option<Frame> {
    let rest = line.trim_start().strip_prefix('#')?;
    let (number, rest) = rest.split_once(' ')?;
    if !number.bytes().all(|b| b.is_ascii_digit()) {
        return None; // `#1..#6`: frames not shown
    }
    let open = rest.rfind(" (").or_else(|| rest.starts_with('(').then_some(0))?;
    let place = rest[open..].trim_start().strip_prefix('(')?.strip_suffix(')')?;
    let (module, offset) = match place.rsplit_once('+') {
        Some((module, offset)) => (Some(module.to_string()), parse_hex(offset)?),
        None => (None, parse_hex(place)?),
    };
    let head = rest[..open].trim();
    let (function, location) = match head.rsplit_once(' ') {
        Some((function, location)) if looks_like_location(location) => (function, Some(location)),
        _ => (head, None),
    };
    let mut frame = Frame { module, offset, ..Frame::default() };
    if !function.is_empty() && function != "<unknown>" {
        frame.function = Some(function.to_string());
    }
    if let Some(location) = location {
        let numbers: Vec<&str> = location.split(':').skip(1).collect();
        let all_numbers = numbers.iter().all(|n| n.trim_start_matches('~').parse::<u32>().is_ok());
        if all_numbers && !numbers.is_empty() {
            let file = location.split(':').next().unwrap_or(location);
            frame.file = Some(file.to_string());
            frame.line = numbers.first().and_then(|n| n.trim_start_matches('~').parse().ok());
            frame.line_approximate = numbers.first().is_some_and(|n| n.starts_with('~'));
            frame.column = numbers.get(1).and_then(|n| n.parse().ok());
        } else {
            frame.file = Some(location.to_string());
        }
    }
    Some(frame)
}

/// `src/main.rs:12:5`, `library/core/src/ptr/mod.rs:2178`, `racy.c`.
fn looks_like_location(text: &str) -> bool {
    let file = text.split(':').next().unwrap_or(text);
    let numbered = text.contains(':') && text.rsplit(':').next().is_some_and(|n| n.parse::<u32>().is_ok());
    numbered || file.contains('/') || file.rsplit_once('.').is_some_and(|(_, ext)| ext.len() <= 4 && !ext.is_empty())
}

// ---- Identities ----

pub const FNV128_OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
const FNV128_PRIME: u128 = 0x0000000001000000000000000000013b;

/// FNV-1a 128, continued from `hash`.
pub fn fnv128(mut hash: u128, bytes: &[u8]) -> u128 {
    for &b in bytes {
        hash ^= u128::from(b);
        hash = hash.wrapping_mul(FNV128_PRIME);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_frames_are_read_back() {
        let f =
            parse_text_frame("    #1 racy_flag::publish demos/src/bin/racy_flag.rs:15:9 (racy_flag+0x1c1cb)").unwrap();
        assert_eq!(f.function.as_deref(), Some("racy_flag::publish"));
        assert_eq!(f.file.as_deref(), Some("demos/src/bin/racy_flag.rs"));
        assert_eq!((f.line, f.column, f.offset), (Some(15), Some(9), 0x1c1cb));
        assert_eq!(f.module.as_deref(), Some("racy_flag"));
        let f = parse_text_frame("    #0 <unknown> (c_racy+0x11b4)").unwrap();
        assert_eq!((f.function, f.file, f.offset), (None, None, 0x11b4));
        let f = parse_text_frame("    #0 memcpy (libc.so.6+0x891f5)").unwrap();
        assert_eq!(f.function.as_deref(), Some("memcpy"));
        assert!(parse_text_frame("    #1..#6 (6 frames of the Rust standard library)").is_none());
        let f = parse_text_frame("    #2 f src/a.rs:~7 (a+0x10)").unwrap();
        assert_eq!((f.line, f.line_approximate), (Some(7), true));
    }
}
