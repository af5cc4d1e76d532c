//! CLEAN: the counterpart of `racy_fence_write`: `fence(Release)` followed by a *real* atomic store,
//! against atomic loads. The fence's tag lands on the store, which is atomic anyway: no race.
//!
//! Usage: `clean_fence_atomic [SECONDS]` (default 5). Prints a line; exits 0.

use std::sync::atomic::{fence, AtomicU64, Ordering};

static WORD: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn publish(value: u64) {
    fence(Ordering::Release);
    WORD.store(value, Ordering::Relaxed);
}

#[inline(never)]
fn observe() -> u64 {
    WORD.load(Ordering::Relaxed)
}

fn main() {
    racewatch_demos::writer_and_reader(racewatch_demos::run_seconds(5.0), publish, observe);
    println!("clean_fence_atomic: done");
}
