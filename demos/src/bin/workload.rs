//! Overhead workload (clean): a fixed amount of multi-threaded,
//! memory-heavy work — each thread streams over its own 8 MiB buffer,
//! hashes into a shared read-only table and sums under a mutex now and then.
//! Usage: workload [rounds] (default 1500: about 2-3 s of wall time on two
//! idle cores; bench/overhead.sh times it). Prints a checksum.

use std::sync::Mutex;

const THREADS: usize = 2;
const WORDS: usize = 1 << 20; // 8 MiB of u64 per thread

static TOTAL: Mutex<u64> = Mutex::new(0);

#[inline(never)]
fn stream(buf: &mut [u64], table: &[u64], round: u64) -> u64 {
    let mut acc = round;
    for (i, x) in buf.iter_mut().enumerate() {
        let t = table[(*x as usize ^ i) & (table.len() - 1)];
        *x = x.wrapping_mul(6364136223846793005).wrapping_add(t ^ acc);
        acc = acc.rotate_left(5) ^ *x;
    }
    acc
}

fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1500);
    let table: Vec<u64> = (0..4096u64).map(|i| i.wrapping_mul(0x9e3779b97f4a7c15)).collect();
    std::thread::scope(|s| {
        for id in 0..THREADS {
            let table = &table;
            s.spawn(move || {
                let mut buf: Vec<u64> = (0..WORDS as u64).map(|i| i ^ id as u64).collect();
                for round in 0..rounds {
                    let acc = stream(&mut buf, table, round);
                    *TOTAL.lock().unwrap() ^= acc;
                }
            });
        }
    });
    println!("workload: checksum {:x}", *TOTAL.lock().unwrap());
}
