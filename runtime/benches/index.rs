//! Index build and `classify(pc)` on a synthetic module: 100,000 covered
//! functions holding 1,000,000 atomic PCs, encoded with the real codec into
//! `sanmd_covered2` / `sanmd_atomics2` section bytes and indexed through the
//! runtime's own path (decode each table, register it, build the index).
//!
//! Run: `cargo bench -p racewatch-runtime --bench index`
//! Targets: build >= 50 M entries/s (1.1 M entries: functions + atomic PCs),
//! median lookup <= 25 ns,
//! memory <= 5 bytes per atomic PC + 16 bytes per function.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use racewatch::index::Index;
use racewatch::registry::{Entries, ModuleId, Registry, TableKey};
use racewatch::sys::cputime::thread_cpu_ns;
use racewatch_instrument::format::pcsections::{
    encode_atomics, encode_covered, CoveredEntry, TableKind, Version, FEATURE_ATOMICS,
};
use std::time::Duration;

const FUNCTIONS: usize = 100_000;
const ATOMICS_PER_FUNCTION: usize = 10;
const TEXT: u64 = 0x5555_5555_0000;
const COVERED_AT: u64 = 0x5555_6000_0000;
const ATOMICS_AT: u64 = 0x5555_6100_0000;

struct Module {
    functions: Vec<CoveredEntry>,
    covered: Vec<u8>,
    atomics: Vec<u8>,
    /// Every atomic PC, then one plain PC and one gap PC per function.
    probes: Vec<u64>,
}

fn synthetic_module() -> Module {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut functions = Vec::with_capacity(FUNCTIONS);
    let mut pcs = Vec::with_capacity(FUNCTIONS * ATOMICS_PER_FUNCTION);
    let mut probes = Vec::new();
    let mut at = TEXT;
    for _ in 0..FUNCTIONS {
        at += rng.u64(1..48); // alignment padding between functions: uncovered
        probes.push(at - 1);
        let size = rng.u64(96..640);
        functions.push(CoveredEntry { pc: at, size, features: FEATURE_ATOMICS, stack_args_size: None });
        // Ten distinct instruction offsets, in order, as a compiler would emit them.
        let stride = size / ATOMICS_PER_FUNCTION as u64;
        for k in 0..ATOMICS_PER_FUNCTION as u64 {
            pcs.push(at + k * stride + rng.u64(0..stride - 1));
        }
        probes.push(at + stride - 1); // plain (never the last byte of a stride window below it)
        at += size;
    }
    probes.extend_from_slice(&pcs);
    rng.shuffle(&mut probes);
    Module {
        functions: functions.clone(),
        covered: encode_covered(&functions, COVERED_AT, Version::V2).expect("encode covered"),
        atomics: encode_atomics(&pcs, ATOMICS_AT, Version::V2).expect("encode atomics"),
        probes,
    }
}

/// The runtime's path: decode each table at its address, register it, build.
fn index_module(m: &Module) -> Index {
    let module = ModuleId { path: "synthetic".into(), bias: 0 };
    let mut reg = Registry::default();
    let covered = TableKey { kind: TableKind::Covered, start: COVERED_AT };
    let atomics = TableKey { kind: TableKind::Atomics, start: ATOMICS_AT };
    reg.insert(covered, module.clone(), Entries::decode(covered, Version::V2, &m.covered).expect("decode covered"));
    reg.insert(atomics, module, Entries::decode(atomics, Version::V2, &m.atomics).expect("decode atomics"));
    reg.build()
}

fn bench(c: &mut Criterion) {
    let m = synthetic_module();
    let index = index_module(&m);
    assert_eq!((index.functions(), index.atomics()), (FUNCTIONS, FUNCTIONS * ATOMICS_PER_FUNCTION));
    let budget = 5 * index.atomics() + 16 * index.functions();
    println!(
        "index memory: {} bytes for {} functions and {} atomic PCs = {:.2} bytes/atomic + 16 bytes/function \
         equivalent; budget (5 B/atomic + 16 B/function) {} bytes: {}",
        index.memory_bytes(),
        index.functions(),
        index.atomics(),
        (index.memory_bytes() as f64 - 16.0 * index.functions() as f64) / index.atomics() as f64,
        budget,
        if index.memory_bytes() <= budget { "within" } else { "OVER" }
    );

    let entries = (FUNCTIONS + FUNCTIONS * ATOMICS_PER_FUNCTION) as u64;
    let mut group = c.benchmark_group("index");
    group.throughput(Throughput::Elements(entries));
    group.sample_size(20);
    group.bench_function("build 1.1M entries (decode + register + build)", |b| {
        b.iter_custom(|iters| {
            let mut spent = 0;
            for _ in 0..iters {
                let start = thread_cpu_ns();
                let built = index_module(black_box(&m));
                spent += thread_cpu_ns() - start;
                drop(black_box(built));
            }
            Duration::from_nanos(spent)
        })
    });
    group.finish();

    // Query distributions (each a fixed, pre-drawn list of PCs, walked in order):
    // - uniform: PCs drawn uniformly over the covered code (first function's start
    //   to last function's end, gaps included). The harshest: every lookup lands on
    //   a random part of the index, so nearly all of them miss L1 and L2.
    // - profile: a sampled program's PCs. Functions drawn with Zipf weights
    //   (s = 1, the function ranks shuffled over the text), a PC uniform inside the function.
    //   Hot functions take most samples, the tail still spreads over the whole index.
    // - atomics mix: every atomic PC, one plain and one gap PC per function, shuffled
    //   (uniform over the index's entries rather than over the code).
    // - hot: 1024 distinct PCs of the atomics mix (the index lines they touch stay in L1/L2).
    // The lists hold 65,536 PCs (512 KB): enough to touch far more index lines than
    // L2 holds, small enough that streaming the list does not evict the index from L3.
    // Times are the benchmark thread's CPU time (the machine is shared: time spent
    // descheduled is not the index's). Each is measured two ways: "throughput" (independent lookups, which the CPU
    // may overlap) and "latency" (each lookup's address depends on the previous
    // result, as one lookup per sample in a signal handler: no overlap).
    let draws = PROBES;
    let mut rng = fastrand::Rng::with_seed(0xd15);
    let (lo, hi) = (m.functions[0].pc, m.functions.last().map(|f| f.pc + f.size).expect("functions"));
    let uniform: Vec<u64> = (0..draws).map(|_| rng.u64(lo..hi)).collect();
    let profile = zipf_profile(&m.functions, draws, &mut rng);
    let mix = &m.probes[..draws];
    let sets: [(&str, &[u64]); 4] = [
        ("uniform over code", &uniform),
        ("profile, Zipf over functions", &profile),
        ("atomics mix", mix),
        ("hot, 1024 PCs", &m.probes[..1024]),
    ];
    let mut group = c.benchmark_group("index");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for (name, probes) in sets {
        group.bench_function(format!("classify throughput ({name})"), |b| {
            b.iter_custom(|iters| Duration::from_nanos(throughput_ns(&index, probes, iters)))
        });
        group.bench_function(format!("classify latency ({name})"), |b| {
            b.iter_custom(|iters| Duration::from_nanos(latency_ns(&index, probes, iters)))
        });
    }
    group.finish();
    print_medians(&index, &sets);
}

/// PCs per pre-drawn query list, and lookups per batch of [`print_medians`].
const PROBES: usize = 1 << 16;

/// CPU time of `iters` independent lookups, walking `probes` in order.
fn throughput_ns(index: &Index, probes: &[u64], iters: u64) -> u64 {
    let start = thread_cpu_ns();
    let mut i = 0;
    for _ in 0..iters {
        black_box(index.classify(black_box(probes[i])));
        i = if i + 1 == probes.len() { 0 } else { i + 1 };
    }
    thread_cpu_ns() - start
}

/// CPU time of `iters` lookups, each PC's position depending on the previous result.
fn latency_ns(index: &Index, probes: &[u64], iters: u64) -> u64 {
    // `zero` is 0 but opaque: the next index waits for this lookup's result.
    let zero = black_box(0usize);
    let start = thread_cpu_ns();
    let mut i = 0;
    for _ in 0..iters {
        let r = index.classify(probes[i]);
        i += 1 + (r as usize) * zero;
        if i >= probes.len() {
            i = 0;
        }
    }
    thread_cpu_ns() - start
}

/// The figure, printed after criterion's rows: per distribution, the
/// median over 201 batches of 65,536 lookups of the time per lookup, against
/// the 25 ns target (throughput, the usual benchmark of a call; latency shown beside it).
fn print_medians(index: &Index, sets: &[(&str, &[u64])]) {
    const BATCHES: usize = 201;
    const TARGET_NS: f64 = 25.0;
    let median = |f: &dyn Fn() -> u64| {
        let mut ns: Vec<f64> = (0..BATCHES).map(|_| f() as f64 / PROBES as f64).collect();
        ns.sort_by(f64::total_cmp);
        ns[BATCHES / 2]
    };
    println!("classify, median ns per lookup over {BATCHES} batches of {PROBES} (target <= {TARGET_NS} ns):");
    for &(name, probes) in sets {
        let throughput = median(&|| throughput_ns(index, probes, PROBES as u64));
        let latency = median(&|| latency_ns(index, probes, PROBES as u64));
        let verdict = if throughput <= TARGET_NS { "within" } else { "OVER" };
        println!("  {name:30} throughput {throughput:5.1} ns ({verdict})   latency {latency:5.1} ns");
    }
}

/// `n` PCs of a sampled program: function ranks shuffled over the text, rank `r`
/// drawn with weight `1 / r` (Zipf, s = 1), the PC uniform inside the function.
fn zipf_profile(functions: &[CoveredEntry], n: usize, rng: &mut fastrand::Rng) -> Vec<u64> {
    let mut order: Vec<usize> = (0..functions.len()).collect();
    rng.shuffle(&mut order);
    let mut cumulative = Vec::with_capacity(order.len());
    let mut total = 0.0f64;
    for rank in 1..=order.len() {
        total += 1.0 / rank as f64;
        cumulative.push(total);
    }
    (0..n)
        .map(|_| {
            let rank = cumulative.partition_point(|&c| c < rng.f64() * total).min(order.len() - 1);
            let f = &functions[order[rank]];
            f.pc + rng.u64(0..f.size)
        })
        .collect()
}

criterion_group!(benches, bench);
criterion_main!(benches);
