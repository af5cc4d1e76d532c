//! Process-wide counters, printed at exit with `stats=1`. Relaxed atomics:
//! safe to bump from signal handlers.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident: $label:literal,)*) => {
        /// One counter per event the runtime counts.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Counter { $($name,)* }

        const LABELS: &[&str] = &[$($label,)*];
    };
}

counters! {
    ModulesIndexed: "modules indexed",
    CoveredFunctions: "covered functions",
    AtomicPcs: "atomic PCs",
    Samples: "samples",
    SamplesUncovered: "samples in uncovered code",
    SamplesNoAccess: "samples with no memory access within reach",
    SamplesOwnStack: "samples with only own-stack accesses within reach",
    SamplesUnemulated: "samples stopped at an instruction not emulated",
    SamplesAddressUnknown: "samples with an access at an unknown address",
    SamplesLeftCovered: "samples whose path left covered code",
    SamplesMemoryFunction: "samples whose path reached a call to a libc memory or string function",
    SamplesStringInstruction: "samples whose path reached a REP string instruction",
    SamplesInMemoryFunction: "samples inside libc's memcpy/memmove/memset called from covered code",
    SamplesBackedOff: "samples declined by the cold-code bias (PC watched often)",
    SamplesAlone: "samples declined while no other thread ran (nobody to race with)",
    SamplesPrivate: "samples declined in memory only their own thread was seen in",
    SamplesSuppressed: "samples declined at a PC of a suppressed race (pc: suppressions)",
    SamplesBusy: "samples with every watchpoint busy",
    BoostSwitches: "boost timer switched on or off",
    AlonePauses: "sampling paused while one thread ran alone",
    PrivatePauses: "sampling paused after a run of samples in memory only their own thread was seen in",
    AimsArmed: "code breakpoints aimed at accesses of covered code",
    AimHits: "code breakpoints hit (samples taken there)",
    WatchesArmed: "watches armed",
    WindowsSlept: "watch windows slept (a thread that blocked since its previous one)",
    Traps: "watchpoint traps",
    TrapsInMemoryFunction: "traps judged inside a libc memory or string function",
    Races: "race events (before the reporter's review)",
    RacesRepeated: "races at already reported locations (not printed)",
    ReportsPrinted: "reports printed",
    RacesSuppressed: "races suppressed",
    ModuleFilesRead: "module files read for symbols or debug info",
    ReviewedNotRaces: "pairs found atomic on review (inline-assembly rules, both tagged)",
    FenceLabelsPlain: "tagged accesses judged plain (a compiler-only fence's label)",
    VolatilePairs: "pairs of volatile accesses in dependencies (racing by design: not reported)",
    ReportsDropped: "reports dropped",
    ReporterStarts: "reporter thread starts",
    ReporterStartsFromSignals: "reporter thread starts from a sampling signal",
    ReporterStartsDeferred: "reporter starts deferred (the sampled thread was not at a spawn point, or the ids were changing)",
    ReporterRetired: "reporter thread ends after a second without work",
    OutputDropped: "output not written",
    MemoryWaits: "allocations that waited for memory",
    HeapBlocksLeaked: "heap blocks freed by a nested call (never reused)",
    SkippedForStack: "signals skipped for lack of stack",
    HostStackBytes: "max handler bytes on the program's stack",
    RuntimeStackBytes: "max bytes used of a runtime stack",
    SampleNs: "ns in sample handlers (with windows)",
    WatchNs: "ns in armed watch windows",
    ArmNs: "ns arming and disarming watchpoints",
}

const COUNT: usize = LABELS.len();
static VALUES: [AtomicU64; COUNT] = [const { AtomicU64::new(0) }; COUNT];

/// Adds `n` to a counter. Async-signal-safe.
pub fn add(counter: Counter, n: u64) {
    VALUES[counter as usize].fetch_add(n, Ordering::Relaxed);
}

/// Adds one to a counter. Async-signal-safe.
pub fn bump(counter: Counter) {
    add(counter, 1);
}

/// Sets every counter to zero (a forked child starts its own count).
pub fn reset() {
    for value in &VALUES {
        value.store(0, Ordering::Relaxed);
    }
}

/// Current value of a counter.
pub fn get(counter: Counter) -> u64 {
    VALUES[counter as usize].load(Ordering::Relaxed)
}

/// The `stats=1` block printed at exit, one `racewatch: stats: <label>: <n>` line each, then the mean cost
/// of one sample (handler time outside watch windows) and of one armed watch window, in ns.
pub fn render() -> String {
    let mut out = String::new();
    let _ = render_into(&mut out);
    out
}

/// [`render`] into any writer; with a fixed buffer it does not allocate (a fatal-signal handler).
pub fn render_into(out: &mut impl fmt::Write) -> fmt::Result {
    for (label, value) in LABELS.iter().zip(VALUES.iter()) {
        writeln!(out, "racewatch: stats: {label}: {}", value.load(Ordering::Relaxed))?;
    }
    let covered_samples = get(Counter::Samples)
        .saturating_sub(get(Counter::SamplesUncovered))
        .saturating_sub(get(Counter::SamplesBackedOff))
        .saturating_sub(get(Counter::SamplesPrivate));
    let armed = get(Counter::WatchesArmed);
    let yield_pct = if covered_samples == 0 { 0.0 } else { 100.0 * armed as f64 / covered_samples as f64 };
    writeln!(
        out,
        "racewatch: stats: sample yield: {yield_pct:.1}% ({armed} watches armed of {covered_samples} samples in covered \
         code, not declined by the biases)"
    )?;
    let (per_sample, per_watch) = mean_costs();
    writeln!(out, "racewatch: stats: mean ns per sample: {per_sample}")?;
    writeln!(out, "racewatch: stats: mean ns per armed watch: {per_watch}")
}

/// Mean ns per kept sample spent in the handler outside watch windows, and mean ns per armed watch window
/// (arm, stall, disarm, judge); 0 when nothing was counted.
pub fn mean_costs() -> (u64, u64) {
    means(get(Counter::Samples), get(Counter::SampleNs), get(Counter::WatchesArmed), get(Counter::WatchNs))
}

fn means(samples: u64, sample_ns: u64, watches: u64, watch_ns: u64) -> (u64, u64) {
    let per_sample = sample_ns.saturating_sub(watch_ns).checked_div(samples).unwrap_or(0);
    (per_sample, watch_ns.checked_div(watches).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders() {
        add(Counter::Traps, 3);
        bump(Counter::Traps);
        assert!(get(Counter::Traps) >= 4);
        assert!(render().contains("racewatch: stats: watchpoint traps: "));
    }

    #[test]
    fn mean_costs_exclude_windows_from_the_sample_cost() {
        // 1000 samples at 1.5 us each, 10 of which armed a 200 us window.
        assert_eq!(means(1000, 1000 * 1_500 + 10 * 200_000, 10, 10 * 200_000), (1_500, 200_000));
        assert_eq!(means(0, 0, 0, 0), (0, 0));
        assert_eq!(means(5, 10, 0, 0), (2, 0));
        assert!(render().contains("racewatch: stats: mean ns per armed watch: "));
    }
}
