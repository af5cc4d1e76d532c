//! What a forked child does with locks its parent's other threads held: those threads do not exist in
//! the child, so a lock one of them held at the fork would never be released there.

/// Takes `lock` back in a forked child whatever state the fork left it in, and puts a fresh value in
/// it: the old one, which its holder may have left half-written, is leaked, never read or dropped.
/// Call only in the child, from the `pthread_atfork` child handler, before any other thread exists.
pub fn reset_lock_in_child<T: Default>(lock: &spin::Mutex<T>) {
    // SAFETY: in a forked child only the forking thread runs: nobody else can hold or take the lock
    // meanwhile, and its holder, if any, is gone for good.
    unsafe { lock.force_unlock() };
    std::mem::forget(std::mem::take(&mut *lock.lock()));
}
