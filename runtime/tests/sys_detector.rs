//! The detector core on the real kernel: `sampler::start` with an index that
//! covers hand-written assembly loops (so every instruction and PC is known),
//! then threads that race, touch adjacent bytes of one word, or only use
//! atomics. Checks the queue's race events and the stats counters.
//!
//! One #[test]: the sampler follows only threads created by the thread that
//! started it, so every scenario runs from that one test thread.

use racewatch::event::RaceEvent;
use racewatch::index::FunctionInfo;
use racewatch::options::Options;
use racewatch::registry::{self, Entries, ModuleId, TableKey};
use racewatch::stats::{self, Counter};
use racewatch::{queue, sampler};
use racewatch_instrument::format::pcsections::{TableKind, FEATURE_ATOMICS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// Loops with frame pointers: f(ptr = rdi, count = rsi[, value = rdx]). The `add rcx` filler
// makes samples land before the access too, so the decoder's look-ahead finds it.
std::arch::global_asm!(
    ".text",
    ".globl rw_store64, rw_store64_end, rw_load64, rw_load64_end",
    ".globl rw_store16_at3, rw_store16_at3_end, rw_store8, rw_store8_end",
    ".globl rw_xadd64, rw_xadd64_insn, rw_xadd64_end",
    ".globl rw_atomic_store64, rw_atomic_store64_insn, rw_atomic_store64_end",
    "rw_store64:",
    "push rbp",
    "mov rbp, rsp",
    "2: add rcx, 1",
    "add rcx, 1",
    "mov qword ptr [rdi], rdx",
    "dec rsi",
    "jnz 2b",
    "pop rbp",
    "ret",
    "rw_store64_end:",
    "rw_load64:",
    "push rbp",
    "mov rbp, rsp",
    "2: add rcx, 1",
    "add rcx, 1",
    "mov rax, qword ptr [rdi]",
    "dec rsi",
    "jnz 2b",
    "pop rbp",
    "ret",
    "rw_load64_end:",
    "rw_store16_at3:",
    "push rbp",
    "mov rbp, rsp",
    "2: add rcx, 1",
    "add rcx, 1",
    "mov word ptr [rdi + 3], dx",
    "dec rsi",
    "jnz 2b",
    "pop rbp",
    "ret",
    "rw_store16_at3_end:",
    "rw_store8:",
    "push rbp",
    "mov rbp, rsp",
    "2: add rcx, 1",
    "add rcx, 1",
    "mov byte ptr [rdi], dl",
    "dec rsi",
    "jnz 2b",
    "pop rbp",
    "ret",
    "rw_store8_end:",
    "rw_xadd64:",
    "push rbp",
    "mov rbp, rsp",
    "mov rax, 1",
    "rw_xadd64_insn:",
    "2: add rcx, 1",
    "add rcx, 1",
    "lock xadd qword ptr [rdi], rax",
    "dec rsi",
    "jnz 2b",
    "pop rbp",
    "ret",
    "rw_xadd64_end:",
    // A release store: a plain MOV that the index lists as atomic.
    "rw_atomic_store64:",
    "push rbp",
    "mov rbp, rsp",
    "2: add rcx, 1",
    "add rcx, 1",
    "rw_atomic_store64_insn:",
    "mov qword ptr [rdi], rdx",
    "dec rsi",
    "jnz 2b",
    "pop rbp",
    "ret",
    "rw_atomic_store64_end:",
);

extern "C" {
    fn rw_store64(p: *mut u64, n: u64, v: u64);
    static rw_store64_end: u8;
    fn rw_load64(p: *mut u64, n: u64);
    static rw_load64_end: u8;
    fn rw_store16_at3(p: *mut u64, n: u64, v: u64);
    static rw_store16_at3_end: u8;
    fn rw_store8(p: *mut u64, n: u64, v: u64);
    static rw_store8_end: u8;
    fn rw_xadd64(p: *mut u64, n: u64, v: u64);
    static rw_xadd64_insn: u8;
    static rw_xadd64_end: u8;
    fn rw_atomic_store64(p: *mut u64, n: u64, v: u64);
    static rw_atomic_store64_insn: u8;
    static rw_atomic_store64_end: u8;
}

#[derive(Clone, Copy)]
enum Loop {
    Store64,
    Load64,
    Store16At3,
    Store8,
    Xadd64,
    AtomicStore64,
}

impl Loop {
    /// (start, end) of the function.
    fn range(self) -> (u64, u64) {
        let (start, end) = match self {
            Loop::Store64 => (rw_store64 as *const () as u64, &raw const rw_store64_end as u64),
            Loop::Load64 => (rw_load64 as *const () as u64, &raw const rw_load64_end as u64),
            Loop::Store16At3 => (rw_store16_at3 as *const () as u64, &raw const rw_store16_at3_end as u64),
            Loop::Store8 => (rw_store8 as *const () as u64, &raw const rw_store8_end as u64),
            Loop::Xadd64 => (rw_xadd64 as *const () as u64, &raw const rw_xadd64_end as u64),
            Loop::AtomicStore64 => (rw_atomic_store64 as *const () as u64, &raw const rw_atomic_store64_end as u64),
        };
        (start, end)
    }

    fn run(self, p: *mut u64, n: u64) {
        // SAFETY: every loop only touches the 8-byte word at `p`, which the caller keeps alive.
        unsafe {
            match self {
                Loop::Store64 => rw_store64(p, n, 1),
                Loop::Load64 => rw_load64(p, n),
                Loop::Store16At3 => rw_store16_at3(p, n, 1),
                Loop::Store8 => rw_store8(p, n, 1),
                Loop::Xadd64 => rw_xadd64(p, n, 1),
                Loop::AtomicStore64 => rw_atomic_store64(p, n, 1),
            }
        }
    }
}

const ALL: [Loop; 6] = [Loop::Store64, Loop::Load64, Loop::Store16At3, Loop::Store8, Loop::Xadd64, Loop::AtomicStore64];

fn register_index() {
    let functions = ALL
        .iter()
        .map(|l| {
            let (start, end) = l.range();
            FunctionInfo { start, size: (end - start) as u32, features: FEATURE_ATOMICS as u32 }
        })
        .collect();
    let module = ModuleId { path: "sys_detector".into(), bias: 0 };
    let mut registry = registry::lock();
    let covered = TableKey { kind: TableKind::Covered, start: 0x10 };
    let atomics = TableKey { kind: TableKind::Atomics, start: 0x20 };
    registry.insert(covered, module.clone(), Entries::Covered(functions));
    registry.insert(
        atomics,
        module,
        Entries::Atomics(vec![&raw const rw_xadd64_insn as u64, &raw const rw_atomic_store64_insn as u64]),
    );
    registry.publish();
}

/// Runs `a` and `b` on one shared word (in two threads) until `until` says stop or `limit` passes.
fn run_pair(a: Loop, b: Loop, limit: Duration, until: impl Fn() -> bool) {
    let word = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = [a, b]
        .into_iter()
        .map(|l| {
            let (word, stop) = (word.clone(), stop.clone());
            std::thread::spawn(move || {
                // Threads the runtime does not know get none of its signals (the interposed
                // pthread_create registers them in a preloaded program).
                racewatch::sys::thread::register_current();
                while !stop.load(Ordering::Relaxed) {
                    l.run(word.as_ptr(), 100_000);
                }
            })
        })
        .collect();
    let start = Instant::now();
    while start.elapsed() < limit && !until() {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
}

fn drain() -> Vec<RaceEvent> {
    std::iter::from_fn(queue::pop).collect()
}

fn in_function(pc: u64, l: Loop) -> bool {
    let (start, end) = l.range();
    (start..end).contains(&pc)
}

fn print_stats(scenario: &str) {
    let counters = [
        ("samples", Counter::Samples),
        ("uncovered", Counter::SamplesUncovered),
        ("no-access", Counter::SamplesNoAccess),
        ("busy", Counter::SamplesBusy),
        ("armed", Counter::WatchesArmed),
        ("traps", Counter::Traps),
        ("races", Counter::Races),
    ];
    let line: Vec<String> = counters.iter().map(|(name, c)| format!("{name}={}", stats::get(*c))).collect();
    eprintln!("after {scenario}: {}", line.join(" "));
}

#[test]
fn detector_core_on_the_real_kernel() {
    register_index();
    let options = Options { sample_period_us: 1000, delay_us: 200, watchpoints: 2, ..Options::DEFAULT };
    sampler::start(&options).expect("sampler::start");
    assert!(sampler::is_enabled(), "covered code is indexed: sampling must be on");

    // 1. A plain store racing plain loads: reported, with both PCs and stacks.
    let races_before = stats::get(Counter::Races);
    run_pair(Loop::Store64, Loop::Load64, Duration::from_secs(20), || stats::get(Counter::Races) > races_before);
    let events = drain();
    print_stats("racy pair");
    let event = events.first().expect("a race between the store loop and the load loop");
    let (store, load) =
        if event.previous.is_write { (&event.previous, &event.current) } else { (&event.current, &event.previous) };
    assert!(in_function(store.pc, Loop::Store64), "store pc {:#x}", store.pc);
    assert!(in_function(load.pc, Loop::Load64), "load pc {:#x}", load.pc);
    assert!(store.is_write && !load.is_write);
    assert_eq!((store.size, load.size), (8, 8));
    assert_eq!(store.addr, load.addr);
    assert_ne!(store.tid, load.tid);
    assert!(!store.is_atomic && !load.is_atomic);
    for side in [store, load] {
        assert_eq!(side.stack.frames()[0], side.pc);
        assert!(side.stack.len >= 2, "the frame-pointer walk reaches the Rust caller");
        assert!(
            !in_function(side.stack.frames()[1], Loop::Store64) && !in_function(side.stack.frames()[1], Loop::Load64)
        );
    }

    // 2. Adjacent bytes of one word (bytes 3..5 vs byte 0): watched, trapped, never a race.
    let traps_before = stats::get(Counter::Traps);
    let races_before = stats::get(Counter::Races);
    // At least 3 s, and on until a trap (a loaded machine may leave the other thread off the CPU for a while).
    let started = std::time::Instant::now();
    let trapped_for_3s = || started.elapsed() >= Duration::from_secs(3) && stats::get(Counter::Traps) > traps_before;
    run_pair(Loop::Store16At3, Loop::Store8, Duration::from_secs(20), trapped_for_3s);
    print_stats("adjacent fields");
    assert!(drain().is_empty());
    assert_eq!(stats::get(Counter::Races), races_before, "adjacent fields are not a race");
    assert!(stats::get(Counter::Traps) > traps_before, "the 8-byte window around bytes 3..5 saw the byte-0 stores");

    // 3. Both atomic (a release store, as a tagged plain MOV, against a LOCK XADD): traps but no race.
    // Samples rarely land on the XADD itself and the look-ahead stops at LOCK, so the store is watched.
    let traps_before = stats::get(Counter::Traps);
    let races_before = stats::get(Counter::Races);
    let started = std::time::Instant::now();
    let trapped_for_3s = || started.elapsed() >= Duration::from_secs(3) && stats::get(Counter::Traps) > traps_before;
    run_pair(Loop::AtomicStore64, Loop::Xadd64, Duration::from_secs(20), trapped_for_3s);
    print_stats("both atomic");
    // The tagged store is atomic on its tag alone: such pairs go to the reporter for review (a tag can be
    // a compiler-only fence's label), flagged atomic on both sides, never counted as races.
    for event in drain() {
        assert!(event.current.is_atomic && event.previous.is_atomic, "{event:?}");
        assert!(!(event.current.locked && event.previous.locked), "a LOCK-only pair needs no review: {event:?}");
    }
    assert_eq!(stats::get(Counter::Races), races_before, "atomic vs atomic is not a race");
    assert!(stats::get(Counter::Traps) > traps_before);

    // 4. Atomic RMW against a plain store: a race (report_atomic_races defaults to on).
    let races_before = stats::get(Counter::Races);
    run_pair(Loop::Xadd64, Loop::Store64, Duration::from_secs(20), || stats::get(Counter::Races) > races_before);
    print_stats("atomic vs plain");
    let events = drain();
    let event = events.first().expect("atomic vs plain is reported");
    assert_ne!(event.current.is_atomic, event.previous.is_atomic);
}
