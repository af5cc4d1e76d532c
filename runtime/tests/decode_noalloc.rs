//! The decoder is usable from a signal handler: after `warm_up`, decoding never allocates — not for the
//! widest instructions iced knows, not for random bytes. Checked with a counting global allocator that
//! counts only on the thread under test (the test harness allocates on its own threads).

use racewatch::decode::{access_at, access_ending_at, reach, trap_access, warm_up, Bounds, CodeSlice, MemFn, Regs};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: forwards every call unchanged to the system allocator; the bookkeeping touches only
// const-initialised thread-locals without destructors.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    COUNT.with(|c| c.get())
}

/// Instructions that make iced's InstructionInfoFactory grow its vectors the most, and ordinary ones.
const WIDE: &[&[u8]] = &[
    b"\xf3\x0f\x01\xde",                     // skinit (33 registers)
    b"\x0f\x01\xde",                         // skinit
    b"\xc8\xff\xff\x1f",                     // enter 0xffff, 31 (62 memory locations)
    b"\x66\xc8\x18\x13\xdf",                 // enterw
    b"\xc5\xf8\x77",                         // vzeroupper (32 registers)
    b"\xc5\xfc\x77",                         // vzeroall
    b"\xdd\x30",                             // fnsave [rax]
    b"\xdd\x20",                             // frstor [rax]
    b"\x0f\x0b",                             // ud2
    b"\xf3\x0f\xa7\xd3",                     // rep xcryptcbc (6 memory locations)
    b"\x0f\xa2",                             // cpuid
    b"\x48\x0f\xc7\x0c\x5f",                 // cmpxchg16b [rdi + 2*rbx]
    b"\xf3\x0f\x38\xd8\x81\x3a\x25\x22\x72", // aesdecwide128kl
    b"\x48\x8b\x44\xcb\x10",                 // mov rax, [rbx + 8*rcx + 16]
    b"\xf0\x48\x0f\xc1\x07",                 // lock xadd [rdi], rax
    b"\xcf",                                 // iret
    b"\xf3\x48\xa5",                         // rep movsq
    b"\xf3\xa6",                             // repe cmpsb
    b"\x62\xe1\x7f\x49\x7f\x00",             // vmovdqu8 [rax] {k1}, zmm16
    b"\xe8\x00\x00\x00\x00",                 // call +0 (a "libc function" below)
    b"\xff\x15\x00\x00\x00\x00",             // call [rip + 0]
];

/// The walk and the trap decoder with every branch target taken for a libc string function (its
/// arguments' strings read through the slice), every mask readable.
fn check_ranges(slice: &CodeSlice<'_>, regs: &Regs, rip: u64) {
    let covered = |_: u64| false;
    let library = |_: u64| Some(MemFn::Strcmp);
    let bounds = Bounds { own_stack: (0, 0), covered: &covered, library: &library };
    let _ = reach(slice, regs, &bounds, 8);
    let opmask = |k: u32| Some(u64::from(k) * 0x0f0f);
    let _ = trap_access(slice, slice.base, slice.bytes.len() as u64, rip, regs, (regs.gpr[7] & !7, 8), &opmask);
}

fn check(code: &[u8], regs: &Regs) {
    let slice = CodeSlice { base: regs.rip, bytes: code };
    let _ = access_at(&slice, regs, 8);
    for end in 1..=code.len().min(32) as u64 {
        let _ = access_ending_at(&slice, regs.rip, code.len() as u64, regs.rip + end, regs);
        check_ranges(&slice, regs, regs.rip + end);
    }
}

#[test]
fn decoding_after_warm_up_never_allocates() {
    let regs = Regs { gpr: [0x1000; 16], rip: 0x40_0000, rflags: 0x202 };
    let code = b"\x48\x8b\x44\xcb\x10";
    let slice = CodeSlice { base: regs.rip, bytes: code };

    // Before warm_up there is no decoder state: both entry points decline rather than allocate.
    assert_eq!(allocations(|| assert_eq!(access_at(&slice, &regs, 8), None)), 0);
    assert_eq!(allocations(|| assert_eq!(access_ending_at(&slice, regs.rip, 5, regs.rip + 5, &regs), None)), 0);

    // The counter sees allocations (so a zero below means something).
    assert!(allocations(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
    assert!(allocations(warm_up) > 0, "warm_up creates the factory pool");
    assert!(access_at(&slice, &regs, 8).is_some());

    // Every pool slot gets exercised: the slot is picked from the stack address, so recurse with ~0.5 KiB
    // frames through more than 64 KiB of stack, decoding the widest instructions at every level.
    #[inline(never)]
    fn nested(depth: usize, codes: &[Vec<u8>], regs: &Regs) {
        let pad = std::hint::black_box([0u8; 512]);
        if depth == 0 {
            return;
        }
        for code in codes {
            check(code, regs);
        }
        nested(depth - 1, codes, regs);
        std::hint::black_box(pad);
    }
    // each wide instruction alone, and followed by a store that the look-ahead finds
    let codes: Vec<Vec<u8>> =
        WIDE.iter().flat_map(|wide| [wide.to_vec(), [*wide, b"\x48\x89\x40\x08"].concat()]).collect();
    assert_eq!(allocations(|| nested(200, &codes, &regs)), 0, "decoder allocated on wide instructions");

    // Random bytes, with prefixes and escape bytes mixed in, over fixed stack buffers.
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let prefixes = [0x66u8, 0x67, 0xf0, 0xf2, 0xf3, 0x2e, 0x64, 0x65, 0x48, 0x4c, 0x41, 0xc4, 0xc5, 0x62, 0x0f];
    let mut decoded_accesses = 0usize;
    let n = allocations(|| {
        let mut buf = [0u8; 48];
        for round in 0..60_000u32 {
            rng.fill(&mut buf);
            for i in 0..rng.usize(0..4) {
                if let (Some(b), Some(&p)) = (buf.get_mut(i), prefixes.get(rng.usize(..prefixes.len()))) {
                    *b = p;
                }
            }
            let regs = Regs { gpr: [u64::from(round).wrapping_mul(0x9e37_79b9_7f4a_7c15); 16], ..regs };
            let slice = CodeSlice { base: regs.rip, bytes: &buf };
            if access_at(&slice, &regs, 8).is_some() {
                decoded_accesses += 1;
            }
            let _ = access_ending_at(&slice, regs.rip, buf.len() as u64, regs.rip + 1 + u64::from(round % 40), &regs);
            check_ranges(&slice, &regs, regs.rip + 1 + u64::from(round % 40));
        }
    });
    assert_eq!(n, 0, "decoder allocated on random code");
    assert!(decoded_accesses > 10_000, "random code should often contain accesses, got {decoded_accesses}");
}
