//! Racy: a plain write racing an atomic read-modify-write on the same word.
//! One thread counts with `fetch_add`; another resets the counter through a
//! raw pointer with a plain store. Mixing is a race (as in TSan).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn count() {
    COUNTER.fetch_add(1, Ordering::Relaxed);  // racewatch: racy
}

#[inline(never)]
fn reset() {
    // SAFETY: none — a plain store racing `count`'s atomic RMW, on purpose.
    unsafe { std::ptr::write_volatile(COUNTER.as_ptr(), 0) };  // racewatch: racy
}

fn main() {
    let seconds = racewatch_demos::run_seconds(10.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let counter = std::thread::spawn(move || {
        while Instant::now() < deadline {
            for _ in 0..1000 {
                count();
            }
        }
    });
    let resetter = std::thread::spawn(move || {
        let mut resets = 0u64;
        while Instant::now() < deadline {
            for _ in 0..1000 {
                reset();
                std::hint::spin_loop();
            }
            resets += 1000;
        }
        resets
    });
    counter.join().unwrap();
    println!("racy_atomic_mix: {} resets", resetter.join().unwrap());
}
