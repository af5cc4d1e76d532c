//! Where each thread was created, for reports: the creating thread's stack at `pthread_create`
//! ([`capture`], by the unwinder the reporter registers with [`set_capture`]), the creator's tid, and
//! the new thread's stack bounds, recorded by the new thread itself when it starts ([`started`]) in a
//! fixed table keyed by its tid.
//!
//! The record travels from the creating thread to the new one inside the start record of
//! [`crate::sys::thread`] (a fixed pool), and the table is indexed by `tid % SLOTS`. A thread whose tid
//! shares a slot with a later thread loses its record to it (with 4096 slots that takes 4096 thread
//! creations while it lives). The table is allocated a chunk of [`CHUNK`] slots at a time, by the first
//! thread that starts with a tid in it (racewatch's heap, not the program's `malloc`), or all at once
//! before `main`, untouched until used ([`prepare`]).
//! Lookups never allocate: a slot whose chunk does not exist holds nothing. The reporter reads the
//! table.

use crate::sys::raw;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Return addresses kept of a creating thread's stack (the first few are racewatch's own).
pub const FRAMES: usize = 20;
/// Slots of the table.
const SLOTS: usize = 4096;
const PAGE: u64 = 4096;

/// How [`capture`] fills in a creation: `fn(&mut Creation)`, or null before [`set_capture`].
static CAPTURE: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Makes [`capture`] call `capture` (the reporter's unwinder; until then creations are not recorded).
pub fn set_capture(capture: fn(&mut Creation)) {
    CAPTURE.store(capture as *mut (), Ordering::Release);
}

/// The calling thread's side of a creation: its tid and stack, when a capture is set.
/// Async-signal-safe when the capture is.
pub fn capture() -> Creation {
    let mut creation = Creation::NONE;
    let capture = CAPTURE.load(Ordering::Acquire);
    if !capture.is_null() {
        creation.creator = raw::gettid();
        creation.creator_name = raw::thread_name();
        // SAFETY: only `set_capture` stores here, always a `fn(&mut Creation)`.
        let capture: fn(&mut Creation) = unsafe { std::mem::transmute(capture) };
        capture(&mut creation);
    }
    creation
}

/// The creating side of a thread's creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creation {
    /// The creating thread's kernel tid.
    pub creator: i32,
    /// The creating thread's name at the time (the new thread starts with a copy of it).
    pub creator_name: [u8; 16],
    /// Valid entries of `pcs`.
    pub len: usize,
    /// Return addresses, innermost first (symbolize `pc - 1`).
    pub pcs: [u64; FRAMES],
}

impl Creation {
    /// No creation known.
    pub const NONE: Creation = Creation { creator: 0, creator_name: [0; 16], len: 0, pcs: [0; FRAMES] };

    /// The creating thread's name when it created the thread (empty when not known).
    pub fn creator_name(&self) -> &[u8] {
        let len = self.creator_name.iter().position(|&b| b == 0).unwrap_or(self.creator_name.len());
        &self.creator_name[..len]
    }

    /// The valid return addresses, innermost first.
    pub fn frames(&self) -> &[u64] {
        &self.pcs[..self.len.min(FRAMES)]
    }
}

/// What is known of a thread created through the interposer (or of the thread that started the
/// detector, without a creation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The thread's kernel tid (0: an empty slot).
    pub tid: i32,
    /// Its `pthread_self()`, to tell it from an earlier thread of the same tid.
    pub thread: u64,
    pub creation: Creation,
    /// Its stack `[lo, hi)`, all of it mapped: for a new thread, from the bottom of its stack of the
    /// size it was created with up to its start routine's frame (the thread descriptor and TLS above
    /// are left out); `(0, 0)` when its size was not known.
    pub stack: (u64, u64),
}

impl Record {
    const EMPTY: Record = Record { tid: 0, thread: 0, creation: Creation::NONE, stack: (0, 0) };
}

/// Slots per chunk of the table (32 records: 7.4 KiB).
const CHUNK: usize = 32;
type Chunk = [spin::Mutex<Record>; CHUNK];
/// The table's chunks, null until a thread with a tid in one starts.
static TABLE: [AtomicPtr<Chunk>; SLOTS / CHUNK] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS / CHUNK];

/// Slot `slot` of the table, when its chunk exists. Async-signal-safe.
fn existing_slot(slot: usize) -> Option<&'static spin::Mutex<Record>> {
    let chunk = TABLE[slot / CHUNK].load(Ordering::Acquire);
    // SAFETY: a non-null chunk pointer was published by `slot_to_write` after every record of it was
    // initialised, and chunks are never freed.
    (!chunk.is_null()).then(|| unsafe { &(*chunk)[slot % CHUNK] })
}

/// Slot `slot` of the table, its chunk allocated first when needed (`None` when no memory could be had:
/// the record is not kept). Not for signal handlers.
fn slot_to_write(slot: usize) -> Option<&'static spin::Mutex<Record>> {
    existing_slot(slot).or_else(|| allocate_chunk(slot))
}

/// Allocates and publishes the chunk of slot `slot` (unless another thread did first); returns the slot.
/// None under a memory budget, where every byte racewatch takes is one the program cannot have (a
/// program starting threads up to its `RLIMIT_AS` got one fewer as new tids reached new chunks): the
/// thread's creation is not recorded (its report shows no creation stack).
#[cold]
fn allocate_chunk(slot: usize) -> Option<&'static spin::Mutex<Record>> {
    if crate::sys::mem::memory_budgeted() {
        return None;
    }
    let layout = std::alloc::Layout::new::<Chunk>();
    // SAFETY: `layout` has a non-zero size.
    let fresh = unsafe { std::alloc::alloc(layout) }.cast::<spin::Mutex<Record>>();
    if fresh.is_null() {
        return None;
    }
    for i in 0..CHUNK {
        // SAFETY: `fresh` is a new allocation of `CHUNK` records, written one at a time (no chunk-sized
        // value on the stack of a thread that may have little).
        unsafe { fresh.add(i).write(spin::Mutex::new(Record::EMPTY)) };
    }
    let fresh = fresh.cast::<Chunk>();
    let published =
        TABLE[slot / CHUNK].compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire);
    if published.is_err() {
        // Another thread published the chunk first.
        // SAFETY: `fresh` was never published; allocated above with `layout`.
        unsafe { std::alloc::dealloc(fresh.cast(), layout) };
    }
    existing_slot(slot)
}
/// Before `main`: maps the whole table (0.9 MiB of address space, zero: a zero record is an empty one),
/// whose pages are touched only as tids use them, so that the program's threads, however many come and
/// go, change nothing of its address space (set 19 p23: `VmSize` grew 448 KiB over a churn of 3000
/// short threads, a chunk for each new range of tids). Under a memory budget nothing is allocated (see
/// [`allocate_chunk`]). Call before any other mapping of racewatch's heap.
pub fn prepare() {
    if crate::sys::mem::memory_budgeted() || TABLE.iter().any(|chunk| !chunk.load(Ordering::Acquire).is_null()) {
        return;
    }
    let Ok(layout) = std::alloc::Layout::array::<Chunk>(SLOTS / CHUNK) else { return };
    // SAFETY: `layout` has a non-zero size; the block comes zeroed (a mapping of its own, untouched).
    let whole = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Chunk>();
    if whole.is_null() {
        return;
    }
    WHOLE.store(whole, Ordering::Release);
    for (i, chunk) in TABLE.iter().enumerate() {
        // SAFETY: `whole` holds `SLOTS / CHUNK` chunks of zero (empty, unlocked) records.
        chunk.store(unsafe { whole.add(i) }, Ordering::Release);
    }
}

/// The table mapped whole before `main` ([`prepare`]), null otherwise.
static WHOLE: AtomicPtr<Chunk> = AtomicPtr::new(std::ptr::null_mut());

/// Before an `mlockall(MCL_CURRENT)` of the program's while no thread was recorded: gives the table
/// mapped whole back (it would be locked, and counted against the program's `RLIMIT_MEMLOCK`); chunks
/// are then allocated as tids need them.
pub fn before_locking_all() {
    let whole = WHOLE.load(Ordering::Acquire);
    if whole.is_null() || USED.iter().any(|used| used.load(Ordering::Acquire) != 0) {
        return;
    }
    for chunk in &TABLE {
        chunk.store(std::ptr::null_mut(), Ordering::Release);
    }
    WHOLE.store(std::ptr::null_mut(), Ordering::Release);
    if let Ok(layout) = std::alloc::Layout::array::<Chunk>(SLOTS / CHUNK) {
        // SAFETY: allocated in `prepare` with this layout; no thread was recorded in it, and it is no
        // longer reachable through the table.
        unsafe { std::alloc::dealloc(whole.cast(), layout) };
    }
}

/// The thread that started the detector (usually the main thread, which lives longest): kept apart,
/// so that no later thread's record takes its slot.
static FIRST: spin::Mutex<Record> = spin::Mutex::new(Record::EMPTY);
/// One bit per slot ever written, so that a search reads only those.
static USED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];

/// Records the calling (new) thread's creation and its stack of `stack_size` bytes (0: unknown), whose
/// used part ends at `top` (the stack pointer the program's start routine is entered with: everything
/// below is the thread's stack, mapped while it lives). Call first thing in the new thread, before the
/// program's start routine.
pub fn started(creation: &Creation, stack_size: usize, top: u64) {
    let stack = if stack_size > 0 { (top.saturating_sub(stack_size as u64) + PAGE, top) } else { (0, 0) };
    record(Record { tid: raw::gettid(), thread: this_thread(), creation: *creation, stack });
}

/// Records the calling thread's stack bounds (exact, from `pthread_getattr_np`), with no creation: for
/// the thread that starts the detector (usually the main thread), which no interposer saw start. Not
/// for signal handlers.
pub fn record_this_thread() {
    let Some((lo, hi)) = crate::sys::stacks::current_thread_stack() else { return };
    let stack = (lo as u64, hi as u64);
    if let Some(mut first) = try_lock(&FIRST) {
        *first = Record { tid: raw::gettid(), thread: this_thread(), creation: Creation::NONE, stack };
    }
}

fn this_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

fn record(record: Record) {
    let slot = record.tid as u32 as usize % SLOTS;
    if let Some(mut entry) = slot_to_write(slot).and_then(try_lock) {
        *entry = record;
        USED[slot / 64].fetch_or(1 << (slot % 64), Ordering::Release);
    }
}

/// The lock of a record, unless another thread holds it for long (a forked child's copy of a lock a
/// thread of the parent held at the fork stays locked forever): then nothing is recorded or found.
fn try_lock(record: &spin::Mutex<Record>) -> Option<spin::MutexGuard<'_, Record>> {
    for _ in 0..10_000 {
        if let Some(guard) = record.try_lock() {
            return Some(guard);
        }
        std::hint::spin_loop();
    }
    None
}

/// The part of the calling thread's own stack from the stack pointer `sp` (the caller's, in a frame of
/// the calling thread) up to its recorded top: readable without a system call.
#[derive(Clone, Copy, Debug)]
pub struct OwnStack {
    lo: u64,
    hi: u64,
}

impl OwnStack {
    /// The calling thread's stack above `sp`, when the thread `tid` (the caller's own, from `gettid`)
    /// is recorded with bounds that hold `sp` and the caller's current frame, and is the same thread
    /// (its `pthread_self`).
    pub fn of_current(tid: i32, sp: u64) -> Option<OwnStack> {
        let record = lookup(tid)?;
        let (lo, hi) = record.stack;
        let here = crate::sys::stacks::current_sp() as u64;
        // On that stack now (not on an alternate signal stack), and `sp` on it too.
        (record.thread == this_thread() && (lo..hi).contains(&here) && (lo..hi).contains(&sp))
            .then_some(OwnStack { lo: sp, hi })
    }

    /// The word at `addr` when `[addr, addr + 8)` lies in this stack.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        if addr < self.lo || addr.checked_add(8)? > self.hi {
            return None;
        }
        // SAFETY: `[lo, hi)` is a mapped part of the calling thread's own stack (from a stack pointer
        // of one of its live frames up to the top recorded when it started, checked in
        // `of_current`); the read is a plain copy of 8 bytes, never through a reference.
        Some(u64::from_ne_bytes(unsafe { std::ptr::read_volatile(addr as usize as *const [u8; 8]) }))
    }
}

/// The calling thread's stack from `rsp` (where a signal interrupted it) up to the top recorded when it
/// started, when `tid` (its own, from `gettid`) is recorded as this very thread and `rsp` lies on that
/// stack: readable with plain loads for as long as the thread lives. `None` on any other stack (a
/// coroutine's), and within 64 KiB of the recorded bottom, which is only an estimate (the thread's TLS
/// and descriptor above its top, a guard larger than a page below): a thread about to overflow its
/// stack may have its stack pointer in the guard already.
pub fn interrupted_stack(tid: i32, rsp: u64) -> Option<(u64, u64)> {
    const MARGIN: u64 = 64 << 10;
    let record = lookup(tid)?;
    let (lo, hi) = record.stack;
    let on_it = lo != 0 && rsp >= lo.saturating_add(MARGIN) && rsp < hi;
    (record.thread == this_thread() && on_it).then_some((rsp, hi))
}

/// The record of thread `tid`, when it was created through the interposer (and its slot was not
/// taken over since).
pub fn lookup(tid: i32) -> Option<Record> {
    if tid <= 0 {
        return None;
    }
    let first = try_lock(&FIRST).map_or(Record::EMPTY, |first| *first);
    if first.tid == tid {
        return Some(first);
    }
    let record = *try_lock(existing_slot(tid as u32 as usize % SLOTS)?)?;
    (record.tid == tid).then_some(record)
}

/// The kernel id of the live thread whose `pthread_self()` is `thread`, when it was recorded. No
/// allocation.
pub fn tid_of(thread: u64) -> Option<i32> {
    if thread == this_thread() {
        return Some(raw::gettid());
    }
    // A descriptor glibc reused names an ended thread's record too: the live one is the thread.
    let mut found = None;
    each_record(|record| {
        found = Some(record.tid).filter(|&tid| record.thread == thread && raw::thread_alive(tid));
        found.is_none()
    });
    found
}

/// Every record written so far (in a forked child, the parent's too: check that a tid still lives).
pub fn records() -> Vec<Record> {
    let mut found = Vec::new();
    each_record(|record| {
        found.push(record);
        true
    });
    found
}

/// Calls `f` with each record written so far (the first thread's first), while it returns true. No
/// allocation.
fn each_record(mut f: impl FnMut(Record) -> bool) {
    let first = try_lock(&FIRST).map_or(Record::EMPTY, |first| *first);
    if first.tid != 0 && !f(first) {
        return;
    }
    for (word, bits) in USED.iter().enumerate() {
        let mut bits = bits.load(Ordering::Acquire);
        while bits != 0 {
            let slot = word * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let Some(record) = existing_slot(slot).and_then(try_lock).map(|r| *r) else { continue };
            if record.tid != 0 && record.tid != first.tid && !f(record) {
                return;
            }
        }
    }
}

/// Serialises the unit tests that record the detector's thread (there is one such record).
#[cfg(test)]
pub(crate) static FIRST_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_capture(creation: &mut Creation) {
        creation.pcs[0] = 0xabc;
        creation.len = 1;
    }

    #[test]
    fn capture_calls_the_capture_set() {
        assert_eq!(capture(), Creation::NONE, "nothing before a capture is set");
        set_capture(fake_capture);
        let creation = capture();
        CAPTURE.store(std::ptr::null_mut(), Ordering::Release);
        assert_eq!(creation.creator, raw::gettid());
        assert_eq!(creation.frames(), &[0xabc]);
    }

    /// Reads a local of a frame `depth` calls below the caller through [`OwnStack`].
    #[inline(never)]
    fn read_deeper(tid: i32, depth: u32) -> (Option<u64>, Option<u64>, Option<u64>) {
        if depth > 0 {
            return std::hint::black_box(read_deeper(tid, depth - 1));
        }
        let word = 0x5555_6666_u64;
        let at = std::hint::black_box(&word) as *const u64 as u64;
        let stack = OwnStack::of_current(tid, at).expect("own stack");
        (stack.read_u64(at), stack.read_u64(at - 8), stack.read_u64(u64::MAX - 4))
    }

    #[test]
    fn records_are_found_by_tid_and_listed() {
        let creation = Creation { creator: 7, len: 1, pcs: [0x1234; FRAMES], ..Creation::NONE };
        let (tid, record, read) = std::thread::spawn(move || {
            started(&creation, 64 << 10, crate::sys::stacks::current_sp() as u64);
            let tid = raw::gettid();
            (tid, lookup(tid), read_deeper(tid, 4))
        })
        .join()
        .unwrap();
        assert_eq!(read, (Some(0x5555_6666), None, None), "reads from the stack pointer up only");
        let record = record.expect("recorded");
        assert_eq!(record.creation, creation);
        assert!(record.stack.1 - record.stack.0 == (64 << 10) - PAGE, "{record:?}");
        assert!(OwnStack::of_current(tid, record.stack.0 + 8).is_none(), "another thread's record");
        assert!(records().iter().any(|r| r.tid == tid));
        assert_eq!(lookup(tid + SLOTS as i32), None, "another tid of the same slot");
        assert_eq!(lookup(0), None);
    }

    #[test]
    fn a_record_locked_for_good_is_skipped_not_waited_for() {
        let creation = Creation { creator: 9, ..Creation::NONE };
        let tid = std::thread::spawn(move || {
            started(&creation, 64 << 10, crate::sys::stacks::current_sp() as u64);
            raw::gettid()
        })
        .join()
        .unwrap();
        assert!(lookup(tid).is_some());
        // As in a forked child whose parent's thread held the lock at the fork.
        let held = existing_slot(tid as u32 as usize % SLOTS).expect("chunk").lock();
        assert_eq!(lookup(tid), None);
        assert!(records().iter().all(|r| r.tid != tid));
        drop(held);
        assert!(lookup(tid).is_some());
    }

    #[test]
    fn the_detector_thread_records_its_exact_stack() {
        let _serial = FIRST_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(|| {
            record_this_thread();
            let record = lookup(raw::gettid()).expect("recorded");
            let sp = crate::sys::stacks::current_sp() as u64;
            assert!(record.stack.0 < sp && sp < record.stack.1, "{record:?}");
            assert_eq!(record.creation, Creation::NONE);
            assert!(records().iter().any(|r| r.tid == record.tid));
        })
        .join()
        .unwrap();
    }
}
