//! Index build and `classify(pc)` on a synthetic module: 100,000 covered
//! functions holding 1,000,000 atomic PCs, encoded with the real codec into
//! `sanmd_covered2` / `sanmd_atomics2` section bytes and indexed through the
//! runtime's own path (decode each table, register it, build the index).
//!
//! Run: `cargo bench -p racewatch-runtime --bench index`
//! Targets: build >= 50 M entries/s (1.1 M entries: functions + atomic PCs),
//! median lookup <= 25 ns,
//! memory <= 5 bytes per atomic PC + 16 bytes per function.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use racewatch::index::Index;
use racewatch::registry::{Entries, ModuleId, Registry, TableKey};
use racewatch_instrument::format::pcsections::{
    encode_atomics, encode_covered, CoveredEntry, TableKind, Version, FEATURE_ATOMICS,
};

const FUNCTIONS: usize = 100_000;
const ATOMICS_PER_FUNCTION: usize = 10;
const TEXT: u64 = 0x5555_5555_0000;
const COVERED_AT: u64 = 0x5555_6000_0000;
const ATOMICS_AT: u64 = 0x5555_6100_0000;

struct Module {
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
        b.iter_batched(|| (), |()| index_module(black_box(&m)), BatchSize::PerIteration)
    });
    group.finish();

    // A sampled program's PCs concentrate in its hot code. Hot: 1024 distinct
    // random probes (the index lines they touch stay in L1/L2); warm: 16384
    // (about 1 MiB of index lines, this machine's L2); cold: uniform over all
    // 1.2 M probes, nearly every lookup a cache miss (memory-latency bound).
    let mut group = c.benchmark_group("index");
    group.throughput(Throughput::Elements(1));
    let sets = [("hot, 1024 PCs", 1024), ("warm, 16384 PCs", 16384), ("cold, 1.2M PCs", m.probes.len())];
    for (name, n) in sets {
        let probes = &m.probes[..n];
        let mut i = 0usize;
        group.bench_function(format!("classify ({name})"), |b| {
            b.iter(|| {
                i += 1;
                if i == probes.len() {
                    i = 0;
                }
                index.classify(black_box(probes[i]))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
