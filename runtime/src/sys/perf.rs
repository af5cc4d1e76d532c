//! `perf_event_open(2)` wrappers: the task-clock sampling timer and the
//! hardware watchpoints, both delivering `SIGTRAP` (`si_code == TRAP_PERF`)
//! to the thread the event fired in.
//!
//! Both kinds are opened once, by the constructor thread, for the calling
//! thread with `inherit` + `inherit_thread`: every thread created afterwards
//! gets a child event, and ioctls on the parent fd (enable, disable,
//! `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`) apply to all children. Threads that
//! already existed when the event was opened are not covered.
//!
//! [`Watchpoint::arm`], [`Watchpoint::disarm`] and the enable/disable calls
//! are async-signal-safe: one ioctl each, no allocation (an `io::Error` built
//! from an errno does not allocate).

use std::io;

/// `perf_event_attr.type` of software events.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `perf_event_attr.type` of hardware breakpoints; also the `si_perf_type` of a watchpoint trap.
pub const PERF_TYPE_BREAKPOINT: u32 = 5;
/// `perf_event_attr.config` of the per-thread CPU clock.
pub const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;

/// `sig_data` of every task-clock sample (`si_perf_data` of its signal).
pub const SAMPLE_SIG_DATA: u64 = 0x5241_4345_5341_4d50; // "RACESAMP"

const HW_BREAKPOINT_R: u32 = 1;
const HW_BREAKPOINT_W: u32 = 2;
/// The size this struct has in the kernel ABI (PERF_ATTR_SIZE_VER8).
const ATTR_SIZE: u32 = 136;

const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
/// `_IOW('$', 11, __u64)`.
const PERF_EVENT_IOC_MODIFY_ATTRIBUTES: libc::c_ulong = 0x4008_240b;

/// Bits of the `perf_event_attr` flags word (bit numbers from `linux/perf_event.h`).
pub mod flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const INHERIT_THREAD: u64 = 1 << 35;
    pub const REMOVE_ON_EXEC: u64 = 1 << 36;
    pub const SIGTRAP: u64 = 1 << 37;
}

/// `struct perf_event_attr` as of Linux 6.x (136 bytes, `PERF_ATTR_SIZE_VER8`).
/// Unions are represented by their first member; the bitfield word is `flags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub bp_addr: u64,
    pub bp_len: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub aux_action: u32,
    pub sig_data: u64,
    pub config3: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == ATTR_SIZE as usize);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, flags) == 40);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, bp_addr) == 56);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, sig_data) == 120);

/// The flags both event kinds share: signal the thread, follow new threads, drop on exec.
const COMMON_FLAGS: u64 = flag::DISABLED
    | flag::INHERIT
    | flag::INHERIT_THREAD
    | flag::REMOVE_ON_EXEC
    | flag::SIGTRAP
    | flag::EXCLUDE_KERNEL
    | flag::EXCLUDE_HV;

/// An owned perf event file descriptor, closed on drop.
#[derive(Debug)]
pub struct PerfFd(i32);

impl PerfFd {
    /// The raw descriptor.
    pub fn raw(&self) -> i32 {
        self.0
    }

    fn ioctl(&self, request: libc::c_ulong, arg: usize) -> io::Result<()> {
        // SAFETY: `self.0` is a perf event fd we own; every request used here either
        // ignores `arg` or reads a live `PerfEventAttr` the caller passes by address.
        let rc = unsafe { libc::ioctl(self.0, request, arg) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Enables the event and every inherited child. Async-signal-safe.
    pub fn enable(&self) -> io::Result<()> {
        self.ioctl(PERF_EVENT_IOC_ENABLE, 0)
    }

    /// Disables the event and every inherited child. Async-signal-safe.
    pub fn disable(&self) -> io::Result<()> {
        self.ioctl(PERF_EVENT_IOC_DISABLE, 0)
    }
}

impl Drop for PerfFd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor and nobody uses it after drop.
        unsafe { libc::close(self.0) };
    }
}

/// Opens `attr` for the calling thread (pid 0) on any CPU, close-on-exec.
/// Errors are the kernel's: EACCES/EPERM (perf_event_paranoid, seccomp),
/// ENOENT/EOPNOTSUPP (unsupported type), EINVAL/E2BIG (bad attr), ENOSPC (no debug register).
pub fn open_raw(attr: &PerfEventAttr) -> io::Result<PerfFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: `attr` points to a live, fully initialised 136-byte attr whose `size`
    // field the kernel uses to bound its read; the other arguments are plain values.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(PerfFd(fd as i32))
    }
}

/// The attr of the per-thread CPU-time sampler.
pub fn sample_timer_attr(period_ns: u64) -> PerfEventAttr {
    PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: period_ns.max(1),
        flags: COMMON_FLAGS,
        sig_data: SAMPLE_SIG_DATA,
        ..PerfEventAttr::default()
    }
}

/// One `SIGTRAP` per `period_ns` of each thread's CPU time, disabled until [`PerfFd::enable`].
#[derive(Debug)]
pub struct SampleTimer {
    fd: PerfFd,
}

impl SampleTimer {
    /// Opens the (disabled) sampler for the calling thread and the threads it creates later.
    pub fn open(period_ns: u64) -> io::Result<SampleTimer> {
        Ok(SampleTimer { fd: open_raw(&sample_timer_attr(period_ns))? })
    }

    /// Starts sampling in every covered thread. Async-signal-safe.
    pub fn enable(&self) -> io::Result<()> {
        self.fd.enable()
    }

    /// Stops sampling in every covered thread. Async-signal-safe.
    pub fn disable(&self) -> io::Result<()> {
        self.fd.disable()
    }

    /// The underlying descriptor.
    pub fn fd(&self) -> &PerfFd {
        &self.fd
    }
}

/// Which accesses a watchpoint traps on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchKind {
    /// Stores only.
    Write,
    /// Loads and stores.
    ReadWrite,
}

/// A hardware data breakpoint (one x86 debug register per thread), moved with
/// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` in every thread at once.
#[derive(Debug)]
pub struct Watchpoint {
    fd: PerfFd,
    base: PerfEventAttr,
}

/// A harmless address to park a disarmed watchpoint on.
static PARKING: u64 = 0;

impl Watchpoint {
    /// Opens a disabled watchpoint; `slot` is only a label kept in the initial `sig_data`.
    pub fn open(slot: u32) -> io::Result<Watchpoint> {
        let base = PerfEventAttr {
            type_: PERF_TYPE_BREAKPOINT,
            size: ATTR_SIZE,
            sample_period: 1,
            flags: COMMON_FLAGS,
            bp_type: HW_BREAKPOINT_W,
            bp_addr: &PARKING as *const u64 as u64,
            bp_len: 8,
            sig_data: u64::from(slot),
            ..PerfEventAttr::default()
        };
        Ok(Watchpoint { fd: open_raw(&base)?, base })
    }

    fn modify(&self, attr: &PerfEventAttr) -> io::Result<()> {
        self.fd.ioctl(PERF_EVENT_IOC_MODIFY_ATTRIBUTES, attr as *const PerfEventAttr as usize)
    }

    /// Watches `len` bytes (1, 2, 4 or 8, aligned to `len`) at `addr` in every thread;
    /// traps report `sig_data` as `si_perf_data`. Async-signal-safe.
    pub fn arm(&self, addr: u64, len: u64, kind: WatchKind, sig_data: u64) -> io::Result<()> {
        let mut attr = self.base;
        attr.bp_addr = addr;
        attr.bp_len = len;
        attr.bp_type = match kind {
            WatchKind::Write => HW_BREAKPOINT_W,
            WatchKind::ReadWrite => HW_BREAKPOINT_R | HW_BREAKPOINT_W,
        };
        attr.sig_data = sig_data;
        attr.flags &= !flag::DISABLED;
        self.modify(&attr)
    }

    /// Stops watching, in every thread. Async-signal-safe.
    pub fn disarm(&self) -> io::Result<()> {
        self.fd.disable()
    }

    /// The underlying descriptor.
    pub fn fd(&self) -> &PerfFd {
        &self.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitfield_bits_match_the_kernel_header() {
        // linux/perf_event.h: disabled:1 inherit:1 pinned:1 exclusive:1 exclude_user:1
        // exclude_kernel:1 ... build_id is bit 34, inherit_thread 35, remove_on_exec 36, sigtrap 37.
        assert_eq!(flag::EXCLUDE_KERNEL.trailing_zeros(), 5);
        assert_eq!(flag::SIGTRAP.trailing_zeros(), 37);
        let attr = sample_timer_attr(1_000_000);
        assert_eq!(attr.size, 136);
        assert_eq!(attr.sample_period, 1_000_000);
        assert_ne!(attr.flags & flag::DISABLED, 0);
    }
}
