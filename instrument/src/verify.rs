//! Checking PC tables against the machine code (iced-x86).
//!
//! Every covered function is decoded linearly from its first byte over its
//! size. Then:
//!
//! - every tagged atomic PC must be the start of an instruction inside a
//!   covered function that accesses memory, otherwise it is a
//!   [`Finding::BadAtomicPc`];
//! - every LOCK-prefixed instruction, and every XCHG with a memory operand,
//!   inside a covered function that is *not* tagged is a
//!   [`Finding::LikelyGap`] (typically inline-asm atomics the compiler never
//!   saw).
//!
//! Two kinds of tagged non-memory instructions are real compiler output and
//! are listed as [`Explained`] instead of failing: fence instructions
//! (`atomic_thread_fence(seq_cst)` becomes `mfence`), and instructions that
//! directly follow a tagged memory access, because LLVM copies an atomic's PC
//! section onto every machine instruction it lowers to (`lock cmpxchg`
//! followed by `sete` for a compare-exchange's success flag). A third kind is
//! accepted with a heuristic: acquire/release fences emit no instruction on
//! x86, so LLVM's label for them lands on the next instruction; a tagged
//! non-memory instruction at most [`MAX_FENCE_DISTANCE`] untagged
//! non-memory instructions after a tagged atomic is taken for such a label
//! (the reference-count idiom: `lock dec; jne; <fence label>`). A fourth is
//! found by data flow: a tagged instruction whose result a tagged atomic reads
//! a little later computes one of its operands. Anywhere else a tagged
//! non-memory instruction fails: a fence label there cannot be told from a
//! wrong table.
//!
//! Untagged LOCK/XCHG instructions that are no gaps are listed apart (see
//! [`LockedWhy`]): compiler atomics whose tag was lost, and fences on a local
//! of the thread's own stack.
//!
//! Untagged plain loads and stores that the debug info places in
//! `core::sync::atomic` are listed apart too ([`LostAtomic`]): atomics whose tag
//! an optimisation lost (release builds merge the two relaxed loads of
//! `Arc::downgrade`'s compare-exchange loop into one `mov` without it).

use crate::format::pcsections::CoveredEntry;
pub use crate::x86::is_atomic_rmw;
use crate::x86::{is_memory_operand, memory_operand};
use iced_x86::{
    Decoder, DecoderOptions, Formatter, Instruction, InstructionInfoFactory, IntelFormatter, Mnemonic, OpAccess,
};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;

/// Covered functions larger than this are treated as garbage, not decoded.
const MAX_FUNCTION_SIZE: u64 = 1 << 32;

/// What the checks need from a binary: its bytes at link-time addresses and
/// function names.
pub trait Image {
    /// `len` bytes at virtual address `vaddr`, or `None` when they are not
    /// all inside one section with file contents.
    fn read_at(&self, vaddr: u64, len: usize) -> Option<&[u8]>;
    /// The name of the function containing `addr`, if the symbols say.
    fn function_name(&self, addr: u64) -> Option<String>;
    /// Whether `addr` is in data the program does not write once it runs (`.rodata`, `.got` after
    /// relocation): loads from there are constants, not shared-memory accesses.
    fn is_read_only(&self, _addr: u64) -> bool {
        false
    }
}

impl Image for crate::elf::Module {
    fn read_at(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        crate::elf::Module::read_at(self, vaddr, len)
    }

    fn function_name(&self, addr: u64) -> Option<String> {
        self.function_containing(addr).map(|f| f.name.clone())
    }

    fn is_read_only(&self, addr: u64) -> bool {
        crate::elf::Module::is_read_only(self, addr)
    }
}

/// Why a tagged atomic PC does not match the code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BadPc {
    /// The PC is not inside any covered function.
    NotCovered,
    /// The covered function containing the PC has no bytes in the file.
    Unreadable,
    /// The bytes at the PC are not a valid instruction.
    Undecodable,
    /// The PC falls inside the instruction starting at `instruction`.
    NotInstructionStart { instruction: u64, disassembly: String },
    /// The instruction at the PC does not access memory.
    NoMemoryAccess { disassembly: String },
}

impl fmt::Display for BadPc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadPc::NotCovered => f.write_str("not inside any covered function"),
            BadPc::Unreadable => f.write_str("its covered function has no bytes in the file"),
            BadPc::Undecodable => f.write_str("not a valid instruction"),
            BadPc::NotInstructionStart { instruction, disassembly } => {
                write!(f, "not an instruction start: inside {instruction:#x}: {disassembly}")
            }
            BadPc::NoMemoryAccess { disassembly } => write!(f, "no memory access: {disassembly}"),
        }
    }
}

/// A disagreement between the tables and the machine code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// A tagged atomic PC that is not a memory-accessing instruction of a
    /// covered function.
    BadAtomicPc { pc: u64, function: Option<String>, reason: BadPc },
    /// An untagged LOCK-prefixed or XCHG-with-memory instruction inside a
    /// covered function: an atomic the compiler did not see.
    LikelyGap { pc: u64, function: String, disassembly: String },
    /// A covered function whose bytes are not in the file (bad table).
    UnreadableFunction { pc: u64, size: u64, function: Option<String> },
    /// A table that does not decode to its end (entries before the error
    /// are still checked).
    MalformedTable { section: String, offset: usize, message: String },
}

impl Finding {
    /// The address the finding is about (0 for a malformed table).
    pub fn pc(&self) -> u64 {
        match *self {
            Finding::BadAtomicPc { pc, .. }
            | Finding::LikelyGap { pc, .. }
            | Finding::UnreadableFunction { pc, .. } => pc,
            Finding::MalformedTable { .. } => 0,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::BadAtomicPc { pc, function, reason } => {
                write!(f, "bad atomic PC {pc:#x} in {}: {reason}", function.as_deref().unwrap_or("?"))
            }
            Finding::LikelyGap { pc, function, disassembly } => {
                write!(f, "likely gap {pc:#x} in {function}: untagged atomic {disassembly}")
            }
            Finding::UnreadableFunction { pc, size, function } => write!(
                f,
                "unreadable covered function {pc:#x} ({size} bytes) {}: not in any section",
                function.as_deref().unwrap_or("?")
            ),
            Finding::MalformedTable { message, .. } => write!(f, "malformed table: {message}"),
        }
    }
}

/// Why a tagged non-memory instruction is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Explanation {
    /// A fence instruction (`mfence`, `lfence`, `sfence`): an atomic fence.
    Fence,
    /// Part of the lowering of the atomic access at `atomic`: directly after
    /// it (`sete` after `lock cmpxchg`) or setting up its operands right
    /// before it (`mov eax, 1` before `lock cmpxchg`).
    LoweringOf { atomic: u64 },
    /// A few instructions after the atomic at `atomic` with no memory access
    /// between: the label of a compiler-only fence (`fence(Acquire)` after
    /// `fetch_sub(Release)` in `Arc::drop`), which emits no instruction, so
    /// LLVM's label lands on whatever follows.
    FenceLabel { atomic: u64 },
}

/// A tagged non-memory instruction that is expected compiler output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explained {
    pub pc: u64,
    pub function: String,
    pub disassembly: String,
    pub why: Explanation,
}

/// The outcome of [`verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Distinct covered functions in the table.
    pub covered_functions: usize,
    /// Covered functions whose bytes were decoded.
    pub functions_decoded: usize,
    /// Distinct tagged atomic PCs checked.
    pub atomic_pcs: usize,
    /// Instructions decoded in covered functions.
    pub instructions: usize,
    /// Failures, sorted by PC.
    pub findings: Vec<Finding>,
    /// Accepted tagged non-memory instructions, sorted by PC.
    pub explained: Vec<Explained>,
    /// Untagged memory accesses in known inline-assembly atomic code (`tags::ASM_ATOMIC_CODE`): gaps in
    /// the tables that the runtime's rule covers (so not failures), sorted by PC.
    pub rule_atomics: Vec<RuleAtomic>,
    /// Untagged LOCK/XCHG instructions that are no gaps ([`LockedWhy`]): compiler atomics whose tags
    /// were lost (code inlined from a module the pass did not run on, such as a global allocator's
    /// shim), and fences on stack locals. Not failures: the runtime decodes LOCK and XCHG as atomic.
    pub untagged_locked: Vec<UntaggedLocked>,
    /// Untagged plain loads and stores (no LOCK, not on the stack frame) that the debug info places in
    /// `core::sync::atomic` ([`crate::tags::is_core_atomic_access`]): atomics whose tag an optimisation
    /// lost (two relaxed loads merged into one `mov`). Not failures: the runtime's reporter judges such
    /// an access atomic from the same debug info. Sorted by PC.
    pub lost_atomics: Vec<LostAtomic>,
}

/// An untagged plain access that the debug info places in `core::sync::atomic`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LostAtomic {
    pub pc: u64,
    pub function: String,
    pub disassembly: String,
    /// `file:line` of the instruction, as the line table has it (line 0: none of its own).
    pub location: String,
}

/// An untagged LOCK/XCHG instruction that is no gap: a compiler atomic, not inline assembly, or a fence
/// on a stack local.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UntaggedLocked {
    pub pc: u64,
    pub function: String,
    pub disassembly: String,
    pub why: LockedWhy,
}

/// Why an untagged LOCK/XCHG instruction is taken for a compiler atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LockedWhy {
    /// The tagged atomic at `tagged` accesses the same variable (at `variable`).
    TaggedElsewhere { variable: u64, tagged: u64 },
    /// The debug info places it in `core::sync::atomic`.
    CoreAtomic,
    /// No line information: compiler-generated code (a shim, an allocator) or code inlined without
    /// debug info; inline assembly written in a source file would have a line.
    NoLine,
    /// Its operand is a local of the thread's own stack (`[rsp]`, `[rbp-8]`, or a register last set
    /// to such an address): the `lock not`/`lock or` full-fence idiom of inline assembly
    /// (concurrent-queue's and event-listener's `full_fence`), which shares no variable.
    OwnStack,
}

impl fmt::Display for LockedWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockedWhy::TaggedElsewhere { variable, tagged } => write!(
                f,
                "a compiler atomic whose tag was lost (the tagged atomic at {tagged:#x} accesses the same \
                 variable {variable:#x})"
            ),
            LockedWhy::CoreAtomic => {
                write!(f, "a compiler atomic whose tag was lost (the debug info places it in core::sync::atomic)")
            }
            LockedWhy::NoLine => {
                write!(f, "a compiler atomic whose tag was lost (compiler-generated code without line information)")
            }
            LockedWhy::OwnStack => write!(f, "a fence on a local of the thread's own stack, which shares nothing"),
        }
    }
}

/// An untagged memory access whose source line is in known inline-assembly atomic code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleAtomic {
    pub pc: u64,
    pub function: String,
    pub disassembly: String,
    pub file: String,
}

impl Report {
    /// True when the tables agree with the code: no bad atomic PC, no likely
    /// gap, no unreadable covered function.
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Checks a whole ELF file's tables against its code.
pub fn verify(module: &crate::elf::Module) -> Report {
    let mut report = verify_tables(module, &module.covered, &module.atomics);
    let malformed = module.decode_errors().map(|e| Finding::MalformedTable {
        section: e.section.clone(),
        offset: e.offset,
        message: e.to_string(),
    });
    report.findings.splice(0..0, malformed);
    report.rule_atomics = rule_atomics(module);
    // A LOCK instruction in known asm-atomic code is a gap the rule covers: a note, not a failure.
    let noted: BTreeSet<u64> = report.rule_atomics.iter().map(|r| r.pc).collect();
    report.findings.retain(|f| !matches!(f, Finding::LikelyGap { pc, .. } if noted.contains(pc)));
    accept_compiler_atomics(module, &mut report);
    report.lost_atomics = lost_atomics(module);
    report
}

/// The decoded code of each covered function (once, by start) that overlaps one of the sorted
/// address `ranges`.
fn covered_code_in<'m>(
    module: &'m crate::elf::Module,
    ranges: &'m [(u64, u64)],
) -> impl Iterator<Item = (u64, Vec<Instruction>)> + 'm {
    let mut functions: Vec<(u64, u64)> = module.covered.iter().map(|c| (c.pc, c.size)).collect();
    functions.sort_unstable();
    functions.dedup();
    functions.into_iter().filter_map(move |(pc, size)| {
        if size == 0 || size > MAX_FUNCTION_SIZE || !in_ranges_overlap(ranges, pc, pc + size) {
            return None;
        }
        Some((pc, decode(module.read_at(pc, size as usize)?, pc)))
    })
}

/// Untagged plain loads and stores of covered functions that the debug info places in
/// `core::sync::atomic`. Only functions with line-table rows in `core/src/sync/atomic.rs` (atomics
/// inlined into them, or their own code there) are looked at.
fn lost_atomics(module: &crate::elf::Module) -> Vec<LostAtomic> {
    let Some(map) = module.source_map() else { return Vec::new() };
    let ranges = map.ranges_in_files(crate::tags::is_core_atomic_file);
    if ranges.is_empty() {
        return Vec::new();
    }
    let mut disasm = Disassembler::new();
    let mut found = Vec::new();
    for (pc, code) in covered_code_in(module, &ranges) {
        for (idx, insn) in code.iter().enumerate() {
            let insn = *insn;
            // A load of a constant (a GOT slot holding the atomic's address, a jump table on the
            // ordering in a debug build) is no access to it.
            let constant = reads_constant(&code, idx, &|a| module.is_read_only(a));
            let plain = accesses_memory(&insn)
                && !is_atomic_rmw(&insn)
                && !insn.is_stack_instruction()
                && !constant
                && !matches!(insn.memory_base(), iced_x86::Register::RSP | iced_x86::Register::RBP);
            if plain && module.atomics.binary_search(&insn.ip()).is_err() && map.in_core_atomic(insn.ip()) {
                found.push(LostAtomic {
                    pc: insn.ip(),
                    function: module.function_name(insn.ip()).unwrap_or_else(|| format!("{pc:#x}")),
                    disassembly: disasm.format(&insn),
                    location: map.location(insn.ip()).map(|l| format!("{}:{}", l.file, l.line)).unwrap_or_default(),
                });
            }
        }
    }
    found.sort_by_key(|l| l.pc);
    found.dedup_by_key(|l| l.pc);
    found
}

/// Moves the likely gaps that the debug info shows to be compiler atomics (in `core::sync::atomic`,
/// or in code without any line, which inline assembly in a source file always has) to
/// `untagged_locked`. The rest stay findings: inline assembly whose plain loads and stores are
/// untagged too.
fn accept_compiler_atomics(module: &crate::elf::Module, report: &mut Report) {
    let Some(map) = module.source_map() else { return };
    let mut kept = Vec::new();
    for finding in std::mem::take(&mut report.findings) {
        let Finding::LikelyGap { pc, function, disassembly } = finding else {
            kept.push(finding);
            continue;
        };
        let files = map.frame_files(pc);
        let why = if files.is_empty() {
            Some(LockedWhy::NoLine)
        } else if files.iter().any(|f| f.ends_with("core/src/sync/atomic.rs")) {
            Some(LockedWhy::CoreAtomic)
        } else {
            None
        };
        match why {
            Some(why) => report.untagged_locked.push(UntaggedLocked { pc, function, disassembly, why }),
            None => kept.push(Finding::LikelyGap { pc, function, disassembly }),
        }
    }
    report.findings = kept;
    report.untagged_locked.sort_by_key(|u| u.pc);
}

/// Untagged memory accesses of covered functions whose line-table file is known asm-atomic code.
fn rule_atomics(module: &crate::elf::Module) -> Vec<RuleAtomic> {
    let Some(map) = module.source_map() else { return Vec::new() };
    let ranges = map.ranges_in_files(crate::tags::is_asm_atomic_file);
    if ranges.is_empty() {
        return Vec::new();
    }
    let in_ranges = |pc: u64| {
        let i = ranges.partition_point(|r| r.1 <= pc);
        ranges.get(i).is_some_and(|r| r.0 <= pc)
    };
    let mut disasm = Disassembler::new();
    let mut found = Vec::new();
    for (pc, code) in covered_code_in(module, &ranges) {
        for insn in code {
            if accesses_memory(&insn) && module.atomics.binary_search(&insn.ip()).is_err() && in_ranges(insn.ip()) {
                found.push(RuleAtomic {
                    pc: insn.ip(),
                    function: module.function_name(insn.ip()).unwrap_or_else(|| format!("{pc:#x}")),
                    disassembly: disasm.format(&insn),
                    file: map.location(insn.ip()).map(|l| l.file).unwrap_or_default(),
                });
            }
        }
    }
    found.sort_by_key(|r| r.pc);
    found.dedup_by_key(|r| r.pc);
    found
}

/// Whether `code[idx]` reads read-only data: its operand is a RIP-relative address there, or its base
/// register was last set, a few instructions before, by a `lea` of such an address (a jump table:
/// `lea rax, [rip+table]; movsxd rcx, [rax+rcx*4]`).
fn reads_constant(code: &[Instruction], idx: usize, read_only: &dyn Fn(u64) -> bool) -> bool {
    let insn = &code[idx];
    if let Some(address) = absolute_address(insn) {
        return read_only(address);
    }
    let base = insn.memory_base().full_register();
    if base == iced_x86::Register::None || memory_operand(insn).is_none() {
        return false;
    }
    let mut factory = InstructionInfoFactory::new();
    for setter in code[idx.saturating_sub(8)..idx].iter().rev() {
        let writes_base = factory.info(setter).used_registers().iter().any(|r| {
            r.register().full_register() == base && matches!(r.access(), OpAccess::Write | OpAccess::ReadWrite)
        });
        if writes_base {
            let lea_of_constant = setter.mnemonic() == Mnemonic::Lea && setter.is_ip_rel_memory_operand();
            return lea_of_constant && read_only(setter.ip_rel_memory_address());
        }
    }
    false
}

fn in_ranges_overlap(ranges: &[(u64, u64)], start: u64, end: u64) -> bool {
    let i = ranges.partition_point(|r| r.1 <= start);
    ranges.get(i).is_some_and(|r| r.0 < end)
}

/// Checks `covered` and `atomics` (link-time addresses, any order) against
/// the code of `image`. Never panics on garbage tables.
pub fn verify_tables(image: &impl Image, covered: &[CoveredEntry], atomics: &[u64]) -> Report {
    let mut functions: Vec<(u64, u64)> = covered.iter().map(|c| (c.pc, c.size)).collect();
    functions.sort_unstable();
    functions.dedup();
    let mut atomics = atomics.to_vec();
    atomics.sort_unstable();
    atomics.dedup();

    let mut checker = Checker {
        image,
        atomics: &atomics,
        handled: vec![false; atomics.len()],
        gaps: BTreeSet::new(),
        disasm: Disassembler::new(),
        report: Report { covered_functions: functions.len(), atomic_pcs: atomics.len(), ..Report::default() },
        tagged_variables: std::collections::BTreeMap::new(),
        gap_variables: Vec::new(),
    };
    // Readable functions first, so an overlapping garbage entry does not
    // take the blame for PCs that a real function explains.
    let unreadable: Vec<(u64, u64)> =
        functions.iter().copied().filter(|&(pc, size)| !checker.function(pc, size)).collect();
    for (pc, size) in unreadable {
        checker.unreadable(pc, size);
    }
    for (i, &pc) in atomics.iter().enumerate() {
        if !checker.handled[i] {
            let function = image.function_name(pc);
            checker.report.findings.push(Finding::BadAtomicPc { pc, function, reason: BadPc::NotCovered });
        }
    }
    checker.accept_gaps_on_tagged_variables();
    let mut report = checker.report;
    report.findings.sort_by_key(Finding::pc);
    report.explained.sort_by_key(|e| e.pc);
    report
}

struct Checker<'a, I: Image> {
    image: &'a I,
    /// Sorted, distinct.
    atomics: &'a [u64],
    /// `handled[i]`: atomics[i] was judged inside some covered function.
    handled: Vec<bool>,
    /// PCs already reported as gaps (covered entries may overlap).
    gaps: BTreeSet<u64>,
    disasm: Disassembler,
    report: Report,
    /// Absolute (RIP-relative) addresses tagged atomics access, with one such atomic's PC.
    tagged_variables: std::collections::BTreeMap<u64, u64>,
    /// Likely gaps on an absolute address: (PC, address).
    gap_variables: Vec<(u64, u64)>,
}

/// The absolute address a RIP-relative memory operand names.
fn absolute_address(insn: &Instruction) -> Option<u64> {
    (memory_operand(insn).is_some() && insn.is_ip_rel_memory_operand()).then(|| insn.ip_rel_memory_address())
}

/// How a tagged instruction was judged, for chaining lowered instructions.
#[derive(Clone, Copy)]
enum Tag {
    /// A memory access or fence: the root of its own atomic.
    Root(u64),
    /// Accepted as part of the lowering of the atomic at the given PC.
    Lowered(u64),
    /// Accepted as the label of a compiler-only fence; does not chain.
    FenceLabel,
    Bad,
}

/// At most this many untagged non-memory instructions may separate a
/// compiler-only fence's label from the atomic before it.
const MAX_FENCE_DISTANCE: usize = 6;

/// The first memory access after `code[idx]` when every instruction up to
/// and including it is tagged: `code[idx]` sets up that atomic's operands
/// (`mov eax, 1` before `lock cmpxchg`).
fn tagged_access_right_after(code: &[Instruction], tagged: &[u64], idx: usize) -> Option<u64> {
    for insn in code.iter().skip(idx + 1).take(MAX_FENCE_DISTANCE + SPILLS) {
        if insn.is_invalid() {
            return None;
        }
        if tagged.binary_search(&insn.ip()).is_err() {
            if is_interleaved(insn) {
                continue;
            }
            return None;
        }
        if accesses_memory(insn) {
            return Some(insn.ip());
        }
    }
    None
}

/// The tagged atomic a few instructions before `code[idx]`, when only
/// untagged instructions without memory access lie between them.
fn atomic_shortly_before(
    code: &[Instruction],
    tags: &[Option<Tag>],
    idx: usize,
    read_only: &dyn Fn(u64) -> bool,
) -> Option<u64> {
    let from = idx.saturating_sub(MAX_FENCE_DISTANCE + 1);
    for p in (from..idx).rev() {
        let insn = &code[p];
        // A load of a constant (a GOT slot, `.rodata`) is no shared-memory access.
        let constant_load = absolute_address(insn).is_some_and(read_only) && insn.mnemonic() == Mnemonic::Mov;
        match tags[p] {
            Some(Tag::Root(atomic) | Tag::Lowered(atomic)) => return Some(atomic),
            Some(Tag::FenceLabel | Tag::Bad) => return None,
            None if constant_load => {}
            None if (accesses_memory(insn) && !is_stack_spill(insn)) || insn.is_invalid() => return None,
            None => {}
        }
    }
    None
}

/// The tagged atomic right before a conditional branch to `code[idx]`: the label of a compiler-only fence
/// on the taken side (`lock dec [rdx]; je L … L: mov rdi, rdx; call drop_slow`, `Arc::drop`'s
/// `fence(Acquire)`), which is not laid out after the atomic.
fn atomic_branching_here(code: &[Instruction], tags: &[Option<Tag>], idx: usize) -> Option<u64> {
    let here = code[idx].ip();
    (1..idx).find_map(|p| {
        let branch = &code[p];
        if branch.flow_control() != iced_x86::FlowControl::ConditionalBranch || branch.near_branch_target() != here {
            return None;
        }
        match tags[p - 1] {
            Some(Tag::Root(atomic) | Tag::Lowered(atomic)) => Some(atomic),
            _ => None,
        }
    })
}

impl<I: Image> Checker<'_, I> {
    /// Moves the likely gaps on a variable that tagged atomics also access to `untagged_locked`.
    fn accept_gaps_on_tagged_variables(&mut self) {
        for &(pc, variable) in &self.gap_variables {
            let Some(&tagged) = self.tagged_variables.get(&variable) else { continue };
            let Some(at) =
                self.report.findings.iter().position(|f| matches!(f, Finding::LikelyGap { pc: p, .. } if *p == pc))
            else {
                continue;
            };
            if let Finding::LikelyGap { pc, function, disassembly } = self.report.findings.remove(at) {
                let why = LockedWhy::TaggedElsewhere { variable, tagged };
                self.report.untagged_locked.push(UntaggedLocked { pc, function, disassembly, why });
            }
        }
        self.report.untagged_locked.sort_by_key(|u| u.pc);
    }

    /// Indices of the tagged PCs in `[pc, pc + size)`.
    fn tagged_range(&self, pc: u64, size: u64) -> std::ops::Range<usize> {
        let end = pc.saturating_add(size);
        self.atomics.partition_point(|&a| a < pc)..self.atomics.partition_point(|&a| a < end)
    }

    /// Reports a covered function without bytes and the PCs inside it.
    fn unreadable(&mut self, pc: u64, size: u64) {
        let function = self.image.function_name(pc);
        self.report.findings.push(Finding::UnreadableFunction { pc, size, function: function.clone() });
        for i in self.tagged_range(pc, size) {
            if !std::mem::replace(&mut self.handled[i], true) {
                let reason = BadPc::Unreadable;
                self.report.findings.push(Finding::BadAtomicPc {
                    pc: self.atomics[i],
                    function: function.clone(),
                    reason,
                });
            }
        }
    }

    /// Decodes one covered function and judges it; false when its bytes are
    /// not in the image.
    fn function(&mut self, pc: u64, size: u64) -> bool {
        let bytes = match size {
            0 => &[][..],
            1..=MAX_FUNCTION_SIZE => match self.image.read_at(pc, size as usize) {
                Some(bytes) => bytes,
                None => return false,
            },
            _ => return false,
        };
        let range = self.tagged_range(pc, size);
        let (first, last) = (range.start, range.end);
        let name = self.image.function_name(pc).unwrap_or_else(|| format!("{pc:#x}"));
        self.report.functions_decoded += 1;
        let code = decode(bytes, pc);
        self.report.instructions += code.len();
        let tagged = &self.atomics[first..last];

        for (idx, insn) in code.iter().enumerate() {
            let is_tagged = tagged.binary_search(&insn.ip()).is_ok();
            if let (true, Some(variable)) = (is_tagged && accesses_memory(insn), absolute_address(insn)) {
                self.tagged_variables.entry(variable).or_insert(insn.ip());
            }
            if is_atomic_rmw(insn) && !is_tagged && self.gaps.insert(insn.ip()) {
                let disassembly = self.disasm.format(insn);
                if on_own_stack(&code, idx) {
                    let why = LockedWhy::OwnStack;
                    self.report.untagged_locked.push(UntaggedLocked {
                        pc: insn.ip(),
                        function: name.clone(),
                        disassembly,
                        why,
                    });
                    continue;
                }
                if let Some(variable) = absolute_address(insn) {
                    self.gap_variables.push((insn.ip(), variable));
                }
                self.report.findings.push(Finding::LikelyGap { pc: insn.ip(), function: name.clone(), disassembly });
            }
        }

        // Tagged PCs in ascending order, so the previous instruction's tag is known.
        let mut tags: Vec<Option<Tag>> = vec![None; code.len()];
        for i in first..last {
            if std::mem::replace(&mut self.handled[i], true) {
                continue;
            }
            let at = self.atomics[i];
            let index = code.partition_point(|insn| insn.ip() <= at);
            let Some(idx) = index.checked_sub(1) else { continue };
            let insn = &code[idx];
            let bad = |reason| Finding::BadAtomicPc { pc: at, function: Some(name.clone()), reason };
            if insn.ip() != at {
                let reason =
                    BadPc::NotInstructionStart { instruction: insn.ip(), disassembly: self.disasm.format(insn) };
                self.report.findings.push(bad(reason));
                continue;
            }
            if insn.is_invalid() {
                self.report.findings.push(bad(BadPc::Undecodable));
                continue;
            }
            let previous = previous_tag(&code, &tags, idx);
            let tag = if accesses_memory(insn) {
                Tag::Root(at)
            } else if is_fence(insn) {
                self.explain(at, &name, insn, Explanation::Fence);
                Tag::Root(at)
            } else if let Some(Tag::Root(atomic) | Tag::Lowered(atomic)) = previous {
                self.explain(at, &name, insn, Explanation::LoweringOf { atomic });
                Tag::Lowered(atomic)
            } else if let Some(atomic) =
                tagged_access_right_after(&code, tagged, idx).or_else(|| tagged_access_reading(&code, tagged, idx))
            {
                self.explain(at, &name, insn, Explanation::LoweringOf { atomic });
                Tag::Lowered(atomic)
            } else if let Some(atomic) = atomic_shortly_before(&code, &tags, idx, &|a| self.image.is_read_only(a))
                .or_else(|| atomic_branching_here(&code, &tags, idx))
            {
                self.explain(at, &name, insn, Explanation::FenceLabel { atomic });
                Tag::FenceLabel
            } else {
                let reason = BadPc::NoMemoryAccess { disassembly: self.disasm.format(insn) };
                self.report.findings.push(bad(reason));
                Tag::Bad
            };
            tags[idx] = Some(tag);
        }
        true
    }

    fn explain(&mut self, pc: u64, function: &str, insn: &Instruction, why: Explanation) {
        let disassembly = self.disasm.format(insn);
        self.report.explained.push(Explained { pc, function: function.to_string(), disassembly, why });
    }
}

/// How far [`tagged_access_reading`] follows a register to the atomic that reads it.
const OPERAND_REACH: usize = 16;

/// The tagged memory access that reads a register `code[idx]` writes, within [`OPERAND_REACH`]
/// instructions on the fall-through path (following up to two jumps), before the register is
/// overwritten: `code[idx]` computes an operand of that atomic, and LLVM labels it with the atomic's
/// PC section. The scheduler may put plain stores between them (`add rdi, 0x10` computing the new
/// value of a `lock cmpxchg` that publishes an `Arc`, its contents initialised in between), or lay
/// the atomic out behind a jump (`mov eax, 2; jmp L … L: lock cmpxchg`, a peeled first attempt).
fn tagged_access_reading(code: &[Instruction], tagged: &[u64], idx: usize) -> Option<u64> {
    use iced_x86::FlowControl;
    let mut factory = InstructionInfoFactory::new();
    let written = |factory: &mut InstructionInfoFactory, insn: &Instruction| -> Vec<iced_x86::Register> {
        let info = factory.info(insn);
        info.used_registers()
            .iter()
            .filter(|r| matches!(r.access(), OpAccess::Write | OpAccess::ReadWrite))
            .map(|r| r.register().full_register())
            .collect()
    };
    let mut live = written(&mut factory, &code[idx]);
    let (mut p, mut jumps) = (idx + 1, 0);
    for _ in 0..OPERAND_REACH {
        let insn = code.get(p)?;
        if insn.is_invalid() {
            return None;
        }
        match insn.flow_control() {
            FlowControl::UnconditionalBranch if jumps < 2 => {
                let target = insn.near_branch_target();
                p = code.iter().position(|i| i.ip() == target)?;
                jumps += 1;
                continue;
            }
            FlowControl::Next | FlowControl::ConditionalBranch => {}
            _ => return None,
        }
        let info = factory.info(insn);
        let reads = |r: &iced_x86::UsedRegister| {
            matches!(r.access(), OpAccess::Read | OpAccess::ReadWrite | OpAccess::CondRead | OpAccess::ReadCondWrite)
                && live.contains(&r.register().full_register())
        };
        let uses_live = info.used_registers().iter().any(reads);
        if uses_live && accesses_memory(insn) && tagged.binary_search(&insn.ip()).is_ok() {
            return Some(insn.ip());
        }
        let overwritten = written(&mut factory, insn);
        if !uses_live {
            live.retain(|r| !overwritten.contains(r));
        }
        if live.is_empty() {
            return None;
        }
        p += 1;
    }
    None
}

/// Whether the memory operand of `code[idx]` is on the thread's own stack: based on RSP or RBP (the
/// frame pointer, which racewatch's builds keep), or on a register whose last write before it, in
/// code order, is `lea reg, [rsp|rbp + disp]`.
fn on_own_stack(code: &[Instruction], idx: usize) -> bool {
    use iced_x86::Register::{RBP, RSP};
    let insn = &code[idx];
    if memory_operand(insn).is_none() || insn.memory_index() != iced_x86::Register::None {
        return false;
    }
    let base = insn.memory_base().full_register();
    if matches!(base, RSP | RBP) {
        return true;
    }
    if base == iced_x86::Register::None || base == iced_x86::Register::RIP {
        return false;
    }
    use iced_x86::Register::{R10, R11, R8, R9, RAX, RCX, RDI, RDX, RSI};
    let caller_saved = matches!(base, RAX | RCX | RDX | RSI | RDI | R8 | R9 | R10 | R11);
    let mut factory = InstructionInfoFactory::new();
    for before in code[..idx].iter().rev() {
        if caller_saved && before.flow_control() == iced_x86::FlowControl::Call {
            return false;
        }
        let info = factory.info(before);
        let writes_base = info.used_registers().iter().any(|r| {
            !matches!(r.access(), OpAccess::Read | OpAccess::CondRead | OpAccess::None)
                && r.register().full_register() == base
        });
        if writes_base {
            return before.mnemonic() == Mnemonic::Lea
                && matches!(before.memory_base(), RSP | RBP)
                && before.memory_index() == iced_x86::Register::None;
        }
    }
    false
}

/// Untagged instructions [`previous_tag`] and [`tagged_access_right_after`] look across.
const SPILLS: usize = 6;

/// The tag of the nearest tagged instruction before `idx`, across at most [`SPILLS`] untagged
/// [interleaved](is_interleaved) instructions: unoptimised code (debug builds) spills a lowered atomic's
/// intermediate values between its tagged instructions (`lock cmpxchg; sete cl; mov [rbp-0x22], al; test cl, 1; jne`
/// in a debug `AtomicBool::fetch_or`).
fn previous_tag(code: &[Instruction], tags: &[Option<Tag>], idx: usize) -> Option<Tag> {
    let mut p = idx.checked_sub(1)?;
    for _ in 0..=SPILLS {
        if let Some(tag) = tags[p] {
            return Some(tag);
        }
        if !is_interleaved(&code[p]) {
            return None;
        }
        p = p.checked_sub(1)?;
    }
    None
}

/// An untagged instruction that code generation may place between the tagged instructions of one lowered
/// atomic: a spill or reload, or a register move, clear or address computation (`mov sil, al` before the `sub` of a debug
/// `fetch_min`, `xor eax, eax` setting up a `lock cmpxchg`).
fn is_interleaved(insn: &Instruction) -> bool {
    use iced_x86::Mnemonic::{Lea, Mov, Movsx, Movsxd, Movzx, Xor};
    is_stack_spill(insn)
        || (!accesses_memory(insn) && matches!(insn.mnemonic(), Mov | Movzx | Movsx | Movsxd | Xor | Lea))
}

/// A `mov` to or from the stack frame (a register spill or reload).
fn is_stack_spill(insn: &Instruction) -> bool {
    insn.mnemonic() == iced_x86::Mnemonic::Mov
        && memory_operand(insn).is_some()
        && matches!(insn.memory_base(), iced_x86::Register::RBP | iced_x86::Register::RSP)
}

/// The PCs of the instructions in `bytes` (code at address `ip`) that access memory other than the
/// stack frame (spills and reloads through RBP/RSP are left out).
pub fn memory_access_pcs(bytes: &[u8], ip: u64) -> Vec<u64> {
    decode(bytes, ip)
        .iter()
        .filter(|i| accesses_memory(i) && !is_stack_spill(i) && !i.is_stack_instruction())
        .map(Instruction::ip)
        .collect()
}

/// Decodes `bytes` (at address `ip`) linearly; bytes that do not decode
/// become invalid instructions, so decoding always reaches the end.
fn decode(bytes: &[u8], ip: u64) -> Vec<Instruction> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let mut code = Vec::with_capacity(bytes.len() / 4);
    while decoder.can_decode() {
        code.push(decoder.decode());
    }
    code
}

/// True when an operand of `insn` reads or writes memory (`lea` and
/// multi-byte `nop` have memory operands that do not).
pub fn accesses_memory(insn: &Instruction) -> bool {
    if insn.is_invalid() || memory_operand(insn).is_none() {
        return false;
    }
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(insn);
    (0..insn.op_count()).any(|i| {
        is_memory_operand(insn.op_kind(i)) && !matches!(info.op_access(i), OpAccess::NoMemAccess | OpAccess::None)
    })
}

fn is_fence(insn: &Instruction) -> bool {
    matches!(insn.mnemonic(), Mnemonic::Mfence | Mnemonic::Lfence | Mnemonic::Sfence)
}

/// Intel-syntax text of one instruction, absolute addresses for RIP-relative
/// operands and branch targets.
pub struct Disassembler {
    formatter: IntelFormatter,
}

impl Default for Disassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Disassembler {
    pub fn new() -> Self {
        let mut formatter = IntelFormatter::new();
        let options = formatter.options_mut();
        options.set_hex_prefix("0x");
        options.set_hex_suffix("");
        options.set_uppercase_hex(false);
        options.set_space_after_operand_separator(true);
        options.set_branch_leading_zeros(false);
        Disassembler { formatter }
    }

    pub fn format(&mut self, insn: &Instruction) -> String {
        if insn.is_invalid() {
            return "(bad)".to_string();
        }
        let mut out = String::new();
        self.formatter.format(insn, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::pcsections::FEATURE_ATOMICS;

    /// One blob of code at a fixed address, one function name for all of it.
    struct Blob {
        base: u64,
        bytes: Vec<u8>,
    }

    impl Image for Blob {
        fn read_at(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
            let start = usize::try_from(vaddr.checked_sub(self.base)?).ok()?;
            self.bytes.get(start..start.checked_add(len)?)
        }
        fn function_name(&self, addr: u64) -> Option<String> {
            (addr >= self.base && addr < self.base + self.bytes.len() as u64).then(|| "f".to_string())
        }
        fn is_read_only(&self, addr: u64) -> bool {
            (READ_ONLY..READ_ONLY + 0x100).contains(&addr)
        }
    }

    /// A `.got`-like range of the blob tests.
    const READ_ONLY: u64 = 0x9000;

    fn entry(pc: u64, size: u64) -> CoveredEntry {
        CoveredEntry { pc, size, features: FEATURE_ATOMICS, stack_args_size: None }
    }

    const BASE: u64 = 0x1000;

    /// push rbp; mov rbp,rsp; lock xadd [rip+0x10],rax; mov rax,[rip+0x20];
    /// xchg [rdi],rax; lock cmpxchg [rdi],rsi; sete cl; mfence; lea rax,[rdi+8];
    /// pop rbp; ret
    fn sample() -> (Blob, Vec<u64>) {
        let parts: &[&[u8]] = &[
            &[0x55],                                        // 0x1000 push rbp
            &[0x48, 0x89, 0xe5],                            // 0x1001 mov rbp,rsp
            &[0xf0, 0x48, 0x0f, 0xc1, 0x05, 0x10, 0, 0, 0], // 0x1004 lock xadd [rip+0x10],rax
            &[0x48, 0x8b, 0x05, 0x20, 0, 0, 0],             // 0x100d mov rax,[rip+0x20]
            &[0x48, 0x87, 0x07],                            // 0x1014 xchg [rdi],rax
            &[0xf0, 0x48, 0x0f, 0xb1, 0x37],                // 0x1017 lock cmpxchg [rdi],rsi
            &[0x0f, 0x94, 0xc1],                            // 0x101c sete cl
            &[0x0f, 0xae, 0xf0],                            // 0x101f mfence
            &[0x48, 0x8d, 0x47, 0x08],                      // 0x1022 lea rax,[rdi+8]
            &[0x5d],                                        // 0x1026 pop rbp
            &[0xc3],                                        // 0x1027 ret
        ];
        assemble(parts)
    }

    fn size(blob: &Blob) -> u64 {
        blob.bytes.len() as u64
    }

    #[test]
    fn fully_tagged_function_passes() {
        let (blob, s) = sample();
        // lock xadd, mov load, xchg, lock cmpxchg, its sete, mfence
        let atomics = [s[2], s[3], s[4], s[5], s[6], s[7]];
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &atomics);
        assert!(report.passed(), "{:#?}", report.findings);
        assert_eq!((report.covered_functions, report.functions_decoded, report.atomic_pcs), (1, 1, 6));
        assert_eq!(report.instructions, 11);
        assert_eq!(
            report.explained.iter().map(|e| (e.pc, e.why)).collect::<Vec<_>>(),
            vec![(s[6], Explanation::LoweringOf { atomic: s[5] }), (s[7], Explanation::Fence)]
        );
    }

    #[test]
    fn untagged_lock_and_xchg_are_gaps() {
        let (blob, s) = sample();
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[3]]);
        let gaps: Vec<_> = report
            .findings
            .iter()
            .map(|f| match f {
                Finding::LikelyGap { pc, function, disassembly } => (*pc, function.as_str(), disassembly.clone()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(gaps.len(), 3);
        assert_eq!(gaps[0].0, s[2]);
        assert!(gaps[0].2.starts_with("lock xadd"), "{}", gaps[0].2);
        assert_eq!(gaps[1].0, s[4]);
        assert!(gaps[1].2.starts_with("xchg"), "{}", gaps[1].2);
        assert_eq!(gaps[2].0, s[5]);
        assert!(!report.passed());
    }

    #[test]
    fn tagged_non_memory_instruction_is_bad() {
        let (blob, s) = assemble(&[
            &[0x55],                   // push rbp
            &[0x48, 0x89, 0xe5],       // mov rbp, rsp (tagged)
            &[0x90],                   // nop
            &[0x48, 0x8d, 0x4f, 0x08], // lea rcx, [rdi+8] (tagged; not an operand of the xadd)
            &[0x90],
            &[0x90],
            &[0x90],
            &[0x90],
            &[0xf0, 0x48, 0x0f, 0xc1, 0x05, 0x10, 0, 0, 0], // lock xadd [rip+0x10], rax (tagged)
            &[0xc3],
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[1], s[3], s[8]]);
        let bad: Vec<_> = report
            .findings
            .iter()
            .map(|f| match f {
                Finding::BadAtomicPc { pc, reason: BadPc::NoMemoryAccess { disassembly }, .. } => {
                    (*pc, disassembly.clone())
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(bad.iter().map(|b| b.0).collect::<Vec<_>>(), vec![s[1], s[3]]);
        assert_eq!(bad[0].1, "mov rbp, rsp");
        assert_eq!(bad[1].1, "lea rcx, [rdi+8]");
    }

    #[test]
    fn sete_without_preceding_atomic_is_bad() {
        let (blob, s) = sample();
        // cmpxchg untagged (a gap), sete tagged: nothing explains the sete.
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[2], s[4], s[6]]);
        assert!(report.findings.iter().any(
            |f| matches!(f, Finding::BadAtomicPc { pc, reason: BadPc::NoMemoryAccess { .. }, .. } if *pc == s[6])
        ));
        assert!(report.findings.iter().any(|f| matches!(f, Finding::LikelyGap { pc, .. } if *pc == s[5])));
    }

    #[test]
    fn mid_instruction_and_uncovered_pcs() {
        let (blob, s) = sample();
        let covered = [entry(BASE, s[6] - BASE)]; // ends before sete
        let atomics = [s[2] + 1, s[2], s[4], s[5], s[7], 0x9999];
        let report = verify_tables(&blob, &covered, &atomics);
        let reasons: Vec<_> = report
            .findings
            .iter()
            .map(|f| match f {
                Finding::BadAtomicPc { pc, reason, .. } => (*pc, reason.clone()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(
            matches!(&reasons[0], (pc, BadPc::NotInstructionStart { instruction, .. }) if *pc == s[2] + 1 && *instruction == s[2])
        );
        assert_eq!(reasons[1], (s[7], BadPc::NotCovered));
        assert_eq!(reasons[2], (0x9999, BadPc::NotCovered));
    }

    #[test]
    fn garbage_tables_do_not_panic() {
        let (blob, s) = sample();
        let covered = [
            entry(BASE, size(&blob) + 100), // runs off the end
            entry(u64::MAX - 2, 100),       // wraps
            entry(0, 0),
            entry(BASE + 3, 5), // starts mid-instruction, overlaps
            entry(BASE, u64::MAX),
        ];
        let atomics = [0, u64::MAX, s[2], s[4] + 2, BASE + 1];
        let report = verify_tables(&blob, &covered, &atomics);
        assert!(!report.passed());
        let unreadable = report.findings.iter().filter(|f| matches!(f, Finding::UnreadableFunction { .. })).count();
        assert_eq!(unreadable, 3, "{:#?}", report.findings);
        let bad: Vec<(u64, &BadPc)> = report
            .findings
            .iter()
            .filter_map(|f| match f {
                Finding::BadAtomicPc { pc, reason, .. } => Some((*pc, reason)),
                _ => None,
            })
            .collect();
        // Only `BASE + 3` (5 bytes) decodes: `in eax, 0xf0` at BASE + 3, then
        // a lock xadd cut short. Readable functions are judged first.
        assert_eq!(bad.len(), 5, "{bad:#?}");
        assert_eq!(bad[0], (0, &BadPc::NotCovered));
        assert_eq!(bad[1], (BASE + 1, &BadPc::Unreadable));
        assert!(
            matches!(bad[2], (pc, BadPc::NotInstructionStart { instruction, .. }) if pc == s[2] && *instruction == BASE + 3)
        );
        assert_eq!(bad[3], (s[4] + 2, &BadPc::Unreadable));
        assert_eq!(bad[4], (u64::MAX, &BadPc::NotCovered));
    }

    #[test]
    fn undecodable_bytes() {
        let blob = Blob { base: BASE, bytes: vec![0x06, 0x0f, 0x0b, 0xc3] }; // invalid in 64-bit, ud2, ret
        let report = verify_tables(&blob, &[entry(BASE, 4)], &[BASE]);
        assert_eq!(
            report.findings,
            vec![Finding::BadAtomicPc { pc: BASE, function: Some("f".into()), reason: BadPc::Undecodable }]
        );
    }

    #[test]
    fn truncated_last_instruction() {
        let (mut blob, s) = sample();
        blob.bytes.truncate((s[2] - BASE + 4) as usize); // lock xadd cut short
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[2]]);
        assert_eq!(report.findings.len(), 1);
        assert!(matches!(report.findings[0], Finding::BadAtomicPc { reason: BadPc::Undecodable, .. }));
    }

    /// Concatenates instructions at BASE; returns the blob and their addresses.
    #[test]
    fn untagged_lock_on_a_variable_tagged_elsewhere_is_a_compiler_atomic() {
        let parts: &[&[u8]] = &[
            &[0xf0, 0x48, 0x0f, 0xc1, 0x05, 0x00, 0x01, 0, 0], // 0x1000 lock xadd [0x1109],rax (tagged)
            &[0xf0, 0x48, 0x0f, 0xc1, 0x05, 0xf7, 0x00, 0, 0], // 0x1009 lock xadd [0x1109],rax (untagged)
            &[0xf0, 0x48, 0x0f, 0xc1, 0x05, 0x00, 0x02, 0, 0], // 0x1012 lock xadd [0x121b],rax (untagged)
            &[0xc3],
        ];
        let (blob, s) = assemble(parts);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0]]);
        assert_eq!(report.untagged_locked.len(), 1, "{report:#?}");
        assert_eq!(report.untagged_locked[0].pc, s[1]);
        assert_eq!(report.untagged_locked[0].why, LockedWhy::TaggedElsewhere { variable: 0x1109, tagged: s[0] });
        // A variable no tagged atomic touches: inline assembly, still a finding.
        assert!(matches!(report.findings.as_slice(), [Finding::LikelyGap { pc, .. }] if *pc == s[2]), "{report:#?}");
    }

    #[test]
    fn fence_label_after_register_work_and_a_constant_load_is_explained() {
        let parts: &[&[u8]] = &[
            &[0xf0, 0x48, 0xff, 0x0f],                   // 0x1000 lock dec [rdi] (tagged)
            &[0x83, 0xe0, 0x01],                         // and eax, 1
            &[0x89, 0xc1],                               // mov ecx, eax
            &[0x48, 0x8b, 0x05, 0xf2, 0x7f, 0x00, 0x00], // 0x1009 mov rax, [0x9002] (a GOT slot)
            &[0x83, 0xf9, 0x02],                         // cmp ecx, 2
            &[0x89, 0xca],                               // mov edx, ecx
            &[0x75, 0x00],                               // jne (next)
            &[0x48, 0x8d, 0x47, 0x08],                   // lea rax, [rdi+8] (tagged: the fence's label)
            &[0xc3],
        ];
        let (blob, s) = assemble(parts);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[7]]);
        assert!(report.passed(), "{:#?}", report.findings);
        assert_eq!(
            report.explained.last().map(|e| (e.pc, e.why)),
            Some((s[7], Explanation::FenceLabel { atomic: s[0] }))
        );
        // The same load from writable data is an access between them: no longer a fence label.
        let mut writable = blob.bytes.clone();
        writable[12] = 0x01; // mov rax, [0x8002]
        let blob = Blob { base: BASE, bytes: writable };
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[7]]);
        assert!(!report.passed());
    }

    fn assemble(parts: &[&[u8]]) -> (Blob, Vec<u64>) {
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        for p in parts {
            starts.push(BASE + bytes.len() as u64);
            bytes.extend_from_slice(p);
        }
        (Blob { base: BASE, bytes }, starts)
    }

    #[test]
    fn fence_label_at_the_target_of_the_branch_after_an_atomic_is_explained() {
        // Arc::drop: lock dec [rdi]; je L; (the other side: a table load, jmp rcx); L: mov rdi, rdx (tagged)
        let (blob, s) = assemble(&[
            &[0xf0, 0x48, 0xff, 0x0f], // lock dec qword [rdi] (tagged)
            &[0x74, 0x06],             // je +6 -> mov rdi, rdx
            &[0x48, 0x63, 0x0c, 0x88], // movsxd rcx, dword [rax + rcx*4]
            &[0xff, 0xe1],             // jmp rcx
            &[0x48, 0x89, 0xd7],       // mov rdi, rdx (tagged: the fence's label)
            &[0xc3],
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[4]]);
        assert!(report.passed(), "{:#?}", report.findings);
        assert!(report.explained.iter().any(|e| e.pc == s[4] && e.why == Explanation::FenceLabel { atomic: s[0] }));
        // Not after an atomic: the same label is a bad PC.
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[4]]);
        assert!(!report.passed());
    }

    #[test]
    fn compiler_fence_label_and_operand_setup_are_explained() {
        let (blob, s) = assemble(&[
            &[0xb8, 0x01, 0, 0, 0],          // mov eax, 1        (tagged: cmpxchg setup)
            &[0xf0, 0x48, 0x0f, 0xb1, 0x17], // lock cmpxchg [rdi], rdx
            &[0xf0, 0x48, 0xff, 0x0f],       // lock dec qword [rdi]
            &[0x75, 0x00],                   // jne +0
            &[0xbe, 0x18, 0, 0, 0],          // mov esi, 0x18     (tagged: fence label)
            &[0xc3],                         // ret
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[1], s[2], s[4]]);
        assert!(report.passed(), "{:#?}", report.findings);
        assert_eq!(
            report.explained.iter().map(|e| (e.pc, e.why)).collect::<Vec<_>>(),
            vec![(s[0], Explanation::LoweringOf { atomic: s[1] }), (s[4], Explanation::FenceLabel { atomic: s[2] })]
        );
    }

    #[test]
    fn fence_label_after_a_plain_access_is_bad() {
        let (blob, s) = assemble(&[
            &[0xf0, 0x48, 0xff, 0x0f], // lock dec qword [rdi]
            &[0x48, 0x89, 0x06],       // mov [rsi], rax (plain store)
            &[0x48, 0xff, 0xc7],       // inc rdi (tagged)
            &[0xc3],
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[2]]);
        assert!(matches!(
            report.findings.as_slice(),
            [Finding::BadAtomicPc { pc, reason: BadPc::NoMemoryAccess { .. }, .. }] if *pc == s[2]
        ));
        // Too far after the atomic: seven untagged instructions between.
        let mut parts: Vec<&[u8]> = vec![&[0xf0, 0x48, 0xff, 0x0f]];
        parts.extend([&[0x90][..]; MAX_FENCE_DISTANCE + 1]);
        parts.extend([&[0x48, 0xff, 0xc7][..], &[0xc3]]);
        let (blob, s) = assemble(&parts);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[MAX_FENCE_DISTANCE + 2]]);
        assert_eq!(report.findings.len(), 1, "{:#?}", report.findings);
    }

    #[test]
    fn untagged_lock_on_a_stack_local_is_a_fence_note_and_elsewhere_a_gap() {
        let (blob, s) = assemble(&[
            &[0x48, 0xc7, 0x45, 0xf8, 0, 0, 0, 0], // mov qword [rbp-8], 0
            &[0x48, 0x8d, 0x45, 0xf8],             // lea rax, [rbp-8]
            &[0xf0, 0x48, 0xf7, 0x10],             // lock not qword [rax]: full_fence on a local
            &[0x48, 0x8b, 0x07],                   // mov rax, [rdi]
            &[0xf0, 0x48, 0xf7, 0x10],             // lock not qword [rax]: shared memory, a gap
            &[0x48, 0x8d, 0x45, 0xf8],             // lea rax, [rbp-8]
            &[0xe8, 0, 0, 0, 0],                   // call (rax is the callee's result now)
            &[0xf0, 0x48, 0xf7, 0x10],             // lock not qword [rax]: a gap
            &[0xc3],
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[]);
        let gaps: Vec<u64> = report.findings.iter().map(Finding::pc).collect();
        assert_eq!(gaps, [s[4], s[7]], "{:#?}", report.findings);
        assert_eq!(
            report.untagged_locked.iter().map(|u| (u.pc, u.why)).collect::<Vec<_>>(),
            [(s[2], LockedWhy::OwnStack)]
        );
    }

    #[test]
    fn tagged_operand_setup_reaches_its_atomic_across_stores_and_jumps() {
        let (blob, s) = assemble(&[
            &[0x48, 0x83, 0xc7, 0x10],       // add rdi, 0x10 (tagged: the new value)
            &[0xc7, 0x40, 0x10, 0, 0, 0, 0], // mov dword [rax+0x10], 0 (plain init)
            &[0xf0, 0x49, 0x0f, 0xb1, 0x3e], // lock cmpxchg [r14], rdi (tagged)
            &[0x48, 0xff, 0xc3],             // inc rbx
            &[0xb8, 2, 0, 0, 0],             // mov eax, 2 (tagged: the expected value)
            &[0xeb, 0x01],                   // jmp over the nop
            &[0x90],
            &[0xf0, 0x49, 0x0f, 0xb1, 0x4f, 0x08], // lock cmpxchg [r15+8], rcx (tagged, reads rax)
            &[0xc3],
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[2], s[4], s[7]]);
        assert!(report.passed(), "{:#?}", report.findings);
        assert_eq!(
            report.explained.iter().map(|e| (e.pc, e.why)).collect::<Vec<_>>(),
            [(s[0], Explanation::LoweringOf { atomic: s[2] }), (s[4], Explanation::LoweringOf { atomic: s[7] })]
        );
        // The register is overwritten before the atomic: no operand of it.
        let (blob, s) = assemble(&[
            &[0x48, 0x83, 0xc7, 0x10],       // add rdi, 0x10 (tagged)
            &[0xc7, 0x40, 0x10, 0, 0, 0, 0], // mov dword [rax+0x10], 0
            &[0x48, 0x89, 0xc7],             // mov rdi, rax
            &[0xf0, 0x49, 0x0f, 0xb1, 0x3e], // lock cmpxchg [r14], rdi (tagged)
            &[0xc3],
        ]);
        let report = verify_tables(&blob, &[entry(BASE, size(&blob))], &[s[0], s[3]]);
        assert!(
            matches!(
                report.findings.as_slice(),
                [Finding::BadAtomicPc { pc, reason: BadPc::NoMemoryAccess { .. }, .. }] if *pc == s[0]
            ),
            "{:#?}",
            report.findings
        );
    }
}
