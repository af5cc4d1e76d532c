//! Interposed `longjmp`, `_longjmp`, `siglongjmp` and `__longjmp_chk`: a jump out of a signal handler
//! that ran on an alternate stack.
//!
//! Handlers on an alternate stack run with `SIGTRAP` blocked in the kernel (a frame of racewatch's
//! nested there could overflow a small one; [`crate::sys::handlers`]). A `siglongjmp` out of such a
//! handler restores the saved mask while the thread is still on the alternate stack, so a sample of
//! racewatch's that waited meanwhile was delivered right there, below the frames of the handlers it
//! leaves (a SIGSEGV probe's, a SIGALRM timeout's nested in it): an 8 KiB alternate stack
//! overflowed and the process died of `SIGSEGV`. A jump that does not restore the mask left `SIGTRAP`
//! blocked for good (visible in the mask the program reads back; racewatch's samples pending). On an
//! alternate stack placed anywhere, glibc's `__longjmp_chk` may see a jump "down" the stack and abort
//! ("longjmp causes uninitialized stack frame").
//!
//! The program's bit after any jump is the kernel's would be: the one `sigsetjmp` saved, for a jump
//! that restores the mask (noted in the buffer by racewatch's `__sigsetjmp`: the kernel's saved mask
//! never has it), else its `SIGTRAP` handler's when the jump leaves one (set 39 p37: a `siglongjmp`
//! restored neither, and a `longjmp` out of the handler unblocked it).
//!
//! So, once racewatch owns `SIGTRAP`, a jump made on an alternate stack to a target off it first moves
//! to the target's stack (just below the target's stack pointer: frames the jump discards), takes
//! `SIGTRAP` out of the kernel mask where racewatch keeps the program's bit (and out of the mask the
//! jump will restore), switches racewatch's alternate stack back on when the jump leaves a handler that ran
//! with it off ([`stacks::run_program_handler_at`]), and then makes the C library's jump.

use crate::detector;
use crate::sys::real::{self, Jump};
use crate::sys::{handlers, jump, raw, signal, stacks, thread, trap_wait};
use std::ffi::{c_int, c_void};

fn leave(which: Jump, env: *mut c_void, val: c_int) -> ! {
    // A jump out of a handler that interrupted a wait for `SIGTRAP` leaves that wait behind.
    trap_wait::before_jump();
    let left_trap_handler = signal::is_installed() && !signal::in_borrowed_memory() && program_trap_after_jump(env);
    // Where no handler of the program's may run with `SIGTRAP` blocked in the kernel, none runs on an
    // alternate stack with racewatch's rule either (an `SA_ONSTACK` handler's kernel mask holds it): the
    // jump leaves no handler whose mask or stack needs putting right (a coroutine switch, an error
    // path: Lua's yields from C jump once each), and is the C library's alone.
    if signal::is_installed()
        && !detector::is_sandboxed()
        && (handlers::some_handler_may_block_trap() || left_trap_handler)
        && thread::syscalls_allowed()
    {
        if let Some(top) = stacks::jump_off_alt_stack(jump::target_sp(env)) {
            // Every signal waits while the thread moves: a handler's frame put at the top of the
            // alternate stack (the thread is no longer on it) would overwrite this frame, which the
            // move still reads.
            let held = raw::sigprocmask(libc::SIG_BLOCK, Some(!0));
            stacks::run_at(top, &mut || {
                finish(which, env, val, held);
            });
        }
        // Not on an alternate stack: the handler may still have run with SIGTRAP in its kernel mask
        // (on the thread's stack, or a signal interrupted a jump of ours after it moved).
        finish(which, env, val, None)
    }
    real::jump(which, env, val)
}

/// The program's `SIGTRAP` bit as the jump leaves it, as the kernel's would be without racewatch: the
/// one `sigsetjmp` saved where the jump restores a mask (the kernel's saved mask never has it: racewatch
/// keeps it virtual), else the one of the program's `SIGTRAP` handler the jump leaves (blocked unless
/// `SA_NODEFER`), else as it is. A `SIGTRAP` held for the program runs now if the bit lets it through.
/// True when the jump leaves the program's `SIGTRAP` handler (whose kernel mask blocks `SIGTRAP`).
fn program_trap_after_jump(env: *mut c_void) -> bool {
    let left = signal::leave_trap_handlers(jump::target_sp(env));
    let blocked = match jump::program_trap(env) {
        Some(saved) => saved,
        None if jump::restores_mask(env) => return left.is_some(),
        None => left.unwrap_or_else(signal::trap_blocked),
    };
    // The kernel's mask at the target never blocks it (racewatch keeps the bit).
    jump::clear_saved_trap(env);
    let was_blocked = signal::trap_blocked();
    if blocked != was_blocked {
        signal::set_trap_blocked(blocked);
        if was_blocked {
            signal::take_parked_on_unblock();
        }
    }
    left.is_some()
}

// ---- sigsetjmp ----
//
// `sigsetjmp(env, 1)` saves the kernel's mask, which never has `SIGTRAP` while racewatch keeps the
// program's bit; racewatch's entry notes the program's bit in the buffer first
// ([`jump::mark_program_trap`]), then jumps to the C library's with the caller's stack and registers
// as they were (it returns twice, to the caller's frame).

/// Interposed `__sigsetjmp` (what `sigsetjmp` compiles to): notes the program's `SIGTRAP` bit, then the
/// C library's.
#[cfg_attr(feature = "preload", unsafe(no_mangle))]
#[unsafe(naked)]
pub extern "C" fn __sigsetjmp() {
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {note}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "jmp rax",
        note = sym note_sigsetjmp,
    )
}

/// For [`__sigsetjmp`]: notes the program's bit where the mask is saved; the C library's function.
extern "C" fn note_sigsetjmp(env: *mut c_void, save_mask: c_int) -> usize {
    if save_mask != 0 && signal::is_installed() && !signal::in_borrowed_memory() {
        jump::mark_program_trap(env, signal::trap_blocked());
    }
    match real::sigsetjmp_addr() {
        0 => std::process::abort(),
        addr => addr,
    }
}

/// Off the alternate stack: the mask (`held`: the one before every signal was held) and racewatch's
/// alternate stack as they would be after a `sigreturn`, then the jump. One system call (two or three
/// after leaving an alternate stack).
fn finish(which: Jump, env: *mut c_void, val: c_int, held: Option<u64>) -> ! {
    let trap = 1u64 << (libc::SIGTRAP - 1);
    // A thread racewatch knows keeps the program's bit virtual (set by `program_trap_after_jump`): the
    // kernel's mask never blocks it there.
    let unblock = !signal::trap_blocked() || thread::known_slot(raw::gettid()).is_some();
    if unblock {
        jump::clear_saved_trap(env);
    }
    stacks::rearm_alt_stack(jump::target_sp(env));
    match held {
        Some(mask) => raw::sigprocmask(libc::SIG_SETMASK, Some(if unblock { mask & !trap } else { mask })),
        None if unblock => raw::sigprocmask(libc::SIG_UNBLOCK, Some(trap)),
        None => None,
    };
    real::jump(which, env, val)
}

/// Interposed `longjmp`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn longjmp(env: *mut c_void, val: c_int) -> ! {
    leave(Jump::Longjmp, env, val)
}

/// Interposed `_longjmp`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn _longjmp(env: *mut c_void, val: c_int) -> ! {
    leave(Jump::UnderscoreLongjmp, env, val)
}

/// Interposed `siglongjmp`.
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn siglongjmp(env: *mut c_void, val: c_int) -> ! {
    leave(Jump::Siglongjmp, env, val)
}

/// Interposed `__longjmp_chk` (`longjmp` and `siglongjmp` under `_FORTIFY_SOURCE`).
#[cfg_attr(feature = "preload", no_mangle)]
pub extern "C" fn __longjmp_chk(env: *mut c_void, val: c_int) -> ! {
    leave(Jump::LongjmpChk, env, val)
}
