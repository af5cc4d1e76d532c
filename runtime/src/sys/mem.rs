//! Non-faulting reads of the process's own memory: `process_vm_readv` on
//! ourselves returns EFAULT (or a short count) for unmapped or unreadable
//! pages instead of raising SIGSEGV. Async-signal-safe: one syscall, no allocation.
//!
//! While a thread handles one of racewatch's signals, memory it is known to be able to read (the page of
//! code it was interrupted in, its own stack from the interrupted stack pointer up) is read with plain
//! loads instead ([`DirectReads`]): no system call, and none of `process_vm_readv`'s wait for the memory
//! map's lock, which blocks the thread (a voluntary context switch a busy-polling thread's operators
//! see) while another thread maps or unmaps memory.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the calling thread reads with plain loads now: `[lo, hi)` ranges (empty: `lo == hi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Direct {
    code: (u64, u64),
    stack: (u64, u64),
    /// The interrupted stack pointer while `stack` is not looked up yet (0: looked up, or none).
    rsp: u64,
}

impl Direct {
    const NONE: Direct = Direct { code: (0, 0), stack: (0, 0), rsp: 0 };
}

thread_local! {
    static DIRECT: Cell<Direct> = const { Cell::new(Direct::NONE) };
}

/// Whether the page of code a thread was interrupted in can be read with plain loads: not where the CPU
/// has protection keys enabled (an execute-only mapping is made with a key a signal handler's key
/// rights do not let it read; `process_vm_readv` reads it).
static CODE_PAGE_READABLE: AtomicBool = AtomicBool::new(false);

/// The end of the user half of the address space (47-bit user addresses).
const USER_END: u64 = 1 << 47;

/// Looks up, once and outside any signal handler, what [`DirectReads`] may read (`cpuid` can cost
/// microseconds in a virtual machine).
pub fn init_direct_reads() {
    // Leaf 7 is asked only when the maximum leaf has it; OSPKE is bit 4 of its ECX.
    let max = core::arch::x86_64::__cpuid(0).eax;
    let protection_keys = max >= 7 && core::arch::x86_64::__cpuid_count(7, 0).ecx & (1 << 4) != 0;
    CODE_PAGE_READABLE.store(!protection_keys, Ordering::Relaxed);
}

/// For as long as it lives, reads of the calling thread (in a signal handler that interrupted it at `rip`
/// with stack pointer `rsp`) of the page of code at `rip` and of its own stack from `rsp` up (mapped as
/// long as the thread lives; looked up in [`creation`](crate::sys::creation) at the first read outside
/// the code page, so a signal that reads nothing pays nothing) are plain loads.
pub struct DirectReads {
    previous: Direct,
}

impl DirectReads {
    /// See [`DirectReads`].
    pub fn allow(rip: u64, rsp: u64) -> DirectReads {
        const PAGE: u64 = 4096;
        let page = rip & !(PAGE - 1);
        // Not the vsyscall page (high above the user half), execute-only where the kernel emulates it.
        let user = page != 0 && page < USER_END;
        let code = if CODE_PAGE_READABLE.load(Ordering::Relaxed) && user { (page, page + PAGE) } else { (0, 0) };
        let previous = DIRECT.with(|direct| direct.replace(Direct { code, stack: (0, 0), rsp }));
        DirectReads { previous }
    }
}

impl Drop for DirectReads {
    fn drop(&mut self) {
        DIRECT.with(|direct| direct.set(self.previous));
    }
}

/// `[addr, addr + buf.len())` read with plain loads, when it lies in one of the calling thread's
/// [`DirectReads`] ranges.
fn read_direct(addr: u64, buf: &mut [u8]) -> bool {
    let Some(end) = addr.checked_add(buf.len() as u64) else { return false };
    let within = |(lo, hi): (u64, u64)| lo < hi && lo <= addr && end <= hi;
    let mut direct = DIRECT.with(Cell::get);
    if !within(direct.code) {
        if direct.rsp != 0 {
            let stack = crate::sys::creation::interrupted_stack(super::raw::gettid(), direct.rsp);
            direct = Direct { stack: stack.unwrap_or((0, 0)), rsp: 0, ..direct };
            DIRECT.with(|cell| cell.set(direct));
        }
        if !within(direct.stack) {
            return false;
        }
    }
    // SAFETY: the range lies in the page of code the calling thread was executing or in its own stack
    // above the stack pointer it was interrupted at, both mapped and readable while the thread runs
    // (`DirectReads`); neither is written by another thread. The copy goes into the caller's buffer.
    unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, buf.as_mut_ptr(), buf.len()) };
    true
}

/// Copies up to `buf.len()` bytes from `addr` into `buf`; returns how many were
/// read (0 when `addr` is unreadable; short when the range crosses into an unreadable page).
pub fn read_into(addr: u64, buf: &mut [u8]) -> usize {
    if buf.is_empty() || addr == 0 {
        return 0;
    }
    if read_direct(addr, buf) {
        return buf.len();
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: buf.len() };
    // Named by the calling thread's id, not the process's: once `main` called `pthread_exit`, the
    // process id names a thread without memory, and every read failed with `ESRCH` (set 31 p03: 770
    // of 781 samples found no code to follow, and a race after main's exit was rarely watched).
    // SAFETY: `local` describes the caller's live, writable buffer; `remote` is only
    // read by the kernel, which validates it and reports EFAULT rather than faulting us.
    let n = unsafe { libc::process_vm_readv(super::raw::gettid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        0
    } else {
        n as usize
    }
}

/// Reads a native-endian u64 at `addr` (any alignment); `None` when not fully readable.
pub fn read_u64(addr: u64) -> Option<u64> {
    let mut bytes = [0u8; 8];
    (read_into(addr, &mut bytes) == 8).then(|| u64::from_ne_bytes(bytes))
}

/// Memory this process may still map under its limits: `RLIMIT_AS` (soft limit minus `VmSize`) and
/// `RLIMIT_DATA` (soft limit minus its private writable memory, stacks included), the smaller; `None`
/// when neither is limited.
pub fn memory_headroom() -> Option<u64> {
    let (address_space, data) = (soft_limit(libc::RLIMIT_AS), soft_limit(libc::RLIMIT_DATA));
    if address_space.is_none() && data.is_none() {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: Vec<u64> = statm.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let room = |limit: Option<u64>, used: Option<&u64>| limit.zip(used).map(|(l, &u)| l.saturating_sub(u * 4096));
    [room(address_space, pages.first()), room(data, pages.get(5))].into_iter().flatten().min()
}

/// Whether what racewatch maps comes out of a budget of the program's: an `RLIMIT_AS` or `RLIMIT_DATA`,
/// or `mlockall(MCL_FUTURE)` under a finite `RLIMIT_MEMLOCK` (two or three `getrlimit` calls).
pub fn memory_budgeted() -> bool {
    soft_limit(libc::RLIMIT_AS).is_some() || soft_limit(libc::RLIMIT_DATA).is_some() || lock_limited()
}

/// Whether the program limits its data (`RLIMIT_DATA`): every byte racewatch allocates or maps
/// writable is then one the program cannot have.
pub fn data_limited() -> bool {
    soft_limit(libc::RLIMIT_DATA).is_some()
}

/// Whether everything racewatch maps from now on is locked memory of a limited budget: the program
/// called `mlockall(MCL_FUTURE)` and its `RLIMIT_MEMLOCK` is finite (without `CAP_IPC_LOCK`, which lifts
/// it, the kernel enforces it).
pub fn lock_limited() -> bool {
    crate::sys::stacks::locking_future() && memlock_enforced()
}

/// Whether the program has locked all its memory (`mlockall(MCL_FUTURE)`) under a finite
/// `RLIMIT_MEMLOCK` at some time, whether or not it has unlocked it since.
pub fn lock_limited_once() -> bool {
    crate::sys::stacks::locked_future_once() && memlock_enforced()
}

/// Whether the kernel holds the process to a finite `RLIMIT_MEMLOCK`.
fn memlock_enforced() -> bool {
    soft_limit(libc::RLIMIT_MEMLOCK).is_some() && !can_lock_freely()
}

/// Whether the process may lock memory beyond its `RLIMIT_MEMLOCK` (`CAP_IPC_LOCK` in its effective set).
fn can_lock_freely() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    super::raw::has_capability(CAP_IPC_LOCK)
}

/// A resource's soft limit in the kernel; `None` when unlimited or unknown.
fn soft_limit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    super::raw::limit(resource).map(|(soft, _)| soft).filter(|&soft| soft != libc::RLIM_INFINITY)
}

/// A fresh private anonymous read-write mapping of `len` bytes, untouched (`None` when the kernel refuses
/// it: no address space, a memory limit, strict overcommit).
pub fn map_private(len: usize) -> Option<*mut libc::c_void> {
    super::budget::before_mapping(len);
    // A new mapping at an address the kernel picks.
    let mem = super::raw::mmap_anonymous(0, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE);
    super::budget::mapped();
    if mem != libc::MAP_FAILED && super::budget::may_adjust() {
        super::raw::keep_apart(mem as usize, len);
    }
    (mem != libc::MAP_FAILED).then_some(mem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_reads_cover_only_their_ranges_and_end_with_their_guard() {
        init_direct_reads();
        let words = [0x1111_u64, 0x2222, 0x3333, 0x4444];
        let lo = words.as_ptr() as u64;
        let mut buf = [0u8; 8];
        {
            let _direct = DirectReads::allow(0, 0);
            DIRECT.with(|d| d.set(Direct { stack: (lo, lo + 16), ..Direct::NONE }));
            assert!(read_direct(lo + 8, &mut buf) && u64::from_ne_bytes(buf) == 0x2222);
            assert!(!read_direct(lo + 12, &mut buf), "crosses the range's end");
            assert!(!read_direct(lo + 16, &mut buf), "beyond the range");
            assert_eq!(read_u64(lo + 24), Some(0x4444), "outside: read by the system call");
        }
        assert!(!read_direct(lo, &mut buf), "the guard is gone");
        {
            let _vsyscall = DirectReads::allow(0xffff_ffff_ff60_0000, 0);
            assert_eq!(DIRECT.with(Cell::get), Direct::NONE, "never the vsyscall page");
        }
        {
            // The stack is looked up at the first read outside the code page, once.
            let _lazy = DirectReads::allow(0, lo);
            assert_eq!(DIRECT.with(Cell::get).rsp, lo, "not looked up before a read");
            let _ = read_direct(lo, &mut buf);
            assert_eq!(DIRECT.with(Cell::get).rsp, 0, "looked up at the first read");
        }
        let code = read_direct as *const () as usize as u64;
        let _direct = DirectReads::allow(code, 0);
        if CODE_PAGE_READABLE.load(Ordering::Relaxed) {
            let page_end = (code | 4095) + 1;
            let mut first = [0u8; 4];
            assert!(read_direct(code, &mut first));
            assert_eq!(read_into(code, &mut first), 4);
            assert!(!read_direct(page_end - 2, &mut first), "the next page is not covered");
        }
    }

    #[test]
    fn reads_own_memory_and_survives_bad_addresses() {
        let value: u64 = 0x1122_3344_5566_7788;
        assert_eq!(read_u64(&value as *const u64 as u64), Some(value));
        assert_eq!(read_u64(0), None);
        assert_eq!(read_u64(8), None);
        assert_eq!(read_u64(u64::MAX - 3), None);
        let mut buf = [0u8; 16];
        assert_eq!(read_into(0x1000, &mut buf), 0);
        let bytes = *b"abcdefgh";
        assert_eq!(read_into(bytes.as_ptr() as u64, &mut buf[..8]), 8);
        assert_eq!(&buf[..8], b"abcdefgh");
    }
}
