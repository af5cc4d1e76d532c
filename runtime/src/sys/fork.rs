//! What a forked child does with locks its parent's other threads held: those threads do not exist in
//! the child, so a lock one of them held at the fork would never be released there.

use std::sync::atomic::{AtomicBool, Ordering};

/// Takes `lock` back in a forked child whatever state the fork left it in, and puts a fresh value in
/// it: the old one, which its holder may have left half-written, is leaked, never read or dropped.
/// Call only in the child, from the `pthread_atfork` child handler, before any other thread exists.
pub fn reset_lock_in_child<T: Default>(lock: &spin::Mutex<T>) {
    // SAFETY: in a forked child only the forking thread runs: nobody else can hold or take the lock
    // meanwhile, and its holder, if any, is gone for good.
    unsafe { lock.force_unlock() };
    std::mem::forget(std::mem::take(&mut *lock.lock()));
}

/// Held while the runtime walks the loader's list of modules (`dl_iterate_phdr` holds the loader's
/// lock meanwhile), and by a `fork` from its prepare handler until it is done: glibc 2.36 does not take
/// that loader lock around `fork`, so a child forked while the reporter thread was walking would find it
/// held for good and hang in its first walk of its own (a child's first `pthread_create` starts its
/// detector, which walks the modules).
static WALKING: AtomicBool = AtomicBool::new(false);

fn take_walk() {
    while WALKING.swap(true, Ordering::AcqRel) {
        crate::sys::raw::yield_cpu();
    }
}

extern "C" fn release_walk() {
    WALKING.store(false, Ordering::Release);
}

/// Released when dropped (a panic in the walk included).
struct Walk;

impl Drop for Walk {
    fn drop(&mut self) {
        release_walk();
    }
}

/// Runs `walk`, a walk of the loader's modules (`dl_iterate_phdr`, findshlibs), where no `fork` can
/// interrupt it. Not re-entrant.
pub fn walking_modules<R>(walk: impl FnOnce() -> R) -> R {
    take_walk();
    let _walk = Walk;
    walk()
}

/// Registers the `fork` handlers of [`walking_modules`] (once, at start-up).
pub fn guard_module_walks() {
    extern "C" fn prepare() {
        take_walk();
    }
    // SAFETY: registers plain functions that only touch an atomic flag.
    unsafe { libc::pthread_atfork(Some(prepare), Some(release_walk), Some(release_walk)) };
}
