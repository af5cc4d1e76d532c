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

use crate::sys::{bystander, fd, raw, tracer};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

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
const HW_BREAKPOINT_X: u32 = 4;
/// The size this struct has in the kernel ABI (PERF_ATTR_SIZE_VER8).
const ATTR_SIZE: u32 = 136;

pub const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
pub const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
/// `_IOW('$', 11, __u64)`.
pub const PERF_EVENT_IOC_MODIFY_ATTRIBUTES: libc::c_ulong = 0x4008_240b;

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

/// A perf event file descriptor of the runtime's, by its slot among the runtime's descriptors (its
/// number can change: [`fd::Kept`]). It is closed explicitly, so that a forked child can forget its
/// copies without touching the parent's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfFd(fd::Kept);

impl PerfFd {
    /// The descriptor a [`PerfFd::key`] names (`None` for a negative key).
    pub fn from_key(key: i32) -> Option<PerfFd> {
        fd::Kept::from_key(key).map(PerfFd)
    }

    /// A key to keep in an atomic.
    pub fn key(&self) -> i32 {
        self.0.key()
    }

    /// Closes the descriptor (unless the program took its number already).
    pub fn close(self) {
        self.0.close(200);
    }

    fn ioctl(&self, request: libc::c_ulong, arg: usize) -> io::Result<()> {
        ioctl(self.0.number(), request, arg)
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

/// Set once the program closed (or is about to close) one of our descriptors:
/// from then on no ioctl of this module touches any descriptor number.
static RETIRED: AtomicBool = AtomicBool::new(false);
/// ioctls under way (see [`retire`]).
static USERS: AtomicU32 = AtomicU32::new(0);

/// One ioctl on a perf descriptor of ours, unless [`retire`] was called. Async-signal-safe.
fn ioctl(fd: i32, request: libc::c_ulong, arg: usize) -> io::Result<()> {
    USERS.fetch_add(1, Ordering::SeqCst);
    let rc = if RETIRED.load(Ordering::SeqCst) {
        Err(io::Error::from_raw_os_error(libc::EBADF))
    } else {
        // `fd` is a perf event descriptor we own and nobody has closed (the program's close goes
        // through `retire` first); every request used here either ignores `arg` or reads a live
        // `PerfEventAttr` the caller passes by address. A raw call: `ioctl` is interposed.
        match super::raw::syscall6(libc::SYS_ioctl, [fd as u64, request, arg as u64, 0, 0, 0]) {
            rc if rc < 0 => Err(io::Error::from_raw_os_error(-rc as i32)),
            _ => Ok(()),
        }
    };
    USERS.fetch_sub(1, Ordering::SeqCst);
    rc
}

/// Stops every later ioctl on our perf descriptors and waits (bounded) for those under way, so that
/// the program can close and reuse their numbers without our touching its files.
pub fn retire() {
    RETIRED.store(true, Ordering::SeqCst);
    for _ in 0..50_000_000u32 {
        if USERS.load(Ordering::SeqCst) == 0 {
            return;
        }
        std::hint::spin_loop();
    }
}

/// Whether [`retire`] was called in this process (a forked child starts afresh with [`unretire`]).
pub fn is_retired() -> bool {
    RETIRED.load(Ordering::SeqCst)
}

/// In a forked child, after its copies of the parent's descriptors were closed: events this process
/// opens from now on are usable again.
pub fn unretire() {
    RETIRED.store(false, Ordering::SeqCst);
}

/// Opens `attr` for the calling thread (pid 0) on any CPU, close-on-exec, moved out of the program's way
/// ([`fd::keep_high`]).
/// Errors are the kernel's: EACCES/EPERM (perf_event_paranoid, seccomp),
/// ENOENT/EOPNOTSUPP (unsupported type), EINVAL/E2BIG (bad attr), ENOSPC (no debug register).
pub fn open_raw(attr: &PerfEventAttr) -> io::Result<PerfFd> {
    const PERF_FLAG_FD_CLOEXEC: u64 = 8;
    // A caller that holds CAP_PERFMON or CAP_SYS_ADMIN would be marked as having used a privilege: a
    // helper thread makes the call for it; not in a traced process (its tracer would see the clone), nor
    // in a nested PID namespace (pids are handed out in order there: the program's next child's would be
    // one higher).
    let by_helper = bystander::holds_perfmon_capability() && {
        let status = tracer::read_now();
        status.tracer.is_none() && !status.nested_pid_namespace
    };
    let tid = raw::gettid();
    let fd = match by_helper.then(|| bystander::perf_event_open_for(attr, tid, PERF_FLAG_FD_CLOEXEC)).flatten() {
        Some(fd) => fd,
        None => raw::syscall6(
            libc::SYS_perf_event_open,
            [attr as *const PerfEventAttr as u64, 0, u64::MAX, u64::MAX, PERF_FLAG_FD_CLOEXEC, 0],
        ),
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd as i32));
    }
    Ok(PerfFd(fd::keep_high(fd as i32)?))
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
#[derive(Clone, Copy, Debug)]
pub struct SampleTimer {
    fd: PerfFd,
}

impl SampleTimer {
    /// The timer open at descriptor `fd`.
    pub fn from_fd(fd: PerfFd) -> SampleTimer {
        SampleTimer { fd }
    }

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
    /// Executing the instruction at the address (a code breakpoint; the length is ignored).
    Exec,
}

/// A hardware data breakpoint (one x86 debug register per thread), moved with
/// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` in every thread at once.
#[derive(Clone, Copy, Debug)]
pub struct Watchpoint {
    fd: PerfFd,
}

/// A harmless address to park a disarmed watchpoint on.
static PARKING: u64 = 0;

impl Watchpoint {
    /// Opens a disabled watchpoint; `slot` is only a label kept in the initial `sig_data`.
    pub fn open(slot: u32) -> io::Result<Watchpoint> {
        Ok(Watchpoint { fd: open_raw(&Self::base(slot))? })
    }

    /// The watchpoint open at descriptor `fd`.
    pub fn from_fd(fd: PerfFd) -> Watchpoint {
        Watchpoint { fd }
    }

    /// The attr a watchpoint is opened with: disabled, parked on a harmless address.
    pub fn base(slot: u32) -> PerfEventAttr {
        PerfEventAttr {
            type_: PERF_TYPE_BREAKPOINT,
            size: ATTR_SIZE,
            sample_period: 1,
            flags: COMMON_FLAGS,
            bp_type: HW_BREAKPOINT_W,
            bp_addr: &PARKING as *const u64 as u64,
            bp_len: 8,
            sig_data: u64::from(slot),
            ..PerfEventAttr::default()
        }
    }

    fn modify(&self, attr: &PerfEventAttr) -> io::Result<()> {
        self.fd.ioctl(PERF_EVENT_IOC_MODIFY_ATTRIBUTES, attr as *const PerfEventAttr as usize)
    }

    /// Watches `len` bytes (1, 2, 4 or 8, aligned to `len`) at `addr` in every thread;
    /// traps report `sig_data` as `si_perf_data`. Async-signal-safe.
    pub fn arm(&self, addr: u64, len: u64, kind: WatchKind, sig_data: u64) -> io::Result<()> {
        let mut attr = Self::base(0);
        attr.bp_addr = addr;
        attr.bp_len = len;
        attr.bp_type = match kind {
            WatchKind::Write => HW_BREAKPOINT_W,
            WatchKind::ReadWrite => HW_BREAKPOINT_R | HW_BREAKPOINT_W,
            WatchKind::Exec => {
                // The kernel takes only the size of a long for a code breakpoint.
                attr.bp_len = 8;
                HW_BREAKPOINT_X
            }
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
