//! The signal-path decoder on hand-assembled instructions (encodings checked with
//! `llvm-mc-19 --x86-asm-syntax=intel --show-encoding`; the assembly is in each comment).

use racewatch::decode::{access_at, access_ending_at, shared_access_from, warm_up, CodeSlice, MemAccess, Regs};

const BASE: u64 = 0x40_1000;
const RAX: usize = 0;
const RCX: usize = 1;
const RDX: usize = 2;
const RBX: usize = 3;
const RSP: usize = 4;
const RSI: usize = 6;
const RDI: usize = 7;
const R12: usize = 12;
const R13: usize = 13;

/// Distinct, recognisable register values: RAX = 0x10_0000, RCX = 0x20_0000, … R15 = 0x100_0000.
fn regs() -> Regs {
    let mut regs = Regs { rip: BASE, ..Regs::default() };
    for (i, r) in regs.gpr.iter_mut().enumerate() {
        *r = 0x10_0000 * (i as u64 + 1);
    }
    regs.gpr[RCX] = 3; // a small index register
    regs.gpr[RSI] = 5;
    regs
}

fn at_with(code: &[u8], regs: &Regs, lookahead: usize) -> Option<MemAccess> {
    warm_up();
    access_at(&CodeSlice { base: BASE, bytes: code }, regs, lookahead)
}

fn at(code: &[u8]) -> Option<MemAccess> {
    at_with(code, &regs(), 8)
}

fn access(pc: u64, len: u8, addr: u64, size: u8, is_read: bool, is_write: bool, locked: bool) -> MemAccess {
    MemAccess { pc, len, addr, addr_known: true, size, is_read, is_write, locked, path: Default::default() }
}

#[test]
fn load_with_base_index_scale_displacement() {
    let r = regs();
    // mov rax, qword ptr [rbx + 8*rcx + 16]
    assert_eq!(at(b"\x48\x8b\x44\xcb\x10"), Some(access(BASE, 5, r.gpr[RBX] + 8 * 3 + 16, 8, true, false, false)));
    // mov qword ptr [r12 + 2*r13 + 0x12345678], r14
    assert_eq!(
        at(b"\x4f\x89\xb4\x6c\x78\x56\x34\x12"),
        Some(access(BASE, 8, r.gpr[R12] + 2 * r.gpr[R13] + 0x1234_5678, 8, false, true, false))
    );
}

#[test]
fn store_with_negative_displacement() {
    let r = regs();
    // mov dword ptr [rdi + 4*rsi - 32], edx
    assert_eq!(at(b"\x89\x54\xb7\xe0"), Some(access(BASE, 4, r.gpr[RDI] + 4 * 5 - 32, 4, false, true, false)));
}

#[test]
fn rip_relative_uses_the_next_instruction_address() {
    // mov rax, qword ptr [rip + 256]
    assert_eq!(at(b"\x48\x8b\x05\x00\x01\x00\x00"), Some(access(BASE, 7, BASE + 7 + 256, 8, true, false, false)));
}

#[test]
fn operand_sizes() {
    let rax = regs().gpr[RAX];
    let rdi = regs().gpr[RDI];
    let rdx = regs().gpr[RDX];
    // mov byte ptr [rax], 1
    assert_eq!(at(b"\xc6\x00\x01"), Some(access(BASE, 3, rax, 1, false, true, false)));
    // mov word ptr [rax + 2], cx
    assert_eq!(at(b"\x66\x89\x48\x02"), Some(access(BASE, 4, rax + 2, 2, false, true, false)));
    // movups xmm0, xmmword ptr [rdx]
    assert_eq!(at(b"\x0f\x10\x02"), Some(access(BASE, 3, rdx, 16, true, false, false)));
    // vmovdqu ymm0, ymmword ptr [rdi]
    assert_eq!(at(b"\xc5\xfe\x6f\x07"), Some(access(BASE, 4, rdi, 32, true, false, false)));
    // fld tbyte ptr [rdi]
    assert_eq!(at(b"\xdb\x2f"), Some(access(BASE, 2, rdi, 10, true, false, false)));
}

#[test]
fn zero_and_sign_extending_loads_report_the_memory_size() {
    let rdi = regs().gpr[RDI];
    // movzx eax, byte ptr [rdi + 3]
    assert_eq!(at(b"\x0f\xb6\x47\x03"), Some(access(BASE, 4, rdi + 3, 1, true, false, false)));
    // movsx rax, word ptr [rdi + 4]
    assert_eq!(at(b"\x48\x0f\xbf\x47\x04"), Some(access(BASE, 5, rdi + 4, 2, true, false, false)));
}

#[test]
fn atomics_are_locked_read_writes() {
    let rdi = regs().gpr[RDI];
    // lock xadd qword ptr [rdi], rax
    assert_eq!(at(b"\xf0\x48\x0f\xc1\x07"), Some(access(BASE, 5, rdi, 8, true, true, true)));
    // xchg qword ptr [rdi], rax   (implicitly locked)
    assert_eq!(at(b"\x48\x87\x07"), Some(access(BASE, 3, rdi, 8, true, true, true)));
    // lock cmpxchg qword ptr [rdi + 8], rcx
    assert_eq!(at(b"\xf0\x48\x0f\xb1\x4f\x08"), Some(access(BASE, 6, rdi + 8, 8, true, true, true)));
    // cmpxchg dword ptr [rdi], ecx   (no LOCK: not atomic)
    assert_eq!(at(b"\x0f\xb1\x0f"), Some(access(BASE, 3, rdi, 4, true, true, false)));
}

#[test]
fn read_modify_write() {
    // add qword ptr [rsi + 8], rdx
    assert_eq!(at(b"\x48\x01\x56\x08"), Some(access(BASE, 4, 5 + 8, 8, true, true, false)));
}

#[test]
fn address_size_override_truncates_to_32_bits() {
    let mut r = regs();
    r.gpr[RCX] = 0x1_0000_0010;
    // mov eax, dword ptr [ecx + 4]
    assert_eq!(at_with(b"\x67\x8b\x41\x04", &r, 0), Some(access(BASE, 4, 0x14, 4, true, false, false)));
}

#[test]
fn excluded_accesses_are_skipped() {
    for (what, code) in [
        ("push qword ptr [rax]", &b"\xff\x30"[..]),
        ("mov rax, qword ptr fs:[40]", b"\x64\x48\x8b\x04\x25\x28\x00\x00\x00"),
        ("mov eax, dword ptr fs:[rax]", b"\x64\x8b\x00"),
        ("mov rax, qword ptr gs:[rbx]", b"\x65\x48\x8b\x03"),
        ("rep movsb", b"\xf3\xa4"),
        ("vpgatherdd xmm0, xmmword ptr [rax + 4*xmm1], xmm2", b"\xc4\xe2\x69\x90\x04\x88"),
        ("push rbx (end of code)", b"\x53"),
        ("pop rbx (end of code)", b"\x5b"),
        ("lea rax, [rdi + 8] (end of code)", b"\x48\x8d\x47\x08"),
        ("nop dword ptr [rax + rax] (end of code)", b"\x0f\x1f\x04\x00"),
        ("prefetcht0 byte ptr [rdi] (end of code)", b"\x0f\x18\x0f"),
        ("ret", b"\xc3"),
        ("syscall", b"\x0f\x05"),
        ("undecodable", b"\x0f\x0b\xff"),
        ("empty code", b""),
    ] {
        assert_eq!(at(code), None, "{what}");
    }
}

#[test]
fn plain_string_instruction_reports_its_destination() {
    // movsb byte ptr es:[rdi], byte ptr [rsi]  (no REP: one byte copied)
    assert_eq!(at(b"\xa4"), Some(access(BASE, 1, regs().gpr[RDI], 1, false, true, false)));
}

#[test]
fn explicit_stack_slot_is_an_ordinary_access() {
    // mov qword ptr [rsp + 8], rax  (the sampler filters its own stack; the decoder reports it)
    assert_eq!(at(b"\x48\x89\x44\x24\x08"), Some(access(BASE, 5, regs().gpr[RSP] + 8, 8, false, true, false)));
}

// add rcx, 1 (4 bytes) ; xor edx, edx (2 bytes)
const ARITH: &[u8] = b"\x48\x83\xc1\x01\x31\xd2";

#[test]
fn lookahead_passes_arithmetic_on_other_registers() {
    let r = regs();
    // add rcx, 1 ; xor edx, edx ; mov byte ptr [rax + rbx], 7
    let code = [ARITH, b"\xc6\x04\x18\x07"].concat();
    assert_eq!(at(&code), Some(access(BASE + 6, 4, r.gpr[RAX] + r.gpr[RBX], 1, false, true, false)));
    // lea rax, [rdi + 8] ; mov rcx, qword ptr [rbx + 8*rcx + 16]... uses rcx, untouched by lea
    let code = b"\x48\x8d\x47\x08\x48\x8b\x44\xcb\x10";
    assert_eq!(at(code), Some(access(BASE + 4, 5, r.gpr[RBX] + 8 * 3 + 16, 8, true, false, false)));
}

#[test]
fn lookahead_computes_addresses_through_register_writes() {
    let r = regs();
    // xor edx, edx ; mov rcx, rdx ; mov rcx, qword ptr [rcx + 8]   (rcx is 0 by then)
    assert_eq!(at(b"\x31\xd2\x48\x89\xd1\x48\x8b\x49\x08"), Some(access(BASE + 5, 4, 8, 8, true, false, false)));
    // add rcx, 1 ; mov eax, dword ptr [ecx + 4]   (the 32-bit alias of the written register: 3 + 1 + 4)
    assert_eq!(at(b"\x48\x83\xc1\x01\x67\x8b\x41\x04"), Some(access(BASE + 4, 4, 8, 4, true, false, false)));
    // push rbx ; mov qword ptr [rsp + 8], rax     (push moves rsp by 8: the store lands at the old rsp)
    assert_eq!(at(b"\x53\x48\x89\x44\x24\x08"), Some(access(BASE + 1, 5, r.gpr[RSP], 8, false, true, false)));
    // imul rdx, rdx ; mov dword ptr [rdi + 4*rsi - 32], edx   (the stored value changes, the address not)
    assert_eq!(
        at(b"\x48\x0f\xaf\xd2\x89\x54\xb7\xe0"),
        Some(access(BASE + 4, 4, r.gpr[RDI] + 4 * 5 - 32, 4, false, true, false))
    );
}

#[test]
fn lookahead_stops_at_accesses_it_does_not_emulate() {
    // xor edx, edx ; rep movsb ; mov qword ptr [rax + 8], rax
    assert_eq!(at(b"\x31\xd2\xf3\xa4\x48\x89\x40\x08"), None);
    // xor edx, edx ; mov rax, qword ptr fs:[40] ; mov qword ptr [rax + 8], rax   (rax would come from TLS)
    assert_eq!(at(b"\x31\xd2\x64\x48\x8b\x04\x25\x28\x00\x00\x00\x48\x89\x40\x08"), None);
}

#[test]
fn lookahead_stops_at_control_flow_and_finds_atomics() {
    // mov qword ptr [rax + 8], rax
    let store: &[u8] = b"\x48\x89\x40\x08";
    // Straight-line only: no branch target is covered code.
    for (what, stopper) in [
        ("jmp +5", &b"\xeb\x05"[..]),
        ("call +0", b"\xe8\x00\x00\x00\x00"),
        ("ret", b"\xc3"),
        ("syscall", b"\x0f\x05"),
        ("int3", b"\xcc"),
        ("jne +0", b"\x75\x00"),
    ] {
        let code = [ARITH, stopper, store].concat();
        assert_eq!(at(&code), None, "{what}");
    }
    let r = regs();
    // add rcx, 1 ; xor edx, edx ; lock xadd qword ptr [rdi], rax : an atomic access, flagged as such
    assert_eq!(
        at(&[ARITH, b"\xf0\x48\x0f\xc1\x07"].concat()),
        Some(access(BASE + 6, 5, r.gpr[RDI], 8, true, true, true))
    );
    // add rcx, 1 ; xor edx, edx ; xchg qword ptr [rdi], rax (implicitly locked)
    assert_eq!(at(&[ARITH, b"\x48\x87\x07"].concat()), Some(access(BASE + 6, 3, r.gpr[RDI], 8, true, true, true)));
}

#[test]
fn lookahead_is_bounded() {
    // 3 x add rcx, 1 ; mov qword ptr [rax + 8], rax
    let code = [&b"\x48\x83\xc1\x01"[..], b"\x48\x83\xc1\x01", b"\x48\x83\xc1\x01", b"\x48\x89\x40\x08"].concat();
    let r = regs();
    assert_eq!(at_with(&code, &r, 2), None);
    assert_eq!(at_with(&code, &r, 3), Some(access(BASE + 12, 4, r.gpr[RAX] + 8, 8, false, true, false)));
    assert_eq!(at_with(&code, &r, 0), None);
}

// ---------------------------------------------------------------------------------------------------------
// access_ending_at: the watchpoint trap reports RIP after the access.

const FUNC: u64 = 0x7000_0000;

fn ending_at(code: &[u8], rip: u64, regs: &Regs) -> Option<MemAccess> {
    warm_up();
    access_ending_at(&CodeSlice { base: FUNC, bytes: code }, FUNC, code.len() as u64, rip, regs)
}

/// push rbp ; mov rbp, rsp ; xor edx, edx ; add rcx, 1 ; mov dword ptr [rdi + 4*rsi - 32], edx ;
/// mov rax, qword ptr [rax] ; mov qword ptr [rax + 8], rax ; lock cmpxchg qword ptr [rdi + 8], rcx ;
/// add rax, qword ptr [rax + 8] ; pop rbp ; ret
const SMALL_FUNC: &[&[u8]] = &[
    b"\x55",
    b"\x48\x89\xe5",
    b"\x31\xd2",
    b"\x48\x83\xc1\x01",
    b"\x89\x54\xb7\xe0",
    b"\x48\x8b\x00",
    b"\x48\x89\x40\x08",
    b"\xf0\x48\x0f\xb1\x4f\x08",
    b"\x48\x03\x40\x08",
    b"\x5d",
    b"\xc3",
];

fn end_of(insns: &[&[u8]], index: usize) -> u64 {
    FUNC + insns[..=index].iter().map(|i| i.len() as u64).sum::<u64>()
}

#[test]
fn trap_finds_the_instruction_before_rip() {
    let code = SMALL_FUNC.concat();
    let r = regs();
    let store = ending_at(&code, end_of(SMALL_FUNC, 4), &r).expect("store found");
    assert_eq!(
        store,
        MemAccess { pc: end_of(SMALL_FUNC, 3), ..access(0, 4, r.gpr[RDI] + 4 * 5 - 32, 4, false, true, false) }
    );
    let cas = ending_at(&code, end_of(SMALL_FUNC, 7), &r).expect("cmpxchg found");
    assert_eq!(cas, MemAccess { pc: end_of(SMALL_FUNC, 6), ..access(0, 6, r.gpr[RDI] + 8, 8, true, true, true) });
    // mov qword ptr [rax + 8], rax reads rax but does not write it: address known
    let st = ending_at(&code, end_of(SMALL_FUNC, 6), &r).expect("store found");
    assert!(st.addr_known);
    assert_eq!(st.addr, r.gpr[RAX] + 8);
}

#[test]
fn trap_after_an_instruction_that_wrote_its_base_register_has_unknown_address() {
    let code = SMALL_FUNC.concat();
    let r = regs();
    // mov rax, qword ptr [rax]
    let load = ending_at(&code, end_of(SMALL_FUNC, 5), &r).expect("load found");
    assert_eq!((load.pc, load.len, load.size, load.is_read, load.is_write), (end_of(SMALL_FUNC, 4), 3, 8, true, false));
    assert!(!load.addr_known);
    // add rax, qword ptr [rax + 8]
    let add = ending_at(&code, end_of(SMALL_FUNC, 8), &r).expect("add found");
    assert!(!add.addr_known);
    assert_eq!(add.size, 8);
    // lock cmpxchg qword ptr [rax + 8], rcx: rax is conditionally written
    let cas: &[&[u8]] = &[b"\x90", b"\xf0\x48\x0f\xb1\x48\x08"];
    let a = ending_at(&cas.concat(), end_of(cas, 1), &r).expect("cmpxchg found");
    assert!(!a.addr_known && a.locked && a.is_write);
}

#[test]
fn trap_at_a_non_boundary_or_outside_the_function_is_not_resolved() {
    let code = SMALL_FUNC.concat();
    let r = regs();
    assert_eq!(ending_at(&code, end_of(SMALL_FUNC, 4) - 1, &r), None, "inside an instruction");
    assert_eq!(ending_at(&code, FUNC, &r), None, "function start");
    assert_eq!(ending_at(&code, FUNC + code.len() as u64 + 1, &r), None, "past the end");
    assert_eq!(ending_at(&code, end_of(SMALL_FUNC, 2), &r), None, "xor edx, edx: no memory");
    assert_eq!(ending_at(&code, end_of(SMALL_FUNC, 0), &r), None, "push rbp: implicit stack");
    // the reader returns nothing: no panic, no result
    let empty = CodeSlice { base: 0, bytes: &[] };
    assert_eq!(access_ending_at(&empty, FUNC, 64, FUNC + 4, &r), None);
    assert_eq!(access_ending_at(&empty, u64::MAX - 2, 64, u64::MAX, &r), None);
}

/// Base register (usize::MAX: RIP-relative), displacement, size, is_read, is_write.
type Expected = (usize, i64, u8, bool, bool);

/// A function several times larger than the decoder's 256-byte read buffer, with instruction lengths
/// 1..8 so that instructions straddle every buffer boundary at some offset. Every instruction end is a
/// trap position; each must resolve to exactly the instruction before it.
#[test]
fn trap_in_a_function_larger_than_the_read_buffer() {
    let cycle: &[(&[u8], Option<Expected>)] = &[
        (b"\x90", None),                                                                 // nop
        (b"\x31\xd2", None),                                                             // xor edx, edx
        (b"\x0f\xb1\x0f", Some((RDI, 0, 4, true, true))),                                // cmpxchg dword ptr [rdi], ecx
        (b"\x48\x83\xc1\x01", None),                                                     // add rcx, 1
        (b"\x48\x8b\x44\xcb\x10", Some((RBX, 16, 8, true, false))), // mov rax, [rbx + 8*rcx + 16] (index rcx)
        (b"\xf0\x48\x0f\xb1\x4f\x08", Some((RDI, 8, 8, true, true))), // lock cmpxchg qword ptr [rdi + 8], rcx
        (b"\x48\x8b\x05\x00\x01\x00\x00", Some((usize::MAX, 256, 8, true, false))), // mov rax, [rip + 256]
        (b"\x4f\x89\xb4\x6c\x78\x56\x34\x12", Some((R12, 0x1234_5678, 8, false, true))), // mov [r12+2*r13+..], r14
    ];
    let r = regs();
    let mut code = Vec::new();
    let mut expected = Vec::new();
    while code.len() < 3000 {
        for (bytes, what) in cycle {
            let pc = FUNC + code.len() as u64;
            code.extend_from_slice(bytes);
            expected.push((pc, bytes.len(), *what));
        }
    }
    assert!(code.len() > 10 * 256);
    for (pc, len, what) in expected {
        let got = ending_at(&code, pc + len as u64, &r);
        let Some((base, disp, size, is_read, is_write)) = what else {
            assert_eq!(got, None, "instruction at {pc:#x}");
            continue;
        };
        let got = got.unwrap_or_else(|| panic!("no access for instruction at {pc:#x}"));
        let addr = match base {
            usize::MAX => pc + len as u64, // rip-relative
            RBX => r.gpr[RBX] + 8 * r.gpr[RCX],
            R12 => r.gpr[R12] + 2 * r.gpr[R13],
            b => r.gpr[b],
        }
        .wrapping_add(disp as u64);
        let locked = len == 6;
        assert_eq!(got, access(pc, len as u8, addr, size, is_read, is_write, locked), "instruction at {pc:#x}");
    }
}

#[test]
fn access_at_reads_across_buffer_refills_too() {
    // 80 x (add rcx, 1) then a store: the look-ahead window starts mid-way, reading in several chunks.
    let mut code = Vec::new();
    for _ in 0..80 {
        code.extend_from_slice(b"\x48\x83\xc1\x01");
    }
    code.extend_from_slice(b"\x48\x89\x40\x08");
    let mut r = regs();
    r.rip = BASE + 4 * 10;
    assert_eq!(at_with(&code, &r, 70), Some(access(BASE + 320, 4, r.gpr[RAX] + 8, 8, false, true, false)));
    assert_eq!(at_with(&code, &r, 69), None);
}

#[test]
fn vector_and_other_unmodelled_instructions_are_stepped_over_forgetting_what_they_write() {
    let r = regs();
    // paddd xmm0, xmm1 ; mov rax, qword ptr [rbx + 8]
    assert_eq!(
        at(b"\x66\x0f\xfe\xc1\x48\x8b\x43\x08"),
        Some(access(BASE + 4, 4, r.gpr[RBX] + 8, 8, true, false, false))
    );
    // popcnt rcx, rdx ; mov rax, qword ptr [rbx + 8]: rcx and the flags unknown, rbx still known
    assert_eq!(
        at(b"\xf3\x48\x0f\xb8\xca\x48\x8b\x43\x08"),
        Some(access(BASE + 5, 4, r.gpr[RBX] + 8, 8, true, false, false))
    );
    // movd ebx, xmm0 ; mov rax, qword ptr [rbx + 8]: the address now depends on a vector register
    assert_eq!(at(b"\x66\x0f\x7e\xc3\x48\x8b\x43\x08"), None);
}

/// Where a code breakpoint is aimed: the first access at or after an offset whose base is neither the
/// stack pointer nor the frame pointer, found by decoding from the function's start (the offset need
/// not be an instruction boundary).
#[test]
fn aims_skip_the_own_stack_and_start_at_instruction_boundaries() {
    warm_up();
    // mov eax, [rsp + 8]; mov eax, [rbp - 4]; lea rax, [rdi + 8]; mov eax, [rdi]; mov [rip + 0x10], ecx; ret
    let code: &[u8] = &[
        0x8b, 0x44, 0x24, 0x08, 0x8b, 0x45, 0xfc, 0x48, 0x8d, 0x47, 0x08, 0x8b, 0x07, 0x89, 0x0d, 0x10, 0x00, 0x00,
        0x00, 0xc3,
    ];
    let slice = CodeSlice { base: BASE, bytes: code };
    let end = BASE + code.len() as u64;
    assert_eq!(shared_access_from(&slice, BASE, end, BASE), Some(BASE + 11), "the load through rdi");
    // From inside the load through rdi: the next boundary on is the store to a global.
    assert_eq!(shared_access_from(&slice, BASE, end, BASE + 12), Some(BASE + 13));
    assert_eq!(shared_access_from(&slice, BASE, end, BASE + 14), None, "nothing after the store");
}
