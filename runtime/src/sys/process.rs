//! Leaving the process without running the host's exit handlers.

/// Terminates the whole process at once with `code` (`_exit(2)`): no atexit
/// handlers, no destructors, no stdio flushing. Used by `halt_on_error`.
/// Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit(2) takes a plain int and never returns; it touches no
    // memory of this process.
    unsafe { libc::_exit(code) }
}
