//! Racy: a writer refreshes a shared buffer with `copy_from_slice` (a call to libc's `memcpy`) while a
//! reader sums it with plain loads, without synchronisation.

use std::cell::UnsafeCell;
use std::hint::black_box;

const LEN: usize = 256;

struct Shared(UnsafeCell<[u8; LEN]>);

// WRONG on purpose: nothing orders the writer's copies and the reader's loads.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared(UnsafeCell::new([0; LEN]));

#[inline(never)]
fn refresh(from: &[u8]) {
    // SAFETY: none — this is the data race the demo exists to show.
    let shared = unsafe { &mut *SHARED.0.get() };
    let len = from.len();
    shared[..len].copy_from_slice(from);  // racewatch: racy
    black_box(&shared);
}

#[inline(never)]
fn checksum() -> u64 {
    // SAFETY: none (see `refresh`).
    let shared = unsafe { &*SHARED.0.get() };
    shared.iter().map(|&b| u64::from(b)).sum()  // racewatch: racy
}

fn main() {
    let seconds = racewatch_demos::run_seconds(10.0);
    let written = racewatch_demos::writer_and_reader(
        seconds,
        |n| {
            let mut bytes = [0u8; LEN];
            bytes[(n as usize) % LEN] = n as u8;
            // A length the compiler does not know: the copy stays a call to memcpy.
            refresh(&bytes[..black_box(LEN)]);
        },
        checksum,
    );
    println!("racy_copy_from_slice: {written} refreshes");
}
