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

/// Defines `pub extern "C" fn $name()`, exported as `$symbol` in a preloaded runtime: a naked function
/// that keeps the six register arguments, calls `$entry(rdi, rsi, rdx, rcx, r8, its caller's return
/// address) -> Jump`, puts the arguments back and jumps to the `to` it returned with `first` in rdi and
/// the stack exactly as its caller left it (no frame of racewatch's below the callee, the caller's
/// return address kept); with `to` 0 it returns `first` instead.
macro_rules! naked_jump {
    ($name:ident, $symbol:literal, $entry:path) => {
        // SAFETY: naked: the body is the whole function. It saves and restores every argument register,
        // keeps the stack 16-byte aligned at the call of a plain `extern "C"` function and jumps with
        // the stack as the caller left it (its unwind info follows every push and pop).
        #[unsafe(naked)]
        #[cfg_attr(feature = "preload", export_name = $symbol)]
        pub extern "C" fn $name() {
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
                // The sixth argument: the caller's return address.
                "mov r9, [rsp + 56]",
                "call {entry}",
                "add rsp, 8",
                ".cfi_adjust_cfa_offset -8",
                // rax: `first`, rdx: `to`.
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
                "mov rax, r11",
                "ret",
                ".cfi_endproc",
                entry = sym $entry,
            )
        }
    };
}
pub(crate) use naked_jump;

naked_jump!(racewatch_start_main, "__libc_start_main", start_main_entry);

/// Where a naked entry jumps (`to`, returned in rdx) and the first argument it passes there (`first`,
/// returned in rax; what it returns when `to` is 0).
#[repr(C)]
pub struct Jump {
    pub first: usize,
    pub to: usize,
}

extern "C" fn start_main_entry(main: MainFn, _: usize, _: usize, _: usize, _: usize, _: usize) -> Jump {
    let to = real::libc_start_main_address();
    if to == 0 {
        return Jump { first: -1i64 as usize, to };
    }
    // Once per process image (an exec starts a new one); a second call would be glibc's business.
    let entry = match AFTER_MAIN.get() {
        Some(&after_main) if MAIN.set((main, after_main)).is_ok() => wrapped_main as MainFn,
        _ => main,
    };
    Jump { first: entry as usize, to }
}

extern "C" fn wrapped_main(argc: c_int, argv: *mut *mut c_char, envp: *mut *mut c_char) -> c_int {
    let (main, after_main) = *MAIN.get().expect("set before the real __libc_start_main runs");
    after_main(main(argc, argv, envp))
}

/// What the status passed to `exit` goes through ([`see_exit_status`]).
static AT_EXIT: OnceLock<AfterMain> = OnceLock::new();

/// From now on, the status the program passes to `exit` goes through `at_exit` first, whose result is
/// what glibc's `exit` gets.
pub fn see_exit_status(at_exit: AfterMain) {
    let _ = AT_EXIT.set(at_exit);
}

/// racewatch's `exit` (the interposed symbol in a preloaded runtime): [`exit_entry`] decides the status,
/// then glibc's `exit` runs with the stack as the program's call left it (an `atexit` handler's
/// backtrace shows no frame of racewatch's).
// SAFETY: naked: the body is the whole function. It keeps the stack 16-byte aligned at the call, calls
// a plain `extern "C"` function and jumps to glibc's `exit` with the status it returned and the stack
// as the caller left it (its unwind info follows the push and pop).
#[unsafe(naked)]
#[cfg_attr(feature = "preload", export_name = "exit")]
pub extern "C" fn racewatch_exit(_status: c_int) -> ! {
    std::arch::naked_asm!(
        ".cfi_startproc",
        "push rdi",
        ".cfi_adjust_cfa_offset 8",
        // rdi: the program's status.
        "call {entry}",
        "pop rdi",
        ".cfi_adjust_cfa_offset -8",
        // eax: the status to end with, rdx: glibc's `exit`.
        "mov edi, eax",
        "jmp rdx",
        ".cfi_endproc",
        entry = sym exit_entry,
    )
}

extern "C" fn exit_entry(status: c_int) -> Jump {
    let status = AT_EXIT.get().map_or(status, |at_exit| at_exit(status));
    let exit = real::exit_address();
    if exit == 0 {
        exit_now(status);
    }
    Jump { first: status as u32 as usize, to: exit }
}

/// Where the program's executable starts: the lowest page of its loaded segments, from the program
/// headers the kernel names in the auxiliary vector (`None` without them).
pub fn program_start() -> Option<usize> {
    // SAFETY: getauxval reads the auxiliary vector and returns 0 for a missing entry.
    let (at, count) = unsafe { (libc::getauxval(libc::AT_PHDR), libc::getauxval(libc::AT_PHNUM)) };
    if at == 0 || count == 0 {
        return None;
    }
    // SAFETY: the kernel's AT_PHDR is the address of the program's AT_PHNUM program headers, mapped with
    // the executable for the life of the process.
    let headers = unsafe { std::slice::from_raw_parts(at as usize as *const libc::Elf64_Phdr, count as usize) };
    let bias = at.checked_sub(headers.iter().find(|h| h.p_type == libc::PT_PHDR)?.p_vaddr)?;
    let lowest = headers.iter().filter(|h| h.p_type == libc::PT_LOAD).map(|h| h.p_vaddr).min()?;
    Some((bias.checked_add(lowest)? as usize) & !4095)
}

/// The main thread's stack limit (`RLIMIT_STACK`'s soft value; `usize::MAX`: unlimited or unknown).
pub fn stack_limit() -> usize {
    let mut limit = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: 0 };
    let rc = super::raw::syscall6(
        libc::SYS_prlimit64,
        [0, libc::RLIMIT_STACK as u64, 0, &mut limit as *mut libc::rlimit as u64, 0, 0],
    );
    if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return usize::MAX;
    }
    limit.rlim_cur as usize
}

/// The program's entry point (`AT_ENTRY` of the auxiliary vector: `_start`); 0 when unknown.
pub fn entry_point() -> u64 {
    // SAFETY: getauxval reads the auxiliary vector and returns 0 for a missing entry.
    unsafe { libc::getauxval(libc::AT_ENTRY) }
}
