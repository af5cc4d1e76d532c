//! The walk past the first access of a path (`reach_ahead`): the sampler may watch one of the next few
//! accesses, since the first is not always one that can race (tokio 1.13's oneshot `send` reads the
//! value's payload, which no other thread writes, right before the racy state write). Hand-assembled.

use racewatch::decode::{reach_ahead, warm_up, Bounds, CodeSlice, MemAccess, Reached, Regs, AHEAD, MAX_STEPS};

const BASE: u64 = 0x50_0000;
const STACK: (u64, u64) = (0x7000_0000, 0x7010_0000);
/// The shared memory, inside the image the walk can read (filled with 0xcc): a passed load that were
/// taken at its value would give a known register, a known address, a known branch.
const SHARED: u64 = BASE + 0x80;

fn regs() -> Regs {
    let mut gpr = [0u64; 16];
    gpr[0] = SHARED; // rax
    gpr[4] = 0x7008_0000; // rsp
    Regs { gpr, rip: BASE, rflags: 0x202 }
}

/// The accesses ahead of `BASE` (at most `want`).
fn ahead(code: &[u8], want: usize) -> Vec<MemAccess> {
    warm_up();
    let mut bytes = vec![0xccu8; 0x100];
    bytes[..code.len()].copy_from_slice(code);
    let slice = CodeSlice { base: BASE, bytes: &bytes };
    let covered = |pc: u64| (BASE..BASE + 0x100).contains(&pc);
    let library = |_: u64| None;
    let bounds = Bounds { own_stack: STACK, covered: &covered, library: &library };
    let found = reach_ahead(&slice, &regs(), &bounds, MAX_STEPS, want).expect("an access ahead");
    found
        .iter()
        .map(|r| match r {
            Reached::Access(access) => access,
            other => panic!("expected single accesses, got {other:?}"),
        })
        .collect()
}

/// `(pc, address, written)` relative to the code and the shared memory.
fn places(accesses: &[MemAccess]) -> Vec<(u64, u64, bool)> {
    accesses.iter().map(|a| (a.pc - BASE, a.addr - SHARED, a.is_write)).collect()
}

/// `mov rbx, [rax+0x18]; cmp byte [rax+0x10], 0; mov qword [rax+0x10], 0; ret`
const SEND: &[u8] = &[0x48, 0x8b, 0x58, 0x18, 0x80, 0x78, 0x10, 0x00, 0x48, 0xc7, 0x40, 0x10, 0, 0, 0, 0, 0xc3];

#[test]
fn each_access_of_a_straight_path_is_found_in_order() {
    let all = [(0, 0x18, false), (4, 0x10, false), (8, 0x10, true)];
    assert_eq!(places(&ahead(SEND, AHEAD)), all, "payload read, state read, state write");
    assert_eq!(places(&ahead(SEND, 2)), all[..2]);
    assert_eq!(places(&ahead(SEND, 1)), all[..1]);
}

#[test]
fn a_passed_load_s_value_is_unknown_so_a_branch_on_it_ends_the_walk() {
    // mov rbx, [rax]; test rbx, rbx; je +4; mov [rax+8], rbx; ret
    let code = [0x48, 0x8b, 0x18, 0x48, 0x85, 0xdb, 0x74, 0x04, 0x48, 0x89, 0x58, 0x08, 0xc3];
    // Whether the store happens depends on what another thread may have written: never guessed.
    assert_eq!(places(&ahead(&code, AHEAD)), [(0, 0, false)]);
}

#[test]
fn an_address_computed_from_a_passed_load_is_not_watched() {
    // mov rbx, [rax]; mov rcx, [rbx+8]: the second address comes from shared memory.
    let code = [0x48, 0x8b, 0x18, 0x48, 0x8b, 0x4b, 0x08, 0xc3];
    assert_eq!(places(&ahead(&code, AHEAD)), [(0, 0, false)]);
}

#[test]
fn a_vector_access_is_passed_but_an_atomic_exchange_ends_the_walk() {
    // paddd xmm0, [rax+16]; mov [rax+8], rdx; ret — the vector load is passed like any other.
    let code = [0x66, 0x0f, 0xfe, 0x40, 0x10, 0x48, 0x89, 0x50, 0x08, 0xc3];
    assert_eq!(places(&ahead(&code, AHEAD)), [(0, 0x10, false), (5, 8, true)]);
    // xchg [rax], rcx; mov [rax+8], rdx: the exchange may take a lock, so the store after it is not
    // concurrent with the other threads while this one stalls before it.
    let code = [0x48, 0x87, 0x08, 0x48, 0x89, 0x50, 0x08, 0xc3];
    assert_eq!(places(&ahead(&code, AHEAD)), [(0, 0, true)]);
}
