//! Range accesses: the walk reaching a call to a libc memory or string function (directly, through a
//! PLT stub, through a GOT slot, or as a tail jump) or a REP string instruction, and traps in string
//! instructions and AVX-512 masked stores. Hand-assembled (encodings from `llvm-mc-19 --show-encoding`).

use racewatch::decode::{
    reach, trap_access, warm_up, Bounds, CodeSlice, MemFn, Miss, Range, RangeAccess, Reached, Regs, MAX_STEPS,
};

const RCX: usize = 1;
const RDX: usize = 2;
const RSP: usize = 4;
const RSI: usize = 6;
const RDI: usize = 7;

/// Covered code at `BASE..BASE + 0x100`; a PLT stub at `PLT`, its GOT slot at `GOT`, a string at `TEXT`.
const BASE: u64 = 0x50_0000;
const PLT: u64 = BASE + 0x200;
const GOT: u64 = BASE + 0x300;
const TEXT: u64 = BASE + 0x380;
/// Where libc's memcpy and strlen resolved to (outside the image: never read).
const LIBC_MEMCPY: u64 = 0x7f00_0000_1000;
const LIBC_STRLEN: u64 = 0x7f00_0000_2000;
/// A libc memcpy within a direct call's reach (never read either).
const LIBC_NEAR: u64 = BASE + 0x3c0;
/// The sampled thread's own stack.
const STACK: (u64, u64) = (0x7000_0000, 0x7010_0000);
const DST: u64 = 0x1000_0000;
const SRC: u64 = 0x2000_0000;

/// The image: `code` at BASE, `endbr64; bnd jmp [rip + GOT]` at PLT, `slot` at GOT, "hello\0" at TEXT.
fn image(code: &[u8], slot: u64) -> Vec<u8> {
    let mut bytes = vec![0xccu8; 0x400];
    bytes[..code.len()].copy_from_slice(code);
    let stub_end = PLT + 4 + 7;
    let disp = (GOT - stub_end) as u32;
    let mut stub = vec![0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25];
    stub.extend_from_slice(&disp.to_le_bytes());
    bytes[(PLT - BASE) as usize..][..stub.len()].copy_from_slice(&stub);
    bytes[(GOT - BASE) as usize..][..8].copy_from_slice(&slot.to_le_bytes());
    bytes[(TEXT - BASE) as usize..][..6].copy_from_slice(b"hello\0");
    bytes
}

fn regs() -> Regs {
    let mut gpr = [0u64; 16];
    gpr[RSP] = 0x7008_0000;
    gpr[RDI] = DST;
    gpr[RSI] = SRC;
    gpr[RDX] = 24;
    gpr[RCX] = 100;
    Regs { gpr, rip: BASE, rflags: 0x202 }
}

fn walk(bytes: &[u8], regs: &Regs) -> Result<Reached, Miss> {
    warm_up();
    let slice = CodeSlice { base: BASE, bytes };
    let covered = |pc: u64| (BASE..BASE + 0x100).contains(&pc);
    let library = |pc: u64| match pc {
        LIBC_MEMCPY | LIBC_NEAR => Some(MemFn::Memcpy),
        LIBC_STRLEN => Some(MemFn::Strlen),
        _ => None,
    };
    reach(&slice, regs, &Bounds { own_stack: STACK, covered: &covered, library: &library }, MAX_STEPS)
}

fn ranges_of(found: Result<Reached, Miss>) -> RangeAccess {
    match found {
        Ok(Reached::Ranges(ranges)) => ranges,
        other => panic!("expected ranges, got {other:?}"),
    }
}

/// `call rel32` from `at` to `target`.
fn call(at: u64, target: u64) -> Vec<u8> {
    let mut insn = vec![0xe8];
    insn.extend_from_slice(&(target.wrapping_sub(at + 5) as u32).to_le_bytes());
    insn
}

#[test]
fn a_call_through_the_plt_to_memcpy_watches_its_destination_and_source() {
    // 0: xor eax, eax ; 2: call PLT ; 7: ret
    let code = [&b"\x31\xc0"[..], &call(BASE + 2, PLT), b"\xc3"].concat();
    let found = ranges_of(walk(&image(&code, LIBC_MEMCPY), &regs()));
    assert_eq!(found.function, Some(MemFn::Memcpy));
    assert_eq!((found.pc, found.site), (LIBC_MEMCPY, BASE + 2));
    assert_eq!(
        found.ranges.as_slice(),
        &[Range { addr: DST, len: 24, is_write: true }, Range { addr: SRC, len: 24, is_write: false }]
    );
    // The call is entered: its return address heads the caller's frames.
    assert_eq!((found.path.depth, found.path.entered[0]), (1, BASE + 7));
}

#[test]
fn a_call_through_a_got_slot_and_a_tail_jump_are_recognised_too() {
    // 0: call qword ptr [rip + GOT]  (Rust's and -fno-plt's calls)
    let disp = (GOT - (BASE + 6)) as u32;
    let code = [&b"\xff\x15"[..], &disp.to_le_bytes()].concat();
    let found = ranges_of(walk(&image(&code, LIBC_MEMCPY), &regs()));
    assert_eq!((found.pc, found.site, found.path.depth), (LIBC_MEMCPY, BASE, 1));
    // 0: jmp PLT  (a tail call: no frame entered)
    let mut jmp = vec![0xe9];
    jmp.extend_from_slice(&((PLT - (BASE + 5)) as u32).to_le_bytes());
    let found = ranges_of(walk(&image(&jmp, LIBC_MEMCPY), &regs()));
    assert_eq!((found.pc, found.site, found.path.depth), (LIBC_MEMCPY, BASE, 0));
    // A direct call to the resolved address itself.
    let found = ranges_of(walk(&image(&call(BASE, LIBC_NEAR), 0), &regs()));
    assert_eq!(found.pc, LIBC_NEAR);
}

#[test]
fn a_string_function_reads_its_string_up_to_the_nul() {
    let mut r = regs();
    r.gpr[RDI] = TEXT;
    let found = ranges_of(walk(&image(&call(BASE, PLT), LIBC_STRLEN), &r));
    assert_eq!(found.function, Some(MemFn::Strlen));
    assert_eq!(found.ranges.as_slice(), &[Range { addr: TEXT, len: 6, is_write: false }]);
}

#[test]
fn other_functions_unknown_arguments_and_the_own_stack_are_not_watched() {
    // The slot points somewhere that is neither covered nor a known libc function (a program's own
    // `memcpy` in an uncovered module, say): the walk left covered code.
    assert_eq!(walk(&image(&call(BASE, PLT), 0x6000_0000), &regs()), Err(Miss::LeftCovered));
    // The slot points into covered code (a covered function in another module): followed.
    // 0: call PLT ; 5: ret ; 0x40: mov dword ptr [rdi], eax
    let mut code = call(BASE, PLT);
    code.push(0xc3);
    code.resize(0x40, 0x90);
    code.extend_from_slice(b"\x89\x07");
    match walk(&image(&code, BASE + 0x40), &regs()) {
        Ok(Reached::Access(access)) => assert_eq!((access.pc, access.addr, access.path.depth), (BASE + 0x40, DST, 1)),
        other => panic!("expected the store in the callee, got {other:?}"),
    }
    // rdx (the length) popped from an unreadable stack slot: unknown.
    let code = [&b"\x5a"[..], &call(BASE + 1, PLT)].concat();
    assert_eq!(walk(&image(&code, LIBC_MEMCPY), &regs()), Err(Miss::AddressUnknown));
    // A destination on the own stack leaves the source; both there, nothing.
    let mut r = regs();
    r.gpr[RDI] = 0x7008_0100;
    let found = ranges_of(walk(&image(&call(BASE, PLT), LIBC_MEMCPY), &r));
    assert_eq!(found.ranges.as_slice(), &[Range { addr: SRC, len: 24, is_write: false }]);
    r.gpr[RSI] = 0x7008_0200;
    assert_eq!(walk(&image(&call(BASE, PLT), LIBC_MEMCPY), &r), Err(Miss::OwnStack));
    // Nothing to copy.
    let mut r = regs();
    r.gpr[RDX] = 0;
    assert_eq!(walk(&image(&call(BASE, PLT), LIBC_MEMCPY), &r), Err(Miss::NoAccess));
}

#[test]
fn rep_string_instructions_are_ranges_of_rcx_elements() {
    // 0: mov ecx, 100 ; 5: rep movsb
    let code = b"\xb9\x64\x00\x00\x00\xf3\xa4";
    let found = ranges_of(walk(&image(code, 0), &regs()));
    assert_eq!((found.function, found.pc, found.site), (None, BASE + 5, BASE + 5));
    assert_eq!(
        found.ranges.as_slice(),
        &[Range { addr: DST, len: 100, is_write: true }, Range { addr: SRC, len: 100, is_write: false }]
    );
    // rep stosq, 4 elements: 32 bytes written; downward (DF set) they end one element above rdi.
    let mut r = regs();
    r.gpr[RCX] = 4;
    let found = ranges_of(walk(&image(b"\xf3\x48\xab", 0), &r));
    assert_eq!(found.ranges.as_slice(), &[Range { addr: DST, len: 32, is_write: true }]);
    r.rflags |= 0x400;
    let found = ranges_of(walk(&image(b"\xf3\x48\xab", 0), &r));
    assert_eq!(found.ranges.as_slice(), &[Range { addr: DST + 8 - 32, len: 32, is_write: true }]);
    // rcx = 0: it does nothing, and the walk goes on to the next access.
    // 0: xor ecx, ecx ; 2: rep movsb ; 4: mov dword ptr [rdi], eax
    match walk(&image(b"\x31\xc9\xf3\xa4\x89\x07", 0), &regs()) {
        Ok(Reached::Access(access)) => assert_eq!((access.pc, access.addr), (BASE + 4, DST)),
        other => panic!("expected the store after the empty rep movsb, got {other:?}"),
    }
    // repe cmpsb stops at the first difference: only the first byte of each side is certain.
    let found = ranges_of(walk(&image(b"\xf3\xa6", 0), &regs()));
    assert_eq!(
        found.ranges.as_slice(),
        &[Range { addr: DST, len: 1, is_write: false }, Range { addr: SRC, len: 1, is_write: false }]
    );
}

const FUNC: u64 = 0x6000_0000;

fn trapped(code: &[u8], rip: u64, regs: &Regs, window: (u64, u64), mask: Option<u64>) -> Option<(u64, u64, u8, bool)> {
    warm_up();
    let slice = CodeSlice { base: FUNC, bytes: code };
    let opmask = |k: u32| if k == 1 { mask } else { None };
    let found = trap_access(&slice, FUNC, code.len() as u64, rip, regs, window, &opmask)?;
    assert!(found.addr_known);
    Some((found.pc, found.addr, found.size, found.is_write))
}

#[test]
fn traps_in_string_instructions_take_the_window_bytes_done() {
    // 0: mov ecx, 100 ; 5: rep stosb ; 7: ret — trapped between two elements (RIP still on it), and
    // after the last one.
    let code = b"\xb9\x64\x00\x00\x00\xf3\xaa\xc3";
    let mut r = regs();
    r.gpr[RDI] = 0x1000_000d;
    let window = (0x1000_0008, 8);
    assert_eq!(trapped(code, FUNC + 5, &r, window, None), Some((FUNC + 5, 0x1000_0008, 5, true)));
    assert_eq!(trapped(code, FUNC + 7, &r, window, None), Some((FUNC + 5, 0x1000_0008, 5, true)));
    // rep movsq read the window on its source side (rsi just past it; rdi far away).
    let code = b"\xb9\x64\x00\x00\x00\xf3\x48\xa5\xc3";
    r.gpr[RDI] = 0x3000_0000;
    r.gpr[RSI] = 0x1000_0010;
    assert_eq!(trapped(code, FUNC + 5, &r, window, None), Some((FUNC + 5, 0x1000_0008, 8, false)));
}

#[test]
fn traps_in_masked_stores_take_the_selected_bytes() {
    // 0: vmovdqu8 zmmword ptr [rax] {k1}, zmm16 ; 6: ret
    let code = b"\x62\xe1\x7f\x49\x7f\x00\xc3";
    let mut r = regs();
    r.gpr[0] = 0x1000_0003;
    let window = (0x1000_0000, 8);
    // k1 = 0b111: the first three bytes.
    assert_eq!(trapped(code, FUNC + 6, &r, window, Some(0b111)), Some((FUNC, 0x1000_0003, 3, true)));
    // Bytes 2..=4 selected.
    assert_eq!(trapped(code, FUNC + 6, &r, window, Some(0b11100)), Some((FUNC, 0x1000_0005, 3, true)));
    // The mask cannot be read: no access to judge; nothing selected: none either.
    assert_eq!(trapped(code, FUNC + 6, &r, window, None), None);
    assert_eq!(trapped(code, FUNC + 6, &r, window, Some(0)), None);
}

#[test]
fn a_masked_access_is_not_watched_on_the_sampled_side() {
    assert_eq!(walk(&image(b"\x62\xe1\x7f\x49\x7f\x00", 0), &regs()), Err(Miss::Unemulated));
}
