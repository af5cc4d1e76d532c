//! Decoding a run of instructions from foreign memory through a fixed stack buffer, re-filled as needed.

use super::CodeReader;
use iced_x86::{Decoder, DecoderOptions, Instruction};

/// Longest x86 instruction.
pub(super) const MAX_INSN_LEN: usize = 15;
/// Bytes read from the target per re-fill.
pub(super) const CHUNK: usize = 256;

/// Yields the instructions at `[start, end)` in address order, reading `CHUNK` bytes at a time.
pub(super) struct Stream<'r> {
    code: &'r dyn CodeReader,
    buf: [u8; CHUNK],
    buf_addr: u64,
    buf_len: usize,
    pos: u64,
    end: u64,
}

impl<'r> Stream<'r> {
    pub(super) fn new(code: &'r dyn CodeReader, start: u64, end: u64) -> Self {
        Stream { code, buf: [0; CHUNK], buf_addr: start, buf_len: 0, pos: start, end }
    }

    /// Re-reads the buffer at `pos`, limited to `end`. `false` when nothing could be read.
    fn refill(&mut self) -> bool {
        let want = usize::try_from(self.end.saturating_sub(self.pos)).unwrap_or(CHUNK).min(CHUNK);
        let Some(dst) = self.buf.get_mut(..want) else { return false };
        let got = self.code.read(self.pos, dst).min(want);
        self.buf_addr = self.pos;
        self.buf_len = got;
        got > 0
    }

    /// The next instruction, or `None` at `end`, on a short read, or on bytes that do not decode.
    pub(super) fn next_insn(&mut self) -> Option<Instruction> {
        if self.pos >= self.end {
            return None;
        }
        let mut off = usize::try_from(self.pos.wrapping_sub(self.buf_addr)).ok()?;
        let buffered_end = self.buf_addr.wrapping_add(self.buf_len as u64);
        let more_available = buffered_end < self.end;
        if self.pos < self.buf_addr || off > self.buf_len || (self.buf_len - off < MAX_INSN_LEN && more_available) {
            if !self.refill() {
                return None;
            }
            off = 0;
        }
        let bytes = self.buf.get(off..self.buf_len)?;
        let mut decoder = Decoder::try_with_ip(64, bytes, self.pos, DecoderOptions::NONE).ok()?;
        let insn = decoder.decode();
        if insn.is_invalid() {
            return None;
        }
        self.pos = insn.next_ip();
        Some(insn)
    }
}
