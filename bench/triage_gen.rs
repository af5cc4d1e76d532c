//! Generator for bench/triage_ingest.sh: N report lines derived from one real JSON report (stdin,
//! `report_format=json`), as a fleet would write them: processes (host, pid, start_time) that each
//! report a few of RACES distinct races (race_key and source_key varied per race), and a `race_count`
//! line at exit for every fourth of those. No dependencies: `rustc -O bench/triage_gen.rs`.
//!
//! Usage: triage_gen LINES RACES < report.json > fleet.log

use std::io::{BufWriter, Read, Write};

/// The template split around the fields that vary: `(text before, field)`, then the tail.
fn split(template: &str) -> (Vec<(String, &'static str)>, String) {
    let fields: [(&str, &str); 6] = [
        ("\"host\":", "host"),
        ("\"pid\":", "pid"),
        ("\"start_time\":", "start_time"),
        ("\"race_key\":", "race_key"),
        ("\"source_key\":", "source_key"),
        ("\"time\":", "time"),
    ];
    let mut found: Vec<(usize, usize, &'static str)> = Vec::new();
    for (key, name) in fields {
        // Top-level keys come after the accesses; search from the end.
        let at = template.rfind(key).unwrap_or_else(|| panic!("the report has no {key}"));
        let start = at + key.len();
        let rest = &template[start..];
        let len = if rest.starts_with('"') { rest[1..].find('"').unwrap() + 2 } else { rest.find([',', '}']).unwrap() };
        found.push((start, start + len, name));
    }
    found.sort();
    let mut parts = Vec::new();
    let mut pos = 0;
    for (start, end, name) in found {
        parts.push((template[pos..start].to_string(), name));
        pos = end;
    }
    (parts, template[pos..].to_string())
}

/// A 16-hex key from a number (splitmix64).
fn key(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let lines: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let races: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mut template = String::new();
    std::io::stdin().read_to_string(&mut template).unwrap();
    let template =
        template.lines().find(|l| l.contains("\"kind\":\"data_race\"")).expect("a data_race line").to_string();
    let (parts, tail) = split(&template);
    let out = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, out.lock());
    let (mut written, mut process) = (0u64, 0u64);
    let hosts = ["web-1", "web-2", "web-3", "batch-1", "batch-2", "db-1", "db-2", "edge-1"];
    while written < lines {
        process += 1;
        let host = hosts[(process % hosts.len() as u64) as usize];
        let pid = 1000 + process % 30_000;
        let start = 1_700_000_000 + process * 7;
        // 1 to 4 races per process, the frequent ones more often (a skewed fleet).
        let n = 1 + key(process) % 4;
        let mut counted = Vec::new();
        for i in 0..n {
            if written >= lines {
                break;
            }
            let r = key(process * 8 + i) % races;
            let r = r * r / races; // skew towards low race numbers
            let race_key = format!("\"{:016x}\"", key(r));
            let source_key = format!("\"{:016x}\"", key(r / 2 + 1_000_000)); // two builds per source race
            for (text, field) in &parts {
                out.write_all(text.as_bytes()).unwrap();
                let value = match *field {
                    "host" => format!("\"{host}\""),
                    "pid" => pid.to_string(),
                    "start_time" => start.to_string(),
                    "race_key" => race_key.clone(),
                    "source_key" => source_key.clone(),
                    _ => (start + 5 + i).to_string(),
                };
                out.write_all(value.as_bytes()).unwrap();
            }
            out.write_all(tail.as_bytes()).unwrap();
            out.write_all(b"\n").unwrap();
            written += 1;
            if i % 4 == 0 {
                counted.push(race_key);
            }
        }
        for race_key in counted {
            if written >= lines {
                break;
            }
            writeln!(
                out,
                "{{\"count\":{},\"host\":\"{host}\",\"kind\":\"race_count\",\"pid\":{pid},\"race_key\":{race_key},\"schema\":1,\"start_time\":{start}}}",
                2 + key(process) % 50
            )
            .unwrap();
            written += 1;
        }
    }
    out.flush().unwrap();
}
