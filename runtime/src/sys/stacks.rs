//! Stacks for the signal handler, so that it never overflows the program's.
//!
//! - **Runtime stacks**: a small pool of 64 KiB stacks (each above a guard
//!   page). The handler claims one with a compare-and-swap and runs its real
//!   work there ([`run_on_runtime_stack`]); on the stack the kernel delivered
//!   the signal to it uses only [`HOST_BUDGET`] bytes. No stack free: the
//!   sample is skipped.
//! - **Budget check** ([`host_room`]): the room left below the handler on the
//!   stack it was delivered to, from the bounds recorded for this thread (its
//!   own stack, its runtime alternate stack) or from `sigaltstack` (a
//!   program's alternate stack). A thread whose bounds are unknown (created
//!   with a raw `clone`, or before a `dlopen` started the detector) and that
//!   is not on an alternate stack is taken to have room: it has a normal
//!   thread stack.
//! - **Alternate stacks** ([`thread_started`]): every known thread without an
//!   alternate stack of its own gets one of the runtime's, so the kernel's
//!   signal frame (about 3.5 KiB with AVX-512 state) never lands on a stack
//!   the runtime cannot see the end of (a small thread stack, a coroutine's
//!   stack). It is as large as the thread's own stack (64 KiB to 1 MiB): a
//!   program handler with `SA_ONSTACK` but no alternate stack of the program's
//!   runs there with the room it would have had on the thread's stack. It is
//!   invisible: the program's `sigaltstack` calls see and set only the
//!   program's own ([`program_sigaltstack`]). It is unmapped when the thread
//!   ends ([`thread_ending`]: its start routine returned, or `pthread_exit`);
//!   a thread that ended unseen (cancelled) leaves it to a later thread start
//!   ([`reclaim_some`]) or to the thread that takes over its slot of the
//!   known-thread table ([`crate::sys::thread`]). Up to [`SPARES`] stacks of
//!   ended threads are kept for the next threads instead ([`park_spare`]), so a
//!   program that churns short-lived threads does not map, protect and unmap
//!   one (with the inter-processor interrupts of each unmap) per thread.
// The pointers here are a C caller's, passed on under the libc function's own contract (null
// or valid); making these functions `unsafe` would only move the same promise into the callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::sys::region::{self, Use};
use crate::sys::KNOWN_THREADS as KNOWN_SLOTS;
use crate::sys::{prefault, raw, thread};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Bytes the handler may use on the stack the signal was delivered to before it switches stacks:
/// `stats=1` measures at most 480 on the demos (`max handler bytes on the program's stack`); this keeps a
/// 2x margin.
pub const HOST_BUDGET: usize = 1024;
/// Size of one runtime stack.
pub const RUNTIME_STACK: usize = 64 << 10;
/// Runtime stacks in the pool: watch windows (at most 4) plus concurrent traps and samples.
const POOL: usize = 16;
/// Runtime stacks in the pool of a process with a memory budget: under `mlockall(MCL_FUTURE)`, where all
/// of the pool is locked memory (1.1 MiB for 16), or an `RLIMIT_AS` or `RLIMIT_DATA`, where its address
/// space is the program's: the watch windows and a few more signals.
const BUDGET_POOL: usize = 6;
/// Runtime stacks in this process's pool.
static POOL_SIZE: AtomicUsize = AtomicUsize::new(POOL);
/// The size of a runtime alternate signal stack ([`alt_stack_size`]).
const ALT_STACK: usize = 32 << 10;
const PAGE: usize = 4096;
/// racewatch's alternate stack, armed: plain flags, not `SS_AUTODISARM`. That flag disarms the stack
/// at every signal delivery, whatever stack the handler runs on, until `sigreturn`: racewatch's signals
/// that came while a program's handler ran, and all of them after a `siglongjmp` out of one, put their
/// frames on the program's stack (a fiber's, 3.5 KB deep instead of 2 KB: set 17 p44). The one handler
/// that leaves racewatch's stack while its frame is live there, a program's moved back to the
/// interrupted stack, switches it off itself ([`run_program_handler_at`]).
fn armed(lo: usize, hi: usize) -> libc::stack_t {
    libc::stack_t { ss_sp: lo as *mut libc::c_void, ss_flags: 0, ss_size: hi - lo }
}

/// The runtime stacks' mapping (0 until mapped) and which of them are free (a bit each). Read by the
/// assembly entry of a wrapped program signal (`hand_on`), which decides on one of them.
pub(crate) static POOL_BASE: AtomicUsize = AtomicUsize::new(0);
pub(crate) static POOL_FREE: AtomicU32 = AtomicU32::new(0);
/// The distance between the tops of two runtime stacks (each above its guard page).
pub(crate) const POOL_STRIDE: usize = RUNTIME_STACK + PAGE;

/// Assembly for a signal handler's entry that claims a runtime stack before it writes anything (one
/// template string of `global_asm!`, which names the operands `listed`, `pool_base`, `pool_free` and
/// `stride`): jumps to label `$fail` when a thread has confined itself ([`confined`]'s list is not
/// empty), the pool is not mapped or no stack is free; else leaves the stack's index in `rcx` and its
/// top in `r8`. Uses `rax`, `rcx`, `r8`, `r9` and the local label `3`.
///
/// [`confined`]: crate::sys::confined
macro_rules! claim_runtime_stack {
    ($fail:literal) => {
        concat!(
            "mov rax, qword ptr [rip + {listed}]\n",
            "test rax, rax\n",
            "jnz ",
            $fail,
            "\n",
            "mov r8, qword ptr [rip + {pool_base}]\n",
            "test r8, r8\n",
            "jz ",
            $fail,
            "\n",
            "mov eax, dword ptr [rip + {pool_free}]\n",
            "3:\n",
            "test eax, eax\n",
            "jz ",
            $fail,
            "\n",
            "bsf ecx, eax\n",
            "mov r9d, eax\n",
            "btr r9d, ecx\n",
            "lock cmpxchg dword ptr [rip + {pool_free}], r9d\n",
            "jnz 3b\n",
            "lea r8, [rcx + 1]\n",
            "imul r8, r8, {stride}\n",
            "add r8, qword ptr [rip + {pool_base}]",
        )
    };
}
pub(crate) use claim_runtime_stack;

thread_local! {
    /// This thread's stack `[lo, hi)` (0, 0 when unknown).
    static STACK: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// This thread's runtime alternate stack `[lo, hi)` (0, 0 when none).
    static ALT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Maps the pool of runtime stacks (once). False when the mapping failed (samples are then skipped).
pub fn init_pool() -> bool {
    if POOL_BASE.load(Ordering::Acquire) != 0 {
        return true;
    }
    let slot = POOL_STRIDE;
    let budget = LOCKING_FUTURE.load(Ordering::Relaxed) || crate::sys::mem::memory_headroom().is_some();
    let size = if budget { BUDGET_POOL } else { POOL };
    let Some(base) = map(slot * size) else { return false };
    // One guard page, under the lowest stack: the pool is one line of `/proc/self/maps` (a guard under
    // each stack made 32), and the alternate stacks mapped after it join that line. A stack uses at most
    // about a third of its 64 KiB (`max bytes used of a runtime stack`), so the page between two stacks
    // is slack, never reached.
    protect_guard(base);
    for stack in 0..size {
        let top = base + (stack + 1) * slot;
        prefault::pages(top - POOL_PREFAULT, top);
    }
    POOL_SIZE.store(size, Ordering::Relaxed);
    POOL_BASE.store(base, Ordering::Release);
    POOL_FREE.store(((1u64 << size) - 1) as u32, Ordering::Release);
    true
}

/// Before an `mlockall(MCL_CURRENT)` by the program while no handler can use the runtime stacks (the
/// detector has not started): unmaps what `mlockall` would lock for nothing, the work stack mapped
/// ahead, the spare alternate stacks and the runtime stacks beyond the [`BUDGET_POOL`] a memory budget
/// gets, as if they had been mapped under that budget.
pub fn shrink_for_locking() {
    if !WORK_BUSY[0].load(Ordering::Acquire) {
        let base = WORK_BASE[0].swap(0, Ordering::AcqRel);
        if base != 0 {
            unmap(base, WORK_STACK + PAGE);
        }
    }
    for spare in &SPARE {
        let entry = spare.swap(0, Ordering::AcqRel);
        if entry != 0 {
            let pages = entry % PAGE;
            unmap_alt(entry - pages, pages * PAGE);
        }
    }
    let (base, size) = (POOL_BASE.load(Ordering::Acquire), POOL_SIZE.load(Ordering::Relaxed));
    let all = ((1u64 << size) - 1) as u32;
    if base == 0 || size <= BUDGET_POOL || POOL_FREE.load(Ordering::Acquire) != all {
        return;
    }
    let kept = ((1u64 << BUDGET_POOL) - 1) as u32;
    if POOL_FREE.compare_exchange(all, kept, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        POOL_SIZE.store(BUDGET_POOL, Ordering::Relaxed);
        let slot = POOL_STRIDE;
        unmap(base + BUDGET_POOL * slot, (size - BUDGET_POOL) * slot);
    }
}

fn map(len: usize) -> Option<usize> {
    region::map(len, Use::Stacks)
}

/// How much of each runtime stack's top is touched when the pool is mapped: what a signal uses, with
/// room (26 KiB at most with a report's unwinding: `max bytes used of a runtime stack`), so that a
/// thread's samples fault no page in (a compute thread's `getrusage` showed 1-6 minor faults where it
/// has none: set 19 p22).
const POOL_PREFAULT: usize = 40 << 10;

/// How much of an alternate stack's top a racewatch sample uses, in whole pages: the kernel's frame
/// alone (`AT_MINSIGSTKSZ`: 3,376 bytes with AVX-512, one page), since the entry of a perf event's signal
/// moves to a runtime stack before it touches the stack it was delivered to. A rarer signal handled in
/// place (no runtime stack free) may fault a page more there. One page per thread, not three: 32 idle
/// workers cost 4 KiB of resident memory and one minor fault each (set 42 rt12: 12 KiB and three).
fn alt_stack_in_use(size: usize) -> usize {
    // SAFETY: getauxval reads the auxiliary vector the kernel left; 0 for a missing entry.
    let frame = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) } as usize;
    frame.max(2048).next_multiple_of(PAGE).min(size)
}

fn protect_guard(addr: usize) {
    // SAFETY: `addr` is the first page of a mapping of ours; making it inaccessible turns an
    // overflow into a fault instead of silent corruption.
    unsafe { libc::mprotect(addr as *mut libc::c_void, PAGE, libc::PROT_NONE) };
    super::budget::protected();
}

/// The address of a local of the caller's frame: (about) the current stack pointer.
#[inline(always)]
pub fn current_sp() -> usize {
    let marker = 0u8;
    std::ptr::addr_of!(marker) as usize
}

/// Room left below `sp` on the stack it lies in, when that stack's bounds are known.
pub fn host_room(sp: usize) -> Option<usize> {
    for (lo, hi) in [ALT.with(Cell::get), STACK.with(Cell::get)] {
        if lo < hi && (lo..hi).contains(&sp) {
            return Some(sp - lo);
        }
    }
    // A program's alternate stack: ask the kernel where it is.
    let ss = raw::sigaltstack(None)?;
    let lo = ss.ss_sp as usize;
    (ss.ss_flags & libc::SS_ONSTACK != 0 && (lo..lo + ss.ss_size).contains(&sp)).then(|| sp - lo)
}

/// Where a program's signal handler with `SA_ONSTACK` set or not (`onstack`) must run when the
/// runtime's handler, delivered on top of the code interrupted at `interrupted_sp`, passes a signal
/// on to it: `None` where the runtime's handler runs now (the kernel would have put the program's
/// frame on this stack too), or the top of the stack the kernel would have chosen (below the
/// interrupted code's red zone), when the runtime's handler runs on an alternate stack the
/// program's handler would not have used.
pub fn program_handler_top(interrupted_sp: usize, onstack: bool) -> Option<usize> {
    if let Some(on_ours) = off_own_alt_stack(interrupted_sp) {
        return on_ours;
    }
    let current = raw::sigaltstack(None)?;
    if current.ss_flags & libc::SS_ONSTACK == 0 {
        return None; // On the interrupted stack already.
    }
    let lo = current.ss_sp as usize;
    if (lo..lo + current.ss_size).contains(&interrupted_sp) || onstack {
        return None; // The program's alternate stack, which the kernel would have used as well.
    }
    Some(interrupted_sp.saturating_sub(128) & !15)
}

/// When the caller runs on racewatch's alternate stack: `Some` of where a program handler must run
/// instead, `None` inside it when the code the signal interrupted ran there itself. `None` elsewhere
/// (not on racewatch's alternate stack). A program's handler with `SA_ONSTACK` in a thread without an
/// alternate stack of the program's is put on racewatch's by the kernel; without racewatch it would
/// have run on the interrupted stack.
/// Touches thread-local storage only in a thread racewatch knows: a thread of the program's own making
/// (a raw `clone` with a thread pointer of its own, no glibc TLS vector) has no alternate stack of
/// racewatch's, and looking its TLS up would fault.
pub fn off_own_alt_stack(interrupted_sp: usize) -> Option<Option<usize>> {
    off_own_alt_stack_at(interrupted_sp, current_sp())
}

/// [`off_own_alt_stack`] for a handler that was delivered at stack address `delivered_sp` and runs
/// elsewhere now (a runtime stack).
pub fn off_own_alt_stack_at(interrupted_sp: usize, delivered_sp: usize) -> Option<Option<usize>> {
    thread::known_slot(raw::gettid())?;
    let (lo, hi) = ALT.with(Cell::get);
    if !(lo < hi && (lo..hi).contains(&delivered_sp)) {
        return None;
    }
    Some((!(lo..hi).contains(&interrupted_sp)).then(|| interrupted_sp.saturating_sub(128) & !15))
}

/// Runs `f` with the stack pointer at `top` (a stack the program owns; no guard, no bookkeeping).
/// Nothing catches an unwind there: a program's handler may leave by `pthread_exit` or cancellation.
pub fn run_at(top: usize, f: &mut dyn FnMut()) {
    switch_and_call(top, f, false);
}

/// The size of the stack a runtime thread (the reporter) works on.
const WORK_STACK: usize = 256 << 10;
/// Work stacks: mapping base (a guard page, then the stack; kept for the next runtime thread once
/// mapped) and whether a runtime thread has it.
static WORK_BASE: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];
static WORK_BUSY: [AtomicBool; 2] = [const { AtomicBool::new(false) }; 2];

/// Takes a work stack for a runtime thread about to be created (mapped now the first time): its slot,
/// `None` when both are taken or the mapping failed. Call in the creating thread.
pub fn claim_work_stack() -> Option<usize> {
    let slot =
        WORK_BUSY.iter().position(|b| b.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    if WORK_BASE[slot].load(Ordering::Acquire) == 0 {
        let Some(base) = map(WORK_STACK + PAGE) else {
            WORK_BUSY[slot].store(false, Ordering::Release);
            return None;
        };
        protect_guard(base);
        WORK_BASE[slot].store(base, Ordering::Release);
    }
    Some(slot)
}

/// Before `main`, without a memory budget: maps the first work stack ahead (untouched: address space
/// only), so that the reporter's first start, which a module loaded by the program can cause in a
/// process that never reports a race, changes nothing of the program's address space (a thread churn
/// whose first `pthread_exit` loaded `libgcc_s` saw `VmSize` grow 260 KiB and `maps` 2 lines).
pub fn prepare_work_stack() {
    if LOCKING_FUTURE.load(Ordering::Relaxed) || crate::sys::mem::memory_headroom().is_some() {
        return;
    }
    if WORK_BASE[0].load(Ordering::Acquire) == 0 {
        if let Some(base) = map(WORK_STACK + PAGE) {
            protect_guard(base);
            WORK_BASE[0].store(base, Ordering::Release);
        }
    }
}

/// Gives back a work stack [`claim_work_stack`] took, for a thread that was not created.
pub fn release_work_stack(slot: usize) {
    WORK_BUSY[slot].store(false, Ordering::Release);
}

/// Runs `f` on work stack `slot` (claimed for this thread by its creator), then gives it back.
///
/// A runtime thread's own stack is the smallest glibc allows (16 KiB, no guard): glibc keeps the
/// stacks of ended threads for later ones and hands a new thread any kept stack up to 4 times the size
/// it asked for, so a 256 KiB stack of racewatch's, kept after its warm-up thread ended, went to a
/// program thread that asked for 128 KiB with a 64 KiB guard (`pthread_getattr_np` read back 196 KiB).
/// No program thread asks for less than 16 KiB.
pub fn run_on_work_stack(slot: usize, f: &mut dyn FnMut()) {
    let top = WORK_BASE[slot].load(Ordering::Acquire) + PAGE + WORK_STACK;
    switch_and_call(top, f, true);
    WORK_BUSY[slot].store(false, Ordering::Release);
}

/// The most bytes the handler used below the kernel's signal frame before switching stacks.
static HOST_HIGH_WATER: AtomicUsize = AtomicUsize::new(0);

/// The most bytes the handler used on a program's stack below the kernel's signal frame (measured).
pub fn host_high_water() -> usize {
    HOST_HIGH_WATER.load(Ordering::Relaxed)
}

/// Records that a handler used the stack it was delivered to from `frame` (the kernel's frame) down to
/// `sp` before it moved to a runtime stack.
pub fn note_host_depth(frame: usize, sp: usize) {
    HOST_HIGH_WATER.fetch_max(frame.saturating_sub(sp), Ordering::Relaxed);
}

/// Runs `f` on a runtime stack; false (without running it) when every runtime stack is in use.
/// `frame` is an address inside the kernel's signal frame (the `ucontext`): the handler's own use of
/// the program's stack is measured from there. Async-signal-safe.
pub fn run_on_runtime_stack(frame: usize, f: &mut dyn FnMut()) -> bool {
    note_host_depth(frame, current_sp());
    let base = POOL_BASE.load(Ordering::Acquire);
    if base == 0 {
        return false;
    }
    let mut free = POOL_FREE.load(Ordering::Acquire);
    let index = loop {
        if free == 0 {
            return false;
        }
        let index = free.trailing_zeros();
        match POOL_FREE.compare_exchange_weak(free, free & !(1 << index), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break index as usize,
            Err(now) => free = now,
        }
    };
    let top = base + (index + 1) * POOL_STRIDE;
    switch_and_call(top, f, true);
    POOL_FREE.fetch_or(1 << index, Ordering::AcqRel);
    true
}

extern "C" fn trampoline(data: *mut u8) {
    // SAFETY: `data` is the `&mut &mut dyn FnMut()` that `switch_and_call` passed, alive for the call.
    let f = unsafe { &mut *(data as *mut &mut dyn FnMut()) };
    // A panic must not unwind through the stack switch.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

extern "C-unwind" fn trampoline_uncaught(data: *mut u8) {
    // SAFETY: as in `trampoline`.
    let f = unsafe { &mut *(data as *mut &mut dyn FnMut()) };
    f();
}

fn switch_and_call(top: usize, f: &mut dyn FnMut(), catching: bool) {
    let tramp = if catching { trampoline as *const () as usize } else { trampoline_uncaught as *const () as usize };
    let mut f: &mut dyn FnMut() = f;
    let data = &mut f as *mut &mut dyn FnMut() as *mut u8;
    // SAFETY: `top` is the 16-byte-aligned end of a stack this thread may use exclusively (a runtime
    // stack it claimed, or the free part of its own stack below the interrupted code); `tramp` is one of
    // the two trampolines above, called with `data` as its one argument; `racewatch_switch_call` (below)
    // keeps every callee-saved register and returns on the caller's stack.
    unsafe { racewatch_switch_call(data, top, tramp) };
}

extern "C-unwind" {
    /// Calls `f(data)` with the stack pointer at `top`, and returns on the caller's stack.
    fn racewatch_switch_call(data: *mut u8, top: usize, f: usize);
}

// The stack switch as a function of its own, with unwind info: its frame's canonical frame address is
// kept in `rbp` (callee-saved), so an unwinder that walks out of the function called on the other stack
// (a program handler's `backtrace()`, a cancellation's unwind) comes back to the caller's stack and goes
// on through the signal frame, as it would without racewatch (held-out set 18 p38: a crash handler's
// backtrace stopped, or looped, at racewatch's frame).
std::arch::global_asm!(
    ".pushsection .text.racewatch_switch_call,\"ax\",@progbits",
    ".globl racewatch_switch_call",
    ".hidden racewatch_switch_call",
    ".type racewatch_switch_call,@function",
    "racewatch_switch_call:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_def_cfa_offset 16",
    ".cfi_offset rbp, -16",
    "mov rbp, rsp",
    ".cfi_def_cfa_register rbp",
    // rdi: data (the callee's argument), rsi: the new stack's top, rdx: the callee.
    "mov rsp, rsi",
    "call rdx",
    "mov rsp, rbp",
    "pop rbp",
    ".cfi_def_cfa rsp, 8",
    "ret",
    ".cfi_endproc",
    ".size racewatch_switch_call, . - racewatch_switch_call",
    ".popsection",
);

/// Records the calling thread's stack bounds (exact, from `pthread_getattr_np`) and gives it an
/// alternate stack. For the thread that starts the detector; new threads use [`thread_started`],
/// which allocates nothing (a `malloc` in a new thread would give it a 64 MiB malloc arena of its own).
pub fn record_current_thread(slot: Option<usize>) {
    let Some(bounds) = current_thread_stack() else { return };
    STACK.with(|s| s.set(bounds));
    give_alt_stack(slot, alt_stack_size(bounds.1 - bounds.0));
}

/// Before `main`: maps the alternate stacks of the main thread and of the program's first threads
/// ([`SPARES`] in all, side by side in one mapping) and keeps them as spares ([`park_spare`]), so that
/// neither the detector's start nor a thread's maps one: `VmSize` and `/proc/self/maps` change with the
/// program's threads as without racewatch while it has at most that many. Nothing under a memory budget
/// already in force (no thread on a stack of glibc's then gets one).
pub fn prepare_alt_stacks() {
    // The main thread's stack grows to its `RLIMIT_STACK`: never a small one.
    let size = alt_stack_size(usize::MAX);
    if size == 0 || ALT_MAPPED.load(Ordering::Acquire) != 0 {
        return;
    }
    let Some(base) = map(size * SPARES) else { return };
    ALT_MAPPED.fetch_add(SPARES, Ordering::AcqRel);
    for i in 0..SPARES {
        let stack = base + i * size;
        if !park_spare(stack, size) {
            unmap_alt(stack, size);
        }
    }
}

/// The calling thread's stack `[lo, hi)`, exact: for the main thread as glibc's `pthread_getattr_np`
/// computes it, from `/proc/self/maps` read with raw calls ([`main_thread_stack`]); for another thread
/// `pthread_getattr_np` itself (not for signal handlers or new threads).
pub fn current_thread_stack() -> Option<(usize, usize)> {
    if raw::gettid() == raw::getpid() {
        return main_thread_stack();
    }
    // SAFETY: pthread_getattr_np fills a live attr for the calling thread, destroyed right after.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0).then(|| (addr as usize, addr as usize + size))
    }
}

extern "C" {
    /// The loader's record of where the main thread's stack began (its initial stack pointer's area).
    static __libc_stack_end: *mut libc::c_void;
}

/// The main thread's stack as glibc's `pthread_getattr_np` gives it, without its `fopen` and buffers
/// from the program's `malloc` (a program measuring `mallinfo2` across its first `pthread_create` saw
/// them): the mapping that holds `__libc_stack_end` ends the stack; it reaches down `RLIMIT_STACK` from
/// there, rounded to pages, but not below the mapping before it.
fn main_thread_stack() -> Option<(usize, usize)> {
    // SAFETY: a static the loader sets before any constructor runs and never changes.
    let start = unsafe { __libc_stack_end } as usize;
    let end = (start & !(PAGE - 1)) + PAGE;
    let limit = super::process::stack_limit();
    if start == 0 {
        return None;
    }
    let mut below = 0usize;
    let mut found = None;
    raw::for_each_line(c"/proc/self/maps", &mut |line| {
        let Some((from, to, _)) = raw::maps_entry(line) else { return true };
        if (from..to).contains(&start) {
            let size = limit.wrapping_sub(to - end) & !(PAGE - 1);
            let size = size.min(end - below);
            found = Some((end - size, end));
            return false;
        }
        below = to;
        true
    });
    found
}

extern "C" {
    // glibc >= 2.18; not in the libc crate.
    fn pthread_getattr_default_np(attr: *mut libc::pthread_attr_t) -> libc::c_int;
    // The stack address set with `pthread_attr_setstack(addr)`, null when none was: not in the libc crate.
    fn pthread_attr_getstackaddr(attr: *const libc::pthread_attr_t, addr: *mut *mut libc::c_void) -> libc::c_int;
}

/// The stack size a thread created with `attr` (null: the defaults) gets. Call in the creating thread.
pub fn stack_size_of(attr: *const libc::pthread_attr_t) -> usize {
    let mut size = 0usize;
    // SAFETY: `attr` is null or the caller's valid attr (as pthread_create requires); the default
    // attr is read into a live local and destroyed.
    unsafe {
        if attr.is_null() {
            let mut default: libc::pthread_attr_t = std::mem::zeroed();
            if pthread_getattr_default_np(&mut default) == 0 {
                libc::pthread_attr_getstacksize(&default, &mut size);
                libc::pthread_attr_destroy(&mut default);
            }
        } else {
            libc::pthread_attr_getstacksize(attr, &mut size);
        }
    }
    size
}

/// Whether glibc could map the stack `attr` asks for: true for a stack the program gives itself
/// (`pthread_attr_setstack`), else whether a private read-write mapping of its size (accounted as
/// glibc's is, under `RLIMIT_AS` and strict overcommit) can be made now; it is unmapped at once. A
/// `pthread_create` that fails with `EAGAIN` for a stack that cannot be mapped (a size beyond the address
/// space, a memory limit) did not fail for lack of room for a thread.
pub fn stack_would_map(attr: *const libc::pthread_attr_t) -> bool {
    let len = glibc_stack_size(attr);
    if len == 0 {
        return true;
    }
    let Some(mem) = crate::sys::mem::map_private(len) else { return false };
    raw::munmap(mem as usize, len);
    true
}

/// Whether the program called `mlockall(MCL_FUTURE)` (and no `munlockall` since): every page mapped
/// from then on is locked, resident memory counted against its `RLIMIT_MEMLOCK`. A forked child starts
/// without it (the kernel does not pass it on).
static LOCKING_FUTURE: AtomicBool = AtomicBool::new(false);

/// Whether the program has called `mlockall(MCL_FUTURE)` at some time (a `munlockall` since or not).
static LOCKED_FUTURE_ONCE: AtomicBool = AtomicBool::new(false);

/// The program's `mlockall` or `munlockall` succeeded: whether `MCL_FUTURE` is now in effect.
pub fn set_locking_future(on: bool) {
    LOCKING_FUTURE.store(on, Ordering::Relaxed);
    if on {
        LOCKED_FUTURE_ONCE.store(true, Ordering::Relaxed);
    }
}

/// Whether the program has called `mlockall(MCL_FUTURE)` at some time, whether or not it unlocked since.
pub fn locked_future_once() -> bool {
    LOCKED_FUTURE_ONCE.load(Ordering::Relaxed)
}

/// Whether `mlockall(MCL_FUTURE)` is in effect (see [`set_locking_future`]).
pub fn locking_future() -> bool {
    LOCKING_FUTURE.load(Ordering::Relaxed)
}

/// The size of the alternate stack a thread gets: 32 KiB, room for racewatch's own signal frames (the
/// kernel's, up to about 11 KiB with AMX state, and the 1 KiB its handler may use before it moves to a
/// runtime stack): no handler of the program's runs there (one with `SA_ONSTACK` is moved back to the
/// interrupted stack, [`run_program_handler_at`]).
///
/// None under a memory budget (an `RLIMIT_AS` or `RLIMIT_DATA`, or `mlockall(MCL_FUTURE)`), where every
/// byte racewatch maps is one the program cannot have (with 256 KiB thread stacks under a 96 MiB
/// `RLIMIT_AS` a program started 337 threads instead of 376), for a thread on a stack glibc mapped
/// (`own_stack`: its size is known, [`MIN_OWN_STACK`] or more): the kernel's signal frame lands there,
/// as any signal's would, and the handler checks its room ([`host_room`]) before it moves to a runtime
/// stack. A thread on a stack the program gave it, or a small one, keeps its alternate stack unless
/// the budget leaves less than eight of them. Call in the creating thread (it may read `/proc`).
pub fn alt_stack_size(own_stack: usize) -> usize {
    let room = crate::sys::mem::memory_headroom();
    let budget = room.is_some() || crate::sys::mem::lock_limited();
    if budget && own_stack >= MIN_OWN_STACK {
        return 0;
    }
    match room {
        Some(room) if room < 8 * ALT_STACK as u64 => 0,
        _ => ALT_STACK,
    }
}

/// The smallest stack of a thread's own on which racewatch lets the kernel put its signal frame under a
/// memory budget ([`alt_stack_size`]).
const MIN_OWN_STACK: usize = 64 << 10;

/// The size of the stack glibc maps for a thread created with `attr` (null: the defaults); 0 when the
/// program gives the thread a stack of its own (`pthread_attr_setstack`), whose bounds and use racewatch
/// cannot know. Call in the creating thread.
pub fn glibc_stack_size(attr: *const libc::pthread_attr_t) -> usize {
    let mut addr: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: `attr` is null or the caller's valid attr (as pthread_create requires); the out-pointer is
    // a live local.
    if !attr.is_null() && unsafe { pthread_attr_getstackaddr(attr, &mut addr) } == 0 && !addr.is_null() {
        return 0;
    }
    stack_size_of(attr)
}

/// Records the bounds of a new thread's stack of `size` bytes (a lower bound: the thread descriptor
/// and TLS sit above the start routine's frame) and gives it an alternate stack of `alt` bytes. Call
/// first thing in the new thread (not from a signal handler); `slot` is its known-thread slot.
pub fn thread_started(slot: Option<usize>, size: usize, alt: usize) {
    if size > 0 {
        let sp = current_sp();
        STACK.with(|s| s.set((sp.saturating_sub(size) + PAGE, sp + PAGE)));
    }
    give_alt_stack(slot, alt);
}

/// Per known-thread slot: the runtime alternate stack (mapping base, length) of the thread that holds
/// it. The thread unmaps it when it ends ([`thread_ending`]); one that ended unseen (cancelled, or
/// `pthread_exit` from a handler running on that very stack) leaves it to the next thread that takes the
/// slot over, or to [`reclaim_some`].
static SLOT_ALT_BASE: [AtomicUsize; KNOWN_SLOTS] = [const { AtomicUsize::new(0) }; KNOWN_SLOTS];
static SLOT_ALT_LEN: [AtomicUsize; KNOWN_SLOTS] = [const { AtomicUsize::new(0) }; KNOWN_SLOTS];
/// Alternate stacks of ended threads kept for the next threads: at most this many, so what racewatch
/// maps stays bounded (a few MiB of address space at most, of which only the pages signal frames
/// touched are resident).
const SPARES: usize = 16;
/// Alternate stacks of racewatch's mapped now: in use and spare. A stack given back while more than
/// [`SPARES`] are mapped is unmapped, so that once the threads that needed more ended, racewatch's
/// mappings are what they were before `main` ([`prepare_alt_stacks`]).
static ALT_MAPPED: AtomicUsize = AtomicUsize::new(0);
/// The spare stacks: mapping base with its length in pages in the low 12 bits (a base is page-aligned,
/// a length at most 257 pages); 0 when empty.
static SPARE: [AtomicUsize; SPARES] = [const { AtomicUsize::new(0) }; SPARES];

/// Keeps the stack mapped at `base` (`len` bytes) for a later thread; false
/// when every spare place is taken, or the stack is locked memory (the caller unmaps it).
fn park_spare(base: usize, len: usize) -> bool {
    let pages = len / PAGE;
    if base % PAGE != 0 || len % PAGE != 0 || pages >= PAGE || is_resident(base) {
        return false;
    }
    SPARE.iter().any(|spare| spare.compare_exchange(0, base | pages, Ordering::AcqRel, Ordering::Relaxed).is_ok())
}

/// Whether the page at `addr` is in memory. The lowest page of an alternate stack is never touched by
/// a signal frame (they sit at its top): resident, the mapping was populated when it was made, as
/// `mlockall(MCL_FUTURE)` does, and keeping it would hold locked memory of the program's budget.
fn is_resident(addr: usize) -> bool {
    let mut vec = 0u8;
    // SAFETY: `addr` is a page of a mapping of ours; mincore writes one byte for one page into `vec`.
    let ok = unsafe { libc::mincore(addr as *mut libc::c_void, PAGE, &mut vec) } == 0;
    !ok || vec & 1 != 0
}

/// Takes a spare stack of `len` bytes, when one was kept.
fn take_spare(len: usize) -> Option<usize> {
    let pages = len / PAGE;
    SPARE.iter().find_map(|spare| {
        let entry = spare.load(Ordering::Acquire);
        (entry != 0
            && entry % PAGE == pages
            && spare.compare_exchange(entry, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok())
        .then_some(entry - pages)
    })
}

/// Where [`reclaim_some`] looks next.
static RECLAIM_CURSOR: AtomicUsize = AtomicUsize::new(0);
/// Slots [`reclaim_some`] looks at per call, and the most ended threads it asks the kernel about.
const RECLAIM_SCAN: usize = 128;
const RECLAIM_CHECKS: usize = 2;

fn give_alt_stack(slot: Option<usize>, size: usize) {
    let (Some(slot), true) = (slot, size > 0) else { return };
    if ALT.with(Cell::get).0 != 0 {
        return; // Ours already (a forked child's thread keeps the one it had).
    }
    match raw::sigaltstack(None) {
        Some(current) if current.ss_flags & libc::SS_DISABLE != 0 => {}
        Some(current) => {
            // The program has one: leave it, and keep it mapped for this thread (see `keeps_mapped`).
            hold_program_alt(current.ss_sp as usize, current.ss_size);
            return;
        }
        None => return,
    }
    reclaim_some(slot);
    // No guard page: racewatch's frames there are bounded (the kernel's, and the handler's 1 KiB before
    // it moves to a runtime stack), and without one the alternate stacks, placed side by side in
    // racewatch's region like the runtime stacks, make one line of `/proc/self/maps` instead of two
    // per thread.
    let len = size;
    let old = (SLOT_ALT_BASE[slot].swap(0, Ordering::AcqRel), SLOT_ALT_LEN[slot].swap(0, Ordering::AcqRel));
    let base = match old {
        (base, old_len) if base != 0 && old_len == len => base,
        (base, old_len) => {
            if base != 0 {
                release(base, old_len);
            }
            match take_spare(len) {
                Some(base) => base,
                None => {
                    let Some(base) = map(len) else { return };
                    ALT_MAPPED.fetch_add(1, Ordering::AcqRel);
                    base
                }
            }
        }
    };
    if raw::sigaltstack(Some(&armed(base, base + size))).is_none() {
        release(base, len);
        return;
    }
    // Faulted in by the thread as it starts, before its start routine (a compute thread's `getrusage`).
    prefault::pages(base + size - alt_stack_in_use(size), base + size);
    SLOT_ALT_LEN[slot].store(len, Ordering::Release);
    SLOT_ALT_BASE[slot].store(base, Ordering::Release);
    ALT.with(|a| a.set((base, base + size)));
}

/// The program's own alternate stack that a thread started its racewatch life on (`[lo, hi)`, and the
/// thread): the main thread of a Rust program, whose runtime set one before `main`. racewatch's
/// `SIGTRAP` is delivered there. Rust's `process::exit` unmaps it from whichever thread calls it,
/// leaving the main thread's alternate stack dangling while sampling still runs: the main thread's
/// next racewatch signal (or the return of the one it is in) would fault. [`keeps_mapped`] keeps it.
static HELD_LO: AtomicUsize = AtomicUsize::new(0);
static HELD_HI: AtomicUsize = AtomicUsize::new(0);
static HELD_TID: AtomicUsize = AtomicUsize::new(0);

fn hold_program_alt(lo: usize, size: usize) {
    HELD_TID.store(raw::gettid() as usize, Ordering::Release);
    HELD_LO.store(lo, Ordering::Release);
    HELD_HI.store(lo.saturating_add(size), Ordering::Release);
}

/// For a `munmap(addr, len)` by the program: the part of the range (page-aligned `[lo, hi)`) that is
/// another live thread's alternate stack in the kernel, as [`hold_program_alt`] recorded it; the caller
/// leaves it mapped (a few pages the program no longer uses; the thread's signal frames, the one it may
/// be in included, still have their memory).
pub fn keeps_mapped(addr: usize, len: usize) -> Option<(usize, usize)> {
    let (lo, hi) = (HELD_LO.load(Ordering::Acquire), HELD_HI.load(Ordering::Acquire));
    if lo == 0 || addr >= hi || addr.saturating_add(len) <= lo {
        return None;
    }
    let tid = HELD_TID.load(Ordering::Acquire) as i32;
    if tid == raw::gettid() || !raw::thread_alive(tid) {
        return None;
    }
    let from = lo.max(addr) & !(PAGE - 1);
    let to = (hi.min(addr + len) + PAGE - 1) & !(PAGE - 1);
    Some((from, to))
}

/// `munmap(addr, len)` except `[from, to)` (inside it, from [`keeps_mapped`]), which stays mapped as it
/// is (the thread may be running a handler on it right now): 0, or `-1` with `errno` as `munmap` sets it.
pub fn unmap_keeping(addr: usize, len: usize, from: usize, to: usize) -> libc::c_int {
    let end = addr + len;
    let parts = [(addr, from.saturating_sub(addr)), (to, end.saturating_sub(to))];
    for (start, size) in parts.into_iter().filter(|&(_, size)| size > 0) {
        let rc = raw::syscall6(libc::SYS_munmap, [start as u64, size as u64, 0, 0, 0, 0]);
        if rc != 0 {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = -rc as i32 };
            return -1;
        }
    }
    0
}

/// Unmaps the alternate stacks that threads which ended unseen left in slots other than `own`: looks at
/// [`RECLAIM_SCAN`] slots from a rotating cursor (a sweep of the table every few dozen thread starts) and
/// asks the kernel about at most [`RECLAIM_CHECKS`] of their threads. A slot is claimed from its dead
/// thread before its stack is touched (see [`thread::claim_ended`]), so a thread that takes it over at
/// the same time never gets a stack that is being unmapped.
fn reclaim_some(own: usize) {
    let from = RECLAIM_CURSOR.fetch_add(RECLAIM_SCAN, Ordering::Relaxed);
    let mut checks = 0;
    for slot in (from..from + RECLAIM_SCAN).map(|i| i % KNOWN_SLOTS) {
        if checks == RECLAIM_CHECKS {
            break;
        }
        if slot == own || SLOT_ALT_BASE[slot].load(Ordering::Acquire) == 0 {
            continue;
        }
        checks += 1;
        if thread::claim_ended(slot) {
            let (base, len) =
                (SLOT_ALT_BASE[slot].swap(0, Ordering::AcqRel), SLOT_ALT_LEN[slot].swap(0, Ordering::AcqRel));
            if base != 0 {
                release(base, len);
            }
            thread::release_claim(slot);
        }
    }
}

/// The calling thread is ending (its start routine returned, or it called `pthread_exit`): its runtime
/// alternate stack is switched off and unmapped, with every signal blocked meanwhile, and its slot's
/// record dropped. Kept when the thread runs on it now (`pthread_exit` from a handler there): a later
/// thread reclaims it once the kernel says this one is gone. Not for signal handlers.
pub fn thread_ending(slot: Option<usize>) {
    let (lo, hi) = ALT.with(Cell::get);
    if lo == 0 {
        return;
    }
    let base = lo;
    if (base..hi).contains(&current_sp()) {
        return;
    }
    let Some(old_mask) = raw::sigprocmask(libc::SIG_SETMASK, Some(u64::MAX)) else { return };
    if raw::sigaltstack(None).is_some_and(|current| current.ss_sp as usize == lo) {
        let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        raw::sigaltstack(Some(&off));
    }
    // A forked child's thread keeps a stack no slot records (`forget_after_fork`).
    if let Some(slot) = slot {
        if SLOT_ALT_BASE[slot].compare_exchange(base, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            SLOT_ALT_LEN[slot].store(0, Ordering::Release);
        }
    }
    ALT.with(|a| a.set((0, 0)));
    release(base, hi - base);
    raw::sigprocmask(libc::SIG_SETMASK, Some(old_mask));
}

/// A runtime alternate stack (mapped at `base`, `len` bytes) that no thread uses any
/// more: kept for a later thread ([`park_spare`]), else unmapped.
fn release(base: usize, len: usize) {
    if ALT_MAPPED.load(Ordering::Acquire) > SPARES || !park_spare(base, len) {
        unmap_alt(base, len);
    }
}

fn unmap_alt(base: usize, len: usize) {
    unmap(base, len);
    ALT_MAPPED.fetch_sub(1, Ordering::AcqRel);
}

/// Unmaps a stack of ours that nothing uses any more (its thread ended, or is ending and switched it
/// off first).
fn unmap(addr: usize, len: usize) {
    region::unmap(addr, len);
}

/// In a forked child: the forking thread keeps its alternate stack for good (its slot's record is
/// dropped, so no later thread of the child takes it over); the other slots' stacks belonged to
/// threads that do not exist here and are free for reuse (or [`reclaim_some`]).
pub fn forget_after_fork() {
    LOCKING_FUTURE.store(false, Ordering::Relaxed);
    // The child has no runtime thread: the work stacks are free (still mapped).
    for busy in &WORK_BUSY {
        busy.store(false, Ordering::Release);
    }
    free_pool_after_fork(current_sp());
    let (lo, _) = ALT.with(Cell::get);
    if lo == 0 {
        return;
    }
    for (base, len) in SLOT_ALT_BASE.iter().zip(&SLOT_ALT_LEN) {
        if base.load(Ordering::Acquire) == lo {
            base.store(0, Ordering::Release);
            len.store(0, Ordering::Release);
        }
    }
}

/// In a forked child: the runtime stacks other threads held at the fork (a handler in a sample or a
/// watch window) are free, since no other thread exists here; the one the forking thread runs on (`sp`),
/// if any, stays taken. Without this, each `fork` while other threads sampled left the child's pool
/// that much smaller for good.
fn free_pool_after_fork(sp: usize) {
    let base = POOL_BASE.load(Ordering::Acquire);
    if base != 0 {
        POOL_FREE.store(free_after_fork(base, POOL_SIZE.load(Ordering::Relaxed), sp), Ordering::Release);
    }
}

/// The free set of a pool of `size` runtime stacks mapped at `base` in a forked child whose thread runs
/// at `sp`: every stack but the one `sp` is on.
fn free_after_fork(base: usize, size: usize, sp: usize) -> u32 {
    let all = ((1u64 << size) - 1) as u32;
    match sp.checked_sub(base + 1).map(|offset| offset / POOL_STRIDE) {
        Some(index) if index < size => all & !(1 << index),
        _ => all,
    }
}

/// Runtime alternate stacks mapped now (for tests).
pub fn alt_stacks_mapped() -> usize {
    SLOT_ALT_BASE.iter().filter(|b| b.load(Ordering::Relaxed) != 0).count()
}

/// What `sigaltstack` shows the program: a disabled stack where the runtime's is installed (or switched
/// off while a program's handler runs, [`run_program_handler_at`]).
fn as_program_sees(real: libc::stack_t) -> libc::stack_t {
    let (lo, _) = ALT.with(Cell::get);
    if lo != 0 && real.ss_sp as usize == lo {
        libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 }
    } else {
        real
    }
}

/// The program's `sigaltstack(new, old)`: it sees and sets only its own alternate stack. Setting one
/// replaces the runtime's; disabling it puts the runtime's back. Returns 0 or `-errno`.
pub fn program_sigaltstack(new: Option<&libc::stack_t>, old: Option<&mut libc::stack_t>) -> i32 {
    let (lo, hi) = ALT.with(Cell::get);
    let Some(current) = raw::sigaltstack(None) else { return -libc::EFAULT };
    let seen = as_program_sees(current);
    if let Some(new) = new {
        let ours_installed = lo != 0 && current.ss_sp as usize == lo;
        let wanted = if new.ss_flags & libc::SS_DISABLE != 0 && lo != 0 { armed(lo, hi) } else { *new };
        let unchanged = ours_installed && new.ss_flags & libc::SS_DISABLE != 0;
        if !unchanged {
            let rc = raw::syscall6(libc::SYS_sigaltstack, [&wanted as *const libc::stack_t as u64, 0, 0, 0, 0, 0]);
            if rc != 0 {
                return rc as i32;
            }
        }
    }
    if let Some(old) = old {
        *old = seen;
    }
    0
}

/// The deepest any runtime stack of the pool was used so far, in bytes (they start zeroed; call only
/// while no handler runs, e.g. at exit or in a test).
pub fn runtime_stack_high_water() -> usize {
    let base = POOL_BASE.load(Ordering::Acquire);
    if base == 0 {
        return 0;
    }
    (0..POOL_SIZE.load(Ordering::Relaxed))
        .map(|i| {
            let lo = base + i * POOL_STRIDE + PAGE;
            // SAFETY: the pool's stacks stay mapped for the life of the process and are readable.
            let stack = unsafe { std::slice::from_raw_parts(lo as *const u8, RUNTIME_STACK) };
            stack.iter().position(|&b| b != 0).map_or(0, |first| RUNTIME_STACK - first)
        })
        .max()
        .unwrap_or(0)
}

/// Where a jump out of a signal handler to `target_sp` should run before the C library restores the
/// signal mask: just below the target, when the thread is on an alternate signal stack (racewatch's or
/// the program's) and the target is not on it. A signal that waited for the mask (racewatch's, held
/// by the handler's mask) is then delivered there, not nested below the handler's frames on a
/// possibly small alternate stack; and `__longjmp_chk` sees a jump up the stack it is on.
pub fn jump_off_alt_stack(target_sp: usize) -> Option<usize> {
    let sp = current_sp();
    let (lo, hi) = ALT.with(Cell::get);
    let (lo, hi) = if lo < hi && (lo..hi).contains(&sp) {
        (lo, hi)
    } else {
        let (stack_lo, stack_hi) = STACK.with(Cell::get);
        if stack_lo < stack_hi && (stack_lo..stack_hi).contains(&sp) {
            return None; // On the thread's own stack.
        }
        let current = raw::sigaltstack(None)?;
        if current.ss_flags & libc::SS_ONSTACK == 0 {
            return None;
        }
        (current.ss_sp as usize, current.ss_sp as usize + current.ss_size)
    };
    if target_sp < 4096 || (lo..hi).contains(&target_sp) {
        return None;
    }
    Some(target_sp.saturating_sub(256) & !15)
}

thread_local! {
    /// Where [`run_program_handler_at`] runs a program's handler with racewatch's alternate stack
    /// switched off (0: none).
    static MOVED_AT: Cell<usize> = const { Cell::new(0) };
}

/// Arms racewatch's alternate stack again when a jump to `target_sp` leaves a program's handler that
/// [`run_program_handler_at`] ran with it switched off (only `sigreturn` would have armed it again).
/// Call off that stack.
pub fn rearm_alt_stack(target_sp: usize) {
    let (lo, hi) = ALT.with(Cell::get);
    let moved_at = MOVED_AT.with(Cell::get);
    if lo == 0 || (lo..hi).contains(&current_sp()) || moved_at == 0 || target_sp <= moved_at {
        return;
    }
    MOVED_AT.with(|m| m.set(0));
    if raw::sigaltstack(None).is_some_and(|current| current.ss_flags & libc::SS_DISABLE != 0) {
        raw::sigaltstack(Some(&armed(lo, hi)));
    }
}

/// Runs a program's handler (`f`) at `top`, on the interrupted stack, when the kernel delivered it on
/// racewatch's alternate stack (see [`program_handler_top`]). The kernel's frame stays live at the top
/// of racewatch's stack until `sigreturn`, so the stack is switched off while the handler runs: a signal
/// then puts its frame on the stack the handler runs on, as without racewatch, and `sigreturn` switches
/// racewatch's back on from the frame. Every signal waits while the thread moves (the switch is refused
/// on the stack being switched off, and until then a frame would go to the top).
pub fn run_program_handler_at(top: usize, f: &mut dyn FnMut()) {
    let (lo, hi) = ALT.with(Cell::get);
    if !(lo..hi).contains(&current_sp()) {
        return run_at(top, f); // A program's alternate stack: the program's to manage.
    }
    let held = raw::sigprocmask(libc::SIG_BLOCK, Some(!0));
    let outer = MOVED_AT.with(|m| m.replace(top));
    run_at(top, &mut || {
        let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        raw::sigaltstack(Some(&off));
        if let Some(mask) = held {
            raw::sigprocmask(libc::SIG_SETMASK, Some(mask));
        }
        f();
    });
    MOVED_AT.with(|m| m.set(outer));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_frees_the_runtime_stacks_but_the_one_it_runs_on() {
        let base = 0x7f00_0000_0000;
        let all = (1u32 << POOL) - 1;
        // Not on a runtime stack (a program stack below or above the pool): all free.
        assert_eq!(free_after_fork(base, POOL, 0x1000), all);
        assert_eq!(free_after_fork(base, POOL, base + POOL * POOL_STRIDE + 64), all);
        // Near the top of stack 1 and at its very top: stack 1 stays taken.
        assert_eq!(free_after_fork(base, POOL, base + 2 * POOL_STRIDE - 64), all & !0b10);
        assert_eq!(free_after_fork(base, POOL, base + 2 * POOL_STRIDE), all & !0b10);
        // The budget pool of 6.
        assert_eq!(free_after_fork(base, BUDGET_POOL, base + 64), 0b111110);
    }
}
