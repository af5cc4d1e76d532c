//! A system call made for the calling thread by a short-lived thread of its own, so that what the kernel
//! notes about the caller lands on that thread instead.
//!
//! Why: `perf_event_open` for a thread, with `sigtrap`, asks whether the caller may monitor and signal
//! it (`perfmon_capable()`, then `CAP_KILL`); when the caller holds `CAP_PERFMON` or `CAP_SYS_ADMIN`
//! (root), that check succeeds and the kernel marks the caller as having used superuser privileges
//! (`PF_SUPERPRIV`: bit 0x100 of the flags in `/proc/<pid>/stat`, the `ASU` flag of process
//! accounting). racewatch opens its events from the program thread that starts the detector; its
//! flags showed the bit where the program never used a privilege. The call is made by a raw thread
//! (`clone` with the caller's memory, descriptors and signal handlers, every signal blocked, no glibc
//! state: it runs a few instructions and ends) for the caller's thread id, and the caller waits for its
//! end, and until the kernel has released it (it counted against `RLIMIT_NPROC` meanwhile).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// What the helper thread reads and writes (`repr(C)`: the assembly below uses the offsets).
#[repr(C)]
struct Call {
    /// `perf_event_open`'s arguments: the attr, the thread id, the flags.
    attr: u64,
    tid: u64,
    flags: u64,
    /// Its result (an fd, or `-errno`).
    result: i64,
}

/// The helper's stack: it pushes nothing, and takes no signal (all blocked).
#[repr(C, align(64))]
struct Stack([u8; 512]);
// A `static mut` for its address only: one helper at a time uses it (`BUSY`).
static mut STACK: Stack = Stack([0; 512]);
static BUSY: AtomicBool = AtomicBool::new(false);

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// Whether the calling thread holds a capability that `perfmon_capable()` asks for (effective set).
pub fn holds_perfmon_capability() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header { version: VERSION_3, pid: 0 };
    let mut data = [Data::default(); 2];
    let rc =
        super::raw::syscall6(libc::SYS_capget, [&header as *const Header as u64, data.as_mut_ptr() as u64, 0, 0, 0, 0]);
    let effective = u64::from(data[0].effective) | (u64::from(data[1].effective) << 32);
    rc == 0 && effective & ((1 << CAP_SYS_ADMIN) | (1 << CAP_PERFMON)) != 0
}

/// The `clone` flags of the helper thread: a thread with no TLS of its own.
pub const HELPER_CLONE_FLAGS: u64 = (libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_FILES
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM
    | libc::CLONE_PARENT_SETTID
    | libc::CLONE_CHILD_CLEARTID) as u64;

/// `perf_event_open(attr, tid, -1, -1, flags)` made by a helper thread; `None` when no helper could be
/// started (the caller then makes the call itself).
pub fn perf_event_open_for(attr: *const super::perf::PerfEventAttr, tid: i32, flags: u64) -> Option<i64> {
    while BUSY.swap(true, Ordering::Acquire) {
        super::raw::yield_cpu();
    }
    let mut call = Call { attr: attr as u64, tid: tid as u64, flags, result: -i64::from(libc::ENOSYS) };
    // The helper's id, written by the kernel at the start and cleared (and woken) at its end.
    let id = AtomicI32::new(0);
    let all = super::raw::sigprocmask(libc::SIG_SETMASK, Some(u64::MAX));
    let top = std::ptr::addr_of_mut!(STACK).cast::<u8>().wrapping_add(std::mem::size_of::<Stack>());
    let clone_flags = HELPER_CLONE_FLAGS;
    let started: i64;
    // SAFETY: `clone` of a thread that shares this one's memory and runs only the instructions below,
    // on its own stack (`STACK`, this call's alone), with every signal blocked: it reads `call`, makes
    // one system call, writes the result and ends, touching nothing else (not the shared `fs` block). The
    // parent's registers are as the `syscall` instruction leaves them (rcx, r11).
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // The helper: its stack is `top`; r12 still holds `&call`.
            "mov rdi, [r12]",
            "mov rsi, [r12 + 8]",
            "mov rdx, -1",
            "mov r10, -1",
            "mov r8, [r12 + 16]",
            "mov eax, {perf_event_open}",
            "syscall",
            "mov [r12 + 24], rax",
            "mov eax, {exit}",
            "xor edi, edi",
            "syscall",
            "ud2",
            "2:",
            perf_event_open = const libc::SYS_perf_event_open,
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone => started,
            in("rdi") clone_flags,
            in("rsi") top,
            in("rdx") id.as_ptr(),
            in("r10") id.as_ptr(),
            in("r8") 0u64,
            in("r12") &mut call as *mut Call,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if let Some(old) = all {
        super::raw::sigprocmask(libc::SIG_SETMASK, Some(old));
    }
    if started > 0 {
        // Yielding first: the calling thread (the program's, in its first `pthread_create`) waits without
        // blocking, so no voluntary switch of racewatch's; the kernel's wake then ends a longer wait.
        super::thread::yield_until(20_000, &mut || id.load(Ordering::Acquire) == 0);
        loop {
            let now = id.load(Ordering::Acquire);
            if now == 0 {
                break;
            }
            // Not a private futex: the kernel's wake at the thread's end is a shared one (as `pthread_join`'s).
            let wait = libc::FUTEX_WAIT as u64;
            super::raw::syscall6(libc::SYS_futex, [id.as_ptr() as u64, wait, now as u64, 0, 0, 0]);
        }
        super::thread::wait_gone(started as i32, 100);
    }
    // SAFETY: the helper has ended (its id was cleared after its last write).
    let result = unsafe { std::ptr::addr_of!(call.result).read_volatile() };
    BUSY.store(false, Ordering::Release);
    (started > 0).then_some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's flags word (`/proc/thread-self/stat`, field 9).
    fn own_flags() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(6).unwrap().parse().unwrap()
    }

    #[test]
    fn the_helper_opens_the_event_for_this_thread_and_the_privilege_mark_is_its_own() {
        const PF_SUPERPRIV: u64 = 0x100;
        let before = own_flags();
        let attr = crate::sys::perf::sample_timer_attr(1_000_000);
        let tid = super::super::raw::gettid();
        let Some(fd) = perf_event_open_for(&attr, tid, 8) else { panic!("no helper thread") };
        if fd == -i64::from(libc::EACCES) || fd == -i64::from(libc::ENOENT) || fd == -i64::from(libc::ENOSYS) {
            eprintln!("SKIP: perf_event_open: {fd}");
            return;
        }
        assert!(fd >= 0, "perf_event_open by the helper: {fd}");
        assert!(std::path::Path::new(&format!("/proc/self/fdinfo/{fd}")).exists());
        // SAFETY: the descriptor the helper opened in this process's table.
        unsafe { libc::close(fd as i32) };
        if before & PF_SUPERPRIV == 0 {
            assert_eq!(own_flags() & PF_SUPERPRIV, 0, "the calling thread was marked as using a privilege");
        }
    }
}
