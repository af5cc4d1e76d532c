//! Clean: two scoped threads refresh their own halves of one buffer with `copy_from_slice` and `fill`
//! (calls to libc's `memcpy` and `memset`). The halves meet inside one 8-byte word (101 + 101 bytes),
//! so a watched word of one half's copy also covers the other half's first bytes: only exact byte
//! ranges on both sides keep this silent.

use std::hint::black_box;
use std::time::{Duration, Instant};

const HALF: usize = 101;

#[inline(never)]
fn refresh(half: &mut [u8], from: &[u8], round: u8) {
    if round & 1 == 1 {
        half.copy_from_slice(&from[..half.len()]);
    } else {
        half.fill(round);
    }
    black_box(half);
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut buf = vec![0u8; 2 * HALF];
    let (left, right) = buf.split_at_mut(black_box(HALF));
    let rounds: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = [left, right]
            .into_iter()
            .map(|half| {
                s.spawn(move || {
                    let mut source = [7u8; 2 * HALF];
                    let (mut rounds, mut round) = (0u64, 0u8);
                    while Instant::now() < deadline {
                        for i in 0..1000 {
                            round = round.wrapping_add(1);
                            source[i % HALF] = round;
                            refresh(half, &source, round);
                        }
                        rounds += 1;
                    }
                    rounds
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker panicked")).sum()
    });
    println!("clean_copy_disjoint: {rounds} rounds, {}", buf.iter().map(|&b| u64::from(b)).sum::<u64>());
}
