//! The walk past the first accesses of a path (`reach_nth`): the sampler watches one of the next few
//! accesses too, since the first is not always one that can race (tokio 1.13's oneshot `send` reads the
//! value's payload, which no other thread writes, right before the racy state write). Hand-assembled.

use racewatch::decode::{reach_nth, warm_up, Bounds, CodeSlice, MemAccess, Miss, Reached, Regs, MAX_STEPS};

const BASE: u64 = 0x50_0000;
const STACK: (u64, u64) = (0x7000_0000, 0x7010_0000);
const SHARED: u64 = 0x1000_0000;

fn regs() -> Regs {
    let mut gpr = [0u64; 16];
    gpr[0] = SHARED; // rax
    gpr[4] = 0x7008_0000; // rsp
    Regs { gpr, rip: BASE, rflags: 0x202 }
}

fn nth(code: &[u8], pass: usize) -> Result<MemAccess, Miss> {
    warm_up();
    let mut bytes = vec![0xccu8; 0x100];
    bytes[..code.len()].copy_from_slice(code);
    let slice = CodeSlice { base: BASE, bytes: &bytes };
    let covered = |pc: u64| (BASE..BASE + 0x100).contains(&pc);
    let library = |_: u64| None;
    let bounds = Bounds { own_stack: STACK, covered: &covered, library: &library };
    reach_nth(&slice, &regs(), &bounds, MAX_STEPS, pass).map(|r| match r {
        Reached::Access(access) => access,
        other => panic!("expected one access, got {other:?}"),
    })
}

/// `mov rbx, [rax+0x18]; cmp byte [rax+0x10], 0; mov qword [rax+0x10], 0; ret`
const SEND: &[u8] = &[0x48, 0x8b, 0x58, 0x18, 0x80, 0x78, 0x10, 0x00, 0x48, 0xc7, 0x40, 0x10, 0, 0, 0, 0, 0xc3];

#[test]
fn each_access_of_a_straight_path_can_be_the_one_watched() {
    let at = |pass| nth(SEND, pass).map(|a| (a.pc - BASE, a.addr - SHARED, a.is_write)).unwrap();
    assert_eq!(at(0), (0, 0x18, false), "the payload read");
    assert_eq!(at(1), (4, 0x10, false), "the state read");
    assert_eq!(at(2), (8, 0x10, true), "the state write");
    // Past the end of the path (the return reads a stack slot nobody wrote here): the last one found.
    assert_eq!(at(3), (8, 0x10, true));
    assert_eq!(at(9), (8, 0x10, true));
}

#[test]
fn a_passed_load_s_value_is_unknown_so_a_branch_on_it_ends_the_walk() {
    // mov rbx, [rax]; test rbx, rbx; je +4; mov [rax+8], rbx; ret
    let code = [0x48, 0x8b, 0x18, 0x48, 0x85, 0xdb, 0x74, 0x04, 0x48, 0x89, 0x58, 0x08, 0xc3];
    let first = nth(&code, 0).unwrap();
    assert_eq!((first.pc, first.addr), (BASE, SHARED));
    // Whether the store happens depends on what another thread may have written: never guessed.
    let passed = nth(&code, 1).unwrap();
    assert_eq!((passed.pc, passed.addr), (BASE, SHARED));
}

#[test]
fn an_address_computed_from_a_passed_load_is_not_watched() {
    // mov rbx, [rax]; mov rcx, [rbx+8]: the second address comes from shared memory.
    let code = [0x48, 0x8b, 0x18, 0x48, 0x8b, 0x4b, 0x08, 0xc3];
    let passed = nth(&code, 1).unwrap();
    assert_eq!((passed.pc, passed.addr), (BASE, SHARED), "falls back to the load itself");
}
