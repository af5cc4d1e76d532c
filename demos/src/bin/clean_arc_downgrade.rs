//! Clean: threads race `Arc::downgrade`, `Arc::clone` and `Weak::upgrade` on one `Arc` (all
//! synchronised by the reference counts' atomics). In release builds LLVM merges the two relaxed loads
//! of `Arc::downgrade`'s compare-exchange loop into one `mov` at line 0 that carries no `sanmd_atomics2`
//! entry: racewatch must still take it for the atomic it is (its debug info places it in
//! `core::sync::atomic`), not report it against the other threads' `lock cmpxchg`.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

#[inline(never)]
fn downgrade(shared: &Arc<u64>) -> Weak<u64> {
    Arc::downgrade(shared)
}

#[inline(never)]
fn upgrade(weak: &Weak<u64>) -> Option<Arc<u64>> {
    weak.upgrade()
}

#[inline(never)]
fn clone(shared: &Arc<u64>) -> Arc<u64> {
    Arc::clone(shared)
}

fn worker(shared: Arc<u64>, until: Instant) -> u64 {
    let mut total = 0u64;
    while Instant::now() < until {
        for _ in 0..1000 {
            let weak = downgrade(&shared);
            let strong = clone(&shared);
            if let Some(again) = upgrade(&weak) {
                total = total.wrapping_add(*again);
            }
            total = total.wrapping_add(*strong);
        }
    }
    total
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let shared = Arc::new(1u64);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || worker(shared, until))
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().expect("worker panicked")).sum();
    println!(
        "clean_arc_downgrade: {} upgrades, strong {} weak {}",
        total,
        Arc::strong_count(&shared),
        Arc::weak_count(&shared)
    );
}
