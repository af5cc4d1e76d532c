//! CLEAN: the counterpart of `racy_fence_write`: `fence(Release)` followed by a *real* atomic store,
//! against atomic loads. The fence's tag lands on the store, which is atomic anyway: no race.
//!
//! Usage: `clean_fence_atomic [SECONDS]` (default 5). Prints a line; exits 0.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    let until = Instant::now() + Duration::from_secs_f64(racewatch_demos::run_seconds(5.0));
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while Instant::now() < until {
            for _ in 0..100 {
                n += 1;
                publish(n);
            }
        }
    });
    let reader = std::thread::spawn(move || {
        let mut seen = 0u64;
        while Instant::now() < until {
            for _ in 0..100 {
                seen = seen.wrapping_add(observe());
            }
        }
        seen
    });
    writer.join().expect("writer");
    reader.join().expect("reader");
    println!("clean_fence_atomic: done");
}
