//! System calls made with the `syscall` instruction itself, for the signal path.
//!
//! Unlike libc's wrappers they never write `errno` (the result carries `-errno`),
//! are never cancellation points (a `pthread_cancel` can never act inside the
//! runtime's handler), and do not go through racewatch's own `syscall`
//! interposer. They also touch no thread-local storage, so they are safe in a
//! thread the runtime does not know (a raw `clone` sharing another thread's TLS).

use std::ffi::CStr;

/// A raw system call with up to six arguments; returns the kernel's result (`-errno` on failure).
#[inline]
pub fn syscall6(number: i64, args: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the `syscall` instruction with the x86-64 Linux convention: number in rax, arguments in
    // rdi, rsi, rdx, r10, r8, r9; the kernel clobbers rcx and r11 and returns in rax. What the call does
    // to memory is the caller's contract with the kernel (every caller passes live buffers).
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// The caller's kernel thread id.
pub fn gettid() -> i32 {
    syscall6(libc::SYS_gettid, [0; 6]) as i32
}

/// The calling thread's name (`comm`, NUL-padded; at most 15 bytes). Async-signal-safe.
pub fn thread_name() -> [u8; 16] {
    let mut name = [0u8; 16];
    syscall6(libc::SYS_prctl, [libc::PR_GET_NAME as u64, name.as_mut_ptr() as u64, 0, 0, 0, 0]);
    name
}

/// Queues a signal with its `siginfo` to thread `tid` of this process `pid` (the sender, code and
/// payload kept: a process may send itself any code).
pub fn queue_to_thread(pid: i32, tid: i32, info: &libc::siginfo_t) -> bool {
    let args = [pid as u64, tid as u64, info.si_signo as u64, info as *const libc::siginfo_t as u64, 0, 0];
    syscall6(libc::SYS_rt_tgsigqueueinfo, args) == 0
}

/// `pidfd_send_signal`'s pidfd for the calling thread, without a descriptor (Linux 6.15).
pub const PIDFD_SELF_THREAD: i32 = -10000;
/// `pidfd_send_signal`'s flag: to the thread group of the pidfd's thread (Linux 6.9).
pub const PIDFD_SIGNAL_THREAD_GROUP: u64 = 1 << 1;
/// `pidfd_open`'s flag for a pidfd naming a thread (Linux 6.9; `O_EXCL`'s value).
const PIDFD_THREAD: u64 = libc::O_EXCL as u64;

/// Sends `sig` with `info` (any code and sender, as the kernel lets a thread send to itself) to the
/// whole process through a pidfd naming the calling thread: as `rt_sigqueueinfo` would from the main
/// thread. False on a kernel without thread pidfds (before 6.9). Async-signal-safe.
pub fn send_to_own_process(sig: i32, info: *const libc::siginfo_t) -> bool {
    let send = |pidfd: i32| {
        let args = [pidfd as u64, sig as u64, info as u64, PIDFD_SIGNAL_THREAD_GROUP, 0, 0];
        syscall6(libc::SYS_pidfd_send_signal, args) == 0
    };
    if send(PIDFD_SELF_THREAD) {
        return true;
    }
    // 6.9 to 6.14: a descriptor for the moment.
    let pidfd = syscall6(libc::SYS_pidfd_open, [gettid() as u64, PIDFD_THREAD, 0, 0, 0, 0]);
    if pidfd < 0 {
        return false;
    }
    let sent = send(pidfd as i32);
    syscall6(libc::SYS_close, [pidfd as u64, 0, 0, 0, 0, 0]);
    sent
}

/// The `siginfo` the kernel makes for a signal `sig` that process `pid` (as the caller's real user) sends
/// with `code` (`SI_USER`, `SI_QUEUE`, …) and the `sigqueue` value `value`.
pub fn siginfo_from(sig: i32, code: i32, pid: i32, value: u64) -> libc::siginfo_t {
    let mut words = [0u64; 16];
    words[0] = sig as u32 as u64; // si_signo, si_errno 0
    words[1] = code as u32 as u64; // si_code
    words[2] = pid as u32 as u64 | u64::from(getuid()) << 32; // si_pid, si_uid
    words[3] = value; // si_value
                      // SAFETY: the words are a siginfo_t's bytes in the x86-64 layout (128 bytes, checked by the transmute).
    unsafe { std::mem::transmute::<[u64; 16], libc::siginfo_t>(words) }
}

/// The caller's real user id.
pub fn getuid() -> u32 {
    syscall6(libc::SYS_getuid, [0; 6]) as u32
}

/// The caller's effective user id.
pub fn geteuid() -> u32 {
    syscall6(libc::SYS_geteuid, [0; 6]) as u32
}

/// The caller's process id.
pub fn getpid() -> i32 {
    syscall6(libc::SYS_getpid, [0; 6]) as i32
}

/// Sends `sig` to thread `tid` of process `pid` (signal 0: only checks that the thread exists).
pub fn tgkill(pid: i32, tid: i32, sig: i32) -> i64 {
    syscall6(libc::SYS_tgkill, [pid as u64, tid as u64, sig as u64, 0, 0, 0])
}

/// Whether thread `tid` of this process is alive.
pub fn thread_alive(tid: i32) -> bool {
    tgkill(getpid(), tid, 0) != -i64::from(libc::ESRCH)
}

/// Offers the CPU to another runnable thread (`sched_yield`): the caller stays runnable, so a switch
/// away is counted as involuntary (as a preemption is), and with nobody else to run it returns at once.
pub fn yield_cpu() {
    syscall6(libc::SYS_sched_yield, [0; 6]);
}

/// Sleeps `ns` nanoseconds of monotonic time, resuming after signals (not a cancellation point).
pub fn sleep_ns(ns: u64) {
    let mut req = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as _ };
    loop {
        let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let rc = syscall6(
            libc::SYS_clock_nanosleep,
            [libc::CLOCK_MONOTONIC as u64, 0, &req as *const _ as u64, &mut rem as *mut _ as u64, 0, 0],
        );
        if rc != -i64::from(libc::EINTR) {
            return;
        }
        req = rem;
    }
}

/// `rt_sigprocmask` on the kernel's 64-bit mask (signals 1..=64 as bits 0..=63, the internal signals
/// 32 and 33 included, which libc's wrappers hide). Returns the previous mask, or `None` on failure.
pub fn sigprocmask(how: i32, set: Option<u64>) -> Option<u64> {
    let mut old = 0u64;
    let new = set.as_ref().map_or(0, |s| s as *const u64 as u64);
    let rc = syscall6(libc::SYS_rt_sigprocmask, [how as u64, new, &mut old as *mut u64 as u64, 8, 0, 0]);
    (rc == 0).then_some(old)
}

/// The calling thread's pending signals (`rt_sigpending`, the kernel's 64-bit set: signals 1..=64 as bits
/// 0..=63), or `None` on failure.
pub fn sigpending() -> Option<u64> {
    let mut pending = 0u64;
    let rc = syscall6(libc::SYS_rt_sigpending, [&mut pending as *mut u64 as u64, 8, 0, 0, 0, 0]);
    (rc == 0).then_some(pending)
}

/// Whether signal `sig` runs a handler in the kernel's disposition (not `SIG_DFL` or `SIG_IGN`), or ran
/// a one-shot one (`SIG_DFL` with `SA_RESETHAND` still in the flags: the kernel resets only the handler);
/// `None` when the kernel does not say (an invalid number).
pub fn has_handler(sig: i32) -> Option<bool> {
    // The kernel's `struct sigaction` on x86-64: handler, flags, restorer, 8-byte mask.
    let mut old = [0u64; 4];
    let rc = syscall6(libc::SYS_rt_sigaction, [sig as u64, 0, old.as_mut_ptr() as u64, 8, 0, 0]);
    let one_shot = old[0] == libc::SIG_DFL as u64 && old[1] & libc::SA_RESETHAND as u64 != 0;
    (rc == 0).then(|| one_shot || (old[0] != libc::SIG_DFL as u64 && old[0] != libc::SIG_IGN as u64))
}

/// Unmaps `[addr, addr + len)`, a mapping of racewatch's; true when the kernel did. The program's memory
/// budgets are told ([`super::budget::unmapped`]).
pub fn munmap(addr: usize, len: usize) -> bool {
    let done = syscall6(libc::SYS_munmap, [addr as u64, len as u64, 0, 0, 0, 0]) == 0;
    if done {
        super::budget::unmapped(addr, len);
    }
    done
}

/// Marks `[addr, addr + len)`, a mapping of racewatch's placed by the kernel, as kept out of core dumps
/// (`MADV_DONTDUMP`). That flag also keeps the kernel from merging it with a neighbouring mapping of the
/// program's with the same protection: a thread stack (`MAP_STACK`) mapped right below the warm-up
/// thread's stack became one `/proc/self/maps` line with it, one line fewer than without racewatch
/// (host case address_space_across_first_threads, about 1 run in 100). The program's core file holds
/// none of racewatch's anonymous memory.
pub fn keep_apart(addr: usize, len: usize) {
    syscall6(libc::SYS_madvise, [addr as u64, len as u64, libc::MADV_DONTDUMP as u64, 0, 0, 0]);
}

/// The process's soft and hard limit of `resource` as the kernel holds them (`prlimit64`, not the
/// program's view of them); `None` when the kernel does not say.
pub fn limit(resource: u32) -> Option<(u64, u64)> {
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    let rc = syscall6(libc::SYS_prlimit64, [0, u64::from(resource), 0, &mut old as *mut libc::rlimit as u64, 0, 0]);
    (rc == 0).then_some((old.rlim_cur, old.rlim_max))
}

/// Whether capability `bit` is in the calling thread's effective set (`capget`); false when unknown.
pub fn has_capability(bit: u32) -> bool {
    const VERSION_3: u32 = 0x2008_0522;
    let header = [VERSION_3, 0u32];
    // Per 32-bit word: effective, permitted, inheritable.
    let mut data = [0u32; 6];
    let rc = syscall6(libc::SYS_capget, [header.as_ptr() as u64, data.as_mut_ptr() as u64, 0, 0, 0, 0]);
    rc == 0 && bit < 64 && data[(bit / 32) as usize * 3] & (1 << (bit % 32)) != 0
}

/// Sets the process's limit of `resource` in the kernel; `Err(errno)` when refused.
pub fn set_limit(resource: u32, soft: u64, hard: u64) -> Result<(), i32> {
    let new = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    let rc = syscall6(libc::SYS_prlimit64, [0, u64::from(resource), &new as *const libc::rlimit as u64, 0, 0, 0]);
    if rc == 0 {
        Ok(())
    } else {
        Err(-rc as i32)
    }
}

/// `sigaltstack`: installs `new` (when given) and returns the previous setting, or `None` on failure.
pub fn sigaltstack(new: Option<&libc::stack_t>) -> Option<libc::stack_t> {
    let mut old = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: 0, ss_size: 0 };
    let new = new.map_or(0, |s| s as *const libc::stack_t as u64);
    let rc = syscall6(libc::SYS_sigaltstack, [new, &mut old as *mut libc::stack_t as u64, 0, 0, 0, 0]);
    (rc == 0).then_some(old)
}

/// A `/proc/<pid>/maps` line's start and end addresses and its permissions (`rw-p`).
pub fn maps_entry(line: &[u8]) -> Option<(usize, usize, &[u8])> {
    let mut fields = line.split(|&b| b == b' ');
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |digits: &[u8]| usize::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok();
    Some((hex(&range[..dash])?, hex(&range[dash + 1..])?, fields.next().unwrap_or_default()))
}

/// The whole text of `path` into `buf` (raw calls: no descriptor kept, none of racewatch's
/// interposers, not a cancellation point); `None` if it cannot be read or does not fit.
pub fn read_whole(path: &CStr, buf: &mut [u8]) -> Option<usize> {
    let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    let fd = syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0, 0, 0]);
    if fd < 0 {
        return None;
    }
    let mut len = 0;
    let complete = loop {
        let rest = &mut buf[len..];
        if rest.is_empty() {
            break false;
        }
        let n = syscall6(libc::SYS_read, [fd as u64, rest.as_mut_ptr() as u64, rest.len() as u64, 0, 0, 0]);
        match n {
            0 => break true,
            n if n < 0 && n != -i64::from(libc::EINTR) => break false,
            n if n < 0 => {}
            n => len += n as usize,
        }
    };
    syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    complete.then_some(len)
}

/// Calls `each` with every line of the file at `path` (without its newline), read with raw calls
/// through a 4 KiB buffer on the stack, until it returns false; a line longer than the buffer is cut.
/// False when the file cannot be opened.
pub fn for_each_line(path: &CStr, each: &mut dyn FnMut(&[u8]) -> bool) -> bool {
    let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    let fd = syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, path.as_ptr() as u64, flags, 0, 0, 0]);
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096];
    let mut held = 0;
    'read: loop {
        let n =
            syscall6(libc::SYS_read, [fd as u64, buf[held..].as_mut_ptr() as u64, (buf.len() - held) as u64, 0, 0, 0]);
        if n == -i64::from(libc::EINTR) {
            continue;
        }
        let end = held + n.max(0) as usize;
        let mut from = 0;
        while let Some(at) = buf[from..end].iter().position(|&b| b == b'\n') {
            if !each(&buf[from..from + at]) {
                break 'read;
            }
            from += at + 1;
        }
        if n <= 0 {
            if from < end {
                each(&buf[from..end]);
            }
            break;
        }
        if from == 0 && end == buf.len() {
            // A line longer than the buffer: cut.
            if !each(&buf[..end]) {
                break;
            }
            held = 0;
        } else {
            buf.copy_within(from..end, 0);
            held = end - from;
        }
    }
    syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    true
}

/// A private anonymous mapping of `len` bytes (`MAP_ANONYMOUS` is added to `flags`), made with the
/// system call (the C library's `mmap` is the program's, interposed): its address, or `MAP_FAILED`. Only
/// `MAP_FIXED_NOREPLACE` among the placing flags: no existing memory is touched.
pub fn mmap_anonymous(hint: usize, len: usize, prot: i32, flags: i32) -> *mut libc::c_void {
    if flags & libc::MAP_FIXED != 0 {
        return libc::MAP_FAILED;
    }
    let flags = flags | libc::MAP_ANONYMOUS;
    let rc = syscall6(libc::SYS_mmap, [hint as u64, len as u64, prot as u64, flags as u64, u64::MAX, 0]);
    if rc < 0 {
        libc::MAP_FAILED
    } else {
        rc as *mut libc::c_void
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_line_of_a_file_is_seen_once_with_long_ones_cut() {
        let dir = std::env::temp_dir().join(format!("rw-lines-{}", std::process::id()));
        let long = "x".repeat(5000);
        let text = format!("first\n\nthird\n{long}\nlast without newline");
        std::fs::write(&dir, &text).unwrap();
        let path = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let mut lines = Vec::new();
        assert!(super::for_each_line(&path, &mut |line| {
            lines.push(String::from_utf8_lossy(line).into_owned());
            true
        }));
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(&lines[..3], ["first", "", "third"]);
        assert_eq!(lines[3..lines.len() - 1].concat(), long, "a long line comes in pieces, whole");
        assert_eq!(lines.last().unwrap(), "last without newline");
        let mut calls = 0;
        super::for_each_line(c"/proc/self/maps", &mut |_| {
            calls += 1;
            false
        });
        assert_eq!(calls, 1, "stops when asked");
    }

    use super::*;

    #[test]
    fn raw_calls_match_libc_and_leave_errno_alone() {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = 1234 };
        assert_eq!(gettid(), unsafe { libc::gettid() });
        assert_eq!(getpid(), std::process::id() as i32);
        assert!(thread_alive(gettid()));
        assert!(!thread_alive(i32::MAX - 7));
        assert_eq!(tgkill(getpid(), i32::MAX - 7, 0), -i64::from(libc::ESRCH));
        let start = std::time::Instant::now();
        sleep_ns(2_000_000);
        assert!(start.elapsed() >= std::time::Duration::from_millis(2));
        let mask = sigprocmask(libc::SIG_BLOCK, None).expect("query the mask");
        assert_eq!(sigprocmask(libc::SIG_SETMASK, Some(mask)), Some(mask));
        assert!(sigaltstack(None).is_some());
        // SAFETY: as above.
        assert_eq!(unsafe { *libc::__errno_location() }, 1234, "raw calls never write errno");
    }
}
