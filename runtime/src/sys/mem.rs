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

/// Whether the program limits its data (`RLIMIT_DATA`): every byte racewatch allocates or maps
/// writable is then one the program cannot have.
pub fn data_limited() -> bool {
    soft_limit(libc::RLIMIT_DATA).is_some()
}

/// A resource's soft limit; `None` when unlimited or unknown.
fn soft_limit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a live rlimit the kernel fills.
    let known = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
    (known && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// A fresh private anonymous read-write mapping of `len` bytes, untouched (`None` when the kernel refuses
/// it: no address space, a memory limit, strict overcommit).
pub fn map_private(len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: a new mapping at an address the kernel picks; no existing memory is touched.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (mem != libc::MAP_FAILED).then_some(mem)
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
