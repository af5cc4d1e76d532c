//! Stack capture by frame pointers with non-faulting reads.
//!
//! Frame layout (x86-64 with frame pointers): `[rbp]` is the caller's saved
//! rbp, `[rbp + 8]` the return address. The walk stops at the first frame that
//! is misaligned, not strictly above the previous one, implausibly far from
//! it, unreadable, or whose return address is 0. Async-signal-safe.

use crate::sys::mem;
use crate::sys::signal::Regs;

/// Largest distance between two consecutive frames we accept (a frame larger than
/// this is more likely garbage than a real frame).
const MAX_FRAME_SIZE: u64 = 16 << 20;

/// Result of a walk: frames written and the highest frame address reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Number of entries written to `out`.
    pub frames: usize,
    /// The highest frame pointer that was successfully read (0 if none): the
    /// walked part of the stack is `[rsp, top + 16)`.
    pub top: u64,
}

/// Writes `pc` and then the return address of each caller frame into `out`;
/// returns how many entries were written. `out[0]` is the interrupted PC; the
/// other entries are return addresses (symbolize `addr - 1`).
pub fn capture(rbp: u64, pc: u64, out: &mut [u64]) -> usize {
    walk(rbp, pc, out).frames
}

/// [`capture`], also reporting how far up the stack the walk got.
pub fn walk(rbp: u64, pc: u64, out: &mut [u64]) -> Walk {
    let Some(first) = out.first_mut() else { return Walk::default() };
    *first = pc;
    follow(rbp, out, 1)
}

/// Like [`walk`] for a thread interrupted at `regs.rip` in the function that
/// starts at `func_start`, with `pc` (the access) as frame 0. At the
/// function's first instruction, right after its `push rbp`, and at its
/// `ret`, RBP still (or again) belongs to the caller, so the chain alone would
/// skip the caller: its return address is read from the stack top instead.
pub fn walk_interrupted(regs: &Regs, func_start: Option<u64>, pc: u64, out: &mut [u64]) -> Walk {
    let Some(first) = out.first_mut() else { return Walk::default() };
    *first = pc;
    let mut frames = 1;
    if let Some(ret) = pending_return_slot(regs.rip, regs.rsp(), func_start).and_then(mem::read_u64) {
        if ret != 0 && frames < out.len() {
            out[frames] = ret;
            frames += 1;
        }
    }
    follow(regs.rbp(), out, frames)
}

/// Where the return address into the caller is while the frame of the
/// function at `rip` is not set up, if that is the case.
fn pending_return_slot(rip: u64, rsp: u64, func_start: Option<u64>) -> Option<u64> {
    const PUSH_RBP: u8 = 0x55;
    const RET: u8 = 0xc3;
    let byte_at = |addr: u64| {
        let mut byte = [0u8; 1];
        (mem::read_into(addr, &mut byte) == 1).then_some(byte[0])
    };
    if func_start == Some(rip) || byte_at(rip) == Some(RET) {
        Some(rsp)
    } else if func_start == Some(rip.wrapping_sub(1)) && byte_at(rip.wrapping_sub(1)) == Some(PUSH_RBP) {
        Some(rsp.wrapping_add(8))
    } else {
        None
    }
}

/// Follows the frame-pointer chain from `rbp`, appending return addresses to
/// `out` after the first `frames` entries.
fn follow(rbp: u64, out: &mut [u64], mut frames: usize) -> Walk {
    let mut result = Walk { frames, top: 0 };
    let mut fp = rbp;
    while frames < out.len() {
        if fp == 0 || fp % 8 != 0 {
            break;
        }
        let mut frame = [0u8; 16];
        if mem::read_into(fp, &mut frame) != 16 {
            break;
        }
        let (saved_fp, ret) = frame.split_at(8);
        let next = u64::from_ne_bytes(saved_fp.try_into().unwrap_or_default());
        let ret = u64::from_ne_bytes(ret.try_into().unwrap_or_default());
        result.top = fp;
        if ret == 0 {
            break;
        }
        out[frames] = ret;
        frames += 1;
        result.frames = frames;
        if next <= fp || next - fp > MAX_FRAME_SIZE {
            break;
        }
        fp = next;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function `push rbp; mov rbp, rsp; ret` and a stack whose top holds
    /// `return_address`, interrupted at `offset` into the function.
    fn interrupted_at(offset: u64, code: &[u8; 5], stack: &[u64; 4]) -> Vec<u64> {
        let start = code.as_ptr() as u64;
        let mut gpr = [0u64; 16];
        gpr[Regs::RSP] = stack.as_ptr() as u64; // RBP stays 0: the caller's chain ends here
        let regs = Regs { gpr, rip: start + offset, rflags: 0 };
        let mut out = [0u64; 8];
        let walk = walk_interrupted(&regs, Some(start), 0xabc, &mut out);
        out[..walk.frames].to_vec()
    }

    #[test]
    fn finds_the_caller_while_the_frame_is_not_set_up() {
        let code = [0x55, 0x48, 0x89, 0xe5, 0xc3]; // push rbp; mov rbp, rsp; ret
                                                   // At the first instruction and at `ret` the return address is on top;
                                                   // right after `push rbp` it is one word up.
        assert_eq!(interrupted_at(0, &code, &[0x1111, 0, 0, 0]), vec![0xabc, 0x1111]);
        assert_eq!(interrupted_at(4, &code, &[0x3333, 0, 0, 0]), vec![0xabc, 0x3333]);
        assert_eq!(interrupted_at(1, &code, &[0x7fff_0000, 0x2222, 0, 0]), vec![0xabc, 0x2222]);
        // Once `mov rbp, rsp` ran, the frame chain is right: nothing is read from the top.
        assert_eq!(interrupted_at(1 + 3, &[0x55, 0x48, 0x89, 0xe5, 0x90], &[0x4444, 0, 0, 0]), vec![0xabc]);
    }

    /// Builds a fake stack in a buffer: frames at 16-byte steps linking upward.
    fn fake_stack(links: &[(usize, u64, u64)]) -> Vec<u64> {
        let mut words = vec![0u64; 64];
        for &(index, next_index_or_raw, ret) in links {
            words[index] = next_index_or_raw;
            words[index + 1] = ret;
        }
        words
    }

    #[test]
    fn walks_a_chain_and_stops_at_the_end() {
        let mut words = fake_stack(&[]);
        let base = words.as_ptr() as u64;
        let at = |i: usize| base + 8 * i as u64;
        words[0] = at(4);
        words[1] = 0x1111;
        words[4] = at(10);
        words[5] = 0x2222;
        words[10] = 0; // end of chain: saved rbp 0
        words[11] = 0x3333;
        let mut out = [0u64; 8];
        let walk = walk(at(0), 0xaaaa, &mut out);
        assert_eq!(&out[..walk.frames], &[0xaaaa, 0x1111, 0x2222, 0x3333]);
        assert_eq!(walk.top, at(10));
    }

    #[test]
    fn stops_on_decreasing_misaligned_unreadable_and_bounds() {
        let mut words = fake_stack(&[]);
        let base = words.as_ptr() as u64;
        let at = |i: usize| base + 8 * i as u64;
        words[4] = at(0); // points downward
        words[5] = 0x1;
        let mut out = [0u64; 8];
        assert_eq!(capture(at(4), 0xa, &mut out), 2);
        assert_eq!(capture(at(4) + 3, 0xa, &mut out), 1);
        assert_eq!(capture(0x10, 0xa, &mut out), 1);
        // A self-consistent long chain is cut at out.len().
        for i in 0..30 {
            words[2 * i] = at(2 * i + 2);
            words[2 * i + 1] = 0x100 + i as u64;
        }
        let mut small = [0u64; 4];
        assert_eq!(capture(at(0), 0xa, &mut small), 4);
        assert_eq!(small, [0xa, 0x100, 0x101, 0x102]);
        assert_eq!(capture(at(0), 0xa, &mut []), 0);
    }
}
