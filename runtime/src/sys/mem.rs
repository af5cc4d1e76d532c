//! Non-faulting reads of the process's own memory: `process_vm_readv` on
//! ourselves returns EFAULT (or a short count) for unmapped or unreadable
//! pages instead of raising SIGSEGV. Async-signal-safe: one syscall, no allocation.

/// Copies up to `buf.len()` bytes from `addr` into `buf`; returns how many were
/// read (0 when `addr` is unreadable; short when the range crosses into an unreadable page).
pub fn read_into(addr: u64, buf: &mut [u8]) -> usize {
    if buf.is_empty() || addr == 0 {
        return 0;
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes the caller's live, writable buffer; `remote` is only
    // read by the kernel, which validates it and reports EFAULT rather than faulting us.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
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

/// Address space this process may still map under `RLIMIT_AS` (soft limit minus the current
/// `VmSize`); `None` when there is no limit.
pub fn address_space_headroom() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a live rlimit the kernel fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    Some(limit.rlim_cur.saturating_sub(pages * 4096))
}

#[cfg(test)]
mod tests {
    use super::*;

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
