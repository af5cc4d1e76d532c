//! How the process ends: at once (`halt_on_error`), or through the program's `main` wrapped to see the
//! status it returns.

use super::real::{self, MainFn};
use std::ffi::{c_char, c_int, c_void};
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

/// Calls the real `__libc_start_main` with `main` wrapped: the status `main` returns goes through
/// `after_main`, whose result is what libc passes to `exit`. The other arguments are passed on.
#[allow(clippy::too_many_arguments)]
pub fn start_main_wrapped(
    main: MainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
    after_main: AfterMain,
) -> c_int {
    // Once per process image (an exec starts a new one); a second call would be glibc's business.
    let entry = if MAIN.set((main, after_main)).is_ok() { wrapped_main as MainFn } else { main };
    real::libc_start_main(entry, argc, argv, init, fini, rtld_fini, stack_end)
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
