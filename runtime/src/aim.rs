//! Aimed samples: a code breakpoint on an access of covered code, so that a sample lands there.
//!
//! A timer signal lands where the thread spends its CPU time; a program that spends nearly all of it
//! outside covered code (OpenMP's runtime spinning at barriers, uncovered libraries) gets few samples
//! where its races are, however often it is sampled. So a signal that lands where no watch is possible
//! may spend its sample on *aiming* instead: one hardware breakpoint (the last watchpoint slot, when
//! there are at least two) is moved onto an instruction of covered code that accesses memory through
//! something other than the stack — picked at random in a function where covered samples landed lately —
//! and the first thread to execute it traps *before* the access, with exact registers: that trap is
//! taken as a sample there (decoded, watched and judged as any other). An aim that is not hit within
//! [`TIMEOUT_NS`] is moved by the next unwatchable signal. Everything here is async-signal-safe.

use crate::decode;
use crate::registry;
use crate::stats::{self, Counter};
use crate::sys::signal::{PerfSignal, TRAP_PERF_FLAG_ASYNC};
use crate::watch::{self, OwnMemory};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// How long an aim waits for a thread to run its instruction before it may be moved.
pub const TIMEOUT_NS: u64 = 2_000_000;
/// Bytes into a function an aim may start looking (code beyond is reached only through earlier picks
/// finding nothing before it: the decode from the function's start is bounded).
const MAX_OFFSET: u64 = 16 * 1024;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Set while sampling is stopped or paused (see [`suspend`]).
static SUSPENDED: AtomicBool = AtomicBool::new(false);
/// The generation of the aim armed now (0: none).
static AIMED: AtomicU64 = AtomicU64::new(0);
static AIMED_AT_NS: AtomicU64 = AtomicU64::new(0);
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);
/// Held while a thread moves the aim.
static MOVING: AtomicBool = AtomicBool::new(false);
/// Entries of covered functions where samples landed lately (0: empty).
static RECENT: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];
static RECENT_NEXT: AtomicUsize = AtomicUsize::new(0);

/// Turns aiming on or off (on at the test and debug rates with at least two watchpoints).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// A sample landed in the covered function starting at `start`.
pub fn note_function(start: u64) {
    let at = RECENT_NEXT.load(Ordering::Relaxed) % RECENT.len();
    if RECENT.iter().any(|entry| entry.load(Ordering::Relaxed) == start) {
        return;
    }
    RECENT[at].store(start, Ordering::Relaxed);
    RECENT_NEXT.store(at + 1, Ordering::Relaxed);
}

/// An instruction to aim at, from `random`: in one of the recent functions, the first access through
/// something other than the stack at or after a random offset (or from the function's start).
fn pick(random: u64) -> Option<u64> {
    let start = RECENT[(random as usize) % RECENT.len()].load(Ordering::Relaxed);
    if start == 0 {
        return None;
    }
    let function = registry::with_index(|idx| idx.function_containing(start))?;
    let end = function.start + u64::from(function.size);
    let span = u64::from(function.size).clamp(1, MAX_OFFSET);
    let from = function.start + (random >> 8) % span;
    decode::shared_access_from(&OwnMemory, function.start, end, from)
        .or_else(|| decode::shared_access_from(&OwnMemory, function.start, end, function.start))
}

/// Called for a timer signal that landed where no watch is possible, with a sample to spend: aims
/// (or moves an aim older than [`TIMEOUT_NS`]). True when a breakpoint was armed.
pub fn aim(random: u64, now: u64) -> bool {
    if !active() {
        return false;
    }
    if AIMED.load(Ordering::Acquire) != 0 && now.saturating_sub(AIMED_AT_NS.load(Ordering::Relaxed)) < TIMEOUT_NS {
        return false;
    }
    if MOVING.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return false;
    }
    let armed = match pick(random) {
        Some(pc) => {
            // A trap of the old aim meanwhile finds it gone, and leaves the slot to us.
            let held = AIMED.swap(0, Ordering::AcqRel) != 0;
            let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
            let armed = watch::aim_at(pc, generation, held);
            if armed {
                AIMED_AT_NS.store(now, Ordering::Relaxed);
                AIMED.store(generation, Ordering::Release);
                stats::bump(Counter::AimsArmed);
            }
            armed
        }
        None => false,
    };
    MOVING.store(false, Ordering::Release);
    // Suspended meanwhile: the suspender may have looked before this aim was published.
    if armed && !active() {
        take_down();
    }
    armed
}

/// A code breakpoint's trap: true when this thread hit the aim armed now (it is disarmed, and the
/// caller takes a sample at the trap's registers); false for any other signal, and for a stale or late
/// trap of an aim (dropped).
pub fn hit(signal: &PerfSignal) -> bool {
    let Some(generation) = watch::aim_generation(signal.data) else { return false };
    if AIMED.compare_exchange(generation, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return false;
    }
    watch::release_aim();
    // Delivered late (SIGTRAP was blocked): the registers are not those at the instruction.
    if signal.flags & TRAP_PERF_FLAG_ASYNC != 0 {
        return false;
    }
    stats::bump(Counter::AimHits);
    true
}

/// Whether `sig_data` is a code breakpoint's.
pub fn owns(sig_data: u64) -> bool {
    watch::aim_generation(sig_data).is_some()
}

/// Takes the aim down (its slot is given back to the program): no thread traps on it afterwards.
/// Async-signal-safe.
pub fn take_down() {
    if AIMED.swap(0, Ordering::AcqRel) != 0 {
        watch::release_aim();
    }
}

/// Stops aiming and takes the aim down (`true`: sampling stops, or pauses for a tracer, who must see
/// no trap of racewatch's), or lets aiming go on (`false`). Async-signal-safe.
pub fn suspend(suspended: bool) {
    SUSPENDED.store(suspended, Ordering::SeqCst);
    if suspended {
        take_down();
    }
}

fn active() -> bool {
    ENABLED.load(Ordering::Relaxed) && !SUSPENDED.load(Ordering::SeqCst)
}

/// Forgets the aim without touching the breakpoint (a forked child has none of the parent's events).
pub fn reset() {
    AIMED.store(0, Ordering::Release);
    SUSPENDED.store(false, Ordering::Release);
    MOVING.store(false, Ordering::Release);
}
