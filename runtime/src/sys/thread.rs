//! Thread identity, time and stalling for the signal path (all async-signal-safe),
//! and the set of the runtime's own threads, which are never sampled.

use crate::sys::{creation, raw, real};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The kernel thread id of the caller.
pub fn gettid() -> i32 {
    raw::gettid()
}

/// The process id of the caller (a forked child sees its own).
pub fn getpid() -> i32 {
    raw::getpid()
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall, unless the time-stamp counter may trap).
pub fn monotonic_ns() -> u64 {
    let ts = clock(libc::CLOCK_MONOTONIC);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Set once the program made the time-stamp counter fault in one of its threads
/// (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`, inherited by the threads it creates, a runtime thread
/// included): the vDSO's clocks read it with `rdtsc`, and a fault in racewatch's handler (where every
/// signal is held) would kill the process. racewatch's clocks are system calls from then on.
static TSC_MAY_FAULT: AtomicBool = AtomicBool::new(false);

/// The program is about to make the time-stamp counter fault (see [`TSC_MAY_FAULT`]).
pub fn tsc_may_fault() {
    TSC_MAY_FAULT.store(true, Ordering::Release);
}

/// `clock_gettime(clock)`: libc's own (the vDSO's; never a clock library the program brings, see
/// [`super::own_imports`]), or the system call once the time-stamp counter may fault. Async-signal-safe.
pub fn clock(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    if TSC_MAY_FAULT.load(Ordering::Acquire) {
        raw::syscall6(libc::SYS_clock_gettime, [clock as u64, &mut ts as *mut libc::timespec as u64, 0, 0, 0, 0]);
    } else {
        // SAFETY: `ts` is a live timespec; the clocks racewatch asks for always exist.
        unsafe { libc::clock_gettime(clock, &mut ts) };
    }
    ts
}

/// Sleeps `us` microseconds of wall time, resuming after interruptions. Never a cancellation point:
/// a `pthread_cancel` cannot act inside the runtime's signal handler.
pub fn sleep_us(us: u64) {
    raw::sleep_ns(us.saturating_mul(1000));
}

/// Waits `us` microseconds of wall time without sleeping or yielding: no voluntary context switch a
/// program could see in `/proc/<pid>/status` (a busy-polling thread that must never block), and a wait
/// that lasts what it was asked whatever the machine's load. It spins on the vDSO's clock with `pause`.
/// (A `sched_yield` between reads let the other threads run on a loaded machine, but each yield could
/// give away a whole time slice: armed watches took 16–23 ms instead of about 0.3 ms under the test
/// suite's load.)
pub fn stall_us(us: u64) {
    let end = monotonic_ns().saturating_add(us.saturating_mul(1000));
    while monotonic_ns() < end {
        std::hint::spin_loop();
    }
}

/// Waits `us` microseconds of wall time without sleeping, giving the CPU meanwhile to any thread that wants
/// it ([`raw::yield_cpu`]): the threads that may touch the watched memory run on a loaded machine, as
/// they would during a sleep, but the waiting thread never blocks, so no voluntary context switch
/// (`ru_nvcsw`, `voluntary_ctxt_switches`) is racewatch's. With no other runnable thread it spins.
pub fn yield_us(us: u64) {
    let end = monotonic_ns().saturating_add(us.saturating_mul(1000));
    while monotonic_ns() < end {
        raw::yield_cpu();
    }
}

/// Waits until `done()` holds or `us` microseconds passed, without blocking; whether it holds. It spins
/// for the first [`SPIN_NS`] (the thread it waits for runs on another CPU), then yields the CPU
/// ([`raw::yield_cpu`]) between checks (it may need this one). For racewatch's short waits on its own
/// threads at the detector's start (a helper's end, a join): a waiting thread that never blocks shows
/// no voluntary context switch of racewatch's (set 42 rt2: a latency-sensitive main thread counted 3 in
/// its first `pthread_create`).
pub fn yield_until(us: u64, done: &mut dyn FnMut() -> bool) -> bool {
    let start = monotonic_ns();
    let end = start.saturating_add(us.saturating_mul(1000));
    loop {
        if done() {
            return true;
        }
        let now = monotonic_ns();
        if now >= end {
            return false;
        }
        if now - start < SPIN_NS {
            std::hint::spin_loop();
        } else {
            raw::yield_cpu();
        }
    }
}

/// How long [`yield_until`] spins before it yields: a helper thread's start, one system call and its
/// end take 30–100 us on an idle CPU.
const SPIN_NS: u64 = 300_000;

/// glibc's count of the process's threads (`__nptl_nthreads`, exported to libthread_db as
/// `GLIBC_PRIVATE`): the thread whose exit brings it to zero ends the process with `exit(0)`.
fn libc_thread_count() -> Option<&'static std::sync::atomic::AtomicU32> {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let addr = *COUNT.get_or_init(|| {
        // SAFETY: dlvsym with NUL-terminated literals; the result is only an address.
        unsafe { libc::dlvsym(libc::RTLD_DEFAULT, c"__nptl_nthreads".as_ptr(), c"GLIBC_PRIVATE".as_ptr()) as usize }
    });
    // SAFETY: a non-null result is glibc's `unsigned int __nptl_nthreads`, a static that lives as long as
    // the process and that glibc itself only changes with atomic operations.
    (addr != 0 && addr % 4 == 0).then(|| unsafe { std::sync::atomic::AtomicU32::from_ptr(addr as *mut u32) })
}

/// Whether the runtime threads are left out of glibc's thread count (see [`spawn_runtime_thread`]).
pub fn runtime_threads_uncounted() -> bool {
    libc_thread_count().is_some()
}

/// The program's threads as glibc counts them (runtime threads are off the count); `None` where the
/// count cannot be found.
pub fn program_threads() -> Option<u32> {
    libc_thread_count().map(|count| count.load(Ordering::Acquire))
}

/// Runs a runtime thread's body, counted again by glibc before it returns (its exit takes it off).
extern "C" fn runtime_thread_main(body: *mut libc::c_void) -> *mut libc::c_void {
    note_own_stack();
    STARTING_THREADS.fetch_sub(1, Ordering::SeqCst);
    take_setxid();
    // SAFETY: `spawn_runtime_thread` passes exactly such a function pointer.
    let body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void = unsafe { std::mem::transmute(body) };
    let result = body(std::ptr::null_mut());
    counted_again_or_park();
    result
}

/// The same on a work stack of racewatch's (see [`crate::sys::stacks::run_on_work_stack`]): `slot` is
/// the work stack's, whose body [`WORK_BODY`] holds.
extern "C" fn runtime_thread_on_work_stack(slot: *mut libc::c_void) -> *mut libc::c_void {
    note_own_stack();
    STARTING_THREADS.fetch_sub(1, Ordering::SeqCst);
    take_setxid();
    let slot = slot as usize;
    let body = WORK_BODY[slot].load(Ordering::Acquire);
    // SAFETY: `spawn_runtime_thread` stored exactly such a function pointer for this slot.
    let body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void = unsafe { std::mem::transmute(body) };
    let mut result = std::ptr::null_mut();
    crate::sys::stacks::run_on_work_stack(slot, &mut || result = body(std::ptr::null_mut()));
    counted_again_or_park();
    result
}

/// The glibc stack of the calling runtime thread is racewatch's footprint ([`super::budget`]): the
/// mapping that holds its thread record, at most the largest size [`make_runtime_thread`] asks for.
fn note_own_stack() {
    // SAFETY: `pthread_self` only reads the thread pointer.
    let record = unsafe { libc::pthread_self() } as usize;
    super::budget::note_own_stack(record, with_tls_room(RUNTIME_STACK, RUNTIME_STACK / 2).next_multiple_of(PAGE));
}

/// A runtime thread takes glibc's `SIGSETXID` (all it lets through): `setuid` and its kin wait until
/// every thread glibc made has answered it ([`crate::sys::setxid`]). glibc's handler makes one system
/// call and touches nothing of racewatch's.
fn take_setxid() {
    raw::sigprocmask(libc::SIG_UNBLOCK, Some(crate::sys::setxid::SIGSETXID_BIT));
}

/// The body of the runtime thread that has work stack `slot`.
static WORK_BODY: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

/// A runtime thread about to end is counted by glibc again (its exit takes it off the count). Not when
/// the count is 0: every program thread has been taken off it, so the last one is in glibc's `exit(0)`
/// (whose exit hooks end this thread: racewatch's destructor drains the reporter). Counted again then,
/// this thread's own end would take the count to 0 once more, and glibc would run `exit(0)` here too:
/// the second exit ended the process before the first had flushed the program's `stdout` (set 31 p03,
/// an `atexit` handler's line lost in 2 runs of 30). The thread stays then, parked, until the process
/// is gone; [`join_for`] takes it as ended.
fn counted_again_or_park() {
    let Some(count) = libc_thread_count() else { return };
    let mut seen = count.load(Ordering::Acquire);
    while seen != 0 {
        match count.compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => seen = now,
        }
    }
    // SAFETY: pthread_self has no preconditions.
    PARKED_FOR_EXIT.store(unsafe { libc::pthread_self() }, Ordering::Release);
    static NEVER: AtomicU32 = AtomicU32::new(0);
    loop {
        // Every signal but glibc's `SIGSETXID` is blocked here; its handler returns into this wait.
        raw::syscall6(
            libc::SYS_futex,
            [NEVER.as_ptr() as u64, (libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG) as u64, 0, 0, 0, 0],
        );
    }
}

/// The runtime thread parked while the process exits ([`counted_again_or_park`]); 0: none.
static PARKED_FOR_EXIT: AtomicU64 = AtomicU64::new(0);

/// Starts a runtime thread running `body` with every signal blocked for its whole life but glibc's
/// `SIGSETXID` (see [`take_setxid`]), and no racewatch start-up of its own (the real `pthread_create`).
/// Returns its handle.
/// Its stack is the smallest glibc allows, and it runs `body` on a work stack of racewatch's (see
/// [`crate::sys::stacks::run_on_work_stack`]); a process whose static TLS leaves no room in that gets
/// a 256 KiB stack of glibc's instead, as before.
///
/// The thread is taken off glibc's count of threads while it runs: when the program's last thread
/// returns or calls `pthread_exit` (a `main` that ended with `pthread_exit` first), glibc ends the process
/// with `exit(0)` in that thread, its `atexit` handlers and stdio flushing with the program's own
/// descriptors, exactly as without racewatch; a runtime thread never keeps a finished program alive.
pub fn spawn_runtime_thread(body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void) -> Option<libc::pthread_t> {
    spawn_runtime_thread_with(body, true)
}

/// Address space the size of the glibc stack of the warm-up thread ([`spawn_small_runtime_thread`]),
/// mapped before `main` as glibc maps a stack without a guard page, and unmapped right before that
/// thread is created: glibc's mapping, which it keeps for the reporter thread, takes its place, so
/// the program's first `pthread_create` changes `VmSize` as without racewatch. 0 when none.
static SMALL_STACK_PLACE: AtomicUsize = AtomicUsize::new(0);

fn small_stack_len() -> usize {
    small_stack_size().next_multiple_of(PAGE)
}

/// The glibc stack the warm-up thread and the reporter thread ask for when the reporter works on a stack
/// of racewatch's: the smallest glibc maps, which glibc keeps for the reporter and gives no program
/// thread (a kept stack goes to a thread asking for up to 4 times less, and a program thread's request
/// with glibc's default guard page is larger); more only where the static thread-local storage leaves
/// less than [`SMALL_STACK_LEFT`] of it ([`with_tls_room`]). A C program's storage takes 8 KiB of the 16:
/// when that room was added whenever it took more than half, glibc handed the kept 24 KiB stack to the
/// program's first thread asking for `PTHREAD_STACK_MIN` (set 33 p28: `pthread_getattr_np` said 20608
/// bytes instead of 16384).
fn small_stack_size() -> usize {
    with_tls_room(libc::PTHREAD_STACK_MIN, SMALL_STACK_LEFT)
}

/// What the small stack must leave the thread below glibc's thread-local storage: its start, the jump to
/// the work stack, and a frame of glibc's `SIGSETXID` handler (the one signal it takes) with the widest
/// `xsave` state.
const SMALL_STACK_LEFT: usize = 6 << 10;

/// A glibc stack of `size` bytes that leaves the thread at least `left` of them: `size`, or `size` with
/// the room of the static thread-local storage added where the rest would be less.
fn with_tls_room(size: usize, left: usize) -> usize {
    let room = tls_room();
    if size.saturating_sub(room) < left {
        size + room
    } else {
        size
    }
}

/// What glibc takes from the top of every thread stack it maps besides the stack itself: the static
/// thread-local storage (the `__thread` blocks of the program and the libraries it started with) and a
/// page (`__pthread_get_minstack`, `GLIBC_PRIVATE`, less `PTHREAD_STACK_MIN`). A program with a 240 KiB
/// `__thread` array left racewatch's reporter 16 KiB of its 256 KiB stack, and it overflowed (set 32
/// p12: `SIGSEGV` in 3 of 5 runs at the default options, 5 of 5 at the debug rate). 0 where it cannot be
/// found; found once, before `main` ([`note_static_tls`]), never in a signal handler.
static TLS_ROOM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Finds [`TLS_ROOM`] (call outside signal handlers: it asks the loader).
pub fn note_static_tls() {
    TLS_ROOM.get_or_init(|| {
        // SAFETY: dlvsym with NUL-terminated literals; the result is only an address.
        let addr =
            unsafe { libc::dlvsym(libc::RTLD_DEFAULT, c"__pthread_get_minstack".as_ptr(), c"GLIBC_PRIVATE".as_ptr()) };
        if addr.is_null() {
            return 0;
        }
        // SAFETY: glibc's `size_t __pthread_get_minstack(const pthread_attr_t *)`, which reads nothing of
        // the attributes; they are initialised before and destroyed after.
        unsafe {
            let minstack: extern "C" fn(*const libc::pthread_attr_t) -> usize = std::mem::transmute(addr);
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            let min = minstack(&attr);
            libc::pthread_attr_destroy(&mut attr);
            min.saturating_sub(libc::PTHREAD_STACK_MIN)
        }
    });
}

fn tls_room() -> usize {
    TLS_ROOM.get().copied().unwrap_or(0)
}

/// Before `main`: maps the place of the warm-up thread's stack ([`SMALL_STACK_PLACE`]).
pub fn reserve_small_stack() {
    if SMALL_STACK_PLACE.load(Ordering::Acquire) != 0 {
        return;
    }
    note_static_tls();
    super::budget::before_mapping(small_stack_len());
    // A fresh private anonymous mapping without an address hint.
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let addr = super::raw::mmap_anonymous(0, small_stack_len(), rw, libc::MAP_PRIVATE | libc::MAP_STACK);
    if addr != libc::MAP_FAILED {
        SMALL_STACK_PLACE.store(addr as usize, Ordering::Release);
        super::budget::note_own(addr as usize, small_stack_len());
    } else {
        super::budget::mapped();
    }
}

fn hand_back_small_stack() {
    let addr = SMALL_STACK_PLACE.swap(0, Ordering::AcqRel);
    if addr != 0 {
        // The mapping `reserve_small_stack` made, which nothing uses.
        raw::munmap(addr, small_stack_len());
    }
}

/// [`spawn_runtime_thread`] for a body that needs no more than the smallest stack (`work`: false): the
/// warm-up thread, which leaves glibc a kept stack of the size the reporter thread asks for.
pub fn spawn_small_runtime_thread(
    body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
) -> Option<libc::pthread_t> {
    spawn_runtime_thread_with(body, false)
}

/// Runtime threads being made: counted from before `pthread_create` until the new thread runs
/// racewatch's first instruction (glibc's start, with its `rseq` and `set_robust_list` calls, is
/// behind it then).
static STARTING_THREADS: AtomicU32 = AtomicU32::new(0);
/// Set once the program puts a seccomp filter on every thread: no runtime thread is made after.
static NO_NEW_THREADS: AtomicBool = AtomicBool::new(false);

/// The program is about to put a seccomp filter on every thread (`TSYNC`): no runtime thread is made
/// from now on, and one being made (in another thread's signal handler) is waited for (about `wait_ms`
/// at most) until glibc's start of it is done: a filter in force by then would answer glibc's system
/// calls there (set 39 p34: `rseq` killed the process, 2 in about 190 runs).
pub fn no_new_runtime_threads(wait_ms: u64) {
    NO_NEW_THREADS.store(true, Ordering::SeqCst);
    let deadline = monotonic_ns() + wait_ms * 1_000_000;
    while STARTING_THREADS.load(Ordering::SeqCst) != 0 && monotonic_ns() < deadline {
        raw::yield_cpu();
    }
}

fn spawn_runtime_thread_with(
    body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    work: bool,
) -> Option<libc::pthread_t> {
    STARTING_THREADS.fetch_add(1, Ordering::SeqCst);
    if NO_NEW_THREADS.load(Ordering::SeqCst) {
        STARTING_THREADS.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    let thread = make_runtime_thread(body, work);
    if thread.is_none() {
        STARTING_THREADS.fetch_sub(1, Ordering::SeqCst);
    }
    thread
}

fn make_runtime_thread(
    body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    work: bool,
) -> Option<libc::pthread_t> {
    // Every signal but glibc's `SIGSETXID` waits while the thread is made (the new one inherits the
    // mask): an identity change in another thread holds the lock `pthread_create` takes until this
    // thread has answered it. In a signal handler, where it stays held, [`crate::sys::setxid`] keeps
    // the two apart.
    let old = raw::sigprocmask(libc::SIG_BLOCK, Some(!crate::sys::setxid::SIGSETXID_BIT));
    let mut thread = None;
    if !work {
        hand_back_small_stack();
        thread = create_runtime_thread(small_stack_size(), 0, runtime_thread_main, body as *mut libc::c_void);
    } else if let Some(slot) = crate::sys::stacks::claim_work_stack() {
        WORK_BODY[slot].store(body as usize, Ordering::Release);
        thread = create_runtime_thread(small_stack_size(), 0, runtime_thread_on_work_stack, slot as *mut libc::c_void);
        if thread.is_none() {
            crate::sys::stacks::release_work_stack(slot);
        }
    }
    if thread.is_none() {
        thread = create_runtime_thread(
            with_tls_room(RUNTIME_STACK, RUNTIME_STACK / 2),
            PAGE,
            runtime_thread_main,
            body as *mut libc::c_void,
        );
    }
    if thread.is_some() {
        if let Some(count) = libc_thread_count() {
            count.fetch_sub(1, Ordering::AcqRel);
        }
    }
    if let Some(old) = old {
        raw::sigprocmask(libc::SIG_SETMASK, Some(old));
    }
    thread
}

const PAGE: usize = 4096;
/// The glibc stack of a runtime thread that works on it (no work stack of racewatch's was free).
const RUNTIME_STACK: usize = 256 << 10;

/// The real `pthread_create` of `entry(arg)` on a glibc stack of `size` bytes with a guard of `guard`.
fn create_runtime_thread(
    size: usize,
    guard: usize,
    entry: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> Option<libc::pthread_t> {
    // SAFETY: attr is initialised before use and destroyed after; the thread handle is written by
    // pthread_create on success.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setstacksize(&mut attr, size);
        libc::pthread_attr_setguardsize(&mut attr, guard);
        let mut thread: libc::pthread_t = 0;
        let rc = real::own_pthread_create(&mut thread, &attr, entry, arg);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0).then_some(thread)
    }
}

/// What a thread created through [`create_hooked`] carries to its start.
#[derive(Clone, Copy)]
struct Start {
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    hook: fn(&ThreadStart),
    info: ThreadStart,
    /// The creating thread's side, for reports.
    creation: creation::Creation,
}

/// What the creating thread knows of a new thread, handed to the hook that runs in it first.
#[derive(Clone, Copy, Debug)]
pub struct ThreadStart {
    /// Whether the program had `SIGTRAP` blocked (virtually) in the creating thread.
    pub trap_blocked: bool,
    /// The size of the new thread's stack.
    pub stack: usize,
    /// The size of the alternate signal stack to give it (0: none).
    pub alt_stack: usize,
    /// Whether the creating thread is confined ([`super::confined`]): the new thread inherits its seccomp
    /// sandbox, and racewatch makes no system call in either (no hook runs).
    pub confined: bool,
}

/// Start records in flight: a fixed pool, so that neither the creating nor the new thread calls
/// `malloc`/`free` for them (glibc's first `free` in a thread gives it a 64 MiB malloc arena).
const RECORDS: usize = 64;
static RECORD_BUSY: [AtomicBool; RECORDS] = [const { AtomicBool::new(false) }; RECORDS];
static RECORD: [spin::Mutex<Option<Start>>; RECORDS] = [const { spin::Mutex::new(None) }; RECORDS];

// SAFETY: a `Start` holds a C function pointer and the program's argument pointer, which the
// program hands to another thread anyway (that is what pthread_create does).
unsafe impl Send for Start {}

/// The real `pthread_create`, with `hook(info)` run in the new thread before `start(arg)`. Falls back
/// to a plain creation when every start record is in flight.
pub fn create_hooked(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    hook: fn(&ThreadStart),
    info: ThreadStart,
) -> libc::c_int {
    let Some(index) =
        RECORD_BUSY.iter().position(|b| b.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        return real::pthread_create(thread, attr, start, arg);
    };
    let creation = if info.confined { creation::Creation::NONE } else { creation::capture() };
    *RECORD[index].lock() = Some(Start { start, arg, hook, info, creation });
    // SAFETY: `racewatch_thread_entry` (below) has the C signature of a start routine.
    let entry: real::StartRoutine = unsafe { std::mem::transmute(racewatch_thread_entry as *const ()) };
    let rc = real::pthread_create(thread, attr, entry, index as *mut libc::c_void);
    if rc != 0 {
        RECORD[index].lock().take();
        RECORD_BUSY[index].store(false, Ordering::Release);
    }
    rc
}

// ---- Starting a hooked thread without a frame on its stack ----
//
// The new thread starts in `racewatch_thread_entry` with the stack as glibc's `start_thread` left it:
// the return address into `start_thread` on top. It calls `thread_enter` (the hook) with that stack
// pointer, then jumps to the program's start routine with the stack exactly as it was: the program's
// frames begin where they would without racewatch (the same recursion depth on a thread's stack), and
// the start routine returns straight into `start_thread` (unwinders, `pthread_exit` and cancellation
// see the frames they see without racewatch). The thread's end is seen by a key's destructor
// ([`super::thread_end`]).

std::arch::global_asm!(
    ".pushsection .text.racewatch_thread,\"ax\",@progbits",
    ".globl racewatch_thread_entry",
    ".hidden racewatch_thread_entry",
    ".type racewatch_thread_entry,@function",
    "racewatch_thread_entry:",
    ".cfi_startproc",
    // rdi: the start record's index; [rsp]: the return address into start_thread.
    "mov rsi, rsp",
    "sub rsp, 8",
    ".cfi_adjust_cfa_offset 8",
    "call {enter}",
    "add rsp, 8",
    ".cfi_adjust_cfa_offset -8",
    // rax: the program's start routine, rdx: its argument.
    "mov rdi, rdx",
    "jmp rax",
    ".cfi_endproc",
    ".size racewatch_thread_entry, . - racewatch_thread_entry",
    ".popsection",
    enter = sym thread_enter,
);

extern "C" {
    fn racewatch_thread_entry();
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
}

/// glibc's `PTHREAD_CANCEL_DISABLE`.
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

/// Holds the calling thread's cancellation off while alive: racewatch's waits in a program thread
/// (joining the reporter, sleeping) are cancellation points, and a `pthread_cancel` the program sent
/// earlier must not end the thread inside racewatch, holding its locks; it stays pending for the
/// program's next cancellation point, as without racewatch. Not a system call.
pub struct NoCancel(libc::c_int);

impl NoCancel {
    pub fn hold() -> NoCancel {
        let mut old = 0;
        // SAFETY: changes only the calling thread's cancel state; `old` is a live out-parameter.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel(old)
    }
}

impl Drop for NoCancel {
    fn drop(&mut self) {
        let mut old = 0;
        // SAFETY: as in `hold`; restores the state the program had.
        unsafe { pthread_setcancelstate(self.0, &mut old) };
    }
}

/// What `racewatch_thread_entry` jumps to (returned in rax, rdx).
#[repr(C)]
struct StartCall {
    start: real::StartRoutine,
    arg: *mut libc::c_void,
}

extern "C" fn thread_enter(index: usize, return_slot: *mut usize) -> StartCall {
    let start = RECORD[index].lock().take().expect("a start record for every hooked thread");
    RECORD_BUSY[index].store(false, Ordering::Release);
    if start.info.confined {
        confined_start(start.info.trap_blocked);
    } else {
        // A thread pointer an ended confined thread left listed is this thread's now.
        super::confined::unlist_current();
        // The program's start routine is entered with the stack as start_thread's call left it: its
        // frames begin right below the return address.
        creation::started(&start.creation, start.info.stack, return_slot as u64 + 8);
        (start.hook)(&start.info);
    }
    StartCall { start: start.start, arg: start.arg }
}

/// The real `pthread_create` in a confined thread ([`super::confined`]): the new thread, which inherits
/// the sandbox, starts with `SIGTRAP` held in the kernel, so that no signal of racewatch's reaches it
/// before it is listed as confined ([`confined_start`]). The only system calls are `rt_sigprocmask`s,
/// which glibc's own thread creation makes too. `trap_blocked`: the program holds `SIGTRAP` here.
pub fn create_confined(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: real::StartRoutine,
    arg: *mut libc::c_void,
    trap_blocked: bool,
) -> libc::c_int {
    let trap = 1u64 << (libc::SIGTRAP - 1);
    let old = raw::sigprocmask(libc::SIG_BLOCK, Some(trap));
    // Held for the program: in its record, or in the kernel (before the detector ran, the mask is real).
    let trap_blocked = trap_blocked || old.is_some_and(|mask| mask & trap != 0);
    let info = ThreadStart { trap_blocked, stack: 0, alt_stack: 0, confined: true };
    let rc = create_hooked(thread, attr, start, arg, |_| {}, info);
    if old.is_some_and(|mask| mask & trap == 0) {
        raw::sigprocmask(libc::SIG_UNBLOCK, Some(trap));
    }
    rc
}

/// A thread a confined thread created lists itself as confined, then lets `SIGTRAP` through as the
/// program has it (held when the list has no room: racewatch's signals then wait there unseen).
fn confined_start(trap_blocked: bool) {
    if super::confined::list_current(0) && !trap_blocked {
        raw::sigprocmask(libc::SIG_UNBLOCK, Some(1u64 << (libc::SIGTRAP - 1)));
    }
}

/// Set once a seccomp filter may be in place: program threads make no system call of racewatch's any
/// more (a filter may kill the process for one).
static NO_SYSCALLS: AtomicBool = AtomicBool::new(false);
/// Set once a thread registered (the detector ran): only then may an ending thread hold anything.
static ANY_KNOWN: AtomicBool = AtomicBool::new(false);

/// Whether racewatch may still make system calls in program threads.
pub fn syscalls_allowed() -> bool {
    !NO_SYSCALLS.load(Ordering::Acquire) && !super::confined::here()
}

/// From now on, threads that end release nothing (no system call): a sandbox may be in place.
pub fn stop_syscalls_in_program_threads() {
    NO_SYSCALLS.store(true, Ordering::Release);
}

/// The calling thread is ending (its start routine returned, it called `pthread_exit` or was cancelled;
/// glibc runs its keys' destructors, [`super::thread_end`]): releases its runtime alternate stack and its
/// known-thread slot. Not for signal handlers. Makes no system call
/// when the detector never ran or a sandbox may be in place.
pub fn thread_ending() {
    if !syscalls_allowed() || !ANY_KNOWN.load(Ordering::Acquire) {
        return;
    }
    let _no_cancel = NoCancel::hold();
    let tid = raw::gettid();
    let ended = ENDED_NEXT.fetch_add(1, Ordering::Relaxed) % ENDED.len();
    ENDED[ended].store(tid, Ordering::Release);
    let slot = known_slot(tid);
    super::stacks::thread_ending(slot);
    if slot.is_some() {
        // Unknown from here on, the thread must not take a `SIGTRAP` sent to the process that the program
        // has blocked in it: racewatch's handler could no longer tell (set 17 p14: one passed on to the
        // process reached an ending thread and took the default action).
        super::signal::make_trap_mask_real();
    }
    if let Some(slot) = slot {
        let _ = KNOWN[slot].compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
    // glibc still counts this thread: what stays is one fewer (0: glibc's `exit(0)` follows).
    let hook = ON_ENDING.load(Ordering::Acquire);
    if let (Some(count), true) = (libc_thread_count(), hook != 0) {
        // SAFETY: ON_ENDING only ever holds a `fn(u32)` stored by `on_program_thread_ending`.
        let hook = unsafe { std::mem::transmute::<usize, fn(u32)>(hook) };
        hook(count.load(Ordering::Acquire).saturating_sub(1));
    }
}

/// The last program threads that ended ([`thread_ending`]), a ring: their ids until
/// [`wait_ended_released`] saw them gone.
static ENDED: [AtomicI32; 8] = [const { AtomicI32::new(0) }; 8];
static ENDED_NEXT: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most `timeout_ms` each) until the program threads that ended lately are gone from the
/// kernel's view ([`wait_gone`]): a join returns before the kernel releases the joined thread, and a
/// thread of a process with racewatch's perf events has their teardown left to do by then, so a listing
/// of `task` right after the join could still show it.
pub fn wait_ended_released(timeout_ms: u64) {
    for slot in &ENDED {
        let tid = slot.swap(0, Ordering::AcqRel);
        if tid != 0 {
            wait_gone(tid, timeout_ms);
        }
    }
}

/// Called as a program thread ends ([`on_program_thread_ending`]).
static ON_ENDING: AtomicUsize = AtomicUsize::new(0);

/// Makes `f(left)` run in each program thread that ends, before it is gone, with the number of the
/// program's threads that stay (by glibc's count, which leaves runtime threads out; never called where
/// that count cannot be found).
pub fn on_program_thread_ending(f: fn(u32)) {
    ON_ENDING.store(f as usize, Ordering::Release);
}

// ---- The program threads the runtime knows ----
//
// A thread is known once it registered here: the thread that started the detector and every thread
// created through the interposed `pthread_create`. The signal handler looks the caller's tid up before
// it touches anything thread-local: a thread made with a raw `clone` (a green-thread runtime's, or one
// sharing its parent's TLS) is not known, and the runtime's own signals are dropped there untouched.
// A thread frees its slot when it ends ([`thread_ending`], run by a key's destructor of glibc's, no
// malloc: [`super::thread_end`]); the slot of a thread that ended unseen is taken over by a
// later registration, or claimed by a later thread start ([`claim_ended`]), once the kernel says the
// tid is gone, and a tid the kernel gave again replaces its stale entry.

/// Slots of the known-thread table.
pub const KNOWN_SLOTS: usize = super::KNOWN_THREADS;
/// How many slots from a tid's home slot it may occupy.
const PROBES: usize = 32;
static KNOWN: [AtomicI32; KNOWN_SLOTS] = [const { AtomicI32::new(0) }; KNOWN_SLOTS];

fn probe(tid: i32) -> impl Iterator<Item = usize> {
    let home = (tid as u32).wrapping_mul(0x9e37_79b9) as usize % KNOWN_SLOTS;
    (0..PROBES).map(move |i| (home + i) % KNOWN_SLOTS)
}

/// Registers the calling thread as known; returns its slot (a slot that an ended thread held before
/// is handed over: the caller may reuse what it left there), or `None` when the table has no room.
pub fn register_current() -> Option<usize> {
    ANY_KNOWN.store(true, Ordering::Release);
    super::thread_end::watch_current();
    let tid = raw::gettid();
    if let Some(slot) = known_slot(tid) {
        return Some(slot);
    }
    for slot in probe(tid) {
        if KNOWN[slot].compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Some(slot);
        }
    }
    probe(tid).find(|&slot| {
        let old = KNOWN[slot].load(Ordering::Acquire);
        old > 0
            && !raw::thread_alive(old)
            && KNOWN[slot].compare_exchange(old, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    })
}

/// A slot marked while its ended thread's leftovers are released ([`claim_ended`]): neither free nor
/// any thread's.
const CLAIMED: i32 = -1;

/// Claims `slot` when the thread that held it has ended (the kernel says its tid is gone) or it is free:
/// until [`release_claim`] no thread registers there. False when it is not.
pub fn claim_ended(slot: usize) -> bool {
    let old = KNOWN[slot].load(Ordering::Acquire);
    if old < 0 || (old > 0 && raw::thread_alive(old)) {
        return false;
    }
    KNOWN[slot].compare_exchange(old, CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// The ids of the threads racewatch knows now (its own threads are never registered). Async-signal-safe.
pub fn known_tids() -> impl Iterator<Item = i32> {
    KNOWN.iter().map(|slot| slot.load(Ordering::Acquire)).filter(|&tid| tid > 0)
}

/// Frees a slot [`claim_ended`] claimed.
pub fn release_claim(slot: usize) {
    KNOWN[slot].store(0, Ordering::Release);
}

/// The slot of thread `tid` when it is known. Async-signal-safe, touches no thread-local storage.
pub fn known_slot(tid: i32) -> Option<usize> {
    probe(tid).find(|&slot| KNOWN[slot].load(Ordering::Acquire) == tid)
}

/// Forgets every known thread (in a forked child, only the forking thread lives on; it registers
/// again when the child starts its own detector).
pub fn forget_known_threads() {
    for slot in &KNOWN {
        slot.store(0, Ordering::Release);
    }
}

/// Runs `child` in the child of every `fork` (not `vfork`, `_Fork` or raw `clone`).
pub fn at_fork_child(child: extern "C" fn()) {
    // SAFETY: registers a plain function with no prepare or parent handler.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// Names the calling thread (at most 15 bytes show in `/proc/<pid>/task/<tid>/comm`).
pub fn set_name(name: &std::ffi::CStr) {
    // SAFETY: `name` is NUL-terminated and outlives the call.
    unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
}

/// Joins `thread` if it has ended, without waiting.
pub fn try_join(thread: libc::pthread_t) -> bool {
    // SAFETY: pthread_tryjoin_np takes a thread of ours and returns at once.
    matches!(unsafe { libc::pthread_tryjoin_np(thread, std::ptr::null_mut()) }, 0 | libc::ESRCH)
}

/// Waits up to `timeout_ms` for a runtime thread to end; false when it did not.
pub fn join_for(thread: libc::pthread_t, timeout_ms: u64) -> bool {
    if PARKED_FOR_EXIT.load(Ordering::Acquire) == thread {
        return true; // Ended for the process, which is exiting (see `counted_again_or_park`).
    }
    let mut deadline = clock(libc::CLOCK_REALTIME);
    // SAFETY: pthread_timedjoin_np takes a thread of ours and a live deadline.
    unsafe {
        let ns = deadline.tv_nsec as u64 + (timeout_ms % 1000) * 1_000_000;
        deadline.tv_sec += (timeout_ms / 1000 + ns / 1_000_000_000) as libc::time_t;
        deadline.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
        match libc::pthread_timedjoin_np(thread, std::ptr::null_mut(), &deadline) {
            0 => true,
            libc::ETIMEDOUT => false,
            // Not joinable any more (glibc marks a thread it joined with a negative tid): it has ended;
            // asking again can never succeed, and a caller looping on it would spin.
            libc::ESRCH => true,
            // The thread itself asking (EDEADLK: a switch-off from the reporter's own tick), or a join
            // already waiting (EINVAL; the reporter's joins are serialised, see `reporter::shutdown`):
            // wait as a timed join would have, then let the caller decide.
            _ => {
                sleep_us(timeout_ms * 1000);
                false
            }
        }
    }
}

/// Waits (at most `timeout_ms`) until thread `tid` of this process is gone from its thread group.
/// A join returns when the kernel clears the thread's id, early in its exit; the task stays listed in
/// `/proc/self/task`, and counted by `unshare`, until the kernel releases it, after it closed its files
/// (a private descriptor table's included).
pub fn wait_gone(tid: i32, timeout_ms: u64) {
    let pid = u64::from(getpid() as u32);
    yield_until(timeout_ms * 1000, &mut || {
        raw::syscall6(libc::SYS_tgkill, [pid, u64::from(tid as u32), 0, 0, 0, 0]) != 0
    });
}

/// Runtime threads that ended (the reporter retiring, the warm-up thread joined) and that the kernel may
/// still count for a moment against the program's thread limits (`RLIMIT_NPROC`, threads-max): their
/// kernel ids and when they ended (monotonic ns).
const LEAVING_SLOTS: usize = 4;
static LEAVING_TID: [AtomicI32; LEAVING_SLOTS] = [const { AtomicI32::new(0) }; LEAVING_SLOTS];
static LEAVING_AT: [AtomicU64; LEAVING_SLOTS] = [const { AtomicU64::new(0) }; LEAVING_SLOTS];
static LEAVING_NEXT: AtomicUsize = AtomicUsize::new(0);
/// How long after its end a runtime thread is taken to be possibly still counted.
const LEAVING_NS: u64 = 1_000_000_000;

/// Notes that runtime thread `tid` ended or is ending now ([`runtime_thread_leaving`]).
pub fn note_leaving(tid: i32) {
    let i = LEAVING_NEXT.fetch_add(1, Ordering::Relaxed) % LEAVING_SLOTS;
    LEAVING_AT[i].store(monotonic_ns(), Ordering::Relaxed);
    LEAVING_TID[i].store(tid, Ordering::Release);
}

/// Whether a runtime thread that ended within the last second is still there for the kernel: a program
/// told `EAGAIN` by `pthread_create` then tries again, as it would not have been told without racewatch.
pub fn runtime_thread_leaving() -> bool {
    let (now, pid) = (monotonic_ns(), u64::from(getpid() as u32));
    (0..LEAVING_SLOTS).any(|i| {
        let tid = LEAVING_TID[i].load(Ordering::Acquire);
        let recent = now.saturating_sub(LEAVING_AT[i].load(Ordering::Relaxed)) < LEAVING_NS;
        tid > 0 && recent && raw::syscall6(libc::SYS_tgkill, [pid, u64::from(tid as u32), 0, 0, 0, 0]) == 0
    })
}

/// Capacity of the runtime-thread table.
const MAX_RUNTIME_THREADS: usize = 8;
static RUNTIME_TIDS: [AtomicI32; MAX_RUNTIME_THREADS] = [const { AtomicI32::new(0) }; MAX_RUNTIME_THREADS];

/// Marks the calling thread as the runtime's own (e.g. the reporter); false if the table is full.
pub fn mark_runtime_thread() -> bool {
    let tid = gettid();
    if is_runtime_thread(tid) {
        return true;
    }
    RUNTIME_TIDS.iter().any(|slot| slot.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok())
}

/// The calling runtime thread is ending: its tid may be reused by a program thread.
pub fn unmark_runtime_thread() {
    let tid = gettid();
    for slot in &RUNTIME_TIDS {
        let _ = slot.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Forgets every runtime thread (in a forked child, where none of them exists).
pub fn forget_runtime_threads() {
    for slot in &RUNTIME_TIDS {
        slot.store(0, Ordering::Release);
    }
    // A child has none being made (its one thread is the forking one).
    STARTING_THREADS.store(0, Ordering::SeqCst);
}

/// Whether `tid` was marked with [`mark_runtime_thread`].
pub fn is_runtime_thread(tid: i32) -> bool {
    RUNTIME_TIDS.iter().any(|slot| slot.load(Ordering::Acquire) == tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_about_as_long_as_asked_and_marks_threads() {
        let start = monotonic_ns();
        sleep_us(2000);
        let elapsed = monotonic_ns() - start;
        assert!((2_000_000..200_000_000).contains(&elapsed), "slept {elapsed} ns");
        let start = monotonic_ns();
        stall_us(300);
        let elapsed = monotonic_ns() - start;
        assert!((300_000..200_000_000).contains(&elapsed), "stalled {elapsed} ns");
        let tid = std::thread::spawn(|| {
            assert!(mark_runtime_thread());
            gettid()
        })
        .join()
        .unwrap();
        assert!(is_runtime_thread(tid));
        assert!(!is_runtime_thread(gettid()));
    }
}
