//! The suppressions file (`suppressions=PATH`): which races are known and neither reported nor watched.
//!
//! One entry per line; `#` comments and blank lines are skipped:
//! - `race:<substring>`: a race is suppressed when a function, file or module of either stack contains it
//!   (ThreadSanitizer's spelling);
//! - `race_key:<hex>`, `source_key:<hex>`: the race with that key (see DESIGN.md "Keys");
//! - `pc:<build-id>+0x<offset>`: an access of a known race; the sampler never watches it.
//!
//! `racewatch triage --format suppressions` writes all four for the races a team marked known.

use std::collections::HashSet;

/// What a suppressions file says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Suppressions {
    /// `race:` substrings.
    pub patterns: Vec<String>,
    pub race_keys: HashSet<String>,
    pub source_keys: HashSet<String>,
    /// `pc:` entries: module build-id (lower-case hex) and offset.
    pub pcs: Vec<(String, u64)>,
}

impl Suppressions {
    /// Whether nothing is suppressed.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty() && self.race_keys.is_empty() && self.source_keys.is_empty() && self.pcs.is_empty()
    }
}

/// Parses a suppressions file: the entries, and one warning per line that was ignored.
pub fn parse(text: &str) -> (Suppressions, Vec<String>) {
    let mut out = Suppressions::default();
    let mut warnings = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((kind, value)) = line.split_once(':').map(|(k, v)| (k.trim(), v.trim())) else {
            warnings.push(format!("line {}: expected `race:<pattern>`", number + 1));
            continue;
        };
        let bad = |what: &str| format!("line {}: expected `{kind}:{what}`", number + 1);
        match kind {
            "race" if !value.is_empty() => out.patterns.push(value.to_string()),
            "race" => warnings.push(bad("<pattern>")),
            "race_key" | "source_key" if is_key(value) => {
                let keys = if kind == "race_key" { &mut out.race_keys } else { &mut out.source_keys };
                keys.insert(value.to_ascii_lowercase());
            }
            "race_key" | "source_key" => warnings.push(bad("<16 hex digits>")),
            "pc" => match parse_pc(value) {
                Some(pc) => out.pcs.push(pc),
                None => warnings.push(bad("<build-id>+0x<offset>")),
            },
            _ => warnings
                .push(format!("line {}: unsupported kind `{kind}` (race:, race_key:, source_key:, pc:)", number + 1)),
        }
    }
    (out, warnings)
}

fn is_key(value: &str) -> bool {
    value.len() == 16 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<build-id>+0x<offset>`.
fn parse_pc(value: &str) -> Option<(String, u64)> {
    let (build_id, offset) = value.split_once('+')?;
    let offset = u64::from_str_radix(offset.strip_prefix("0x")?, 16).ok()?;
    let hex = !build_id.is_empty() && build_id.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| (build_id.to_ascii_lowercase(), offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_read_and_bad_lines_are_warned_about() {
        let text = "# comment\n\nrace:racy_counter::bump\n  race: vendor/lib.c  \nthread:foo\nrace:\nnonsense\n\
                    race_key:00112233445566AA\nsource_key:ffeeddccbbaa9988\nsource_key:12\n\
                    pc:ABCDEF0123+0x1a2b\npc:abcd+1234\n";
        let (s, warnings) = parse(text);
        assert_eq!(s.patterns, vec!["racy_counter::bump", "vendor/lib.c"]);
        assert!(s.race_keys.contains("00112233445566aa"));
        assert!(s.source_keys.contains("ffeeddccbbaa9988") && s.source_keys.len() == 1);
        assert_eq!(s.pcs, vec![("abcdef0123".to_string(), 0x1a2b)]);
        assert_eq!(
            warnings,
            vec![
                "line 5: unsupported kind `thread` (race:, race_key:, source_key:, pc:)",
                "line 6: expected `race:<pattern>`",
                "line 7: expected `race:<pattern>`",
                "line 10: expected `source_key:<16 hex digits>`",
                "line 12: expected `pc:<build-id>+0x<offset>`",
            ]
        );
        assert!(parse("# nothing\n").0.is_empty());
    }
}
