//! x86-64 instruction facts shared by `verify` (offline) and the runtime's
//! signal-path decoder: pure functions of an iced-x86 `Instruction`, no
//! allocation.

use iced_x86::{Instruction, Mnemonic, OpKind};

/// True for every operand kind that names memory (explicit `[..]` operands
/// and the implicit string-instruction forms).
pub fn is_memory_operand(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Memory
            | OpKind::MemorySegSI
            | OpKind::MemorySegESI
            | OpKind::MemorySegRSI
            | OpKind::MemorySegDI
            | OpKind::MemorySegEDI
            | OpKind::MemorySegRDI
            | OpKind::MemoryESDI
            | OpKind::MemoryESEDI
            | OpKind::MemoryESRDI
    )
}

/// Index of the first memory operand of `insn`, if any.
pub fn memory_operand(insn: &Instruction) -> Option<u32> {
    (0..insn.op_count()).find(|&i| is_memory_operand(insn.op_kind(i)))
}

/// LOCK-prefixed, or XCHG with a memory operand (implicitly locked).
pub fn is_atomic_rmw(insn: &Instruction) -> bool {
    !insn.is_invalid()
        && (insn.has_lock_prefix() || (insn.mnemonic() == Mnemonic::Xchg && memory_operand(insn).is_some()))
}
