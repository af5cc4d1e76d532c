//! Threads in a seccomp sandbox of their own: a thread that installed a filter (or entered strict mode)
//! for itself, without `SECCOMP_FILTER_FLAG_TSYNC`, and the threads it creates afterwards (they inherit
//! the filter). The rest of the process is not confined, and racewatch goes on sampling it.
//!
//! Any system call racewatch made in such a thread could be one its filter kills, and the kernel gives
//! a thread no way to learn its filter. So racewatch makes none there: its signals that reach the thread
//! (the inherited sampling timer, a watch another thread armed) return at once, untouched; the thread's
//! end releases nothing (a later thread start claims what it held, as for a cancelled thread); a thread
//! it creates starts with `SIGTRAP` held in the kernel until it is listed here.
//!
//! A thread is recognised without a system call by its thread pointer (glibc's `pthread_self`, read
//! from the `fs` segment): a raw `clone` without `CLONE_SETTLS` shares it with its parent, and the
//! parent's filter too. Entries stay after their thread ended (their end makes no call that could tell):
//! glibc's stack cache gives the same thread pointer to the next thread on that stack, which takes the
//! entry over, or drops it when that thread is not confined.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// How many thread pointers the list holds: a process that confines more threads at once than this
/// has the rest make the detector step aside for the whole process (the caller's fallback).
const ENTRIES: usize = 256;
static POINTER: [AtomicUsize; ENTRIES] = [const { AtomicUsize::new(0) }; ENTRIES];
/// The kernel's id of each entry's thread, where it was known when listed (0: not known; a thread
/// created confined cannot ask).
static TID: [AtomicI32; ENTRIES] = [const { AtomicI32::new(0) }; ENTRIES];
/// Entries in use (0: nothing is confined, and [`here`] reads nothing else).
pub(crate) static LISTED: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's pointer (its `struct pthread`). No system call; async-signal-safe.
pub fn thread_pointer() -> usize {
    // SAFETY: pthread_self has no preconditions; glibc reads it from the thread's `fs` segment.
    unsafe { libc::pthread_self() as usize }
}

/// Whether the calling thread is confined. No system call; async-signal-safe.
pub fn here() -> bool {
    if LISTED.load(Ordering::Acquire) == 0 {
        return false;
    }
    let me = thread_pointer();
    POINTER.iter().any(|p| p.load(Ordering::Acquire) == me)
}

/// Lists the calling thread (kernel id `tid`, 0 when not known) as confined. False when the list is
/// full. No system call.
pub fn list_current(tid: i32) -> bool {
    let me = thread_pointer();
    if let Some(k) = POINTER.iter().position(|p| p.load(Ordering::Acquire) == me) {
        TID[k].store(tid, Ordering::Release);
        return true;
    }
    for (k, p) in POINTER.iter().enumerate() {
        if p.compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            TID[k].store(tid, Ordering::Release);
            LISTED.fetch_add(1, Ordering::AcqRel);
            return true;
        }
    }
    false
}

/// Whether thread `tid` listed itself as confined (racewatch must not hand it a signal to run).
pub fn is_listed(tid: i32) -> bool {
    LISTED.load(Ordering::Acquire) != 0 && tid != 0 && TID.iter().any(|t| t.load(Ordering::Acquire) == tid)
}

/// The calling thread is not confined (its sandbox call failed, or it is a new thread whose creator was
/// not confined and whose thread pointer an ended confined thread left listed). No system call.
pub fn unlist_current() {
    if LISTED.load(Ordering::Acquire) == 0 {
        return;
    }
    let me = thread_pointer();
    for (k, p) in POINTER.iter().enumerate() {
        if p.load(Ordering::Acquire) == me {
            TID[k].store(0, Ordering::Release);
            if p.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                LISTED.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_thread_is_confined_and_others_are_not() {
        std::thread::spawn(|| {
            assert!(!here());
            assert!(list_current(7));
            assert!(here() && is_listed(7) && !is_listed(8));
            std::thread::spawn(|| assert!(!here())).join().unwrap();
            unlist_current();
            assert!(!here() && !is_listed(7));
        })
        .join()
        .unwrap();
    }
}
