//! CLEAN: two threads increment a counter behind a `Mutex`; no race.
//!
//! Usage: `clean_mutex [SECONDS]` (default 3). Prints the final count; exits 0.

use std::sync::Mutex;
use std::time::{Duration, Instant};

static COUNTER: Mutex<u64> = Mutex::new(0);

#[inline(never)]
fn bump() {
    *COUNTER.lock().expect("poisoned") += 1;
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
    let count = *COUNTER.lock().expect("poisoned");
    println!("clean_mutex: final count {count}");
}
