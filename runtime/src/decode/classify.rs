//! What one decoded instruction means for sampling: its explicit memory access, its address from a set of
//! registers, and the general-purpose registers it writes.

use super::calls::StringOp;
use super::Regs;
use iced_x86::{FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use racewatch_instrument::x86;

/// Bit `i` stands for `Regs::gpr[i]` (RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8..R15).
pub(super) type GprMask = u16;

/// The usable explicit memory operand of an instruction.
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate {
    pub operand: u32,
    pub size: u8,
    pub is_read: bool,
    pub is_write: bool,
    pub locked: bool,
    /// An AVX-512 opmask (`{k1}`): only the elements whose bit is set are accessed. (Its register's
    /// number, and the element size in bytes.)
    pub mask: Option<(u32, u8)>,
}

/// The sampling view of one instruction.
#[derive(Clone, Copy, Debug)]
pub(super) enum Class {
    /// Ends straight-line code: branches, calls, returns, syscalls, interrupts, privileged or undecodable.
    Stop,
    /// Touches no memory through an explicit operand (it may still write registers).
    NoMem,
    /// Touches memory we do not watch: FS/GS (TLS), implicit stack ops, REP strings, VSIB, unknown size.
    Skip,
    /// An explicit memory access to watch.
    Access(Candidate),
}

/// Classification of `insn`, plus the GPRs it writes (unconditionally or conditionally).
/// Never calls the factory for instructions that end straight-line code, so its vectors never grow.
pub(super) fn classify(factory: &mut InstructionInfoFactory, insn: &Instruction) -> (Class, GprMask) {
    if insn.is_invalid()
        || insn.flow_control() != FlowControl::Next
        || insn.is_privileged()
        || matches!(insn.mnemonic(), Mnemonic::Enter | Mnemonic::Syscall | Mnemonic::Sysenter | Mnemonic::Int)
    {
        return (Class::Stop, 0);
    }
    let info = factory.info(insn);
    let mut written: GprMask = 0;
    for used in info.used_registers() {
        if writes(used.access()) {
            written |= gpr_bit(used.register());
        }
    }
    let Some(operand) = x86::memory_operand(insn) else {
        return (Class::NoMem, written);
    };
    let (is_read, is_write) = match info.op_access(operand) {
        OpAccess::Read | OpAccess::CondRead => (true, false),
        OpAccess::Write | OpAccess::CondWrite => (false, true),
        OpAccess::ReadWrite | OpAccess::ReadCondWrite => (true, true),
        _ => return (Class::NoMem, written), // LEA, NOP [mem], prefetches: address only
    };
    let string_rep = insn.op_kind(operand) != OpKind::Memory && (insn.has_rep_prefix() || insn.has_repne_prefix());
    let segment = insn.memory_segment();
    if insn.is_stack_instruction() || string_rep || insn.is_vsib() || matches!(segment, Register::FS | Register::GS) {
        return (Class::Skip, written);
    }
    let size = match u8::try_from(insn.memory_size().size()) {
        Ok(0) | Err(_) => return (Class::Skip, written),
        Ok(size) => size,
    };
    let locked = x86::is_atomic_rmw(insn);
    let mask = match insn.op_mask() {
        Register::None => None,
        k => Some((k.number() as u32, u8::try_from(insn.memory_size().element_size()).unwrap_or(0).max(1))),
    };
    (Class::Access(Candidate { operand, size, is_read, is_write, locked, mask }), written)
}

fn writes(access: OpAccess) -> bool {
    matches!(access, OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite)
}

/// Index into `Regs::gpr` of the 64-bit register containing `reg` (AL, AX, EAX, RAX → 0), if a GPR.
fn gpr_index(reg: Register) -> Option<usize> {
    if !reg.is_gpr() {
        return None;
    }
    let full = reg.full_register();
    if !full.is_gpr64() {
        return None;
    }
    Some(full.number())
}

pub(super) fn gpr_bit(reg: Register) -> GprMask {
    match gpr_index(reg) {
        Some(i) if i < 16 => 1 << i,
        _ => 0,
    }
}

/// Value of `reg` (any width) in `regs`; segment bases are 0 except FS/GS, which are unknown.
fn reg_value(regs: &Regs, reg: Register) -> Option<u64> {
    if matches!(reg, Register::ES | Register::CS | Register::SS | Register::DS) {
        return Some(0);
    }
    let full = *regs.gpr.get(gpr_index(reg)?)?;
    Some(match reg {
        Register::AH | Register::CH | Register::DH | Register::BH => (full >> 8) & 0xff,
        _ => match reg.size() {
            1 => full & 0xff,
            2 => full & 0xffff,
            4 => full & 0xffff_ffff,
            _ => full,
        },
    })
}

/// Effective address of `operand` of `insn` from `regs`, and the GPRs it was computed from.
/// RIP-relative operands use the instruction's own next IP (decoded with the right IP), not `regs.rip`.
pub(super) fn address(insn: &Instruction, operand: u32, regs: &Regs) -> Option<(u64, GprMask)> {
    let mut used: GprMask = 0;
    let addr = insn.virtual_address(operand, 0, |reg, _, _| {
        used |= gpr_bit(reg);
        reg_value(regs, reg)
    })?;
    Some((addr, used))
}

/// The string instruction `insn` (`movs`, `stos`, `lods`, `cmps`, `scas`, with or without REP), with
/// 64-bit addressing and no FS/GS source; `None` for anything else (SSE's `movsd`/`cmpsd` included).
pub(super) fn string_op(insn: &Instruction) -> Option<StringOp> {
    use Mnemonic::*;
    let (reads_rsi, writes_rdi, reads_rdi, compares) = match insn.mnemonic() {
        Movsb | Movsw | Movsd | Movsq => (true, true, false, false),
        Stosb | Stosw | Stosd | Stosq => (false, true, false, false),
        Lodsb | Lodsw | Lodsd | Lodsq => (true, false, false, false),
        Cmpsb | Cmpsw | Cmpsd | Cmpsq => (true, false, true, true),
        Scasb | Scasw | Scasd | Scasq => (false, false, true, true),
        _ => return None,
    };
    let kinds = || (0..insn.op_count()).map(|i| insn.op_kind(i));
    // SSE's movsd/cmpsd have ordinary operands; 32-bit addressing (`es:[edi]`) is not modelled.
    if !kinds().any(|k| matches!(k, OpKind::MemoryESRDI | OpKind::MemorySegRSI))
        || kinds()
            .any(|k| matches!(k, OpKind::MemoryESEDI | OpKind::MemoryESDI | OpKind::MemorySegESI | OpKind::MemorySegSI))
    {
        return None;
    }
    if reads_rsi && matches!(insn.memory_segment(), Register::FS | Register::GS) {
        return None;
    }
    let width = u8::try_from(insn.memory_size().size()).ok().filter(|w| matches!(w, 1 | 2 | 4 | 8))?;
    let rep = insn.has_rep_prefix() || insn.has_repe_prefix() || insn.has_repne_prefix();
    Some(StringOp { width, reads_rsi, writes_rdi, reads_rdi, compares, rep })
}
