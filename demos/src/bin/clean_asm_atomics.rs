//! CLEAN: a word shared through inline-assembly atomics (aligned 8-byte MOVs are atomic on x86-64), the
//! way `atomic-maybe-uninit` and hand-written lock-free code do it. The compiler pass cannot see inline
//! assembly; `racewatch_instrument::atomic!` tags each instruction in `sanmd_atomics2`, so the two
//! threads are not racing.
//!
//! Usage: `clean_asm_atomics [SECONDS]` (default 5). Prints a line; exits 0.


struct Word(std::cell::UnsafeCell<u64>);
// SAFETY: every access goes through the atomic MOVs below.
unsafe impl Sync for Word {}

static WORD: Word = Word(std::cell::UnsafeCell::new(0));

#[inline(never)]
fn asm_load() -> u64 {
    let value: u64;
    // SAFETY: an aligned 8-byte load from a live static: atomic on x86-64.
    unsafe { racewatch_instrument::atomic!("mov {0}, qword ptr [{1}]", out(reg) value, in(reg) WORD.0.get()) };
    value
}

#[inline(never)]
fn asm_store(value: u64) {
    // SAFETY: an aligned 8-byte store to a live static: atomic on x86-64.
    unsafe { racewatch_instrument::atomic!("mov qword ptr [{0}], {1}", in(reg) WORD.0.get(), in(reg) value) };
}

fn main() {
    let stores = racewatch_demos::writer_and_reader(racewatch_demos::run_seconds(5.0), asm_store, asm_load);
    println!("clean_asm_atomics: done ({})", stores > 0);
}
