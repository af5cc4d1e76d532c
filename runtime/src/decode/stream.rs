//! Decoding a run of instructions from foreign memory through a fixed stack buffer, re-filled as needed.

use super::CodeReader;
use core::ops::ControlFlow;
use iced_x86::{Decoder, DecoderOptions, Instruction};

/// Longest x86 instruction.
pub(super) const MAX_INSN_LEN: usize = 15;
/// Bytes read from the target per re-fill.
pub(super) const CHUNK: usize = 256;

/// Calls `visit` on each instruction at `[start, end)` in address order, reading `CHUNK` bytes at a time
/// through `code`, until `visit` breaks (its value is returned) or decoding stops: at `end`, on a short read
/// that leaves no decodable instruction, or on bytes that do not decode (`None`).
pub(super) fn scan<R>(
    code: &dyn CodeReader,
    start: u64,
    end: u64,
    mut visit: impl FnMut(&Instruction) -> ControlFlow<Option<R>>,
) -> Option<R> {
    let mut buf = [0u8; CHUNK];
    let mut pos = start;
    let mut insn = Instruction::default();
    while pos < end {
        let want = usize::try_from(end - pos).unwrap_or(CHUNK).min(CHUNK);
        let chunk = buf.get_mut(..want)?;
        let got = code.read(pos, chunk).min(want);
        let bytes = chunk.get(..got)?;
        if bytes.is_empty() {
            return None;
        }
        // Bytes past this chunk exist: leave a possibly cut instruction for the next read.
        let more = pos.wrapping_add(got as u64) < end && got == want;
        let mut decoder = Decoder::try_with_ip(64, bytes, pos, DecoderOptions::NONE).ok()?;
        let chunk_start = pos;
        while decoder.can_decode() {
            if more && got - decoder.position() < MAX_INSN_LEN {
                break;
            }
            decoder.decode_out(&mut insn);
            if insn.is_invalid() {
                return None;
            }
            pos = insn.next_ip();
            if let ControlFlow::Break(result) = visit(&insn) {
                return result;
            }
            if pos >= end {
                return None;
            }
        }
        if pos == chunk_start {
            return None; // no progress (cannot happen with a chunk longer than one instruction)
        }
    }
    None
}
