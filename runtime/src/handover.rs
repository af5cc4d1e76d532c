//! racewatch's own files in a process that gives up root.
//!
//! A daemon started as root that becomes another user (`memcached -u nobody`, a server's workers) may
//! no longer create files where racewatch was told to write (`log_path`, `coverage_path`, in a
//! directory of root's): its reports would fall back to a stderr that a daemon has pointed at
//! `/dev/null`. So, just before such a change (`setuid`, `seteuid`, `setreuid` or `setresuid` to a user
//! other than root, while the effective user is root), racewatch creates this process's log and
//! coverage files, empty, and gives them to the user the process becomes; it fills them later, as that
//! user; so does a child it forks afterwards, which may create no file of its own there. The directory
//! must still let that user reach them (search permission).
//!
//! This is done only by a thread known to be under no seccomp filter (its own
//! `/proc/thread-self/status`; not where `/proc` cannot be read), so that no filter ever meets the
//! `fchown` (one of the calls a filter racewatch judges may forbid freely:
//! [`crate::seccomp_filter::NEVER`]).

use crate::sys::{confined, raw, tracer};
use crate::{detector, log, options, profile};
use std::sync::atomic::{AtomicU64, Ordering};

/// The process and the user of the last handover (`pid << 32 | uid`): a program that moves between root
/// and one user again and again (`seteuid` brackets) hands its files over once.
static LAST: AtomicU64 = AtomicU64::new(0);

/// Before the program changes its effective user to `euid` (`u32::MAX`: unchanged). Async-signal-safe
/// (POSIX lets a signal handler call `setuid`): no allocation.
pub fn before_user_change(euid: libc::uid_t) {
    if euid == u32::MAX || euid == 0 || detector::is_off() || detector::is_sandboxed() || confined::here() {
        return;
    }
    let opts = options::get();
    if opts.log_path.is_none() && opts.coverage_path.is_none() {
        return;
    }
    let this = u64::from(raw::getpid() as u32) << 32 | u64::from(euid);
    if LAST.load(Ordering::Acquire) == this || raw::geteuid() != 0 {
        return;
    }
    // Unknown (no `/proc`): as under a filter.
    if tracer::read_thread_now().is_none_or(|status| status.seccomp) {
        return;
    }
    LAST.store(this, Ordering::Release);
    log::hand_to(euid);
    if let Some(prefix) = opts.coverage_path.as_deref() {
        profile::hand_to(prefix, euid);
    }
}
