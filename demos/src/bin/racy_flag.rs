//! Racy: publishing data through a plain (non-atomic) flag. The reader spins
//! on the flag with volatile reads; volatile is not atomic, so both the flag
//! and the data race.

use std::time::{Duration, Instant};

static mut DATA: u64 = 0;
static mut READY: u64 = 0;

#[inline(never)]
fn publish(value: u64) {
    // SAFETY: none — plain accesses racing with `consume`, on purpose.
    unsafe {
        std::ptr::write_volatile(&raw mut DATA, value);  // racewatch: racy
        std::ptr::write_volatile(&raw mut READY, 1);  // racewatch: racy
    }
}

#[inline(never)]
fn consume() -> Option<u64> {
    // SAFETY: none — see `publish`.
    unsafe {
        if std::ptr::read_volatile(&raw const READY) == 0 {  // racewatch: racy
            return None;
        }
        let value = std::ptr::read_volatile(&raw const DATA);  // racewatch: racy
        std::ptr::write_volatile(&raw mut READY, 0);  // racewatch: racy
        Some(value)
    }
}

fn main() {
    let seconds = racewatch_demos::run_seconds(10.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let producer = std::thread::spawn(move || {
        let mut sent = 0u64;
        while Instant::now() < deadline {
            for _ in 0..100 {
                sent += 1;
                publish(sent);
            }
        }
        sent
    });
    let consumer = std::thread::spawn(move || {
        let mut seen = 0u64;
        while Instant::now() < deadline {
            for _ in 0..100 {
                if consume().is_some() {
                    seen += 1;
                }
            }
        }
        seen
    });
    let sent = producer.join().unwrap();
    let seen = consumer.join().unwrap();
    println!("racy_flag: published {sent}, consumed {}", seen.min(sent));
}
