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
//! So, once racewatch owns `SIGTRAP`, a jump made on an alternate stack to a target off it first moves
//! to the target's stack (just below the target's stack pointer: frames the jump discards), takes
//! `SIGTRAP` out of the kernel mask unless the program has it blocked (and out of the mask the jump
//! will restore), switches racewatch's alternate stack back on when the jump leaves a handler that ran
//! with it off ([`stacks::run_program_handler_at`]), and then makes the C library's jump.

use crate::detector;
use crate::sys::real::{self, Jump};
use crate::sys::{handlers, jump, raw, signal, stacks, thread, trap_wait};
use std::ffi::{c_int, c_void};

fn leave(which: Jump, env: *mut c_void, val: c_int) -> ! {
    // A jump out of a handler that interrupted a wait for `SIGTRAP` leaves that wait behind.
    trap_wait::before_jump();
    // Where no handler of the program's may run with `SIGTRAP` blocked in the kernel, none runs on an
    // alternate stack with racewatch's rule either (an `SA_ONSTACK` handler's kernel mask holds it): the
    // jump leaves no handler whose mask or stack needs putting right (a coroutine switch, an error
    // path: Lua's yields from C jump once each), and is the C library's alone.
    if signal::is_installed()
        && !detector::is_sandboxed()
        && handlers::some_handler_may_block_trap()
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

/// Off the alternate stack: the mask (`held`: the one before every signal was held) and racewatch's
/// alternate stack as they would be after a `sigreturn`, then the jump. One system call (two or three
/// after leaving an alternate stack).
fn finish(which: Jump, env: *mut c_void, val: c_int, held: Option<u64>) -> ! {
    let trap = 1u64 << (libc::SIGTRAP - 1);
    let unblock = !signal::trap_blocked();
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
