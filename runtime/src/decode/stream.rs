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
    // Leave a possibly cut instruction at the end of a read for the next read. Dropped for one round when a
    // read made no progress (the reader returns fewer bytes than one instruction needs with the margin).
    let mut margin = true;
    while pos < end {
        let want = usize::try_from(end - pos).unwrap_or(CHUNK).min(CHUNK);
        let chunk = buf.get_mut(..want)?;
        let got = code.read(pos, chunk).min(want);
        let bytes = chunk.get(..got)?;
        if bytes.is_empty() {
            return None;
        }
        let more = margin && pos.wrapping_add(got as u64) < end;
        let mut decoder = Decoder::try_with_ip(64, bytes, pos, DecoderOptions::NONE).ok()?;
        let chunk_start = pos;
        while decoder.can_decode() {
            if more && got - decoder.position() < MAX_INSN_LEN {
                break;
            }
            decoder.decode_out(&mut insn);
            if insn.is_invalid() {
                if pos == chunk_start {
                    return None; // undecodable, or cut by the end of what can be read
                }
                break; // maybe cut by a short read: read again from here
            }
            pos = insn.next_ip();
            if let ControlFlow::Break(result) = visit(&insn) {
                return result;
            }
            if pos >= end {
                return None;
            }
        }
        if pos == chunk_start && !more {
            return None;
        }
        margin = pos != chunk_start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `bytes` at `base`, at most `cap` bytes per read, nothing at or after `hole`.
    struct Reader<'a> {
        base: u64,
        bytes: &'a [u8],
        cap: usize,
        hole: u64,
    }

    impl CodeReader for Reader<'_> {
        fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
            let (Some(off), true) = (addr.checked_sub(self.base), addr < self.hole) else { return 0 };
            let avail = (self.hole - addr) as usize;
            let src = self.bytes.get(off as usize..).unwrap_or(&[]);
            let n = src.len().min(buf.len()).min(self.cap).min(avail);
            buf[..n].copy_from_slice(&src[..n]);
            n
        }
    }

    /// nop ; add rcx, 1 ; mov rax, [rip + 256] ; mov [r12 + 2*r13 + 0x12345678], r14 — 20 bytes, repeated.
    fn code() -> Vec<u8> {
        let cycle: &[u8] = b"\x90\x48\x83\xc1\x01\x48\x8b\x05\x00\x01\x00\x00\x4f\x89\xb4\x6c\x78\x56\x34\x12";
        cycle.repeat(50)
    }

    fn ends(reader: &Reader, end: u64) -> (usize, Option<u64>) {
        let mut count = 0;
        let mut last = None;
        let r: Option<()> = scan(reader, reader.base, end, |insn| {
            count += 1;
            last = Some(insn.next_ip());
            ControlFlow::Continue(())
        });
        assert!(r.is_none());
        (count, last)
    }

    #[test]
    fn decodes_everything_whatever_the_read_size() {
        let code = code();
        let end = 0x1000 + code.len() as u64;
        for cap in [8, 15, 16, 20, 33, 255, 256, 4096] {
            let reader = Reader { base: 0x1000, bytes: &code, cap, hole: u64::MAX };
            assert_eq!(ends(&reader, end), (200, Some(end)), "reads of at most {cap} bytes");
        }
    }

    #[test]
    fn stops_at_unreadable_code_and_at_the_end() {
        let code = code();
        let end = 0x1000 + code.len() as u64;
        // unmapped from byte 300 on: 300 = 15 whole cycles of 4 instructions
        let reader = Reader { base: 0x1000, bytes: &code, cap: 256, hole: 0x1000 + 300 };
        assert_eq!(ends(&reader, end), (60, Some(0x1000 + 300)));
        // cut in the middle of an instruction: everything before it
        let reader = Reader { base: 0x1000, bytes: &code, cap: 256, hole: 0x1000 + 303 };
        assert_eq!(ends(&reader, end), (61, Some(0x1000 + 301)));
        // end before the code ends: stops there (an instruction crossing `end` is still decoded whole)
        let reader = Reader { base: 0x1000, bytes: &code, cap: 256, hole: u64::MAX };
        assert_eq!(ends(&reader, 0x1000 + 40), (8, Some(0x1000 + 40)));
        assert_eq!(ends(&reader, 0x1000), (0, None));
    }
}
