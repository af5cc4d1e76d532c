//! RACY, on the parent's stack: `std::thread::scope` lends a local of the parent thread to two scoped
//! threads, which bump it through a raw pointer with no synchronisation. The shared variable lives on
//! the parent's stack, so "accesses on the sampled thread's own stack are not watched" must not hide it:
//! it is the children's accesses, off their own stacks, that are watched.
//!
//! Usage: `racy_scoped [SECONDS]` (default 3). Prints a line; exits 0.

use std::time::{Duration, Instant};

/// A raw pointer the scoped threads share (the race is the point).
#[derive(Clone, Copy)]
struct Shared(*mut u64);
// SAFETY: none — sending the pointer to two threads that write through it is the data race shown.
unsafe impl Send for Shared {}

#[inline(never)]
fn bump(shared: Shared) {
    // SAFETY: the pointer is to the parent's live local (the scope outlives the threads); the
    // unsynchronised read-modify-write is the race.
    unsafe { shared.0.write_volatile(shared.0.read_volatile() + 1) }; // racewatch: racy
}

fn main() {
    let until = Instant::now() + Duration::from_secs_f64(racewatch_demos::run_seconds(3.0));
    let mut local: u64 = 0;
    let shared = Shared(std::ptr::addr_of_mut!(local));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(move || {
                while Instant::now() < until {
                    for _ in 0..1000 {
                        bump(shared);
                    }
                }
            });
        }
    });
    println!("racy_scoped: done ({})", local > 0);
}
