//! Calls to libc's memory and string functions, and string instructions: the byte ranges they are
//! about to read and write, from the interpreted registers.
//!
//! A call's ranges come from its arguments (`rdi`, `rsi`, `rdx`); a string function's length is found
//! by reading the string without faulting (through the [`CodeReader`]) up to [`MAX_STRING`] bytes. The
//! `__*_chk` forms (`_FORTIFY_SOURCE`) take the same arguments plus the destination's size, so they
//! touch the same bytes. No allocation, no lock: fixed buffers on the stack.

use super::CodeReader;

/// A libc function whose accesses racewatch models at the call (its code has no metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemFn {
    Memcpy,
    Memmove,
    Mempcpy,
    Memset,
    Memcmp,
    Bcmp,
    Memchr,
    Strlen,
    Strnlen,
    Strcpy,
    Stpcpy,
    Strncpy,
    Strcmp,
    Strncmp,
    Strchr,
}

/// Every symbol racewatch resolves in libc, with the function it is: the plain names first (a body
/// shared by several names, as memcpy's and memmove's in glibc, is named by the first), then the
/// fortified `__*_chk` forms.
pub const SYMBOLS: &[(&str, MemFn)] = &[
    ("memcpy", MemFn::Memcpy),
    ("memmove", MemFn::Memmove),
    ("mempcpy", MemFn::Mempcpy),
    ("memset", MemFn::Memset),
    ("memcmp", MemFn::Memcmp),
    ("bcmp", MemFn::Bcmp),
    ("memchr", MemFn::Memchr),
    ("strlen", MemFn::Strlen),
    ("strnlen", MemFn::Strnlen),
    ("strcpy", MemFn::Strcpy),
    ("stpcpy", MemFn::Stpcpy),
    ("strncpy", MemFn::Strncpy),
    ("strcmp", MemFn::Strcmp),
    ("strncmp", MemFn::Strncmp),
    ("strchr", MemFn::Strchr),
    ("__memcpy_chk", MemFn::Memcpy),
    ("__memmove_chk", MemFn::Memmove),
    ("__mempcpy_chk", MemFn::Mempcpy),
    ("__memset_chk", MemFn::Memset),
    ("__strcpy_chk", MemFn::Strcpy),
    ("__stpcpy_chk", MemFn::Stpcpy),
    ("__strncpy_chk", MemFn::Strncpy),
];

/// Bytes of a string read at most to find its length (a longer string counts as this long).
pub const MAX_STRING: u64 = 1024;
/// Bytes read per non-faulting read while scanning.
const CHUNK: usize = 128;

/// Bytes about to be accessed: `[addr, addr + len)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub addr: u64,
    pub len: u64,
    pub is_write: bool,
}

impl Range {
    pub fn end(&self) -> u64 {
        self.addr.saturating_add(self.len)
    }
}

/// At most two ranges (a destination and a source), empty ones left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    pub items: [Range; 2],
    pub count: u8,
}

impl Ranges {
    pub fn push(&mut self, range: Range) {
        if range.len > 0 {
            if let Some(slot) = self.items.get_mut(usize::from(self.count)) {
                *slot = range;
                self.count += 1;
            }
        }
    }

    pub fn as_slice(&self) -> &[Range] {
        &self.items[..usize::from(self.count).min(2)]
    }

    /// Keeps only the ranges `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&Range) -> bool) {
        let mut kept = Ranges::default();
        for range in self.as_slice() {
            if keep(range) {
                kept.push(*range);
            }
        }
        *self = kept;
    }
}

/// The bytes a call to `function` with arguments `args` (`rdi`, `rsi`, `rdx`) reads and writes; `None`
/// when a string it must read to know its length cannot be read at all (the call would fault).
pub fn ranges(code: &dyn CodeReader, function: MemFn, args: [u64; 3]) -> Option<Ranges> {
    use MemFn::*;
    let [a, b, n] = args;
    let read = |addr, len| Range { addr, len, is_write: false };
    let write = |addr, len| Range { addr, len, is_write: true };
    let mut out = Ranges::default();
    match function {
        Memcpy | Memmove | Mempcpy => {
            out.push(write(a, n));
            out.push(read(b, n));
        }
        Memset => out.push(write(a, n)),
        // Up to the first difference (the bytes after it need not be read).
        Memcmp | Bcmp => {
            let len = compare(code, a, b, n, false)?;
            out.push(read(a, len));
            out.push(read(b, len));
        }
        Memchr => out.push(read(a, scan(code, a, n, |byte| byte == b as u8)?)),
        Strlen => out.push(read(a, scan(code, a, MAX_STRING, |byte| byte == 0)?)),
        Strnlen => out.push(read(a, scan(code, a, n, |byte| byte == 0)?)),
        Strcpy | Stpcpy => {
            let len = scan(code, b, MAX_STRING, |byte| byte == 0)?;
            out.push(write(a, len));
            out.push(read(b, len));
        }
        // Writes all `n` bytes (padding with NULs), reads the source up to its NUL.
        Strncpy => {
            let len = scan(code, b, n, |byte| byte == 0)?;
            out.push(write(a, n));
            out.push(read(b, len));
        }
        Strcmp | Strncmp => {
            let limit = if function == Strcmp { MAX_STRING } else { n };
            let len = compare(code, a, b, limit, true)?;
            out.push(read(a, len));
            out.push(read(b, len));
        }
        Strchr => {
            let c = b as u8;
            out.push(read(a, scan(code, a, MAX_STRING, |byte| byte == c || byte == 0)?));
        }
    }
    Some(out)
}

/// How many of at most `limit` (and [`MAX_STRING`]) bytes at `addr` are read up to and including the
/// first one for which `stop` holds: all that could be read when none does; `None` when not even the
/// first byte can be read (0 when `limit` is 0).
fn scan(code: &dyn CodeReader, addr: u64, limit: u64, stop: impl Fn(u8) -> bool) -> Option<u64> {
    let limit = limit.min(MAX_STRING);
    let mut buf = [0u8; CHUNK];
    let mut done = 0u64;
    while done < limit {
        let want = usize::try_from(limit - done).unwrap_or(CHUNK).min(CHUNK);
        let chunk = buf.get_mut(..want)?;
        let got = code.read(addr.checked_add(done)?, chunk).min(want);
        if got == 0 {
            break;
        }
        if let Some(i) = chunk.get(..got)?.iter().position(|&byte| stop(byte)) {
            return Some(done + i as u64 + 1);
        }
        done += got as u64;
    }
    (done > 0 || limit == 0).then_some(done)
}

/// [`scan`] over two byte strings at once, up to and including the first position where they differ
/// (or, `nul_stops`, hold a NUL: `strcmp`).
fn compare(code: &dyn CodeReader, a: u64, b: u64, limit: u64, nul_stops: bool) -> Option<u64> {
    let limit = limit.min(MAX_STRING);
    let (mut left, mut right) = ([0u8; CHUNK], [0u8; CHUNK]);
    let mut done = 0u64;
    while done < limit {
        let want = usize::try_from(limit - done).unwrap_or(CHUNK).min(CHUNK);
        let got_a = code.read(a.checked_add(done)?, left.get_mut(..want)?).min(want);
        let got_b = code.read(b.checked_add(done)?, right.get_mut(..want)?).min(want);
        let got = got_a.min(got_b);
        if got == 0 {
            break;
        }
        let pairs = left.get(..got)?.iter().zip(right.get(..got)?);
        if let Some(i) = pairs.into_iter().position(|(x, y)| x != y || (nul_stops && *x == 0)) {
            return Some(done + i as u64 + 1);
        }
        done += got as u64;
    }
    (done > 0 || limit == 0).then_some(done)
}

/// What a string instruction (`movs`, `stos`, `lods`, `cmps`, `scas`) does per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringOp {
    /// Element size in bytes (1, 2, 4, 8).
    pub width: u8,
    /// Reads `[rsi]` (movs, lods, cmps).
    pub reads_rsi: bool,
    /// Writes `[rdi]` (movs, stos).
    pub writes_rdi: bool,
    /// Reads `[rdi]` (cmps, scas).
    pub reads_rdi: bool,
    /// Stops at the first (mis)match (`repe`/`repne` cmps and scas): only the first element is certain.
    pub compares: bool,
    /// Has a REP/REPE/REPNE prefix: `rcx` elements.
    pub rep: bool,
}

/// The ranges a string instruction about to run will access: `count` elements (1 without REP) from
/// `rdi`/`rsi`, upward or (`down`, DF set) downward.
pub fn string_ranges(op: &StringOp, rdi: u64, rsi: u64, count: u64, down: bool) -> Ranges {
    let width = u64::from(op.width);
    let elements = if op.compares { count.min(1) } else { count };
    let len = elements.saturating_mul(width);
    // Downward, the first element is the highest: the range ends one element above the register.
    let start = |reg: u64| if down { reg.wrapping_add(width).wrapping_sub(len) } else { reg };
    let mut out = Ranges::default();
    if op.writes_rdi {
        out.push(Range { addr: start(rdi), len, is_write: true });
    } else if op.reads_rdi {
        out.push(Range { addr: start(rdi), len, is_write: false });
    }
    if op.reads_rsi {
        out.push(Range { addr: start(rsi), len, is_write: false });
    }
    out
}

/// The bytes of a watched window `[window, window + window_len)` that a string instruction trapping
/// with `rdi`/`rsi` has accessed by now: the elements done lie below the registers (above them when
/// `down`). Where a REP instruction started is unknown (its first element may lie before the window), so
/// the window bounds them from the other side; the side (destination or source) is the one whose
/// register has moved past the window by the least (the trap comes right after the element that
/// touched it). `None` when neither side meets the window.
pub fn string_trap_range(op: &StringOp, rdi: u64, rsi: u64, down: bool, window: u64, window_len: u64) -> Option<Range> {
    let width = u64::from(op.width);
    let window_end = window.saturating_add(window_len);
    // (bytes the register has moved past the window's far side, the range done within the window)
    let done = |reg: u64, is_write: bool| -> Option<(u64, Range)> {
        // The elements done: exactly one without REP; with it, everything from the register back.
        let (lo, hi, past) = if down {
            let lo = reg.wrapping_add(width);
            let hi = if op.rep { u64::MAX } else { lo.saturating_add(width) };
            (lo, hi, window_end.checked_sub(lo)?)
        } else {
            let lo = if op.rep { 0 } else { reg.wrapping_sub(width) };
            (lo, reg, reg.checked_sub(window)?)
        };
        let (lo, hi) = (lo.max(window), hi.min(window_end));
        (lo < hi).then_some((past, Range { addr: lo, len: hi - lo, is_write }))
    };
    let on_rdi = (op.writes_rdi || op.reads_rdi).then(|| done(rdi, op.writes_rdi)).flatten();
    let on_rsi = op.reads_rsi.then(|| done(rsi, false)).flatten();
    match (on_rdi, on_rsi) {
        (Some((d, dst)), Some((s, src))) => Some(if s < d { src } else { dst }),
        (found, None) | (None, found) => found.map(|(_, range)| range),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::CodeSlice;

    const BASE: u64 = 0x10_0000;

    fn memory() -> Vec<u8> {
        let mut bytes = vec![0xaau8; 4096];
        bytes[..6].copy_from_slice(b"hello\0");
        bytes[0x100..0x106].copy_from_slice(b"help!\0");
        bytes
    }

    #[test]
    fn copies_write_the_destination_and_read_the_source() {
        let mem = memory();
        let code = CodeSlice { base: BASE, bytes: &mem };
        let r = ranges(&code, MemFn::Memcpy, [0x5000, 0x6000, 24]).unwrap();
        assert_eq!(
            r.as_slice(),
            &[Range { addr: 0x5000, len: 24, is_write: true }, Range { addr: 0x6000, len: 24, is_write: false }]
        );
        // Nothing to copy: no range.
        assert_eq!(ranges(&code, MemFn::Memmove, [0x5000, 0x6000, 0]).unwrap().count, 0);
        let r = ranges(&code, MemFn::Memset, [0x5000, 0x41, 100]).unwrap();
        assert_eq!(r.as_slice(), &[Range { addr: 0x5000, len: 100, is_write: true }]);
    }

    #[test]
    fn string_functions_read_up_to_the_nul() {
        let mem = memory();
        let code = CodeSlice { base: BASE, bytes: &mem };
        let r = ranges(&code, MemFn::Strlen, [BASE, 0, 0]).unwrap();
        assert_eq!(r.as_slice(), &[Range { addr: BASE, len: 6, is_write: false }]);
        assert_eq!(ranges(&code, MemFn::Strnlen, [BASE, 0, 3]).unwrap().as_slice()[0].len, 3);
        let r = ranges(&code, MemFn::Strcpy, [0x5000, BASE, 0]).unwrap();
        assert_eq!(
            r.as_slice(),
            &[Range { addr: 0x5000, len: 6, is_write: true }, Range { addr: BASE, len: 6, is_write: false }]
        );
        // strncpy writes n bytes whatever the source's length.
        let r = ranges(&code, MemFn::Strncpy, [0x5000, BASE, 16]).unwrap();
        assert_eq!((r.as_slice()[0].len, r.as_slice()[1].len), (16, 6));
        // "hello" vs "help!": the first difference at index 3.
        let r = ranges(&code, MemFn::Strcmp, [BASE, BASE + 0x100, 0]).unwrap();
        assert_eq!((r.as_slice()[0].len, r.as_slice()[1].len), (4, 4));
        let r = ranges(&code, MemFn::Strncmp, [BASE, BASE + 0x100, 2]).unwrap();
        assert_eq!(r.as_slice()[0].len, 2);
        let r = ranges(&code, MemFn::Memcmp, [BASE, BASE + 0x100, 5]).unwrap();
        assert_eq!(r.as_slice()[0].len, 4);
        let r = ranges(&code, MemFn::Strchr, [BASE, u64::from(b'l'), 0]).unwrap();
        assert_eq!(r.as_slice()[0].len, 3);
        let r = ranges(&code, MemFn::Memchr, [BASE, u64::from(b'z'), 4]).unwrap();
        assert_eq!(r.as_slice()[0].len, 4);
        // No NUL before the end of what can be read: everything readable counts; unreadable: nothing.
        let r = ranges(&code, MemFn::Strlen, [BASE + 4090, 0, 0]).unwrap();
        assert_eq!(r.as_slice()[0].len, 6);
        assert_eq!(ranges(&code, MemFn::Strlen, [0x10, 0, 0]), None);
        let r = ranges(&code, MemFn::Strlen, [BASE + 0x200, 0, 0]).unwrap();
        assert_eq!(r.as_slice()[0].len, MAX_STRING);
        assert_eq!(ranges(&code, MemFn::Strnlen, [0x10, 0, 0]).unwrap().count, 0);
    }

    const MOVSQ: StringOp =
        StringOp { width: 8, reads_rsi: true, writes_rdi: true, reads_rdi: false, compares: false, rep: true };
    const STOSB: StringOp =
        StringOp { width: 1, reads_rsi: false, writes_rdi: true, reads_rdi: false, compares: false, rep: true };

    #[test]
    fn string_instructions_cover_every_element() {
        let r = string_ranges(&MOVSQ, 0x1000, 0x2000, 4, false);
        assert_eq!(
            r.as_slice(),
            &[Range { addr: 0x1000, len: 32, is_write: true }, Range { addr: 0x2000, len: 32, is_write: false }]
        );
        // Downward: the elements end one element above the registers.
        let r = string_ranges(&MOVSQ, 0x1000, 0x2000, 4, true);
        assert_eq!(r.as_slice()[0], Range { addr: 0x1000 + 8 - 32, len: 32, is_write: true });
        let r = string_ranges(&STOSB, 0x1000, 0, 0, false);
        assert_eq!(r.count, 0);
        let scas = StringOp { reads_rdi: true, writes_rdi: false, compares: true, ..STOSB };
        assert_eq!(
            string_ranges(&scas, 0x1000, 0, 100, false).as_slice(),
            &[Range { addr: 0x1000, len: 1, is_write: false }]
        );
    }

    #[test]
    fn string_traps_take_the_window_bytes_done_so_far() {
        // rep stosb has written up to 0x100d: of the window [0x1008, 0x1010) the bytes below 0x100d.
        assert_eq!(
            string_trap_range(&STOSB, 0x100d, 0, false, 0x1008, 8),
            Some(Range { addr: 0x1008, len: 5, is_write: true })
        );
        // Without REP: exactly the one element.
        let single = StringOp { rep: false, ..STOSB };
        assert_eq!(
            string_trap_range(&single, 0x100d, 0, false, 0x1008, 8),
            Some(Range { addr: 0x100c, len: 1, is_write: true })
        );
        // movsq trapped on its source side: the destination register is far past the window.
        assert_eq!(
            string_trap_range(&MOVSQ, 0x9000, 0x1010, false, 0x1008, 8),
            Some(Range { addr: 0x1008, len: 8, is_write: false })
        );
        // ... and on its destination side, below the source.
        assert_eq!(
            string_trap_range(&MOVSQ, 0x1010, 0x9000, false, 0x1008, 8),
            Some(Range { addr: 0x1008, len: 8, is_write: true })
        );
        // The source register below the window: only the destination can have met it.
        assert_eq!(
            string_trap_range(&MOVSQ, 0x1010, 0x0100, false, 0x1008, 8),
            Some(Range { addr: 0x1008, len: 8, is_write: true })
        );
        // Downward, the elements done lie above the register.
        assert_eq!(
            string_trap_range(&STOSB, 0x1009, 0, true, 0x1008, 8),
            Some(Range { addr: 0x100a, len: 6, is_write: true })
        );
        assert_eq!(string_trap_range(&STOSB, 0x1000, 0, false, 0x1008, 8), None);
    }
}
