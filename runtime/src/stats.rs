//! Process-wide counters, printed at exit with `stats=1`. Relaxed atomics:
//! safe to bump from signal handlers.

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
    SamplesNoAccess: "samples with no memory access",
    SamplesBusy: "samples with every watchpoint busy",
    WatchesArmed: "watches armed",
    Traps: "watchpoint traps",
    Races: "races",
    ReportsDropped: "reports dropped",
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

/// Current value of a counter.
pub fn get(counter: Counter) -> u64 {
    VALUES[counter as usize].load(Ordering::Relaxed)
}

/// The `stats=1` block printed at exit, one `racewatch: stats: <label>: <n>` line each.
pub fn render() -> String {
    LABELS
        .iter()
        .zip(VALUES.iter())
        .map(|(label, value)| format!("racewatch: stats: {label}: {}\n", value.load(Ordering::Relaxed)))
        .collect()
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
}
