//! The `SIGTRAP` handler, and `SIGTRAP` as the program sees it.
//!
//! Perf-event signals of the runtime's own events (`si_code == TRAP_PERF` and
//! a `sig_data` the runtime [claims](install)) go to the runtime's callback,
//! which runs on a runtime stack ([`stacks`]) once the budget check passed.
//! Every other `SIGTRAP` (raise, int3, a debugger's, a program's own perf
//! event) goes to the disposition the *program* installed.
//!
//! Once the handler is installed, `SIGTRAP` is virtualised: the program's
//! `sigaction`/`signal` calls for it are recorded here ([`program_action`],
//! [`set_program_action`]) instead of replacing the handler, and its signal
//! masks never block `SIGTRAP` in the kernel (a blocked perf signal would be
//! queued, dequeued by `sigwait*`/`signalfd`, and survive `execve`); the
//! per-thread "blocked" bit is kept here instead ([`set_trap_blocked`]). A
//! foreign `SIGTRAP` that arrives while the program has it blocked is made
//! pending for real: re-queued to the thread with `SIGTRAP` blocked on return,
//! so `sigwait`, `sigpending` and a later unblock see it as without racewatch.
//!
//! Flags: `SA_SIGINFO | SA_RESTART | SA_ONSTACK`, every signal blocked while
//! the handler runs: a thread stalled in its own sample never nests a trap
//! (one raised meanwhile is delivered, flagged async, on return), and no
//! program handler nests on top of ours on a small alternate stack.

use crate::sys::{cancel, confined, hand_on, raw, real, stacks, thread, trap_wait};
use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// `si_code` of a signal sent by a perf event with `sigtrap=1`.
pub const TRAP_PERF: i32 = 6;
/// `si_perf_flags` bit: the signal was delivered later than the event (it was blocked).
pub const TRAP_PERF_FLAG_ASYNC: u32 = 1;

/// The interrupted general-purpose registers, in iced-x86's `Register` order
/// (RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8..R15), plus RIP and RFLAGS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    pub gpr: [u64; 16],
    pub rip: u64,
    pub rflags: u64,
}

impl Regs {
    pub const RAX: usize = 0;
    pub const RCX: usize = 1;
    pub const RDX: usize = 2;
    pub const RBX: usize = 3;
    pub const RSP: usize = 4;
    pub const RBP: usize = 5;
    pub const RSI: usize = 6;
    pub const RDI: usize = 7;
    pub const R8: usize = 8;

    /// The stack pointer.
    pub fn rsp(&self) -> u64 {
        self.gpr[Self::RSP]
    }

    /// The frame pointer.
    pub fn rbp(&self) -> u64 {
        self.gpr[Self::RBP]
    }

    /// Reads the registers out of a kernel `ucontext_t` (x86-64 glibc layout).
    fn from_ucontext(uc: &libc::ucontext_t) -> Regs {
        let g = &uc.uc_mcontext.gregs;
        let r = |i: libc::c_int| g[i as usize] as u64;
        let mut gpr = [0u64; 16];
        gpr[Self::RAX] = r(libc::REG_RAX);
        gpr[Self::RCX] = r(libc::REG_RCX);
        gpr[Self::RDX] = r(libc::REG_RDX);
        gpr[Self::RBX] = r(libc::REG_RBX);
        gpr[Self::RSP] = r(libc::REG_RSP);
        gpr[Self::RBP] = r(libc::REG_RBP);
        gpr[Self::RSI] = r(libc::REG_RSI);
        gpr[Self::RDI] = r(libc::REG_RDI);
        for (k, reg) in [
            libc::REG_R8,
            libc::REG_R9,
            libc::REG_R10,
            libc::REG_R11,
            libc::REG_R12,
            libc::REG_R13,
            libc::REG_R14,
            libc::REG_R15,
        ]
        .into_iter()
        .enumerate()
        {
            gpr[Self::R8 + k] = r(reg);
        }
        Regs { gpr, rip: r(libc::REG_RIP), rflags: r(libc::REG_EFL) }
    }
}

/// One `TRAP_PERF` signal as the callback sees it.
#[derive(Clone, Copy, Debug)]
pub struct PerfSignal {
    /// `si_perf_data`: the event's `sig_data`.
    pub data: u64,
    /// `si_perf_type`: the event's `perf_event_attr.type`.
    pub kind: u32,
    /// `si_perf_flags` ([`TRAP_PERF_FLAG_ASYNC`]).
    pub flags: u32,
    /// `si_addr`: the watched address for breakpoints.
    pub addr: u64,
    /// The registers of the interrupted code (for a data breakpoint, RIP is after the access).
    pub regs: Regs,
    /// Address of the interrupted code's FPU/XSAVE state in the signal frame (`uc_mcontext.fpregs`;
    /// 0 when there is none): AVX-512 opmask registers, for a masked access (read it without faulting).
    pub fpstate: u64,
}

/// Whether a `sig_data` belongs to one of the runtime's events. Must be async-signal-safe.
pub type Claims = fn(u64) -> bool;
/// The runtime's callback for a claimed signal. Must be async-signal-safe.
pub type PerfHandler = fn(&PerfSignal);

/// The process whose records these are: a `vfork` child runs in its parent's memory (and a thread's
/// TLS) without the fork handlers, so its signal calls must reach its own kernel state only, never the
/// parent's records ([`in_borrowed_memory`]).
static PROCESS: AtomicI32 = AtomicI32::new(0);

/// Notes the calling process as the one whose records these are (at install, and in a forked child).
pub fn note_process() {
    PROCESS.store(raw::getpid(), Ordering::Release);
}

/// The process whose records these are ([`note_process`]): in a forked child's fork handler, before it
/// notes itself, its parent (0: not noted).
pub fn recorded_process() -> i32 {
    PROCESS.load(Ordering::Acquire)
}

/// In a runtime thread, which blocks every signal: lets go of a `SIGTRAP` pending for it alone (the
/// sampling timer or a watchpoint it inherited from the thread that created it fired while it ran).
/// Pending, it holds one of the program's `RLIMIT_SIGPENDING` slots for as long as the thread lives: a
/// program queueing signals up to a limit of 40 while the reporter printed its races queued 39, every
/// round, at the debug rate. The thread's own `SigPnd` is read first, so a `SIGTRAP` sent to the
/// process (`ShdPnd`, the program's) is never taken.
pub fn drop_own_pending_trap() {
    let mut buf = [0u8; 4096];
    let Some(len) = raw::read_whole(c"/proc/thread-self/status", &mut buf) else { return };
    let text = &buf[..len];
    let pending = text
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"SigPnd:"))
        .and_then(|hex| u64::from_str_radix(std::str::from_utf8(hex).ok()?.trim(), 16).ok());
    if pending.is_some_and(|bits| bits & (1 << (libc::SIGTRAP - 1)) != 0) {
        let set: u64 = 1 << (libc::SIGTRAP - 1);
        let none = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        raw::syscall6(
            libc::SYS_rt_sigtimedwait,
            [&set as *const u64 as u64, 0, &none as *const libc::timespec as u64, 8, 0, 0],
        );
    }
}

/// Whether the caller is a child that shares its parent's memory (`vfork`, `clone(CLONE_VM)` without
/// `CLONE_THREAD`): the records here are the parent's. One `getpid` system call.
pub fn in_borrowed_memory() -> bool {
    let process = PROCESS.load(Ordering::Acquire);
    // Inside a sandbox, no system call (a vfork child there is taken as its parent).
    process != 0 && thread::syscalls_allowed() && process != raw::getpid()
}

static CLAIMS: AtomicUsize = AtomicUsize::new(0);
static HANDLER: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Claimed signals dropped because the stack had no room or no runtime stack was free.
static SKIPPED_FOR_STACK: AtomicU64 = AtomicU64::new(0);
/// Callbacks running now.
static ACTIVE: AtomicU32 = AtomicU32::new(0);

/// The program's `SIGTRAP` disposition: handler, flags, mask (signals 1..=64 as bits 0..=63).
static PROGRAM_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PROGRAM_FLAGS: AtomicU64 = AtomicU64::new(0);
static PROGRAM_MASK: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether the program blocked `SIGTRAP` in this thread (virtually: the kernel mask never has it).
    static TRAP_BLOCKED: Cell<bool> = const { Cell::new(false) };
    /// The mask of the program's wait in progress in this thread that takes one for its duration
    /// ([`during_program_wait`]).
    static WAIT_MASK: Cell<Option<u64>> = const { Cell::new(None) };
    /// While the program's `SIGTRAP` handler runs in this thread (called by [`chain`]): the stack
    /// pointer of the code it interrupted, and whether the handler runs with `SIGTRAP` blocked for the
    /// program (without `SA_NODEFER`, or in its `sa_mask`). `(0, false)`: none.
    static IN_TRAP_HANDLER: Cell<(usize, bool)> = const { Cell::new((0, false)) };
}

/// A jump to stack pointer `target_sp` (`longjmp` and kin): where it leaves the program's `SIGTRAP`
/// handler, whether the program's mask after it has `SIGTRAP` (the handler's mask stays, as the
/// kernel's would); `None` where it leaves none.
pub fn leave_trap_handlers(target_sp: usize) -> Option<bool> {
    let (interrupted, blocks) = IN_TRAP_HANDLER.with(Cell::get);
    if interrupted == 0 || target_sp <= interrupted {
        return None;
    }
    IN_TRAP_HANDLER.with(|c| c.set((0, false)));
    Some(blocks || trap_blocked())
}

/// Installs the `SIGTRAP` handler (once; later calls only replace the callbacks) and takes over the
/// program's view of `SIGTRAP`: its current disposition becomes the program's recorded one.
pub fn install(claims: Claims, handler: PerfHandler) -> io::Result<()> {
    CLAIMS.store(claims as usize, Ordering::Release);
    HANDLER.store(handler as usize, Ordering::Release);
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    stacks::init_pool();
    note_process();
    // SAFETY: zeroed `sigaction` is a valid "SIG_DFL, empty mask" value to receive the old one.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if real::own_sigaction(libc::SIGTRAP, std::ptr::null(), &mut old) != 0 {
        return Err(io::Error::last_os_error());
    }
    record(&old);
    if !install_kernel_action() {
        return Err(io::Error::last_os_error());
    }
    note_libc_restorer();
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// Puts the runtime's handler in the kernel with flags that follow the program's recorded
/// disposition: `SA_RESTART` as the program's handler has it (the runtime's own signals only ever
/// interrupt user code, so this decides only what a foreign `SIGTRAP` does to a system call).
/// Every signal, the C library's internal ones (cancellation, `setxid`) included, waits while the
/// handler runs (at most a watch window): a program handler never nests on top of ours on a small
/// alternate stack, and a `pthread_cancel` never acts inside it.
fn install_kernel_action() -> bool {
    let restart = kernel_restart_flag();
    // SAFETY: zeroed `sigaction` is a valid "SIG_DFL, empty mask" value; we then fill in our handler,
    // flags and mask. The kernel's sigset is the first 64 bits of glibc's, which glibc passes as is.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = racewatch_sigtrap_entry as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | restart;
        *(&mut new.sa_mask as *mut libc::sigset_t as *mut u64) = u64::MAX;
        real::own_sigaction(libc::SIGTRAP, &new, std::ptr::null_mut()) == 0
    }
}

/// The `SA_RESTART` the runtime's handler gets in the kernel: the program's handler's.
fn kernel_restart_flag() -> libc::c_int {
    let program = program_action();
    match program.sa_sigaction {
        libc::SIG_DFL | libc::SIG_IGN => libc::SA_RESTART,
        _ => program.sa_flags & libc::SA_RESTART,
    }
}

/// Whether the program has set `SIGTRAP` to `SIG_IGN` (read from the kernel before the runtime owns it).
pub fn program_ignores_trap() -> bool {
    if INSTALLED.load(Ordering::Acquire) {
        return program_action().sa_sigaction == libc::SIG_IGN;
    }
    // SAFETY: zeroed sigaction is a valid out-parameter.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    real::own_sigaction(libc::SIGTRAP, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
}

/// Gives `SIGTRAP` back to the kernel as the program set it (detection is off for good): its
/// disposition is installed for real and the interposers pass its calls through from now on.
pub fn hand_back() {
    if !INSTALLED.swap(false, Ordering::AcqRel) {
        return;
    }
    mute();
    let program = program_action();
    real::own_sigaction(libc::SIGTRAP, &program, std::ptr::null_mut());
    if trap_blocked() {
        raw::sigprocmask(libc::SIG_BLOCK, Some(1 << (libc::SIGTRAP - 1)));
    }
    // One kept for the process ([`park`]) goes to the kernel's queue.
    if let Some(info) = take_parked() {
        send_to_process(&info);
    }
}

/// `SIGTRAP` as the program set it in the calling thread, for a child that shares the process's memory
/// without being one of its threads (`clone` with `CLONE_VM`, without `CLONE_THREAD`): racewatch keeps
/// nothing of its own in such a child (its events follow threads only, and its records are the
/// parent's), so the child's kernel state is made the program's ([`ChildTrap::put`]).
#[derive(Clone, Copy, Debug)]
pub struct ChildTrap {
    blocked: bool,
    /// The kernel's `struct sigaction` (handler, flags, restorer, mask); `None` where the child shares
    /// the parent's handlers (`CLONE_SIGHAND`), which stay racewatch's.
    action: Option<[u64; 4]>,
}

impl ChildTrap {
    /// The program's `SIGTRAP` for a child made now (`shares_handlers`: `CLONE_SIGHAND`); `None` when
    /// racewatch does not own `SIGTRAP`.
    pub fn for_child(shares_handlers: bool) -> Option<ChildTrap> {
        if !is_installed() {
            return None;
        }
        let program = program_action();
        let action = [
            program.sa_sigaction as u64,
            program.sa_flags as u64,
            program.sa_restorer.map_or(0, |f| f as usize as u64),
            to_bits(&program.sa_mask),
        ];
        Some(ChildTrap { blocked: trap_blocked(), action: (!shares_handlers).then_some(action) })
    }

    /// In the child, first thing: its kernel mask and disposition of `SIGTRAP` become the program's.
    /// System calls only (the child shares the parent thread's thread-local storage and `errno`).
    pub fn put(&self) {
        if let Some(action) = self.action {
            raw::syscall6(libc::SYS_rt_sigaction, [libc::SIGTRAP as u64, action.as_ptr() as u64, 0, 8, 0, 0]);
        }
        if self.blocked {
            raw::sigprocmask(libc::SIG_BLOCK, Some(1 << (libc::SIGTRAP - 1)));
        }
    }
}

/// Whether the runtime owns `SIGTRAP` (the program's calls are then virtualised).
pub fn is_installed() -> bool {
    INSTALLED.load(Ordering::Acquire)
}

/// Whether the runtime's callback is called (detection is on).
pub fn detecting() -> bool {
    HANDLER.load(Ordering::Acquire) != 0
}

/// Stops calling the runtime's callback: every perf signal it claims is dropped from now on (detection
/// off). The handler stays installed, so the program's `SIGTRAP` keeps working as it sees it.
pub fn mute() {
    HANDLER.store(0, Ordering::SeqCst);
}

fn record(action: &libc::sigaction) {
    PROGRAM_HANDLER.store(action.sa_sigaction, Ordering::Release);
    PROGRAM_FLAGS.store(action.sa_flags as u64, Ordering::Release);
    PROGRAM_MASK.store(to_bits(&action.sa_mask), Ordering::Release);
    PROGRAM_RESTORER.store(action.sa_restorer.map_or(0, |f| f as usize), Ordering::Release);
}

/// The `sa_flags` bits the kernel keeps on x86-64 (its `UAPI_SA_FLAGS`): `SA_NOCLDSTOP`,
/// `SA_NOCLDWAIT`, `SA_SIGINFO`, `SA_EXPOSE_TAGBITS`, `SA_RESTORER`, `SA_ONSTACK`, `SA_RESTART`,
/// `SA_NODEFER`, `SA_RESETHAND`.
const KERNEL_SA_FLAGS: libc::c_int =
    0x1 | 0x2 | 0x4 | 0x800 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x4000_0000 | i32::MIN;

/// `sa_flags` bit: `sa_restorer` is set (glibc sets it, with its own `__restore_rt`, on every action it
/// gives the kernel, and the kernel reports both back).
pub const SA_RESTORER: libc::c_int = 0x0400_0000;
/// The restorer the program's recorded action reports, as the kernel would have stored it.
static PROGRAM_RESTORER: AtomicUsize = AtomicUsize::new(0);
/// glibc's `__restore_rt`, as the kernel reports it for the runtime's own action (set through glibc).
static LIBC_RESTORER: AtomicUsize = AtomicUsize::new(0);

/// glibc's `__restore_rt` (0: unknown): a signal frame's return address. Async-signal-safe.
pub fn libc_restorer() -> usize {
    LIBC_RESTORER.load(Ordering::Acquire)
}

/// Reads glibc's restorer back from the kernel's action for `SIGTRAP` (just installed through glibc).
fn note_libc_restorer() {
    // SAFETY: zeroed `sigaction` is a valid out-parameter.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    if real::own_sigaction(libc::SIGTRAP, std::ptr::null(), &mut now) == 0 && now.sa_flags & SA_RESTORER != 0 {
        LIBC_RESTORER.store(now.sa_restorer.map_or(0, |f| f as usize), Ordering::Release);
    }
}

/// The program's recorded `SIGTRAP` handler alone (`SIG_DFL`, `SIG_IGN` or a function). Async-signal-safe.
pub fn program_handler() -> libc::sighandler_t {
    PROGRAM_HANDLER.load(Ordering::Acquire)
}

/// The program's recorded `SIGTRAP` disposition.
pub fn program_action() -> libc::sigaction {
    // SAFETY: zeroed sigaction is valid; the fields are then filled from the record.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = PROGRAM_HANDLER.load(Ordering::Acquire);
    action.sa_flags = PROGRAM_FLAGS.load(Ordering::Acquire) as libc::c_int;
    action.sa_mask = from_bits(PROGRAM_MASK.load(Ordering::Acquire));
    let restorer = PROGRAM_RESTORER.load(Ordering::Acquire);
    // SAFETY: a restorer recorded from a `sigaction` read back from the kernel, or glibc's own: either a
    // function address or 0 (None).
    action.sa_restorer = unsafe { std::mem::transmute::<usize, Option<extern "C" fn()>>(restorer) };
    action
}

/// Records `action` as the program's `SIGTRAP` disposition (the kernel's stays the runtime's, with
/// the program's `SA_RESTART`).
pub fn set_program_action(action: &libc::sigaction) {
    let restart_before = kernel_restart_flag();
    // As glibc's `sigaction` hands it to the kernel: with its restorer, and the flags the kernel knows
    // (it clears the others, `SA_UNSUPPORTED` included, so that a program can probe for support).
    let mut action = *action;
    action.sa_flags &= KERNEL_SA_FLAGS;
    let restorer = LIBC_RESTORER.load(Ordering::Acquire);
    if restorer != 0 {
        action.sa_flags |= SA_RESTORER;
        // SAFETY: glibc's restorer, read back from the kernel: a function address.
        action.sa_restorer = unsafe { std::mem::transmute::<usize, Option<extern "C" fn()>>(restorer) };
    }
    record(&action);
    if action.sa_sigaction == libc::SIG_IGN {
        // The kernel discards a pending signal set to be ignored: the one kept for the process, and one
        // made pending for real on this thread (raised while the program blocked it).
        hand_on::forget_parked_trap();
        discard_pending_trap_here();
    }
    if INSTALLED.load(Ordering::Acquire) && kernel_restart_flag() != restart_before {
        install_kernel_action();
    }
}

/// Signals 1..=64 of `set` as bits 0..=63.
pub fn to_bits(set: &libc::sigset_t) -> u64 {
    // SAFETY: sigismember only reads the live set.
    (1..=64).filter(|&sig| unsafe { libc::sigismember(set, sig) } == 1).fold(0, |bits, sig| bits | 1 << (sig - 1))
}

/// The set of signals whose bits (as in [`to_bits`]) are set.
pub fn from_bits(bits: u64) -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset write only the live local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in 1..=64 {
            if bits & 1 << (sig - 1) != 0 {
                libc::sigaddset(&mut set, sig);
            }
        }
        set
    }
}

/// Whether `set` holds `SIGTRAP`.
pub fn has_trap(set: &libc::sigset_t) -> bool {
    // SAFETY: reads the live set.
    unsafe { libc::sigismember(set, libc::SIGTRAP) == 1 }
}

/// `set` with `SIGTRAP` added or removed.
pub fn with_trap(set: &libc::sigset_t, trap: bool) -> libc::sigset_t {
    let mut copy = *set;
    // SAFETY: writes only the live local copy.
    unsafe {
        if trap {
            libc::sigaddset(&mut copy, libc::SIGTRAP);
        } else {
            libc::sigdelset(&mut copy, libc::SIGTRAP);
        }
    }
    copy
}

/// Adds `SIGTRAP` to `set`.
pub fn add_trap(set: &mut libc::sigset_t) {
    // SAFETY: writes only the live set.
    unsafe { libc::sigaddset(set, libc::SIGTRAP) };
}

/// Whether the program has `SIGTRAP` blocked in the calling thread.
pub fn trap_blocked() -> bool {
    TRAP_BLOCKED.with(Cell::get)
}

/// Records whether the program has `SIGTRAP` blocked in the calling thread.
pub fn set_trap_blocked(blocked: bool) {
    if TRAP_BLOCKED.with(|b| b.replace(blocked)) != blocked {
        note_blocked_tid(blocked);
    }
}

/// Runs one of the program's waits that take a signal mask (`mask`, signals 1..=64 as bits 0..=63) for
/// their duration (`sigsuspend`, `ppoll`, `pselect`, `epoll_pwait`, libc's or raw): the
/// kernel gets the program's mask as it is (a thread asleep takes no sample of racewatch's), and the
/// program's view of `SIGTRAP` follows it meanwhile. A `SIGTRAP` of the program's that waited pending
/// while blocked, and that the wait's mask lets through, then runs the program's handler with that mask,
/// and the other signals the wait lets through come on top of it, as they would without racewatch
/// (set 20 p10: `sigsuspend` returned with no handler run and every signal still pending).
pub fn during_program_wait<R>(mask: Option<u64>, wait: impl FnOnce() -> R) -> R {
    let Some(mask) = mask.filter(|_| is_installed() && thread::known_slot(raw::gettid()).is_some()) else {
        return wait();
    };
    let trap = 1u64 << (libc::SIGTRAP - 1);
    let (lets_through, program_blocked) = (mask & trap == 0, trap_blocked());
    // SIGTRAP blocked for real (a program's `SIGTRAP` was made pending) and let through by the wait: a
    // signal of racewatch's pending beside it would end the wait instead (`EINTR`, no handler run).
    let held_for_real = lets_through
        && program_blocked
        && raw::sigprocmask(libc::SIG_BLOCK, None).is_some_and(|kernel| kernel & trap != 0);
    if held_for_real {
        before_program_sigpending();
    }
    // Put back when the wait returns, or when the thread is cancelled in it (nothing to drop here: see
    // `cancel`).
    let mut restore = (program_blocked, WAIT_MASK.with(|w| w.replace(Some(mask))));
    set_trap_blocked(!lets_through);
    if lets_through && program_blocked && thread::syscalls_allowed() {
        // One kept for the process ([`park`]): pending here, blocked for real, for the wait to let through
        // (no sample of racewatch's meanwhile: it would take the one place a pending SIGTRAP has).
        if let Some(info) = take_parked() {
            hold_sampling(true);
            raw::sigprocmask(libc::SIG_BLOCK, Some(trap));
            queue_trap_to_self(&info);
            hold_sampling(false);
        }
    }
    let arg = &mut restore as *mut (bool, Option<u64>) as *mut libc::c_void;
    let result = cancel::on_cancel(restore_after_wait, arg, wait);
    restore_after_wait(arg);
    result
}

/// After [`during_program_wait`]'s wait (`arg`: the program's bit and the wait mask to put back).
extern "C" fn restore_after_wait(arg: *mut libc::c_void) {
    // SAFETY: `arg` is `during_program_wait`'s tuple, alive in its frame while the wait runs or unwinds.
    let (blocked, mask) = unsafe { *(arg as *const (bool, Option<u64>)) };
    WAIT_MASK.with(|w| w.set(mask));
    set_trap_blocked(blocked);
}

/// Records the program's `SIGTRAP` mask bit of a thread that starts (its entry in [`BLOCKED_TIDS`] set
/// right whatever an ended thread with the same id left there).
pub fn set_trap_blocked_at_start(blocked: bool) {
    TRAP_BLOCKED.with(|b| b.set(blocked));
    note_blocked_tid(blocked);
}

fn note_blocked_tid(blocked: bool) {
    if confined::here() {
        return; // No system call there; no signal is handed to a confined thread.
    }
    let tid = raw::gettid();
    let slot = BLOCKED_TIDS.iter().find(|s| s.load(Ordering::Relaxed) == tid);
    match (blocked, slot) {
        (true, None) => {
            let _ =
                BLOCKED_TIDS.iter().find(|s| s.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok());
        }
        (false, Some(slot)) => slot.store(0, Ordering::Release),
        _ => {}
    }
}

/// Threads that have `SIGTRAP` blocked, as the program set it (the kernel's mask lacks it), for other
/// threads' reads of their `/proc/<pid>/task/<tid>/status` ([`crate::proc_view`]); a thread starting
/// records its bit, so an entry left by an ended thread is set right when its id comes back.
static BLOCKED_TIDS: [AtomicI32; 64] = [const { AtomicI32::new(0) }; 64];

/// For each known thread (by its slot) inside racewatch's handler: the mask of the code it interrupted,
/// which the thread's `SigBlk` shows without racewatch (the handler blocks every signal meanwhile).
static MASK_IN_HANDLER: [AtomicU64; thread::KNOWN_SLOTS] = [const { AtomicU64::new(0) }; thread::KNOWN_SLOTS];
static IN_HANDLER: [AtomicBool; thread::KNOWN_SLOTS] = [const { AtomicBool::new(false) }; thread::KNOWN_SLOTS];

/// The mask thread `tid` had when racewatch's handler interrupted it, while the handler runs there.
pub fn mask_in_handler(tid: i32) -> Option<u64> {
    let slot = thread::known_slot(tid)?;
    let mask = MASK_IN_HANDLER[slot].load(Ordering::Acquire);
    IN_HANDLER[slot].load(Ordering::Acquire).then_some(mask)
}

/// Whether the program has `SIGTRAP` blocked in thread `tid` (`None`: unknown, more threads blocked
/// it than the table holds).
pub fn trap_blocked_in(tid: i32) -> Option<bool> {
    let listed = BLOCKED_TIDS.iter().any(|s| s.load(Ordering::Acquire) == tid);
    let full = BLOCKED_TIDS.iter().all(|s| s.load(Ordering::Relaxed) != 0);
    (listed || !full).then_some(listed)
}

/// Takes `SIGTRAP` out of the calling thread's kernel mask, remembering that the program had it blocked.
/// Call when the handler is installed and when a thread starts.
pub fn virtualise_thread_mask() {
    // SAFETY: sigset operations on live locals; the real pthread_sigmask changes only this thread.
    unsafe {
        let mut current: libc::sigset_t = std::mem::zeroed();
        if real::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut current) != 0 || !has_trap(&current) {
            return;
        }
        // A SIGTRAP of racewatch's that waits there is taken back first, as for the program's `sigpending`.
        before_program_sigpending();
        if trap_pending() {
            return; // A program's SIGTRAP waits there: leave it blocked, as the program wants.
        }
        set_trap_blocked(true);
        let trap = with_trap(&from_bits(0), true);
        real::pthread_sigmask(libc::SIG_UNBLOCK, &trap, std::ptr::null_mut());
    }
}

/// Before the program's `pthread_create` in a thread that has `SIGTRAP` blocked for the program: blocks it
/// in the kernel as well, so that the new thread, which inherits the kernel's mask, starts with it blocked
/// for real until its start hook has recorded the program's bit and taken it out
/// ([`virtualise_thread_mask`]). Without this a `SIGTRAP` sent to the process just then could reach the
/// new thread before its bit was recorded and take the program's default action (set 17 p14: the process
/// died of it). True when it blocked: call [`after_thread_create`] then.
pub fn before_thread_create() -> bool {
    is_installed() && trap_blocked() && raw::sigprocmask(libc::SIG_BLOCK, Some(1 << (libc::SIGTRAP - 1))).is_some()
}

/// Whether a `SIGTRAP` is pending on the calling thread (`rt_sigpending`).
fn trap_pending() -> bool {
    raw::sigpending().is_some_and(|pending| pending & 1 << (libc::SIGTRAP - 1) != 0)
}

/// After [`before_thread_create`] blocked `SIGTRAP`: a signal of racewatch's that fired meanwhile is taken
/// back, and `SIGTRAP` leaves the kernel's mask again unless one of the program's waits there, or
/// detection is off (the mask stays real).
pub fn after_thread_create() {
    if trap_pending() {
        discard_own_pending_trap();
    }
    if detecting() {
        virtualise_thread_mask();
    }
}

/// Puts `SIGTRAP` into the calling thread's kernel mask when the program has it blocked there (a thread
/// about to end, which racewatch stops knowing).
pub fn make_trap_mask_real() {
    if is_installed() && trap_blocked() {
        raw::sigprocmask(libc::SIG_BLOCK, Some(1 << (libc::SIGTRAP - 1)));
    }
}

/// A `vfork` child's own choice for `SIGTRAP` in its mask (`pid << 1 | blocked`; 0: none): its mask
/// calls go to its own kernel state, while the thread-local record it shares is its parent's. Keyed
/// by the child's pid, so the parent (and a later child) never reads it.
static BORROWED_TRAP: AtomicU64 = AtomicU64::new(0);

/// A `vfork` child blocked or unblocked `SIGTRAP` itself (see [`BORROWED_TRAP`]).
pub fn note_borrowed_trap_state(blocked: bool) {
    BORROWED_TRAP.store((raw::getpid() as u64) << 1 | u64::from(blocked), Ordering::Release);
}

/// Whether an `exec` now must leave `SIGTRAP` blocked in the new image: the program has it blocked in
/// this thread; in a `vfork` child, as the child set it, else as its parent's thread had it (the
/// child's kernel mask is a copy of the parent's, where `SIGTRAP` is never blocked).
pub fn trap_blocked_for_exec() -> bool {
    if in_borrowed_memory() {
        let noted = BORROWED_TRAP.load(Ordering::Acquire);
        if noted >> 1 == raw::getpid() as u64 {
            return noted & 1 != 0;
        }
    }
    trap_blocked()
}

/// In a `vfork` child about to `exec`: blocks `SIGTRAP` in its own kernel mask (no signal of racewatch's
/// can be pending there: perf events follow threads, not children). True when it was not blocked yet.
pub fn block_trap_in_borrowed_memory() -> bool {
    raw::sigprocmask(libc::SIG_BLOCK, Some(1u64 << (libc::SIGTRAP - 1)))
        .is_some_and(|old| old & 1 << (libc::SIGTRAP - 1) == 0)
}

/// Blocks `SIGTRAP` in the kernel for an `exec` (the program has it blocked), taking back a signal of the
/// runtime's that became pending meanwhile (a program's own pending `SIGTRAP` stays). The sampling
/// timers stay held until [`unblock_trap_after_exec`]`(true)` (an `exec` that succeeds ends them): one firing
/// between the take-back and the `exec` would stay pending into the new image (set 17 p15: its
/// `sigtimedwait` took racewatch's signal instead of the program's, 2 runs in 10). False when the mask
/// could not be changed.
pub fn block_trap_for_exec(new_image: bool) -> bool {
    let trap = 1u64 << (libc::SIGTRAP - 1);
    hold_sampling(true);
    if raw::sigprocmask(libc::SIG_BLOCK, Some(trap)).is_none() {
        hold_sampling(false);
        return false;
    }
    discard_own_pending_trap();
    // One kept for the process stays pending across the `exec`, as the process's queue does (a spawned
    // child starts with nothing pending: it stays kept for the process).
    if new_image {
        if let Some(info) = take_parked() {
            queue_trap_to_self(&info);
        }
    }
    true
}

/// A read of the calling thread's own `status` showed `SIGTRAP` pending: one of the runtime's is taken
/// back as for [`before_program_sigpending`]; true when none is pending any more (it was racewatch's,
/// and the text is to be read again), false when the program's stays.
pub fn own_trap_taken_back() -> bool {
    before_program_sigpending();
    !trap_pending()
}

/// The program asks which signals are pending (`sigpending`): a `SIGTRAP` of the runtime's left pending
/// on this thread (a watch trap or a sample that fired after the thread's `SIGTRAP` became blocked for
/// real, when racewatch stepped aside) is taken back first, so the program sees only its own. One
/// `rt_sigpending` when nothing of `SIGTRAP` is pending.
pub fn before_program_sigpending() {
    let ours_possible = is_installed() || STEP_ASIDE_DONE.load(Ordering::Acquire);
    if !ours_possible || !thread::syscalls_allowed() || in_borrowed_memory() {
        return;
    }
    if trap_pending() {
        discard_own_pending_trap();
    }
}

/// Set once racewatch stepped aside in a signal handler (its `SIGTRAP`s may be left pending).
static STEP_ASIDE_DONE: AtomicBool = AtomicBool::new(false);

/// Takes back the `SIGTRAP`s of the runtime's pending on this thread (with `SIGTRAP` blocked for real);
/// a program's `SIGTRAP` found there is sent again where it was (to this thread, or to the process).
/// The sampling timers are held meanwhile (see [`make_pending`]).
pub fn discard_own_pending_trap() {
    hold_sampling(true);
    // SAFETY: zeroed siginfo is a valid out-parameter for the kernel to fill.
    let mut taken: libc::siginfo_t = unsafe { std::mem::zeroed() };
    while take_pending_trap(&mut taken) {
        if hand_on::is_trap_mark(&taken) {
            mark_again();
            continue;
        }
        if claimed(&taken).is_none() {
            if process_directed(taken.si_code) {
                send_to_process(&taken);
            } else {
                queue_trap_to_self(&taken);
            }
            break;
        }
    }
    hold_sampling(false);
}

/// The program set `SIGTRAP` to be ignored: every `SIGTRAP` pending on this thread (with `SIGTRAP`
/// blocked for real: the program's, raised while it blocked it, and any of racewatch's) is dropped, as
/// the kernel drops pending signals set to be ignored. A mark of `SIGTRAP`s handed over here is queued
/// again (racewatch's handler runs the program's disposition, now `SIG_IGN`, for them).
fn discard_pending_trap_here() {
    if !is_installed() || !thread::syscalls_allowed() || in_borrowed_memory() || !trap_pending() {
        return;
    }
    hold_sampling(true);
    // SAFETY: zeroed siginfo is a valid out-parameter for the kernel to fill.
    let mut taken: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut marked = false;
    while take_pending_trap(&mut taken) {
        marked |= hand_on::is_trap_mark(&taken);
    }
    if marked {
        mark_again();
    }
    hold_sampling(false);
}

/// Dequeues a `SIGTRAP` pending on this thread (or the process) into `info`, without waiting.
fn take_pending_trap(info: &mut libc::siginfo_t) -> bool {
    let trap: u64 = 1 << (libc::SIGTRAP - 1);
    let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let (set, out, timeout) =
        (&trap as *const u64 as u64, info as *mut libc::siginfo_t as u64, &zero as *const _ as u64);
    raw::syscall6(libc::SYS_rt_sigtimedwait, [set, out, timeout, 8, 0, 0]) == i64::from(libc::SIGTRAP)
}

/// Queues a `SIGTRAP` with `info` to this thread (`rt_tgsigqueueinfo` to one's own thread accepts the
/// kernel's siginfo unchanged).
fn queue_trap_to_self(info: *const libc::siginfo_t) {
    let (pid, tid) = (raw::getpid() as u64, raw::gettid() as u64);
    raw::syscall6(libc::SYS_rt_tgsigqueueinfo, [pid, tid, libc::SIGTRAP as u64, info as u64, 0, 0]);
}

/// Before an `exec` where the program does not block `SIGTRAP`: takes it out of the kernel's mask when
/// racewatch holds it there. True when it was held ([`hold_trap_after_exec`] puts it back).
pub fn release_trap_for_exec() -> bool {
    let trap = 1u64 << (libc::SIGTRAP - 1);
    let held = raw::sigprocmask(libc::SIG_BLOCK, None).is_some_and(|mask| mask & trap != 0);
    held && raw::sigprocmask(libc::SIG_UNBLOCK, Some(trap)).is_some()
}

/// After a failed `exec` that [`release_trap_for_exec`] prepared: `SIGTRAP` is held again.
pub fn hold_trap_after_exec() {
    raw::sigprocmask(libc::SIG_BLOCK, Some(1u64 << (libc::SIGTRAP - 1)));
}

/// After a failed `exec`: `SIGTRAP` leaves the kernel's mask again (the program's view stays blocked), and the
/// sampling timers go on when [`block_trap_for_exec`] held them (`held_sampling`).
pub fn unblock_trap_after_exec(held_sampling: bool) {
    raw::sigprocmask(libc::SIG_UNBLOCK, Some(1u64 << (libc::SIGTRAP - 1)));
    if held_sampling {
        hold_sampling(false);
    }
}

/// Reads the `TRAP_PERF` fields glibc 2.36 does not name (x86-64 offsets).
fn perf_fields(info: &libc::siginfo_t) -> (u64, u32, u32, u64) {
    let base = info as *const libc::siginfo_t as *const u8;
    // SAFETY: siginfo_t is 128 bytes; offsets 16..40 lie inside it and the
    // unaligned reads tolerate any layout glibc chose for its padding.
    unsafe {
        let addr = std::ptr::read_unaligned(base.add(16) as *const u64);
        let data = std::ptr::read_unaligned(base.add(24) as *const u64);
        let kind = std::ptr::read_unaligned(base.add(32) as *const u32);
        let flags = std::ptr::read_unaligned(base.add(36) as *const u32);
        (data, kind, flags, addr)
    }
}

extern "C" {
    /// What the kernel calls for `SIGTRAP` (below): a signal of a perf event is taken on a runtime stack
    /// ([`on_perf_trap`]); any other, or when no runtime stack is free, runs [`on_sigtrap`] in place.
    fn racewatch_sigtrap_entry(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void);
}

/// What [`on_perf_trap`] returns: done; run [`on_sigtrap`] in place (not racewatch's, or not decided
/// there); run the program's `SIGTRAP`s handed over to this thread, in place ([`run_handed_in_place`]).
const TRAP_DONE: u32 = 0;
const TRAP_IN_PLACE: u32 = 1;
const TRAP_HANDED: u32 = 2;

// The kernel's entry for `SIGTRAP`. A signal of a perf event (`TRAP_PERF`: a sample or a watch trap,
// nearly all of them racewatch's) switches to a runtime stack before any other instruction touches the
// stack it was delivered to, which then holds only the kernel's frame. That frame lies where the
// program's own signal frames lie at the top of an alternate stack, so a program measuring its
// alternate stack's high-water mark reads what it reads without racewatch (set 21 p05: 1,928 bytes of
// an 8 KiB stack instead of 1,344 when the handler ran its first few hundred bytes there). Every signal
// is blocked while the handler runs (its mask), so nothing nests on the alternate stack meanwhile.
// Anything else runs `on_sigtrap` in place, as before: a thread that confined itself (no lookups), no
// runtime stack mapped or free.
std::arch::global_asm!(
    ".pushsection .text.racewatch_sigtrap_entry,\"ax\",@progbits",
    ".globl racewatch_sigtrap_entry",
    ".hidden racewatch_sigtrap_entry",
    ".type racewatch_sigtrap_entry,@function",
    "racewatch_sigtrap_entry:",
    ".cfi_startproc",
    "test rsi, rsi",
    "jz 5f",
    "cmp dword ptr [rsi + 8], {trap_perf}",
    "jne 5f",
    stacks::claim_runtime_stack!("5f"),
    "mov r9, rsp",
    "mov rsp, r8",
    // On the runtime stack: the delivered stack's pointer, the stack's index, the three arguments
    // and a pad (six words: aligned for the call).
    "push r9",
    "push rcx",
    "push rdi",
    "push rsi",
    "push rdx",
    "sub rsp, 8",
    "mov rcx, r9",
    "call {perf_trap}",
    "add rsp, 8",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "pop rcx",
    "pop r9",
    "mov rsp, r9",
    "lock bts dword ptr [rip + {pool_free}], ecx",
    "cmp eax, {done}",
    "je 8f",
    "cmp eax, {handed}",
    "je 6f",
    "5:",
    "jmp {in_place}",
    "6:",
    "sub rsp, 8",
    ".cfi_adjust_cfa_offset 8",
    "call {run_handed}",
    "add rsp, 8",
    ".cfi_adjust_cfa_offset -8",
    "8:",
    "ret",
    ".cfi_endproc",
    ".size racewatch_sigtrap_entry, . - racewatch_sigtrap_entry",
    ".popsection",
    trap_perf = const TRAP_PERF,
    listed = sym confined::LISTED,
    pool_base = sym stacks::POOL_BASE,
    pool_free = sym stacks::POOL_FREE,
    stride = const stacks::POOL_STRIDE,
    done = const TRAP_DONE,
    handed = const TRAP_HANDED,
    perf_trap = sym on_perf_trap,
    in_place = sym on_sigtrap,
    run_handed = sym run_handed_in_place,
);

/// A perf event's `SIGTRAP`, on a runtime stack (the entry above); `delivered_sp` is where the kernel
/// delivered it. Dispatches one of racewatch's in a thread racewatch knows; anything else is left to
/// [`on_sigtrap`] in place ([`TRAP_IN_PLACE`]).
extern "C-unwind" fn on_perf_trap(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    delivered_sp: usize,
) -> u32 {
    if !thread::syscalls_allowed() || info.is_null() || ctx.is_null() {
        return TRAP_IN_PLACE;
    }
    let tid = raw::gettid();
    let Some(slot) = thread::known_slot(tid) else { return TRAP_IN_PLACE };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let Some(claimed) = claimed(unsafe { &*info }) else { return TRAP_IN_PLACE };
    run_claimed(slot, claimed, ctx, Delivered::Switched(delivered_sp));
    if hand_on::trap_waits_for(tid) {
        TRAP_HANDED
    } else {
        TRAP_DONE
    }
}

/// The program's `SIGTRAP`s handed over to this thread, after one of racewatch's (the entry above): run
/// on the stack delivered to, as the program's handler would have.
extern "C-unwind" fn run_handed_in_place(sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    run_handed_traps(sig, raw::gettid(), ctx);
}

/// Where racewatch's handler runs for a signal of its own.
#[derive(Clone, Copy)]
enum Delivered {
    /// On the stack the kernel delivered to, with its room checked.
    InPlace,
    /// On a runtime stack already; the kernel delivered at this stack address.
    Switched(usize),
}

/// One of racewatch's signals in known thread `slot`: the detector's callback runs, with the interrupted
/// mask recorded and `errno` kept.
fn run_claimed(slot: usize, claimed: (u64, u32, u32, u64), ctx: *mut libc::c_void, delivered: Delivered) {
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    let interrupted = to_bits(unsafe { &(*(ctx as *const libc::ucontext_t)).uc_sigmask });
    MASK_IN_HANDLER[slot].store(interrupted, Ordering::Release);
    IN_HANDLER[slot].store(true, Ordering::Release);
    // SAFETY: errno is thread-local and this thread's own (a known thread has its own TLS); we
    // restore it so the interrupted code never sees our syscalls.
    let errno_slot = unsafe { libc::__errno_location() };
    // SAFETY: `errno_slot` is this thread's errno.
    let saved_errno = unsafe { *errno_slot };
    dispatch(claimed, ctx, delivered);
    IN_HANDLER[slot].store(false, Ordering::Release);
    // SAFETY: as above.
    unsafe { *errno_slot = saved_errno };
}

extern "C-unwind" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // A thread in a seccomp sandbox of its own, or every thread once the program entered one for the whole
    // process (a sample already on its way then): no system call at all (the filter may kill any), so no
    // lookup by tid. racewatch's signals are dropped; the program's go to its disposition.
    if !thread::syscalls_allowed() {
        // SAFETY: a non-null `info` is the kernel's siginfo for this delivery.
        let ours = unsafe { info.as_ref() }.is_some_and(|i| claimed(i).is_some() || hand_on::is_trap_mark(i));
        if !ours {
            chain(sig, info, ctx, false);
        }
        return;
    }
    // A thread the runtime does not know (a raw `clone`, maybe sharing another thread's TLS): nothing
    // thread-local is touched, the runtime's signals are dropped, others go to the program.
    let tid = raw::gettid();
    let slot = thread::known_slot(tid);
    let known = slot.is_some();
    if info.is_null() || ctx.is_null() {
        chain(sig, info, ctx, known);
        return;
    }
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let claimed = claimed(unsafe { &*info });
    if claimed.is_none() {
        // SAFETY: as above.
        if known && hand_on::is_trap_mark(unsafe { &*info }) {
            run_handed_traps(sig, tid, ctx);
        } else {
            chain(sig, info, ctx, known);
        }
        return;
    }
    let (Some(slot), Some(claimed)) = (slot, claimed) else { return };
    run_claimed(slot, claimed, ctx, Delivered::InPlace);
    // A `SIGTRAP` handed over here whose mark merged with this signal of racewatch's.
    run_handed_traps(sig, tid, ctx);
}

/// Runs the program's disposition for every `SIGTRAP` handed over to this thread (`tid`, known) and not
/// yet run ([`hand_on::hand_trap_to`]), each with the `siginfo` the process was sent.
fn run_handed_traps(sig: libc::c_int, tid: i32, ctx: *mut libc::c_void) {
    while let Some(mut handed) = hand_on::take_trap_for(tid) {
        chain(sig, &mut handed, ctx, true);
    }
}

/// Whether the kernel, without racewatch, would discard a `SIGTRAP` the program sends now to thread `tid`
/// racewatch knows (for a `kill` of its own pid, the main thread, whose mask the kernel checks): the
/// program ignores `SIGTRAP` and `tid` does not block it (a blocked one stays pending, to be taken or
/// dropped later). racewatch then does not send it: its handler, in place for its own signals, would end
/// a sleep or a wait there with `EINTR`, which an ignored signal never does.
pub fn discarded_as_ignored(tid: libc::pid_t) -> bool {
    let ours = tid > 0 && (thread::known_slot(tid).is_some() || tid == raw::gettid());
    is_installed() && ours && program_ignores_trap() && trap_blocked_in(tid) == Some(false)
}

/// Before an `exec` (or a call that starts a child: `posix_spawn`, `system`, `popen`) while the program
/// ignores `SIGTRAP`: the kernel's disposition is `SIG_IGN` for the call, which the new image inherits as
/// without racewatch (a handled signal is reset to the default there). racewatch's own signals are
/// discarded meanwhile. True when it was set ([`handle_trap_after_exec`] puts the handler back).
pub fn ignore_trap_for_exec() -> bool {
    if !is_installed() || !program_ignores_trap() {
        return false;
    }
    // SAFETY: zeroed `sigaction` is a valid "SIG_DFL, empty mask, no flags" value; SIG_IGN is set below.
    let mut ignore: libc::sigaction = unsafe { std::mem::zeroed() };
    ignore.sa_sigaction = libc::SIG_IGN;
    real::own_sigaction(libc::SIGTRAP, &ignore, std::ptr::null_mut()) == 0
}

/// After an `exec` that failed, or a spawn that returned: racewatch's handler is back in the kernel.
pub fn handle_trap_after_exec() {
    install_kernel_action();
}

/// Whether `pid` names this process (a `kill` or `sigqueue` of the program's to itself).
pub fn is_own_process(pid: libc::pid_t) -> bool {
    pid > 0 && pid == raw::getpid()
}

/// The program sends `SIGTRAP` to its own process (`kill`'s `SI_USER`, or `sigqueue`'s `SI_QUEUE` with
/// `value`). Without racewatch the kernel gives it to the main thread when that lets it through, else to
/// a thread that does, the sender first when it does (delivered before the call returns). Here the
/// kernel's masks lack `SIGTRAP`, so while the main thread has it blocked for the program racewatch does
/// the choosing: the sender gets it queued to itself (the kernel takes any `siginfo` a thread queues to
/// itself), or another thread that lets it through gets it handed over. `Some(0)` when sent so; `None`
/// to send it for real (the main thread lets it through, no thread does, or detection is off).
pub fn route_own_process_trap(code: libc::c_int, value: u64) -> Option<libc::c_int> {
    if !is_installed() || !detecting() || in_borrowed_memory() {
        return None;
    }
    let (pid, tid) = (raw::getpid(), raw::gettid());
    thread::known_slot(tid)?;
    let main_waits = trap_wait::waits(pid);
    if trap_blocked_in(pid) != Some(true) && !main_waits {
        return None;
    }
    let info = raw::siginfo_from(libc::SIGTRAP, code, pid, value);
    if main_waits {
        return matches!(hand_on::hand_trap_to(pid, &info), hand_on::HandedTrap::Sent | hand_on::HandedTrap::Merged)
            .then_some(0);
    }
    if !trap_blocked() {
        queue_trap_to_self(&info);
        return Some(0);
    }
    if !hand_to_a_thread_letting_it_through(&info) {
        if reads_trap_from_signalfd() {
            return None; // Sent for real: see `chain`.
        }
        park(&info);
    }
    Some(0)
}

/// The program sends `SIGTRAP` to another of its threads (`pthread_kill`, `tgkill`, `tkill`), `tid`, which
/// lets it through. Sent for real, it would merge with a sample of racewatch's pending there (a standard
/// signal is pending once per thread) and never reach the program's handler: at the debug rate a program
/// sending a busy worker 100 in turn, each after the last was handled, lost one in about 12 and waited for
/// ever. So its `siginfo` (`SI_TKILL`, the sender's pid and uid, as the kernel makes it) is handed over
/// ([`hand_on::hand_trap_to`]), whose mark racewatch's handler there looks for after each of its own
/// signals. One sent to the thread already waiting there takes this one in, as the thread's pending signal
/// would (one sent to the process and handed over does not: the kernel keeps that in the process's queue). `Some(0)`
/// when handed over; `None` to send it for real (not a thread racewatch knows, it blocks `SIGTRAP` for the
/// program, detection is off, or every slot is taken).
pub fn send_trap_to_thread(tid: libc::pid_t) -> Option<libc::c_int> {
    if !is_installed() || !detecting() || !thread::syscalls_allowed() || in_borrowed_memory() {
        return None;
    }
    let usable = tid != raw::gettid() && thread::known_slot(tid).is_some() && !confined::is_listed(tid);
    if !usable || trap_blocked_in(tid) != Some(false) {
        return None;
    }
    if hand_on::thread_trap_waits_for(tid) {
        return Some(0);
    }
    let info = raw::siginfo_from(libc::SIGTRAP, libc::SI_TKILL, raw::getpid(), 0);
    matches!(hand_on::hand_trap_to(tid, &info), hand_on::HandedTrap::Sent).then_some(0)
}

/// The program sends `SIGTRAP` to the calling thread (`raise`, or `pthread_kill`, `tgkill`, `tkill` naming
/// it) while the thread's kernel mask blocks `SIGTRAP` (the program's handler runs with it blocked, or
/// one of the program's waits pending for real): a sample of racewatch's pending there would swallow it
/// (a standard signal is pending once), and the handler would not run again when it returned (set 33
/// p06: a handler raising `SIGTRAP` 3 times per call lost 3 of 200 in 2 of 10 runs at the debug rate).
/// Such samples are taken back first, with the timers held until it is sent. The system call's result
/// (0 or `-errno`); `None` to send it as usual (the kernel mask lets it through: racewatch's handler
/// takes it at once).
pub fn raise_trap_here() -> Option<i64> {
    if !is_installed() || !thread::syscalls_allowed() || in_borrowed_memory() {
        return None;
    }
    let (pid, tid) = (raw::getpid(), raw::gettid());
    thread::known_slot(tid)?;
    let trap = 1u64 << (libc::SIGTRAP - 1);
    if raw::sigprocmask(libc::SIG_BLOCK, Some(0)).is_none_or(|mask| mask & trap == 0) {
        return None;
    }
    hold_sampling(true);
    if trap_pending() {
        discard_own_pending_trap();
    }
    let rc = raw::tgkill(pid, tid, libc::SIGTRAP);
    hold_sampling(false);
    Some(rc)
}

/// Set once the program made a signalfd that reads `SIGTRAP`.
static TRAP_SIGNALFD: AtomicBool = AtomicBool::new(false);

/// The program makes a signalfd for the signals `mask` (bits 0..=63 for signals 1..=64). One that reads
/// `SIGTRAP` sees only what is pending in the kernel, where racewatch cannot keep a `SIGTRAP` sent to the
/// process while every thread blocks it ([`park`]): such a signal makes racewatch step aside from then on
/// ([`pass_on_to_process`]), and one kept already is sent to the process again.
pub fn note_signalfd(mask: u64) {
    if mask & 1 << (libc::SIGTRAP - 1) == 0 {
        return;
    }
    TRAP_SIGNALFD.store(true, Ordering::SeqCst);
    if !thread::syscalls_allowed() || in_borrowed_memory() {
        return; // The next SIGTRAP sent to the process steps aside; the one kept stays for its taker.
    }
    if let Some(info) = take_parked() {
        send_to_process(&info);
    }
}

/// Whether the program reads `SIGTRAP` from a signalfd ([`note_signalfd`]).
fn reads_trap_from_signalfd() -> bool {
    TRAP_SIGNALFD.load(Ordering::SeqCst)
}

/// A mark of `SIGTRAP`s handed over to this thread ([`hand_on::hand_trap_to`]) was taken back with the
/// pending signals: the mark is queued to the thread again, so that its signals run when it next lets
/// `SIGTRAP` through (or are handed on from there).
fn mark_again() {
    hand_on::mark_again(raw::gettid());
}

/// A `SIGTRAP` sent to the process (`info`) reached this thread, which has it blocked for the program:
/// hands it over to a thread racewatch knows that lets it through for the program, as the kernel would
/// have chosen one (its masks lack `SIGTRAP`, so it could not). False when there is none.
fn hand_to_a_thread_letting_it_through(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the caller's `info` is the kernel's siginfo for this delivery.
    let Some(info) = (unsafe { info.as_ref() }) else { return false };
    for tid in receivers() {
        match hand_on::hand_trap_to(tid, info) {
            hand_on::HandedTrap::Sent | hand_on::HandedTrap::Merged => return true,
            hand_on::HandedTrap::Failed => {}
        }
    }
    false
}

/// The threads other than this one that a `SIGTRAP` sent to the process may be handed to, in the kernel's
/// order: the main thread when it lets it through, then a thread asleep in a wait for `SIGTRAP` (the
/// kernel takes the wait's set out of its mask), then the threads that do not block it. Threads that
/// confined themselves, and ones racewatch no longer knows (a main thread that called `pthread_exit`),
/// are left out.
fn receivers() -> impl Iterator<Item = i32> {
    let (me, pid) = (raw::gettid(), raw::getpid());
    let main_lets_it = trap_blocked_in(pid) == Some(false) || trap_wait::waits(pid);
    let letting = thread::known_tids().filter(|&tid| trap_blocked_in(tid) == Some(false));
    main_lets_it
        .then_some(pid)
        .into_iter()
        .chain(trap_wait::waiters())
        .chain(letting)
        .filter(move |&tid| tid != me && !confined::is_listed(tid) && thread::known_slot(tid).is_some())
}

/// Whether `info` is a signal one of the runtime's events sent (a sample or a watch trap).
pub fn is_own_trap(info: &libc::siginfo_t) -> bool {
    claimed(info).is_some()
}

/// The `TRAP_PERF` fields of a signal one of the runtime's events sent; `None` for any other.
fn claimed(info: &libc::siginfo_t) -> Option<(u64, u32, u32, u64)> {
    let claims = CLAIMS.load(Ordering::Acquire);
    if info.si_code != TRAP_PERF || claims == 0 {
        return None;
    }
    let fields = perf_fields(info);
    // SAFETY: CLAIMS only ever holds a `Claims` stored by `install`.
    let claims: Claims = unsafe { std::mem::transmute::<usize, Claims>(claims) };
    claims(fields.0).then_some(fields)
}

/// Runs the runtime's callback for a claimed perf signal in a known thread.
fn dispatch(claimed: (u64, u32, u32, u64), ctx: *mut libc::c_void, delivered: Delivered) {
    let (data, kind, flags, addr) = claimed;
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let handler = HANDLER.load(Ordering::Acquire);
    if handler == 0 {
        return; // Detection is off: drop it.
    }
    // SAFETY: HANDLER only ever holds a `PerfHandler` stored by `install`.
    let handler: PerfHandler = unsafe { std::mem::transmute::<usize, PerfHandler>(handler) };
    if let Delivered::InPlace = delivered {
        let room = stacks::host_room(stacks::current_sp());
        if room.is_some_and(|room| room < stacks::HOST_BUDGET) {
            SKIPPED_FOR_STACK.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let fpstate = uc.uc_mcontext.fpregs as usize as u64;
    let signal = PerfSignal { data, kind, flags, addr, regs: Regs::from_ucontext(uc), fpstate };
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    // Muted meanwhile: the detector is being switched off; do nothing more.
    if HANDLER.load(Ordering::SeqCst) != 0 {
        let ran = match delivered {
            Delivered::InPlace => stacks::run_on_runtime_stack(ctx as usize, &mut || handler(&signal)),
            Delivered::Switched(sp) => {
                stacks::note_host_depth(ctx as usize, sp);
                handler(&signal);
                true
            }
        };
        if !ran {
            SKIPPED_FOR_STACK.fetch_add(1, Ordering::Relaxed);
        }
    }
    ACTIVE.fetch_sub(1, Ordering::SeqCst);
}

/// How many claimed signals were dropped for lack of stack room (or of a free runtime stack).
pub fn skipped_for_stack() -> u64 {
    SKIPPED_FOR_STACK.load(Ordering::Relaxed)
}

/// After [`mute`]: waits (about `timeout_ms` at most) until no callback runs any more.
pub fn wait_until_quiet(timeout_ms: u64) {
    let deadline = crate::sys::thread::monotonic_ns() + timeout_ms * 1_000_000;
    while ACTIVE.load(Ordering::SeqCst) != 0 && crate::sys::thread::monotonic_ns() < deadline {
        crate::sys::raw::yield_cpu();
    }
}

/// Whether the kernel would have dropped this `SIGTRAP` at its default disposition: the process is
/// the init of a PID namespace (pid 1), which takes no signal sent from inside its namespace that it
/// has no handler for (`si_pid` is 0 when the sender is outside it, a kernel-made trap has a positive
/// `si_code` and is forced on it). Re-raised at `SIG_DFL`, it would be dropped all the same and leave
/// racewatch's handler replaced for good.
fn ignored_by_namespace_init(info: *const libc::siginfo_t) -> bool {
    // SAFETY: a non-null `info` is the kernel's siginfo for this delivery.
    let Some(info) = (unsafe { info.as_ref() }) else { return false };
    // SAFETY: the union's `si_pid` is set for the codes tested (sent by a process).
    raw::getpid() == 1 && info.si_code <= 0 && unsafe { info.si_pid() } != 0
}

/// Whether the kernel made this `SIGTRAP` for an instruction the thread ran (`int3`, a debug
/// exception: a positive `si_code` other than a perf event's), which it forces on the thread.
fn forced_by_the_kernel(info: *const libc::siginfo_t) -> bool {
    // SAFETY: a non-null `info` is the kernel's siginfo for this delivery.
    unsafe { info.as_ref() }.is_some_and(|info| info.si_code > 0 && info.si_code != TRAP_PERF)
}

/// The mask the interrupted code gets back lets `SIGTRAP` through (one raised here is taken then).
fn let_trap_through_on_return(ctx: *mut libc::c_void) {
    // SAFETY: a non-null `ctx` is the kernel's ucontext for this delivery, this handler's to change.
    if let Some(uc) = unsafe { (ctx as *mut libc::ucontext_t).as_mut() } {
        // SAFETY: `uc_sigmask` is a live sigset_t.
        unsafe { libc::sigdelset(&mut uc.uc_sigmask, libc::SIGTRAP) };
    }
}

/// Passes a signal that is not the runtime's to the program's disposition, as the kernel would have
/// delivered it: blocked while the program has it blocked, with the program's handler mask, on the
/// stack the program's flags choose. `known`: the calling thread is one the runtime knows (its
/// thread-local state may be read).
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, known: bool) {
    // SAFETY: a non-null `ctx` is the kernel's ucontext for this delivery.
    let uc = unsafe { (ctx as *const libc::ucontext_t).as_ref() };
    // A `SIGTRAP` delivered although the mask the interrupted code gets back blocks it: a wait's mask let
    // it through (`ppoll`, `pselect`, `epoll_pwait`, a raw `rt_sigsuspend`), which the program's handler
    // then runs in, as without racewatch.
    let through_a_wait = uc.is_some_and(|uc| has_trap(&uc.uc_sigmask));
    if forced_by_the_kernel(info) && ((known && trap_blocked()) || program_action().sa_sigaction == libc::SIG_IGN) {
        // A trap an instruction raised (`int3`, a debug exception) is forced on the thread: blocked or
        // ignored, the kernel sets its action back to `SIG_DFL` and lets it through, and the thread's
        // process ends with the default action, as without racewatch.
        PROGRAM_HANDLER.store(libc::SIG_DFL, Ordering::Release);
        if known {
            set_trap_blocked(false);
        }
        let_trap_through_on_return(ctx);
    }
    if known && trap_blocked() && !through_a_wait && !info.is_null() && !ctx.is_null() {
        // SAFETY: a non-null `info` is the kernel's siginfo for this delivery.
        // One sent to the process that reached a thread about to wait for it (or just done waiting) stays
        // pending for this thread, where its wait takes it.
        if process_directed(unsafe { (*info).si_code }) && !trap_wait::waits(raw::gettid()) {
            // SAFETY: a non-null `info` is the kernel's siginfo for this delivery.
            if !hand_to_a_thread_letting_it_through(info) {
                if reads_trap_from_signalfd() {
                    pass_on_to_process(info, ctx);
                } else {
                    park(unsafe { &*info });
                }
            }
        } else {
            make_pending(sig, info, ctx);
        }
        return;
    }
    let action = program_action();
    match action.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL if ignored_by_namespace_init(info) => {}
        libc::SIG_DFL => {
            // Restore the default action and re-raise to this thread: the signal stays pending
            // (SIGTRAP is blocked in here) and takes its default action (core dump) as soon as the
            // handler returns.
            // SAFETY: zeroed sigaction is SIG_DFL with an empty mask.
            let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            real::own_sigaction(libc::SIGTRAP, &dfl, std::ptr::null_mut());
            raw::tgkill(raw::getpid(), raw::gettid(), sig);
        }
        handler => {
            if action.sa_flags & libc::SA_RESETHAND != 0 {
                PROGRAM_HANDLER.store(libc::SIG_DFL, Ordering::Release);
            }
            // The mask the program's handler would run with: the interrupted one (a wait's own, else the
            // one the interrupted code gets back, less a SIGTRAP a wait let through), its sa_mask and
            // (without SA_NODEFER) SIGTRAP itself.
            let trap_bit = 1u64 << (libc::SIGTRAP - 1);
            let interrupted =
                WAIT_MASK.with(Cell::get).unwrap_or_else(|| uc.map_or(0, |uc| to_bits(&uc.uc_sigmask)) & !trap_bit);
            let trap = if action.sa_flags & libc::SA_NODEFER == 0 { trap_bit } else { 0 };
            let old = raw::sigprocmask(libc::SIG_SETMASK, Some(interrupted | to_bits(&action.sa_mask) | trap));
            let interrupted_sp = uc.map_or(0, |uc| uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize);
            let blocks = trap != 0 || has_trap(&action.sa_mask);
            let outer = IN_TRAP_HANDLER.with(|c| c.replace((interrupted_sp, blocks)));
            let mut call = || hand_on::call_program_handler(handler, action.sa_flags, sig, info, ctx);
            let onstack = action.sa_flags & libc::SA_ONSTACK != 0;
            match uc.and_then(|uc| {
                stacks::program_handler_top(uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize, onstack)
            }) {
                Some(top) => stacks::run_program_handler_at(top, &mut call),
                None => call(),
            }
            IN_TRAP_HANDLER.with(|c| c.set(outer));
            if let Some(old) = old {
                raw::sigprocmask(libc::SIG_SETMASK, Some(old));
            }
            if through_a_wait {
                release_after_wait(ctx);
            }
        }
    }
}

/// After the program's `SIGTRAP` that was held pending (blocked for real) ran in a wait that let it
/// through: when no other is pending, the mask the wait gives back (the frame's) lacks `SIGTRAP` again,
/// as racewatch keeps it: a sample of racewatch's would otherwise wait there and take the place of the
/// program's next `SIGTRAP` (the kernel does not queue a standard signal twice).
fn release_after_wait(ctx: *mut libc::c_void) {
    if raw::sigpending().is_some_and(|pending| pending & 1 << (libc::SIGTRAP - 1) == 0) {
        // SAFETY: `ctx` is the kernel's ucontext for this delivery (non-null: `through_a_wait` read it);
        // the mask in it is what `sigreturn` restores.
        unsafe { libc::sigdelset(&mut (*(ctx as *mut libc::ucontext_t)).uc_sigmask, libc::SIGTRAP) };
    }
}

/// Called, in a signal handler, when racewatch must step aside at once (see [`pass_on_to_process`]):
/// stops sampling; must be async-signal-safe.
static STOP_SAMPLING: AtomicUsize = AtomicUsize::new(0);
/// Set when racewatch stepped aside in a signal handler: the rest (closing, the warning) is the
/// lifecycle's, outside handlers ([`step_aside_requested`]).
static STEP_ASIDE: AtomicBool = AtomicBool::new(false);

/// Called, in a signal handler, with `true` before and `false` after [`make_pending`] puts the
/// program's `SIGTRAP` back: switches every thread's sampling timers off meanwhile (a sample firing
/// between taking back and queueing would take the one slot a pending `SIGTRAP` has, and the
/// program's would be lost); must be async-signal-safe.
static HOLD_SAMPLING: AtomicUsize = AtomicUsize::new(0);

/// Sets what stops sampling when racewatch must step aside inside a signal handler, and what holds
/// the sampling timers while a program's `SIGTRAP` is put back pending.
pub fn on_sampling(stop_sampling: fn(), hold_sampling: fn(bool)) {
    STOP_SAMPLING.store(stop_sampling as usize, Ordering::Release);
    HOLD_SAMPLING.store(hold_sampling as usize, Ordering::Release);
}

/// Holds (`true`) or lets go (`false`) the sampling timers (see [`HOLD_SAMPLING`]).
fn hold_sampling(hold: bool) {
    let f = HOLD_SAMPLING.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: HOLD_SAMPLING only ever holds a `fn(bool)` stored by `on_sampling`.
        let f: fn(bool) = unsafe { std::mem::transmute::<usize, fn(bool)>(f) };
        f(hold);
    }
}

/// Whether racewatch stepped aside in a signal handler and the lifecycle has not finished it yet
/// ([`step_aside_requested`]). Async-signal-safe.
pub fn step_aside_pending() -> bool {
    STEP_ASIDE.load(Ordering::Acquire)
}

/// Whether racewatch stepped aside in a signal handler since the last call (the lifecycle then
/// switches detection off for good).
pub fn step_aside_requested() -> Option<StepAside> {
    if !STEP_ASIDE.swap(false, Ordering::AcqRel) {
        return None;
    }
    match STEP_ASIDE_WHY.load(Ordering::Acquire) {
        2 => Some(StepAside::PendingOnThread),
        _ => Some(StepAside::SentToProcess),
    }
}

/// Whether a signal with this `si_code` was sent to the whole process (any of its threads may take it):
/// `kill`, `sigqueue`, a POSIX timer or message queue notifying the process, and the like. Only `tgkill`
/// (`SI_TKILL`) names a thread among the senders' codes; a positive code is the kernel's own, raised
/// by the thread itself (`int3`, a breakpoint). `pthread_sigqueue` also says `SI_QUEUE`: taken as
/// process-directed, it reaches a thread that takes `SIGTRAP`, not necessarily the one it named.
fn process_directed(code: libc::c_int) -> bool {
    code <= 0 && code != libc::SI_TKILL
}

/// A `SIGTRAP` sent to the process (`kill`, `sigqueue`, another process's, a timer's) that no thread lets
/// through now: without racewatch it would wait in the process's queue for the first thread that lets it
/// through; the kernel cannot keep it there (its masks lack `SIGTRAP`), so racewatch does
/// ([`hand_on::park_trap`]) until a thread waits for it ([`trap_wait`]), unblocks it
/// ([`take_parked_on_unblock`]), runs a wait whose own mask lets it through ([`during_program_wait`]) or
/// `exec`s ([`block_trap_for_exec`]). The program's `sigpending` shows it meanwhile. Async-signal-safe.
fn park(info: &libc::siginfo_t) {
    let mut info = *info;
    // Bounded: each round, a thread showed that it lets the signal through and then did not take it.
    for _ in 0..4 {
        if !hand_on::park_trap(&info) {
            return; // One waits already: merged, as the kernel merges a standard signal.
        }
        // A thread that began to let it through meanwhile looked for it before it was kept: either that
        // thread finds it, or this one sees that thread (both look after showing themselves).
        std::sync::atomic::fence(Ordering::SeqCst);
        if receivers().next().is_none() {
            return;
        }
        let Some(parked) = hand_on::take_parked_trap() else { return };
        if hand_to_a_thread_letting_it_through(&parked) {
            return;
        }
        info = parked;
    }
    hand_on::park_trap(&info);
}

/// The `SIGTRAP` kept for the process ([`park`]), for a thread that now lets it through; taken after the
/// thread showed that it does (its mask bit, or its listing as a waiter).
pub fn take_parked() -> Option<libc::siginfo_t> {
    std::sync::atomic::fence(Ordering::SeqCst);
    hand_on::take_parked_trap()
}

/// The program unblocked `SIGTRAP` in this thread: one kept for the process ([`park`]) is delivered here,
/// as the kernel delivers a pending signal on the way out of the mask call.
pub fn take_parked_on_unblock() {
    if !thread::syscalls_allowed() {
        return; // A thread that confined itself gets no system call of racewatch's.
    }
    if let Some(info) = take_parked() {
        queue_trap_to_self(&info);
    }
}

/// Whether a `SIGTRAP` sent to the process waits for a thread that lets it through ([`park`]): the
/// program's `sigpending` shows it.
pub fn trap_parked() -> bool {
    hand_on::trap_parked()
}

/// A process-directed `SIGTRAP` (`kill`, `sigqueue`, …) reached a thread that has it blocked (for the
/// program; the kernel could only pick threads that do not block it for real). The kernel lets a
/// thread hand such a signal on only to itself, so the program's masks must become real for the
/// signal to wait, shared, for a thread that unblocks or `sigwaitinfo`s it: racewatch steps aside
/// (sampling stops here; the lifecycle switches detection off and says so), this thread returns with
/// `SIGTRAP` blocked for real, and the signal is sent to the process again with its own `siginfo`
/// (`rt_sigqueueinfo` keeps the sender's code, pid, uid and payload), to go round the threads that block it until one takes it or all block it and
/// it stays pending.
fn pass_on_to_process(info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    step_aside_here(StepAside::SentToProcess);
    // SAFETY: `ctx` is the kernel's ucontext for this delivery: the mask in it is restored on return.
    unsafe { libc::sigaddset(&mut (*(ctx as *mut libc::ucontext_t)).uc_sigmask, libc::SIGTRAP) };
    send_to_process(info);
}

/// Why racewatch stepped aside in a signal handler ([`step_aside_requested`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepAside {
    /// A `SIGTRAP` sent to the process reached a thread that blocks it, and no thread lets it through
    /// ([`pass_on_to_process`]).
    SentToProcess,
    /// A `SIGTRAP` the program sent a thread that blocks it must wait there, pending for real, where a
    /// signal of racewatch's could take its place or be read with it ([`make_pending`]).
    PendingOnThread,
}

/// Why racewatch stepped aside (a [`StepAside`] as its index + 1; 0: it did not).
static STEP_ASIDE_WHY: AtomicU8 = AtomicU8::new(0);

/// Steps aside from a signal handler while the program reads `SIGTRAP` from a signalfd: sampling stops at
/// once (no signal of racewatch's is queued from here on), the program's disposition is used for every
/// `SIGTRAP` ([`mute`]), and the lifecycle switches detection off and says why.
fn step_aside_here(why: StepAside) {
    mute();
    let stop = STOP_SAMPLING.load(Ordering::Acquire);
    if stop != 0 {
        // SAFETY: STOP_SAMPLING only ever holds a `fn()` stored by `on_step_aside`.
        let stop: fn() = unsafe { std::mem::transmute::<usize, fn()>(stop) };
        stop();
    }
    let _ = STEP_ASIDE_WHY.compare_exchange(0, why as u8 + 1, Ordering::AcqRel, Ordering::Relaxed);
    STEP_ASIDE.store(true, Ordering::Release);
    STEP_ASIDE_DONE.store(true, Ordering::Release);
}

/// Sends a process-directed `SIGTRAP` with `info` to the process again.
fn send_to_process(info: *const libc::siginfo_t) {
    let (pid, info) = (raw::getpid() as u64, info as u64);
    if raw::syscall6(libc::SYS_rt_sigqueueinfo, [pid, libc::SIGTRAP as u64, info, 0, 0, 0]) == 0 {
        return;
    }
    // A non-negative code (`kill`'s `SI_USER`) is accepted by `rt_sigqueueinfo` only from the thread
    // whose id is the pid. A pidfd naming the calling thread may send it to the whole process with
    // its own `siginfo` (Linux 6.9: a thread's pidfd; 6.15: one without a descriptor).
    if raw::send_to_own_process(libc::SIGTRAP, info as *const libc::siginfo_t) {
        return;
    }
    // An older kernel: sent again by `kill`, the signal names this process as its sender.
    raw::syscall6(libc::SYS_kill, [pid, libc::SIGTRAP as u64, 0, 0, 0, 0]);
}

/// The program has `SIGTRAP` blocked: queue this foreign one to the thread again and return with
/// `SIGTRAP` blocked in the kernel, so it waits as a pending signal, exactly as without racewatch.
/// A `SIGTRAP` already pending here (a sample of racewatch's that fired while this handler ran) is
/// taken back first: `SIGTRAP` is not queued twice, so it would stand in the program's place. The
/// sampling timers are held meanwhile, so that no sample takes the slot between the two; a
/// process-directed `SIGTRAP` taken back with them is sent to the process again.
fn make_pending(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: `ctx` is the kernel's ucontext for this delivery: the mask in it is restored on
    // return.
    unsafe {
        let uc = &mut *(ctx as *mut libc::ucontext_t);
        libc::sigaddset(&mut uc.uc_sigmask, libc::SIGTRAP);
    }
    debug_assert_eq!(sig, libc::SIGTRAP);
    // Pending for real, with `SIGTRAP` blocked for real here: a sample of racewatch's that fired here
    // afterwards would wait beside it and be read from the program's signalfd, or take its slot once the
    // signalfd took it. The sampling timer is one for every thread, so racewatch steps aside.
    if reads_trap_from_signalfd() {
        step_aside_here(StepAside::PendingOnThread);
    }
    hold_sampling(true);
    // SAFETY: zeroed siginfo is a valid out-parameter for the kernel to fill.
    let mut taken: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut shared = None;
    let mut marked = false;
    while take_pending_trap(&mut taken) {
        if hand_on::is_trap_mark(&taken) {
            marked = true;
        } else if claimed(&taken).is_none() && process_directed(taken.si_code) {
            shared = Some(taken);
        }
    }
    if marked {
        mark_again();
    }
    queue_trap_to_self(info);
    hold_sampling(false);
    if let Some(shared) = shared {
        send_to_process(&shared);
    }
}
