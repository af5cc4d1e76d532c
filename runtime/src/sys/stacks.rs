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
//! - **Alternate stacks for small threads** ([`thread_started`]): a thread
//!   whose stack is smaller than [`SMALL_STACK`] gets a 16 KiB alternate
//!   signal stack of the runtime's, so even the kernel's signal frame (about
//!   3.5 KiB with AVX-512 state) never lands on its stack. It is freed when
//!   the thread exits ([`thread_exiting`]).
// The pointers here are a C caller's, passed on under the libc function's own contract (null
// or valid); making these functions `unsafe` would only move the same promise into the callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Bytes the handler may use on the stack the signal was delivered to before it switches stacks:
/// `stats=1` measures at most 480 on the demos (`max handler bytes on the program's stack`); this keeps a
/// 2x margin.
pub const HOST_BUDGET: usize = 1024;
/// Size of one runtime stack.
pub const RUNTIME_STACK: usize = 64 << 10;
/// Runtime stacks in the pool: watch windows (at most 4) plus concurrent traps and samples.
const POOL: usize = 16;
/// Threads with stacks below this get a runtime alternate signal stack.
pub const SMALL_STACK: usize = 1 << 20;
/// Size of a runtime alternate signal stack.
const ALT_STACK: usize = 16 << 10;
const PAGE: usize = 4096;

static POOL_BASE: AtomicUsize = AtomicUsize::new(0);
static POOL_FREE: AtomicU32 = AtomicU32::new(0);

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
    let slot = RUNTIME_STACK + PAGE;
    let Some(base) = map(slot * POOL) else { return false };
    for i in 0..POOL {
        protect_guard(base + i * slot);
    }
    POOL_BASE.store(base, Ordering::Release);
    POOL_FREE.store(((1u64 << POOL) - 1) as u32, Ordering::Release);
    true
}

fn map(len: usize) -> Option<usize> {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (addr != libc::MAP_FAILED).then_some(addr as usize)
}

fn protect_guard(addr: usize) {
    // SAFETY: `addr` is the first page of a mapping of ours; making it inaccessible turns an
    // overflow into a fault instead of silent corruption.
    unsafe { libc::mprotect(addr as *mut libc::c_void, PAGE, libc::PROT_NONE) };
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
    // SAFETY: reads the current alternate-stack setting into a live local.
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) } == 0 && ss.ss_flags & libc::SS_ONSTACK != 0 {
        let lo = ss.ss_sp as usize;
        if (lo..lo + ss.ss_size).contains(&sp) {
            return Some(sp - lo);
        }
    }
    None
}

/// The most bytes the handler used below the kernel's signal frame before switching stacks.
static HOST_HIGH_WATER: AtomicUsize = AtomicUsize::new(0);

/// The most bytes the handler used on a program's stack below the kernel's signal frame (measured).
pub fn host_high_water() -> usize {
    HOST_HIGH_WATER.load(Ordering::Relaxed)
}

/// Runs `f` on a runtime stack; false (without running it) when every runtime stack is in use.
/// `frame` is an address inside the kernel's signal frame (the `ucontext`): the handler's own use of
/// the program's stack is measured from there. Async-signal-safe.
pub fn run_on_runtime_stack(frame: usize, f: &mut dyn FnMut()) -> bool {
    HOST_HIGH_WATER.fetch_max(frame.saturating_sub(current_sp()), Ordering::Relaxed);
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
    let top = base + (index + 1) * (RUNTIME_STACK + PAGE);
    switch_and_call(top, f);
    POOL_FREE.fetch_or(1 << index, Ordering::AcqRel);
    true
}

extern "C" fn trampoline(data: *mut u8) {
    // SAFETY: `data` is the `&mut &mut dyn FnMut()` that `switch_and_call` passed, alive for the call.
    let f = unsafe { &mut *(data as *mut &mut dyn FnMut()) };
    // A panic must not unwind through the stack switch.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

fn switch_and_call(top: usize, f: &mut dyn FnMut()) {
    let mut f: &mut dyn FnMut() = f;
    let data = &mut f as *mut &mut dyn FnMut() as *mut u8;
    // SAFETY: `top` is the 16-byte-aligned end of a runtime stack this thread has claimed
    // exclusively. The old stack pointer is pushed on the new stack and popped back after the
    // call; `call` leaves the stack 16-byte aligned at the callee's entry minus the return
    // address, as the C ABI wants; every register the C ABI lets the callee clobber is declared.
    unsafe {
        std::arch::asm!(
            "mov rax, rsp",
            "mov rsp, {top}",
            "push rax",
            "sub rsp, 8",
            "call {tramp}",
            "add rsp, 8",
            "pop rsp",
            top = in(reg) top,
            out("rax") _,
            tramp = sym trampoline,
            in("rdi") data,
            clobber_abi("C"),
        );
    }
}

/// Records the calling thread's stack bounds (exact, from `pthread_getattr_np`). For the thread that
/// starts the detector; new threads use [`thread_started`], which allocates nothing (a `malloc` in a
/// new thread would give it a 64 MiB malloc arena of its own).
pub fn record_current_thread() {
    // SAFETY: pthread_getattr_np fills a live attr for the calling thread, destroyed right after.
    let bounds = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            return;
        }
        (addr as usize, addr as usize + size)
    };
    STACK.with(|s| s.set(bounds));
}

extern "C" {
    // glibc >= 2.18; not in the libc crate.
    fn pthread_getattr_default_np(attr: *mut libc::pthread_attr_t) -> libc::c_int;
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

/// Records the bounds of a new thread's stack of `size` bytes (a lower bound: the thread descriptor
/// and TLS sit above the start routine's frame) and gives a small-stack thread a runtime alternate
/// signal stack. Call first thing in the new thread (not from a signal handler).
pub fn thread_started(size: usize) {
    if size == 0 {
        return;
    }
    let sp = current_sp();
    STACK.with(|s| s.set((sp.saturating_sub(size) + PAGE, sp + PAGE)));
    if size < SMALL_STACK {
        give_alt_stack();
    }
}

fn give_alt_stack() {
    // SAFETY: reads the current setting into a live local.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut current) } != 0 || current.ss_flags & libc::SS_DISABLE == 0 {
        return; // The program has one: leave it.
    }
    let Some(base) = map(ALT_STACK + PAGE) else { return };
    protect_guard(base);
    let ss = libc::stack_t { ss_sp: (base + PAGE) as *mut libc::c_void, ss_flags: 0, ss_size: ALT_STACK };
    // SAFETY: `ss` describes a live mapping of ours that stays mapped until `thread_exiting`.
    if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
        unmap(base, ALT_STACK + PAGE);
        return;
    }
    ALT.with(|a| a.set((base + PAGE, base + PAGE + ALT_STACK)));
}

fn unmap(addr: usize, len: usize) {
    // SAFETY: unmaps a mapping of ours that nothing uses any more.
    unsafe { libc::munmap(addr as *mut libc::c_void, len) };
}

/// Frees the calling thread's runtime alternate stack (disabling it first if it is still installed).
/// Call when the thread exits.
pub fn thread_exiting() {
    let (lo, hi) = ALT.with(|a| a.replace((0, 0)));
    if lo == 0 {
        return;
    }
    // SAFETY: reads the current setting, and disables it only when it is ours and not in use.
    unsafe {
        let mut current: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut current) == 0 && current.ss_sp as usize == lo {
            if current.ss_flags & libc::SS_ONSTACK != 0 {
                return; // Exiting from a handler on it: leave it mapped.
            }
            let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
            libc::sigaltstack(&off, std::ptr::null_mut());
        }
    }
    unmap(lo - PAGE, hi - lo + PAGE);
}

/// The deepest any runtime stack of the pool was used so far, in bytes (they start zeroed; call only
/// while no handler runs, e.g. at exit or in a test).
pub fn runtime_stack_high_water() -> usize {
    let base = POOL_BASE.load(Ordering::Acquire);
    if base == 0 {
        return 0;
    }
    (0..POOL)
        .map(|i| {
            let lo = base + i * (RUNTIME_STACK + PAGE) + PAGE;
            // SAFETY: the pool's stacks stay mapped for the life of the process and are readable.
            let stack = unsafe { std::slice::from_raw_parts(lo as *const u8, RUNTIME_STACK) };
            stack.iter().position(|&b| b != 0).map_or(0, |first| RUNTIME_STACK - first)
        })
        .max()
        .unwrap_or(0)
}
