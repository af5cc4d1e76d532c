//! The program's handlers of the signals a process is sent (`kill`, `sigqueue`, `alarm`, its
//! terminal, a child's end), wrapped so that one a worker thread took while the main thread lets it
//! through goes on to the main thread; and every program handler with `SA_ONSTACK`, wrapped so that
//! it runs on the interrupted stack when the kernel put it on racewatch's hidden alternate stack (a
//! thread without one of the program's), as it would without racewatch.
//!
//! Why: without racewatch the kernel gives such a signal to the main thread when the main thread lets
//! it through, even while every other thread is busy; a `main` that waits in `pause` or `sigsuspend`
//! for its handler to set a flag relies on it. Every racewatch signal changes the mask of the thread
//! it interrupts twice (its delivery blocks signals, its return restores the mask), and at each change
//! the kernel looks at the process's pending signals again: the interrupted worker takes one the
//! kernel had woken the main thread for, or the kernel wakes another busy worker for it
//! (`retarget_shared_pending`), and the main thread waits for ever. No choice of racewatch's handler
//! mask avoids both; so the program's handler, whichever thread the kernel hands the signal to,
//! decides first where it runs.
//!
//! The kernel holds the trampoline (`racewatch_hand_on_entry`, which asks [`decide`]; with `SA_SIGINFO` added, every other flag and the mask the
//! program's) for a handler the program installs for a signal of [`WRAPPED`]; the program's `sigaction`
//! reads back its own handler and flags. The trampoline runs the program's handler, except on a
//! thread other than the main one, while detection is on, for a signal sent to the process that the
//! main thread lets through now (read from `/proc/self/status`, the main thread's `State` and
//! `SigBlk`; inside racewatch's own handler there, the mask it interrupted): the signal is then handed
//! over ([`hand_over`]), or merged with one handed over before that the main thread has not taken yet. Its `siginfo` is saved, and the main
//! thread is sent the same signal by `sigqueue` with a mark; the kernel delivers it there with the
//! program's flags, mask and stack, and the main thread's trampoline runs the handler with the saved
//! `siginfo`, so the handler reads the sender, code and payload of the first delivery (a child's end
//! and status, a `kill`'s pid, `SI_KERNEL` for `alarm`). A one-shot handler (`SA_RESETHAND`), which the
//! kernel reset for the first delivery, is put back for the second, which resets it again.
//!
//! The signal handed over can reach the main thread at a moment the kernel leaves no trace of: the
//! kernel woke the main thread's wait for the first delivery, found nothing when the worker had taken
//! it, and wound the wait back to run again (the instruction pointer on the `syscall` instruction,
//! `rax` the call's number) just before the second arrived. The handler then runs and the wait starts
//! over, for ever if the program waits for that one signal. Without racewatch the wait ends with
//! `EINTR` after the handler; so a signal handed over that finds the main thread about to run a wait
//! that a handler ends (`pause`, `sigsuspend`, the `poll`/`select`/`epoll` family; a blocking read,
//! write, accept, connect or child wait when the handler lacks `SA_RESTART`) ends that wait with
//! `EINTR` ([`end_wait`]).

use crate::sys::{mem, raw, stacks, tracer};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Signals whose program handlers are wrapped: those a process is sent by `kill`, `sigqueue`, `alarm`,
/// its terminal or a child, which programs wait for in `pause`/`sigsuspend`. Not the faults, the
/// CPU-time timers (profilers read the interrupted context), `SIGURG`, `SIGPWR`, `SIGXCPU` or realtime
/// signals (language runtimes send them to one thread and read or change its context).
pub const WRAPPED: [i32; 10] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGWINCH,
];

const SIGNALS: usize = 65;
/// The program's handler for each signal whose kernel handler is the trampoline.
static HANDLERS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(libc::SIG_DFL) }; SIGNALS];
/// The flags the program gave it.
static FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];

/// Whether `sig`'s program handlers are wrapped to be handed over to the main thread.
pub fn wraps(sig: i32) -> bool {
    WRAPPED.contains(&sig)
}

/// Whether the trampoline stands in the kernel for a program handler of `sig` with `flags`: one of
/// [`WRAPPED`], or any handler with `SA_ONSTACK`, which the kernel runs on racewatch's alternate stack
/// in a thread without one of the program's, where the trampoline moves it back to the interrupted
/// stack ([`run_program_handler_at`](stacks::run_program_handler_at)).
pub fn stands_in(sig: i32, flags: i32) -> bool {
    wraps(sig) || (flags & libc::SA_ONSTACK != 0 && !matches!(sig, libc::SIGTRAP | libc::SIGKILL | libc::SIGSTOP))
}

const fn bit(sig: i32) -> u64 {
    1u64 << ((sig - 1) & 63)
}

/// The program's handler and flags as last recorded for `sig` (what the kernel's trampoline stands for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    handler: usize,
    flags: i32,
}

/// What the trampoline stands for now for `sig`.
pub fn recorded(sig: i32) -> Recorded {
    let i = usize::try_from(sig).unwrap_or(0).min(SIGNALS - 1);
    Recorded { handler: HANDLERS[i].load(Ordering::Acquire), flags: FLAGS[i].load(Ordering::Acquire) }
}

/// Turns the program's `act` for `sig` into what the kernel holds: for a wrapped signal the program's
/// disposition is recorded, and a handler is replaced by the trampoline (`SIG_DFL` and `SIG_IGN` go to
/// the kernel as they are).
pub fn to_kernel(sig: i32, act: &mut libc::sigaction) {
    if act.sa_sigaction == trampoline_address() {
        return;
    }
    if !stands_in(sig, act.sa_flags) {
        record(sig, Recorded { handler: libc::SIG_DFL, flags: 0 });
        return;
    }
    record(sig, Recorded { handler: act.sa_sigaction, flags: act.sa_flags });
    if !matches!(act.sa_sigaction, libc::SIG_DFL | libc::SIG_IGN) {
        act.sa_sigaction = trampoline_address();
        act.sa_flags |= libc::SA_SIGINFO;
    }
}

/// Puts back what the trampoline stood for (`before`, recorded before the call) into an action the
/// kernel returned for `sig`: the program reads its own handler and flags, also once the kernel reset
/// a one-shot handler (`SA_RESETHAND`) to `SIG_DFL`, keeping the flags the trampoline had.
pub fn from_kernel(old: &mut libc::sigaction, before: Recorded) {
    let wrapped = old.sa_sigaction == trampoline_address();
    let reset_by_kernel = old.sa_sigaction == libc::SIG_DFL
        && !matches!(before.handler, libc::SIG_DFL | libc::SIG_IGN)
        && old.sa_flags & before.flags & libc::SA_RESETHAND != 0;
    if wrapped {
        old.sa_sigaction = before.handler;
    }
    if wrapped || reset_by_kernel {
        old.sa_flags = (old.sa_flags & !libc::SA_SIGINFO) | (before.flags & libc::SA_SIGINFO);
    }
}

/// Records `recorded` again for `sig` (a refused `sigaction` leaves the kernel as it was).
pub fn record(sig: i32, recorded: Recorded) {
    let Some(i) = usize::try_from(sig).ok().filter(|&i| i < SIGNALS) else { return };
    FLAGS[i].store(recorded.flags, Ordering::Release);
    HANDLERS[i].store(recorded.handler, Ordering::Release);
    // A signal handed over under the old disposition may never reach the trampoline (ignored now).
    SAVED_BUSY[i].store(false, Ordering::Release);
}

fn trampoline_address() -> usize {
    racewatch_hand_on_entry as *const () as usize
}

extern "C" {
    /// What the kernel calls for a wrapped signal (below): it asks [`decide`] what to do, then jumps
    /// to the program's handler with the kernel's arguments and stack pointer, runs it moved
    /// ([`run_moved`]), or returns.
    fn racewatch_hand_on_entry(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void);
}

/// What [`decide`] returns when the program's handler must run moved off racewatch's alternate stack
/// ([`run_moved`]); handlers are never 0 or 1 (`SIG_DFL`, `SIG_IGN`).
const RUN_MOVED: usize = 1;

// The kernel's entry for a wrapped signal. The program's handler, when it runs in place, is jumped to
// with the stack exactly as the kernel left it (its return address the kernel's `sigreturn` restorer):
// its frame is where it would be without racewatch (a fiber library measuring a 16 KiB stack's
// high-water mark saw 530 bytes more when the trampoline called the handler).
//
// When the kernel delivered the signal on an alternate stack (the program's, or racewatch's hidden
// one: the `uc_stack` it saved in the ucontext), the decision runs on one of racewatch's runtime
// stacks, so that the alternate stack (a program's is often sized by `SIGSTKSZ`) holds nothing below
// the kernel's frame, not the decision's few hundred bytes (a program measuring its 8 KiB alternate
// stack's high-water mark read 1,672 bytes instead of 1,344 with sampling off: set 21 p05). The
// arguments and the masks are kept on the runtime stack, claimed before any of them is written.
// Every signal is blocked while the decision runs there: a nested signal with `SA_ONSTACK` would
// otherwise be put at the top of the alternate stack this one's frame occupies. The mask is blocked
// and put back with raw `rt_sigprocmask` calls (no `errno`), the second once back on the delivered
// stack. The decision runs in place, as before, without a system call, on a thread's own stack (the
// two calls cost about 0.5 us a signal, a sixth of a `raise`), when a thread has confined itself (a
// sandbox may forbid the call), when the runtime stacks are not mapped or all in use, or when
// blocking failed.
//
// The runtime stack, below its top: all signals, the mask before, the delivered stack pointer, the
// runtime stack's index, then `rdi`, `rsi`, `rdx` (the kernel's arguments).
std::arch::global_asm!(
    ".pushsection .text.racewatch_hand_on_entry,\"ax\",@progbits",
    ".globl racewatch_hand_on_entry",
    ".hidden racewatch_hand_on_entry",
    ".type racewatch_hand_on_entry,@function",
    "racewatch_hand_on_entry:",
    ".cfi_startproc",
    // On an alternate stack (the one the kernel saved in the ucontext's `uc_stack`)? Else decide in
    // place, with no system call.
    "test rdx, rdx",
    "jz 5f",
    "mov rax, rsp",
    "sub rax, qword ptr [rdx + {uc_stack_sp}]",
    "cmp rax, qword ptr [rdx + {uc_stack_size}]",
    "jae 5f",
    stacks::claim_runtime_stack!("5f"),
    "mov r9, r8",
    "mov qword ptr [r9 - 8], -1",
    "mov qword ptr [r9 - 24], rsp",
    "mov qword ptr [r9 - 32], rcx",
    "mov qword ptr [r9 - 40], rdi",
    "mov qword ptr [r9 - 48], rsi",
    "mov qword ptr [r9 - 56], rdx",
    // rt_sigprocmask(SIG_BLOCK, all, &before, 8)
    "mov eax, {sys_mask}",
    "xor edi, edi",
    "lea rsi, [r9 - 8]",
    "lea rdx, [r9 - 16]",
    "mov r10d, 8",
    "syscall",
    "test rax, rax",
    "jnz 4f",
    "lea rsp, [r9 - 64]",
    "mov rdi, qword ptr [r9 - 40]",
    "mov rsi, qword ptr [r9 - 48]",
    "mov rdx, qword ptr [r9 - 56]",
    "mov rcx, qword ptr [r9 - 24]",
    "call {decide}",
    "lea r9, [rsp + 64]",
    "mov r8, rax",
    "mov rsp, qword ptr [r9 - 24]",
    // rt_sigprocmask(SIG_SETMASK, &before, NULL, 8), back on the delivered stack.
    "mov eax, {sys_mask}",
    "mov edi, 2",
    "lea rsi, [r9 - 16]",
    "xor edx, edx",
    "mov r10d, 8",
    "syscall",
    "mov rdi, qword ptr [r9 - 40]",
    "mov rsi, qword ptr [r9 - 48]",
    "mov rdx, qword ptr [r9 - 56]",
    "mov rcx, qword ptr [r9 - 32]",
    "lock bts dword ptr [rip + {pool_free}], ecx",
    "jmp 6f",
    // Blocking failed: give the runtime stack back and decide in place.
    "4:",
    "mov rdi, qword ptr [r9 - 40]",
    "mov rsi, qword ptr [r9 - 48]",
    "mov rdx, qword ptr [r9 - 56]",
    "mov rcx, qword ptr [r9 - 32]",
    "lock bts dword ptr [rip + {pool_free}], ecx",
    "5:",
    "push rdi",
    ".cfi_adjust_cfa_offset 8",
    "push rsi",
    ".cfi_adjust_cfa_offset 8",
    "push rdx",
    ".cfi_adjust_cfa_offset 8",
    "lea rcx, [rsp + 24]",
    "call {decide}",
    "mov r8, rax",
    "pop rdx",
    ".cfi_adjust_cfa_offset -8",
    "pop rsi",
    ".cfi_adjust_cfa_offset -8",
    "pop rdi",
    ".cfi_adjust_cfa_offset -8",
    "6:",
    "cmp r8, {run_moved_code}",
    "je 7f",
    "test r8, r8",
    "jz 8f",
    "jmp r8",
    "7:",
    "sub rsp, 8",
    ".cfi_adjust_cfa_offset 8",
    "call {run_moved}",
    "add rsp, 8",
    ".cfi_adjust_cfa_offset -8",
    "8:",
    "ret",
    ".cfi_endproc",
    ".size racewatch_hand_on_entry, . - racewatch_hand_on_entry",
    ".popsection",
    listed = sym super::confined::LISTED,
    pool_base = sym stacks::POOL_BASE,
    pool_free = sym stacks::POOL_FREE,
    stride = const stacks::POOL_STRIDE,
    sys_mask = const libc::SYS_rt_sigprocmask,
    run_moved_code = const RUN_MOVED,
    uc_stack_sp = const std::mem::offset_of!(libc::ucontext_t, uc_stack) + std::mem::offset_of!(libc::stack_t, ss_sp),
    uc_stack_size = const std::mem::offset_of!(libc::ucontext_t, uc_stack) + std::mem::offset_of!(libc::stack_t, ss_size),
    decide = sym decide,
    run_moved = sym run_moved,
);

/// Decides for a wrapped signal delivered at stack address `delivered_sp`: the program's handler to
/// jump to in place, [`RUN_MOVED`], or 0 when there is nothing more to run (the signal was handed over,
/// or the disposition changed meanwhile). Runs on a runtime stack (or in place, see the entry above).
extern "C-unwind" fn decide(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    delivered_sp: usize,
) -> usize {
    let Recorded { handler, flags } = recorded(sig);
    if matches!(handler, libc::SIG_DFL | libc::SIG_IGN) {
        return 0; // The program's record changed meanwhile (another thread's `sigaction`): nothing to run.
    }
    if super::confined::here() {
        return handler; // A seccomp sandbox of the thread's own: nothing decided that takes a system call.
    }
    // SAFETY: a non-null `info` is the kernel's siginfo for this delivery, this handler's to change.
    if let Some(delivered) = unsafe { info.as_mut() }.filter(|_| wraps(sig)) {
        // The process and thread ids (two system calls) only when there is something to decide.
        let may_hand_over = sent_to_process(sig, delivered.si_code)
            && crate::sys::signal::detecting()
            && !(delivered.si_code == libc::SI_QUEUE && take_directed(sig));
        let slot_taken = SAVED_BUSY[sig as usize].load(Ordering::Acquire);
        if (may_hand_over || slot_taken || delivered.si_code == libc::SI_QUEUE)
            && handed_over_or_taken(sig, delivered, ctx, flags, may_hand_over)
        {
            return 0;
        }
    }
    if flags & libc::SA_ONSTACK == 0 {
        return handler; // The kernel put it on the interrupted stack (or where racewatch's code runs now).
    }
    match moved_off_alt_stack(ctx, delivered_sp) {
        Some(_) => RUN_MOVED,
        None => handler,
    }
}

/// Runs the program's handler for a signal the kernel put on racewatch's alternate stack ([`decide`]
/// said so), on the interrupted stack as without racewatch. Runs on the stack delivered to.
extern "C-unwind" fn run_moved(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Recorded { handler, flags } = recorded(sig);
    if matches!(handler, libc::SIG_DFL | libc::SIG_IGN) {
        return;
    }
    match moved_off_alt_stack(ctx, stacks::current_sp()) {
        Some(top) => stacks::run_program_handler_at(top, &mut || call_program_handler(handler, flags, sig, info, ctx)),
        None => call_program_handler(handler, flags, sig, info, ctx),
    }
}

/// The rare part of [`decide`]: a signal handed over to this thread (its saved `siginfo` put in
/// `delivered`, a wait wound back ended) or one this worker hands over to the main thread (true: it
/// must not run here).
#[inline(never)]
fn handed_over_or_taken(
    sig: i32,
    delivered: &mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    flags: i32,
    may_hand_over: bool,
) -> bool {
    let (pid, tid) = (raw::getpid(), raw::gettid());
    if pid == tid && is_handed_over(delivered, pid) {
        take_saved(sig, delivered);
        end_wait(ctx, flags);
    } else if pid == tid {
        // One handed over may have merged with this one (a standard signal pending once): its slot must
        // not stay taken.
        SAVED_BUSY[sig as usize].store(false, Ordering::Release);
    } else if may_hand_over && crate::sys::thread::known_slot(tid).is_some() && hand_over(sig, delivered, flags, pid) {
        // (Only from a thread racewatch knows: one of the program's own making may have no glibc
        // thread-local storage, which `hand_over`'s `errno` lives in.)
        return true;
    }
    false
}

/// Where a handler the kernel put on racewatch's alternate stack must run instead (the interrupted
/// stack, as without racewatch); `None` to run it where it is.
fn moved_off_alt_stack(ctx: *mut libc::c_void, delivered_sp: usize) -> Option<usize> {
    // SAFETY: a non-null `ctx` is the kernel's ucontext for this delivery.
    let interrupted_sp = unsafe { (ctx as *const libc::ucontext_t).as_ref() }
        .map(|uc| uc.uc_mcontext.gregs[libc::REG_RSP as usize] as usize)?;
    stacks::off_own_alt_stack_at(interrupted_sp, delivered_sp).flatten()
}

/// Calls a handler the program installed (`handler`, not `SIG_DFL`/`SIG_IGN`, with its `flags`) with the
/// kernel's arguments for this delivery, as the kernel would have: three of them with `SA_SIGINFO`.
pub fn call_program_handler(
    handler: usize,
    flags: i32,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this as an SA_SIGINFO handler; it gets the kernel's arguments.
        let f: extern "C-unwind" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this as a classic one-argument handler.
        let f: extern "C-unwind" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// Whether a signal with `code` was sent to the process (by `kill`, `sigqueue`, `alarm`, the terminal,
/// a child's end or stop): one the kernel would have given a waiting main thread. Not one sent to this
/// thread (`raise`, `pthread_kill`, a timer of its own) or by a subsystem (`SI_TIMER`, `SI_SIGIO`, ...).
fn sent_to_process(sig: i32, code: i32) -> bool {
    matches!(code, libc::SI_QUEUE | libc::SI_USER | libc::SI_KERNEL) || (sig == libc::SIGCHLD && code > 0)
}

/// Signals of [`WRAPPED`] the program sent to one of its own threads with `pthread_sigqueue`, on their
/// way: the thread and signal (`tid << 8 | sig`) and how many. Their `SI_QUEUE` is also `sigqueue`'s to
/// the process, which a worker hands over to the main thread; these must run where they were sent.
const DIRECTED_SLOTS: usize = 16;
static DIRECTED: [AtomicU64; DIRECTED_SLOTS] = [const { AtomicU64::new(0) }; DIRECTED_SLOTS];
static DIRECTED_COUNT: [AtomicU32; DIRECTED_SLOTS] = [const { AtomicU32::new(0) }; DIRECTED_SLOTS];
/// How many are on their way in all (no system call in [`take_directed`] while none are).
static DIRECTED_ANY: AtomicU32 = AtomicU32::new(0);

fn directed_key(tid: i32, sig: i32) -> u64 {
    (tid as u32 as u64) << 8 | sig as u8 as u64
}

/// The program sends `sig` to its thread `tid` with `pthread_sigqueue`: noted before the send, so that the
/// thread runs it itself ([`take_directed`]). False when it is not noted (the table is full, or `sig` is
/// not wrapped); [`undo_directed`] when the send failed.
pub fn note_directed(tid: i32, sig: i32) -> bool {
    if !wraps(sig) || tid <= 0 {
        return false;
    }
    let key = directed_key(tid, sig);
    let slot = DIRECTED.iter().position(|k| k.load(Ordering::Acquire) == key).or_else(|| {
        DIRECTED.iter().position(|k| k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    });
    let Some(i) = slot else { return false };
    DIRECTED_COUNT[i].fetch_add(1, Ordering::AcqRel);
    DIRECTED_ANY.fetch_add(1, Ordering::AcqRel);
    true
}

/// A send [`note_directed`] noted failed.
pub fn undo_directed(tid: i32, sig: i32) {
    take_directed_for(directed_key(tid, sig));
}

/// Whether this `SI_QUEUE` delivery of `sig` is one the program sent this very thread ([`note_directed`]);
/// taken from the count. Async-signal-safe.
fn take_directed(sig: i32) -> bool {
    DIRECTED_ANY.load(Ordering::Acquire) != 0 && take_directed_for(directed_key(raw::gettid(), sig))
}

fn take_directed_for(key: u64) -> bool {
    let Some(i) = DIRECTED.iter().position(|k| k.load(Ordering::Acquire) == key) else { return false };
    let taken = DIRECTED_COUNT[i].fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
    if taken {
        DIRECTED_ANY.fetch_sub(1, Ordering::AcqRel);
        if DIRECTED_COUNT[i].load(Ordering::Acquire) == 0 {
            let _ = DIRECTED[i].compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
    taken
}

/// The `sigqueue` value that marks a signal handed over to the main thread (with the process's pid).
const HANDED_OVER: u64 = 0x7277_6861_6e64_6f76;

/// The `siginfo` of each signal handed over to the main thread and not yet run there, as 16 words;
/// `SAVED_BUSY` says which slots hold one.
static SAVED: [[AtomicU64; 16]; SIGNALS] = [const { [const { AtomicU64::new(0) }; 16] }; SIGNALS];
static SAVED_BUSY: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];

fn save(sig: i32, info: &libc::siginfo_t) -> bool {
    let i = sig as usize;
    if SAVED_BUSY[i].swap(true, Ordering::AcqRel) {
        return false;
    }
    // SAFETY: siginfo_t is 128 plain bytes (the size is checked by the transmute).
    let words: [u64; 16] = unsafe { std::mem::transmute(*info) };
    for (slot, word) in SAVED[i].iter().zip(words) {
        slot.store(word, Ordering::Relaxed);
    }
    true
}

/// Takes the saved `siginfo` of `sig` into `info`.
fn take_saved(sig: i32, info: &mut libc::siginfo_t) {
    let i = sig as usize;
    let words: [u64; 16] = std::array::from_fn(|k| SAVED[i][k].load(Ordering::Relaxed));
    // SAFETY: as in `save`: the words are a siginfo_t's bytes.
    *info = unsafe { std::mem::transmute::<[u64; 16], libc::siginfo_t>(words) };
    SAVED_BUSY[i].store(false, Ordering::Release);
}

/// `SIGTRAP`s handed over to a thread ([`hand_trap_to`]) and not yet run there: their `siginfo` as 16 words,
/// and the thread each waits for (0: free; -1: being written or read).
const TRAP_SLOTS: usize = 8;
static TRAP_SAVED: [[AtomicU64; 16]; TRAP_SLOTS] = [const { [const { AtomicU64::new(0) }; 16] }; TRAP_SLOTS];
static TRAP_FOR: [AtomicI32; TRAP_SLOTS] = [const { AtomicI32::new(0) }; TRAP_SLOTS];

/// How handing a `SIGTRAP` over went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandedTrap {
    /// Sent to the thread, marked; its `siginfo` waits in a slot.
    Sent,
    /// Every slot holds one on its way: this one merges with them, as a standard signal pending once does.
    Merged,
    /// Not sent (the thread is gone).
    Failed,
}

/// Hands a `SIGTRAP` sent to the process (`info`), which reached a thread that has it blocked for the
/// program, over to thread `tid`, which lets it through: its `siginfo` is saved and `tid` is sent a
/// `SIGTRAP` with the mark (`rt_tgsigqueueinfo` may send `SI_QUEUE` to any thread of the process; the
/// kernel refuses a `kill`'s `SI_USER` to any thread but the sender's own). Racewatch's handler there
/// runs the program's disposition with each saved `siginfo` ([`take_trap_for`]): marks that merged (a
/// standard signal is pending once per thread) lose none. A slot left for a thread that ended is freed.
/// Async-signal-safe.
pub fn hand_trap_to(tid: i32, info: &libc::siginfo_t) -> HandedTrap {
    for waiting in &TRAP_FOR {
        let target = waiting.load(Ordering::Acquire);
        if target > 0 && !raw::thread_alive(target) {
            let _ = waiting.compare_exchange(target, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
    let Some(i) = save_trap_for(tid, info) else { return HandedTrap::Merged };
    let pid = raw::getpid();
    if raw::queue_to_thread(pid, tid, &marked(libc::SIGTRAP, pid)) {
        return HandedTrap::Sent;
    }
    if TRAP_FOR[i].compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        return HandedTrap::Failed;
    }
    HandedTrap::Sent // Taken meanwhile by the thread itself (a sample's delivery there).
}

/// Saves `info` in a free slot for `owner`; the slot's index, or `None` when every slot is taken.
fn save_trap_for(owner: i32, info: &libc::siginfo_t) -> Option<usize> {
    let i = TRAP_FOR.iter().position(|w| w.compare_exchange(0, -1, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    // SAFETY: siginfo_t is 128 plain bytes (the size is checked by the transmute).
    let words: [u64; 16] = unsafe { std::mem::transmute(*info) };
    for (slot, word) in TRAP_SAVED[i].iter().zip(words) {
        slot.store(word, Ordering::Relaxed);
    }
    TRAP_FOR[i].store(owner, Ordering::SeqCst);
    Some(i)
}

/// The owner of the slot of a `SIGTRAP` sent to the process that no thread lets through ([`park_trap`]).
const PARKED: i32 = -2;

/// Keeps a `SIGTRAP` sent to the process (`info`) while every thread blocks it for the program, as the
/// process's queue of pending signals would (the kernel's masks lack `SIGTRAP`, so it cannot): the first
/// thread that lets it through takes it ([`take_parked_trap`]). False when one waits there already (a
/// standard signal is pending once; this one merges with it) or no slot is free. Async-signal-safe.
pub fn park_trap(info: &libc::siginfo_t) -> bool {
    // One at a time: two parked at once would both be delivered, where the kernel merges them.
    if PARKING.compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed).is_err() {
        return false;
    }
    let parked = !trap_parked() && save_trap_for(PARKED, info).is_some();
    PARKING.store(false, Ordering::SeqCst);
    parked
}

/// Set while [`park_trap`] looks for a parked `SIGTRAP` and keeps one.
static PARKING: AtomicBool = AtomicBool::new(false);

/// Takes the `SIGTRAP` [`park_trap`] keeps, if any. Async-signal-safe.
pub fn take_parked_trap() -> Option<libc::siginfo_t> {
    take_trap_for(PARKED)
}

/// Whether a `SIGTRAP` sent to the process waits for a thread that lets it through ([`park_trap`]).
pub fn trap_parked() -> bool {
    TRAP_FOR.iter().any(|waiting| waiting.load(Ordering::SeqCst) == PARKED)
}

/// Drops the parked `SIGTRAP` (the program ignores `SIGTRAP` from now on, or a forked child starts
/// with no signal pending).
pub fn forget_parked_trap() {
    while take_parked_trap().is_some() {}
}

/// One `SIGTRAP` handed over to thread `tid` and not yet run: its `siginfo`, taken from its slot.
/// Async-signal-safe.
pub fn take_trap_for(tid: i32) -> Option<libc::siginfo_t> {
    // Loads first: every sampling signal asks, and a compare-exchange would take the slots' cache line.
    let i = TRAP_FOR.iter().position(|w| {
        w.load(Ordering::Relaxed) == tid && w.compare_exchange(tid, -1, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    })?;
    let words: [u64; 16] = std::array::from_fn(|k| TRAP_SAVED[i][k].load(Ordering::Relaxed));
    TRAP_FOR[i].store(0, Ordering::Release);
    // SAFETY: as in `hand_trap_to`: the words are a siginfo_t's bytes.
    Some(unsafe { std::mem::transmute::<[u64; 16], libc::siginfo_t>(words) })
}

/// Whether `SIGTRAP`s handed over to thread `tid` wait in a slot. Async-signal-safe.
pub fn trap_waits_for(tid: i32) -> bool {
    TRAP_FOR.iter().any(|waiting| waiting.load(Ordering::Acquire) == tid)
}

/// Whether a `SIGTRAP` sent to thread `tid` itself (`SI_TKILL`, [`super::signal::send_trap_to_thread`])
/// waits in a slot: another sent to it merges with that one, as in the thread's own queue of pending
/// signals, but not with one sent to the process and handed over, which the kernel would have kept in
/// the process's queue. Async-signal-safe.
pub fn thread_trap_waits_for(tid: i32) -> bool {
    TRAP_FOR.iter().zip(&TRAP_SAVED).any(|(waiting, saved)| {
        // si_code is the low half of the second word.
        waiting.load(Ordering::Acquire) == tid && saved[1].load(Ordering::Relaxed) as u32 as i32 == libc::SI_TKILL
    })
}

/// Queues the mark to thread `tid` again when `SIGTRAP`s handed over to it wait (the mark was taken back
/// with its pending signals). Async-signal-safe.
pub fn mark_again(tid: i32) {
    if trap_waits_for(tid) {
        let pid = raw::getpid();
        raw::queue_to_thread(pid, tid, &marked(libc::SIGTRAP, pid));
    }
}

/// Whether this delivery is the mark of a `SIGTRAP` handed over ([`hand_trap_to`]).
pub fn is_trap_mark(delivered: &libc::siginfo_t) -> bool {
    is_handed_over(delivered, raw::getpid())
}

/// Whether this delivery is a signal a worker handed over ([`hand_over`]): a `sigqueue` from this process
/// with the mark.
fn is_handed_over(info: &libc::siginfo_t, pid: i32) -> bool {
    // SAFETY: the union's `si_pid` and `si_value` are set for SI_QUEUE.
    info.si_code == libc::SI_QUEUE
        && unsafe { info.si_pid() } == pid
        && unsafe { info.si_value().sival_ptr } as u64 == HANDED_OVER
}

/// Hands the signal over to the main thread (called for one sent to the process that reached a thread
/// other than the main one while detection is on) when the main thread lets it through now: its
/// `siginfo` is saved, the main thread is sent the same signal marked as handed over, and the main
/// thread's trampoline runs the handler with the saved `siginfo`. A one-shot handler (`SA_RESETHAND`), which the kernel reset for
/// this delivery, is put back in the kernel for the one to the main thread.
fn hand_over(sig: i32, info: &libc::siginfo_t, flags: i32, pid: i32) -> bool {
    // SAFETY: errno is this thread's; it is put back so the interrupted code never sees our calls.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    let mut main = None;
    let ran = stacks::run_on_runtime_stack(stacks::current_sp(), &mut || main = main_thread_state(pid));
    let sent = match main.filter(|_| ran) {
        Some((mask, _)) if mask & bit(sig) != 0 => false,
        Some((_, pending)) if pending & bit(sig) != 0 && SAVED_BUSY[sig as usize].load(Ordering::Acquire) => {
            // One handed over before waits for the main thread: this one merges with it, as a standard
            // signal sent to the process merges with one pending there. A one-shot handler the kernel
            // reset for this delivery must be back for that one's.
            if flags & libc::SA_RESETHAND != 0 {
                rearm_one_shot(sig);
            }
            true
        }
        Some(_) => {
            (flags & libc::SA_RESETHAND == 0 || rearm_one_shot(sig))
                && save(sig, info)
                && (raw::queue_to_thread(pid, pid, &marked(sig, pid)) || {
                    SAVED_BUSY[sig as usize].store(false, Ordering::Release);
                    false
                })
        }
        None => false,
    };
    // SAFETY: as above.
    unsafe { *errno = saved };
    sent
}

/// The main thread's (`pid`) mask as the program set it, and the signals pending for it alone. Inside
/// racewatch's handler, which blocks every signal, the mask is that of the code it interrupted: the
/// kernel gives a worker the signals sent to the process meanwhile, which without racewatch would have
/// gone to the main thread (on two loaded CPUs, 4 to 12 `alarm`s in 150 to a computing main at the
/// debug rate). The handler's mask seen outside the part of it that records the interrupted one (its
/// entry and return) is read again after the CPU was given away, up to 4 times. Reading the status
/// takes a 4 KiB buffer: on a runtime stack, not the handler's (maybe a small alternate stack).
fn main_thread_state(pid: i32) -> Option<(u64, u64)> {
    let mut status = tracer::read();
    for _ in 0..4 {
        if let Some(mask) = crate::sys::signal::mask_in_handler(pid) {
            return Some((mask, status.main_pending));
        }
        if status.main_mask != Some(HANDLER_MASK) {
            break;
        }
        raw::yield_cpu();
        status = tracer::read();
    }
    status.main_mask.map(|mask| (mask, status.main_pending))
}

/// The signals racewatch's handler blocks (every one but `SIGKILL` and `SIGSTOP`), as `SigBlk` shows them;
/// a program's own full mask lacks glibc's two internal signals (32, 33), which its `sigprocmask` keeps out.
const HANDLER_MASK: u64 = !(bit(libc::SIGKILL) | bit(libc::SIGSTOP));

/// The `siginfo` that marks `sig` as handed over.
fn marked(sig: i32, pid: i32) -> libc::siginfo_t {
    raw::siginfo_from(sig, libc::SI_QUEUE, pid, HANDED_OVER)
}

/// Puts the trampoline back in the kernel for a one-shot handler the kernel just reset to `SIG_DFL`
/// (the kernel keeps the flags and mask); `false` when the program changed the action meanwhile.
fn rearm_one_shot(sig: i32) -> bool {
    // SAFETY: zeroed sigaction is a valid out-parameter.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    if crate::sys::real::own_sigaction(sig, std::ptr::null(), &mut current) != 0
        || current.sa_sigaction != libc::SIG_DFL
    {
        return false;
    }
    current.sa_sigaction = trampoline_address();
    crate::sys::real::own_sigaction(sig, &current, std::ptr::null_mut()) == 0
}

/// System calls that a handler's run ends with `EINTR` whatever its flags.
const ENDED_BY_ANY_HANDLER: [i64; 9] = [
    libc::SYS_pause,
    libc::SYS_rt_sigsuspend,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
];

/// Blocking system calls that a handler without `SA_RESTART` ends with `EINTR`.
const ENDED_WITHOUT_RESTART: [i64; 13] = [
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_connect,
    libc::SYS_wait4,
    libc::SYS_waitid,
];

/// Whether a handler with `flags` ends system call `number` with `EINTR`.
fn ended_by_handler(number: i64, flags: i32) -> bool {
    ENDED_BY_ANY_HANDLER.contains(&number) || (flags & libc::SA_RESTART == 0 && ENDED_WITHOUT_RESTART.contains(&number))
}

/// The `syscall` instruction.
const SYSCALL: [u8; 2] = [0x0f, 0x05];

/// Makes the interrupted context (`ctx`, the kernel's `ucontext_t`) that is about to run a wait a
/// handler with `flags` ends return `EINTR` from it instead: past the `syscall` instruction, `rax`
/// `-EINTR`.
fn end_wait(ctx: *mut libc::c_void, flags: i32) {
    // SAFETY: a non-null `ctx` is the kernel's ucontext for this delivery, this handler's to change.
    let Some(uc) = (unsafe { ctx.cast::<libc::ucontext_t>().as_mut() }) else { return };
    let regs = &mut uc.uc_mcontext.gregs;
    let (ip, number) = (regs[libc::REG_RIP as usize], regs[libc::REG_RAX as usize]);
    if !ended_by_handler(number, flags) {
        return;
    }
    // SAFETY: errno is this thread's; it is put back so the interrupted code never sees the read.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *errno };
    let mut code = [0u8; 2];
    if mem::read_into(ip as u64, &mut code) == 2 && code == SYSCALL {
        regs[libc::REG_RAX as usize] = -i64::from(libc::EINTR);
        regs[libc::REG_RIP as usize] = ip + 2;
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_sent_to_the_process_are_handed_over_and_others_stay() {
        assert!(sent_to_process(libc::SIGTERM, libc::SI_USER));
        assert!(sent_to_process(libc::SIGALRM, libc::SI_KERNEL));
        assert!(sent_to_process(libc::SIGUSR1, libc::SI_QUEUE));
        assert!(sent_to_process(libc::SIGCHLD, libc::CLD_EXITED));
        // Sent to this thread (`raise`, `pthread_kill`, a timer of its own), or by a subsystem: stays.
        assert!(!sent_to_process(libc::SIGUSR1, libc::SI_TKILL));
        assert!(!sent_to_process(libc::SIGALRM, libc::SI_TIMER));
        assert!(!sent_to_process(libc::SIGUSR2, libc::CLD_EXITED));
    }

    #[test]
    fn a_handed_over_signal_is_told_by_its_mark_and_carries_the_first_siginfo() {
        let pid = raw::getpid();
        let mark = marked(libc::SIGCHLD, pid);
        assert_eq!((mark.si_signo, mark.si_code), (libc::SIGCHLD, libc::SI_QUEUE));
        assert!(is_handed_over(&mark, pid));
        assert!(!is_handed_over(&mark, pid + 1));
        // SAFETY: zeroed siginfo is a valid value.
        let mut first: libc::siginfo_t = unsafe { std::mem::zeroed() };
        first.si_signo = libc::SIGCHLD;
        first.si_code = libc::CLD_EXITED;
        assert!(save(libc::SIGCHLD, &first));
        assert!(!save(libc::SIGCHLD, &first), "one at a time");
        let mut delivered = mark;
        take_saved(libc::SIGCHLD, &mut delivered);
        assert_eq!((delivered.si_signo, delivered.si_code), (libc::SIGCHLD, libc::CLD_EXITED));
        assert!(save(libc::SIGCHLD, &first));
        take_saved(libc::SIGCHLD, &mut delivered);
    }

    #[test]
    fn a_wait_about_to_start_again_ends_with_eintr() {
        let code: [u8; 4] = [0x90, 0x0f, 0x05, 0x90];
        let at = |offset: usize, number: i64| {
            // SAFETY: zeroed ucontext_t is a valid value to fill in.
            let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
            uc.uc_mcontext.gregs[libc::REG_RIP as usize] = code.as_ptr() as i64 + offset as i64;
            uc.uc_mcontext.gregs[libc::REG_RAX as usize] = number;
            uc
        };
        let after = |mut uc: libc::ucontext_t, flags: i32| {
            end_wait(&mut uc as *mut libc::ucontext_t as *mut libc::c_void, flags);
            (
                uc.uc_mcontext.gregs[libc::REG_RIP as usize] - code.as_ptr() as i64,
                uc.uc_mcontext.gregs[libc::REG_RAX as usize],
            )
        };
        let eintr = -i64::from(libc::EINTR);
        // `pause` wound back onto its `syscall`: returns EINTR, past the instruction.
        assert_eq!(after(at(1, libc::SYS_pause), libc::SA_RESTART), (3, eintr));
        // A read: only for a handler without SA_RESTART.
        assert_eq!(after(at(1, libc::SYS_read), 0), (3, eintr));
        assert_eq!(after(at(1, libc::SYS_read), libc::SA_RESTART), (1, libc::SYS_read));
        // Not on a `syscall` instruction, or not a wait: as it was.
        assert_eq!(after(at(0, libc::SYS_pause), 0), (0, libc::SYS_pause));
        assert_eq!(after(at(1, libc::SYS_getpid), 0), (1, libc::SYS_getpid));
    }

    #[test]
    fn the_program_reads_back_its_own_handler_and_flags() {
        extern "C" fn handler(_: libc::c_int) {}
        // SAFETY: zeroed sigaction is a valid value to fill in.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler as *const () as usize;
        act.sa_flags = libc::SA_RESTART;
        let before = recorded(libc::SIGWINCH);
        to_kernel(libc::SIGWINCH, &mut act);
        assert_eq!(act.sa_sigaction, trampoline_address());
        assert_eq!(act.sa_flags, libc::SA_RESTART | libc::SA_SIGINFO);
        let mut old = act;
        from_kernel(&mut old, recorded(libc::SIGWINCH));
        assert_eq!((old.sa_sigaction, old.sa_flags), (handler as *const () as usize, libc::SA_RESTART));
        // A one-shot handler the kernel reset: the default action, with the program's flags.
        act.sa_flags = libc::SA_RESETHAND;
        act.sa_sigaction = handler as *const () as usize;
        to_kernel(libc::SIGWINCH, &mut act);
        let mut reset = act;
        reset.sa_sigaction = libc::SIG_DFL;
        from_kernel(&mut reset, recorded(libc::SIGWINCH));
        assert_eq!((reset.sa_sigaction, reset.sa_flags), (libc::SIG_DFL, libc::SA_RESETHAND));
        record(libc::SIGWINCH, before);
        // Not wrapped: as it is.
        let mut other: libc::sigaction = unsafe { std::mem::zeroed() };
        other.sa_sigaction = handler as *const () as usize;
        to_kernel(libc::SIGPROF, &mut other);
        assert_eq!(other.sa_sigaction, handler as *const () as usize);
    }
}
