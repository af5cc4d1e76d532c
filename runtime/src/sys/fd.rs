//! Raw file-descriptor output: no locks, no allocation, usable anywhere.

use std::ffi::CString;

/// Writes all of `bytes` to `fd`, retrying on partial writes and EINTR;
/// gives up silently on other errors (diagnostics must never fail the host).
pub fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice; write(2) reads at most its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        } else {
            return;
        }
    }
}

/// Opens `path` for appending (created 0644 if absent), close-on-exec.
pub fn open_append(path: &str) -> std::io::Result<i32> {
    let c_path = CString::new(path).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
    let fd = unsafe {
        libc::open(c_path.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o644)
    };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}
