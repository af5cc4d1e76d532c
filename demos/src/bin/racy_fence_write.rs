//! RACY, behind a fence: one thread publishes with `fence(Release)` followed by a *plain* `ptr::write`
//! (the shape of a seqlock writer), the other reads the same word atomically. A plain write racing an
//! atomic read is a data race. On x86-64 the release fence emits no instruction, so the compiler pass's
//! atomic tag for the fence lands on the next instruction — the plain write — and a detector that
//! trusted the tag would call both sides atomic and hide the race. racewatch sees that the tagged
//! instruction is `core::ptr::write`, not an atomic operation, and judges it plain.
//!
//! Usage: `racy_fence_write [SECONDS]` (default 3). Prints a line; exits 0.

use std::sync::atomic::{fence, AtomicU64, Ordering};

static WORD: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn publish(value: u64) {
    fence(Ordering::Release);
    // SAFETY: a valid, aligned pointer; the plain write racing `observe` is the bug shown.
    unsafe { std::ptr::write(WORD.as_ptr(), value) }; // racewatch: racy
}

#[inline(never)]
fn observe() -> u64 {
    WORD.load(Ordering::Relaxed) // racewatch: racy
}

fn main() {
    racewatch_demos::writer_and_reader(racewatch_demos::run_seconds(3.0), publish, observe);
    println!("racy_fence_write: done");
}
