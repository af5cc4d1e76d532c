//! Following the interrupted thread's real path to its next memory access.
//!
//! A timer sample usually lands a few instructions *after* a loop's access
//! (`incq [mem]; dec rcx; jnz loop`): straight-line look-ahead stops at the
//! branch and nothing is watched. [`reach`] instead runs a small x86-64
//! interpreter from the interrupted registers: integer moves, LEA, ALU ops
//! with exact RFLAGS, shifts, setcc/cmovcc, push/pop, and jmp/jcc/call/ret
//! decided by the computed state, for up to `max_steps` instructions. The
//! first memory access outside the thread's own stack whose address is known
//! is the answer. Accesses to the thread's own stack are emulated (stores
//! into a small store buffer, loads from it or from memory, read without
//! faulting) and passed over. Anything it cannot emulate exactly stops it.
//!
//! Two kinds of access end the walk with byte ranges instead of one operand
//! ([`Reached::Ranges`]): a REP string instruction (`rep movsb`, `rep stosq`,
//! …: `rdi`, `rsi` and `rcx` give the ranges), and a call or jump — direct,
//! through the PLT, or through a GOT slot — to one of libc's memory and string
//! functions ([`Bounds::library`] knows their resolved addresses): the ranges
//! come from the arguments in `rdi`, `rsi`, `rdx` (see `calls`).
//!
//! Flags are tracked bit by bit: a flag an instruction leaves undefined
//! (AF after a logic op, OF after a multi-bit shift) is unknown, and a
//! branch that needs an unknown flag stops the walk. Registers are known or
//! not (a value loaded through FS/GS is not). No allocation, no lock: the
//! caller provides the decoder factory and the memory reader.

use super::calls::{self, MemFn, Ranges};
use super::classify::{address, classify, string_op, Candidate, Class, GprMask};
use super::{access_of, CallPath, CodeReader, MemAccess, RangeAccess, Reached, Regs};
use iced_x86::{
    ConditionCode, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpKind,
    Register,
};
use racewatch_instrument::x86;

/// Why [`reach`] found no access to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// Every access within reach was on the thread's own stack.
    OwnStack,
    /// `max_steps` instructions ran without a memory access.
    NoAccess,
    /// An instruction the interpreter does not emulate (or code it cannot read or decode).
    Unemulated,
    /// The next access's address depends on a value the interpreter does not know.
    AddressUnknown,
    /// Control left covered code (a call or jump out, a return into uncovered code).
    LeftCovered,
}

/// Where the walk may go and what counts as the thread's own stack.
pub struct Bounds<'a> {
    /// `[lo, hi)` of the sampled thread's private stack: accesses there are not watched.
    pub own_stack: (u64, u64),
    /// Whether a control transfer target lies in covered code.
    pub covered: &'a dyn Fn(u64) -> bool,
    /// The libc memory or string function whose resolved entry is at an address, if any.
    pub library: &'a dyn Fn(u64) -> Option<MemFn>,
}

const CF: u64 = 1 << 0;
const PF: u64 = 1 << 2;
const AF: u64 = 1 << 4;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;
/// The direction flag: string instructions walk downward.
const DF: u64 = 1 << 10;
const STATUS: u64 = CF | PF | AF | ZF | SF | OF;

/// Stores the walk made to the own stack (push, call, spills), newest last.
const STORES: usize = 16;

struct Machine {
    gpr: [u64; 16],
    /// Bit i: `gpr[i]` is known.
    known: u16,
    rip: u64,
    flags: u64,
    /// Which of the status flags are known.
    flags_known: u64,
    stores: [(u64, u8, u64); STORES],
    nstores: usize,
    path: CallPath,
    /// The accesses passed on the way to the next one (see [`reach_ahead`]): their memory is another
    /// thread's as much as this one's, so what it holds is unknown here.
    opaque: [(u64, u8); AHEAD],
    nopaque: usize,
}

/// Most accesses [`reach_ahead`] collects.
pub const AHEAD: usize = 4;

/// The accesses ahead, in the order the thread will make them: up to [`AHEAD`] of them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ahead {
    found: [Option<Reached>; AHEAD],
    len: usize,
}

impl Ahead {
    /// The accesses found, first first.
    pub fn iter(&self) -> impl Iterator<Item = Reached> + '_ {
        self.found[..self.len].iter().flatten().copied()
    }

    /// The `i`-th access ahead.
    pub fn get(&self, i: usize) -> Option<Reached> {
        self.found[..self.len].get(i).copied().flatten()
    }

    fn push(&mut self, reached: Reached) -> bool {
        if let Some(slot) = self.found.get_mut(self.len) {
            *slot = Some(reached);
            self.len += 1;
        }
        self.len == AHEAD
    }
}

/// Runs from `regs` for at most `max_steps` instructions and collects the accesses the thread will make
/// outside its own stack, up to `want` (at most [`AHEAD`]): the first, then those after it that it makes
/// as surely, once it runs on. A passed access's memory is shared, so what it holds is unknown here: a
/// branch or an address that depends on it ends the walk. A call to a libc memory or string function or
/// a REP string instruction (a range access) ends it too. An error only when nothing was found.
pub fn reach_ahead(
    code: &dyn CodeReader,
    factory: &mut InstructionInfoFactory,
    regs: &Regs,
    bounds: &Bounds<'_>,
    max_steps: usize,
    want: usize,
) -> Result<Ahead, Miss> {
    let mut ahead = Ahead::default();
    match walk(code, factory, regs, bounds, max_steps, want.clamp(1, AHEAD), &mut ahead) {
        Ok(()) => Ok(ahead),
        Err(_) if ahead.len > 0 => Ok(ahead),
        Err(miss) => Err(miss),
    }
}

fn walk(
    code: &dyn CodeReader,
    factory: &mut InstructionInfoFactory,
    regs: &Regs,
    bounds: &Bounds<'_>,
    max_steps: usize,
    want: usize,
    ahead: &mut Ahead,
) -> Result<(), Miss> {
    let mut m = Machine::new(regs);
    let mut saw_own_stack = false;
    for _ in 0..max_steps {
        let insn = decode_at(code, m.rip).ok_or(Miss::Unemulated)?;
        match insn.flow_control() {
            FlowControl::Next => {}
            FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::Return
            | FlowControl::IndirectBranch
            | FlowControl::IndirectCall => {
                if let Some((function, entry)) = m.branch(code, &insn, bounds)? {
                    ahead.push(Reached::Ranges(m.library_call(code, &insn, function, entry, bounds)?));
                    return Ok(());
                }
                continue;
            }
            _ => return Err(Miss::Unemulated),
        }
        let (class, written) = classify(factory, &insn);
        let stack_op = insn.is_stack_instruction();
        match class {
            Class::Stop => return Err(Miss::Unemulated),
            // An AVX-512 masked access: which of its bytes it touches depends on an opmask register.
            Class::Access(cand) if cand.mask.is_some() => return Err(Miss::Unemulated),
            Class::Access(cand) if !stack_op => {
                let regs_now = m.regs();
                let (addr, used) = address(&insn, cand.operand, &regs_now).ok_or(Miss::AddressUnknown)?;
                if used & !m.known != 0 {
                    return Err(Miss::AddressUnknown);
                }
                if !bounds.in_own_stack(addr) {
                    let found = Reached::Access(MemAccess { path: m.path, ..access_of(&insn, cand, addr, true) });
                    if ahead.push(found) || ahead.len >= want {
                        return Ok(());
                    }
                    if let Some(slot) = m.opaque.get_mut(m.nopaque) {
                        *slot = (addr, cand.size);
                        m.nopaque += 1;
                    }
                } else {
                    saw_own_stack = true;
                }
                m.execute(code, &insn, Some((addr, cand)), written)?;
            }
            Class::Skip if !stack_op => {
                // A REP string instruction with rcx = 0 touches nothing and changes nothing: step on.
                if let Some(ranges) = m.string_access(&insn, bounds)? {
                    ahead.push(Reached::Ranges(ranges));
                    return Ok(());
                }
            }
            _ => m.execute(code, &insn, None, written)?,
        }
        m.rip = insn.next_ip();
    }
    Err(if saw_own_stack { Miss::OwnStack } else { Miss::NoAccess })
}

/// Emulates the single instruction at `regs.rip` (which must make no access outside the own stack):
/// the registers after it, which of them are known, and the known status flags. For tests against
/// the real CPU.
pub fn step(
    code: &dyn CodeReader,
    factory: &mut InstructionInfoFactory,
    regs: &Regs,
) -> Result<(Regs, u16, u64), Miss> {
    let mut m = Machine::new(regs);
    let insn = decode_at(code, m.rip).ok_or(Miss::Unemulated)?;
    let (class, written) = classify(factory, &insn);
    if !matches!(class, Class::NoMem) || insn.flow_control() != FlowControl::Next {
        return Err(Miss::Unemulated);
    }
    m.execute(code, &insn, None, written)?;
    m.rip = insn.next_ip();
    Ok((m.regs(), m.known, m.flags_known))
}

impl Bounds<'_> {
    fn in_own_stack(&self, addr: u64) -> bool {
        (self.own_stack.0..self.own_stack.1).contains(&addr)
    }
}

/// Decodes the one instruction at `rip`.
fn decode_at(code: &dyn CodeReader, rip: u64) -> Option<Instruction> {
    let mut buf = [0u8; 15];
    let got = code.read(rip, &mut buf);
    let bytes = buf.get(..got)?;
    let mut decoder = Decoder::try_with_ip(64, bytes, rip, DecoderOptions::NONE).ok()?;
    let insn = decoder.decode();
    (!insn.is_invalid()).then_some(insn)
}

/// Where a PLT stub at `stub` jumps: `[endbr64;] [bnd] jmp qword ptr [rip + slot]` reads its GOT slot.
/// `None` for anything else (and for a slot that cannot be read).
fn through_plt(code: &dyn CodeReader, stub: u64) -> Option<u64> {
    let mut insn = decode_at(code, stub)?;
    if insn.mnemonic() == Mnemonic::Endbr64 {
        insn = decode_at(code, insn.next_ip())?;
    }
    if insn.mnemonic() != Mnemonic::Jmp || insn.op0_kind() != OpKind::Memory || !insn.is_ip_rel_memory_operand() {
        return None;
    }
    let mut slot = [0u8; 8];
    (code.read(insn.ip_rel_memory_address(), &mut slot) == 8).then(|| u64::from_le_bytes(slot))
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn parity(value: u64) -> bool {
    (value as u8).count_ones() % 2 == 0
}

fn gpr_index(reg: Register) -> Option<usize> {
    let full = reg.full_register();
    full.is_gpr64().then(|| full.number())
}

impl Machine {
    /// The interrupted state: every register and status flag known, nothing stored yet.
    fn new(regs: &Regs) -> Machine {
        Machine {
            gpr: regs.gpr,
            known: u16::MAX,
            rip: regs.rip,
            flags: regs.rflags,
            flags_known: STATUS,
            stores: [(0, 0, 0); STORES],
            nstores: 0,
            path: CallPath::default(),
            opaque: [(0, 0); AHEAD],
            nopaque: 0,
        }
    }

    fn regs(&self) -> Regs {
        Regs { gpr: self.gpr, rip: self.rip, rflags: self.flags }
    }

    fn reg(&self, reg: Register) -> Option<u64> {
        let i = gpr_index(reg)?;
        if self.known & (1 << i) == 0 {
            return None;
        }
        let full = self.gpr[i];
        Some(match reg {
            Register::AH | Register::CH | Register::DH | Register::BH => (full >> 8) & 0xff,
            _ => full & mask(reg.size() as u32 * 8),
        })
    }

    fn set_reg(&mut self, reg: Register, value: Option<u64>) -> Result<(), Miss> {
        let i = gpr_index(reg).ok_or(Miss::Unemulated)?;
        let old = (self.known & (1 << i) != 0).then_some(self.gpr[i]);
        let new = match (reg, reg.size()) {
            (Register::AH | Register::CH | Register::DH | Register::BH, _) => {
                old.zip(value).map(|(o, v)| (o & !0xff00) | (v & 0xff) << 8)
            }
            (_, 8) => value,
            (_, 4) => value.map(|v| v & 0xffff_ffff),
            (_, size) => {
                let m = mask(size as u32 * 8);
                old.zip(value).map(|(o, v)| (o & !m) | (v & m))
            }
        };
        match new {
            Some(v) => {
                self.gpr[i] = v;
                self.known |= 1 << i;
            }
            None => self.known &= !(1 << i),
        }
        Ok(())
    }

    /// A load of `size` bytes from the own stack: the newest covering store, else memory.
    fn load(&self, code: &dyn CodeReader, addr: u64, size: u8) -> Option<u64> {
        let (lo, hi) = (u128::from(addr), u128::from(addr) + u128::from(size));
        let overlaps = |&(at, len): &(u64, u8)| lo < u128::from(at) + u128::from(len) && u128::from(at) < hi;
        for &(at, len, value) in self.stores[..self.nstores].iter().rev() {
            if overlaps(&(at, len)) {
                let (at_lo, at_hi) = (u128::from(at), u128::from(at) + u128::from(len));
                if at_lo <= lo && hi <= at_hi {
                    return Some((value >> ((addr - at) * 8)) & mask(u32::from(size) * 8));
                }
                return None;
            }
        }
        if self.opaque[..self.nopaque].iter().any(overlaps) {
            return None;
        }
        let mut bytes = [0u8; 8];
        let buf = bytes.get_mut(..usize::from(size))?;
        (code.read(addr, buf) == buf.len()).then(|| u64::from_le_bytes(bytes))
    }

    fn store(&mut self, addr: u64, size: u8, value: Option<u64>) -> Result<(), Miss> {
        let value = value.ok_or(Miss::Unemulated)?;
        if self.nstores == STORES {
            return Err(Miss::Unemulated);
        }
        self.stores[self.nstores] = (addr, size, value & mask(u32::from(size) * 8));
        self.nstores += 1;
        Ok(())
    }

    fn push(&mut self, value: Option<u64>) -> Result<(), Miss> {
        let rsp = self.reg(Register::RSP).ok_or(Miss::AddressUnknown)?.wrapping_sub(8);
        self.store(rsp, 8, value)?;
        self.set_reg(Register::RSP, Some(rsp))
    }

    fn pop(&mut self, code: &dyn CodeReader) -> Result<Option<u64>, Miss> {
        let rsp = self.reg(Register::RSP).ok_or(Miss::AddressUnknown)?;
        let value = self.load(code, rsp, 8);
        self.set_reg(Register::RSP, Some(rsp.wrapping_add(8)))?;
        Ok(value)
    }

    fn flag(&self, bit: u64) -> Option<bool> {
        (self.flags_known & bit == bit).then_some(self.flags & bit != 0)
    }

    /// Sets the status flags in `defined` from `values`; the flags in `undefined` become unknown.
    fn set_flags(&mut self, defined: u64, values: u64, undefined: u64) {
        self.flags = (self.flags & !defined) | (values & defined);
        self.flags_known = (self.flags_known | defined) & !undefined;
    }

    fn condition(&self, cc: ConditionCode) -> Option<bool> {
        let f = |bit| self.flag(bit);
        Some(match cc {
            ConditionCode::o => f(OF)?,
            ConditionCode::no => !f(OF)?,
            ConditionCode::b => f(CF)?,
            ConditionCode::ae => !f(CF)?,
            ConditionCode::e => f(ZF)?,
            ConditionCode::ne => !f(ZF)?,
            ConditionCode::be => f(CF)? || f(ZF)?,
            ConditionCode::a => !f(CF)? && !f(ZF)?,
            ConditionCode::s => f(SF)?,
            ConditionCode::ns => !f(SF)?,
            ConditionCode::p => f(PF)?,
            ConditionCode::np => !f(PF)?,
            ConditionCode::l => f(SF)? != f(OF)?,
            ConditionCode::ge => f(SF)? == f(OF)?,
            ConditionCode::le => f(ZF)? || f(SF)? != f(OF)?,
            ConditionCode::g => !f(ZF)? && f(SF)? == f(OF)?,
            ConditionCode::None => return None,
        })
    }

    /// Follows a control transfer. `Some((function, entry))`: it calls or jumps to a libc memory or
    /// string function (its resolved entry), which the walk does not enter.
    fn branch(
        &mut self,
        code: &dyn CodeReader,
        insn: &Instruction,
        bounds: &Bounds<'_>,
    ) -> Result<Option<(MemFn, u64)>, Miss> {
        let next = insn.next_ip();
        let mut target = match insn.flow_control() {
            FlowControl::ConditionalBranch => {
                if insn.condition_code() == ConditionCode::None {
                    return Err(Miss::Unemulated); // loop, jrcxz
                }
                if self.condition(insn.condition_code()).ok_or(Miss::Unemulated)? {
                    insn.near_branch_target()
                } else {
                    next
                }
            }
            FlowControl::UnconditionalBranch | FlowControl::Call if insn.op0_kind() != OpKind::Register => {
                if !matches!(insn.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64) {
                    return Err(Miss::Unemulated);
                }
                insn.near_branch_target()
            }
            FlowControl::IndirectBranch | FlowControl::IndirectCall | FlowControl::UnconditionalBranch
                if insn.op0_kind() == OpKind::Register =>
            {
                self.reg(insn.op0_register()).ok_or(Miss::Unemulated)?
            }
            // Through memory: a GOT slot (`call [rip + memcpy@GOTPCREL]`), a vtable, a jump table.
            FlowControl::IndirectBranch | FlowControl::IndirectCall if insn.op0_kind() == OpKind::Memory => {
                if matches!(insn.memory_segment(), Register::FS | Register::GS) || insn.memory_size().size() != 8 {
                    return Err(Miss::Unemulated);
                }
                let regs = self.regs();
                let (slot, used) = address(insn, 0, &regs).ok_or(Miss::Unemulated)?;
                if used & !self.known != 0 {
                    return Err(Miss::Unemulated);
                }
                self.load(code, slot, 8).ok_or(Miss::Unemulated)?
            }
            FlowControl::Return => {
                if insn.mnemonic() != Mnemonic::Ret {
                    return Err(Miss::Unemulated);
                }
                let target = self.pop(code)?.ok_or(Miss::Unemulated)?;
                if insn.op_count() == 1 {
                    let rsp = self.reg(Register::RSP).ok_or(Miss::Unemulated)?;
                    self.set_reg(Register::RSP, Some(rsp.wrapping_add(u64::from(insn.immediate16()))))?;
                }
                if !(bounds.covered)(target) {
                    return Err(Miss::LeftCovered);
                }
                self.path.returned();
                self.rip = target;
                return Ok(None);
            }
            _ => return Err(Miss::Unemulated),
        };
        if !(bounds.covered)(target) {
            if let Some(function) = (bounds.library)(target) {
                return Ok(Some((function, target)));
            }
            // A PLT stub: where its GOT slot points (a covered function in another module, or libc).
            match through_plt(code, target) {
                Some(resolved) => {
                    if let Some(function) = (bounds.library)(resolved) {
                        return Ok(Some((function, resolved)));
                    }
                    if !(bounds.covered)(resolved) {
                        return Err(Miss::LeftCovered);
                    }
                    target = resolved;
                }
                None => return Err(Miss::LeftCovered),
            }
        }
        if matches!(insn.flow_control(), FlowControl::Call | FlowControl::IndirectCall) {
            self.push(Some(next))?;
            self.path.called(next);
        }
        self.rip = target;
        Ok(None)
    }

    /// The ranges a call (or tail jump) `insn` to the libc function `function` at `entry` is about
    /// to access, from the argument registers; the ranges on the thread's own stack are left out.
    fn library_call(
        &self,
        code: &dyn CodeReader,
        insn: &Instruction,
        function: MemFn,
        entry: u64,
        bounds: &Bounds<'_>,
    ) -> Result<RangeAccess, Miss> {
        let arg = |reg| self.reg(reg).ok_or(Miss::AddressUnknown);
        use MemFn::*;
        let a = arg(Register::RDI)?;
        let b = match function {
            Memset | Strlen | Strnlen => 0,
            _ => arg(Register::RSI)?,
        };
        let n = match function {
            Memcpy | Memmove | Mempcpy | Memset | Memcmp | Bcmp | Memchr | Strnlen | Strncpy | Strncmp => {
                arg(Register::RDX)?
            }
            _ => 0,
        };
        let ranges = calls::ranges(code, function, [a, b, n]).ok_or(Miss::AddressUnknown)?;
        let mut path = self.path;
        if matches!(insn.flow_control(), FlowControl::Call | FlowControl::IndirectCall) {
            path.called(insn.next_ip());
        }
        let ranges = Self::shared(ranges, bounds)?;
        Ok(RangeAccess { pc: entry, site: insn.ip(), function: Some(function), ranges, path })
    }

    /// The ranges a REP string instruction is about to access (`None`: rcx is 0, it does nothing);
    /// any other instruction classified `Skip` (TLS, gathers) is not emulated.
    fn string_access(&self, insn: &Instruction, bounds: &Bounds<'_>) -> Result<Option<RangeAccess>, Miss> {
        let op = string_op(insn).filter(|op| op.rep).ok_or(Miss::Unemulated)?;
        let count = self.reg(Register::RCX).ok_or(Miss::AddressUnknown)?;
        if count == 0 {
            return Ok(None);
        }
        let rdi = if op.writes_rdi || op.reads_rdi { self.reg(Register::RDI).ok_or(Miss::AddressUnknown)? } else { 0 };
        let rsi = if op.reads_rsi { self.reg(Register::RSI).ok_or(Miss::AddressUnknown)? } else { 0 };
        let ranges = calls::string_ranges(&op, rdi, rsi, count, self.flags & DF != 0);
        let ranges = Self::shared(ranges, bounds)?;
        Ok(Some(RangeAccess { pc: insn.ip(), site: insn.ip(), function: None, ranges, path: self.path }))
    }

    /// `ranges` without those on the thread's own stack: `OwnStack` when none is left, `NoAccess` when
    /// there was none.
    fn shared(mut ranges: Ranges, bounds: &Bounds<'_>) -> Result<Ranges, Miss> {
        if ranges.count == 0 {
            return Err(Miss::NoAccess);
        }
        ranges.retain(|r| !bounds.in_own_stack(r.addr));
        if ranges.count == 0 {
            return Err(Miss::OwnStack);
        }
        Ok(ranges)
    }

    /// Value of operand `i` (`mem`: the address and shape of the instruction's memory operand).
    fn read(&self, code: &dyn CodeReader, insn: &Instruction, i: u32, mem: Option<(u64, Candidate)>) -> Option<u64> {
        match insn.op_kind(i) {
            OpKind::Register => self.reg(insn.op_register(i)),
            OpKind::Memory => mem.and_then(|(addr, cand)| self.load(code, addr, cand.size)),
            OpKind::Immediate8
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate64
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64 => Some(insn.immediate(i)),
            _ => None,
        }
    }

    fn write(
        &mut self,
        insn: &Instruction,
        i: u32,
        mem: Option<(u64, Candidate)>,
        value: Option<u64>,
    ) -> Result<(), Miss> {
        match insn.op_kind(i) {
            OpKind::Register => self.set_reg(insn.op_register(i), value),
            OpKind::Memory => {
                let (addr, cand) = mem.ok_or(Miss::Unemulated)?;
                self.store(addr, cand.size, value)
            }
            _ => Err(Miss::Unemulated),
        }
    }

    /// Width in bits of the operation (its first operand).
    fn width(insn: &Instruction, mem: Option<(u64, Candidate)>) -> u32 {
        match insn.op0_kind() {
            OpKind::Register => insn.op0_register().size() as u32 * 8,
            _ => mem.map_or(64, |(_, cand)| u32::from(cand.size) * 8),
        }
    }

    /// Steps over `insn` (which writes the general-purpose registers in `written`).
    fn execute(
        &mut self,
        code: &dyn CodeReader,
        insn: &Instruction,
        mem: Option<(u64, Candidate)>,
        written: GprMask,
    ) -> Result<(), Miss> {
        use Mnemonic::*;
        let bits = Self::width(insn, mem);
        let m = mask(bits);
        let src = |s: &Self, i| s.read(code, insn, i, mem);
        match insn.mnemonic() {
            Nop | Endbr64 | Pause | Prefetchnta | Prefetcht0 | Prefetcht1 | Prefetcht2 | Lfence | Mfence | Sfence => {}
            Mov => {
                let value = src(self, 1);
                self.write(insn, 0, mem, value)?;
            }
            Movzx => {
                let value = src(self, 1);
                self.write(insn, 0, mem, value)?;
            }
            Movsx | Movsxd => {
                let from = match insn.op1_kind() {
                    OpKind::Register => insn.op1_register().size() as u32 * 8,
                    _ => mem.map_or(32, |(_, c)| u32::from(c.size) * 8),
                };
                let value = src(self, 1).map(|v| sign_extend(v, from) & m);
                self.write(insn, 0, mem, value)?;
            }
            Cdqe => self.set_reg(Register::RAX, self.reg(Register::EAX).map(|v| sign_extend(v, 32)))?,
            Cwde => self.set_reg(Register::EAX, self.reg(Register::AX).map(|v| sign_extend(v, 16) & mask(32)))?,
            Cqo => {
                self.set_reg(Register::RDX, self.reg(Register::RAX).map(|v| if v >> 63 == 1 { u64::MAX } else { 0 }))?
            }
            Cdq => self
                .set_reg(Register::EDX, self.reg(Register::EAX).map(|v| if v >> 31 & 1 == 1 { mask(32) } else { 0 }))?,
            Lea => {
                let regs = self.regs();
                let (addr, used) = address(insn, 1, &regs).ok_or(Miss::Unemulated)?;
                let value = (used & !self.known == 0).then_some(addr & m);
                self.set_reg(insn.op0_register(), value)?;
            }
            Xchg if mem.is_none() => {
                let (a, b) = (src(self, 0), src(self, 1));
                self.write(insn, 0, mem, b)?;
                self.write(insn, 1, mem, a)?;
            }
            Push => {
                let value = src(self, 0).map(|v| if bits < 64 { sign_extend(v, bits) } else { v });
                self.push(value)?;
            }
            Pop => {
                let value = self.pop(code)?;
                self.write(insn, 0, mem, value)?;
            }
            Leave => {
                self.set_reg(Register::RSP, self.reg(Register::RBP))?;
                let value = self.pop(code)?;
                self.set_reg(Register::RBP, value)?;
            }
            Add | Sub | Cmp | Adc | Sbb => {
                let carry_in = match insn.mnemonic() {
                    Adc | Sbb => Some(u64::from(self.flag(CF).ok_or(Miss::Unemulated)?)),
                    _ => Some(0),
                };
                let sub = matches!(insn.mnemonic(), Sub | Cmp | Sbb);
                let (a, b) = (src(self, 0), src(self, 1).map(|v| v & m));
                let result = a.zip(b).zip(carry_in).map(|((a, b), c)| arith(a & m, b, c, bits, sub));
                self.flags_from(result.map(|(_, f)| f), STATUS, 0);
                if insn.mnemonic() != Cmp {
                    self.write(insn, 0, mem, result.map(|(r, _)| r))?;
                }
            }
            Inc | Dec => {
                let a = src(self, 0);
                let result = a.map(|a| arith(a & m, 1, 0, bits, insn.mnemonic() == Dec));
                self.flags_from(result.map(|(_, f)| f), STATUS & !CF, 0);
                self.write(insn, 0, mem, result.map(|(r, _)| r))?;
            }
            Neg => {
                let a = src(self, 0);
                let result = a.map(|a| arith(0, a & m, 0, bits, true));
                self.flags_from(result.map(|(_, f)| f), STATUS, 0);
                self.write(insn, 0, mem, result.map(|(r, _)| r))?;
            }
            Not => {
                let value = src(self, 0).map(|a| !a & m);
                self.write(insn, 0, mem, value)?;
            }
            And | Or | Xor | Test => {
                // `xor r, r` zeroes r whatever it held.
                let same = insn.op0_kind() == OpKind::Register
                    && insn.op1_kind() == OpKind::Register
                    && insn.op0_register() == insn.op1_register();
                let (a, b) = (src(self, 0), src(self, 1));
                let value = match insn.mnemonic() {
                    Xor if same => Some(0),
                    And => a.zip(b).map(|(a, b)| a & b & m),
                    Or => a.zip(b).map(|(a, b)| (a | b) & m),
                    Xor => a.zip(b).map(|(a, b)| (a ^ b) & m),
                    _ => a.zip(b).map(|(a, b)| a & b & m),
                };
                self.flags_from(value.map(|v| result_flags(v, bits)), STATUS & !AF, AF);
                if insn.mnemonic() != Test {
                    self.write(insn, 0, mem, value)?;
                }
            }
            Shl | Sal | Shr | Sar => {
                let count = src(self, 1).ok_or(Miss::Unemulated)? & if bits == 64 { 0x3f } else { 0x1f };
                let a = src(self, 0);
                if count == 0 {
                    self.write(insn, 0, mem, a)?;
                } else {
                    let result = a.map(|a| shift(insn.mnemonic(), a & m, count as u32, bits));
                    let undefined = if count == 1 { AF } else { AF | OF };
                    self.flags_from(result.map(|(_, f)| f), STATUS & !undefined, undefined);
                    self.write(insn, 0, mem, result.map(|(r, _)| r))?;
                }
            }
            Mul | Imul | Div | Idiv if insn.op_count() == 1 => self.widening(code, insn, mem, bits)?,
            Imul if insn.op_count() >= 2 => {
                let (a, b) =
                    if insn.op_count() == 3 { (src(self, 1), src(self, 2)) } else { (src(self, 0), src(self, 1)) };
                let result = a.zip(b).map(|(a, b)| {
                    let wide =
                        i128::from(sign_extend(a & m, bits) as i64) * i128::from(sign_extend(b & m, bits) as i64);
                    let r = (wide as u64) & m;
                    let overflow = i128::from(sign_extend(r, bits) as i64) != wide;
                    (r, if overflow { CF | OF } else { 0 })
                });
                self.flags_from(result.map(|(_, f)| f), CF | OF, SF | ZF | AF | PF);
                self.write(insn, 0, mem, result.map(|(r, _)| r))?;
            }
            _ if insn.condition_code() != ConditionCode::None && is_setcc_or_cmov(insn.mnemonic()) => {
                let taken = self.condition(insn.condition_code());
                if is_setcc(insn.mnemonic()) {
                    self.write(insn, 0, mem, taken.map(u64::from))?;
                } else {
                    match taken {
                        Some(true) => {
                            let value = src(self, 1);
                            self.write(insn, 0, mem, value)?;
                        }
                        // cmov with a 32-bit destination zero-extends even when not taken.
                        Some(false) => {
                            let value = src(self, 0);
                            self.write(insn, 0, mem, value)?;
                        }
                        None => self.write(insn, 0, mem, None)?,
                    }
                }
            }
            _ => return self.forget(insn, mem, written),
        }
        Ok(())
    }

    /// Steps over an instruction the machine does not model (SSE and AVX moves and arithmetic,
    /// `popcnt`, `crc32`, `rdtsc`, …) by forgetting what it changes: the general-purpose registers it
    /// writes and the status flags it modifies become unknown, and memory it writes through its operand
    /// on the own stack becomes unknown to later loads. Vectorised loops are mostly such instructions,
    /// and the addresses of the accesses ahead rarely depend on them. Not for an atomic read-modify-write,
    /// an instruction that changes the direction flag, writes memory it does not name (`push`-like,
    /// `fxsave`), or overwrites a store the walk made.
    fn forget(&mut self, insn: &Instruction, mem: Option<(u64, Candidate)>, written: GprMask) -> Result<(), Miss> {
        let modified = insn.rflags_modified();
        // An atomic read-modify-write (`xchg`, `lock cmpxchg`, …) may take a lock: what follows it is
        // not concurrent with other threads while this one stalls before it.
        if modified & iced_x86::RflagsBits::DF != 0 || insn.is_stack_instruction() || x86::is_atomic_rmw(insn) {
            return Err(Miss::Unemulated);
        }
        match mem {
            Some((addr, cand)) if cand.is_write => {
                let (lo, hi) = (u128::from(addr), u128::from(addr) + u128::from(cand.size));
                let overlaps = |at: u64, len: u8| lo < u128::from(at) + u128::from(len) && u128::from(at) < hi;
                if self.stores[..self.nstores].iter().any(|&(at, len, _)| overlaps(at, len)) {
                    return Err(Miss::Unemulated);
                }
                if !self.opaque[..self.nopaque].iter().any(|&(at, len)| at == addr && len >= cand.size) {
                    let slot = self.opaque.get_mut(self.nopaque).ok_or(Miss::Unemulated)?;
                    *slot = (addr, cand.size);
                    self.nopaque += 1;
                }
            }
            Some(_) => {}
            None if x86::memory_operand(insn).is_some() => return Err(Miss::Unemulated),
            None => {}
        }
        if modified != 0 {
            self.flags_known &= !STATUS;
        }
        self.known &= !written;
        Ok(())
    }

    /// One-operand `mul`/`imul` (into rDX:rAX, or AX for bytes) and `div`/`idiv` (of rDX:rAX, or AX).
    /// A division that would fault (by zero, or a quotient too wide) is not emulated.
    fn widening(
        &mut self,
        code: &dyn CodeReader,
        insn: &Instruction,
        mem: Option<(u64, Candidate)>,
        bits: u32,
    ) -> Result<(), Miss> {
        let m = mask(bits);
        let signed = matches!(insn.mnemonic(), Mnemonic::Imul | Mnemonic::Idiv);
        let src = self.read(code, insn, 0, mem).ok_or(Miss::Unemulated)? & m;
        let (lo_reg, hi_reg) = match bits {
            8 => (Register::AL, Register::AH),
            16 => (Register::AX, Register::DX),
            32 => (Register::EAX, Register::EDX),
            _ => (Register::RAX, Register::RDX),
        };
        // For bytes the whole AX is the dividend; the product only needs AL.
        let lo = self.reg(if bits == 8 { Register::AX } else { lo_reg }).ok_or(Miss::Unemulated)?;
        let as_int = |v: u64| if signed { i128::from(sign_extend(v & m, bits) as i64) } else { i128::from(v & m) };
        if matches!(insn.mnemonic(), Mnemonic::Mul | Mnemonic::Imul) {
            // Unsigned 64 x 64 needs all 128 bits; signed products fit an i128.
            let wide = if signed { (as_int(lo) * as_int(src)) as u128 } else { u128::from(lo & m) * u128::from(src) };
            let (low, high) = ((wide as u64) & m, ((wide >> bits) as u64) & m);
            let fits = if signed { as_int(low) == wide as i128 } else { high == 0 };
            self.set_flags(CF | OF, if fits { 0 } else { CF | OF }, SF | ZF | AF | PF);
            if bits == 8 {
                return self.set_reg(Register::AX, Some(low | high << 8));
            }
            self.set_reg(lo_reg, Some(low))?;
            return self.set_reg(hi_reg, Some(high));
        }
        let high = if bits == 8 { (lo >> 8) & 0xff } else { self.reg(hi_reg).ok_or(Miss::Unemulated)? };
        let dividend_bits = (u128::from(high & m) << bits) | u128::from(lo & m);
        let dividend = if signed {
            ((dividend_bits << (128 - 2 * bits)) as i128) >> (128 - 2 * bits)
        } else {
            dividend_bits as i128
        };
        let divisor = as_int(src);
        if divisor == 0 {
            return Err(Miss::Unemulated);
        }
        let (quotient, remainder) = (dividend / divisor, dividend % divisor);
        let fits = if signed {
            quotient >= -(1i128 << (bits - 1)) && quotient < (1i128 << (bits - 1))
        } else {
            quotient < (1i128 << bits)
        };
        if !fits {
            return Err(Miss::Unemulated);
        }
        self.flags_known &= !STATUS;
        let (q, r) = ((quotient as u64) & m, (remainder as u64) & m);
        if bits == 8 {
            return self.set_reg(Register::AX, Some(q | r << 8));
        }
        self.set_reg(lo_reg, Some(q))?;
        self.set_reg(hi_reg, Some(r))
    }

    /// Applies computed flags (`None`: the inputs were unknown, so every flag in `defined` is too).
    fn flags_from(&mut self, flags: Option<u64>, defined: u64, undefined: u64) {
        match flags {
            Some(values) => self.set_flags(defined, values, undefined),
            None => self.flags_known &= !(defined | undefined),
        }
    }
}

fn is_setcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Seto | Setno
            | Setb
            | Setae
            | Sete
            | Setne
            | Setbe
            | Seta
            | Sets
            | Setns
            | Setp
            | Setnp
            | Setl
            | Setge
            | Setle
            | Setg
    )
}

fn is_setcc_or_cmov(m: Mnemonic) -> bool {
    use Mnemonic::*;
    is_setcc(m)
        || matches!(
            m,
            Cmovo
                | Cmovno
                | Cmovb
                | Cmovae
                | Cmove
                | Cmovne
                | Cmovbe
                | Cmova
                | Cmovs
                | Cmovns
                | Cmovp
                | Cmovnp
                | Cmovl
                | Cmovge
                | Cmovle
                | Cmovg
        )
}

fn sign_extend(value: u64, bits: u32) -> u64 {
    if bits >= 64 {
        return value;
    }
    let shift = 64 - bits;
    (((value << shift) as i64) >> shift) as u64
}

/// SF, ZF and PF of a `bits`-wide result.
fn result_flags(value: u64, bits: u32) -> u64 {
    let mut flags = 0;
    if value & mask(bits) == 0 {
        flags |= ZF;
    }
    if value >> (bits - 1) & 1 == 1 {
        flags |= SF;
    }
    if parity(value) {
        flags |= PF;
    }
    flags
}

/// `a + b + carry` or `a - b - carry` in `bits` bits: the result and all six status flags.
fn arith(a: u64, b: u64, carry: u64, bits: u32, sub: bool) -> (u64, u64) {
    let m = mask(bits);
    let wide = if sub {
        u128::from(a).wrapping_sub(u128::from(b)).wrapping_sub(u128::from(carry))
    } else {
        u128::from(a) + u128::from(b) + u128::from(carry)
    };
    let r = (wide as u64) & m;
    let mut flags = result_flags(r, bits);
    let carried = if sub { u128::from(a) < u128::from(b) + u128::from(carry) } else { wide >> bits != 0 };
    if carried {
        flags |= CF;
    }
    let top = bits - 1;
    let overflow = if sub { ((a ^ b) & (a ^ r)) >> top & 1 } else { (!(a ^ b) & (a ^ r)) >> top & 1 };
    if overflow == 1 {
        flags |= OF;
    }
    if (a ^ b ^ r) & 0x10 != 0 {
        flags |= AF;
    }
    (r, flags)
}

/// A shift by `count` (1..bits-1 after masking, possibly >= bits for 8/16-bit operands).
fn shift(op: Mnemonic, a: u64, count: u32, bits: u32) -> (u64, u64) {
    let m = mask(bits);
    let (r, cf) = match op {
        Mnemonic::Shr => {
            let cf = if count <= bits { a >> (count - 1) & 1 } else { 0 };
            (if count >= bits { 0 } else { a >> count }, cf)
        }
        Mnemonic::Sar => {
            let s = sign_extend(a, bits) as i64;
            let c = count.min(63);
            (((s >> c) as u64) & m, ((s >> (c - 1).min(63)) & 1) as u64)
        }
        _ => {
            let cf = if count <= bits { a >> (bits - count) & 1 } else { 0 };
            (if count >= bits { 0 } else { (a << count) & m }, cf)
        }
    };
    let mut flags = result_flags(r, bits);
    if cf == 1 {
        flags |= CF;
    }
    let of = match op {
        Mnemonic::Shr => a >> (bits - 1) & 1,
        Mnemonic::Sar => 0,
        _ => (r >> (bits - 1) & 1) ^ cf,
    };
    if of == 1 {
        flags |= OF;
    }
    (r, flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_flags_match_the_manual() {
        // 0x7f + 1 in 8 bits: signed overflow, AF, SF.
        let (r, f) = arith(0x7f, 1, 0, 8, false);
        assert_eq!(r, 0x80);
        assert_eq!(f & (OF | SF | AF | CF | ZF), OF | SF | AF);
        // 0 - 1 in 32 bits: borrow, SF, PF (0xff has even parity).
        let (r, f) = arith(0, 1, 0, 32, true);
        assert_eq!(r, 0xffff_ffff);
        assert_eq!(f & (CF | SF | PF | OF), CF | SF | PF);
        // u64::MAX + 1: carry, zero.
        let (r, f) = arith(u64::MAX, 1, 0, 64, false);
        assert_eq!((r, f & (CF | ZF)), (0, CF | ZF));
    }
}
