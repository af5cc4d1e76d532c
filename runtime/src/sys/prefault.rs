//! racewatch's own memory faulted in ahead of use, so that the program's threads take no page fault for
//! racewatch: a compute thread's `getrusage(RUSAGE_THREAD)` showed 1-6 minor faults during a loop
//! without a system call (set 19 p22), where racewatch's signals first wrote a page of its data, of a
//! runtime stack or of the thread's alternate stack, or first read a page of a module's unwind tables.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

const PAGE: usize = 4096;
/// `madvise` advice (Linux 5.14): fault the range in readable, as if each page had been read.
const MADV_POPULATE_READ: libc::c_int = 22;
/// `madvise` advice (Linux 5.14): fault the range in writable, as if each page had been written.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Writes each page of `[lo, hi)` (racewatch's own, mapped writable, not in use yet) once, now.
pub fn pages(lo: usize, hi: usize) {
    for page in (lo & !(PAGE - 1)..hi).step_by(PAGE) {
        // SAFETY: the page is in a writable mapping of racewatch's that nothing uses yet: a zero byte on a
        // fresh (zero) page changes nothing.
        unsafe { std::ptr::write_volatile(page as *mut u8, 0) };
    }
}

/// Faults in racewatch's own writable data (`.data`, `.bss`: about 680 KiB), which its handlers write,
/// once, before the program's threads run. (Its code and read-only data are file pages that the
/// detector's start runs and reads on its way.)
pub fn own_module() {
    for_own_segments(|lo, hi, flags| {
        if flags & libc::PF_W != 0 {
            populate(lo, hi, MADV_POPULATE_WRITE);
        }
    });
}

/// After the program's `mlockall(MCL_CURRENT)`: racewatch's own module (its code, tables and data, about
/// 2.6 MB) leaves the program's locked memory, and so its `RLIMIT_MEMLOCK` budget. The pages stay
/// resident (faulted in before); only memory pressure could take them back.
pub fn unlock_own_module() {
    for_own_segments(|lo, hi, _| {
        let (lo, hi) = (lo & !(PAGE - 1), hi.next_multiple_of(PAGE));
        if lo < hi {
            // SAFETY: `munlock` changes no mapping or content, only whether the range counts as locked.
            unsafe { libc::munlock(lo as *const libc::c_void, hi - lo) };
        }
    });
}

/// The span of racewatch's own module in memory: from its first loaded segment's page to the end of
/// its last one's zero-filled part (`(0, 0)` when not found).
pub fn own_span() -> (usize, usize) {
    static LO: AtomicUsize = AtomicUsize::new(0);
    static HI: AtomicUsize = AtomicUsize::new(0);
    if HI.load(Ordering::Acquire) == 0 {
        fn note(lo: usize, hi: usize, _flags: u32) {
            let lo = lo & !(PAGE - 1);
            if LO.load(Ordering::Relaxed) == 0 || lo < LO.load(Ordering::Relaxed) {
                LO.store(lo, Ordering::Relaxed);
            }
            HI.fetch_max(hi.next_multiple_of(PAGE), Ordering::Release);
        }
        for_own_segments(note);
    }
    (LO.load(Ordering::Acquire), HI.load(Ordering::Acquire))
}

/// Calls `each(start, end, p_flags)` for every loaded segment of racewatch's own module.
fn for_own_segments(each: fn(usize, usize, u32)) {
    static ANCHOR: AtomicU8 = AtomicU8::new(0);
    struct Walk {
        anchor: usize,
        each: fn(usize, usize, u32),
    }
    extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, walk: *mut libc::c_void) -> libc::c_int {
        // SAFETY: the loader passes a valid record for the duration of the callback, and `walk` is the
        // `Walk` below, alive for the whole iteration.
        let (info, walk) = unsafe { (&*info, &*(walk as *const Walk)) };
        let segments = || {
            (0..info.dlpi_phnum as usize).filter_map(|i| {
                // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
                let ph = unsafe { &*info.dlpi_phdr.add(i) };
                let start = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
                (ph.p_type == libc::PT_LOAD).then_some((start, start + ph.p_memsz as usize, ph.p_flags))
            })
        };
        if !segments().any(|(lo, hi, _)| (lo..hi).contains(&walk.anchor)) {
            return 0;
        }
        for (lo, hi, flags) in segments() {
            (walk.each)(lo, hi, flags);
        }
        1
    }
    let walk = Walk { anchor: &ANCHOR as *const AtomicU8 as usize, each };
    // SAFETY: the callback only reads the loader's records and calls `each`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &walk as *const Walk as *mut libc::c_void) };
}

/// Faults in the pages of `[lo, hi)` with `advice`; an error (a kernel before 5.14, the part of a
/// writable segment made read-only after relocation, a range no longer mapped) leaves them as they are.
/// The kernel stops at the first page it cannot fault in as asked: where the whole range fails (a
/// writable segment whose first pages the loader made read-only after relocation, with writable data
/// after them), each page is asked on its own, so the writable ones after the read-only ones are
/// faulted in too (a layout where a variable racewatch's handler writes lay there gave a computing
/// thread 1 minor fault in 13 runs of 16, host case computing_thread_takes_no_page_faults).
fn populate(lo: usize, hi: usize, advice: libc::c_int) {
    let (lo, hi) = (lo & !(PAGE - 1), hi.next_multiple_of(PAGE));
    // SAFETY: the advice only faults pages in; it changes no mapping or content.
    let ask = |lo: usize, len: usize| unsafe { libc::madvise(lo as *mut libc::c_void, len, advice) } == 0;
    if lo < hi && !ask(lo, hi - lo) {
        for page in (lo..hi).step_by(PAGE) {
            ask(page, PAGE);
        }
    }
}

/// Faults in `[lo, hi)` of a loaded module's read-only data, now: a module's unwind tables, which
/// racewatch's handlers read to unwind a stack.
pub fn readable(lo: usize, hi: usize) {
    populate(lo, hi, MADV_POPULATE_READ);
}
