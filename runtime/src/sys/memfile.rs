//! A file's text, rewritten, as a memory file (`memfd`) read from its start: what
//! [`crate::proc_view`] hands the program for its own `/proc` files. Raw system calls, a static
//! buffer and an anonymous mapping only (no allocation, no `errno`): `open` is async-signal-safe, and a
//! program may call it from a handler.

use super::raw::syscall6;
use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most text read from the file, and written.
const MAX_TEXT: usize = 32 * 1024;

/// Room for the file's text (`MAX_TEXT` bytes) and as many for the rewrite: the runtime's static
/// buffer, or, while another call (another thread, or a handler interrupting this one) holds it, a
/// private anonymous mapping unmapped when dropped. The static buffer lies in the library's own
/// mapping, so a snapshot of `status` taken meanwhile shows the program's `VmSize`, not 64 KiB more
/// (a program comparing it with `statm` saw them differ in every run).
enum Scratch {
    Static,
    Mapped(*mut u8),
}

struct StaticScratch {
    busy: AtomicBool,
    bytes: UnsafeCell<[u8; 2 * MAX_TEXT]>,
}

// SAFETY: `bytes` is only touched by the one `Scratch::Static` that set `busy` (see `Scratch::new`).
unsafe impl Sync for StaticScratch {}

static STATIC_SCRATCH: StaticScratch =
    StaticScratch { busy: AtomicBool::new(false), bytes: UnsafeCell::new([0; 2 * MAX_TEXT]) };

impl Scratch {
    fn new() -> Option<Scratch> {
        if STATIC_SCRATCH.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return Some(Scratch::Static);
        }
        let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let addr = syscall6(libc::SYS_mmap, [0, 2 * MAX_TEXT as u64, prot, flags, u64::MAX, 0]);
        (!(-4095..=0).contains(&addr)).then_some(Scratch::Mapped(addr as *mut u8))
    }

    fn halves(&mut self) -> (&mut [u8], &mut [u8]) {
        let all = match *self {
            // SAFETY: this `Scratch` holds the static buffer alone (it set `busy`) until dropped.
            Scratch::Static => unsafe { &mut *STATIC_SCRATCH.bytes.get() }.as_mut_slice(),
            // SAFETY: the mapping is 2 * MAX_TEXT bytes, readable and writable, and lives as long as
            // `self`.
            Scratch::Mapped(addr) => unsafe { std::slice::from_raw_parts_mut(addr, 2 * MAX_TEXT) },
        };
        all.split_at_mut(MAX_TEXT)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        match *self {
            Scratch::Static => STATIC_SCRATCH.busy.store(false, Ordering::Release),
            Scratch::Mapped(addr) => {
                syscall6(libc::SYS_munmap, [addr as u64, 2 * MAX_TEXT as u64, 0, 0, 0, 0]);
            }
        }
    }
}

/// Where [`rewritten`] puts the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A new memory file, read-only and positioned at its start, with the status flags of the program's
    /// `open` (`flags`: `O_CLOEXEC`, `O_NONBLOCK`, `O_NOATIME`, `O_SYNC`, `O_APPEND`), as `F_GETFL` and
    /// `fdinfo` show them for the file it stands for.
    New { flags: libc::c_int },
    /// The memory file descriptor `fd` already holds (a view made again): its text is replaced.
    Existing(libc::c_int),
}

/// Reads `path`, rewrites its text with `rewrite` (into a buffer; `None`: it does not fit) and puts
/// the result where `into` says. `None` when a new file's text is the file's own or anything fails:
/// the caller opens the file for real.
pub fn rewritten(
    path: &CStr,
    into: Dest,
    settled: impl Fn(&[u8]) -> bool,
    rewrite: impl FnOnce(&[u8], &mut [u8]) -> Option<usize>,
) -> Option<libc::c_int> {
    let mut scratch = Scratch::new()?;
    let (text, out) = scratch.halves();
    let mut len = super::raw::read_whole(path, text)?;
    // A text caught in a moment that passes (racewatch's handler entering or leaving in the thread it
    // describes) is read again, a few times at most: after the CPU was given away, then, for a thread
    // that waits for a CPU on a loaded machine (another process's, which yielding may not let run),
    // after a millisecond's sleep.
    for attempt in 0..SETTLE_TRIES {
        if settled(&text[..len]) {
            break;
        }
        if attempt < SETTLE_TRIES / 2 {
            syscall6(libc::SYS_sched_yield, [0; 6]);
        } else {
            super::raw::sleep_ns(1_000_000);
        }
        len = super::raw::read_whole(path, text)?;
    }
    let new_len = rewrite(&text[..len], out)?;
    let open_flags = match into {
        Dest::Existing(fd) => return write_again(fd, &out[..new_len]).then_some(fd),
        Dest::New { flags } => flags,
    };
    let cloexec = open_flags & libc::O_CLOEXEC != 0;
    if out[..new_len] == text[..len] {
        return None;
    }
    let name = path.to_bytes().rsplit(|&b| b == b'/').next().filter(|n| !n.is_empty()).unwrap_or(b"proc");
    let mut c_name = [0u8; 32];
    let n = name.len().min(c_name.len() - 1);
    c_name[..n].copy_from_slice(&name[..n]);
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    let fd = syscall6(libc::SYS_memfd_create, [c_name.as_ptr() as u64, u64::from(flags), 0, 0, 0, 0]);
    if fd < 0 {
        return None;
    }
    let fd = fd as libc::c_int;
    if !write_all(fd, &out[..new_len]) {
        syscall6(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        return None;
    }
    syscall6(libc::SYS_lseek, [fd as u64, 0, libc::SEEK_SET as u64, 0, 0, 0]);
    read_only(fd, open_flags);
    Some(fd)
}

fn write_all(fd: libc::c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let n = syscall6(libc::SYS_write, [fd as u64, bytes.as_ptr() as u64, bytes.len() as u64, 0, 0, 0]);
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// `/proc/self/fd/<fd>` (NUL-terminated) in `buf`.
fn own_link(fd: libc::c_int, buf: &mut [u8; 32]) -> &CStr {
    let mut w = std::io::Cursor::new(&mut buf[..]);
    let _ = std::io::Write::write_fmt(&mut w, format_args!("/proc/self/fd/{fd}\0"));
    CStr::from_bytes_until_nul(buf).unwrap_or(c"/proc/self/fd/-1")
}

/// The status flags of the program's `open` a view keeps (the kernel keeps them for the file too).
const KEPT_FLAGS: libc::c_int =
    libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOATIME | libc::O_SYNC | libc::O_DSYNC | libc::O_APPEND;

/// Replaces memory file `fd` (same number) by a read-only open of it with the status flags of the
/// program's `open` (`flags`), as its own open of the file it stands for is (`F_GETFL`, its `fdinfo`
/// flags); left as it is when that fails.
fn read_only(fd: libc::c_int, flags: libc::c_int) {
    let mut buf = [0u8; 32];
    let link = own_link(fd, &mut buf);
    let flags = libc::O_RDONLY | (flags & KEPT_FLAGS);
    let again = syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, link.as_ptr() as u64, flags as u64, 0, 0, 0]);
    if again >= 0 {
        let dup_flags = flags & libc::O_CLOEXEC;
        syscall6(libc::SYS_dup3, [again as u64, fd as u64, dup_flags as u64, 0, 0, 0]);
        syscall6(libc::SYS_close, [again as u64, 0, 0, 0, 0, 0]);
    }
}

/// Replaces the text of memory file `fd` (a read-only descriptor of it) with `text`, through a
/// writable open of its own that truncates it.
fn write_again(fd: libc::c_int, text: &[u8]) -> bool {
    let mut buf = [0u8; 32];
    let link = own_link(fd, &mut buf);
    let flags = libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC;
    let writable = syscall6(libc::SYS_openat, [libc::AT_FDCWD as u64, link.as_ptr() as u64, flags as u64, 0, 0, 0]);
    if writable < 0 {
        return false;
    }
    let done = write_all(writable as libc::c_int, text);
    syscall6(libc::SYS_close, [writable as u64, 0, 0, 0, 0, 0]);
    done
}

/// How many times [`rewritten`] reads a text again that is not settled (half after yielding, half after
/// sleeping a millisecond: 32 ms at most).
const SETTLE_TRIES: usize = 64;

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::io::FromRawFd;

    fn read(fd: libc::c_int) -> String {
        // SAFETY: a descriptor `rewritten` just made, owned by the test from here.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn the_rewrite_is_read_from_its_start_and_an_unchanged_text_is_not_copied() {
        let upper = |text: &[u8], out: &mut [u8]| {
            out[..text.len()].copy_from_slice(text);
            out[..text.len()].make_ascii_uppercase();
            Some(text.len())
        };
        let fd =
            super::rewritten(c"/proc/self/comm", super::Dest::New { flags: libc::O_CLOEXEC }, |_| true, upper).unwrap();
        let own = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(read(fd), own.to_uppercase());
        let same = |text: &[u8], out: &mut [u8]| {
            out[..text.len()].copy_from_slice(text);
            Some(text.len())
        };
        assert_eq!(
            super::rewritten(c"/proc/self/comm", super::Dest::New { flags: libc::O_CLOEXEC }, |_| true, same),
            None
        );
        assert_eq!(
            super::rewritten(c"/nonexistent/file", super::Dest::New { flags: libc::O_CLOEXEC }, |_| true, same),
            None
        );
    }

    #[test]
    fn a_view_is_read_only_and_made_again_in_place() {
        let upper = |text: &[u8], out: &mut [u8]| {
            out[..text.len()].copy_from_slice(text);
            out[..text.len()].make_ascii_uppercase();
            Some(text.len())
        };
        let fd =
            super::rewritten(c"/proc/self/comm", super::Dest::New { flags: libc::O_CLOEXEC }, |_| true, upper).unwrap();
        // SAFETY: F_GETFL on a descriptor this test owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        assert_eq!(flags & libc::O_ACCMODE, libc::O_RDONLY, "as the program's own open of the file");
        // The program's status flags are kept, as the kernel keeps them for the file itself.
        let kept = super::Dest::New { flags: libc::O_NONBLOCK | libc::O_NOATIME };
        let other = super::rewritten(c"/proc/self/comm", kept, |_| true, upper).unwrap();
        // SAFETY: F_GETFL on a descriptor this test owns.
        let flags = unsafe { libc::fcntl(other, libc::F_GETFL) };
        assert_eq!(flags & (libc::O_NONBLOCK | libc::O_NOATIME), libc::O_NONBLOCK | libc::O_NOATIME);
        // SAFETY: closing a descriptor this test owns.
        unsafe { libc::close(other) };
        let shorter = |_: &[u8], out: &mut [u8]| {
            out[..3].copy_from_slice(b"ab\n");
            Some(3)
        };
        assert_eq!(super::rewritten(c"/proc/self/comm", super::Dest::Existing(fd), |_| true, shorter), Some(fd));
        assert_eq!(read(fd), "ab\n", "the same descriptor, the new text only");
    }
}
