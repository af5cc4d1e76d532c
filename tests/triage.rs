//! `racewatch triage` end to end: real report lines (the racy_counter demo run under racewatch, JSON,
//! text and the production profile's `symbolize=0`), the real binary, a real SQLite file and a real
//! PostgreSQL server (Debian's `initdb`/`pg_ctl`, started once for the suite and stopped by a guard).
//! The same scenarios run against both stores.

mod common;

use common::{demo, racewatch, run_under};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

// ---- Real reports ----

/// Report lines of real runs of racy_counter: a JSON report (with its race_count line), the same
/// race as a text report, and as a `symbolize=0` JSON report.
struct Real {
    json: String,
    text: String,
    raw: String,
}

fn real() -> &'static Real {
    static REAL: OnceLock<Real> = OnceLock::new();
    REAL.get_or_init(|| {
        let bin = &demo("rust", "racy_counter").bin;
        let capture = |options: &[&str], want: &dyn Fn(&str) -> bool| -> String {
            for _ in 0..8 {
                let mut all = vec!["sample_period_us=1000"];
                all.extend_from_slice(options);
                let run = run_under(&all, bin, &["2"]);
                if want(&run.stderr) {
                    return run.stderr;
                }
            }
            panic!("racy_counter reported nothing with {options:?} in 8 runs");
        };
        let is_json = |s: &str| s.contains("\"kind\":\"data_race\"");
        let json = capture(&["report_format=json"], &is_json);
        let text = capture(&[], &|s: &str| s.contains(common::REPORT_HEADER));
        let raw = capture(&["report_format=json", "symbolize=0"], &is_json);
        Real { json, text, raw }
    })
}

/// The first data_race line of `log`.
fn report_line(log: &str) -> Value {
    let line = log.lines().find(|l| l.contains("\"kind\":\"data_race\"")).expect("a JSON report");
    serde_json::from_str(line).expect("a JSON report line")
}

/// The real JSON report as another process would write it: `host`, `pid`, `start`, the race (keys
/// made from `race` unless 0: the real keys), `version`, `time`, `count`.
fn variant(host: &str, pid: u64, start: u64, race: u64, version: &str, time: u64) -> String {
    let mut v = report_line(&real().json);
    v["host"] = host.into();
    v["pid"] = pid.into();
    v["start_time"] = start.into();
    v["time"] = time.into();
    v["app_version"] = version.into();
    if race != 0 {
        v["race_key"] = format!("{:016x}", 0xa000_0000_0000_0000u64 + race).into();
        v["source_key"] = format!("{:016x}", 0xb000_0000_0000_0000u64 + race).into();
        v["summary"] = format!("data race src/r{race}.rs:{race}:1 in r{race}").into();
    }
    v.to_string()
}

fn count_line(host: &str, pid: u64, start: u64, race: u64, count: u64) -> String {
    let race_key = if race == 0 {
        report_line(&real().json)["race_key"].as_str().unwrap().to_string()
    } else {
        format!("{:016x}", 0xa000_0000_0000_0000u64 + race)
    };
    json!({"kind": "race_count", "schema": 1, "host": host, "pid": pid, "start_time": start,
           "race_key": race_key, "count": count})
    .to_string()
}

// ---- The stores ----

/// A PostgreSQL server for this test binary, stopped when dropped.
struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_nobody: bool,
}

impl Postgres {
    fn command(&self, tool: &str) -> Command {
        let mut cmd;
        if self.as_nobody {
            cmd = Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(self.bin.join(tool));
        } else {
            cmd = Command::new(self.bin.join(tool));
        }
        cmd
    }

    fn start() -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").is_file() && b.join("pg_ctl").is_file())
            .max()
            .unwrap_or_else(|| {
                panic!("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): apt-get install postgresql")
            });
        // Not under target/: the server's user (nobody, when the tests run as root) must reach it.
        let dir = std::env::temp_dir().join(format!("racewatch-triage-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let as_nobody = unsafe { libc::geteuid() } == 0;
        if as_nobody {
            let ok = Command::new("chown").args(["-R", "65534:65534"]).arg(&dir).status().unwrap().success();
            assert!(ok, "chown {} to nobody", dir.display());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pg = Postgres { dir, bin, port, as_nobody };
        let data = pg.dir.join("data");
        let out = pg.command("initdb").arg("-D").arg(&data).args(["-U", "racewatch", "-A", "trust"]).output().unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={} -c max_connections=50",
            pg.dir.display()
        );
        let out = pg
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(pg.dir.join("log"))
            .args(["-w", "-o", &options, "start"])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default()
        );
        pg
    }

    /// A fresh database; its URL.
    fn database(&self, name: &str) -> String {
        let admin = format!("postgres://racewatch@127.0.0.1:{}/postgres", self.port);
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).expect("connect to the test server");
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
        client.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        format!("postgres://racewatch@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.command("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One scenario's store: its `--db` and a scratch directory for its logs.
struct Db {
    url: String,
    dir: PathBuf,
}

fn sqlite_db(name: &str) -> Db {
    let dir = common::scratch(&format!("triage-{name}"));
    Db { url: dir.join("races.db").display().to_string(), dir }
}

fn triage(db: &Db, args: &[&str]) -> Output {
    racewatch().arg("triage").arg("--db").arg(&db.url).args(args).current_dir(&db.dir).output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "racewatch triage failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn races(db: &Db) -> Vec<Value> {
    let out = ok(&triage(db, &["--format", "json"]));
    serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}")).as_array().unwrap().clone()
}

fn race<'a>(races: &'a [Value], key: &str) -> &'a Value {
    races.iter().find(|r| r["key"] == key).unwrap_or_else(|| panic!("no race {key} in {races:#?}"))
}

fn write(path: &Path, lines: &[String]) -> PathBuf {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
    path.to_path_buf()
}

fn src(race: u64) -> String {
    format!("{:016x}", 0xb000_0000_0000_0000u64 + race)
}

// ---- Scenarios (each runs on both stores) ----

/// The same logs twice count once; race_count lines raise a report's count (the larger wins); a race
/// is grouped by source_key over its race_keys; processes, hosts and versions are distinct counts.
fn idempotent_ingest(db: &Db) {
    let logs = db.dir.join("logs");
    std::fs::create_dir_all(logs.join("nested")).unwrap();
    write(
        &logs.join("a.log"),
        &[
            "program output that is not a report".to_string(),
            variant("web-1", 10, 1000, 1, "1.0", 1010),
            variant("web-1", 10, 1000, 2, "1.0", 1011),
            count_line("web-1", 10, 1000, 1, 7),
            count_line("web-1", 10, 1000, 1, 5),
        ],
    );
    write(
        &logs.join("nested/b.log"),
        &[variant("web-2", 10, 2000, 1, "1.1", 2010), count_line("web-2", 10, 2000, 1, 3)],
    );
    for _ in 0..2 {
        let out = triage(db, &[logs.to_str().unwrap()]);
        ok(&out);
    }
    let second = String::from_utf8_lossy(&triage(db, &[logs.to_str().unwrap()]).stderr).into_owned();
    assert!(second.contains("3 reports read from 2 inputs (0 new)"), "{second}");
    let all = races(db);
    assert_eq!(all.len(), 2, "{all:#?}");
    let r1 = race(&all, &src(1));
    assert_eq!(r1["occurrences"], 10, "7 (max of 1, 7, 5) + 3: {r1}");
    assert_eq!((r1["processes"].as_i64(), r1["hosts"].as_i64()), (Some(2), Some(2)));
    assert_eq!(r1["app_versions"].as_array().unwrap().len(), 2);
    assert_eq!((r1["first_seen"].as_i64(), r1["last_seen"].as_i64()), (Some(1010), Some(2010)));
    assert_eq!(all[0]["key"], src(1), "most frequent first");
    assert_eq!(race(&all, &src(2))["occurrences"], 1);
    // A second build of race 1 (another race_key, the same source_key) is the same race.
    let mut rebuilt: Value = serde_json::from_str(&variant("web-3", 11, 3000, 1, "1.2", 3000)).unwrap();
    rebuilt["race_key"] = "c000000000000001".into();
    write(&db.dir.join("c.log"), &[rebuilt.to_string()]);
    ok(&triage(db, &["c.log"]));
    let all = races(db);
    let r1 = race(&all, &src(1));
    assert_eq!(r1["occurrences"], 11);
    assert_eq!(r1["race_keys"].as_array().unwrap().len(), 2, "{r1}");
    // gzip and stdin.
    let gz = db.dir.join("d.log.gz");
    let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, (variant("web-4", 12, 4000, 2, "1.2", 4000) + "\n").as_bytes()).unwrap();
    enc.finish().unwrap();
    ok(&triage(db, &["d.log.gz"]));
    let mut child = racewatch()
        .args(["triage", "--db", &db.url, "-"])
        .current_dir(&db.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        (variant("web-5", 13, 5000, 2, "1.2", 5000) + "\n").as_bytes(),
    )
    .unwrap();
    ok(&child.wait_with_output().unwrap());
    assert_eq!(race(&races(db), &src(2))["occurrences"], 3);
}

/// Four `racewatch triage` processes ingest overlapping log sets into one store at once: every report
/// is stored exactly once with its largest count.
fn parallel_ingesters(db: &Db) {
    let logs = db.dir.join("par");
    std::fs::create_dir_all(&logs).unwrap();
    // 8 files of 40 processes x 2 races; race r of process p has count p % 5 + 1.
    let mut files = Vec::new();
    for f in 0..8u64 {
        let mut lines = Vec::new();
        for p in 0..40u64 {
            let pid = f * 100 + p;
            for r in [1 + p % 6, 7 + f % 3] {
                lines.push(variant(&format!("h{}", p % 3), pid, 10_000 + pid, r, "2.0", 10_000 + pid));
                lines.push(count_line(&format!("h{}", p % 3), pid, 10_000 + pid, r, p % 5 + 1));
            }
        }
        files.push(write(&logs.join(format!("f{f}.log")), &lines));
    }
    // Ingester i reads files i, i+1, ..., i+3 (mod 8): every file by two ingesters, all at once.
    let children: Vec<_> = (0..4)
        .map(|i| {
            let mine: Vec<&PathBuf> = (0..4).map(|k| &files[(2 * i + k) % 8]).collect();
            racewatch()
                .args(["triage", "--quiet", "--db", &db.url])
                .args(mine)
                .current_dir(&db.dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        ok(&child.wait_with_output().unwrap());
    }
    let all = races(db);
    let mut expected = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for f in 0..8u64 {
        for p in 0..40u64 {
            for r in [1 + p % 6, 7 + f % 3] {
                let e = expected.entry(r).or_default();
                e.0 += p % 5 + 1;
                e.1 += 1;
            }
        }
    }
    assert_eq!(all.len(), expected.len(), "{all:#?}");
    for (r, (occurrences, processes)) in expected {
        let got = race(&all, &src(r));
        assert_eq!(got["occurrences"].as_u64(), Some(occurrences), "race {r}: {got}");
        assert_eq!(got["processes"].as_u64(), Some(processes), "race {r}: {got}");
    }
}

/// A truncated line, a report of an unknown schema, binary garbage and a line over 16 MiB are each
/// skipped with one message; the good lines around them are stored and nothing stored is lost.
fn bad_input(db: &Db) {
    write(&db.dir.join("good.log"), &[variant("ok", 1, 1, 30, "3.0", 1)]);
    ok(&triage(db, &["good.log"]));
    let good = variant("ok", 2, 2, 31, "3.0", 2);
    let truncated = &good[..good.len() / 2];
    let mut future: Value = serde_json::from_str(&variant("ok", 3, 3, 32, "3.0", 3)).unwrap();
    future["schema"] = 2.into();
    // Well-formed JSON that reports nothing (no accesses), and a count beyond any real one.
    let empty = r#"{"kind":"data_race","schema":1}"#.to_string();
    let mut huge: Value = serde_json::from_str(&variant("ok", 4, 4, 33, "3.0", 4)).unwrap();
    huge["count"] = 1_000_000_000_000_000u64.into();
    let mut bytes = Vec::new();
    for line in [truncated.to_string(), future.to_string(), truncated.to_string(), empty, huge.to_string()] {
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(&[0x7f, b'E', b'L', b'F', 0, 0, 0xff, 0xfe, b'\n', 0x80, 0x81, b'\n']);
    bytes.extend(std::iter::repeat_n(b'x', (16 << 20) + 10));
    bytes.push(b'\n');
    bytes.extend_from_slice(good.as_bytes());
    bytes.extend_from_slice(b"\n{\"kind\":\"data_race\",\"schema\":1,\"acc"); // cut at the end of the file
    std::fs::write(db.dir.join("bad.log"), &bytes).unwrap();
    let out = triage(db, &["bad.log"]);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = stderr.lines().collect();
    let one = |needle: &str| {
        let n = lines.iter().filter(|l| l.contains(needle)).count();
        assert_eq!(n, 1, "one message with '{needle}':\n{stderr}");
    };
    one("3 truncated JSON lines skipped");
    one("1 report of a JSON schema newer than 1 skipped");
    one("2 lines of binary data skipped");
    one("1 line longer than 16 MiB skipped");
    one("2 malformed JSON lines skipped");
    assert!(lines.len() <= 7, "one line per kind:\n{stderr}");
    let all = races(db);
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(all.iter().any(|r| r["key"] == src(30)) && all.iter().any(|r| r["key"] == src(31)));
    // Only garbage: still exit 0, skipped with a message.
    std::fs::write(db.dir.join("garbage.bin"), [0u8, 1, 2, 0xff, b'\n', 0xfe]).unwrap();
    let out = triage(db, &["garbage.bin"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("binary data skipped"));
    // A missing input: one line, status 2, nothing read.
    let out = triage(db, &["good.log", "missing.log"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("missing.log: no such file or directory"), "{stderr}");
}

/// Statuses (known, suppressed, fixed with regressions), show by prefix, SARIF read by serde-sarif,
/// and the suppressions file.
fn views(db: &Db) {
    let mut lines = vec![];
    for (pid, race, version, time) in
        [(1, 40, "1.0", 100), (2, 40, "1.0", 110), (3, 41, "1.0", 120), (4, 42, "1.0", 130), (5, 43, "1.0", 140)]
    {
        lines.push(variant("v", pid, pid, race, version, time));
    }
    lines.push(variant("v", 6, 6, 0, "1.0", 150)); // the real race, real keys and sides
    write(&db.dir.join("v.log"), &lines);
    ok(&triage(db, &["v.log"]));
    ok(&triage(db, &["mark", &src(41), "known"]));
    ok(&triage(db, &["mark", &format!("{:016x}", 0xa000_0000_0000_0000u64 + 42), "suppressed"])); // by race_key
    ok(&triage(db, &["mark", &src(43), "fixed", "--in", "2.0"]));
    ok(&triage(db, &["mark", &src(40), "fixed", "--in", "2.0"]));
    // Version 2.0 appears (race 42 only), then 2.1 with race 40 again: 40 regressed, 43 stays fixed.
    write(&db.dir.join("w.log"), &[variant("v", 7, 7, 42, "2.0", 200), variant("v", 8, 8, 40, "2.1", 300)]);
    ok(&triage(db, &["w.log"]));
    let all = races(db);
    assert_eq!(race(&all, &src(41))["status"], "known");
    assert_eq!(race(&all, &src(42))["status"], "suppressed");
    assert_eq!(race(&all, &src(43))["status"], "fixed");
    let r40 = race(&all, &src(40));
    assert_eq!((r40["status"].as_str(), r40["regressed"].as_bool()), (Some("new"), Some(true)), "{r40}");
    assert!(r40["note"].as_str().unwrap().contains("seen again in 2.1"), "{r40}");
    let text = ok(&triage(db, &[]));
    assert!(text.lines().next().unwrap().starts_with("KEY"), "{text}");
    assert!(text.contains("regressed"), "{text}");
    // The real race: its sides name racy_counter's bump.
    let real_key = report_line(&real().json)["source_key"].as_str().unwrap().to_string();
    let real_race = race(&all, &real_key);
    assert!(real_race["sides"][0]["function"].as_str().unwrap().contains("bump"), "{real_race}");
    assert_eq!(real_race["sides"][0]["line"], 14, "{real_race}");
    let show = ok(&triage(db, &["show", &real_key[..10]]));
    assert!(show.contains("racy_counter.rs:14") && show.contains("First access:"), "{show}");
    let out = triage(db, &["show", "ffffffff"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no race with key ffffffff"));
    let out = triage(db, &["show", "b"]);
    assert_eq!(out.status.code(), Some(2), "b is a prefix of several keys");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ambiguous"));

    // SARIF 2.1.0, read by an existing consumer.
    let sarif_text = ok(&triage(db, &["--format", "sarif"]));
    let raw: Value = serde_json::from_str(&sarif_text).unwrap();
    assert_eq!(raw["version"], "2.1.0");
    assert!(raw["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let sarif: serde_sarif::sarif::Sarif = serde_json::from_str(&sarif_text).expect("serde-sarif reads the log");
    let run = &sarif.runs[0];
    assert_eq!(run.tool.driver.name, "racewatch");
    let results = run.results.as_ref().unwrap();
    assert_eq!(results.len(), all.len());
    let fingerprints: Vec<String> =
        results.iter().filter_map(|r| r.partial_fingerprints.as_ref()?.get("racewatchSourceKey/v1").cloned()).collect();
    assert!(fingerprints.contains(&real_key), "{fingerprints:?}");
    let real_result = &raw["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["partialFingerprints"]["racewatchSourceKey/v1"] == real_key.as_str())
        .unwrap()
        .clone();
    assert_eq!(real_result["ruleId"], "racewatch/data-race");
    assert_eq!(real_result["level"], "warning");
    let loc = &real_result["locations"][0]["physicalLocation"];
    assert!(loc["artifactLocation"]["uri"].as_str().unwrap().ends_with("racy_counter.rs"), "{loc}");
    assert_eq!(loc["region"]["startLine"], 14);

    // Suppressions: races 41 (known) and 42 (suppressed) only.
    let supp = ok(&triage(db, &["--format", "suppressions"]));
    assert!(supp.contains(&format!("source_key:{}", src(41))) && supp.contains(&format!("source_key:{}", src(42))));
    assert!(supp.contains(&format!("race_key:{:016x}", 0xa000_0000_0000_0000u64 + 41)), "{supp}");
    assert!(!supp.contains(&src(40)) && !supp.contains(&src(43)), "{supp}");
    let pc = report_line(&real().json)["accesses"][0]["stack"][0]["build_id"].as_str().unwrap().to_string();
    assert!(supp.contains(&format!("pc:{pc}+0x")), "pc lines name the access frames' build-id: {supp}");
}

/// A text report and a `symbolize=0` report (symbolized here, offline) of the same race are one race
/// with the JSON report.
fn text_and_offline_symbolization(db: &Db) {
    let real = real();
    std::fs::write(db.dir.join("json.log"), &real.json).unwrap();
    std::fs::write(db.dir.join("text.log"), &real.text).unwrap();
    std::fs::write(db.dir.join("raw.log"), &real.raw).unwrap();
    let raw = report_line(&real.raw);
    assert_eq!(raw["source_key"], Value::Null, "symbolize=0 reports have no source_key: {raw}");
    let out = triage(db, &["json.log", "text.log", "raw.log"]);
    ok(&out);
    let all = races(db);
    let key = report_line(&real.json)["source_key"].as_str().unwrap().to_string();
    assert_eq!(all.len(), 1, "one race: {all:#?}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(all[0]["key"], key);
    assert!(all[0]["processes"].as_i64().unwrap() >= 2);
    // The offline result is cached in the store: a second ingest of the same PCs reads no DWARF.
    let mut again = raw.clone();
    again["pid"] = 999_999.into();
    for access in again["accesses"].as_array_mut().unwrap() {
        for frame in access["stack"].as_array_mut().unwrap() {
            frame["module"] = "/nonexistent/racy_counter".into();
        }
    }
    write(&db.dir.join("again.log"), &[again.to_string()]);
    ok(&triage(db, &["again.log"]));
    let all = races(db);
    assert_eq!(all.len(), 1, "the cached symbols named the report: {all:#?}");
}

// ---- A fleet, end to end ----

/// The racy program of the fleet: two threads bump one counter without a lock, in `bump`. `{pad}`
/// moves every line (the rebuild).
const FLEET_SRC: &str = r#"{pad}use std::time::{Duration, Instant};
static mut COUNTER: u64 = 0;
#[inline(never)]
fn bump() {
    // SAFETY: none: the race is the point.
    unsafe {
        let seen = std::ptr::read_volatile(&raw const COUNTER);
        std::ptr::write_volatile(&raw mut COUNTER, seen + 1);
    }
}
fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let spin = move || while Instant::now() < deadline { for _ in 0..1000 { bump(); } };
    let workers: Vec<_> = (0..2).map(|_| std::thread::spawn(spin)).collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
}
"#;

/// Two builds of the fleet program (the second with every line moved down by 3), each stripped of its
/// debug info, which goes to a directory of separate debug files: `(builds, debug dir, lines of bump's
/// body in either build)`.
fn fleet_builds() -> &'static (Vec<PathBuf>, PathBuf, Vec<u32>) {
    static BUILDS: OnceLock<(Vec<PathBuf>, PathBuf, Vec<u32>)> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let dir = common::scratch("triage-fleet-build");
        let debug = dir.join("debug");
        std::fs::create_dir_all(&debug).unwrap();
        let mut builds = Vec::new();
        for (version, pad) in [(1, ""), (2, "\n\n\n")] {
            let src = FLEET_SRC.replace("{pad}", pad);
            let name = format!("fleet_v{version}");
            // The source file keeps its path across the rebuild, as a checkout does.
            let bin = common::build_rust(&dir, "fleet", &src, &["-C", "debuginfo=line-tables-only"]);
            let debug_file = debug.join(format!("{name}.debug"));
            let objcopy = |args: &[&std::ffi::OsStr]| {
                let out = Command::new("objcopy").args(args).output().unwrap();
                assert!(out.status.success(), "objcopy {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            };
            objcopy(&["--only-keep-debug".as_ref(), bin.as_os_str(), debug_file.as_os_str()]);
            let stripped = dir.join(&name);
            objcopy(&["--strip-debug".as_ref(), bin.as_os_str(), stripped.as_os_str()]);
            builds.push(stripped);
        }
        let body: Vec<u32> = (7..=8).flat_map(|line| [line, line + 3]).collect();
        (builds, debug, body)
    })
}

/// Several processes of two builds on two hosts, in the production profile (`symbolize=0`, one log
/// file each in a directory), ingested with the debug files: one distinct race with the right counts,
/// symbolized to bump's lines, one source_key over both builds' race_keys, accepted as SARIF.
fn fleet(db: &Db) {
    let (builds, debug, body) = fleet_builds();
    let logs = db.dir.join("logs");
    // The last process symbolizes itself (`symbolize=1`) but its binary is stripped: its report names
    // functions only, and triage gives it the key the debug files give the others.
    let runs = [("web-1", 0, 0), ("web-1", 0, 0), ("web-2", 0, 0), ("web-2", 1, 0), ("web-3", 0, 1)];
    let reported = |before: usize| std::fs::read_dir(&logs).map_or(0, |d| d.count()) > before;
    for (host, build, symbolize) in runs {
        let log_path = format!("log_path={}/", logs.display());
        let (host_option, version) = (format!("host={host}"), format!("app_version={}", build + 1));
        let symbolize = format!("symbolize={symbolize}");
        let options =
            [&symbolize[..], "report_format=json", "sample_period_us=1000", &log_path, &host_option, &version];
        let before = std::fs::read_dir(&logs).map_or(0, |d| d.count());
        common::retry_for(std::time::Duration::from_secs(40), || {
            run_under(&options, &builds[build], &["2"]);
            Ok(reported(before).then_some(()))
        })
        .unwrap_or_else(|why| panic!("{host} build {build}: {why}"));
    }
    // What the logs say: per process and race_key, the largest count.
    let mut counts = std::collections::HashMap::new();
    for file in std::fs::read_dir(&logs).unwrap().flatten() {
        // The runtime's own messages (`racewatch: …`) share the file: only the JSON lines count.
        for line in std::fs::read_to_string(file.path()).unwrap().lines().filter(|l| l.starts_with('{')) {
            let v: Value = serde_json::from_str(line).unwrap();
            let key = (file.file_name(), v["race_key"].as_str().unwrap().to_string());
            let count = counts.entry(key).or_insert(0);
            *count = v["count"].as_i64().unwrap().max(*count);
        }
    }
    let occurrences: i64 = counts.values().sum();
    // First without the debug files (the stripped binaries name functions only), then with them: the
    // store takes what the debug info says (one race, at bump's lines), not what it had.
    ok(&triage(db, &["-q", &logs.display().to_string()]));
    let debug_dir = debug.display().to_string();
    ok(&triage(db, &["-q", "--debug-dir", &debug_dir, &logs.display().to_string()]));
    let all = races(db);
    assert_eq!(all.len(), 1, "one distinct race: {all:#?}");
    let race = &all[0];
    assert_eq!(race["processes"], 5, "{race:#}");
    assert_eq!((&race["hosts"], &race["binaries"]), (&json!(3), &json!(2)), "{race:#}");
    assert_eq!(race["app_versions"].as_array().unwrap().len(), 2, "{race:#}");
    assert_eq!(race["occurrences"], occurrences, "{race:#}");
    let source_key = race["source_key"].as_str().expect("a source_key from the debug files");
    // The race_keys of both builds (different PCs) fall under the one source_key.
    let pcs: std::collections::HashSet<String> = race["race_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["pcs"][0].as_str().unwrap().split('+').next().unwrap().to_string())
        .collect();
    assert_eq!(pcs.len(), 2, "both builds' race_keys: {race:#}");
    for side in race["sides"].as_array().unwrap() {
        assert!(side["file"].as_str().unwrap().ends_with("fleet.rs"), "{race:#}");
        assert!(body.contains(&(side["line"].as_u64().unwrap() as u32)), "bump's body: {race:#}");
        assert!(side["function"].as_str().unwrap().ends_with("bump"), "{race:#}");
    }
    // Its stacks as the runtime would have cut them: from the access to the thread's closure; the memory
    // named from the debug file's symbol table (the process only knew the module and the offset).
    let shown = ok(&triage(db, &["show", source_key]));
    assert!(shown.contains(" fleet::bump ") && !shown.contains("thread_start"), "{shown}");
    assert!(shown.contains("  location: global 'fleet::COUNTER' of size 8 (fleet_v"), "{shown}");
    assert_eq!(race["location"]["kind"], "global", "{race:#}");
    let sarif_text = ok(&triage(db, &["--format", "sarif"]));
    let sarif: serde_sarif::sarif::Sarif = serde_json::from_str(&sarif_text).expect("serde-sarif reads the log");
    let results = sarif.runs[0].results.as_ref().unwrap();
    assert_eq!(results.len(), 1);
    let fingerprint = results[0].partial_fingerprints.as_ref().and_then(|f| f.get("racewatchSourceKey/v1").cloned());
    assert_eq!(fingerprint.as_deref(), Some(source_key));
    // Relative to the checkout the binaries were built from, as code scanning places them.
    let root = builds[0].parent().unwrap().display().to_string();
    let sarif: Value = serde_json::from_str(&ok(&triage(db, &["--format", "sarif", "--source-root", &root]))).unwrap();
    let uri = &sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"];
    assert_eq!(uri, "fleet.rs", "{sarif:#}");
}

/// A scenario run against one store.
type Scenario = fn(&Db);

fn scenarios() -> Vec<(&'static str, Scenario)> {
    vec![
        ("idempotent", idempotent_ingest),
        ("parallel", parallel_ingesters),
        ("bad_input", bad_input),
        ("views", views),
        ("offline", text_and_offline_symbolization),
        ("fleet", fleet),
    ]
}

fn sqlite_scenario(name: &str) {
    let (_, f) = scenarios().into_iter().find(|(n, _)| *n == name).unwrap();
    f(&sqlite_db(name));
}

#[test]
fn sqlite_idempotent_ingest() {
    sqlite_scenario("idempotent");
}

#[test]
fn sqlite_parallel_ingesters() {
    sqlite_scenario("parallel");
}

#[test]
fn sqlite_bad_input() {
    sqlite_scenario("bad_input");
}

#[test]
fn sqlite_views() {
    sqlite_scenario("views");
}

#[test]
fn sqlite_text_and_offline_symbolization() {
    sqlite_scenario("offline");
}

#[test]
fn sqlite_fleet() {
    sqlite_scenario("fleet");
}

/// The same scenarios on one PostgreSQL server (a database each), stopped at the end even when one fails.
#[test]
fn postgres_scenarios() {
    real();
    let pg = Postgres::start();
    for (name, f) in scenarios() {
        let dir = common::scratch(&format!("triage-pg-{name}"));
        f(&Db { url: pg.database(name), dir });
    }
    // An unreachable server: one line, status 2.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let db = Db { url: format!("postgres://racewatch@127.0.0.1:{port}/x"), dir: common::scratch("triage-pg-down") };
    let out = triage(&db, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot connect to postgres://racewatch@127.0.0.1"), "{stderr}");
}

/// A store of an older schema (version 0: a meta table and nothing else) is migrated; a newer one is
/// refused with one line.
#[test]
fn sqlite_schema_migrates_forward_and_refuses_newer() {
    let db = sqlite_db("migrate");
    {
        let conn = rusqlite::Connection::open(&db.url).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '0');",
        )
        .unwrap();
    }
    write(&db.dir.join("a.log"), &[variant("m", 1, 1, 50, "1", 1)]);
    ok(&triage(&db, &["a.log"]));
    let conn = rusqlite::Connection::open(&db.url).unwrap();
    let version: String =
        conn.query_row("SELECT value FROM meta WHERE name = 'schema_version'", [], |r| r.get(0)).unwrap();
    assert_eq!(version, "2");
    let n: i64 = conn.query_row("SELECT count(*) FROM reports", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
    // Version 2 added what the memory is to each race.
    let located: i64 = conn.query_row("SELECT count(location) FROM races", [], |r| r.get(0)).unwrap();
    assert_eq!(located, 1);
    conn.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'", []).unwrap();
    drop(conn);
    let out = triage(&db, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("schema version 99, newer than"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // Not a database, and a directory that does not exist: one line each.
    std::fs::write(db.dir.join("junk.db"), vec![0x55u8; 8192]).unwrap();
    for bad in [db.dir.join("junk.db"), db.dir.join("no/such/dir/x.db")] {
        let out = racewatch().args(["triage", "--db"]).arg(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("racewatch triage: cannot open the store"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[test]
fn help_and_bad_arguments() {
    let out = racewatch().args(["triage", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && help.contains("--db") && help.contains("show") && help.contains("mark"), "{help}");
    let out = racewatch().args(["triage", "--format", "yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
