//! Where the runtime's text goes: stderr, or `<log_path>.<pid>`.
//!
//! Each call writes its text with one `write(2)` where possible, so lines
//! from different threads do not interleave. Formatting allocates: call
//! these from ordinary threads (constructor, reporter, exit), never from a
//! signal handler.

use crate::sys::fd;
use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};

static FD: AtomicI32 = AtomicI32::new(2);

/// Sends all further output to `<path>.<pid>`; on failure, warns on stderr and keeps stderr.
pub fn set_log_path(path: &str) {
    let full = format!("{path}.{}", std::process::id());
    match fd::open_append(&full) {
        Ok(new_fd) => FD.store(new_fd, Ordering::Relaxed),
        Err(err) => warn(format_args!("cannot open log_path {full}: {err}; logging to stderr")),
    }
}

/// Writes `text` as is.
pub fn write(text: &str) {
    fd::write_all(FD.load(Ordering::Relaxed), text.as_bytes());
}

/// Writes `racewatch: <message>\n`.
pub fn line(message: fmt::Arguments<'_>) {
    write(&format!("racewatch: {message}\n"));
}

/// Writes `racewatch: warning: <message>\n`.
pub fn warn(message: fmt::Arguments<'_>) {
    write(&format!("racewatch: warning: {message}\n"));
}
