//! The sampling signal: pick an access to watch.
//!
//! [`start`] opens one task-clock event firing every `sample_period_us /
//! THINNING` of a thread's CPU time and the watchpoints (inherited by every
//! thread created later), and installs the `SIGTRAP` handler. Each signal is
//! kept with probability `1 / THINNING` (a per-thread wyrand stream in a fixed
//! table of atomics): the mean period stays `sample_period_us`, but the gaps
//! are random, so samples do not lock onto loops.
//!
//! A kept sample in thread A at PC p is dropped when A is a runtime thread,
//! p is uncovered, every watchpoint is busy, no access is found at or shortly
//! after p, or the access is on A's own stack; otherwise [`watch::watch`]
//! watches it. An access that is a byte range — a REP string instruction, or a
//! call to one of libc's memory and string functions ([`crate::libcalls`]) — is
//! watched on one aligned 8-byte word of one of its ranges, picked at random
//! (the destination, written, or the source, read), clipped to the range so
//! that exact byte ranges still decide overlap. All of this runs in the signal
//! handler and is async-signal-safe.

use crate::decode::{Range, Reached};
use crate::event::{AccessRecord, Stack, MAX_FRAMES};
use crate::index::Access;
use crate::options::Options;
use crate::stats::{self, Counter};
use crate::sys::perf::{PerfFd, SampleTimer, SAMPLE_SIG_DATA};
use crate::sys::signal::{self, PerfSignal, Regs};
use crate::sys::thread;
use crate::watch::{self, OwnMemory, Watch};
use crate::{bias, decode, libcalls, profile, registry, stack};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// Timer signals per kept sample.
pub const THINNING: u64 = 4;
/// The x86-64 red zone below RSP that leaf code may use.
const RED_ZONE: u64 = 128;

/// The sampling timer's descriptor (-1: not open in this process).
static TIMER: AtomicI32 = AtomicI32::new(-1);
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Sample periods from which watch windows spin instead of sleeping: the production default (100 ms)
/// and the host-checking rate (1 ms) spin, so a busy-polling thread never shows a voluntary context
/// switch; the test profile (`racewatch cargo`, 250 µs) sleeps, so that on a machine busy with a test
/// suite the threads that may touch the watched memory run during the window.
const SPIN_FROM_PERIOD_US: u64 = 1000;
/// Whether windows sleep ([`SPIN_FROM_PERIOD_US`]).
static SLEEPY_WINDOWS: AtomicBool = AtomicBool::new(false);
static DELAY_US: AtomicU64 = AtomicU64::new(0);
static REPORT_ATOMIC_RACES: AtomicBool = AtomicBool::new(true);
static SEED: AtomicU64 = AtomicU64::new(0);
static COLD_BIAS: AtomicBool = AtomicBool::new(true);

fn timer() -> Option<SampleTimer> {
    let fd = TIMER.load(Ordering::Acquire);
    (fd >= 0).then(|| SampleTimer::from_fd(PerfFd::from_raw(fd)))
}

/// Starts the detector: opens the sampler and `options.watchpoints` watchpoints for the calling thread and
/// every thread it creates later (unless [`open_events`] did already), warms up the decoder, installs the
/// `SIGTRAP` handler, and enables sampling if the index already holds covered code (see [`refresh`]). Call
/// once, before the threads to be sampled are created. Errors (perf_event_open denied, no debug register,
/// no room for descriptors) leave the program untouched.
pub fn start(options: &Options) -> Result<(), String> {
    DELAY_US.store(options.delay_us, Ordering::Relaxed);
    SLEEPY_WINDOWS.store(options.sample_period_us < SPIN_FROM_PERIOD_US, Ordering::Relaxed);
    REPORT_ATOMIC_RACES.store(options.report_atomic_races, Ordering::Relaxed);
    SEED.store(options.seed.unwrap_or(0x9e37_79b9_7f4a_7c15), Ordering::Relaxed);
    COLD_BIAS.store(options.cold_bias, Ordering::Relaxed);
    open_events(options)?;
    decode::warm_up();
    libcalls::init();
    signal::install(claims, on_perf).map_err(|e| format!("cannot install the SIGTRAP handler: {e}"))?;
    refresh();
    Ok(())
}

/// Opens the detector's perf events (disabled) if they are not open yet: the sampling timer and the
/// watchpoints, inherited by every thread the calling thread creates from now on. Done early, before the
/// detector starts, when the program is about to lower its descriptor limit (see [`crate::sys::fd::set_floor`]).
pub fn open_events(options: &Options) -> Result<(), String> {
    if TIMER.load(Ordering::Acquire) >= 0 {
        return Ok(());
    }
    let period_ns = options.sample_period_us.saturating_mul(1000) / THINNING;
    let timer = SampleTimer::open(period_ns.max(1)).map_err(|e| match crate::sys::fd::no_room_message(&e) {
        Some(why) => why,
        None => format!("cannot open the sampling timer (perf_event_open: {e})"),
    })?;
    if let Err(err) = watch::init(options.watchpoints) {
        timer.fd().close();
        return Err(err);
    }
    TIMER.store(timer.fd().raw(), Ordering::Release);
    Ok(())
}

/// Enables sampling once the index holds covered code (call after publishing a new index); disables it
/// when the index became empty. No-op before [`start`].
pub fn refresh() {
    let Some(timer) = timer() else { return };
    let wanted = registry::with_index(|idx| idx.functions()) > 0 && !PAUSED.load(Ordering::Acquire);
    if wanted != ENABLED.load(Ordering::Acquire) {
        let result = if wanted { timer.enable() } else { timer.disable() };
        if result.is_ok() {
            ENABLED.store(wanted, Ordering::Release);
        }
    }
}

/// Set while sampling is paused (a tracer is attached).
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Pauses sampling (no new watch windows either) or lets it go on; true when that changed the state.
pub fn set_paused(paused: bool) -> bool {
    let changed = PAUSED.swap(paused, Ordering::AcqRel) != paused;
    if changed {
        refresh();
    }
    changed
}

/// Whether the sampling timer is enabled.
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// Stops sampling (e.g. at exit, before the reporter drains the queue).
pub fn stop() {
    if let Some(timer) = timer() {
        let _ = timer.disable();
        ENABLED.store(false, Ordering::Release);
    }
}

/// Closes the sampler's and the watchpoints' descriptors (detection is over in this process).
pub fn close() {
    stop();
    let fd = TIMER.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        PerfFd::from_raw(fd).close();
    }
    watch::close();
}

/// In a forked child: forgets the parent's events without touching them (the child's copies of their
/// descriptors are closed by the caller), so the child can start its own.
pub fn forget_after_fork() {
    TIMER.store(-1, Ordering::Release);
    PAUSED.store(false, Ordering::Release);
    ENABLED.store(false, Ordering::Release);
    watch::forget_after_fork();
}

/// Whether `sig_data` is one of the detector's events (a sample or one of its watchpoints).
fn claims(sig_data: u64) -> bool {
    sig_data == SAMPLE_SIG_DATA || watch::owns(sig_data)
}

fn on_perf(signal: &PerfSignal) {
    if signal.data == SAMPLE_SIG_DATA {
        on_sample(&signal.regs);
    } else {
        watch::on_trap(signal);
    }
}

/// Per-thread random streams, indexed by tid (threads that collide share a stream, harmlessly).
static RNG: [AtomicU64; 256] = [const { AtomicU64::new(0) }; 256];

/// A uniform random u64 from the calling thread's stream.
fn next_random(tid: i32, seed: u64) -> u64 {
    let cell = &RNG[tid as usize % RNG.len()];
    let mut state = cell.load(Ordering::Relaxed);
    if state == 0 {
        state = seed ^ (tid as u64).wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    let mut rng = fastrand::Rng::with_seed(state);
    let value = rng.u64(..);
    cell.store(rng.get_seed(), Ordering::Relaxed);
    value
}

fn on_sample(regs: &Regs) {
    let tid = thread::gettid();
    let random = next_random(tid, SEED.load(Ordering::Relaxed));
    if random % THINNING != 0 {
        return;
    }
    let start = thread::monotonic_ns();
    stats::bump(Counter::Samples);
    sample(regs, tid, random);
    stats::add(Counter::SampleNs, thread::monotonic_ns().saturating_sub(start));
}

/// A kept sample of thread `tid`: find its access and watch it.
fn sample(regs: &Regs, tid: i32, random: u64) {
    if thread::is_runtime_thread(tid) {
        return;
    }
    let Some(function) = registry::with_index(|idx| idx.function_containing(regs.rip)) else {
        stats::bump(Counter::SamplesUncovered);
        return;
    };
    profile::count(function.start, profile::Event::Sample);
    if !watch::any_free() {
        stats::bump(Counter::SamplesBusy);
        return;
    }
    // The frame-pointer walk only bounds the thread's own stack (its accesses are not watched).
    let mut pcs = [0u64; MAX_FRAMES];
    let walk = stack::walk_interrupted(regs, Some(function.start), regs.rip, &mut pcs);
    let own_stack = own_stack(regs, walk.top);
    let covered = |pc: u64| registry::with_index(|idx| idx.function_containing(pc).is_some());
    let bounds = decode::Bounds { own_stack, covered: &covered, library: &libcalls::function_at };
    let ahead = decode::reach_ahead(&OwnMemory, &watch::decoder_regs(regs), &bounds, decode::MAX_STEPS, decode::AHEAD);
    let found = match ahead.and_then(|ahead| least_watched(&ahead).ok_or(decode::Miss::NoAccess)) {
        Ok(found) => found,
        Err(miss) => {
            stats::bump(match miss {
                decode::Miss::OwnStack => Counter::SamplesOwnStack,
                decode::Miss::NoAccess => Counter::SamplesNoAccess,
                decode::Miss::Unemulated => Counter::SamplesUnemulated,
                decode::Miss::AddressUnknown => Counter::SamplesAddressUnknown,
                decode::Miss::LeftCovered => Counter::SamplesLeftCovered,
            });
            return;
        }
    };
    // What to watch: the access's record (its PC is where covered code makes it), the PC heading its stack
    // (a libc function's entry for a call to it) and how it was reached.
    let (access, frame_pc, path) = match found {
        Reached::Access(found) => {
            let class = registry::with_index(|idx| idx.classify(found.pc));
            if class == Access::Uncovered {
                stats::bump(Counter::SamplesLeftCovered);
                return;
            }
            let access = AccessRecord {
                tid,
                pc: found.pc,
                addr: found.addr,
                size: found.size,
                is_write: found.is_write,
                is_atomic: class == Access::Atomic || found.locked,
                locked: found.locked,
                // Unwound (CFI) only if the watch finds a race: most watches find none.
                stack: Stack::EMPTY,
            };
            (access, found.pc, found.path)
        }
        Reached::Ranges(found) => {
            stats::bump(match found.function {
                Some(_) => Counter::SamplesMemoryFunction,
                None => Counter::SamplesStringInstruction,
            });
            let class = registry::with_index(|idx| idx.classify(found.site));
            if class == Access::Uncovered {
                stats::bump(Counter::SamplesLeftCovered);
                return;
            }
            let (addr, size, is_write) = pick_word(found.ranges.as_slice(), next_random(tid, random));
            let access = AccessRecord {
                tid,
                // The call (or string instruction) in covered code: profiles, the cold-code bias and the
                // reporter key on it; the stack starts at the libc function.
                pc: found.site,
                addr,
                size,
                is_write,
                is_atomic: false,
                locked: false,
                stack: Stack::EMPTY,
            };
            (access, found.pc, found.path)
        }
    };
    if crate::suppressed_pcs::contains(access.pc) {
        stats::bump(Counter::SamplesSuppressed);
        return;
    }
    if COLD_BIAS.load(Ordering::Relaxed) {
        if !bias::should_watch(access.pc, random >> 2) {
            stats::bump(Counter::SamplesBackedOff);
            return;
        }
    } else {
        bias::count_watch(access.pc);
    }
    // Jitter the window too: uniform in [delay/2, 3*delay/2].
    let delay = DELAY_US.load(Ordering::Relaxed);
    let delay_us = delay / 2 + (random >> 32) % delay.max(1);
    let request = Watch {
        access: &access,
        frame_pc,
        regs,
        path,
        delay_us,
        sleep: SLEEPY_WINDOWS.load(Ordering::Relaxed),
        report_atomic_races: REPORT_ATOMIC_RACES.load(Ordering::Relaxed),
    };
    if watch::watch(&request) == watch::Outcome::Busy {
        stats::bump(Counter::SamplesBusy);
    }
}

/// Of the accesses a thread is about to make, the one watched least so far (the first on a tie). The first
/// access ahead is not always one that can race: where samples pile up (after a slow locked instruction)
/// it would take every watch, though the racy access is the next but one (tokio 1.13.0's oneshot `send`
/// reads the value's payload, which no other thread writes, right before it writes the channel's state).
fn least_watched(ahead: &decode::Ahead) -> Option<Reached> {
    let pc = |r: &Reached| match r {
        Reached::Access(access) => access.pc,
        Reached::Ranges(ranges) => ranges.site,
    };
    let mut best: Option<(u32, Reached)> = None;
    for reached in ahead.iter() {
        let watches = bias::watches(pc(&reached));
        if best.is_none_or(|(fewest, _)| watches < fewest) {
            best = Some((watches, reached));
        }
    }
    best.map(|(_, reached)| reached)
}

/// One aligned 8-byte word of one of `ranges` (at least one, none empty), chosen by `random`, clipped to
/// its range: `(first byte, bytes, written)`. Every word of a range is equally likely (a race on a
/// large buffer is usually on some part of it, not on its first bytes).
fn pick_word(ranges: &[Range], random: u64) -> (u64, u8, bool) {
    let Some(range) = ranges.get((random & 1) as usize % ranges.len().max(1)) else { return (0, 0, false) };
    let end = range.end();
    let first = range.addr & !7;
    let last = end.saturating_sub(1) & !7;
    let words = (last - first) / 8 + 1;
    let word = first + 8 * ((random >> 1) % words);
    let (lo, hi) = (word.max(range.addr), word.saturating_add(8).min(end));
    (lo, hi.saturating_sub(lo) as u8, range.is_write)
}

/// The part of the interrupted thread's stack that is private to it: from below its red zone up to the
/// outermost frame the walk reached (or RBP, when the walk got nowhere). Accesses there are not watched.
fn own_stack(regs: &Regs, walk_top: u64) -> (u64, u64) {
    let bottom = regs.rsp().saturating_sub(RED_ZONE);
    let top = walk_top.max(regs.rbp()).max(regs.rsp()).saturating_add(16);
    (bottom, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stack_spans_red_zone_to_outermost_frame() {
        let mut regs = Regs::default();
        regs.gpr[Regs::RSP] = 0x7000_1000;
        regs.gpr[Regs::RBP] = 0x7000_1040;
        let on = |addr: u64, top: u64| {
            let (lo, hi) = own_stack(&regs, top);
            (lo..hi).contains(&addr)
        };
        assert!(on(0x7000_1000 - 8, 0x7000_2000));
        assert!(on(0x7000_1ff8, 0x7000_2000));
        assert!(!on(0x7000_1000 - 200, 0x7000_2000));
        assert!(!on(0x7000_3000, 0x7000_2000));
        assert!(!on(0x5555_0000, 0));
        assert!(on(0x7000_1048, 0));
    }

    #[test]
    fn picked_words_are_aligned_clipped_and_cover_every_word() {
        let dst = Range { addr: 0x1003, len: 20, is_write: true };
        let src = Range { addr: 0x2000, len: 8, is_write: false };
        let mut seen = std::collections::BTreeSet::new();
        for r in 0..64u64 {
            let (addr, size, is_write) = pick_word(&[dst, src], r);
            if is_write {
                // Inside the range, within one aligned word.
                assert!(addr >= dst.addr && addr + u64::from(size) <= dst.end(), "{addr:#x}+{size}");
                assert_eq!(addr & !7, (addr + u64::from(size) - 1) & !7);
                seen.insert((addr, size));
            } else {
                assert_eq!((addr, size), (0x2000, 8));
            }
        }
        // [0x1003, 0x1017): three words, the first and last clipped.
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![(0x1003, 5), (0x1008, 8), (0x1010, 7)]);
        assert_eq!(pick_word(&[Range { addr: 0x10, len: 1, is_write: true }], 99), (0x10, 1, true));
    }

    #[test]
    fn thinning_keeps_about_one_in_thinning_and_streams_differ() {
        let kept = (0..40_000).filter(|_| next_random(77, 1) % THINNING == 0).count();
        let expected = 40_000 / THINNING as usize;
        assert!(kept.abs_diff(expected) < expected / 10, "{kept} kept, expected about {expected}");
        assert_ne!(next_random(1001, 5), next_random(1002, 5));
    }
}
