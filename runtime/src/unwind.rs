//! Stack capture through code with or without frame pointers, by the modules' `.eh_frame` CFI.
//!
//! The precompiled Rust standard library, libc and libomp keep no frame pointers, so a frame-pointer
//! walk stops (or wanders) at their first frame. This walker runs the DWARF call-frame program of
//! each frame's function up to its PC (gimli, with rule storage on the stack: no allocation) to find
//! the canonical frame address, the return address and the caller's callee-saved registers. A PC
//! without CFI (JIT code, a module loaded since the table was built) takes one frame-pointer step.
//! Stack memory is read without faulting; the walk stops at the first implausible frame (a caller's
//! stack pointer not above the callee's, an undefined return address, a CFA given by an expression).
//! Async-signal-safe.

use crate::sys::creation::{self, Creation, OwnStack};
use crate::sys::mem;
use crate::sys::signal::Regs;
use crate::sys::unwind_info::{self, UnwindSegment};
use addr2line::gimli::{
    self, BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EndianSlice, FrameDescriptionEntry, NativeEndian, Register,
    RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow,
};

/// DWARF register numbers of x86-64 (the return address is column 16), indexing [`Frame::regs`].
const DWARF_TO_GPR: [usize; 16] = [0, 2, 1, 3, 6, 7, 5, 4, 8, 9, 10, 11, 12, 13, 14, 15];
const DWARF_RSP: usize = 7;
const DWARF_RBP: usize = 6;
const DWARF_RA: u16 = 16;
/// Registers a callee must preserve (System V): their values carry over to the caller unless a rule
/// says where they were saved. The others are unknown in a caller frame.
/// (rbx, rbp, r12–r15; the caller's rsp is the CFA.)
const CALLEE_SAVED: [usize; 6] = [3, 6, 12, 13, 14, 15];

/// Bytes of the interrupted stack copied in one read (from the stack pointer up): the frames of a
/// typical stack are read from the copy, deeper ones one word at a time.
const STACK_COPY: usize = 8 << 10;

/// The interrupted thread's stack from its stack pointer up, as far as [`STACK_COPY`] and the
/// mapping allow (a buffer of the caller's), with non-faulting reads beyond.
struct StackCopy<'a> {
    base: u64,
    bytes: &'a [u8],
    /// Read the calling thread's own stack in place instead (and nothing outside it).
    own: Option<OwnStack>,
}

impl StackCopy<'_> {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        if let Some(own) = &self.own {
            return own.read_u64(addr);
        }
        let offset = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        match self.bytes.get(offset..offset.checked_add(8)?) {
            Some(word) => Some(u64::from_ne_bytes(word.try_into().ok()?)),
            None => mem::read_u64(addr),
        }
    }
}

/// Rule storage for the CFI evaluator: a fixed array on the (runtime) stack.
struct OnStack;

impl<T: gimli::ReaderOffset> UnwindContextStorage<T> for OnStack {
    type Rules = [(Register, RegisterRule<T>); 24];
    type Stack = [UnwindTableRow<T, Self>; 4];
}

/// A frame's registers in DWARF numbering (`None`: not recoverable), and its PC.
#[derive(Clone, Copy, Debug)]
struct Frame {
    pc: u64,
    regs: [Option<u64>; 16],
}

impl Frame {
    fn from_regs(regs: &Regs) -> Frame {
        let mut dwarf = [None; 16];
        for (number, &gpr) in DWARF_TO_GPR.iter().enumerate() {
            dwarf[number] = Some(regs.gpr[gpr]);
        }
        Frame { pc: regs.rip, regs: dwarf }
    }

    fn rsp(&self) -> Option<u64> {
        self.regs[DWARF_RSP]
    }
}

/// Writes the return address of each caller of the frame interrupted at `regs` into `out`, innermost
/// first; returns how many entries were written (symbolize `addr - 1`).
pub fn capture(regs: &Regs, out: &mut [u64]) -> usize {
    let mut buffer = [0u8; STACK_COPY];
    let copied = mem::read_into(regs.rsp(), &mut buffer);
    let stack = StackCopy { base: regs.rsp(), bytes: &buffer[..copied], own: None };
    let mut frames = 0;
    let mut frame = Frame::from_regs(regs);
    // The interrupted frame is looked up at its PC; callers at `return address - 1` (the call).
    let mut lookup = frame.pc;
    while frames < out.len() {
        let Some(caller) = step(&stack, &frame, lookup) else { break };
        if caller.pc == 0 || caller.rsp().zip(frame.rsp()).is_none_or(|(up, down)| up <= down) {
            break;
        }
        out[frames] = caller.pc;
        frames += 1;
        lookup = caller.pc.wrapping_sub(1);
        frame = caller;
    }
    frames
}

/// The calling function's registers as the unwinder needs them (rip, rsp, rbp and the callee-saved
/// ones), read where this is inlined.
#[inline(always)]
fn current_regs() -> Regs {
    let mut regs = Regs { gpr: [0; 16], rip: 0, rflags: 0 };
    let (rip, rsp, rbp, rbx, r12, r13, r14, r15): (u64, u64, u64, u64, u64, u64, u64, u64);
    // SAFETY: only reads registers (rip by `lea`); touches no memory and no stack.
    unsafe {
        std::arch::asm!(
            "lea {rip}, [rip]",
            "mov {rsp}, rsp",
            "mov {rbp}, rbp",
            "mov {rbx}, rbx",
            rip = out(reg) rip,
            rsp = out(reg) rsp,
            rbp = out(reg) rbp,
            rbx = out(reg) rbx,
            out("r12") r12,
            out("r13") r13,
            out("r14") r14,
            out("r15") r15,
            options(nomem, nostack, preserves_flags),
        );
    }
    regs.rip = rip;
    regs.gpr[Regs::RSP] = rsp;
    regs.gpr[Regs::RBP] = rbp;
    regs.gpr[Regs::RBX] = rbx;
    regs.gpr[12..16].copy_from_slice(&[r12, r13, r14, r15]);
    regs
}

/// Writes the return addresses of the calling thread's stack into `out`, innermost first, from this
/// function's caller on (its first entry returns into the caller of `capture_here`); returns how many.
/// Unwinds by CFI like [`capture`], so frames without frame pointers (libc's, racewatch's own) are
/// walked through. Async-signal-safe, but a few µs per frame: for tests and rare events.
#[inline(never)]
pub fn capture_here(out: &mut [u64]) -> usize {
    capture(&current_regs(), out)
}

/// Fills in where the calling thread is creating a thread (`creation.creator` is its tid): the return
/// addresses of racewatch's own frames, out to the program's code that called racewatch, then of the
/// program's frames. racewatch's own frames (built without frame pointers) are stepped over by their
/// CFI, the program's by their frame pointers (the Rust standard library and code built with
/// racewatch's flags keep them; a frame without one ends the walk), reading the thread's own stack in
/// place: no system call when the thread's stack bounds are recorded ([`creation::OwnStack`]), one per
/// word otherwise. The walk runs on a runtime stack with every signal held (the CFI evaluator's rules
/// take about 4 KiB, which a thread with a small stack may not have to spare); without a free runtime
/// stack nothing is recorded. About 2.8 µs for a stack of five frames.
#[inline(never)]
pub fn capture_creation(creation: &mut Creation) {
    let regs = current_regs();
    let own = OwnStack::of_current(creation.creator, regs.rsp());
    let held = crate::sys::raw::sigprocmask(libc::SIG_SETMASK, Some(u64::MAX));
    crate::sys::stacks::run_on_runtime_stack(crate::sys::stacks::current_sp(), &mut || {
        walk_creation(&regs, own, creation);
    });
    if let Some(old) = held {
        crate::sys::raw::sigprocmask(libc::SIG_SETMASK, Some(old));
    }
}

/// [`capture_creation`]'s walk from the registers of its frame.
fn walk_creation(regs: &Regs, own: Option<OwnStack>, creation: &mut Creation) {
    const MAX_FRAME_SIZE: u64 = 16 << 20;
    let stack = StackCopy { base: 0, bytes: &[], own };
    // racewatch's own frames, by their CFI, out to the program's caller (kept: the reporter leaves
    // them out).
    let mut frame = Frame::from_regs(regs);
    let mut lookup = frame.pc;
    let mut len = 0;
    while len < creation::FRAMES {
        let step = unwind_info::with_own_segment(lookup, |segment| cfi_step(&stack, segment, &frame, lookup));
        let Some(Ok(Some(caller))) = step else { break };
        if caller.pc == 0 || caller.rsp().zip(frame.rsp()).is_none_or(|(up, down)| up <= down) {
            creation.len = len;
            return;
        }
        creation.pcs[len] = caller.pc;
        len += 1;
        frame = caller;
        lookup = caller.pc.wrapping_sub(1);
    }
    // The program's frames, by their frame pointers.
    let mut floor = frame.rsp().unwrap_or(0);
    let mut fp = frame.regs[DWARF_RBP];
    while len < creation::FRAMES {
        let Some(at) = fp.filter(|&at| at % 8 == 0 && at >= floor) else { break };
        let (Some(next), Some(ret)) = (stack.read_u64(at), at.checked_add(8).and_then(|a| stack.read_u64(a))) else {
            break;
        };
        if ret == 0 {
            break;
        }
        creation.pcs[len] = ret;
        len += 1;
        if next <= at || next - at > MAX_FRAME_SIZE {
            break;
        }
        floor = at + 16;
        fp = Some(next);
    }
    creation.len = len;
}

/// The caller of `frame`, whose code is looked up at `lookup`.
fn step(stack: &StackCopy<'_>, frame: &Frame, lookup: u64) -> Option<Frame> {
    match unwind_info::with_segment(lookup, |segment| cfi_step(stack, segment, frame, lookup)) {
        Some(Ok(caller)) => caller,
        // No module, no header, or no FDE for this PC: code without CFI.
        Some(Err(_)) | None => frame_pointer_step(stack, frame),
    }
}

/// One step by the frame-pointer chain: `[rbp]` is the caller's rbp, `[rbp + 8]` the return address.
fn frame_pointer_step(stack: &StackCopy<'_>, frame: &Frame) -> Option<Frame> {
    let rbp = frame.regs[DWARF_RBP].filter(|fp| *fp != 0 && fp % 8 == 0)?;
    let mut caller = Frame { pc: stack.read_u64(rbp.checked_add(8)?)?, regs: [None; 16] };
    caller.regs[DWARF_RBP] = Some(stack.read_u64(rbp)?);
    caller.regs[DWARF_RSP] = Some(rbp + 16);
    Some(caller)
}

/// One step by the CFI of the function at `lookup`. `Err`: no CFI for it; `Ok(None)`: the CFI says
/// this is the outermost frame, or describes it in a way this walker does not follow.
fn cfi_step(
    stack: &StackCopy<'_>,
    segment: &UnwindSegment<'_>,
    frame: &Frame,
    lookup: u64,
) -> gimli::Result<Option<Frame>> {
    let (eh_frame, bases, fde) = fde_for(segment, lookup)?;
    let mut context = UnwindContext::<usize, OnStack>::new_in();
    let row = fde.unwind_info_for_address(&eh_frame, &bases, &mut context, lookup)?;
    Ok(caller_of(stack, frame, row))
}

type Slice<'a> = EndianSlice<'a, NativeEndian>;
type Fde<'a> = FrameDescriptionEntry<Slice<'a>>;

/// The `.eh_frame` of `segment`'s module, its base addresses, and the FDE (the CFI of one function)
/// covering `pc`, found through `.eh_frame_hdr`'s binary-search table. Allocates nothing.
pub fn fde_for<'a>(
    segment: &UnwindSegment<'a>,
    pc: u64,
) -> gimli::Result<(EhFrame<Slice<'a>>, BaseAddresses, Fde<'a>)> {
    let section = |addr: u64| -> gimli::Result<EndianSlice<'a, NativeEndian>> {
        let offset = usize::try_from(addr.wrapping_sub(segment.addr)).map_err(|_| gimli::Error::OffsetOutOfBounds)?;
        let bytes = segment.bytes.get(offset..).ok_or(gimli::Error::OffsetOutOfBounds)?;
        Ok(EndianSlice::new(bytes, NativeEndian))
    };
    let mut bases = BaseAddresses::default().set_eh_frame_hdr(segment.hdr);
    let hdr = EhFrameHdr::from(section(segment.hdr)?).parse(&bases, 8)?;
    let eh_frame_addr = hdr.eh_frame_ptr().direct()?;
    bases = bases.set_eh_frame(eh_frame_addr);
    let eh_frame = EhFrame::from(section(eh_frame_addr)?);
    let table = hdr.table().ok_or(gimli::Error::NoUnwindInfoForAddress)?;
    let fde = table.fde_for_address(&eh_frame, &bases, pc, EhFrame::cie_from_offset)?;
    Ok((eh_frame, bases, fde))
}

/// Applies a CFI row to `frame`: the caller's PC and registers, if the row allows.
fn caller_of(stack: &StackCopy<'_>, frame: &Frame, row: &UnwindTableRow<usize, OnStack>) -> Option<Frame> {
    let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else { return None };
    let cfa = frame.regs.get(usize::from(register.0)).copied().flatten()?.checked_add_signed(offset)?;
    let recover = |rule: RegisterRule<usize>, current: Option<u64>| match rule {
        RegisterRule::SameValue => current,
        // A save slot below the stack pointer was popped already (an epilogue's `pop rbp; ret`, whose
        // row still names the slot): the register holds the caller's value again.
        RegisterRule::Offset(n) => {
            let slot = cfa.checked_add_signed(n)?;
            if frame.rsp().is_some_and(|sp| slot < sp) {
                current
            } else {
                stack.read_u64(slot)
            }
        }
        RegisterRule::ValOffset(n) => cfa.checked_add_signed(n),
        RegisterRule::Register(other) => frame.regs.get(usize::from(other.0)).copied().flatten(),
        _ => None,
    };
    let pc = match row.register(Register(DWARF_RA)) {
        RegisterRule::Undefined => return None,
        rule => recover(rule, None)?,
    };
    let mut caller = Frame { pc, regs: [None; 16] };
    for number in CALLEE_SAVED {
        let rule = match row.register(Register(number as u16)) {
            RegisterRule::Undefined => RegisterRule::SameValue,
            rule => rule,
        };
        caller.regs[number] = recover(rule, frame.regs[number]);
    }
    caller.regs[DWARF_RSP] = Some(cfa);
    Some(caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A leaf function with its own CFI, written out so the test knows every row: at its `ret`, the
    // row still says rbp is saved at CFA-16, a slot `pop rbp` has already left behind.
    core::arch::global_asm!(
        ".pushsection .text.rw_epilogue_leaf,\"ax\",@progbits",
        ".globl rw_epilogue_leaf",
        ".type rw_epilogue_leaf,@function",
        "rw_epilogue_leaf:",
        ".cfi_startproc",
        "push rbp",
        ".cfi_def_cfa_offset 16",
        ".cfi_offset rbp, -16",
        "mov rbp, rsp",
        ".cfi_def_cfa_register rbp",
        "pop rbp",
        ".cfi_def_cfa rsp, 8",
        ".globl rw_epilogue_leaf_ret",
        "rw_epilogue_leaf_ret:",
        "ret",
        ".cfi_endproc",
        ".size rw_epilogue_leaf, . - rw_epilogue_leaf",
        ".popsection",
    );
    extern "C" {
        fn rw_epilogue_leaf_ret();
    }

    #[inline(never)]
    fn deeper(depth: u32, out: &mut [u64]) -> usize {
        let found = if depth == 0 { capture_here(out) } else { deeper(depth - 1, out) };
        std::hint::black_box(found)
    }

    #[test]
    fn capture_here_walks_its_callers() {
        unwind_info::refresh();
        let mut out = [0u64; 64];
        let found = deeper(3, &mut out);
        let start = deeper as fn(u32, &mut [u64]) -> usize as usize as u64;
        let test = capture_here_walks_its_callers as fn() as usize as u64;
        // deeper ×4, then this test, then the harness.
        assert!(found >= 6, "{:x?}", &out[..found]);
        assert!(out[..4].iter().all(|&pc| pc > start && pc < start + 512), "{:x?}", &out[..found]);
        assert!(out[4] > test && out[4] < test + 4096, "{:x?}", &out[..found]);
    }

    #[inline(never)]
    fn create_deeper(depth: u32, creation: &mut Creation) {
        if depth == 0 {
            capture_creation(creation)
        } else {
            create_deeper(depth - 1, creation)
        }
        std::hint::black_box(creation);
    }

    #[test]
    fn creation_stacks_walk_the_creating_thread() {
        unwind_info::refresh();
        assert!(crate::sys::stacks::init_pool(), "runtime stacks");
        let start = create_deeper as fn(u32, &mut Creation) as usize as u64;
        let _serial = creation::FIRST_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let (with_bounds, without, ns) = std::thread::spawn(move || {
            let tid = crate::sys::raw::gettid();
            let mut without = Creation { creator: tid, ..Creation::NONE };
            create_deeper(3, &mut without);
            creation::record_this_thread();
            let mut with_bounds = Creation { creator: tid, ..Creation::NONE };
            create_deeper(3, &mut with_bounds);
            let timer = std::time::Instant::now();
            for _ in 0..1000 {
                let mut again = Creation { creator: tid, ..Creation::NONE };
                create_deeper(3, &mut again);
            }
            (with_bounds, without, timer.elapsed().as_nanos() / 1000)
        })
        .join()
        .unwrap();
        for creation in [with_bounds, without] {
            // create_deeper ×4, then the thread's closure (all by CFI: racewatch's own module here is
            // this test executable).
            let frames = creation.frames();
            assert!(frames.len() >= 5, "{frames:x?}");
            assert!(frames[..4].iter().all(|&pc| pc > start && pc < start + 256), "{frames:x?}");
        }
        eprintln!("capture_creation: {} frames, {ns} ns each", with_bounds.len);
    }

    #[test]
    fn a_register_popped_in_the_epilogue_keeps_its_value() {
        unwind_info::refresh();
        let ret = rw_epilogue_leaf_ret as unsafe extern "C" fn() as usize as u64;
        // The interrupted thread at the `ret`: [rsp] is the return address; rbp already the caller's.
        let stack_words: [u64; 4] = [0x5555_0000_1234, 0, 0, 0];
        let mut regs = Regs { gpr: [0; 16], rip: ret, rflags: 0 };
        regs.gpr[Regs::RSP] = stack_words.as_ptr() as u64;
        regs.gpr[Regs::RBP] = 0x7fff_0000_0040;
        let bytes: Vec<u8> = stack_words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let stack = StackCopy { base: regs.rsp(), bytes: &bytes, own: None };
        let caller = step(&stack, &Frame::from_regs(&regs), ret).expect("a caller");
        assert_eq!(caller.pc, 0x5555_0000_1234);
        assert_eq!(caller.rsp(), Some(regs.rsp() + 8));
        assert_eq!(caller.regs[DWARF_RBP], Some(0x7fff_0000_0040), "rbp was lost at the epilogue");
    }
}
