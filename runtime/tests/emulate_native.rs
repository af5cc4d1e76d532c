//! The sampler's x86-64 interpreter against the real CPU: each instruction runs natively (from an
//! executable page, between a harness that loads and saves every general-purpose register and
//! RFLAGS) and through `decode::emulate_step` on the same random inputs; the registers and every
//! status flag the interpreter claims to know must agree. Then whole loops, on real code shapes:
//! from a sample that lands after the access, the interpreter must find that access again.

use racewatch::decode::{self, Bounds, CodeSlice, Miss, Regs};

std::arch::global_asm!(
    ".text",
    ".globl rw_native_step",
    // rdi = *mut [u64; 17] (16 GPRs in hardware order, then RFLAGS), rsi = the instruction stub.
    "rw_native_step:",
    "push rbx",
    "push rbp",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "push rdi",
    "push rsi",
    "mov rax, [rdi + 128]",
    "push rax",
    "popfq",
    "mov rax, [rdi]",
    "mov rcx, [rdi + 8]",
    "mov rdx, [rdi + 16]",
    "mov rbx, [rdi + 24]",
    "mov rbp, [rdi + 40]",
    "mov rsi, [rdi + 48]",
    "mov r8, [rdi + 64]",
    "mov r9, [rdi + 72]",
    "mov r10, [rdi + 80]",
    "mov r11, [rdi + 88]",
    "mov r12, [rdi + 96]",
    "mov r13, [rdi + 104]",
    "mov r14, [rdi + 112]",
    "mov r15, [rdi + 120]",
    "mov rdi, [rdi + 56]",
    "call qword ptr [rsp]",
    "pushfq",
    "xchg rdi, [rsp + 16]",
    "mov [rdi], rax",
    "mov [rdi + 8], rcx",
    "mov [rdi + 16], rdx",
    "mov [rdi + 24], rbx",
    "mov [rdi + 40], rbp",
    "mov [rdi + 48], rsi",
    "mov [rdi + 64], r8",
    "mov [rdi + 72], r9",
    "mov [rdi + 80], r10",
    "mov [rdi + 88], r11",
    "mov [rdi + 96], r12",
    "mov [rdi + 104], r13",
    "mov [rdi + 112], r14",
    "mov [rdi + 120], r15",
    "pop rax",
    "mov [rdi + 128], rax",
    "pop rax",
    "pop rax",
    "mov [rdi + 56], rax",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbp",
    "pop rbx",
    "ret",
);

extern "C" {
    fn rw_native_step(state: *mut [u64; 17], stub: *const u8);
}

const STATUS: u64 = 0x8d5; // CF PF AF ZF SF OF

/// An executable page holding `bytes; ret`.
struct Stub(*mut u8);

impl Stub {
    fn new(bytes: &[u8]) -> Stub {
        // SAFETY: a fresh anonymous RWX mapping, written before use and unmapped on drop.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            assert!(page as isize != -1);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), page, bytes.len());
            *page.add(bytes.len()) = 0xc3;
            Stub(page)
        }
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.0.cast(), 4096) };
    }
}

fn native(bytes: &[u8], gpr: [u64; 16], flags: u64) -> ([u64; 16], u64) {
    let stub = Stub::new(bytes);
    let mut state = [0u64; 17];
    state[..16].copy_from_slice(&gpr);
    state[16] = (flags & STATUS) | 2;
    // SAFETY: the harness saves and restores every callee-saved register and RSP; the stub is
    // one register-only instruction followed by `ret`.
    unsafe { rw_native_step(&mut state, stub.0) };
    let mut out = [0u64; 16];
    out.copy_from_slice(&state[..16]);
    (out, state[16])
}

const EDGES: [u64; 10] = [0, 1, 2, 0x7f, 0x80, 0xff, 0x7fff_ffff, 0x8000_0000, 0x7fff_ffff_ffff_ffff, u64::MAX];

fn value(rng: &mut fastrand::Rng) -> u64 {
    match rng.u8(..4) {
        0 => EDGES[rng.usize(..EDGES.len())],
        1 => rng.u64(..64),
        _ => rng.u64(..),
    }
}

/// Register-only instructions of the shapes compiled code uses, with their text for messages.
const INSNS: &[(&str, &[u8])] = &[
    ("add rax, rcx", b"\x48\x01\xc8"),
    ("add eax, ecx", b"\x01\xc8"),
    ("add al, cl", b"\x00\xc8"),
    ("add ax, cx", b"\x66\x01\xc8"),
    ("add rdx, 8", b"\x48\x83\xc2\x08"),
    ("sub rax, rcx", b"\x48\x29\xc8"),
    ("sub eax, 7", b"\x83\xe8\x07"),
    ("adc rax, rcx", b"\x48\x11\xc8"),
    ("sbb rax, rcx", b"\x48\x19\xc8"),
    ("sbb ecx, ecx", b"\x19\xc9"),
    ("cmp rax, rcx", b"\x48\x39\xc8"),
    ("cmp cl, 0x80", b"\x80\xf9\x80"),
    ("cmp r9d, 100", b"\x41\x83\xf9\x64"),
    ("inc rax", b"\x48\xff\xc0"),
    ("dec ecx", b"\xff\xc9"),
    ("inc r12w", b"\x66\x41\xff\xc4"),
    ("neg rax", b"\x48\xf7\xd8"),
    ("not rcx", b"\x48\xf7\xd1"),
    ("and rax, rcx", b"\x48\x21\xc8"),
    ("and eax, 0xff", b"\x25\xff\x00\x00\x00"),
    ("or eax, ecx", b"\x09\xc8"),
    ("xor rax, rax", b"\x48\x31\xc0"),
    ("xor ecx, edx", b"\x31\xd1"),
    ("test al, cl", b"\x84\xc8"),
    ("test rdi, rdi", b"\x48\x85\xff"),
    ("shl rax, 1", b"\x48\xd1\xe0"),
    ("shl rax, cl", b"\x48\xd3\xe0"),
    ("shr eax, 5", b"\xc1\xe8\x05"),
    ("sar rax, cl", b"\x48\xd3\xf8"),
    ("shr dl, cl", b"\xd2\xea"),
    ("sar r8d, 31", b"\x41\xc1\xf8\x1f"),
    ("imul rax, rcx", b"\x48\x0f\xaf\xc1"),
    ("imul eax, ecx, 12345", b"\x69\xc1\x39\x30\x00\x00"),
    ("lea rax, [rcx + rdx*4 + 8]", b"\x48\x8d\x44\x91\x08"),
    ("lea eax, [rcx + rdx]", b"\x8d\x04\x11"),
    ("lea r10, [r11 - 1]", b"\x4d\x8d\x53\xff"),
    ("mov rax, rcx", b"\x48\x89\xc8"),
    ("mov eax, 0x12345678", b"\xb8\x78\x56\x34\x12"),
    ("mov ah, cl", b"\x88\xcc"),
    ("mov cx, dx", b"\x66\x89\xd1"),
    ("mov r13, -2", b"\x49\xc7\xc5\xfe\xff\xff\xff"),
    ("movabs rax, imm64", b"\x48\xb8\x88\x77\x66\x55\x44\x33\x22\x11"),
    ("movzx eax, cl", b"\x0f\xb6\xc1"),
    ("movzx ecx, dx", b"\x0f\xb7\xca"),
    ("movsx rax, cx", b"\x48\x0f\xbf\xc1"),
    ("movsxd rax, ecx", b"\x48\x63\xc1"),
    ("setne al", b"\x0f\x95\xc0"),
    ("setl cl", b"\x0f\x9c\xc1"),
    ("seta dl", b"\x0f\x97\xc2"),
    ("cmovg rax, rcx", b"\x48\x0f\x4f\xc1"),
    ("cmovb eax, ecx", b"\x0f\x42\xc1"),
    ("cmovbe rdx, rsi", b"\x48\x0f\x46\xd6"),
    ("cdqe", b"\x48\x98"),
    ("cqo", b"\x48\x99"),
    ("cdq", b"\x99"),
    ("xchg rax, rcx", b"\x48\x91"),
    ("nop dword [rax + rax]", b"\x0f\x1f\x44\x00\x00"),
];

#[test]
fn every_instruction_matches_the_cpu() {
    decode::warm_up();
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    for (text, bytes) in INSNS {
        for round in 0..400 {
            let mut gpr = [0u64; 16];
            for (i, r) in gpr.iter_mut().enumerate() {
                *r = if i == 4 { 0 } else { value(&mut rng) };
            }
            let flags = rng.u64(..) & STATUS;
            let (cpu, cpu_flags) = native(bytes, gpr, flags);
            let code = CodeSlice { base: 0x40_0000, bytes };
            let regs = Regs { gpr, rip: 0x40_0000, rflags: flags };
            let (emu, known, flags_known) =
                decode::emulate_step(&code, &regs).unwrap_or_else(|m| panic!("{text}: not emulated ({m:?})"));
            for i in (0..16).filter(|&i| i != 4) {
                assert!(known & (1 << i) != 0, "{text}: register {i} unknown after the instruction");
                assert_eq!(
                    emu.gpr[i], cpu[i],
                    "{text} (round {round}): register {i}: emulated {:#x}, CPU {:#x}; inputs {gpr:#x?} flags {flags:#x}",
                    emu.gpr[i], cpu[i]
                );
            }
            let checked = flags_known & STATUS;
            assert_eq!(
                emu.rflags & checked,
                cpu_flags & checked,
                "{text} (round {round}): flags (known mask {checked:#x}) emulated {:#x}, CPU {:#x}; inputs {gpr:#x?} flags {flags:#x}",
                emu.rflags & checked,
                cpu_flags & checked
            );
        }
    }
}

/// One-operand multiplies and divides, with inputs that never fault (a non-zero divisor larger than
/// the high half, so the quotient fits).
const WIDENING: &[(&str, &[u8], u32)] = &[
    ("mul rcx", b"\x48\xf7\xe1", 64),
    ("mul ecx", b"\xf7\xe1", 32),
    ("mul cl", b"\xf6\xe1", 8),
    ("imul rcx", b"\x48\xf7\xe9", 64),
    ("imul cx", b"\x66\xf7\xe9", 16),
    ("div rcx", b"\x48\xf7\xf1", 64),
    ("div ecx", b"\xf7\xf1", 32),
    ("div cl", b"\xf6\xf1", 8),
    ("idiv rcx", b"\x48\xf7\xf9", 64),
    ("idiv ecx", b"\xf7\xf9", 32),
];

#[test]
fn multiplies_and_divides_match_the_cpu() {
    decode::warm_up();
    let mut rng = fastrand::Rng::with_seed(0xd1f);
    for (text, bytes, bits) in WIDENING {
        let m = if *bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        for round in 0..400 {
            let mut gpr = [0u64; 16];
            for (i, r) in gpr.iter_mut().enumerate() {
                *r = if i == 4 { 0 } else { value(&mut rng) };
            }
            if text.starts_with("div") || text.starts_with("idiv") {
                // Divisor in rcx/cl: positive and above the high half (rdx, or AH for bytes).
                let divisor = (value(&mut rng) & (m >> 1)).max(2);
                gpr[1] = divisor;
                if *bits == 8 {
                    gpr[0] = (gpr[0] & !0xffff) | (rng.u64(..divisor.min(0x40)) << 8) | (gpr[0] & 0xff);
                } else {
                    // A signed quotient must fit in bits-1 bits: the high half stays below half the divisor.
                    let signed = text.starts_with("idiv");
                    gpr[2] = rng.u64(..if signed { divisor / 2 } else { divisor });
                    gpr[0] &= if signed { m >> 1 } else { m };
                }
            }
            let (cpu, cpu_flags) = native(bytes, gpr, 0);
            let code = CodeSlice { base: 0x40_0000, bytes };
            let regs = Regs { gpr, rip: 0x40_0000, rflags: 0 };
            let (emu, _, flags_known) =
                decode::emulate_step(&code, &regs).unwrap_or_else(|m| panic!("{text}: not emulated ({m:?})"));
            for i in (0..16).filter(|&i| i != 4) {
                assert_eq!(emu.gpr[i], cpu[i], "{text} (round {round}): register {i}; inputs {gpr:#x?}");
            }
            let checked = flags_known & STATUS;
            assert_eq!(emu.rflags & checked, cpu_flags & checked, "{text} (round {round}): flags");
        }
    }
    // A division by zero faults on the CPU: the interpreter stops instead.
    let code = CodeSlice { base: 0x40_0000, bytes: b"\x48\xf7\xf1" };
    let regs = Regs { gpr: [0; 16], rip: 0x40_0000, rflags: 0 };
    assert_eq!(decode::emulate_step(&code, &regs), Err(Miss::Unemulated));
}

/// `reach` from every PC of a loop must find the next of the loop's shared accesses (at `accesses`,
/// offsets in the loop): not the stack, not nothing.
fn check_loop(name: &str, code: &[u8], accesses: &[u64], regs_for: impl Fn(&mut [u64; 16])) {
    decode::warm_up();
    let base = 0x50_0000u64;
    let slice = CodeSlice { base, bytes: code };
    let covered = |pc: u64| (base..base + code.len() as u64).contains(&pc);
    let bounds = Bounds { own_stack: (0x7000_0000, 0x7010_0000), covered: &covered, library: &|_| None };
    let mut offsets = vec![0u64];
    let mut at = 0;
    while let Some(insn) = decode_len(&code[at..]) {
        at += insn;
        if at < code.len() {
            offsets.push(at as u64);
        }
    }
    for off in offsets {
        let mut gpr = [0u64; 16];
        gpr[4] = 0x7008_0000;
        regs_for(&mut gpr);
        let regs = Regs { gpr, rip: base + off, rflags: 0x202 };
        let found = decode::reach(&slice, &regs, &bounds, decode::MAX_STEPS).map(|r| r.access().expect("one access"));
        let access = found.unwrap_or_else(|m| panic!("{name}: from offset {off}: no access ({m:?})"));
        let next = accesses.iter().copied().find(|&a| a >= off).unwrap_or(accesses[0]);
        assert_eq!(access.pc, base + next, "{name}: from offset {off}");
        assert_eq!(access.addr, 0x1000_0000, "{name}: from offset {off}");
    }
}

fn decode_len(bytes: &[u8]) -> Option<usize> {
    let mut d = iced_x86::Decoder::new(64, bytes, iced_x86::DecoderOptions::NONE);
    let insn = d.decode();
    (!insn.is_invalid()).then(|| insn.len())
}

#[test]
fn loops_lead_back_to_their_access() {
    // loop: inc qword [rdi]; dec rcx; jnz loop   — counter++ in a loop, rcx large.
    check_loop("incq loop", b"\x48\xff\x07\x48\xff\xc9\x75\xf8", &[0], |g| {
        g[7] = 0x1000_0000;
        g[1] = 1000;
    });
    // loop: mov rax, [rdi]; add rax, 1; mov [rdi], rax; sub ecx, 1; jne loop
    check_loop("load/add/store", b"\x48\x8b\x07\x48\x83\xc0\x01\x48\x89\x07\x83\xe9\x01\x75\xf1", &[0, 7], |g| {
        g[7] = 0x1000_0000;
        g[1] = 1000;
    });
    // A spill and reload on the own stack on the way: push rbx; mov [rsp-8], rdi; mov rdi, [rsp-8];
    // pop rbx; add dword [rdi], 2 — the stack traffic is emulated (store buffer) and passed over.
    decode::warm_up();
    let code = b"\x53\x48\x89\x7c\x24\xf8\x48\x8b\x7c\x24\xf8\x5b\x83\x07\x02";
    let base = 0x50_0000u64;
    let slice = CodeSlice { base, bytes: code };
    let covered = |pc: u64| (base..base + code.len() as u64).contains(&pc);
    let bounds = Bounds { own_stack: (0x7000_0000, 0x7010_0000), covered: &covered, library: &|_| None };
    let mut gpr = [0u64; 16];
    gpr[4] = 0x7008_0000;
    gpr[7] = 0x1000_0000;
    let regs = Regs { gpr, rip: base, rflags: 0x202 };
    let access =
        decode::reach(&slice, &regs, &bounds, decode::MAX_STEPS).expect("the add after the spills").access().unwrap();
    assert_eq!((access.pc, access.addr, access.size), (base + 12, 0x1000_0000, 4));
}

#[test]
fn calls_and_returns_are_followed_and_unknowns_stop() {
    decode::warm_up();
    // 0: call 8 ; 5: mov [rdi], eax ; 7: ret ; 8: add rdi, 0x10 ; c: ret
    let code = b"\xe8\x03\x00\x00\x00\x89\x07\xc3\x48\x83\xc7\x10\xc3";
    let base = 0x60_0000u64;
    let slice = CodeSlice { base, bytes: code };
    let covered = |pc: u64| (base..base + code.len() as u64).contains(&pc);
    let bounds = Bounds { own_stack: (0x7000_0000, 0x7010_0000), covered: &covered, library: &|_| None };
    let mut gpr = [0u64; 16];
    gpr[4] = 0x7008_0000;
    gpr[7] = 0x2000_0000;
    let regs = Regs { gpr, rip: base, rflags: 0x202 };
    let access =
        decode::reach(&slice, &regs, &bounds, decode::MAX_STEPS).expect("the store after the call").access().unwrap();
    assert_eq!((access.pc, access.addr, access.is_write), (base + 5, 0x2000_0010, true));
    // A call out of covered code stops the walk.
    let nowhere = |_: u64| false;
    let out = Bounds { own_stack: bounds.own_stack, covered: &nowhere, library: &|_| None };
    assert_eq!(decode::reach(&slice, &regs, &out, decode::MAX_STEPS), Err(Miss::LeftCovered));
    // jcc on a flag left undefined (AF after a logic op) is not guessed: and eax, ecx; jp ... is fine
    // (PF is defined), but a branch on OF after a multi-bit shift stops.
    let shift = b"\x48\xc1\xe0\x05\x70\x00\x89\x07"; // shl rax, 5; jo +0; mov [rdi], eax
    let slice = CodeSlice { base, bytes: shift };
    assert_eq!(decode::reach(&slice, &regs, &bounds, decode::MAX_STEPS), Err(Miss::Unemulated));
}
