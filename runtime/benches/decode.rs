//! Cost of the decoder on the signal path: `access_at` (sample: decode at RIP, look ahead) and
//! `access_ending_at` (watchpoint trap: decode forward from the function start).
//!
//! Run: `cargo bench -p racewatch-runtime --bench decode`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use racewatch::decode::{access_at, access_ending_at, warm_up, CodeSlice, Regs, MAX_LOOKAHEAD};

const BASE: u64 = 0x40_1000;

fn regs(rip: u64) -> Regs {
    let mut regs = Regs { rip, ..Regs::default() };
    for (i, r) in regs.gpr.iter_mut().enumerate() {
        *r = 0x10_0000 * (i as u64 + 1);
    }
    regs
}

fn bench(c: &mut Criterion) {
    warm_up();
    // mov rax, qword ptr [rbx + 8*rcx + 16]
    let load: &[u8] = b"\x48\x8b\x44\xcb\x10";
    // add rcx, 1 ; xor edx, edx ; imul rdx, rdx ; mov byte ptr [rax + rbx], 7
    let after_arith: &[u8] = b"\x48\x83\xc1\x01\x31\xd2\x48\x0f\xaf\xd2\xc6\x04\x18\x07";
    // a 1 KiB function of 4-byte arithmetic ending in the load: the trap path decodes ~256 instructions
    let mut func = Vec::new();
    while func.len() < 1024 {
        func.extend_from_slice(b"\x48\x83\xc1\x01");
    }
    func.extend_from_slice(load);

    let mut g = c.benchmark_group("decode");
    g.bench_function("access_at/load_at_rip", |b| {
        let code = CodeSlice { base: BASE, bytes: load };
        let r = regs(BASE);
        b.iter(|| black_box(access_at(black_box(&code), black_box(&r), MAX_LOOKAHEAD)))
    });
    g.bench_function("access_at/lookahead_3", |b| {
        let code = CodeSlice { base: BASE, bytes: after_arith };
        let r = regs(BASE);
        b.iter(|| black_box(access_at(black_box(&code), black_box(&r), MAX_LOOKAHEAD)))
    });
    g.bench_function("access_ending_at/first_insn", |b| {
        let code = CodeSlice { base: BASE, bytes: load };
        let r = regs(BASE + 5);
        b.iter(|| black_box(access_ending_at(black_box(&code), BASE, 5, BASE + 5, black_box(&r))))
    });
    g.bench_function("access_ending_at/1KiB_function", |b| {
        let code = CodeSlice { base: BASE, bytes: &func };
        let end = BASE + func.len() as u64;
        let r = regs(end);
        b.iter(|| black_box(access_ending_at(black_box(&code), BASE, func.len() as u64, end, black_box(&r))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
