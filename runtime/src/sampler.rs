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
use crate::sys::{cputime, thread};
use crate::watch::{self, OwnMemory, Stall, Watch};
use crate::{aim, bias, decode, libcalls, profile, registry, sharing, stack};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Timer signals per kept sample.
pub const THINNING: u64 = 4;
/// The x86-64 red zone below RSP that leaf code may use.
const RED_ZONE: u64 = 128;

/// The sampling timer's descriptor (-1: not open in this process).
static TIMER: AtomicI32 = AtomicI32::new(-1);
static ENABLED: AtomicBool = AtomicBool::new(false);
/// At the test and debug rates, the boost timer's descriptor (-1: none): a second task-clock event of
/// three signals per sample period, enabled only while most signals land where no watch is possible
/// (see [`boost`]).
static BOOST: AtomicI32 = AtomicI32::new(-1);
/// Whether the boost timer is enabled (wanted, and sampling on).
static BOOST_ON: AtomicBool = AtomicBool::new(false);
/// Whether the boost is wanted now (the signals' mix decides, see [`boost::note`]; on until the first
/// look, 64 ms of one thread's CPU time at the test rate).
static BOOST_WANTED: AtomicBool = AtomicBool::new(true);
/// Sample periods from which watch windows spin on the CPU: production rates (the default is 100 ms),
/// a bounded cost. The debug and test rates (1 ms, 250 µs) give the CPU away while they wait
/// ([`window_stall`]), so that on a busy machine the threads that may touch the watched memory get it
/// during the window (spinning at 1 ms, crossbeam-deque's by-design race went unreported in 20 runs on a
/// loaded 2-core machine; sleeping, it was reported within 30 s).
const SPIN_FROM_PERIOD_US: u64 = 10_000;
/// Sample periods from which a window in a thread that does not block yields rather than sleeps
/// ([`window_stall`]): the debug rate (1 ms) and up. At the test profile's 250 µs windows sleep, as
/// detection in test suites comes first: with yielding windows tokio 1.13.0's oneshot race
/// (RUSTSEC-2021-0124) was reported in 2 of 25 `racewatch cargo test` runs, sleeping in 18 of 60.
const YIELD_FROM_PERIOD_US: u64 = 1_000;
/// How this process's windows wait, from its rate ([`window_stall`]).
static WINDOWS: AtomicU8 = AtomicU8::new(SPIN);
/// Every window spins (production rates).
const SPIN: u8 = 0;
/// Every window sleeps (the test profile's rate).
const SLEEP: u8 = 1;
/// A window yields, or sleeps in a thread that blocked on its own meanwhile (the debug rate).
const YIELD_OR_SLEEP: u8 = 2;
static DELAY_US: AtomicU64 = AtomicU64::new(0);
static REPORT_ATOMIC_RACES: AtomicBool = AtomicBool::new(true);
static SEED: AtomicU64 = AtomicU64::new(0);
static COLD_BIAS: AtomicBool = AtomicBool::new(true);
/// Whether a sample declines to watch while no other program thread runs (`watch_alone=0`).
static SKIP_ALONE: AtomicBool = AtomicBool::new(true);
/// When sampling paused because it could find nothing for a while (0: it is not paused): a signal found
/// no other program thread running ([`pause_while_alone`]), or a run of samples all landed in memory
/// only their own thread uses ([`PRIVATE_RUN`]). The signals return at once until [`pause_ms`] later
/// ([`paused_here`]).
static PAUSED_AT_NS: AtomicU64 = AtomicU64::new(0);
/// Samples in a row (process-wide) that the private-memory bias declined; a watch starts it again.
static PRIVATE_RUN: AtomicU32 = AtomicU32::new(0);
/// A run of this many makes sampling pause ([`pause_ms`]): a clean program whose threads
/// stream over memory of their own gets about half the timer signals (each costs 15-55 µs here, and
/// almost all of them were declined), while one whose samples reach shared memory keeps them all.
const PRIVATE_RUN_PAUSE: u32 = 64;
/// When sampling was last switched on (monotonic ns): no pause within the horizon after it.
static SAMPLING_SINCE_NS: AtomicU64 = AtomicU64::new(u64::MAX);

fn timer() -> Option<SampleTimer> {
    PerfFd::from_key(TIMER.load(Ordering::Acquire)).map(SampleTimer::from_fd)
}

fn boost_timer() -> Option<SampleTimer> {
    PerfFd::from_key(BOOST.load(Ordering::Acquire)).map(SampleTimer::from_fd)
}

/// Timer signals per sample period now: [`THINNING`] with one timer at a quarter of the period (the
/// production rates), or with the boost on; 1 with the base timer alone.
fn signals_per_sample() -> u64 {
    if BOOST.load(Ordering::Relaxed) < 0 || BOOST_ON.load(Ordering::Relaxed) {
        THINNING
    } else {
        1
    }
}

/// Starts the detector: opens the sampler and `options.watchpoints` watchpoints for the calling thread and
/// every thread it creates later (unless [`open_events`] did already), warms up the decoder, installs the
/// `SIGTRAP` handler, and enables sampling if the index already holds covered code (see [`refresh`]). Call
/// once, before the threads to be sampled are created. Errors (perf_event_open denied, no debug register,
/// no room for descriptors) leave the program untouched.
pub fn start(options: &Options) -> Result<(), String> {
    DELAY_US.store(options.delay_us, Ordering::Relaxed);
    let windows = match options.sample_period_us {
        p if p >= SPIN_FROM_PERIOD_US => SPIN,
        p if p >= YIELD_FROM_PERIOD_US => YIELD_OR_SLEEP,
        _ => SLEEP,
    };
    WINDOWS.store(windows, Ordering::Relaxed);
    REPORT_ATOMIC_RACES.store(options.report_atomic_races, Ordering::Relaxed);
    SEED.store(options.seed.unwrap_or(0x9e37_79b9_7f4a_7c15), Ordering::Relaxed);
    COLD_BIAS.store(options.cold_bias, Ordering::Relaxed);
    SKIP_ALONE.store(!options.watch_alone, Ordering::Relaxed);
    aim::set_enabled(options.aim && options.sample_period_us < SPIN_FROM_PERIOD_US && options.watchpoints >= 2);
    open_events(options)?;
    decode::warm_up();
    crate::sys::mem::init_direct_reads();
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
    let sample_ns = options.sample_period_us.saturating_mul(1000);
    // Production rates: one timer at a quarter of the period. The test and debug rates, where the timer
    // signals themselves are the cost (15-30 µs each on a VM): one timer at the period, and a boost timer
    // that adds three signals per period only where they buy samples.
    let boosted = options.sample_period_us < SPIN_FROM_PERIOD_US;
    let period_ns = if boosted { sample_ns } else { sample_ns / THINNING };
    // Measured in the boost's signal periods either way, so that it is the same with the boost on or off.
    running::set_horizon(sample_ns / THINNING);
    let timer = SampleTimer::open(period_ns.max(1)).map_err(|e| match crate::sys::fd::no_room_message(&e) {
        Some(why) => why,
        None => format!("cannot open the sampling timer (perf_event_open: {e})"),
    })?;
    if let Err(err) = watch::init(options.watchpoints) {
        timer.fd().close();
        return Err(err);
    }
    TIMER.store(timer.fd().key(), Ordering::Release);
    // Without room for it, sampling goes on at the base rate.
    if let Some(boost) = boosted.then(|| SampleTimer::open((sample_ns / (THINNING - 1)).max(1)).ok()).flatten() {
        BOOST.store(boost.fd().key(), Ordering::Release);
    }
    Ok(())
}

/// Enables sampling once the index holds covered code (call after publishing a new index); disables it
/// when the index became empty. No-op before [`start`].
pub fn refresh() {
    let Some(timer) = timer() else { return };
    let wanted = registry::with_index(|idx| idx.functions()) > 0 && !PAUSED.load(Ordering::Acquire);
    if wanted != ENABLED.load(Ordering::Acquire) {
        if wanted {
            kernel_bound::start(cputime::process_user_system_ns());
            SAMPLING_SINCE_NS.store(thread::monotonic_ns(), Ordering::Relaxed);
        }
        let result = if wanted { timer.enable() } else { timer.disable() };
        if result.is_ok() {
            ENABLED.store(wanted, Ordering::Release);
        }
        aim::suspend(!wanted);
    }
    set_boost(wanted && BOOST_WANTED.load(Ordering::Acquire));
}

/// Enables or disables the boost timer (when there is one). Async-signal-safe.
fn set_boost(on: bool) {
    let Some(boost) = boost_timer() else { return };
    if BOOST_ON.load(Ordering::Acquire) != on {
        let result = if on { boost.enable() } else { boost.disable() };
        if result.is_ok() {
            BOOST_ON.store(on, Ordering::Release);
            stats::bump(Counter::BoostSwitches);
        }
    }
}

/// The signal's thread is alone (no other program thread got a timer signal within the horizon: they
/// are blocked, or gone): nobody can race with it, and every sample would only cost. Sampling pauses for
/// [`pause_ms`] ([`pause`]); not within the horizon after sampling was switched on, when the other
/// threads may not have had their first signal yet. True when sampling is paused. Async-signal-safe.
fn pause_while_alone(now: u64) -> bool {
    if now.saturating_sub(SAMPLING_SINCE_NS.load(Ordering::Relaxed)) < running::horizon_ns() {
        return false;
    }
    pause(Counter::AlonePauses, now);
    true
}

/// Pauses sampling for [`pause_ms`], counting the pause under `why` (unless it is paused already): the
/// signals meanwhile return at once ([`paused_here`]), and the boost timer is off until the signals'
/// mix asks for it again. The timers themselves stay on, so that nobody (no thread of racewatch's) has
/// to switch them on again. Async-signal-safe.
fn pause(why: Counter, now: u64) {
    if PAUSED_AT_NS.compare_exchange(0, now.max(1), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        set_boost(false);
        stats::bump(why);
    }
}

/// Whether a pause ([`pause`]) holds at `now`: the signal returns at once. The first signal after the
/// pause ends it. Async-signal-safe.
fn paused_here(now: u64) -> bool {
    let at = PAUSED_AT_NS.load(Ordering::Acquire);
    if at == 0 {
        return false;
    }
    if now < at.saturating_add(u64::from(pause_ms()) * 1_000_000) {
        return true;
    }
    let _ = PAUSED_AT_NS.compare_exchange(at, 0, Ordering::AcqRel, Ordering::Relaxed);
    false
}

/// How long a pause lasts: 10 ms at the test and debug rates (a thread that starts running, or touches
/// shared memory, meanwhile waits at most this long for its samples); 100 ms at production rates (a
/// signal every 25 ms or more).
pub fn pause_ms() -> u32 {
    if WINDOWS.load(Ordering::Relaxed) != SPIN {
        10
    } else {
        100
    }
}

/// Whether sampling waits for the reporter thread to start it again: paused while a tracer is attached.
pub fn needs_reporter() -> bool {
    PAUSED.load(Ordering::Acquire)
}

/// Called from sampling signals that landed in covered code: the detector's checks that need no thread
/// of their own (see [`crate::detector`]).
static ON_COVERED_SIGNAL: std::sync::OnceLock<fn(&Regs, u64)> = std::sync::OnceLock::new();

/// Sets what sampling signals in covered code call (once per process).
pub fn on_covered_signal(check: fn(&Regs, u64)) {
    let _ = ON_COVERED_SIGNAL.set(check);
}

/// How many signal handlers hold the timers now ([`hold`]).
static HELD: AtomicU32 = AtomicU32::new(0);

/// Switches every thread's timers off (`true`) for a few system calls of a signal handler, or back on
/// as they were wanted (`false`, by the last holder): see `signal::make_pending`. Async-signal-safe.
pub fn hold(on: bool) {
    let timers = || [(timer(), &ENABLED), (boost_timer(), &BOOST_ON)];
    if on {
        if HELD.fetch_add(1, Ordering::AcqRel) == 0 {
            for timer in timers().into_iter().filter_map(|(timer, _)| timer) {
                let _ = timer.disable();
            }
        }
        return;
    }
    if HELD.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    // Stopped meanwhile: left off. Checked again after enabling, so that a stop between the check and
    // the enable is not undone.
    let wanted = |on: &AtomicBool| on.load(Ordering::Acquire);
    for (timer, on) in timers() {
        if let Some(timer) = timer.filter(|_| wanted(on)) {
            let _ = timer.enable();
            if !wanted(on) {
                let _ = timer.disable();
            }
        }
    }
}

/// Set while sampling is paused (a tracer is attached).
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Pauses sampling (no new watch windows either) or lets it go on; true when that changed the state.
pub fn set_paused(paused: bool) -> bool {
    let changed = PAUSED.swap(paused, Ordering::AcqRel) != paused;
    if paused {
        aim::suspend(true);
    }
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
    aim::suspend(true);
    set_boost(false);
}

/// Closes the sampler's and the watchpoints' descriptors (detection is over in this process).
pub fn close() {
    stop();
    for timer in [&TIMER, &BOOST] {
        if let Some(fd) = PerfFd::from_key(timer.swap(-1, Ordering::AcqRel)) {
            fd.close();
        }
    }
    watch::close();
}

/// In a forked child: forgets the parent's events without touching them (the child's copies of their
/// descriptors are closed by the caller), so the child can start its own.
pub fn forget_after_fork() {
    running::reset();
    TIMER.store(-1, Ordering::Release);
    BOOST.store(-1, Ordering::Release);
    BOOST_ON.store(false, Ordering::Release);
    BOOST_WANTED.store(true, Ordering::Release);
    boost::reset();
    kernel_bound::reset();
    PAUSED.store(false, Ordering::Release);
    PAUSED_AT_NS.store(0, Ordering::Release);
    PRIVATE_RUN.store(0, Ordering::Release);
    ENABLED.store(false, Ordering::Release);
    aim::reset();
    watch::forget_after_fork();
}

/// Whether `sig_data` is one of the detector's events (a sample or one of its watchpoints).
fn claims(sig_data: u64) -> bool {
    sig_data == SAMPLE_SIG_DATA || watch::owns(sig_data)
}

fn on_perf(signal: &PerfSignal) {
    let _direct = crate::sys::mem::DirectReads::allow(signal.regs.rip, signal.regs.rsp());
    if signal.data == SAMPLE_SIG_DATA {
        on_sample(&signal.regs);
    } else if aim::owns(signal.data) {
        if aim::hit(signal) {
            on_aimed(&signal.regs);
        }
    } else {
        watch::on_trap(signal);
    }
    note_handler_end();
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

/// Per-thread sample credits, indexed by tid like [`RNG`]: one per timer signal, the signals per sample
/// period ([`signals_per_sample`]) spent per kept sample, at most [`SAVED_SAMPLES`] samples' worth saved.
static CREDITS: [AtomicU32; 256] = [const { AtomicU32::new(0) }; 256];
/// The thread whose credits each [`CREDITS`] cell holds (0: none yet).
static CREDIT_OWNERS: [AtomicI32; 256] = [const { AtomicI32::new(0) }; 256];
/// Samples a thread may save up while it runs code that cannot be watched, to spend at once in code
/// that can.
const SAVED_SAMPLES: u32 = 8;

/// Whether a signal in covered code, with `credit` (this signal's included), is kept as a sample: with
/// at least one sample's worth, and below two samples' worth only on a random half of the signals, so
/// that a thread in covered code all along has random gaps. With the base timer alone (one signal per
/// period) every covered signal with credit is kept.
fn keeps(credit: u32, per_sample: u64, random: u64) -> bool {
    let per_sample = per_sample as u32;
    credit >= per_sample && (per_sample == 1 || random & 1 == 0 || credit >= 2 * per_sample)
}

/// The calling thread's credits before this signal. A thread's first signal (its cell held another
/// thread's, or none) starts from a random share of one sample, as if its signals had begun at a random
/// point of a sample period: its first sample may come with any of its first `per_sample` signals, as
/// with plain random thinning, rather than never before the last of them (a thread that lives less than
/// a sample period of CPU time would never be sampled, and every race would wait a whole period).
fn credit_before(tid: i32, random: u64, per_sample: u64) -> u32 {
    let cell = tid as usize % CREDITS.len();
    if CREDIT_OWNERS[cell].swap(tid, Ordering::Relaxed) == tid {
        CREDITS[cell].load(Ordering::Relaxed)
    } else {
        ((random >> 32) % per_sample) as u32
    }
}

/// The boost timer's switch: on while most timer signals land where no watch is possible (libomp
/// spinning at a barrier, uncovered library code), where the extra signals are what lets a thread
/// save up samples for its covered code; off while most land in covered code, where each would only
/// be dropped again (a sample per period is all the rate asks for) and costs a kernel round trip.
mod boost {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Signals per look at the mix (at the test rate, 64 ms of one thread's CPU time with the boost on,
    /// 256 ms with it off). Starting off with windows of 256 signals, the boost was off most of the
    /// time in programs whose mix changes by phase (DataRaceBench's DRB169 armed 484 watches in 4 s
    /// instead of 3,500).
    const WINDOW: u32 = 1024;
    static SIGNALS: AtomicU32 = AtomicU32::new(0);
    static UNWATCHABLE: AtomicU32 = AtomicU32::new(0);

    /// Counts one timer signal (`watchable`: it landed where a watch is possible); every [`WINDOW`]
    /// signals of the process, returns whether the boost is wanted: on above one half unwatchable,
    /// off below one fifth, as it was in between. Async-signal-safe.
    pub fn note(watchable: bool, was_on: bool) -> Option<bool> {
        if !watchable {
            UNWATCHABLE.fetch_add(1, Ordering::Relaxed);
        }
        if SIGNALS.fetch_add(1, Ordering::Relaxed) + 1 != WINDOW {
            return None;
        }
        let unwatchable = UNWATCHABLE.swap(0, Ordering::Relaxed);
        SIGNALS.store(0, Ordering::Relaxed);
        Some(if was_on { unwatchable * 5 >= WINDOW } else { unwatchable * 2 > WINDOW })
    }

    pub fn reset() {
        SIGNALS.store(0, Ordering::Relaxed);
        UNWATCHABLE.store(0, Ordering::Relaxed);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_boost_follows_the_mix_with_hysteresis() {
            reset();
            // One window of signals, the first `unwatchable` of them where no watch is possible: the
            // decision taken at its end (the signals are counted in order, so not `.last()`).
            let window = |unwatchable: u32, on: bool| {
                let mut decided = None;
                for i in 0..WINDOW {
                    decided = note(i >= unwatchable, on).or(decided);
                }
                decided
            };
            let tenths = |n: u32| WINDOW * n / 10;
            assert_eq!(window(tenths(9), false), Some(true), "mostly unwatchable: on");
            assert_eq!(window(tenths(3), true), Some(true), "between a fifth and a half: stays on");
            assert_eq!(window(tenths(1), true), Some(false), "mostly covered: off");
            assert_eq!(window(tenths(3), false), Some(false), "between: stays off");
        }
    }
}

/// Whether the process lives in system calls (a server in `epoll_wait`, `recvmsg`, `sendmsg`: 80-90% of
/// its CPU time in the kernel), looked at every boost window (the test and debug rates) from the
/// process's user and system time since the last look. Such a process is sampled differently:
/// - no boost: the timers tick through system calls too, but a tick in kernel mode sends no signal, so
///   the boost would mostly add timer interrupts (memcached's CPU per operation was 1.5 times that of
///   the base timer alone) for few samples;
/// - longer windows ([`WINDOW_STRETCH`]): its other threads touch shared memory in short bursts between
///   system calls, and a window sleeps (it costs the watching thread latency, not CPU). On memcached a
///   10-times-longer window found 7 distinct races in 20 s instead of 2, at the same CPU per operation
///   (7% fewer operations under a closed-loop load).
mod kernel_bound {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// How much longer a kernel-bound process's windows are.
    pub const WINDOW_STRETCH: u64 = 10;
    static LAST_USER_NS: AtomicU64 = AtomicU64::new(0);
    static LAST_SYSTEM_NS: AtomicU64 = AtomicU64::new(0);
    static KERNEL_BOUND: AtomicBool = AtomicBool::new(false);

    /// Starts measuring from the process's `(user, system)` CPU time now.
    pub fn start(now: Option<(u64, u64)>) {
        let (user, system) = now.unwrap_or_default();
        LAST_USER_NS.store(user, Ordering::Relaxed);
        LAST_SYSTEM_NS.store(system, Ordering::Relaxed);
    }

    /// Looks at the process's `(user, system)` CPU time now: kernel-bound when more than half of the
    /// time since the last look was system time (unchanged when the time is unknown). Returns the
    /// verdict. Async-signal-safe.
    pub fn look(now: Option<(u64, u64)>) -> bool {
        if let Some((user, system)) = now {
            let user_spent = user.saturating_sub(LAST_USER_NS.swap(user, Ordering::Relaxed));
            let system_spent = system.saturating_sub(LAST_SYSTEM_NS.swap(system, Ordering::Relaxed));
            KERNEL_BOUND.store(system_spent > user_spent, Ordering::Relaxed);
        }
        is()
    }

    pub fn is() -> bool {
        KERNEL_BOUND.load(Ordering::Relaxed)
    }

    pub fn reset() {
        KERNEL_BOUND.store(false, Ordering::Relaxed);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_process_in_system_calls_is_kernel_bound() {
            start(Some((1_000, 1_000)));
            assert!(!look(Some((9_000, 3_000))), "mostly user time");
            assert!(look(Some((10_000, 12_000))), "mostly system time since the last look");
            assert!(look(None), "unknown: as it was");
            assert!(!look(Some((20_000, 12_500))));
        }
    }
}

fn on_sample(regs: &Regs) {
    let tid = thread::gettid();
    let now = thread::monotonic_ns();
    running::note(tid, now);
    if paused_here(now) {
        return;
    }
    // Whether the thread is alone (see [`running`]): looked up once per signal.
    let alone = SKIP_ALONE.load(Ordering::Relaxed) && !running::others(tid, now);
    if alone && pause_while_alone(now) {
        return;
    }
    let random = next_random(tid, SEED.load(Ordering::Relaxed));
    // Samples are a budget of one per THINNING signals of a thread, spent where a watch is possible:
    // a signal in code that cannot be watched (libomp spinning at a barrier, the uncovered standard
    // library) saves its share up, and the thread spends it on its next signals in covered code. Each
    // thread keeps at most one sample per THINNING signals over time (so a program that runs nothing
    // but covered code is sampled as before, with random gaps: without a surplus a kept sample takes a
    // random bit as well), but a program that spends 99% of its time elsewhere keeps every signal that
    // lands in covered code while its savings last: up to THINNING times more samples where its races
    // can be (DataRaceBench, issue 24).
    let per_sample = signals_per_sample();
    let credits = &CREDITS[tid as usize % CREDITS.len()];
    let credit = credit_before(tid, random, per_sample).saturating_add(1).min(SAVED_SAMPLES * per_sample as u32);
    let watchable = watchable(regs.rip);
    if watchable {
        if let Some(check) = ON_COVERED_SIGNAL.get() {
            check(regs, now);
        }
    }
    if BOOST.load(Ordering::Relaxed) >= 0 {
        if let Some(mix) = boost::note(watchable, BOOST_WANTED.load(Ordering::Relaxed)) {
            let wanted = mix && !kernel_bound::look(cputime::process_user_system_ns());
            BOOST_WANTED.store(wanted, Ordering::Relaxed);
            set_boost(wanted && ENABLED.load(Ordering::Acquire));
        }
    }
    if !watchable {
        // A sample's worth saved up: aim a code breakpoint at covered code instead (see [`aim`]), while
        // most signals land where no watch is possible (as for the boost: where most land in covered code,
        // the timer finds it by itself, and each aim would cost two ioctls that reach every thread).
        let aimed = credit >= per_sample as u32 && BOOST_WANTED.load(Ordering::Relaxed) && aim::aim(random, now);
        credits.store(if aimed { credit - per_sample as u32 } else { credit }, Ordering::Relaxed);
        if random % per_sample == 0 {
            stats::bump(Counter::Samples);
            stats::bump(Counter::SamplesUncovered);
        }
        return;
    }
    if !keeps(credit, per_sample, random) {
        credits.store(credit, Ordering::Relaxed);
        return;
    }
    credits.store(credit - per_sample as u32, Ordering::Relaxed);
    stats::bump(Counter::Samples);
    sample(regs, tid, random >> 1, alone);
    stats::add(Counter::SampleNs, thread::monotonic_ns().saturating_sub(now));
}

/// A thread hit the code breakpoint aimed at covered code (see [`aim`]): a sample there.
fn on_aimed(regs: &Regs) {
    let tid = thread::gettid();
    let now = thread::monotonic_ns();
    let alone = SKIP_ALONE.load(Ordering::Relaxed) && !running::others(tid, now);
    stats::bump(Counter::Samples);
    sample(regs, tid, next_random(tid, SEED.load(Ordering::Relaxed)) >> 1, alone);
    stats::add(Counter::SampleNs, thread::monotonic_ns().saturating_sub(now));
}

/// Whether a sample at `pc` may arm a watch: covered code, or the body of libc's memcpy, memmove or
/// memset (whether a covered function called it is checked later).
fn watchable(pc: u64) -> bool {
    registry::with_index(|idx| idx.function_containing(pc).is_some()) || libcalls::copy_body_containing(pc).is_some()
}

/// Which program threads ran lately: the time of each thread's last timer signal. The timer counts a
/// thread's CPU time, so a thread that gets no signal for a while is blocked (in `pthread_join`, on a
/// lock the sampled thread holds, in a system call) or has exited; while the sampled thread is the
/// only one that ran, no other thread can touch memory during its window, and a watch would only cost.
mod running {
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

    const SLOTS: usize = 256;
    const PROBES: usize = 8;
    static TIDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
    static SEEN_NS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
    /// How long without a signal makes a thread not running (set at start from the timer period).
    static HORIZON_NS: AtomicU64 = AtomicU64::new(u64::MAX);

    /// Sets the horizon for a timer signal every `signal_period_ns` of a thread's CPU time: 64 periods,
    /// at least 100 ms (a thread that runs in short bursts, or shares its CPU, gets its signals far apart:
    /// at the test rate a thread using 0.25% of a CPU still counts as running, 0.06% with the boost on).
    pub fn set_horizon(signal_period_ns: u64) {
        HORIZON_NS.store(signal_period_ns.saturating_mul(64).max(100_000_000), Ordering::Relaxed);
    }

    pub fn horizon_ns() -> u64 {
        HORIZON_NS.load(Ordering::Relaxed)
    }

    fn probes(tid: i32) -> impl Iterator<Item = usize> {
        let start = (tid as u32).wrapping_mul(0x9e37_79b9) as usize % SLOTS;
        (0..PROBES).map(move |i| (start + i) % SLOTS)
    }

    /// Records that `tid` got a timer signal at `now`. A full neighbourhood takes the stalest slot.
    /// Async-signal-safe.
    pub fn note(tid: i32, now: u64) {
        let mut stalest = None::<(usize, u64)>;
        for slot in probes(tid) {
            let owner = TIDS[slot].load(Ordering::Relaxed);
            if owner == tid || owner == 0 {
                TIDS[slot].store(tid, Ordering::Relaxed);
                SEEN_NS[slot].store(now, Ordering::Relaxed);
                return;
            }
            let seen = SEEN_NS[slot].load(Ordering::Relaxed);
            if stalest.is_none_or(|(_, oldest)| seen < oldest) {
                stalest = Some((slot, seen));
            }
        }
        if let Some((slot, _)) = stalest {
            TIDS[slot].store(tid, Ordering::Relaxed);
            SEEN_NS[slot].store(now, Ordering::Relaxed);
        }
    }

    /// Whether a thread other than `tid` got a timer signal within the horizon before `now`.
    /// Async-signal-safe.
    pub fn others(tid: i32, now: u64) -> bool {
        let horizon = HORIZON_NS.load(Ordering::Relaxed);
        TIDS.iter().zip(&SEEN_NS).any(|(owner, seen)| {
            let owner = owner.load(Ordering::Relaxed);
            owner != 0 && owner != tid && now.saturating_sub(seen.load(Ordering::Relaxed)) < horizon
        })
    }

    /// Forgets every thread (a forked child has one).
    pub fn reset() {
        for (tid, seen) in TIDS.iter().zip(&SEEN_NS) {
            tid.store(0, Ordering::Relaxed);
            seen.store(0, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn only_recent_other_threads_count() {
            set_horizon(1_000);
            note(101, 1_000_000_000);
            assert!(!others(101, 1_000_000_100), "the thread itself is not another");
            note(102, 1_000_000_000);
            assert!(others(101, 1_050_000_000));
            assert!(!others(101, 1_200_000_000), "200 ms without a signal: not running");
            // Many threads colliding: the newest are kept.
            for tid in 1000..1600 {
                note(tid, 2_000_000_000);
            }
            assert!(others(1000, 2_000_000_001));
        }
    }
}

/// A kept sample of thread `tid`: find its access and watch it.
fn sample(regs: &Regs, tid: i32, random: u64, alone: bool) {
    if thread::is_runtime_thread(tid) {
        return;
    }
    let Some(function) = registry::with_index(|idx| idx.function_containing(regs.rip)) else {
        // Inside the body of libc's memcpy, memmove or memset called from covered code: watch the bytes
        // that call is about to touch, judged as an access of the call.
        match libcalls::copy_body_containing(regs.rip).and_then(|body| library_caller(regs).map(|call| (body, call))) {
            Some((body, call)) => sample_in_library(regs, tid, random, body, call, alone),
            None => stats::bump(Counter::SamplesUncovered),
        }
        return;
    };
    profile::count(function.start, profile::Event::Sample);
    aim::note_function(function.start);
    if !watch::any_free() {
        stats::bump(Counter::SamplesBusy);
        return;
    }
    if declined_alone(alone) {
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
            stats::bump(miss_counter(miss));
            return;
        }
    };
    // What to watch: the access's record (its PC is where covered code makes it), the PC heading its stack
    // (a libc function's entry for a call to it) and how it was reached.
    let (access, frame_pc, path, bias_key) = match found {
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
            (access, found.pc, found.path, found.pc)
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
            (access, found.pc, found.path, range_bias_key(found.site, addr))
        }
    };
    watch_sampled(regs, random, &access, frame_pc, path, bias_key);
}

/// A sample of a thread that is `alone` (no other program thread ran lately, see [`running`]): nobody
/// can touch memory during a window, so none is opened. Counted.
fn declined_alone(alone: bool) -> bool {
    if alone {
        stats::bump(Counter::SamplesAlone);
    }
    alone
}

/// The covered code that called the libc memory function the thread interrupted at `regs` is in: the
/// call's PC (return address - 1) of the first frame outside libc's memory and string functions (a
/// `__memcpy_chk` calls `memcpy`), when that frame is covered.
fn library_caller(regs: &Regs) -> Option<u64> {
    let mut callers = [0u64; 4];
    let found = crate::unwind::capture(regs, &mut callers);
    let call = callers
        .get(..found)?
        .iter()
        .map(|ra| ra.wrapping_sub(1))
        .find(|&pc| libcalls::body_containing(pc).is_none())?;
    (registry::with_index(|idx| idx.classify(call)) != Access::Uncovered).then_some(call)
}

/// A kept sample inside `body` (libc's memcpy, memmove or memset) called from covered code at `call`:
/// decodes the next access of the body from the interrupted registers and watches one word of it, as an
/// access of `call` (as a trap inside such a body is judged). These functions touch exactly the bytes
/// their arguments name (overlapping unaligned loads and stores, never past either end), so the access
/// is one the call makes.
fn sample_in_library(regs: &Regs, tid: i32, random: u64, body: (u64, u64), call: u64, alone: bool) {
    stats::bump(Counter::SamplesInMemoryFunction);
    if let Some(function) = registry::with_index(|idx| idx.function_containing(call)) {
        profile::count(function.start, profile::Event::Sample);
    }
    if !watch::any_free() {
        stats::bump(Counter::SamplesBusy);
        return;
    }
    if declined_alone(alone) {
        return;
    }
    // Only the registers' stack pointer bounds the own stack here: the body has no frame of its own.
    let own_stack = own_stack(regs, 0);
    let in_body = |pc: u64| (body.0..body.1).contains(&pc);
    let no_library = |_: u64| None;
    let bounds = decode::Bounds { own_stack, covered: &in_body, library: &no_library };
    let ahead = decode::reach_ahead(&OwnMemory, &watch::decoder_regs(regs), &bounds, decode::MAX_STEPS, decode::AHEAD);
    let ahead = match ahead {
        Ok(ahead) => ahead,
        Err(miss) => {
            stats::bump(miss_counter(miss));
            return;
        }
    };
    // One of the accesses ahead, at random: loads of the source, stores to the destination.
    let n = ahead.iter().count().max(1) as u64;
    let (frame_pc, range, path) = match ahead.get(((random >> 40) % n) as usize) {
        Some(Reached::Access(found)) => {
            (found.pc, Range { addr: found.addr, len: u64::from(found.size), is_write: found.is_write }, found.path)
        }
        // A REP string instruction of the body (rdi, rsi and rcx give what is left of the call's bytes).
        Some(Reached::Ranges(found)) => match found.ranges.as_slice() {
            [] => {
                stats::bump(Counter::SamplesNoAccess);
                return;
            }
            ranges => (found.pc, ranges[((random >> 40) as usize) % ranges.len()], found.path),
        },
        None => {
            stats::bump(Counter::SamplesNoAccess);
            return;
        }
    };
    let (addr, size, is_write) = pick_word(&[range], next_random(tid, random));
    let access =
        AccessRecord { tid, pc: call, addr, size, is_write, is_atomic: false, locked: false, stack: Stack::EMPTY };
    watch_sampled(regs, random, &access, frame_pc, path, range_bias_key(call, addr));
}

/// The cold-code bias's key for a word of a range access (a call to a libc memory function, a REP
/// string instruction) made at `site`: the site and the 64-byte line of the word. A scalar access is
/// keyed by its PC alone (its address is usually the same field), but one site of a range access
/// touches many lines, each of which another thread may be the one to touch: keyed by the site alone,
/// a hot `memcpy` of a shared buffer was declined at the floor (1/256) after its first watches, before
/// they had covered any of the buffer (issue 24).
fn range_bias_key(site: u64, addr: u64) -> u64 {
    site ^ (addr >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn miss_counter(miss: decode::Miss) -> Counter {
    match miss {
        decode::Miss::OwnStack => Counter::SamplesOwnStack,
        decode::Miss::NoAccess => Counter::SamplesNoAccess,
        decode::Miss::Unemulated => Counter::SamplesUnemulated,
        decode::Miss::AddressUnknown => Counter::SamplesAddressUnknown,
        decode::Miss::LeftCovered => Counter::SamplesLeftCovered,
    }
}

/// The common end of a kept sample: suppressions, the cold-code bias (keyed by `bias_key`), the watch.
fn watch_sampled(
    regs: &Regs,
    random: u64,
    access: &AccessRecord,
    frame_pc: u64,
    path: decode::CallPath,
    bias_key: u64,
) {
    if crate::suppressed_pcs::contains(access.pc) {
        stats::bump(Counter::SamplesSuppressed);
        return;
    }
    // Without the cold-code bias (the test profile) the private-memory bias keeps hot loops over a
    // thread's own memory from taking every watch; with it, that bias does, and a race on a rarely
    // run path is watched from its first samples (the private-memory bias would thin them until the
    // other thread's samples had landed there too).
    let cold_bias = COLD_BIAS.load(Ordering::Relaxed);
    if !cold_bias && !sharing::should_watch(access.addr, access.tid, random >> 20) {
        stats::bump(Counter::SamplesPrivate);
        if PRIVATE_RUN.fetch_add(1, Ordering::Relaxed) + 1 >= PRIVATE_RUN_PAUSE {
            PRIVATE_RUN.store(0, Ordering::Relaxed);
            pause(Counter::PrivatePauses, thread::monotonic_ns());
        }
        return;
    }
    PRIVATE_RUN.store(0, Ordering::Relaxed);
    if cold_bias {
        if !bias::should_watch(bias_key, random >> 2) {
            stats::bump(Counter::SamplesBackedOff);
            return;
        }
    } else {
        bias::count_watch(bias_key);
    }
    // Jitter the window too: uniform in [delay/2, 3*delay/2].
    let stretch = if kernel_bound::is() { kernel_bound::WINDOW_STRETCH } else { 1 };
    let delay = DELAY_US.load(Ordering::Relaxed) * stretch;
    let delay_us = delay / 2 + (random >> 32) % delay.max(1);
    let request = Watch {
        access,
        frame_pc,
        regs,
        path,
        delay_us,
        stall: window_stall(),
        report_atomic_races: REPORT_ATOMIC_RACES.load(Ordering::Relaxed),
    };
    if watch::watch(&request) == watch::Outcome::Busy {
        stats::bump(Counter::SamplesBusy);
    }
}

thread_local! {
    /// This thread's voluntary context switches (times it blocked) as its previous signal handler of
    /// racewatch's ended, at the debug rate (`u64::MAX`: none yet).
    static SWITCHES_AFTER_HANDLER: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// At the debug rate: notes this thread's voluntary context switches as a handler of racewatch's
/// ends, so that [`window_stall`] tells the program's own blocking from the handler's (a read of the
/// program's memory that waited for the memory map's lock is not the program's).
fn note_handler_end() {
    if WINDOWS.load(Ordering::Relaxed) == YIELD_OR_SLEEP {
        SWITCHES_AFTER_HANDLER.with(|after| after.set(cputime::thread_voluntary_switches().unwrap_or(u64::MAX)));
    }
}

/// How this thread's watch window waits. At production rates it spins. At the test and debug rates it
/// gives the CPU away while it waits (on a busy machine the threads that may touch the memory must run
/// meanwhile): by sleeping in a thread that blocked on its own since racewatch's previous signal handler
/// in it ended (a server's, where windows are long and a spinning one would cost CPU), by yielding in one
/// that did not (a busy-polling or computing thread, whose operators may check that it never blocks: a
/// yield is not a voluntary context switch). A thread's first window yields. At the test profile's rate
/// every window sleeps ([`YIELD_FROM_PERIOD_US`]). A real-time thread's windows always spin.
fn window_stall() -> Stall {
    match WINDOWS.load(Ordering::Relaxed) {
        SPIN => return Stall::Spin,
        // A real-time thread (`SCHED_FIFO`, `SCHED_RR`) that yields or sleeps hands the CPU to the next
        // thread of its priority, which it never does by itself while it runs: threads taking strict
        // turns would see the order change. It spins.
        _ if cputime::real_time_policy() => return Stall::Spin,
        SLEEP => return Stall::Sleep,
        _ => {}
    }
    let after_previous = SWITCHES_AFTER_HANDLER.with(Cell::get);
    match cputime::thread_voluntary_switches() {
        Some(now) if after_previous != u64::MAX && now != after_previous => Stall::Sleep,
        _ => Stall::Yield,
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

    /// One thread's signals, all in covered code, through the credits: which of them are kept (1-based).
    fn kept_signals(tid: i32, signals: u32) -> Vec<u32> {
        let mut kept = Vec::new();
        for n in 1..=signals {
            let random = next_random(tid, 9);
            let credit = credit_before(tid, random, THINNING) + 1;
            let keep = keeps(credit, THINNING, random);
            CREDITS[tid as usize % CREDITS.len()]
                .store(if keep { credit - THINNING as u32 } else { credit }, Ordering::Relaxed);
            if keep {
                kept.push(n);
            }
        }
        kept
    }

    #[test]
    fn a_new_thread_may_take_its_sample_with_any_of_its_first_signals() {
        // Threads of two signals each (half a sample period), one after another in their cells: about
        // three in ten take a sample (plain thinning: 1 - (3/4)^2, about four in ten), at either signal.
        let (mut first, mut second) = (0, 0);
        for tid in 100_000..104_000 {
            match kept_signals(tid, 2).as_slice() {
                [1] => first += 1,
                [2] => second += 1,
                [] => {}
                other => panic!("{other:?}"),
            }
        }
        assert!((300..800).contains(&first), "kept at the first signal: {first} of 4000 threads");
        assert!((600..1400).contains(&second), "kept at the second signal: {second} of 4000 threads");
        // A long-lived thread still keeps one signal in THINNING.
        let kept = kept_signals(200_001, 40_000).len();
        assert!(kept.abs_diff(10_000) < 100, "{kept} of 40000 signals kept");
    }
}
