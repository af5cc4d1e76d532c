//! glibc's `jmp_buf` on x86-64, read for the `longjmp` interposers ([`crate::longjmp`]).
//!
//! `struct __jmp_buf_tag { long __jmpbuf[8]; int __mask_was_saved; sigset_t __saved_mask; }`: the
//! saved RSP is word 6, mangled with the thread's pointer guard (`PTR_MANGLE`: xor with the guard
//! at `%fs:0x30`, then rotate left by 17 bits). `__saved_mask` is 128 bytes, of which the C library
//! fills the first 8 (the kernel's signals): racewatch notes the program's `SIGTRAP` bit in the next 8
//! ([`mark_program_trap`]), which the kernel's mask cannot carry (racewatch keeps it virtual).

use std::ffi::c_void;

const JB_RSP: usize = 6;
const MASK_WAS_SAVED: usize = 64;
const SAVED_MASK: usize = 72;
/// Where racewatch notes the program's `SIGTRAP` bit: the saved mask's second word.
const PROGRAM_TRAP: usize = SAVED_MASK + 8;
/// The note's mark (the low bit is the program's `SIGTRAP` bit).
const MARK: u64 = 0x7277_5f74_7261_7000;

/// The stack pointer a `longjmp` to `env` resumes with.
pub fn target_sp(env: *const c_void) -> usize {
    if env.is_null() {
        return 0;
    }
    let guard: u64;
    // SAFETY: `env` is the program's `jmp_buf` (the C contract of `longjmp`): 8 words, then the mask.
    // `%fs:0x30` is glibc's `tcbhead_t.pointer_guard` of the calling thread, always mapped.
    let mangled = unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0x30]", out(reg) guard, options(nostack, readonly, preserves_flags));
        std::ptr::read_unaligned((env as *const u64).add(JB_RSP))
    };
    (mangled.rotate_right(17) ^ guard) as usize
}

/// Takes `SIGTRAP` out of the mask `sigsetjmp(env, 1)` saved, so that the jump does not block it in
/// the kernel again (a handler's kernel mask of racewatch's making was in force when it was saved).
pub fn clear_saved_trap(env: *mut c_void) {
    if env.is_null() {
        return;
    }
    // SAFETY: as in `target_sp`; the saved mask's first word holds signals 1..=64.
    unsafe {
        let saved = std::ptr::read_unaligned((env as *const u8).add(MASK_WAS_SAVED) as *const i32);
        if saved != 0 {
            let word = (env as *mut u8).add(SAVED_MASK) as *mut u64;
            std::ptr::write_unaligned(word, std::ptr::read_unaligned(word) & !(1u64 << (libc::SIGTRAP - 1)));
        }
    }
}

/// Before `sigsetjmp(env, 1)`: notes whether the program has `SIGTRAP` blocked, which the mask the C
/// library saves (the kernel's) does not show.
pub fn mark_program_trap(env: *mut c_void, blocked: bool) {
    if env.is_null() {
        return;
    }
    // SAFETY: `env` is the program's `sigjmp_buf` (the C contract of `sigsetjmp`), whose saved mask
    // has 128 bytes; its second word is not the kernel's and the C library never writes it.
    unsafe { std::ptr::write_unaligned((env as *mut u8).add(PROGRAM_TRAP) as *mut u64, MARK | u64::from(blocked)) };
}

/// Whether the program had `SIGTRAP` blocked when `sigsetjmp(env, 1)` saved the mask a jump to `env`
/// restores; `None` when the jump restores no mask or racewatch did not see the `sigsetjmp`.
pub fn program_trap(env: *const c_void) -> Option<bool> {
    if env.is_null() {
        return None;
    }
    // SAFETY: as in `target_sp`: the program's `jmp_buf`, with the mask flag and the saved mask.
    let (saved, note) = unsafe {
        (
            std::ptr::read_unaligned((env as *const u8).add(MASK_WAS_SAVED) as *const i32),
            std::ptr::read_unaligned((env as *const u8).add(PROGRAM_TRAP) as *const u64),
        )
    };
    (saved != 0 && note & !1 == MARK).then_some(note & 1 != 0)
}

/// Whether a jump to `env` restores a saved mask (`sigsetjmp(env, 1)`).
pub fn restores_mask(env: *const c_void) -> bool {
    // SAFETY: as in `target_sp`.
    !env.is_null() && unsafe { std::ptr::read_unaligned((env as *const u8).add(MASK_WAS_SAVED) as *const i32) } != 0
}
