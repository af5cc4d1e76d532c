//! RACY, all the time: the same two threads as `racy_cold_path`, but ~99% of their CPU goes to the
//! racy path (a shared counter bumped with no synchronisation) and ~1% to the clean private loop. The
//! hot half of the benchmark pair: the cold-code bias must not make this race slower to find.
//!
//! Usage: `racy_hot_path [SECONDS]` (default 3). Prints a line; exits 0.

use racewatch_demos::pair;

/// The hot racy path.
#[inline(never)]
fn racy_round(n: usize) {
    let shared = std::ptr::addr_of_mut!(pair::SHARED);
    for _ in 0..n {
        // SAFETY: none — this unsynchronised update is the data race the demo shows. (Volatile, so that
        // the loop stays a loop of loads and stores.)
        unsafe { shared.write_volatile(shared.read_volatile() + 1) }; // racewatch: racy
    }
}

fn main() {
    pair::run(racewatch_demos::run_seconds(3.0), 0.99, racy_round);
    println!("racy_hot_path: done");
}
