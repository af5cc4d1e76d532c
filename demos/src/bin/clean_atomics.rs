//! Clean: message passing with atomics only. Relaxed, acquire and release
//! loads and stores compile to plain MOVs on x86-64; the PC index marks them
//! atomic, so racewatch must stay silent.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static DATA: AtomicU64 = AtomicU64::new(0);
static READY: AtomicBool = AtomicBool::new(false);
static HITS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn publish(value: u64) -> bool {
    if READY.load(Ordering::Acquire) {
        return false;
    }
    DATA.store(value, Ordering::Relaxed);
    READY.store(true, Ordering::Release);
    true
}

#[inline(never)]
fn consume() -> Option<u64> {
    if !READY.load(Ordering::Acquire) {
        return None;
    }
    let value = DATA.load(Ordering::Relaxed);
    HITS.fetch_add(1, Ordering::Relaxed);
    READY.store(false, Ordering::Release);
    Some(value)
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let producer = std::thread::spawn(move || {
        let mut next = 1u64;
        while Instant::now() < deadline {
            for _ in 0..100 {
                if publish(next) {
                    next += 1;
                }
            }
        }
        next - 1
    });
    let consumer = std::thread::spawn(move || {
        let mut sum = 0u64;
        while Instant::now() < deadline {
            for _ in 0..100 {
                if let Some(v) = consume() {
                    sum = sum.wrapping_add(v);
                }
            }
        }
        sum
    });
    let sent = producer.join().unwrap();
    let _ = consumer.join().unwrap();
    println!("clean_atomics: published {sent}, consumed {}", HITS.load(Ordering::Relaxed).min(sent));
}
