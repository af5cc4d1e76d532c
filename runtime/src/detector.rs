//! The detector's life in this process (DESIGN.md "host contract").
//!
//! ```text
//!  Idle ──first pthread_create, covered code indexed──▶ Running ──seccomp / our fds closed──▶ Off
//!    ▲                                                     │
//!    └──────────── fork (in the child) ◀───────────────────┘
//! ```
//!
//! - **Idle**: a program with one thread cannot race, so nothing is started:
//!   no thread, no perf event, no handler, no descriptor. The program's
//!   second thread starts the detector, from the interposed `pthread_create`,
//!   before the real call: the perf events (inherited by every thread created
//!   from then on) and the `SIGTRAP` handler. The reporter thread (all signals
//!   blocked, so it takes no signal of the program's and inherits no perf
//!   event) is started only when it has work ([`crate::reporter`]).
//! - **Off**: the program is entering a seccomp sandbox, or closed or reused
//!   one of our descriptors. Sampling stops, in-flight handlers finish, the
//!   reporter prints what it has and ends, our descriptors are closed (or
//!   left to the program), with one warning. The `SIGTRAP` handler stays, so
//!   the program's own `SIGTRAP` keeps its disposition; it drops ours.
//! - **fork**: the child's copies of our descriptors are closed without
//!   touching the parent's events, every piece of state the parent's threads
//!   held is reset, and the child goes back to Idle: its first thread starts
//!   its own detector (pre-fork servers run their workers in children).

use crate::fixed::FixedBuf;
use crate::options::{self, Options};
use crate::sys::{code, confined, fatal, fd, handlers, perf, signal, stacks, thread, tracer, unwind_info};
use crate::{log, profile, queue, registry, reporter, sampler, sandbox_scan, spawn_point, stats, watch};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};

const IDLE: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// The process the running detector belongs to.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// Set once a thread of this process entered (or is entering) a seccomp sandbox: from then on the
/// runtime makes no syscall of its own.
static SANDBOXED: AtomicBool = AtomicBool::new(false);

/// Whether the detector runs in this process.
pub fn is_running() -> bool {
    STATE.load(Ordering::Acquire) == RUNNING
}

/// Whether the detector stepped aside for this process, or was never to run in it.
pub fn is_off() -> bool {
    STATE.load(Ordering::Acquire) == OFF
}

/// The process whose `exit` (or `main`'s return) began: 0 until then.
static EXITING: AtomicI32 = AtomicI32::new(0);

/// The program called `exit` or returned from `main` (seen by the interposers in
/// [`crate::exit_status`]): from here the modules' destructors run.
pub fn process_exiting() {
    EXITING.store(thread::getpid(), Ordering::Release);
}

/// Whether this process is exiting ([`process_exiting`]): a module destructor's table removal then
/// changes nothing (its code stays mapped until the process is gone) and is skipped, so that the
/// exiting thread never rebuilds the index (its allocations cannot wait for memory: where the program
/// used it all, Rust's allocator would end the process).
pub fn is_exiting() -> bool {
    EXITING.load(Ordering::Acquire) == thread::getpid()
}

/// Whether the runtime must stay out of the kernel's way (a seccomp filter may kill any syscall).
pub fn is_sandboxed() -> bool {
    SANDBOXED.load(Ordering::Acquire)
}

/// Called by the interposed `pthread_create` before the real call: starts the detector when this is the
/// process's second thread and covered code is indexed.
pub fn before_thread_create() {
    if confined::here() {
        return; // No system call of racewatch's here; the new thread is confined too.
    }
    if is_running() {
        reporter::program_creates_thread();
    }
    if STATE.load(Ordering::Acquire) != IDLE || !registry::with_index(|i| i.functions() > 0) {
        return;
    }
    // Traced from the start (a debugger's `run`, `strace`, a supervisor's PTRACE_TRACEME child): no
    // signal could be sampled, so nothing starts (no thread for the tracer to see); a thread created
    // after the tracer detached starts the detector.
    if tracer::traced_now() {
        return;
    }
    if STATE.compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let started = start(options::get());
    STATE.store(if started { RUNNING } else { OFF }, Ordering::Release);
}

/// Before `main`, in a process with covered code: maps now what the detector's start would otherwise
/// map while the program runs (racewatch's heap for the decoder's tables and the start's records, the
/// runtime stacks, the alternate stacks of the main thread and the first threads, the place of the
/// warm-up thread's stack), so that the program's `pthread_create`s change its address space
/// (`VmSize`, `/proc/self/maps`) as without racewatch. Address space only: none of it is touched
/// until used, and nothing is computed (the decoder's tables take 0.8 ms to build, done at the start).
pub fn prepare() {
    if is_sandboxed() || !registry::with_index(|i| i.functions() > 0) {
        return;
    }
    // First: the table is a mapping of its own, not part of the heap mapped ahead for the start.
    crate::sys::creation::prepare();
    crate::sys::tls::reserve();
    crate::sys::region::reserve(HEAP_AT_START);
    crate::sys::prefault::own_module();
    stacks::init_pool();
    stacks::prepare_alt_stacks();
    stacks::prepare_work_stack();
    thread::reserve_small_stack();
}

/// The program is about to lock all its current memory (`mlockall(MCL_CURRENT)`): what [`prepare`] mapped
/// ahead and nothing uses yet is unmapped first, so that it is neither locked nor counted against the
/// program's `RLIMIT_MEMLOCK` (the kernel refuses an `mlockall` whose address space exceeds it).
pub fn before_locking_all() {
    if STATE.load(Ordering::Acquire) != IDLE {
        return;
    }
    crate::sys::region::release_reserve();
    stacks::shrink_for_locking();
    crate::sys::creation::before_locking_all();
    crate::sys::tls::before_locking_all();
}

/// racewatch's heap that the detector's start uses: about 580 KiB for the decoder's tables, 64 KiB for
/// the C library's function table, and the reporter's and the samplers' records, with room to spare.
const HEAP_AT_START: usize = 1 << 20;

/// Starts the detector now if covered code arrived after threads already run (a `dlopen`ed library):
/// the threads that exist are not sampled, the ones created later are.
pub fn covered_code_arrived() {
    if is_running() {
        if let Some(found) = sandbox_scan::scan_new_modules() {
            switch_off(&found.to_string(), false);
        }
    }
    if thread_count() > 1 {
        before_thread_create();
    }
    sampler::refresh();
}

fn thread_count() -> u32 {
    tracer::read_now().threads.unwrap_or(1)
}

fn start(opts: &Options) -> bool {
    // A module that installs seccomp filters with a `syscall` instruction of its own: the filter
    // could kill the process at our handler's first system call, and nothing tells us when it is in.
    if let Some(found) = sandbox_scan::scan_new_modules() {
        log::warn(format_args!("{found}; race detection is off"));
        sampler::close();
        fd::close_all_own();
        return false;
    }
    unwind_info::refresh();
    // Traced from the start (a supervisor's PTRACE_TRACEME child): sampling begins paused.
    if tracer::open() {
        check_tracer(tracer::read());
        STATUS_READ_NS.store(thread::monotonic_ns(), Ordering::Relaxed);
    }
    reporter::on_tick(on_tick);
    reporter::on_tick_idle(|| !sampler::needs_reporter());
    signal::on_sampling(sampler::stop, sampler::hold);
    thread::on_program_thread_ending(program_thread_ending);
    spawn_point::init();
    spawn_point::set_filtered(tracer::read().seccomp);
    LOADED.store(code::loaded_fingerprint(), Ordering::Relaxed);
    sampler::on_covered_signal(covered_signal);
    reporter::start(opts, spawn_point::possible());
    if let Err(err) = sampler::start(opts) {
        log::warn(format_args!("{err}; race detection disabled"));
        sampler::close();
        reporter::shutdown();
        fd::close_all_own();
        return false;
    }
    signal::virtualise_thread_mask();
    handlers::adopt_installed();
    stacks::record_current_thread(thread::register_current());
    OWNER.store(thread::getpid(), Ordering::Release);
    true
}

/// Runs in every thread created through the interposer, before the program's start routine.
pub fn thread_hook(start: &thread::ThreadStart) {
    signal::set_trap_blocked_at_start(start.trap_blocked);
    if !is_running() {
        // Detection is off: the thread's mask stays real (a `SIGTRAP` sent to the process must find the
        // threads that take it), as its creator handed it on.
        return;
    }
    // Known before `SIGTRAP` leaves the kernel's mask: a `SIGTRAP` the thread then takes is judged by its
    // recorded mask, not passed to the program's default action.
    let slot = thread::register_current();
    // A mask given with `pthread_attr_setsigmask_np` is in the kernel already: keep SIGTRAP out of it.
    signal::virtualise_thread_mask();
    stacks::thread_started(slot, start.stack, start.alt_stack);
}

/// The program joined a thread: when it is the only one left, the reporter rests now. Threads that
/// end at the same moment each count the other as they end (glibc takes a thread off its count only
/// after racewatch's hook returned), so neither may have seen itself as the last but one; once a join
/// returned, the joined thread is off the count.
pub fn after_join() {
    if confined::here() {
        return;
    }
    if single_threaded_program() {
        reporter::back_to_one_thread();
        thread::wait_ended_released(100);
    } else if is_running() {
        reporter::wake_if_wanted();
    }
}

/// Before a call the kernel refuses to a multithreaded process (`unshare` of a user namespace, `setns`):
/// a reporter the program kept through its returns to one thread ([`reporter::back_to_one_thread`]) is
/// stopped first, so the process is single-threaded when the program is.
pub fn before_single_threaded_call() {
    if single_threaded_program() {
        reporter::rest();
    }
}

/// Whether the detector runs and the program itself (glibc's count) is down to one thread.
fn single_threaded_program() -> bool {
    is_running() && thread::program_threads() == Some(1)
}

/// A program thread is ending, leaving `left` of the program's threads. With one left, nothing can
/// race, and the process must look single-threaded to the kernel and to `/proc` (no reporter thread)
/// until the program creates a thread again ([`before_thread_create`]). With none left, glibc's `exit(0)`
/// follows.
fn program_thread_ending(left: u32) {
    match left {
        0 => process_exiting(),
        1 if is_running() => reporter::back_to_one_thread(),
        _ if is_running() => reporter::wake_if_wanted(),
        _ => {}
    }
}

/// The reporter thread's periodic check (every 100 ms, or sooner while a thread runs alone); returns the
/// ms until the next.
fn on_tick() -> u32 {
    if let Some(why) = signal::step_aside_requested() {
        stepped_aside(why);
    }
    // A module `dlopen`ed since (no callback of ours runs when it has no covered code).
    if let Some(found) = sandbox_scan::scan_new_modules() {
        sandbox_capable(&found);
    }
    let now = thread::monotonic_ns();
    // Reading /proc/self/status costs tens of µs: once per period, not at every wake (a pause, a
    // reporter started again after the program ran on one thread), which the detector's start covers.
    let last = STATUS_READ_NS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < status_period_ns() {
        return u32::MAX;
    }
    STATUS_READ_NS.store(now, Ordering::Relaxed);
    let status = tracer::read();
    if status.only_caller_alive && !thread::runtime_threads_uncounted() {
        // Every thread of the program's has ended and glibc, which counted the reporter as one of them
        // (its count could not be found), did not end the process: the reporter does it in its place.
        reporter::exit_in_place_of_the_last_thread();
    }
    check_tracer(status);
    u32::MAX
}

/// The loader's list of modules as [`covered_signal`] last saw it ([`code::loaded_fingerprint`]).
static LOADED: AtomicU64 = AtomicU64::new(0);

/// A sampling signal landed in covered code at `regs` (the reporter thread is started only when it has
/// work): while there is none, its periodic look is taken here, once per
/// [`status_period_ns`] — a tracer that attached, a module loaded or unloaded (to be scanned for
/// seccomp filters), a filter in force — and a reporter that has work is started if this thread may
/// create one here ([`reporter::start_from_signal`]). Async-signal-safe.
fn covered_signal(regs: &signal::Regs, now: u64) {
    let last = STATUS_READ_NS.load(Ordering::Relaxed);
    if !reporter::has_thread()
        && now.saturating_sub(last) >= status_period_ns()
        && STATUS_READ_NS.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        let status = tracer::read();
        spawn_point::set_filtered(status.seccomp);
        if status.tracer.is_some() {
            TRACER_NOTED.store(true, Ordering::Release);
        }
        let loaded = code::loaded_fingerprint();
        if status.tracer.is_some() || LOADED.swap(loaded, Ordering::AcqRel) != loaded {
            reporter::request();
        }
    }
    reporter::start_from_signal(regs, now);
    // Paused at once once the reporter runs (each signal until then is a stop the tracer sees); it logs
    // the tracer and resumes sampling when the tracer is gone. Without it, signals go on until one can
    // start it: paused, nothing would resume them.
    if TRACER_NOTED.load(Ordering::Acquire) && reporter::has_thread() {
        sampler::set_paused(true);
    }
}

/// A sampling signal saw a tracer that the reporter has not seen gone since.
static TRACER_NOTED: AtomicBool = AtomicBool::new(false);

/// When the reporter's check last read `/proc/self/status` (monotonic ns; 0: never).
static STATUS_READ_NS: AtomicU64 = AtomicU64::new(0);
/// How often it reads it: ten sample periods, from 10 ms (the debug and test rates) to 95 ms (the
/// default, about the reporter tick's period). Until a tracer that attached is seen, every sampling
/// signal stops the process for it: at the debug rate a 95 ms period showed a `PTRACE_SEIZE`ing parent
/// about 240 stops, 10 ms about 25, for a read of tens of µs per period.
fn status_period_ns() -> u64 {
    options::get().sample_period_us.saturating_mul(10_000).clamp(10_000_000, 95_000_000)
}

/// Whether [`check_tracer`] last saw a tracer (a sampling signal may have paused sampling first).
static TRACER_SEEN: AtomicBool = AtomicBool::new(false);

/// Pauses sampling while a tracer (a debugger, `strace`, a ptrace supervisor) is attached: every signal
/// of the runtime's would stop the process for it. Sampling resumes when the tracer detaches.
fn check_tracer(status: tracer::Status) {
    let tracer = status.tracer;
    sampler::set_paused(tracer.is_some());
    TRACER_NOTED.store(tracer.is_some(), Ordering::Release);
    if TRACER_SEEN.swap(tracer.is_some(), Ordering::AcqRel) != tracer.is_some() && options::get().verbosity >= 1 {
        match tracer {
            Some(pid) => log::line(format_args!("a tracer is attached (pid {pid}): sampling paused")),
            None => log::line(format_args!("the tracer detached: sampling resumed")),
        }
    }
}

/// A signal handler stepped aside while the program reads `SIGTRAP` from a signalfd (a `kill()` of
/// `SIGTRAP` while the program's threads block it, or a `SIGTRAP` raised in a thread that blocks it):
/// sampling is stopped already; detection goes off for good. Runs in the reporter thread, which
/// ends after this round.
fn stepped_aside(why: signal::StepAside) {
    if STATE.compare_exchange(RUNNING, OFF, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    signal::wait_until_quiet(1000);
    sampler::close();
    reporter::stop_after_this_round();
    let what = match why {
        signal::StepAside::SentToProcess => "a SIGTRAP sent to the process reached a thread that blocks it",
        signal::StepAside::PendingOnThread => "a SIGTRAP sent to a thread that blocks it waits there",
    };
    log::warn(format_args!(
        "{what} while the program reads SIGTRAP from a signalfd: its threads' masks must be real for the \
         signalfd to see it alone; race detection is off from here on"
    ));
}

/// The reporter's tick found a newly loaded module that installs seccomp filters with its own
/// `syscall` instruction: detection goes off for good. Runs in the reporter thread, which ends after
/// this round.
fn sandbox_capable(found: &sandbox_scan::Finding) {
    thread::stop_syscalls_in_program_threads();
    if STATE.compare_exchange(RUNNING, OFF, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    signal::mute();
    signal::wait_until_quiet(1000);
    sampler::close();
    reporter::stop_after_this_round();
    log::warn(format_args!("{found}; race detection is off from here on"));
}

/// Switches detection off for good, with one warning naming `why`. `closing_ours`: the program is
/// closing our descriptors itself (we must not close them too: the numbers may be reused at once).
pub fn switch_off(why: &str, closing_ours: bool) {
    let was = STATE.swap(OFF, Ordering::AcqRel);
    if was != RUNNING {
        return;
    }
    signal::mute();
    signal::wait_until_quiet(1000);
    if closing_ours {
        perf::retire();
        fd::forget_all_own();
    } else {
        sampler::close();
    }
    reporter::shutdown();
    log::warn(format_args!("{why}; race detection is off from here on"));
}

/// The program is about to set its descriptor limit (`RLIMIT_NOFILE`) to `soft`/`hard`. Descriptors of
/// the runtime's go above the new soft limit from now on; and when the program lowers the hard limit
/// before the detector started (a server sizing itself for its connections, as memcached does), the
/// detector's perf events are opened now, while there is still room above the program's range, to be
/// inherited by the threads it creates later. Detection then works under that limit without taking
/// a descriptor the program could have opened.
pub fn before_nofile_limit(soft: u64, hard: u64) {
    if STATE.load(Ordering::Acquire) != IDLE || is_sandboxed() || !registry::with_index(|i| i.functions() > 0) {
        return;
    }
    fd::set_floor(soft);
    if fd::nofile_hard_limit().is_some_and(|current| hard < current) {
        // A failure here is reported when the detector starts (it tries again then).
        let _ = sampler::open_events(options::get());
    }
}

/// The program could not create a thread for lack of room (`EAGAIN`: `RLIMIT_NPROC`, the system's
/// thread limit) while the reporter thread takes one: the reporter prints what is queued and ends, with
/// one warning, and the program gets the room back. Reports found later are printed at exit by the
/// exiting thread. True when a reporter thread was ended, or one of racewatch's threads that ended a
/// moment ago may still count (the program's call is then tried again).
pub fn give_back_reporter_thread() -> bool {
    if !is_running() {
        return false;
    }
    if !reporter::has_or_starts_thread() {
        // A runtime thread that just ended may still count for the kernel: tried again a moment later.
        return thread::runtime_thread_leaving();
    }
    reporter::shutdown();
    log::warn(format_args!(
        "the program reached its limit of threads (EAGAIN): racewatch's reporter thread ended to give it \
         room; races found from now on are reported at exit"
    ));
    true
}

/// The program wants a hardware breakpoint and every debug register is taken: one of the detector's
/// watchpoints is given back. True when one was (the program's call is then tried again).
pub fn give_back_watchpoint() -> bool {
    if !is_running() || !watch::give_back_one() {
        return false;
    }
    if watch::open_count() == 0 {
        switch_off("the program uses every hardware debug register", false);
    } else if options::get().verbosity >= 1 {
        log::line(format_args!("gave a hardware watchpoint back to the program ({} left)", watch::open_count()));
    }
    true
}

/// A seccomp filter the process inherited kills `call`, a system call racewatch makes (a probe child
/// died from `signal` making it, [`sys::seccomp_probe`]): racewatch stays out of the kernel's way for
/// the whole process, as after the program's own sandbox, with one line. Call at start-up.
pub fn inherited_filter_kills(call: &str, signal: i32) {
    SANDBOXED.store(true, Ordering::Release);
    thread::stop_syscalls_in_program_threads();
    let _ = STATE.compare_exchange(IDLE, OFF, Ordering::AcqRel, Ordering::Acquire);
    log::warn(format_args!(
        "a seccomp filter this process runs under kills the system call {call} that racewatch makes (signal {signal} \
         in a probe process); race detection is off"
    ));
}

/// The program enters a seccomp sandbox with `call` (strict mode, or a filter): the calling thread's own
/// (it and the threads it creates from then on), or every thread's (`whole_process`: a filter with
/// `SECCOMP_FILTER_FLAG_TSYNC`). A thread's own sandbox leaves the rest of the process sampled: the
/// thread is listed as confined first ([`confined`]), and racewatch makes no system call in it from then
/// on. Every thread's, or a list with no room, switches detection off for the process, with one line.
pub fn sandbox_call<R: Copy + Into<i64>>(whole_process: bool, call: impl FnOnce() -> R) -> R {
    let was_confined = confined::here();
    if was_confined && !whole_process {
        // A further layer on a thread racewatch already leaves alone: nothing changes, and racewatch's own
        // system calls (even `gettid`) may be what the first layer kills.
        return call();
    }
    if whole_process || is_sandboxed() || !confined::list_current(thread::gettid()) {
        entering_sandbox();
        return call();
    }
    if !was_confined && options::get().verbosity >= 1 {
        log::line(format_args!(
            "a thread enters a seccomp sandbox of its own: racewatch leaves it (and the threads it creates) unsampled"
        ));
    }
    let rc = call();
    if rc.into() < 0 && !was_confined {
        confined::unlist_current();
    }
    rc
}

/// The program is about to install a seccomp filter or enter strict mode for the whole process.
fn entering_sandbox() {
    if SANDBOXED.swap(true, Ordering::AcqRel) {
        return;
    }
    thread::no_new_runtime_threads(1000);
    thread::stop_syscalls_in_program_threads();
    switch_off("the program enters a seccomp sandbox", false);
}

/// The program is about to put a descriptor of its own where one of ours is, and ours found no other
/// free number to move to.
pub fn descriptors_taken() {
    switch_off("the program took the descriptor numbers of the runtime's perf events and left none free", true);
}

/// The program found no free descriptor number (`EMFILE`) while racewatch's sit in its range (a limit
/// with no room above it): racewatch steps aside and gives their numbers back, so the program opens as
/// many descriptors as without racewatch.
pub fn descriptors_exhausted() {
    if !is_running() {
        return;
    }
    fd::release_all_own(|| {
        switch_off(
            "the program used every descriptor number its limit allows, racewatch's too (RLIMIT_NOFILE left no \
             room above it): they are the program's now",
            true,
        )
    });
}

/// `pthread_atfork` child handler: leave the parent's detector behind.
extern "C" fn after_fork_in_child() {
    crate::parent_view::note_fork();
    fd::note_fork_table();
    crate::sys::setxid::forget_after_fork();
    // The kernel does not pass `mlockall(MCL_FUTURE)` on to a child.
    stacks::set_locking_future(false);
    // A child starts with no signal pending: not the one kept for the parent's process either; the
    // parent's waiters are not its threads.
    crate::sys::hand_on::forget_parked_trap();
    crate::sys::trap_wait::forget_after_fork();
    if confined::here() {
        // Forked by a thread in a seccomp sandbox of its own: the child's one thread inherits it, and
        // every thread the child makes will too. racewatch makes no system call in this process.
        SANDBOXED.store(true, Ordering::Release);
        thread::stop_syscalls_in_program_threads();
        STATE.store(OFF, Ordering::Release);
        return;
    }
    signal::note_process();
    sandbox_scan::forget_after_fork();
    unwind_info::forget_readers_after_fork();
    registry::forget_readers_after_fork();
    if STATE.load(Ordering::Acquire) == RUNNING {
        // The child has no perf event (they follow threads, not processes) and no pending signal: until
        // it starts its own detector (its second thread), SIGTRAP is the program's in the kernel again
        // (`/proc/self/status`'s SigCgt, an `exec`), as if racewatch were not there.
        signal::hand_back();
        fd::close_all_own();
        sampler::forget_after_fork();
        watch::forget_after_fork();
        queue::reset_after_fork();
        reporter::forget_after_fork();
        thread::forget_runtime_threads();
        stacks::forget_after_fork();
        tracer::forget_after_fork();
        TRACER_SEEN.store(false, Ordering::Release);
        TRACER_NOTED.store(false, Ordering::Release);
        thread::forget_known_threads();
        stats::reset();
        STATS_PRINTED.store(false, Ordering::Release);
        profile::reset_after_fork();
        crate::bias::reset();
        crate::sharing::reset();
        OWNER.store(0, Ordering::Release);
        STATE.store(IDLE, Ordering::Release);
    } else if STATE.load(Ordering::Acquire) == STARTING {
        STATE.store(IDLE, Ordering::Release);
    }
}

/// Registers the fork handler (call once, from the constructor).
pub fn init_fork_handling() {
    thread::at_fork_child(after_fork_in_child);
    crate::sys::fork::guard_module_walks();
}

/// The exit hook: stop sampling, print what is queued (bounded), then `stats`.
pub fn at_exit() {
    if is_sandboxed() || confined::here() {
        return;
    }
    if is_running() && OWNER.load(Ordering::Acquire) == thread::getpid() {
        sampler::stop();
        reporter::shutdown();
    }
    if prints_stats() {
        print_stats();
    }
    write_profile();
}

/// With `coverage_path`, writes this process's run-time coverage profile (at exit or `halt_on_error`).
pub fn write_profile() {
    let Some(prefix) = options::get().coverage_path.as_deref() else { return };
    if !profile::is_on() || is_sandboxed() || !accounts() {
        return;
    }
    let covered = registry::lock().module_paths_ever();
    if let Err(err) = profile::write(prefix, &covered) {
        log::warn(format_args!("coverage_path: cannot write {prefix}.{}: {err}", thread::getpid()));
    }
}

/// Whether this process prints `stats=1` counters.
fn prints_stats() -> bool {
    options::get().stats && accounts()
}

/// Whether this process gives an account of itself at exit (stats, coverage profile): the one running
/// the detector, or a single-threaded original process with covered code (idle); a forked child only
/// when it ran its own detector.
fn accounts() -> bool {
    let ours = OWNER.load(Ordering::Acquire) == thread::getpid();
    let idle_original =
        OWNER.load(Ordering::Acquire) == 0 && is_original_process() && stats::get(stats::Counter::CoveredFunctions) > 0;
    ours || idle_original
}

static STATS_PRINTED: AtomicBool = AtomicBool::new(false);
static STATS_TEXT: spin::Mutex<FixedBuf<16384>> = spin::Mutex::new(FixedBuf::new());

/// Prints the `stats=1` block, once per process: at exit, at `halt_on_error`, or when a fatal signal
/// arrives. Async-signal-safe (fixed buffer, no allocation).
pub fn print_stats() {
    if STATS_PRINTED.swap(true, Ordering::AcqRel) {
        return;
    }
    stats::add(stats::Counter::SkippedForStack, signal::skipped_for_stack());
    stats::add(stats::Counter::MemoryWaits, crate::sys::alloc::waits());
    stats::add(stats::Counter::HeapBlocksLeaked, crate::sys::heap::leaked());
    stats::add(stats::Counter::HostStackBytes, stacks::host_high_water() as u64);
    stats::add(stats::Counter::RuntimeStackBytes, stacks::runtime_stack_high_water() as u64);
    let Some(mut text) = STATS_TEXT.try_lock() else { return };
    text.clear();
    let _ = stats::render_into(&mut *text);
    log::write(text.as_str());
}

/// A terminating signal arrived (`stats=1`'s handler, [`fatal`]): the process is about to die.
fn on_fatal_signal() {
    if !is_sandboxed() && prints_stats() {
        print_stats();
    }
}

/// With `stats=1`, prints the counters also when the program dies of a signal (call from the
/// constructor, once the covered code is known).
pub fn watch_fatal_signals() {
    if options::get().stats && stats::get(stats::Counter::CoveredFunctions) > 0 {
        fatal::install(on_fatal_signal);
    }
}

static ORIGINAL_PID: AtomicI32 = AtomicI32::new(0);

/// Remembers the process the runtime was loaded into (a forked child that never started its own
/// detector prints no stats of its own).
pub fn note_original_process() {
    ORIGINAL_PID.store(thread::getpid(), Ordering::Release);
}

fn is_original_process() -> bool {
    ORIGINAL_PID.load(Ordering::Acquire) == thread::getpid()
}
