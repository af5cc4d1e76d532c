//! Clean: the racy_copy_from_slice pair with the buffer behind a `Mutex`: every `copy_from_slice`
//! into it and out of it (calls to libc's `memcpy`) happens under the lock.

use std::hint::black_box;
use std::sync::Mutex;

const LEN: usize = 256;

static SHARED: Mutex<[u8; LEN]> = Mutex::new([0; LEN]);

#[inline(never)]
fn refresh(from: &[u8]) {
    let mut shared = SHARED.lock().expect("poisoned");
    let len = from.len();
    shared[..len].copy_from_slice(from);
}

#[inline(never)]
fn snapshot(into: &mut [u8]) -> u64 {
    let shared = SHARED.lock().expect("poisoned");
    let len = into.len();
    into.copy_from_slice(&shared[..len]);
    u64::from(into[0])
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let written = racewatch_demos::writer_and_reader(
        seconds,
        |n| {
            let mut bytes = [0u8; LEN];
            bytes[(n as usize) % LEN] = n as u8;
            refresh(&bytes[..black_box(LEN)]);
        },
        || {
            let mut copy = [0u8; LEN];
            snapshot(&mut copy[..black_box(LEN)])
        },
    );
    println!("clean_copy_locked: {written} refreshes");
}
