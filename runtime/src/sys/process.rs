//! How the process ends: at once (`halt_on_error`), or through the program's `main` wrapped to see the
//! status it returns.

use super::real::{self, MainFn};
use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

/// Terminates the whole process at once with `code` (`_exit(2)`): no atexit
/// handlers, no destructors, no stdio flushing. Used by `halt_on_error`.
/// Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit(2) takes a plain int and never returns; it touches no
    // memory of this process.
    unsafe { libc::_exit(code) }
}

/// What to make of the status `main` returns: the status libc passes to `exit`.
pub type AfterMain = fn(c_int) -> c_int;

/// The program's `main` and its [`AfterMain`], for [`wrapped_main`].
static MAIN: OnceLock<(MainFn, AfterMain)> = OnceLock::new();

/// What the status `main` returns goes through, when set ([`see_main_status`]) before the program's
/// `__libc_start_main` runs.
static AFTER_MAIN: OnceLock<AfterMain> = OnceLock::new();

/// From the program's start on, the status its `main` returns goes through `after_main`, whose result
/// is what libc passes to `exit` (`main` is wrapped: a backtrace in it shows [`wrapped_main`]). Without
/// this call `main` is called by glibc as without racewatch.
pub fn see_main_status(after_main: AfterMain) {
    let _ = AFTER_MAIN.set(after_main);
}

// ---- The program's `__libc_start_main`, without a frame of racewatch's below `main` ----
//
// `_start` calls `__libc_start_main` (racewatch's, the interposed symbol): `racewatch_start_main` keeps
// the six register arguments, asks [`start_main_entry`] for the `main` to pass on and glibc's
// `__libc_start_main`, puts the arguments back and jumps there with the stack exactly as `_start` left
// it (the seventh argument, `stack_end`, is on it). `main` runs with glibc's frames below it only.

/// racewatch's `__libc_start_main` (the interposed symbol in a preloaded runtime).
// SAFETY: naked: the body is the whole function. It saves and restores every argument register glibc's
// `__libc_start_main` reads, keeps the stack 16-byte aligned at the call, calls a plain `extern "C"`
// function and jumps to glibc's entry with the stack as `_start` left it (its unwind info follows
// every push and pop).
#[unsafe(naked)]
#[cfg_attr(feature = "preload", export_name = "__libc_start_main")]
pub extern "C" fn racewatch_start_main() {
    std::arch::naked_asm!(
        ".cfi_startproc",
        "push rdi",
        ".cfi_adjust_cfa_offset 8",
        "push rsi",
        ".cfi_adjust_cfa_offset 8",
        "push rdx",
        ".cfi_adjust_cfa_offset 8",
        "push rcx",
        ".cfi_adjust_cfa_offset 8",
        "push r8",
        ".cfi_adjust_cfa_offset 8",
        "push r9",
        ".cfi_adjust_cfa_offset 8",
        "sub rsp, 8",
        ".cfi_adjust_cfa_offset 8",
        // rdi: the program's `main`.
        "call {entry}",
        "add rsp, 8",
        ".cfi_adjust_cfa_offset -8",
        // rax: the `main` to pass on, rdx: glibc's `__libc_start_main` (0: not found, return -1).
        "mov r11, rax",
        "mov r10, rdx",
        "pop r9",
        ".cfi_adjust_cfa_offset -8",
        "pop r8",
        ".cfi_adjust_cfa_offset -8",
        "pop rcx",
        ".cfi_adjust_cfa_offset -8",
        "pop rdx",
        ".cfi_adjust_cfa_offset -8",
        "pop rsi",
        ".cfi_adjust_cfa_offset -8",
        "pop rdi",
        ".cfi_adjust_cfa_offset -8",
        "test r10, r10",
        "jz 2f",
        "mov rdi, r11",
        "jmp r10",
        "2:",
        "mov eax, -1",
        "ret",
        ".cfi_endproc",
        entry = sym start_main_entry,
    )
}

/// What `racewatch_start_main` jumps to (returned in rax, rdx).
#[repr(C)]
struct StartMainCall {
    main: MainFn,
    libc_start_main: usize,
}

extern "C" fn start_main_entry(main: MainFn) -> StartMainCall {
    // Once per process image (an exec starts a new one); a second call would be glibc's business.
    let entry = match AFTER_MAIN.get() {
        Some(&after_main) if MAIN.set((main, after_main)).is_ok() => wrapped_main as MainFn,
        _ => main,
    };
    StartMainCall { main: entry, libc_start_main: real::libc_start_main_address() }
}

extern "C" fn wrapped_main(argc: c_int, argv: *mut *mut c_char, envp: *mut *mut c_char) -> c_int {
    let (main, after_main) = *MAIN.get().expect("set before the real __libc_start_main runs");
    after_main(main(argc, argv, envp))
}

/// The program's entry point (`AT_ENTRY` of the auxiliary vector: `_start`); 0 when unknown.
pub fn entry_point() -> u64 {
    // SAFETY: getauxval reads the auxiliary vector and returns 0 for a missing entry.
    unsafe { libc::getauxval(libc::AT_ENTRY) }
}
