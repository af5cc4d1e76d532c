//! Racy: a thread resets a shared buffer with `fill` (a call to libc's `memset`) while another reads
//! its words with plain loads, without synchronisation.

use std::cell::UnsafeCell;
use std::hint::black_box;

const LEN: usize = 512;

struct Shared(UnsafeCell<[u8; LEN]>);

// WRONG on purpose: nothing orders the resets and the reads.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared(UnsafeCell::new([0; LEN]));

#[inline(never)]
fn reset(value: u8, len: usize) {
    // SAFETY: none — this is the data race the demo exists to show.
    let shared = unsafe { &mut *SHARED.0.get() };
    shared[..len].fill(value);  // racewatch: racy
    black_box(&shared);
}

#[inline(never)]
fn probe(at: usize) -> u64 {
    // SAFETY: none (see `reset`).
    let shared = unsafe { &*SHARED.0.get() };
    let word = unsafe { std::ptr::read_volatile(shared.as_ptr().add(at & (LEN - 8) & !7).cast::<u64>()) };  // racewatch: racy
    word
}

fn main() {
    let seconds = racewatch_demos::run_seconds(10.0);
    let written = racewatch_demos::writer_and_reader(
        seconds,
        |n| reset(n as u8, black_box(LEN)),
        || {
            use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
            static AT: AtomicUsize = AtomicUsize::new(0);
            probe(AT.fetch_add(8, Relaxed))
        },
    );
    println!("racy_fill: {written} resets");
}
