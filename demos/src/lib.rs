//! Shared bits of the demo programs.

/// How long a demo runs, in seconds: the first command-line argument, else `default`.
pub fn run_seconds(default: f64) -> f64 {
    std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Runs a writer thread calling `write(1)`, `write(2)`, … and a reader thread calling `read()` in
/// batches of 100 until `seconds` have passed; returns how many values were written.
pub fn writer_and_reader(seconds: f64, write: fn(u64), read: fn() -> u64) -> u64 {
    use std::time::{Duration, Instant};
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while Instant::now() < until {
            for _ in 0..100 {
                n += 1;
                write(n);
            }
        }
        n
    });
    let reader = std::thread::spawn(move || {
        let mut seen = 0u64;
        while Instant::now() < until {
            for _ in 0..100 {
                seen = seen.wrapping_add(read());
            }
        }
        seen
    });
    let written = writer.join().expect("writer panicked");
    std::hint::black_box(reader.join().expect("reader panicked"));
    written
}

/// Where the threads of the cold/hot race pair (`racy_cold_path`, `racy_hot_path`) spend their time: a
/// loop over a thread-private buffer (plain loads and stores, never racing) and, between its rounds, a
/// short path that updates a shared counter without synchronisation. `racy_share` is the fraction of
/// the CPU time the shared path takes (about 0.01 or 0.99).
pub mod pair {
    use std::time::{Duration, Instant};

    /// The shared counter the racy path updates.
    pub static mut SHARED: u64 = 0;

    /// Iterations of the private loop per round (a round takes ~20 µs here).
    const PRIVATE_PER_ROUND: usize = 20_000;

    /// The clean hot part: a thread-private buffer (a power of two long), stirred.
    #[inline(never)]
    pub fn private_round(buf: &mut [u64], iterations: usize) {
        let mask = buf.len() - 1;
        for i in 0..iterations {
            let j = i.wrapping_mul(7) & mask;
            buf[j] = buf[j].wrapping_mul(31).wrapping_add(i as u64);
        }
    }

    /// Runs two threads for `seconds`; each round is `PRIVATE_PER_ROUND` private iterations and as many
    /// racy updates (`racy_round`) as make the racy share `racy_share` of the round.
    pub fn run(seconds: f64, racy_share: f64, racy_round: fn(usize)) {
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let racy = ((PRIVATE_PER_ROUND as f64 * racy_share / (1.0 - racy_share)).round() as usize).max(1);
        let private = if racy_share > 0.5 { (PRIVATE_PER_ROUND as f64 / 99.0) as usize } else { PRIVATE_PER_ROUND };
        let racy = if racy_share > 0.5 { PRIVATE_PER_ROUND } else { racy };
        let threads: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut buf = vec![1u64; 4096];
                    while Instant::now() < until {
                        private_round(&mut buf, private);
                        racy_round(racy);
                    }
                    buf.iter().fold(0u64, |a, &b| a ^ b)
                })
            })
            .collect();
        let mix = threads.into_iter().fold(0, |a, t| a ^ t.join().expect("worker panicked"));
        std::hint::black_box(mix);
    }
}
