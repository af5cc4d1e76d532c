//! Stack capture by frame pointers with non-faulting reads.
//!
//! Frame layout (x86-64 with frame pointers): `[rbp]` is the caller's saved
//! rbp, `[rbp + 8]` the return address. The walk stops at the first frame that
//! is misaligned, not strictly above the previous one, implausibly far from
//! it, unreadable, or whose return address is 0. Async-signal-safe.

use crate::sys::mem;

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
    let mut result = Walk::default();
    if out.is_empty() {
        return result;
    }
    out[0] = pc;
    result.frames = 1;
    let mut fp = rbp;
    while result.frames < out.len() {
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
        out[result.frames] = ret;
        result.frames += 1;
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
