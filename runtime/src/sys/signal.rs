//! The `SIGTRAP` handler: perf-event signals (`si_code == TRAP_PERF`) go to the
//! runtime's callback, every other `SIGTRAP` to the disposition that was
//! installed before ours (a handler, `SIG_IGN`, or the default core dump).
//!
//! Flags: `SA_SIGINFO | SA_RESTART`. Not `SA_NODEFER`: `SIGTRAP` stays blocked
//! while the callback runs, so a thread stalled in its own sample never nests
//! a trap (a trap raised meanwhile stays pending and is delivered, flagged
//! async, on return). Not `SA_ONSTACK`: the decoder and the fixed records need
//! more stack than a typical 8 KiB alternate signal stack.
//!
//! Limitation: a program that installs its own `SIGTRAP` handler *after* the
//! runtime's constructor replaces ours; sampling then stops working (its
//! handler sees `TRAP_PERF` signals it does not expect). `sigaction`/`signal`
//! are not interposed.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

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
}

/// The runtime's callback; returns false when the signal was not one of its events
/// (it is then chained like any other `SIGTRAP`). Must be async-signal-safe.
pub type PerfHandler = fn(&PerfSignal) -> bool;

static HANDLER: AtomicUsize = AtomicUsize::new(0);
static PREVIOUS: OnceLock<PreviousAction> = OnceLock::new();

/// The disposition `SIGTRAP` had before ours.
struct PreviousAction(libc::sigaction);

// SAFETY: a plain C struct of integers and function addresses, written once, then only read.
unsafe impl Sync for PreviousAction {}
// SAFETY: as above; it holds no thread-bound resource.
unsafe impl Send for PreviousAction {}

/// Installs the `SIGTRAP` handler (once; later calls only replace the callback).
pub fn install(handler: PerfHandler) -> io::Result<()> {
    HANDLER.store(handler as usize, Ordering::Release);
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    // SAFETY: zeroed `sigaction` is a valid "SIG_DFL, empty mask" value; we then fill
    // in our handler and flags; `old` receives the previous disposition.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_sigtrap as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTRAP, &new, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        let _ = PREVIOUS.set(PreviousAction(old));
    }
    Ok(())
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

extern "C" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; we restore it so the interrupted code never sees our syscalls.
    let errno_slot = unsafe { libc::__errno_location() };
    // SAFETY: `errno_slot` is this thread's errno.
    let saved_errno = unsafe { *errno_slot };
    let handled = dispatch(info, ctx);
    if !handled {
        chain(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *errno_slot = saved_errno };
}

fn dispatch(info: *mut libc::siginfo_t, ctx: *mut libc::c_void) -> bool {
    let handler = HANDLER.load(Ordering::Acquire);
    if handler == 0 || info.is_null() || ctx.is_null() {
        return false;
    }
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler.
    let (info, uc) = unsafe { (&*info, &*(ctx as *const libc::ucontext_t)) };
    if info.si_code != TRAP_PERF {
        return false;
    }
    let (data, kind, flags, addr) = perf_fields(info);
    let signal = PerfSignal { data, kind, flags, addr, regs: Regs::from_ucontext(uc) };
    // SAFETY: HANDLER only ever holds a `PerfHandler` stored by `install`.
    let handler: PerfHandler = unsafe { std::mem::transmute::<usize, PerfHandler>(handler) };
    handler(&signal)
}

/// Passes a signal that is not ours to the previous disposition.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(PreviousAction(prev)) = PREVIOUS.get() else { return };
    match prev.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // SAFETY: restoring the default action and re-raising to this thread: the
            // signal stays pending (SIGTRAP is blocked in here) and takes its default
            // action (core dump) as soon as the handler returns.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGTRAP, &dfl, std::ptr::null_mut());
                libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), sig);
            }
        }
        handler if prev.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the program installed this as an SA_SIGINFO handler; we pass it the
            // arguments the kernel gave us.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx);
        }
        handler => {
            // SAFETY: the program installed this as a classic one-argument handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(sig);
        }
    }
}
