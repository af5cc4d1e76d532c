//! `RACEWATCH_OPTIONS` parsing (sanitizer convention: `key=value:key=value`).
//!
//! Unknown keys and bad values produce one warning each and keep the default;
//! out-of-range numbers are clamped with a warning. [`get`] returns the options
//! the constructor installed, or the defaults before that.

use std::collections::HashSet;
use std::sync::OnceLock;

/// Default CPU time between two samples of a thread, in microseconds: ten samples per CPU-second. With the
/// cold-code bias most samples of hot code are declined for a few microseconds each, and
/// bench/overhead.sh measures the rate within 1% on this machine kind (see the README).
pub const DEFAULT_SAMPLE_PERIOD_US: u64 = 100_000;
/// Default watch window, in microseconds.
pub const DEFAULT_DELAY_US: u64 = 100;
/// Default number of hardware watchpoints used (x86 has 4 debug registers).
pub const DEFAULT_WATCHPOINTS: u32 = 1;
/// Default exit status when `halt_on_error` stops the program, or `fail_on_race` fails it.
pub const DEFAULT_EXITCODE: i32 = 66;

const SAMPLE_PERIOD_RANGE: (u64, u64) = (1, 60_000_000);
const DELAY_RANGE: (u64, u64) = (1, 1_000_000);
const WATCHPOINTS_RANGE: (u32, u32) = (1, 4);
const VERBOSITY_RANGE: (u32, u32) = (0, 3);

/// How reports are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
}

/// Every runtime option, see DESIGN.md "Options contract".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub sample_period_us: u64,
    pub delay_us: u64,
    /// 1..=4.
    pub watchpoints: u32,
    pub report_atomic_races: bool,
    /// Report a race between two volatile accesses (`ptr::read_volatile`/`write_volatile`) made by
    /// dependencies, which mark races they make on purpose this way.
    pub report_volatile_races: bool,
    pub log_path: Option<String>,
    pub halt_on_error: bool,
    /// Exit status of `halt_on_error`, and of `fail_on_race`.
    pub exitcode: i32,
    /// A process that reported a race and ends with status 0 (`main` returns 0, or `exit(0)`) exits with
    /// `exitcode` instead. Off for a bare `LD_PRELOAD`; `racewatch run` turns it on.
    pub fail_on_race: bool,
    /// A process that reported races writes `<races_path>.<pid>` at exit: its executable and one line per
    /// distinct race (the side channel of `racewatch cargo`'s summary).
    pub races_path: Option<String>,
    pub report_format: ReportFormat,
    pub suppressions: Option<String>,
    pub verbosity: u32,
    pub stats: bool,
    pub seed: Option<u64>,
    /// Watch a PC less often the more often it was watched (cold code gets the watches).
    pub cold_bias: bool,
    /// Watch even while no other program thread runs (by default such a sample declines: nobody can race).
    pub watch_alone: bool,
    /// Aim code breakpoints at covered code with the samples of signals that land where no watch is
    /// possible (only at the test and debug rates, with at least two watchpoints; `aim=0`: never).
    pub aim: bool,
    /// Substrings of source paths or function names whose accesses are atomic (inline-assembly atomics).
    pub atomic_code: Vec<String>,
    /// Text reports keep every frame and full names (no folding of standard-library frames).
    pub full_stacks: bool,
    /// Write a run-time coverage profile to `<coverage_path>.<pid>` at exit.
    pub coverage_path: Option<String>,
    /// Read modules' ELF and debug files to name frames. Off (`symbolize=0`, the production profile):
    /// frames are module build-id + offset, for `racewatch triage` to symbolize offline.
    pub symbolize: bool,
    /// The host name reports carry (default: the kernel's node name).
    pub host: Option<String>,
    /// The program's version as the fleet names it (default: the executable's build-id, 12 digits).
    pub app_version: Option<String>,
}

impl Options {
    /// The defaults.
    pub const DEFAULT: Options = Options {
        sample_period_us: DEFAULT_SAMPLE_PERIOD_US,
        delay_us: DEFAULT_DELAY_US,
        watchpoints: DEFAULT_WATCHPOINTS,
        report_atomic_races: true,
        report_volatile_races: false,
        log_path: None,
        halt_on_error: false,
        exitcode: DEFAULT_EXITCODE,
        fail_on_race: false,
        races_path: None,
        report_format: ReportFormat::Text,
        suppressions: None,
        verbosity: 0,
        stats: false,
        seed: None,
        cold_bias: true,
        watch_alone: false,
        aim: true,
        atomic_code: Vec::new(),
        full_stacks: false,
        coverage_path: None,
        symbolize: true,
        host: None,
        app_version: None,
    };
}

impl Default for Options {
    fn default() -> Self {
        Options::DEFAULT
    }
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected 0/1/true/false".into()),
    }
}

fn parse_u64(v: &str) -> Result<u64, String> {
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| "expected an unsigned integer".into())
}

/// Parses `v` and clamps it into `lo..=hi`, warning when it had to.
fn parse_clamped<T>(key: &str, v: &str, (lo, hi): (T, T), warnings: &mut Vec<String>) -> Result<T, String>
where
    T: TryFrom<u64> + Into<u64> + Copy + std::fmt::Display,
{
    let n = parse_u64(v)?;
    let clamped = n.clamp(lo.into(), hi.into());
    if clamped != n {
        warnings.push(format!("{key}={v} is out of range {lo}..={hi}; using {clamped}"));
    }
    T::try_from(clamped).map_err(|_| "out of range".into())
}

fn non_empty(v: &str) -> Result<Option<String>, String> {
    if v.is_empty() {
        Err("expected a path".into())
    } else {
        Ok(Some(v.to_string()))
    }
}

/// Applies one `key=value`; `Err` is the reason the value is bad.
fn apply(o: &mut Options, key: &str, v: &str, warnings: &mut Vec<String>) -> Option<Result<(), String>> {
    let result = match key {
        "sample_period_us" => parse_clamped(key, v, SAMPLE_PERIOD_RANGE, warnings).map(|n| o.sample_period_us = n),
        "delay_us" => parse_clamped(key, v, DELAY_RANGE, warnings).map(|n| o.delay_us = n),
        "watchpoints" => parse_clamped(key, v, WATCHPOINTS_RANGE, warnings).map(|n| o.watchpoints = n),
        "verbosity" => parse_clamped(key, v, VERBOSITY_RANGE, warnings).map(|n| o.verbosity = n),
        "report_atomic_races" => parse_bool(v).map(|b| o.report_atomic_races = b),
        "report_volatile_races" => parse_bool(v).map(|b| o.report_volatile_races = b),
        "halt_on_error" => parse_bool(v).map(|b| o.halt_on_error = b),
        "fail_on_race" => parse_bool(v).map(|b| o.fail_on_race = b),
        "races_path" => non_empty(v).map(|p| o.races_path = p),
        "stats" => parse_bool(v).map(|b| o.stats = b),
        "log_path" => non_empty(v).map(|p| o.log_path = p),
        "coverage_path" => non_empty(v).map(|p| o.coverage_path = p),
        "suppressions" => non_empty(v).map(|p| o.suppressions = p),
        "exitcode" => match v.parse::<i32>() {
            Ok(n) if (0..=255).contains(&n) => {
                o.exitcode = n;
                Ok(())
            }
            Ok(_) => Err("exit status must be 0..=255".into()),
            Err(_) => Err("expected an integer".into()),
        },
        "report_format" => match v {
            "text" => Ok(ReportFormat::Text),
            "json" => Ok(ReportFormat::Json),
            _ => Err("expected text or json".into()),
        }
        .map(|f| o.report_format = f),
        "seed" => parse_u64(v).map(|n| o.seed = Some(n)),
        "cold_bias" => parse_bool(v).map(|b| o.cold_bias = b),
        "watch_alone" => parse_bool(v).map(|b| o.watch_alone = b),
        "aim" => parse_bool(v).map(|b| o.aim = b),
        "full_stacks" => parse_bool(v).map(|b| o.full_stacks = b),
        "symbolize" => parse_bool(v).map(|b| o.symbolize = b),
        "host" => non_empty(v).map(|h| o.host = h),
        "app_version" => non_empty(v).map(|h| o.app_version = h),
        "atomic_code" => {
            o.atomic_code = v.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_string).collect();
            Ok(())
        }
        _ => return None,
    };
    Some(result)
}

/// Parses an options string. Returns the options and one warning per bad
/// key or value (each distinct problem once), without the `racewatch: warning: ` prefix.
pub fn parse(s: &str) -> (Options, Vec<String>) {
    let mut options = Options::DEFAULT;
    let mut warnings = Vec::new();
    let mut seen = HashSet::new();
    for item in s.split(':').map(str::trim).filter(|item| !item.is_empty()) {
        let warning = match item.split_once('=') {
            None => Some(format!("ignoring option '{item}': expected key=value")),
            Some((key, value)) => match apply(&mut options, key, value, &mut warnings) {
                None => Some(format!("unknown option '{key}' ignored")),
                Some(Err(why)) => Some(format!("bad value '{value}' for option '{key}' ({why}); keeping the default")),
                Some(Ok(())) => None,
            },
        };
        if let Some(w) = warning {
            if seen.insert(w.clone()) {
                warnings.push(w);
            }
        }
    }
    (options, warnings)
}

static OPTIONS: OnceLock<Options> = OnceLock::new();

/// Installs the process's options (the constructor does this once); later calls are ignored.
pub fn install(options: Options) -> &'static Options {
    OPTIONS.get_or_init(|| options)
}

/// The installed options, or the defaults before the constructor ran. Lock-free.
pub fn get() -> &'static Options {
    static DEFAULT: Options = Options::DEFAULT;
    OPTIONS.get().unwrap_or(&DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let (o, w) = parse("");
        assert_eq!(o, Options::DEFAULT);
        assert!(w.is_empty());
        assert_eq!(get().watchpoints, 1);
        assert_eq!((o.sample_period_us, o.delay_us, o.exitcode, o.cold_bias), (100_000, 100, 66, true));
        // A bare LD_PRELOAD never changes the program's exit status.
        assert!(!o.fail_on_race && o.races_path.is_none());
    }

    #[test]
    fn every_key() {
        let (o, w) = parse(
            "sample_period_us=500:delay_us=50:watchpoints=4:report_atomic_races=0:log_path=/tmp/rw:\
             halt_on_error=1:exitcode=3:report_format=json:suppressions=/tmp/s:verbosity=1:stats=true:seed=0x2a:\
             cold_bias=0:atomic_code=vendor/lock.c,my_asm_:full_stacks=1:coverage_path=/tmp/cov:fail_on_race=1:\
             races_path=/tmp/races:symbolize=0:host=web-7:app_version=2.4.1:report_volatile_races=1",
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            o,
            Options {
                sample_period_us: 500,
                delay_us: 50,
                watchpoints: 4,
                report_atomic_races: false,
                report_volatile_races: true,
                log_path: Some("/tmp/rw".into()),
                halt_on_error: true,
                exitcode: 3,
                fail_on_race: true,
                races_path: Some("/tmp/races".into()),
                report_format: ReportFormat::Json,
                suppressions: Some("/tmp/s".into()),
                verbosity: 1,
                stats: true,
                seed: Some(42),
                cold_bias: false,
                watch_alone: false,
                aim: true,
                atomic_code: vec!["vendor/lock.c".into(), "my_asm_".into()],
                full_stacks: true,
                coverage_path: Some("/tmp/cov".into()),
                symbolize: false,
                host: Some("web-7".into()),
                app_version: Some("2.4.1".into()),
            }
        );
    }

    #[test]
    fn bad_input_warns_once_and_keeps_defaults() {
        let (o, w) = parse("bogus=1:verbosity=lots:bogus=1:stats=1:nokey:report_format=xml");
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(w[0].contains("unknown option 'bogus'"));
        assert!(w[1].contains("bad value 'lots' for option 'verbosity'"));
        assert!(w[2].contains("nokey"));
        assert!(w[3].contains("report_format"));
        assert_eq!(o.verbosity, 0);
        assert!(o.stats);
        assert_eq!(o.report_format, ReportFormat::Text);
    }

    #[test]
    fn out_of_range_clamps_or_keeps() {
        let (o, w) = parse("watchpoints=9:delay_us=0:exitcode=300:seed=-1");
        assert_eq!((o.watchpoints, o.delay_us), (4, 1));
        assert_eq!(o.exitcode, 66);
        assert_eq!(o.seed, None);
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(w[0].contains("watchpoints=9 is out of range 1..=4; using 4"));
    }
}
