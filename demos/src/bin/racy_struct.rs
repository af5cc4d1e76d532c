//! Racy: a struct in an `UnsafeCell` shared through a hand-written `Sync`.
//! Two threads update its fields without any synchronisation.

use std::cell::UnsafeCell;
use std::time::{Duration, Instant};

struct Stats {
    hits: u64,
    last: u64,
}

struct Shared(UnsafeCell<Stats>);

// WRONG on purpose: nothing orders the threads' accesses to the cell.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared(UnsafeCell::new(Stats { hits: 0, last: 0 }));

#[inline(never)]
fn record(value: u64) {
    // SAFETY: none — this is the data race the demo exists to show.
    let stats = unsafe { &mut *SHARED.0.get() };
    stats.hits += 1;  // racewatch: racy
    stats.last = value;  // racewatch: racy
}

fn main() {
    let seconds = racewatch_demos::run_seconds(10.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let workers: Vec<_> = (0..2)
        .map(|id| {
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    for i in 0..1000 {
                        record(std::hint::black_box(id * 1_000_000 + i));
                    }
                    n += 1000;
                }
                n
            })
        })
        .collect();
    let calls: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    println!("racy_struct: {calls} calls");
}
