//! Instruction decoding on the signal path (iced-x86): memory operands of an interrupted instruction.
//!
//! Public API (used by the sampler and the watchpoint trap handler):
//!
//! ```text
//! pub struct Regs { pub gpr: [u64; 16], pub rip: u64, pub rflags: u64 }    // gpr: RAX,RCX,RDX,RBX,RSP,RBP,RSI,RDI,R8..R15
//! pub trait CodeReader { fn read(&self, addr: u64, buf: &mut [u8]) -> usize; }
//! pub struct CodeSlice<'a> { pub base: u64, pub bytes: &'a [u8] }        // CodeReader over a byte slice
//! pub struct MemAccess { pub pc: u64, pub len: u8, pub addr: u64, pub addr_known: bool, pub size: u8,
//!                        pub is_read: bool, pub is_write: bool, pub locked: bool }
//! pub const MAX_LOOKAHEAD: usize = 8;
//! pub const MAX_STEPS: usize = 32;
//! pub fn warm_up();
//! pub fn reach(code: &dyn CodeReader, regs: &Regs, bounds: &Bounds, max_steps: usize) -> Result<Reached, Miss>;
//! pub fn reach_ahead(code: &dyn CodeReader, regs: &Regs, bounds: &Bounds, max_steps: usize, want: usize)
//!     -> Result<Ahead, Miss>;                   // the first access and up to `want - 1` after it
//! pub fn access_at(code: &dyn CodeReader, regs: &Regs, max_lookahead: usize) -> Option<MemAccess>; // straight-line reach
//! pub fn access_ending_at(code: &dyn CodeReader, func_start: u64, func_size: u64, rip: u64, regs: &Regs)
//!     -> Option<MemAccess>;
//! pub fn trap_access(code: &dyn CodeReader, func_start: u64, func_size: u64, rip: u64, regs: &Regs,
//!     window: (u64, u64), opmask: &dyn Fn(u32) -> Option<u64>) -> Option<MemAccess>;
//!                                         // access_ending_at + string instructions + AVX-512 masks
//! ```
//!
//! Signal safety: after [`warm_up`] nothing here allocates (a pool of pre-grown iced `InstructionInfoFactory`s
//! is claimed with a non-blocking try-lock; `tests/decode_noalloc.rs` checks this with a counting allocator),
//! takes a blocking lock, or indexes without a check. Code bytes are read only through the caller's
//! [`CodeReader`] into a fixed stack buffer. Without [`warm_up`], or with every pool slot busy, the entry
//! points find nothing. [`reach`] follows the thread's path with the interpreter in `emulate`.
//!
//! Only the first explicit memory operand of an instruction is reported. Not reported (`None`): FS/GS
//! (thread-local) operands, implicit stack operations (push, pop, call, ret, enter, leave), REP/REPNE string
//! instructions, VSIB gathers and scatters, operands without a known size up to 255 bytes (xsave, …), and
//! address-only forms (LEA, multi-byte NOP, prefetch). [`reach`] reports REP string instructions and calls
//! to libc's memory and string functions as byte ranges ([`Reached::Ranges`]); [`trap_access`] decodes a
//! trap in a string instruction from the watched window.

mod calls;
mod classify;
mod emulate;
mod pool;
mod stream;

pub use calls::{MemFn, Range, Ranges, StringOp, MAX_STRING, SYMBOLS};
pub use emulate::{Ahead, Bounds, Miss, AHEAD};

use classify::{address, classify, string_op, Candidate, Class};
use core::ops::ControlFlow;
use iced_x86::Instruction;
use stream::scan;

/// The interrupted thread's integer registers, as saved in its signal frame.
///
/// Note the order differs from `ucontext_t.uc_mcontext.gregs` (glibc `REG_*`: R8=0..R15=7, RDI=8, RSI=9,
/// RBP=10, RBX=11, RDX=12, RAX=13, RCX=14, RSP=15, RIP=16, EFL=17): map them by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8..R15 (iced/hardware register numbering).
    pub gpr: [u64; 16],
    pub rip: u64,
    pub rflags: u64,
}

/// Reads code bytes without faulting: fills a prefix of `buf` from `addr` and returns how many bytes it read
/// (0 when `addr` is unmapped). The runtime implements it with `process_vm_readv` on itself.
pub trait CodeReader {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize;
}

/// A [`CodeReader`] over bytes that live at address `base` (tests, and code already copied out).
#[derive(Clone, Copy, Debug)]
pub struct CodeSlice<'a> {
    pub base: u64,
    pub bytes: &'a [u8],
}

impl CodeReader for CodeSlice<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let Some(off) = addr.checked_sub(self.base).and_then(|o| usize::try_from(o).ok()) else { return 0 };
        let Some(src) = self.bytes.get(off..) else { return 0 };
        let n = src.len().min(buf.len());
        match (buf.get_mut(..n), src.get(..n)) {
            (Some(dst), Some(src)) => {
                dst.copy_from_slice(src);
                n
            }
            _ => 0,
        }
    }
}

/// One memory access by one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAccess {
    /// Address of the accessing instruction.
    pub pc: u64,
    /// Length of the accessing instruction in bytes.
    pub len: u8,
    /// First byte accessed; meaningful only when `addr_known`.
    pub addr: u64,
    /// `false` when the address cannot be recomputed from the registers given: in [`access_ending_at`], the
    /// instruction (possibly conditionally) wrote a register its address depends on (`mov rax, [rax]`).
    /// The caller should then fall back to the watched range.
    pub addr_known: bool,
    /// Bytes touched (1, 2, 4, 8, 16, 32, 64, or e.g. 10 for an x87 extended load).
    pub size: u8,
    pub is_read: bool,
    pub is_write: bool,
    /// LOCK prefix, or XCHG with memory (implicitly locked).
    pub locked: bool,
    /// How [`reach`] got from the interrupted PC to this access across calls and returns.
    pub path: CallPath,
}

/// Calls and returns [`reach`] followed on its way to the access, to place the access in the stack that
/// was unwound from the interrupted registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallPath {
    /// Return addresses of calls made and not returned from, outermost first (the first `depth`).
    pub entered: [u64; CallPath::MAX_DEPTH],
    pub depth: u8,
    /// Frames of the interrupted stack returned from.
    pub left: u8,
}

impl CallPath {
    pub const MAX_DEPTH: usize = 4;

    /// The stack of the access: `access_pc`, the return addresses of the calls entered (innermost
    /// first), then the callers of the interrupted frame (`callers[0]` is its return address) minus
    /// the frames returned from. Writes into `out`; returns how many entries.
    pub fn stack_of(&self, access_pc: u64, callers: &[u64], out: &mut [u64]) -> usize {
        let entered = self.entered[..usize::from(self.depth).min(Self::MAX_DEPTH)].iter().rev();
        let kept = callers.get(usize::from(self.left)..).unwrap_or_default();
        let all = std::iter::once(&access_pc).chain(entered).chain(kept);
        out.iter_mut().zip(all).map(|(slot, &pc)| *slot = pc).count()
    }

    fn called(&mut self, return_address: u64) {
        if let Some(slot) = self.entered.get_mut(usize::from(self.depth)) {
            *slot = return_address;
        }
        self.depth = self.depth.saturating_add(1);
    }

    fn returned(&mut self) {
        if self.depth > 0 {
            self.depth -= 1;
        } else {
            self.left = self.left.saturating_add(1);
        }
    }
}

/// What [`reach`] found to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    /// One instruction's memory operand.
    Access(MemAccess),
    /// Byte ranges: a REP string instruction's, or a libc memory or string function's about to be called.
    Ranges(RangeAccess),
}

impl Reached {
    /// The single access, if that is what was found.
    pub fn access(self) -> Option<MemAccess> {
        match self {
            Reached::Access(access) => Some(access),
            Reached::Ranges(_) => None,
        }
    }
}

/// Byte ranges one instruction, or one call to a libc memory or string function, is about to access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeAccess {
    /// The accessing PC: the string instruction, or the entry of the libc function called.
    pub pc: u64,
    /// The covered instruction that makes the access: the string instruction, or the call (or jump).
    pub site: u64,
    /// The libc function called (`None`: a string instruction).
    pub function: Option<MemFn>,
    /// Not on the thread's own stack; at least one.
    pub ranges: Ranges,
    /// Calls and returns on the way; a call to the libc function is entered (its return address).
    pub path: CallPath,
}

/// A sensible `max_lookahead` for [`access_at`].
pub const MAX_LOOKAHEAD: usize = 8;

/// Creates the decoder state and exercises the decoder once: iced builds its decoder tables on first use, and
/// the factory pool is created here. Allocates: call it at init, before any signal can reach the handlers.
/// Idempotent and thread-safe. Before it has run, [`access_at`] and [`access_ending_at`] return `None`
/// without decoding (and so without allocating).
pub fn warm_up() {
    pool::fill();
    // mov rax, [rbx+rcx*8+0x10]; add [rip+0x100], edx — touches the decoder and info tables.
    let code = CodeSlice { base: 0x1000, bytes: b"\x48\x8b\x44\xcb\x10\x01\x15\x00\x01\x00\x00" };
    let regs = Regs::default();
    let _ = access_at(&code, &Regs { rip: 0x1000, ..regs }, 1);
    let _ = access_ending_at(&code, 0x1000, 11, 0x1005, &regs);
}

/// A pool hint that differs between threads (their stacks differ) and between nested signal frames.
fn pool_hint() -> usize {
    let marker = 0u8;
    (core::ptr::addr_of!(marker) as usize) >> 10
}

fn access_of(insn: &Instruction, cand: Candidate, addr: u64, addr_known: bool) -> MemAccess {
    MemAccess {
        pc: insn.ip(),
        len: u8::try_from(insn.len()).unwrap_or(u8::MAX),
        addr,
        addr_known,
        size: cand.size,
        is_read: cand.is_read,
        is_write: cand.is_write,
        locked: cand.locked,
        path: CallPath::default(),
    }
}

/// The memory access the thread interrupted at `regs.rip` is about to make, looking only at straight-line
/// code: [`reach`] with no covered code to branch into and nothing counted as the own stack, for at most
/// `max_lookahead + 1` instructions. `None` when there is none.
pub fn access_at(code: &dyn CodeReader, regs: &Regs, max_lookahead: usize) -> Option<MemAccess> {
    let nowhere = |_: u64| false;
    let no_library = |_: u64| None;
    let bounds = Bounds { own_stack: (0, 0), covered: &nowhere, library: &no_library };
    reach(code, regs, &bounds, max_lookahead.saturating_add(1)).ok().and_then(Reached::access)
}

/// Instructions [`reach`] follows at most (GWPSan's emulation goes 20 deep).
pub const MAX_STEPS: usize = 32;

/// The next memory access the interrupted thread makes outside its own stack, following its real path
/// from `regs` (branches, calls and returns inside covered code) for at most `max_steps` instructions;
/// or why there is none to watch. See [`emulate`]. Async-signal-safe after [`warm_up`].
pub fn reach(code: &dyn CodeReader, regs: &Regs, bounds: &Bounds<'_>, max_steps: usize) -> Result<Reached, Miss> {
    reach_ahead(code, regs, bounds, max_steps, 1).and_then(|ahead| ahead.get(0).ok_or(Miss::NoAccess))
}

/// The first access [`reach`] finds and up to `want - 1` more after it (see [`emulate::reach_ahead`]).
pub fn reach_ahead(
    code: &dyn CodeReader,
    regs: &Regs,
    bounds: &Bounds<'_>,
    max_steps: usize,
    want: usize,
) -> Result<Ahead, Miss> {
    let mut claimed = pool::claim(pool_hint()).ok_or(Miss::Unemulated)?;
    let factory = claimed.factory().ok_or(Miss::Unemulated)?;
    emulate::reach_ahead(code, factory, regs, bounds, max_steps, want)
}

/// Emulates the one register-only instruction at `regs.rip`: the registers after it, the mask of those
/// known, and the mask of known status flags (tests compare this with the CPU).
pub fn emulate_step(code: &dyn CodeReader, regs: &Regs) -> Result<(Regs, u16, u64), Miss> {
    let mut claimed = pool::claim(pool_hint()).ok_or(Miss::Unemulated)?;
    let factory = claimed.factory().ok_or(Miss::Unemulated)?;
    emulate::step(code, factory, regs)
}

/// The access made by the instruction that ends at `rip`, for a data-breakpoint trap (the CPU reports the trap
/// after the access, with RIP at the next instruction).
///
/// Decodes forward from `func_start` (the covered function containing the access; `func_size` bytes long)
/// until an instruction ends exactly at `rip`, and returns its watchable access with the address computed
/// from the trap's `regs`; `addr_known` is `false` if the instruction wrote one of its own address registers.
/// `None` when `rip` is not an instruction boundary inside the function, when the code cannot be read or
/// decoded, or when that instruction makes no watchable access (see the module docs; a REP string
/// instruction traps with RIP still on itself and is not found either).
pub fn access_ending_at(
    code: &dyn CodeReader,
    func_start: u64,
    func_size: u64,
    rip: u64,
    regs: &Regs,
) -> Option<MemAccess> {
    let func_end = func_start.checked_add(func_size)?;
    if rip <= func_start || rip > func_end {
        return None;
    }
    // Claim first: the pool exists only after warm_up, which also built iced's lazily created decoder tables.
    let mut claimed = pool::claim(pool_hint())?;
    let factory = claimed.factory()?;
    let insn = ending_at(code, func_start, func_end, rip)?;
    plain_access(factory, &insn, regs, None)
}

/// The first instruction of `[func_start, func_end)` at or after `from` that makes a watchable access
/// through a base other than the stack and frame pointers (a global, the heap through a register): where
/// a code breakpoint makes a sample land on an access that may be shared. Decodes from `func_start`, so
/// that `from` need not be an instruction boundary. `None` when there is none after `from`, or the code
/// cannot be read. Async-signal-safe after [`warm_up`].
pub fn shared_access_from(code: &dyn CodeReader, func_start: u64, func_end: u64, from: u64) -> Option<u64> {
    let mut claimed = pool::claim(pool_hint())?;
    let factory = claimed.factory()?;
    scan(code, func_start, func_end, |insn| {
        if insn.ip() < from {
            return ControlFlow::Continue(());
        }
        let (class, _) = classify(factory, insn);
        match class {
            Class::Access(_) if !matches!(insn.memory_base(), iced_x86::Register::RSP | iced_x86::Register::RBP) => {
                ControlFlow::Break(Some(insn.ip()))
            }
            _ => ControlFlow::Continue(()),
        }
    })
}

/// The instruction of `[func_start, func_end)` that ends exactly at `rip`.
fn ending_at(code: &dyn CodeReader, func_start: u64, func_end: u64, rip: u64) -> Option<Instruction> {
    scan(code, func_start, func_end, |insn| match insn.next_ip() {
        end if end == rip => ControlFlow::Break(Some(*insn)),
        end if end > rip => ControlFlow::Break(None),
        _ => ControlFlow::Continue(()),
    })
}

/// `insn`'s watchable access, its address computed from `regs` (see [`access_ending_at`]). An AVX-512
/// masked access is narrowed to the span of the elements its opmask selects when `opmask` can read the
/// register (`None`: the whole operand), and is no access at all when no element is selected.
fn plain_access(
    factory: &mut iced_x86::InstructionInfoFactory,
    insn: &Instruction,
    regs: &Regs,
    opmask: Option<&dyn Fn(u32) -> Option<u64>>,
) -> Option<MemAccess> {
    let (Class::Access(cand), written) = classify(factory, insn) else { return None };
    let mut access = match address(insn, cand.operand, regs) {
        Some((addr, used)) => access_of(insn, cand, addr, used & written == 0),
        None => access_of(insn, cand, 0, false),
    };
    if let (Some((k, element)), Some(read)) = (cand.mask, opmask) {
        let bits = read(k)?;
        let elements = u32::from(cand.size / element).min(64);
        let bits = if elements >= 64 { bits } else { bits & ((1u64 << elements) - 1) };
        if bits == 0 {
            return None;
        }
        let (first, last) = (bits.trailing_zeros() as u8, 63 - bits.leading_zeros() as u8);
        access.addr = access.addr.wrapping_add(u64::from(first) * u64::from(element));
        access.size = (last - first + 1) * element;
    }
    Some(access)
}

/// The access behind a watchpoint trap at `rip` in the function `[func_start, func_start + func_size)`,
/// which has code but need not be covered (a libc memory function), with the watched window
/// `(start, len)`: [`access_ending_at`], and besides it string instructions, whose trap comes after the
/// element that touched the window with `rdi`/`rsi` already moved on — either the string instruction
/// ending at `rip`, or (a REP instruction trapping between two of its elements, RIP still on itself) the
/// one at `rip` when the instruction ending there touched nothing in the window. A string instruction's
/// access is the part of the window it has accessed by now (see `calls::string_trap_range`): `addr_known`,
/// at most the window's length. An AVX-512 masked access covers the span of the elements selected by its
/// opmask register (`opmask(k)` reads `k`; `None` when it cannot: then there is no access to judge).
/// Async-signal-safe after [`warm_up`].
pub fn trap_access(
    code: &dyn CodeReader,
    func_start: u64,
    func_size: u64,
    rip: u64,
    regs: &Regs,
    window: (u64, u64),
    opmask: &dyn Fn(u32) -> Option<u64>,
) -> Option<MemAccess> {
    let func_end = func_start.checked_add(func_size)?;
    if rip <= func_start || rip > func_end {
        return None;
    }
    let mut claimed = pool::claim(pool_hint())?;
    let factory = claimed.factory()?;
    let ending = ending_at(code, func_start, func_end, rip);
    if let Some(insn) = ending.as_ref() {
        if let Some(op) = string_op(insn) {
            return string_trap(insn, &op, regs, window);
        }
    }
    let plain = ending.as_ref().and_then(|insn| plain_access(factory, insn, regs, Some(opmask)));
    let (start, len) = window;
    let meets_window = |a: &MemAccess| {
        !a.addr_known || (a.addr < start.saturating_add(len) && start < a.addr.saturating_add(u64::from(a.size)))
    };
    if plain.as_ref().is_some_and(meets_window) {
        return plain;
    }
    if rip < func_end {
        let mut buf = [0u8; stream::MAX_INSN_LEN];
        let got = code.read(rip, &mut buf);
        let at = buf.get(..got).and_then(|bytes| {
            let mut decoder = iced_x86::Decoder::try_with_ip(64, bytes, rip, iced_x86::DecoderOptions::NONE).ok()?;
            let insn = decoder.decode();
            (!insn.is_invalid()).then_some(insn)
        });
        if let Some(insn) = at {
            if let Some(op) = string_op(&insn).filter(|op| op.rep) {
                if let Some(found) = string_trap(&insn, &op, regs, window) {
                    return Some(found);
                }
            }
        }
    }
    plain
}

fn string_trap(insn: &Instruction, op: &StringOp, regs: &Regs, window: (u64, u64)) -> Option<MemAccess> {
    const RSI: usize = 6;
    const RDI: usize = 7;
    const DF: u64 = 1 << 10;
    let (rdi, rsi) = (*regs.gpr.get(RDI)?, *regs.gpr.get(RSI)?);
    let range = calls::string_trap_range(op, rdi, rsi, regs.rflags & DF != 0, window.0, window.1)?;
    Some(MemAccess {
        pc: insn.ip(),
        len: u8::try_from(insn.len()).unwrap_or(u8::MAX),
        addr: range.addr,
        addr_known: true,
        size: u8::try_from(range.len).ok()?,
        is_read: !range.is_write,
        is_write: range.is_write,
        locked: false,
        path: CallPath::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_path_places_the_access_in_the_unwound_stack() {
        let callers = [0x100, 0x200, 0x300];
        let mut out = [0u64; 8];
        // Same frame: the access, then the interrupted frame's callers.
        let n = CallPath::default().stack_of(0xa, &callers, &mut out);
        assert_eq!(&out[..n], &[0xa, 0x100, 0x200, 0x300]);
        // Two calls entered on the way: their return addresses, innermost first.
        let mut path = CallPath::default();
        path.called(0x50);
        path.called(0x60);
        let n = path.stack_of(0xa, &callers, &mut out);
        assert_eq!(&out[..n], &[0xa, 0x60, 0x50, 0x100, 0x200, 0x300]);
        // A call and its return, then a return out of the interrupted frame.
        let mut path = CallPath::default();
        path.called(0x50);
        path.returned();
        path.returned();
        let n = path.stack_of(0xa, &callers, &mut out);
        assert_eq!(&out[..n], &[0xa, 0x200, 0x300]);
        // Bounded by `out`.
        assert_eq!(CallPath::default().stack_of(0xa, &callers, &mut out[..2]), 2);
    }
}
