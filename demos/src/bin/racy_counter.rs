//! RACY: two threads increment a `static mut` counter with no synchronisation,
//! so increments are lost. The default demo of `cargo run --release`.
//!
//! Usage: `racy_counter [SECONDS]` (default 3). Prints the final count; exits 0.

use std::time::{Duration, Instant};

static mut COUNTER: u64 = 0;

/// The racing access: a plain read-modify-write of `COUNTER` from both threads.
#[inline(never)]
fn bump() {
    // SAFETY: none — this unsynchronised write is the data race the demo shows.
    unsafe { COUNTER += 1 }; // racewatch: racy
}

fn worker(until: Instant) {
    while Instant::now() < until {
        for _ in 0..1000 {
            bump();
        }
    }
}

fn main() {
    let seconds = racewatch_demos::run_seconds(3.0);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..2).map(|_| std::thread::spawn(move || worker(until))).collect();
    for t in threads {
        t.join().expect("worker panicked");
    }
    // SAFETY: every writer has been joined.
    let count = unsafe { COUNTER };
    println!("racy_counter: final count {count}");
}
