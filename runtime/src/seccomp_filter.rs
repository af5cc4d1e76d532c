//! Whether a seccomp filter the program installs leaves racewatch's own system calls alone.
//!
//! A filter the program installs while racewatch runs (`seccomp(SECCOMP_SET_MODE_FILTER)`,
//! `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)`) is in racewatch's hands before the kernel has it: a
//! classic BPF program over `struct seccomp_data`. Many are deny-lists: a few calls the program must
//! never make (`mount`, `ptrace`, `acct`, the socket calls) answered with an error, a `SIGSYS` or a
//! kill, and everything else allowed. Such a filter cannot reach racewatch, which never makes those
//! calls on its own account, so racewatch need not step aside for one on every thread (`TSYNC`). A
//! thread's own filter still leaves that thread confined (`intercept::syscall`): a reporter thread it
//! started would inherit the filter, and the program's next `TSYNC` would fail on it.
//!
//! The judgement is conservative: the filter is run for x86-64 on every system call number but those
//! in [`NEVER`] (calls racewatch's code never makes itself; a program's own call that racewatch passes
//! on, `execve` among them, is the program's), and it must answer `SECCOMP_RET_ALLOW` for every one of
//! them without looking at the instruction pointer or at an argument racewatch does not fix. The
//! arguments it fixes ([`KNOWN_ARGUMENTS`]: `ioctl`'s perf requests, `clone`'s thread flags) are tried
//! one value at a time, so a sandbox's rule on `ioctl(TIOCSTI)` or on `clone` without `CLONE_THREAD`
//! does not reach racewatch; `clone3` may be answered `ENOSYS` (glibc then starts a thread with
//! `clone`). Anything else (an allow-list, a rule on a descriptor number, a malformed program) leaves
//! racewatch doing what it did before: it steps aside for the process, or leaves the filtered thread
//! alone.

use crate::sys::mem;

/// One instruction of a classic BPF program (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

impl Insn {
    /// The instruction in the 8 bytes the kernel reads (`code`, `jt`, `jf`, `k`, little-endian).
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            code: u16::from_le_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// The kernel's limit on a filter's length (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// `AUDIT_ARCH_X86_64`: the `arch` of every call racewatch makes.
const ARCH_X86_64: u32 = 0xc000_003e;
/// The action bits of a filter's answer, and the one that lets the call through.
const RET_ACTION_FULL: u32 = 0xffff_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
/// `struct seccomp_data`: `nr` at 0, `arch` at 4, then the instruction pointer and the arguments.
const DATA_LEN: u32 = 64;
/// System call numbers judged: every x86-64 call up to this (the table ends below 512).
const NR_END: u32 = 512;

/// `(name, number)` of each `libc::SYS_*` constant named.
macro_rules! never {
    ($($sys:ident),* $(,)?) => { [$((stringify!($sys), nr::$sys)),*] };
}

/// The x86-64 system call numbers: libc's, and three old ones it does not name (the kernel answers
/// them `ENOSYS`; deny-lists of obsolete calls, systemd's `@obsolete` among them, still list them).
#[allow(non_upper_case_globals)]
mod nr {
    pub use libc::*;
    pub const SYS_create_module: i64 = 174;
    pub const SYS_get_kernel_syms: i64 = 177;
    pub const SYS_query_module: i64 = 178;
}

/// System calls racewatch's code never makes on its own account (neither directly nor through a libc
/// function it calls). A call racewatch passes on for the program (`execve` from its `exec*` wrappers)
/// is the program's, filtered as without racewatch. A filter may answer these as it likes. One exception
/// no filter meets: `fchown`, made only by a thread under no filter at all, just before the program
/// gives up root ([`crate::handover`]). Each is `(name, number)`.
pub const NEVER: &[(&str, i64)] = &never![
    SYS_acct,
    SYS_add_key,
    SYS_adjtimex,
    SYS_bpf,
    SYS_capset,
    SYS_chroot,
    SYS_clock_adjtime,
    SYS_clock_settime,
    SYS_delete_module,
    SYS_execve,
    SYS_execveat,
    SYS_fanotify_init,
    SYS_finit_module,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fsopen,
    SYS_fspick,
    SYS_getpriority,
    SYS_init_module,
    SYS_io_uring_enter,
    SYS_io_uring_register,
    SYS_io_uring_setup,
    SYS_ioperm,
    SYS_iopl,
    SYS_kexec_file_load,
    SYS_kexec_load,
    SYS_keyctl,
    SYS_lookup_dcookie,
    SYS_mbind,
    SYS_migrate_pages,
    SYS_mount,
    SYS_mount_setattr,
    SYS_move_mount,
    SYS_move_pages,
    SYS_name_to_handle_at,
    SYS_open_by_handle_at,
    SYS_open_tree,
    SYS_personality,
    SYS_pivot_root,
    SYS_process_vm_writev,
    SYS_ptrace,
    SYS_quotactl,
    SYS_reboot,
    SYS_request_key,
    SYS_set_mempolicy,
    SYS_setdomainname,
    SYS_setfsgid,
    SYS_setfsuid,
    SYS_setgid,
    SYS_setgroups,
    SYS_sethostname,
    SYS_setpriority,
    SYS_setregid,
    SYS_setresgid,
    SYS_setresuid,
    SYS_setreuid,
    SYS_settimeofday,
    SYS_setuid,
    SYS_swapoff,
    SYS_swapon,
    SYS_syslog,
    SYS_sysfs,
    SYS_umount2,
    SYS_uselib,
    SYS_userfaultfd,
    SYS_ustat,
    SYS_vhangup,
    // Process groups, sessions, timers and accounting racewatch never asks about.
    SYS_alarm,
    SYS_getitimer,
    SYS_getpgid,
    SYS_getpgrp,
    SYS_getppid,
    SYS_getsid,
    SYS_pause,
    SYS_setitimer,
    SYS_setpgid,
    SYS_setsid,
    SYS_sysinfo,
    SYS_times,
    // Asked once at start-up, before the program can install a filter (sys::identity::note_node_name).
    SYS_uname,
    SYS_getegid,
    SYS_getgid,
    SYS_getgroups,
    SYS_getresgid,
    SYS_getresuid,
    SYS_kcmp,
    SYS_clock_getres,
    SYS_timer_create,
    SYS_timer_delete,
    SYS_timer_getoverrun,
    SYS_timer_gettime,
    SYS_timer_settime,
    SYS_timerfd_create,
    SYS_timerfd_gettime,
    SYS_timerfd_settime,
    // Scheduling and memory policy (racewatch reads a thread's affinity through `pthread_getattr_np`,
    // so `sched_getaffinity` is not here).
    SYS_sched_get_priority_max,
    SYS_sched_get_priority_min,
    SYS_sched_getattr,
    SYS_sched_getparam,
    SYS_sched_rr_get_interval,
    SYS_sched_setaffinity,
    SYS_sched_setattr,
    SYS_sched_setparam,
    SYS_sched_setscheduler,
    SYS_mlock,
    SYS_mlock2,
    SYS_msync,
    SYS_remap_file_pages,
    SYS_pkey_alloc,
    SYS_pkey_free,
    SYS_pkey_mprotect,
    SYS_process_madvise,
    SYS_memfd_secret,
    SYS_modify_ldt,
    SYS_futex_waitv,
    // Inter-process communication and event descriptors: racewatch makes no pipe, queue or event.
    SYS_eventfd,
    SYS_eventfd2,
    SYS_epoll_create,
    SYS_epoll_create1,
    SYS_epoll_ctl,
    SYS_epoll_pwait2,
    SYS_epoll_wait,
    SYS_inotify_add_watch,
    SYS_inotify_init,
    SYS_inotify_init1,
    SYS_inotify_rm_watch,
    SYS_fanotify_mark,
    SYS_io_cancel,
    SYS_io_destroy,
    SYS_io_getevents,
    SYS_io_setup,
    SYS_io_submit,
    SYS_mq_getsetattr,
    SYS_mq_notify,
    SYS_mq_open,
    SYS_mq_timedreceive,
    SYS_mq_timedsend,
    SYS_mq_unlink,
    SYS_msgctl,
    SYS_msgget,
    SYS_msgrcv,
    SYS_msgsnd,
    SYS_semctl,
    SYS_semget,
    SYS_semop,
    SYS_semtimedop,
    SYS_shmat,
    SYS_shmctl,
    SYS_shmdt,
    SYS_shmget,
    SYS_pipe,
    SYS_pipe2,
    SYS_select,
    SYS_pselect6,
    SYS_signalfd,
    SYS_signalfd4,
    SYS_fork,
    SYS_vfork,
    SYS_waitid,
    // Files: racewatch reads, writes its logs (`openat`, `renameat`, `unlinkat`, `mkdirat`) and maps;
    // it changes no file's metadata, links, size or place, and copies nothing between descriptors
    // (`fchown`: see above).
    // (`access` and `faccessat` are not here: glibc's `realpath` may ask them.)
    SYS_chdir,
    SYS_chmod,
    SYS_chown,
    SYS_copy_file_range,
    SYS_creat,
    SYS_fadvise64,
    SYS_fallocate,
    SYS_fchdir,
    SYS_fchmod,
    SYS_fchmodat,
    SYS_fchown,
    SYS_fchownat,
    SYS_fdatasync,
    SYS_fgetxattr,
    SYS_flistxattr,
    SYS_flock,
    SYS_fremovexattr,
    SYS_fsetxattr,
    SYS_fsync,
    SYS_ftruncate,
    SYS_futimesat,
    SYS_getdents,
    SYS_getxattr,
    SYS_lchown,
    SYS_lgetxattr,
    SYS_link,
    SYS_linkat,
    SYS_listxattr,
    SYS_llistxattr,
    SYS_lremovexattr,
    SYS_lsetxattr,
    SYS_mkdir,
    SYS_mknod,
    SYS_mknodat,
    SYS_openat2,
    SYS_preadv,
    SYS_preadv2,
    SYS_pwrite64,
    SYS_pwritev,
    SYS_pwritev2,
    SYS_readahead,
    SYS_readv,
    SYS_removexattr,
    SYS_rename,
    SYS_renameat2,
    SYS_rmdir,
    SYS_sendfile,
    SYS_setxattr,
    SYS_splice,
    SYS_statfs,
    SYS_symlink,
    SYS_symlinkat,
    SYS_sync,
    SYS_sync_file_range,
    SYS_syncfs,
    SYS_tee,
    SYS_truncate,
    SYS_umask,
    SYS_unlink,
    SYS_utime,
    SYS_utimensat,
    SYS_utimes,
    SYS_vmsplice,
    SYS_landlock_add_rule,
    SYS_landlock_create_ruleset,
    SYS_landlock_restrict_self,
    // Obsolete or never implemented on x86-64 (the kernel answers `ENOSYS`), and the I/O priority and
    // memory policy calls.
    SYS__sysctl,
    SYS_afs_syscall,
    SYS_create_module,
    SYS_epoll_ctl_old,
    SYS_epoll_wait_old,
    SYS_get_kernel_syms,
    SYS_get_mempolicy,
    SYS_get_thread_area,
    SYS_getpmsg,
    SYS_ioprio_get,
    SYS_ioprio_set,
    SYS_nfsservctl,
    SYS_putpmsg,
    SYS_query_module,
    SYS_security,
    SYS_set_mempolicy_home_node,
    SYS_set_thread_area,
    SYS_tuxcall,
    SYS_vserver,
    // The network: racewatch opens no socket.
    SYS_accept,
    SYS_accept4,
    SYS_bind,
    SYS_connect,
    SYS_getpeername,
    SYS_getsockname,
    SYS_getsockopt,
    SYS_listen,
    SYS_recvfrom,
    SYS_recvmmsg,
    SYS_recvmsg,
    SYS_sendmmsg,
    SYS_sendmsg,
    SYS_sendto,
    SYS_setsockopt,
    SYS_shutdown,
    SYS_socket,
    SYS_socketpair,
];

/// The `clone` flags of a thread glibc's `pthread_create` starts when `clone3` is refused with `ENOSYS`
/// (racewatch's own threads): `CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SYSVSEM | CLONE_SIGHAND |
/// CLONE_THREAD | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID`.
const GLIBC_THREAD_CLONE_FLAGS: u64 = 0x003d_0f00;

/// Arguments racewatch's own calls always pass as one of a few constants: `(call, argument index,
/// values)`. A filter may look at these (a sandbox's rule on `ioctl(TIOCSTI)`, on `clone` without
/// `CLONE_THREAD`); it is run once per value. Every other argument is unknown: a filter that reads one
/// for a call racewatch makes is not judged to leave it alone.
const KNOWN_ARGUMENTS: &[(i64, usize, &[u64])] = &[
    (
        libc::SYS_ioctl,
        1,
        &[
            crate::sys::perf::PERF_EVENT_IOC_ENABLE,
            crate::sys::perf::PERF_EVENT_IOC_DISABLE,
            crate::sys::perf::PERF_EVENT_IOC_MODIFY_ATTRIBUTES,
        ],
    ),
    (libc::SYS_clone, 0, &[GLIBC_THREAD_CLONE_FLAGS, crate::sys::bystander::HELPER_CLONE_FLAGS]),
];

/// `SECCOMP_RET_ERRNO` with `ENOSYS`: for `clone3`, glibc then starts the thread with `clone` (sandboxes
/// answer `clone3` so because they cannot read its arguments).
const RET_ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32;

/// Whether `program` lets every system call racewatch may make through, with any arguments racewatch
/// may pass: see the module documentation.
pub fn leaves_racewatch_alone(program: &[Insn]) -> bool {
    if program.is_empty() || program.len() > MAX_INSNS {
        return false;
    }
    (0..NR_END).filter(|&nr| !NEVER.iter().any(|&(_, never)| never == i64::from(nr))).all(|nr| {
        let allowed = |args: &[Option<u64>; 6]| {
            run(program, nr, ARCH_X86_64, args).is_some_and(|answer| {
                answer & RET_ACTION_FULL == RET_ALLOW || (i64::from(nr) == libc::SYS_clone3 && answer == RET_ENOSYS)
            })
        };
        match KNOWN_ARGUMENTS.iter().find(|&&(call, _, _)| call == i64::from(nr)) {
            Some(&(_, index, values)) => values.iter().all(|&value| {
                let mut args = [None; 6];
                args[index] = Some(value);
                allowed(&args)
            }),
            None => allowed(&[None; 6]),
        }
    })
}

/// Whether installing the filter the program passes at `fprog` (its `struct sock_fprog`) leaves
/// racewatch alone: the filter does ([`leaves_racewatch_alone`]), or the kernel will refuse the call and
/// install nothing: a program it cannot read (`EFAULT`; libseccomp probes each flag with a null one
/// before it loads a filter) or of a length it does not take (`EINVAL`).
pub fn installing_leaves_racewatch_alone(fprog: u64) -> bool {
    match read_program(fprog) {
        Read::Refused => true,
        Read::Program(program) => leaves_racewatch_alone(&program),
        Read::NoMemory => false,
    }
}

/// What was found at a `struct sock_fprog`'s address.
enum Read {
    Program(Vec<Insn>),
    /// The kernel refuses it: unreadable, or an empty or too long program.
    Refused,
    /// racewatch could not get the memory to read it into.
    NoMemory,
}

/// The instructions of the `struct sock_fprog` at `fprog` (`len`, then the address of the
/// instructions), read without faulting.
fn read_program(fprog: u64) -> Read {
    let mut head = [0u8; 16];
    if mem::read_into(fprog, &mut head) != head.len() {
        return Read::Refused;
    }
    let len = usize::from(u16::from_le_bytes([head[0], head[1]]));
    let at = u64::from_le_bytes([head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15]]);
    if len == 0 || len > MAX_INSNS {
        return Read::Refused;
    }
    let mut program = Vec::new();
    if program.try_reserve_exact(len).is_err() {
        return Read::NoMemory;
    }
    let mut bytes = [0u8; 8 * 64];
    for first in (0..len).step_by(64) {
        let chunk = &mut bytes[..8 * (len - first).min(64)];
        if at.checked_add(8 * first as u64).is_none_or(|addr| mem::read_into(addr, chunk) != chunk.len()) {
            return Read::Refused;
        }
        program.extend(chunk.chunks_exact(8).map(|insn| Insn::from_bytes(insn.try_into().unwrap_or_default())));
    }
    Read::Program(program)
}

/// The filter's answer for a call `nr` of `arch` with the arguments `args` (`None`: unknown); `None` when
/// it looks at what is unknown (the instruction pointer, an unknown argument) or is not a program the
/// kernel would take.
fn run(program: &[Insn], nr: u32, arch: u32, args: &[Option<u64>; 6]) -> Option<u32> {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    // Jumps go forward only, so a program runs at most its length.
    for _ in 0..program.len() {
        let insn = *program.get(pc)?;
        pc += 1;
        let k = insn.k;
        match insn.code {
            // Loads: A or X from the data (`nr`, `arch` and the known arguments' halves, little-endian),
            // its length, a constant, memory.
            0x20 => {
                a = match k {
                    0 => nr,
                    4 => arch,
                    16..=63 if k % 4 == 0 => {
                        let value = (*args.get((k as usize - 16) / 8)?)?;
                        if k % 8 == 0 {
                            value as u32
                        } else {
                            (value >> 32) as u32
                        }
                    }
                    _ => return None,
                }
            }
            0x80 => a = DATA_LEN,
            0x81 => x = DATA_LEN,
            0x00 => a = k,
            0x01 => x = k,
            0x60 => a = *mem.get(k as usize)?,
            0x61 => x = *mem.get(k as usize)?,
            0x02 => *mem.get_mut(k as usize)? = a,
            0x03 => *mem.get_mut(k as usize)? = x,
            // Arithmetic on A, with K or X.
            code if code & 0x07 == 0x04 => {
                let operand = if code & 0x08 != 0 { x } else { k };
                a = match code & 0xf0 {
                    0x00 => a.wrapping_add(operand),
                    0x10 => a.wrapping_sub(operand),
                    0x20 => a.wrapping_mul(operand),
                    0x30 => a.checked_div(operand)?,
                    0x40 => a | operand,
                    0x50 => a & operand,
                    0x60 => a.checked_shl(operand).unwrap_or(0),
                    0x70 => a.checked_shr(operand).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => a.checked_rem(operand)?,
                    0xa0 => a ^ operand,
                    _ => return None,
                };
            }
            // Jumps: always (by K), or on a comparison of A with K or X.
            0x05 => pc = pc.checked_add(k as usize)?,
            code if code & 0x07 == 0x05 => {
                let operand = if code & 0x08 != 0 { x } else { k };
                let taken = match code & 0xf0 {
                    0x10 => a == operand,
                    0x20 => a > operand,
                    0x30 => a >= operand,
                    0x40 => a & operand != 0,
                    _ => return None,
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            0x06 => return Some(k),
            0x16 => return Some(a),
            0x07 => x = a,
            0x87 => a = x,
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(code: u16, k: u32) -> Insn {
        Insn { code, jt: 0, jf: 0, k }
    }
    fn jeq(k: u64, jt: u8, jf: u8) -> Insn {
        Insn { code: 0x15, jt, jf, k: k as u32 }
    }
    const LD_NR: u16 = 0x20;
    const RET: u16 = 0x06;
    const KILL_PROCESS: u32 = 0x8000_0000;
    const TRAP: u32 = 0x0003_0000;
    const ERRNO: u32 = 0x0005_0000;

    /// The shape libseccomp gives a deny-list: the architecture, the x32 numbers, then one rule a call.
    fn deny_list(denied: &[(i64, u32)]) -> Vec<Insn> {
        let mut p = vec![stmt(LD_NR, 4), jeq(u64::from(ARCH_X86_64), 1, 0), stmt(RET, KILL_PROCESS), stmt(LD_NR, 0)];
        p.push(Insn { code: 0x35, jt: 0, jf: 1, k: 0x4000_0000 }); // jge: an x32 number
        p.push(stmt(RET, KILL_PROCESS));
        for &(nr, action) in denied {
            p.push(jeq(nr as u64, 0, 1));
            p.push(stmt(RET, action));
        }
        p.push(stmt(RET, RET_ALLOW));
        p
    }

    #[test]
    fn a_deny_list_of_calls_racewatch_never_makes_leaves_it_alone() {
        let filter = deny_list(&[
            (libc::SYS_getpriority, ERRNO | libc::ENOTTY as u32),
            (libc::SYS_sethostname, TRAP),
            (libc::SYS_acct, KILL_PROCESS),
            (libc::SYS_mount, ERRNO | 1),
            (libc::SYS_ptrace, KILL_PROCESS),
            (libc::SYS_socket, ERRNO | libc::EAFNOSUPPORT as u32),
        ]);
        assert!(leaves_racewatch_alone(&filter));
    }

    #[test]
    fn a_filter_denying_any_call_racewatch_makes_does_not() {
        for nr in [libc::SYS_perf_event_open, libc::SYS_ioctl, libc::SYS_mmap, libc::SYS_clone3, libc::SYS_openat] {
            assert!(!leaves_racewatch_alone(&deny_list(&[(nr, ERRNO | 1)])), "{nr}");
        }
    }

    #[test]
    fn an_allow_list_does_not() {
        let mut p = vec![stmt(LD_NR, 0)];
        for nr in [libc::SYS_read, libc::SYS_write, libc::SYS_exit_group] {
            p.push(jeq(nr as u64, 0, 1));
            p.push(stmt(RET, RET_ALLOW));
        }
        p.push(stmt(RET, KILL_PROCESS));
        assert!(!leaves_racewatch_alone(&p));
    }

    /// `ioctl` answered `answer` when its argument `index` (low half) is `value`, allowed otherwise.
    fn ioctl_rule(index: u32, value: u32, answer: u32) -> Vec<Insn> {
        vec![
            stmt(LD_NR, 0),
            jeq(libc::SYS_ioctl as u64, 0, 3),
            stmt(LD_NR, 16 + 8 * index),
            jeq(u64::from(value), 0, 1),
            stmt(RET, answer),
            stmt(RET, RET_ALLOW),
        ]
    }

    #[test]
    fn a_rule_on_an_argument_racewatch_does_not_fix_does_not() {
        // ioctl on descriptor 3 refused: racewatch's descriptors are not known to the judgement.
        assert!(!leaves_racewatch_alone(&ioctl_rule(0, 3, ERRNO | 1)));
        // The same rule on a call racewatch never makes is fine.
        let mut q = ioctl_rule(0, 3, ERRNO | 1);
        q[1] = jeq(libc::SYS_setsockopt as u64, 0, 3);
        assert!(leaves_racewatch_alone(&q));
    }

    #[test]
    fn a_rule_on_requests_racewatch_never_makes_leaves_it_alone() {
        // A sandbox's rule against terminal injection: ioctl(TIOCSTI) refused, in its low half.
        assert!(leaves_racewatch_alone(&ioctl_rule(1, libc::TIOCSTI as u32, ERRNO | 1)));
        // ...and one refusing a request racewatch makes.
        let enable = crate::sys::perf::PERF_EVENT_IOC_ENABLE as u32;
        assert!(!leaves_racewatch_alone(&ioctl_rule(1, enable, ERRNO | 1)));
        // A rule on the high half of the request: racewatch's requests have none.
        assert!(leaves_racewatch_alone(&[
            stmt(LD_NR, 0),
            jeq(libc::SYS_ioctl as u64, 0, 3),
            stmt(LD_NR, 28),
            jeq(0, 1, 0),
            stmt(RET, KILL_PROCESS),
            stmt(RET, RET_ALLOW),
        ]));
    }

    /// QEMU's `-sandbox on` kind: `clone` without `CLONE_THREAD` trapped (no new processes), `clone3`
    /// answered `ENOSYS` (its arguments cannot be read), then a deny-list.
    fn no_new_processes(clone3_answer: u32) -> Vec<Insn> {
        let mut p = vec![
            stmt(LD_NR, 4),
            jeq(u64::from(ARCH_X86_64), 1, 0),
            stmt(RET, KILL_PROCESS),
            stmt(LD_NR, 0),
            jeq(libc::SYS_clone as u64, 0, 4),
            stmt(LD_NR, 16),
            Insn { code: 0x45, jt: 1, jf: 0, k: libc::CLONE_THREAD as u32 }, // jset
            stmt(RET, TRAP),
            stmt(RET, RET_ALLOW),
            jeq(libc::SYS_clone3 as u64, 0, 1),
            stmt(RET, clone3_answer),
        ];
        p.extend(deny_list(&[(libc::SYS_fork, TRAP), (libc::SYS_setpriority, ERRNO | 1)]).split_off(3));
        p
    }

    #[test]
    fn clone_for_threads_only_and_clone3_refused_with_enosys_leave_it_alone() {
        // racewatch's threads (glibc falls back to `clone` with a thread's flags) and its helper thread.
        assert!(leaves_racewatch_alone(&no_new_processes(ERRNO | libc::ENOSYS as u32)));
        // Refused otherwise, glibc would not fall back: racewatch could start no thread.
        assert!(!leaves_racewatch_alone(&no_new_processes(ERRNO | libc::EPERM as u32)));
        assert!(!leaves_racewatch_alone(&no_new_processes(TRAP)));
        // A rule that refuses a thread's flags (CLONE_SETTLS) reaches racewatch.
        let mut p = no_new_processes(ERRNO | libc::ENOSYS as u32);
        p[6].k = libc::CLONE_SETTLS as u32;
        p[6].jt = 0;
        p[6].jf = 1;
        assert!(!leaves_racewatch_alone(&p));
    }

    #[test]
    fn the_arguments_racewatch_fixes_are_all_it_passes() {
        // ioctl: the perf requests racewatch's sources name are the known ones.
        let mut requests = std::collections::BTreeSet::new();
        let mut clones = Vec::new();
        for (path, text) in crate::source_checks::runtime_sources() {
            if path.ends_with("seccomp_filter.rs") || path.ends_with("source_checks.rs") {
                continue;
            }
            for (i, _) in text.match_indices("PERF_EVENT_IOC_") {
                let rest = &text[i..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                requests.insert(rest[..end].to_string());
            }
            if text.contains("libc::SYS_clone,") || text.contains("libc::SYS_clone =>") {
                clones.push(path.file_name().unwrap_or_default().to_string_lossy().into_owned());
            }
        }
        let known = ["PERF_EVENT_IOC_DISABLE", "PERF_EVENT_IOC_ENABLE", "PERF_EVENT_IOC_MODIFY_ATTRIBUTES"];
        assert_eq!(requests.into_iter().collect::<Vec<_>>(), known);
        // clone: the helper thread's, and the inherited-filter probe's (at start-up, before the program
        // can install a filter).
        clones.sort();
        assert_eq!(clones, ["bystander.rs", "seccomp_probe.rs"]);
    }

    #[test]
    fn programs_the_kernel_would_refuse_do_not() {
        assert!(!leaves_racewatch_alone(&[]));
        // No return at the end, a jump past the end, an unknown instruction, a division by zero in X.
        assert!(!leaves_racewatch_alone(&[stmt(LD_NR, 0)]));
        assert!(!leaves_racewatch_alone(&[Insn { code: 0x05, jt: 0, jf: 0, k: 5 }, stmt(RET, RET_ALLOW)]));
        assert!(!leaves_racewatch_alone(&[stmt(0xff, 0), stmt(RET, RET_ALLOW)]));
        assert!(!leaves_racewatch_alone(&[stmt(0x3c, 0), stmt(RET, RET_ALLOW)]));
        // Everything allowed, whichever way it is said: RET A after arithmetic and memory.
        let roundabout =
            [stmt(0x00, 0x7fff), stmt(0x64, 16), stmt(0x02, 3), stmt(0x61, 3), stmt(0x87, 0), stmt(0x16, 0)];
        assert!(leaves_racewatch_alone(&roundabout));
    }

    /// A `struct sock_fprog` as the program passes it.
    #[repr(C)]
    struct Fprog {
        len: u16,
        filter: *const [u8; 8],
    }

    fn installing(program: &[Insn]) -> bool {
        let bytes: Vec<[u8; 8]> = program
            .iter()
            .map(|i| {
                let mut b = [0u8; 8];
                b[..2].copy_from_slice(&i.code.to_le_bytes());
                (b[2], b[3]) = (i.jt, i.jf);
                b[4..].copy_from_slice(&i.k.to_le_bytes());
                b
            })
            .collect();
        let fprog = Fprog { len: bytes.len() as u16, filter: bytes.as_ptr() };
        installing_leaves_racewatch_alone(&fprog as *const Fprog as u64)
    }

    #[test]
    fn the_program_is_read_from_memory_and_one_the_kernel_refuses_installs_nothing() {
        assert!(installing(&deny_list(&[(libc::SYS_acct, KILL_PROCESS)])));
        assert!(!installing(&deny_list(&[(libc::SYS_ioctl, KILL_PROCESS)])));
        // libseccomp's probes: no program at all; and an empty one.
        assert!(installing_leaves_racewatch_alone(0));
        assert!(installing(&[]));
    }

    #[test]
    fn the_calls_racewatch_never_makes_are_not_named_in_its_code() {
        // Every `SYS_*` the runtime's sources name, outside this file: the calls it makes, and a few it
        // only recognises in the program's code (hand_on.rs: the socket calls a handler ends with
        // `EINTR`, and the waits it recognises there; intercept.rs: the program's raw `signalfd`s,
        // `epoll_ctl`s and `openat2`s; racewatch makes none of those).
        let recognised = [
            "SYS_epoll_ctl",
            "SYS_openat2",
            "SYS_signalfd",
            "SYS_signalfd4",
            "SYS_accept",
            "SYS_accept4",
            "SYS_connect",
            "SYS_recvfrom",
            "SYS_recvmsg",
            "SYS_sendmsg",
            "SYS_sendto",
            "SYS_epoll_pwait2",
            "SYS_epoll_wait",
            "SYS_pause",
            "SYS_pselect6",
            "SYS_readv",
            "SYS_select",
            "SYS_waitid",
        ];
        // Made only by a thread under no filter at all, before it changes its user (handover.rs); or
        // once at start-up, before the program runs (identity.rs, probed for an inherited filter).
        let unfiltered_only = ["SYS_fchown", "SYS_uname"];
        let mut named = std::collections::BTreeSet::new();
        let mut called = String::new();
        for (path, text) in crate::source_checks::runtime_sources() {
            if path.ends_with("seccomp_filter.rs") || path.ends_with("source_checks.rs") {
                continue;
            }
            called.push_str(&text);
            for (i, _) in text.match_indices("SYS_") {
                let rest = &text[i..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                named.insert(rest[..end].to_string());
            }
        }
        assert!(named.contains("SYS_perf_event_open") && named.contains("SYS_ioctl"), "{named:?}");
        assert_eq!(called.matches("libc::uname(").count(), 1, "uname is asked in one place, at start-up");
        for (name, _) in NEVER {
            let known = recognised.contains(name) || unfiltered_only.contains(name);
            assert!(!named.contains(*name) || known, "racewatch's code names {name}");
            // Nor through libc's function of the same name.
            let function = format!("libc::{}(", &name["SYS_".len()..]);
            assert!(!called.contains(&function) || known, "racewatch's code calls {function}");
        }
    }
}
