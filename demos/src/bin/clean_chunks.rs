//! Clean: scoped threads each write their own `chunks_mut` slice of one
//! byte buffer, for the whole run. Chunks are 3 bytes, so a chunk's unaligned
//! 2-byte word can only be watched through an aligned window that also covers
//! neighbouring chunks: the watchpoint sees the neighbours' writes, and only
//! an exact byte-range check keeps this silent.

use std::time::{Duration, Instant};

/// Bumps one chunk. It takes a `[u8; 3]` so the bounds checks happen once,
/// in the caller: the body is straight-line code the sampler can see through.
#[inline(never)]
fn scribble(chunk: &mut [u8; 3], round: u8) {
    chunk[2] = chunk[2].wrapping_add(round);
    let word = u16::from_ne_bytes([chunk[0], chunk[1]]).wrapping_add(u16::from(round));
    chunk[..2].copy_from_slice(&word.to_ne_bytes());
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut buf = vec![0u8; 3 * 4];
    let rounds: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = buf
            .chunks_mut(3)
            .map(|chunk| {
                let chunk: &mut [u8; 3] = chunk.try_into().expect("3-byte chunks");
                s.spawn(move || {
                    let mut rounds = 0u64;
                    let mut round = 0u8;
                    while Instant::now() < deadline {
                        for _ in 0..1000 {
                            round = round.wrapping_add(1);
                            scribble(chunk, round);
                        }
                        rounds += 1;
                    }
                    rounds
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker panicked")).sum()
    });
    println!("clean_chunks: {rounds} rounds");
}
