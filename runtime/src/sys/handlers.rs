//! The program's handlers of signals other than `SIGTRAP`, as the kernel holds them: their masks
//! block `SIGTRAP` in the kernel exactly when [`blocks_trap_in_kernel`] says so, and those of the
//! signals a process is sent stand behind [`hand_on`]'s trampoline, while the program reads back the
//! handlers, flags and masks it set.

use crate::sys::ptr::{opt_mut, opt_ref};
use crate::sys::{fatal, hand_on, real, signal};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

/// Signals (bit `sig - 1`) whose program-installed `sa_mask` holds `SIGTRAP` (the kernel's may differ).
static PROGRAM_MASK_HAS_TRAP: AtomicU64 = AtomicU64::new(0);

/// Signals (bit `sig - 1`) whose handler, as the kernel holds it, has `SIGTRAP` in its mask: while one
/// runs, `SIGTRAP` is blocked in the kernel, and a jump out of it must take it out again
/// ([`crate::longjmp`]). Kept from racewatch's adoption of the installed handlers on.
static KERNEL_MASK_HAS_TRAP: AtomicU64 = AtomicU64::new(0);

/// Whether a handler of the program's may run with `SIGTRAP` blocked in the kernel: one whose kernel
/// mask holds it, or the program's own `SIGTRAP` handler (racewatch's handler runs it with every signal
/// held). When not, a thread in the program's code has `SIGTRAP` blocked in the kernel only as racewatch
/// keeps it there for the program (its virtual mask, a confined thread). Async-signal-safe.
pub fn some_handler_may_block_trap() -> bool {
    KERNEL_MASK_HAS_TRAP.load(Ordering::Acquire) != 0 || program_handles_trap()
}

/// Records whether the kernel's handler for the signal of `bit` (`handler`, with `mask`) blocks `SIGTRAP`.
fn note_kernel_mask(bit: u64, handler: libc::sighandler_t, mask: &libc::sigset_t) {
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN && signal::has_trap(mask) {
        KERNEL_MASK_HAS_TRAP.fetch_or(bit, Ordering::AcqRel);
    } else {
        KERNEL_MASK_HAS_TRAP.fetch_and(!bit, Ordering::AcqRel);
    }
}

fn signal_bit(sig: c_int) -> Option<u64> {
    (sig as u32).checked_sub(1).and_then(|shift| 1u64.checked_shl(shift))
}

/// Whether a program handler with `flags`, whose `sa_mask` as the program set it holds `SIGTRAP` or
/// not (`program_blocks`), runs with `SIGTRAP` blocked in the kernel.
///
/// When the program's mask blocks it, yes: the kernel then holds off every `SIGTRAP` while the
/// handler runs, the program's own included, exactly as without racewatch (racewatch's signals wait
/// until the handler returns and are then dropped as late).
///
/// Otherwise, on an alternate stack, yes: a signal frame of ours nested there (3.5 KiB with AVX-512
/// state) could overflow a small alternate stack before any check of ours runs. Elsewhere, no: a
/// blocked signal of ours would be queued where the program's `sigwait`/`signalfd` could take it. Not
/// while the program has a `SIGTRAP` handler of its own: an `int3` or a debugger's trap inside such a
/// handler must reach it (a blocked synchronous `SIGTRAP` kills the process).
fn blocks_trap_in_kernel(flags: c_int, program_blocks: bool) -> bool {
    program_blocks || (flags & libc::SA_ONSTACK != 0 && !program_handles_trap())
}

fn program_handles_trap() -> bool {
    !matches!(signal::program_handler(), libc::SIG_DFL | libc::SIG_IGN)
}

/// The program's `sigaction` for a signal other than `SIGTRAP`, once the runtime owns `SIGTRAP`.
pub fn program_sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let Some(bit) = signal_bit(sig) else { return real::sigaction(sig, act, old) };
    let program_had_trap = PROGRAM_MASK_HAS_TRAP.load(Ordering::Acquire) & bit != 0;
    let wrapped_before = hand_on::recorded(sig);
    let kernel = opt_ref(act).map(|act| {
        let mut copy = *act;
        copy.sa_mask =
            signal::with_trap(&act.sa_mask, blocks_trap_in_kernel(act.sa_flags, signal::has_trap(&act.sa_mask)));
        hand_on::to_kernel(sig, &mut copy);
        (copy, signal::has_trap(&act.sa_mask))
    });
    let rc = real::sigaction(sig, kernel.as_ref().map_or(std::ptr::null(), |(copy, _)| copy), old);
    if rc != 0 {
        hand_on::record(sig, wrapped_before);
    } else {
        if let Some((copy, _)) = &kernel {
            note_kernel_mask(bit, copy.sa_sigaction, &copy.sa_mask);
        }
        if let Some(old) = opt_mut(old) {
            old.sa_mask = signal::with_trap(&old.sa_mask, program_had_trap);
            hand_on::from_kernel(old, wrapped_before);
        }
        match kernel {
            Some((_, true)) => PROGRAM_MASK_HAS_TRAP.fetch_or(bit, Ordering::AcqRel),
            Some((_, false)) => PROGRAM_MASK_HAS_TRAP.fetch_and(!bit, Ordering::AcqRel),
            None => 0,
        };
    }
    rc
}

/// Records the program's `SIGTRAP` disposition; when its own handler came or went, every other
/// handler's kernel mask follows [`blocks_trap_in_kernel`] again.
pub fn set_program_trap_action(act: &libc::sigaction) {
    let handled = program_handles_trap();
    signal::set_program_action(act);
    if handled != program_handles_trap() {
        apply_trap_rule(false);
    }
}

/// Brings the handlers the program installed before the runtime took `SIGTRAP` under the rule of
/// [`blocks_trap_in_kernel`], remembering their masks as the program set them, and those of the
/// signals a process is sent behind [`hand_on`]'s trampoline.
pub fn adopt_installed() {
    apply_trap_rule(true);
}

/// Puts every installed handler's kernel mask under the rule of [`blocks_trap_in_kernel`].
/// `adopting`: the kernel's masks and handlers are the program's own (the first time), to be
/// remembered (and wrapped).
fn apply_trap_rule(adopting: bool) {
    for sig in 1..=64 {
        let Some(bit) = signal_bit(sig) else { continue };
        if sig == libc::SIGTRAP || sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: zeroed sigaction is a valid out-parameter.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        if real::own_sigaction(sig, std::ptr::null(), &mut current) != 0 {
            continue;
        }
        let kernel_has_trap = signal::has_trap(&current.sa_mask);
        if adopting && kernel_has_trap {
            PROGRAM_MASK_HAS_TRAP.fetch_or(bit, Ordering::AcqRel);
        }
        let handler = current.sa_sigaction;
        let program_blocks = PROGRAM_MASK_HAS_TRAP.load(Ordering::Acquire) & bit != 0;
        let wanted = blocks_trap_in_kernel(current.sa_flags, program_blocks);
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            note_kernel_mask(bit, handler, &current.sa_mask);
            continue;
        }
        // `stats=1`'s handler where the program has `SIG_DFL` is racewatch's own: not wrapped.
        let wrapping = adopting && hand_on::stands_in(sig, current.sa_flags) && !fatal::covers(sig);
        if wanted != kernel_has_trap || wrapping {
            current.sa_mask = signal::with_trap(&current.sa_mask, wanted);
            if wrapping {
                hand_on::to_kernel(sig, &mut current);
            }
            real::own_sigaction(sig, &current, std::ptr::null_mut());
        }
        note_kernel_mask(bit, handler, &current.sa_mask);
    }
}
