//! The exit status of a process that reported races (`fail_on_race`), and the record of its races it
//! leaves for `racewatch cargo`'s summary (`races_path`).
//!
//! A fini destructor cannot see the program's exit status, so the runtime sees the two ways a
//! program ends normally: `main`'s return (with either option set, the program's `main` is wrapped by
//! racewatch's `__libc_start_main`, [`process::see_main_status`]) and `exit` (C's `exit`, Rust's
//! `std::process::exit`: both go through the PLT, interposed). There, with either option set: sampling stops, the watch windows under way close, the reporter gets a bounded chance
//! to print what is queued ([`reporter::settle`]; each race printed rewrites `<races_path>.<pid>`,
//! see [`crate::races_file`]), and with `fail_on_race=1` a status of 0 becomes `exitcode` when this
//! process printed a race. A non-zero
//! status is the program's own and is kept. Sampling stops there so that no report is printed after
//! the status was decided (races in atexit handlers and destructors are not looked for).
//!
//! `_exit`, a death by signal and an `exit` libc makes itself (the last thread calling
//! `pthread_exit`) are not seen: their status stays as it is (the record of races was written when
//! they were printed). Without either option (a bare `LD_PRELOAD`) `main` is not wrapped (a backtrace in
//! it has glibc's frames below it only) and `exit` passes the status on.
//!
//! The symbols are exported only with the `preload` feature, like [`crate::intercept`]'s.

use crate::sys::{process, signal, thread};
use crate::{detector, log, options, reporter, sampler};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

/// How long the watch windows under way get to close once sampling stopped.
const QUIET_MS: u64 = 1000;

/// The status passed to `exit` is seen ([`process::see_exit_status`]); with `fail_on_race` or
/// `races_path`, also the status the program's `main` returns ([`process::see_main_status`]); without
/// either (a bare `LD_PRELOAD`), glibc calls `main` as without racewatch. Called by the constructor,
/// once the options are known.
pub fn install() {
    process::see_exit_status(exit_status);
    let options = options::get();
    if options.fail_on_race || options.races_path.is_some() {
        process::see_main_status(exit_status);
    }
}

/// The process that already settled at exit (the second of `main`'s return and a nested `exit` only
/// decides again, without waiting).
static SETTLED: AtomicI32 = AtomicI32::new(0);

/// The status the process ends with, when it ends normally with `status` (see the module comment).
pub fn exit_status(status: c_int) -> c_int {
    if crate::sys::confined::here() {
        return status; // An exit from inside a thread's own sandbox: no system call of racewatch's.
    }
    detector::process_exiting();
    let options = options::get();
    if !(options.fail_on_race || options.races_path.is_some()) || detector::is_sandboxed() {
        return status;
    }
    let guarded = std::panic::catch_unwind(|| {
        let pid = thread::getpid();
        let first = SETTLED.swap(pid, Ordering::AcqRel) != pid;
        if first {
            settle();
        }
        let races = reporter::races_reported();
        let decided = decide(status, races, options.fail_on_race, options.exitcode);
        if first && decided != status {
            let races = if races == 1 { "1 data race".to_string() } else { format!("{races} data races") };
            log::line(format_args!("{races} reported: exit status {decided} instead of {status} (fail_on_race=1)"));
        }
        decided
    });
    guarded.unwrap_or(status)
}

/// Stops sampling, lets the watch windows under way close and the reporter print what they found.
fn settle() {
    if detector::is_running() {
        sampler::stop();
        // A sample signal already sent may not have reached its handler yet.
        thread::sleep_us(1000);
        signal::wait_until_quiet(QUIET_MS);
    }
    reporter::settle();
}

/// The status to end with: `exitcode` for a process that would exit 0 but printed `races` races with
/// `fail_on_race`, else the program's own `status`.
pub fn decide(status: c_int, races: usize, fail_on_race: bool, exitcode: i32) -> c_int {
    if fail_on_race && status == 0 && races > 0 {
        exitcode
    } else {
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_clean_exit_of_a_racing_process_with_the_option_on_changes() {
        assert_eq!(decide(0, 1, true, 66), 66);
        assert_eq!(decide(0, 2, true, 23), 23);
        // The program's own failure is kept, and so is a clean run's 0.
        assert_eq!(decide(3, 1, true, 66), 3);
        assert_eq!(decide(0, 0, true, 66), 0);
        // A bare LD_PRELOAD (option off) never changes the status.
        assert_eq!(decide(0, 5, false, 66), 0);
    }
}
