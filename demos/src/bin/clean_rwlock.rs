//! Clean: a table behind an `RwLock`, read by two threads and updated by one.

use std::sync::RwLock;
use std::time::{Duration, Instant};

static TABLE: RwLock<[u64; 64]> = RwLock::new([0; 64]);

#[inline(never)]
fn update(i: usize) {
    let mut table = TABLE.write().unwrap();
    table[i % 64] += 1;
}

#[inline(never)]
fn total() -> u64 {
    TABLE.read().unwrap().iter().sum()
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let writer = std::thread::spawn(move || {
        let mut i = 0;
        while Instant::now() < deadline {
            update(i);
            i += 1;
        }
        i
    });
    let readers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut last = 0;
                while Instant::now() < deadline {
                    last = std::hint::black_box(total());
                }
                last
            })
        })
        .collect();
    let updates = writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(total(), updates as u64);
    println!("clean_rwlock: {updates} updates");
}
