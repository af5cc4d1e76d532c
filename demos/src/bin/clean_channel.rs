//! Clean: work handed between threads over `std::sync::mpsc` channels.

use std::sync::mpsc;
use std::time::{Duration, Instant};

#[inline(never)]
fn fill(buf: &mut [u64], seed: u64) {
    for (i, x) in buf.iter_mut().enumerate() {
        *x = seed.wrapping_mul(31).wrapping_add(i as u64);
    }
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let (to_worker, work) = mpsc::channel::<Vec<u64>>();
    let (to_main, done) = mpsc::channel::<Vec<u64>>();
    let worker = std::thread::spawn(move || {
        let mut seed = 0;
        for mut buf in work {
            seed += 1;
            fill(&mut buf, seed);
            if to_main.send(buf).is_err() {
                break;
            }
        }
    });
    let mut rounds = 0u64;
    let mut checksum = 0u64;
    let mut buf = vec![0u64; 256];
    while Instant::now() < deadline {
        to_worker.send(buf).unwrap();
        buf = done.recv().unwrap();
        checksum = checksum.wrapping_add(buf.iter().sum::<u64>());
        rounds += 1;
    }
    drop(to_worker);
    worker.join().unwrap();
    println!("clean_channel: {rounds} rounds, checksum {checksum:x}");
}
