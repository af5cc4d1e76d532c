//! Watchpoint slots: arm, wait, disarm, collect traps, judge.
//!
//! One slot per hardware watchpoint. A sampled thread A *claims* a free slot
//! (`busy` false → true), publishes a fresh generation in `armed`, arms the
//! watchpoint with `sig_data` = tag | generation | slot, stalls, disarms,
//! *closes* the slot (`armed` = 0), waits for trap handlers still writing,
//! judges the records against its own access, and releases the slot.
//!
//! A thread B that trips the watchpoint decodes its access (in covered code, or
//! in the body of one of libc's memory and string functions, judged as a plain
//! access of the covered code that called it: see [`crate::libcalls`]), then registers as
//! a writer (`writers += 1`) and re-checks that `armed` still holds the
//! generation from its `sig_data`; only then does it take a record index
//! (`count += 1`) and fill that record. The close (`armed = 0`, then read
//! `writers`) and the registration (`writers += 1`, then read `armed`) are
//! both SeqCst, so either B sees the slot closed and backs off, or A sees B
//! and waits for it: A never reads a half-written record, and no record of a
//! closed window is ever written. Everything here is async-signal-safe: fixed
//! static storage, atomics, a `try_lock` that cannot block, raw syscalls.

use crate::decode::{self, CallPath, CodeReader, MemAccess};
use crate::event::{AccessRecord, RaceEvent, Stack, UNWIND_FRAMES};
use crate::index::Access;
use crate::judge::{self, Side};
use crate::sys::perf::{PerfFd, WatchKind, Watchpoint};
use crate::sys::signal::{PerfSignal, Regs, TRAP_PERF_FLAG_ASYNC};
use crate::sys::{mem, thread, xsave};
use crate::{libcalls, profile, queue, registry, stats, unwind};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// x86-64 has four debug registers.
pub const MAX_SLOTS: usize = 4;
/// Traps recorded per watch window; later ones are counted but not kept.
pub const MAX_RECORDS: usize = 4;

/// Top byte of every watchpoint `sig_data` (task-clock samples use `perf::SAMPLE_SIG_DATA`).
const TAG: u64 = 0xa5 << 56;
const TAG_MASK: u64 = 0xff << 56;
const GENERATION_MASK: u64 = (1 << 48) - 1;

/// Reads code and data of this process without faulting.
pub struct OwnMemory;

impl CodeReader for OwnMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        mem::read_into(addr, buf)
    }
}

/// The decoder's copy of the interrupted registers.
pub fn decoder_regs(regs: &Regs) -> decode::Regs {
    decode::Regs { gpr: regs.gpr, rip: regs.rip, rflags: regs.rflags }
}

struct Record {
    generation: u64,
    covered: bool,
    access: AccessRecord,
}

const EMPTY_ACCESS: AccessRecord = AccessRecord {
    tid: 0,
    pc: 0,
    addr: 0,
    size: 0,
    is_write: false,
    is_atomic: false,
    locked: false,
    stack: Stack::EMPTY,
};

struct Slot {
    busy: AtomicBool,
    /// Generation accepting traps, 0 when closed.
    armed: AtomicU64,
    owner: AtomicI32,
    writers: AtomicU32,
    count: AtomicU32,
    records: [spin::Mutex<Record>; MAX_RECORDS],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            busy: AtomicBool::new(false),
            armed: AtomicU64::new(0),
            owner: AtomicI32::new(0),
            writers: AtomicU32::new(0),
            count: AtomicU32::new(0),
            records: [const { spin::Mutex::new(Record { generation: 0, covered: false, access: EMPTY_ACCESS }) };
                MAX_RECORDS],
        }
    }
}

static SLOTS: [Slot; MAX_SLOTS] = [const { Slot::new() }; MAX_SLOTS];
/// The watchpoints' descriptors (-1: not open in this process); `COUNT` of them are open.
static WATCHPOINTS: [AtomicI32; MAX_SLOTS] = [const { AtomicI32::new(-1) }; MAX_SLOTS];
static COUNT: AtomicUsize = AtomicUsize::new(0);
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Opens up to `count` (1..=4) watchpoints; returns how many opened (at least one), or why none did.
/// Call once, at start, from the thread whose later threads are to be watched.
pub fn init(count: u32) -> Result<usize, String> {
    let open = COUNT.load(Ordering::Acquire);
    if open > 0 {
        return Ok(open);
    }
    let wanted = (count as usize).clamp(1, MAX_SLOTS);
    let mut opened = 0;
    let mut first_error = None;
    for (slot, fd) in WATCHPOINTS.iter().enumerate().take(wanted) {
        match Watchpoint::open(slot as u32) {
            Ok(wp) => {
                fd.store(wp.fd().key(), Ordering::Release);
                opened += 1;
            }
            Err(err) => {
                first_error.get_or_insert(err);
                break;
            }
        }
    }
    if opened == 0 {
        let err = first_error.unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::ENOSPC));
        return Err(crate::sys::fd::no_room_message(&err)
            .unwrap_or_else(|| format!("cannot open a hardware watchpoint (perf_event_open: {err})")));
    }
    COUNT.store(opened, Ordering::Release);
    Ok(opened)
}

/// Gives one watchpoint back to the program (its debug register is then free in every thread): the
/// last slot is claimed for good, waited for while a window is open on it (a watch window is short),
/// and its event closed. False when none is left.
pub fn give_back_one() -> bool {
    let open = COUNT.load(Ordering::Acquire);
    let Some(last) = open.checked_sub(1) else { return false };
    // The last slot may hold a code breakpoint (see `crate::aim`): taken down first.
    crate::aim::take_down();
    // A window armed in that slot ends within milliseconds, unless its thread is not running: on a
    // loaded machine (a test suite's parallel jobs on 2 cores) 200 ms was not always enough, and the
    // program's `perf_event_open` then failed with ENOSPC.
    let deadline = thread::monotonic_ns() + 1_000_000_000;
    while SLOTS[last].busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        if thread::monotonic_ns() > deadline {
            return false;
        }
        thread::sleep_us(100);
    }
    if COUNT.compare_exchange(open, last, Ordering::AcqRel, Ordering::Acquire).is_err() {
        SLOTS[last].busy.store(false, Ordering::Release);
        return false;
    }
    if let Some(fd) = PerfFd::from_key(WATCHPOINTS[last].swap(-1, Ordering::AcqRel)) {
        fd.close();
    }
    true
}

/// How many watchpoints are open.
pub fn open_count() -> usize {
    count()
}

/// Closes the watchpoints (no slot is armed afterwards).
pub fn close() {
    COUNT.store(0, Ordering::Release);
    for fd in &WATCHPOINTS {
        if let Some(fd) = PerfFd::from_key(fd.swap(-1, Ordering::AcqRel)) {
            fd.close();
        }
    }
}

/// In a forked child: forgets the parent's watchpoints and every slot's state (the threads that held
/// slots do not exist here).
pub fn forget_after_fork() {
    COUNT.store(0, Ordering::Release);
    for fd in &WATCHPOINTS {
        fd.store(-1, Ordering::Release);
    }
    for slot in &SLOTS {
        slot.armed.store(0, Ordering::Release);
        slot.writers.store(0, Ordering::Release);
        slot.count.store(0, Ordering::Release);
        slot.busy.store(false, Ordering::Release);
    }
}

fn watchpoint(index: usize) -> Option<Watchpoint> {
    PerfFd::from_key(WATCHPOINTS.get(index)?.load(Ordering::Acquire)).map(Watchpoint::from_fd)
}

fn count() -> usize {
    COUNT.load(Ordering::Acquire)
}

/// Top byte of a code breakpoint's `sig_data` (see [`crate::aim`]).
const AIM_TAG: u64 = 0xa6 << 56;

/// The slot code breakpoints take: the last one, when there are at least two (one is left for watches).
fn aim_slot() -> Option<usize> {
    count().checked_sub(1).filter(|&last| last > 0)
}

/// Arms a code breakpoint at `pc` in every thread, its traps tagged with `generation`, on the aim slot:
/// claimed here, or already held by a previous aim (`held`). False when the slot is busy with a watch
/// or the kernel refused (the slot is then free). Async-signal-safe.
pub fn aim_at(pc: u64, generation: u64, held: bool) -> bool {
    let Some(index) = aim_slot() else { return false };
    let slot = &SLOTS[index];
    if !held && slot.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return false;
    }
    let armed = watchpoint(index)
        .is_some_and(|wp| wp.arm(pc, 8, WatchKind::Exec, AIM_TAG | (generation & GENERATION_MASK)).is_ok());
    if !armed {
        release_aim();
    }
    armed
}

/// Disarms the code breakpoint and frees its slot. Async-signal-safe.
pub fn release_aim() {
    let Some(index) = aim_slot() else { return };
    if let Some(wp) = watchpoint(index) {
        let _ = wp.disarm();
    }
    SLOTS[index].busy.store(false, Ordering::Release);
}

/// The generation of a code breakpoint's trap (`None`: not one).
pub fn aim_generation(sig_data: u64) -> Option<u64> {
    (sig_data & TAG_MASK == AIM_TAG).then_some(sig_data & GENERATION_MASK)
}

/// Whether some slot is free right now (a hint: claiming may still fail).
pub fn any_free() -> bool {
    SLOTS.iter().take(count()).any(|slot| !slot.busy.load(Ordering::Relaxed))
}

/// Whether `sig_data` belongs to one of our watchpoints.
pub fn owns(sig_data: u64) -> bool {
    sig_data & TAG_MASK == TAG || aim_generation(sig_data).is_some()
}

fn sig_data(generation: u64, slot: usize) -> u64 {
    TAG | (generation & GENERATION_MASK) << 8 | slot as u64
}

fn parse_sig_data(data: u64) -> Option<(usize, u64)> {
    (data & TAG_MASK == TAG).then_some(((data & 0xff) as usize, (data >> 8) & GENERATION_MASK))
}

/// The aligned 1/2/4/8-byte window containing the first byte of `[addr, addr + size)` and as much of the
/// rest as one debug register can cover.
pub fn window(addr: u64, size: u8) -> (u64, u64) {
    for len in [1u64, 2, 4, 8] {
        let start = addr & !(len - 1);
        if start + len >= addr.saturating_add(u64::from(size.max(1))) {
            return (start, len);
        }
    }
    (addr & !7, 8)
}

/// What the sampled thread asks to watch.
pub struct Watch<'a> {
    pub access: &'a AccessRecord,
    /// The PC heading the access's stack: `access.pc`, or the entry of the libc function the access is
    /// a call to (`access.pc` is then the call).
    pub frame_pc: u64,
    /// A's registers where it was interrupted: its full stack is unwound from them when a race is found.
    pub regs: &'a Regs,
    /// How the access was reached from there.
    pub path: CallPath,
    /// How long to keep the window open.
    pub delay_us: u64,
    /// How the window waits.
    pub stall: Stall,
    pub report_atomic_races: bool,
}

/// How a watch window waits. None of them is a voluntary context switch a program could count, except
/// [`Stall::Sleep`]: at the debug rate only in threads that block on their own anyway, and at the test
/// profile's rate (detection first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Spin on the clock (production rates: a bounded cost, the CPU kept).
    Spin,
    /// Spin, offering the CPU to any other runnable thread between reads of the clock (the debug rate, in a
    /// thread that has not blocked since racewatch's previous handler in it: the threads that may touch
    /// the memory get this CPU on a loaded machine, and the thread still never blocks).
    Yield,
    /// Sleep (the test profile's rate; the debug rate in a thread that blocked meanwhile: no CPU spent on
    /// the window, which matters where windows are long, in processes that spend their time in system
    /// calls).
    Sleep,
}

/// Outcome of [`watch`], for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every slot was busy.
    Busy,
    /// The kernel refused to arm (e.g. a non-canonical address).
    ArmFailed,
    /// The window ran; this many races were found.
    Watched { traps: u32, races: u32 },
}

/// Watches `request.access` (thread A, covered, on the signal path): claims a slot, arms, stalls, disarms,
/// judges what other threads did meanwhile and pushes each race to the queue. Async-signal-safe.
pub fn watch(request: &Watch<'_>) -> Outcome {
    let Some(index) = (0..count().min(MAX_SLOTS))
        .find(|&i| SLOTS[i].busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok())
    else {
        return Outcome::Busy;
    };
    let slot = &SLOTS[index];
    let Some(wp) = watchpoint(index) else {
        slot.busy.store(false, Ordering::Release);
        return Outcome::Busy;
    };
    let opened_ns = thread::monotonic_ns();
    let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed) & GENERATION_MASK;
    let access = request.access;
    slot.owner.store(access.tid, Ordering::Relaxed);
    slot.count.store(0, Ordering::Relaxed);
    slot.armed.store(generation, Ordering::SeqCst);

    let (start, len) = window(access.addr, access.size);
    let kind = if access.is_write { WatchKind::ReadWrite } else { WatchKind::Write };
    let armed = wp.arm(start, len, kind, sig_data(generation, index));
    let arm_ns = thread::monotonic_ns();
    if armed.is_err() {
        close_window(slot);
        slot.busy.store(false, Ordering::Release);
        return Outcome::ArmFailed;
    }
    stats::bump(stats::Counter::WatchesArmed);
    profile::count_watch(access.pc);
    match request.stall {
        Stall::Spin => thread::stall_us(request.delay_us),
        Stall::Yield => thread::yield_us(request.delay_us),
        Stall::Sleep => {
            stats::bump(stats::Counter::WindowsSlept);
            thread::sleep_us(request.delay_us);
        }
    }
    let slept_ns = thread::monotonic_ns();
    let _ = wp.disarm();
    stats::add(stats::Counter::ArmNs, arm_ns - opened_ns + thread::monotonic_ns() - slept_ns);
    close_window(slot);

    let traps = slot.count.load(Ordering::Acquire);
    let mut races = 0;
    // A's record carries no stack yet: the first event queued gets the CFI unwind (once per watch).
    let mut access = *access;
    let mut unwound = false;
    let mut reported = [0u64; MAX_RECORDS];
    let previous = Side::of(&access, true);
    for cell in slot.records.iter().take((traps as usize).min(MAX_RECORDS)) {
        let Some(record) = cell.try_lock() else { continue };
        if record.generation != generation {
            continue;
        }
        let current = Side::of(&record.access, record.covered);
        // A loop trips the window many times from one PC: one event per PC per window.
        if reported[..races as usize].contains(&record.access.pc) {
            continue;
        }
        let verdict = judge::judge(&previous, &current, request.report_atomic_races);
        // Both atomic only because of tags (not LOCK): a tag can be a compiler-only fence's label on a
        // plain access. The reporter, which reads the debug info, has the last word on those.
        let review = verdict == judge::Verdict::BothAtomic && !(access.locked && record.access.locked);
        if verdict.is_race() || review {
            reported[races as usize] = record.access.pc;
            races += 1;
            if verdict.is_race() {
                stats::bump(stats::Counter::Races);
            }
            if !unwound {
                access.stack = unwound_stack(request.regs, request.frame_pc, &request.path);
                unwound = true;
            }
            // In time order: the trapped access ran during the window; the sampled one runs after it.
            if !queue::push(&RaceEvent { current: access, previous: record.access }) && verdict.is_race() {
                stats::bump(stats::Counter::ReportsDropped);
            }
        }
    }
    stats::add(stats::Counter::WatchNs, thread::monotonic_ns().saturating_sub(opened_ns));
    slot.busy.store(false, Ordering::Release);
    Outcome::Watched { traps, races }
}

/// Stops accepting traps and waits (bounded) for trap handlers still filling records.
fn close_window(slot: &Slot) {
    slot.armed.store(0, Ordering::SeqCst);
    for _ in 0..10_000_000u32 {
        if slot.writers.load(Ordering::SeqCst) == 0 {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Handles a watchpoint trap in thread B; false when `signal` is not one of our watchpoints.
/// Async-signal-safe.
pub fn on_trap(signal: &PerfSignal) -> bool {
    let Some((index, generation)) = parse_sig_data(signal.data) else { return false };
    let Some(slot) = SLOTS.get(index) else { return true };
    stats::bump(stats::Counter::Traps);
    // Delivered late (SIGTRAP was blocked): the registers are not those of the access.
    if signal.flags & TRAP_PERF_FLAG_ASYNC != 0 || slot.armed.load(Ordering::SeqCst) != generation {
        return true;
    }
    let tid = thread::gettid();
    if tid == slot.owner.load(Ordering::Relaxed) {
        return true;
    }
    crate::sharing::trapped_elsewhere(signal.addr);
    // Every record of this window is taken (a loop trips it again and again): nothing to decode for.
    if slot.count.load(Ordering::Acquire) as usize >= MAX_RECORDS {
        return true;
    }
    let Some((mut access, place)) = trapped_access(signal, tid) else { return true };

    slot.writers.fetch_add(1, Ordering::SeqCst);
    if slot.armed.load(Ordering::SeqCst) == generation {
        let at = slot.count.fetch_add(1, Ordering::AcqRel) as usize;
        if let Some(mut record) = slot.records.get(at).and_then(|cell| cell.try_lock()) {
            // Only a kept record pays for the unwind.
            access.stack = unwound_stack(&signal.regs, access.pc, &CallPath::default());
            let covered = match place {
                Place::Covered(covered) => covered,
                // Judged as the access of the covered code that called the libc function: its PC is
                // that call's (the stack still starts in libc).
                Place::Library => match covered_caller(&access.stack) {
                    Some(call) => {
                        access.pc = call;
                        stats::bump(stats::Counter::TrapsInMemoryFunction);
                        profile::count_at(call, profile::Event::Trap);
                        true
                    }
                    None => false,
                },
            };
            *record = Record { generation, covered, access };
        }
    }
    slot.writers.fetch_sub(1, Ordering::SeqCst);
    true
}

/// Where a trapped access was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// In a covered function (`true`), or in one whose atomics were not analysed (`false`: not judged).
    Covered(bool),
    /// In the body of a libc memory or string function: judged when a covered function called it.
    Library,
}

/// Recovers B's access from a trap: the instruction ending at RIP (or the string instruction at RIP) in
/// the covered function, or the libc memory function's body, around it.
fn trapped_access(signal: &PerfSignal, tid: i32) -> Option<(AccessRecord, Place)> {
    let rip = signal.regs.rip;
    let before = rip.wrapping_sub(1);
    let (start, size, place) = match registry::with_index(|idx| idx.function_containing(before)) {
        Some(function) => {
            profile::count(function.start, profile::Event::Trap);
            (function.start, u64::from(function.size), None)
        }
        None => {
            let (start, end) = libcalls::body_containing(before)?;
            (start, end - start, Some(Place::Library))
        }
    };
    let regs = decoder_regs(&signal.regs);
    let window = (signal.addr, watched_len(signal.addr));
    let opmask = |k: u32| xsave::opmask(signal.fpstate, k);
    let found: MemAccess = decode::trap_access(&OwnMemory, start, size, rip, &regs, window, &opmask)?;
    let (addr, size) = if found.addr_known {
        (found.addr, found.size)
    } else {
        // The instruction overwrote its own address register: all we know is that it touched the window.
        let len = window.1;
        if u64::from(found.size) < len {
            return None;
        }
        (signal.addr, len as u8)
    };
    let (is_atomic, place) = match place {
        // libc's memory and string functions are never atomic.
        Some(place) => (false, place),
        None => {
            let class = registry::with_index(|idx| idx.classify(found.pc));
            (class == Access::Atomic || found.locked, Place::Covered(class != Access::Uncovered))
        }
    };
    let access = AccessRecord {
        tid,
        pc: found.pc,
        addr,
        size,
        is_write: found.is_write,
        is_atomic,
        locked: found.locked,
        stack: Stack::EMPTY,
    };
    Some((access, place))
}

/// The covered code a libc memory function was called from, for a stack starting in its body: the
/// first frame past it and the libc functions of its kind it was called through (`__strcpy_chk` calls
/// `memcpy`), as a PC inside the call (return address - 1); `None` when that frame is not covered
/// (libc's own callers, `printf`, `calloc`, the precompiled standard library: never judged).
fn covered_caller(stack: &Stack) -> Option<u64> {
    let call = stack
        .frames()
        .iter()
        .skip(1)
        .map(|ra| ra.wrapping_sub(1))
        .find(|&pc| libcalls::body_containing(pc).is_none())?;
    (registry::with_index(|idx| idx.classify(call)) != Access::Uncovered).then_some(call)
}

/// The stack of the thread interrupted at `regs` when it makes the access at `pc`, reached by `path`.
fn unwound_stack(regs: &Regs, pc: u64, path: &CallPath) -> Stack {
    let mut callers = [0u64; UNWIND_FRAMES];
    let found = unwind::capture(regs, &mut callers);
    let mut pcs = [0u64; UNWIND_FRAMES];
    let frames = path.stack_of(pc, &callers[..found], &mut pcs);
    Stack::from_pcs(&pcs[..frames])
}

/// The length of the window armed at `addr` (the alignment of a window start bounds it).
fn watched_len(addr: u64) -> u64 {
    match addr.trailing_zeros() {
        0 => 1,
        1 => 2,
        2 => 4,
        _ => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_and_contain_the_access() {
        assert_eq!(window(0x1000, 8), (0x1000, 8));
        assert_eq!(window(0x1004, 4), (0x1004, 4));
        assert_eq!(window(0x1003, 1), (0x1003, 1));
        assert_eq!(window(0x1002, 2), (0x1002, 2));
        assert_eq!(window(0x1001, 2), (0x1000, 4));
        assert_eq!(window(0x1003, 4), (0x1000, 8));
        // Crossing an 8-byte boundary or wider than 8: the first 8-byte word.
        assert_eq!(window(0x1006, 4), (0x1000, 8));
        assert_eq!(window(0x1000, 32), (0x1000, 8));
        assert_eq!(window(0x1005, 0), (0x1005, 1));
    }

    #[test]
    fn sig_data_round_trips_and_is_told_apart_from_samples() {
        let data = sig_data(0x1234_5678, 3);
        assert!(owns(data));
        assert_eq!(parse_sig_data(data), Some((3, 0x1234_5678)));
        assert!(!owns(crate::sys::perf::SAMPLE_SIG_DATA));
        assert_eq!(parse_sig_data(7), None);
    }
}
