//! Clean: scoped threads each write their own `chunks_mut` slice of one
//! byte buffer. Chunks are 3 bytes, so a chunk's unaligned 2-byte word can
//! only be watched through an aligned window that also covers neighbouring
//! chunks: the watchpoint sees the neighbours' writes, and only an exact
//! byte-range check keeps this silent.

use std::time::{Duration, Instant};

#[inline(never)]
fn scribble(chunk: &mut [u8], round: u8) {
    let word = u16::from_ne_bytes([chunk[0], chunk[1]]).wrapping_add(u16::from(round));
    chunk[..2].copy_from_slice(&word.to_ne_bytes());
    chunk[2] = chunk[2].wrapping_add(round);
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut buf = vec![0u8; 3 * 4];
    let mut rounds = 0u64;
    while Instant::now() < deadline {
        std::thread::scope(|s| {
            for chunk in buf.chunks_mut(3) {
                s.spawn(move || {
                    let stop = Instant::now() + Duration::from_millis(20);
                    let mut round = 0u8;
                    while Instant::now() < stop {
                        for _ in 0..1000 {
                            round = round.wrapping_add(1);
                            scribble(chunk, round);
                        }
                    }
                });
            }
        });
        rounds += 1;
    }
    println!("clean_chunks: {rounds} rounds");
}
