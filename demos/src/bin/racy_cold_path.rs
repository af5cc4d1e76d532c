//! RACY, rarely: two threads spend ~99% of their CPU in a clean loop over private buffers and ~1% in
//! a short path that bumps a shared counter with no synchronisation. The cold half of a benchmark pair
//! (`racy_hot_path` is the other): a sampling detector that follows CPU time puts nearly every watch
//! on the clean loop; racewatch's cold-code bias turns them to the rare path.
//!
//! Usage: `racy_cold_path [SECONDS]` (default 3). Prints a line; exits 0.

use racewatch_demos::pair;

/// The rarely taken racy path.
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
    pair::run(racewatch_demos::run_seconds(3.0), 0.01, racy_round);
    println!("racy_cold_path: done");
}
