//! RACY, inside a seqlock: crossbeam's `AtomicCell<[u64; 4]>` has no atomic instruction wide enough, so
//! it guards the value with a sequence lock: the writer stores the four words with plain writes (after a
//! `fence(Release)` whose atomic tag lands on the first of them), and readers copy them optimistically
//! and retry when the sequence moved. The copy races with the writes by design: a data race in the
//! memory model, which racewatch reports with the write labelled plain.
//!
//! Usage: `racy_atomic_cell [SECONDS]` (default 3). Prints a line; exits 0.

use crossbeam_utils::atomic::AtomicCell;

static CELL: AtomicCell<[u64; 4]> = AtomicCell::new([0; 4]);

#[inline(never)]
fn write(value: u64) {
    CELL.store([value; 4]); // racewatch: racy
}

#[inline(never)]
fn read() -> u64 {
    CELL.load()[3] // racewatch: racy
}

fn main() {
    racewatch_demos::writer_and_reader(racewatch_demos::run_seconds(3.0), write, read);
    println!("racy_atomic_cell: done");
}
