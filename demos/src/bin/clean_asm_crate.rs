//! CLEAN: two threads share a `u64` through `atomic-maybe-uninit` (what crossbeam's `AtomicCell` uses),
//! whose loads and stores are inline-assembly MOVs the compiler pass cannot tag. racewatch knows this
//! crate's assembly is atomic (a built-in rule on its source files), so nothing is reported.
//!
//! Usage: `clean_asm_crate [SECONDS]` (default 5). Prints a line; exits 0.

use atomic_maybe_uninit::AtomicMaybeUninit;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

static WORD: AtomicMaybeUninit<u64> = AtomicMaybeUninit::new(MaybeUninit::new(0));

#[inline(never)]
fn load() -> u64 {
    // SAFETY: WORD is always initialised.
    unsafe { WORD.load(Ordering::Acquire).assume_init() }
}

#[inline(never)]
fn store(value: u64) {
    WORD.store(MaybeUninit::new(value), Ordering::Release);
}

fn main() {
    let stores = racewatch_demos::writer_and_reader(racewatch_demos::run_seconds(5.0), store, load);
    println!("clean_asm_crate: done ({})", stores > 0);
}
