//! Who this process is, for a fleet's reports: the host's name and when the process started.

/// The node name, asked of the kernel once at start-up ([`note_node_name`]).
static NODE_NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Asks the kernel for its node name, once: at start-up, before the program can install a seccomp
/// filter that denies `uname` (racewatch never makes the call afterwards).
pub fn note_node_name() {
    NODE_NAME.get_or_init(ask_node_name);
}

/// The kernel's node name (`uname -n`) as it was at start-up, or `None` (not asked, or unknown).
pub fn node_name() -> Option<String> {
    NODE_NAME.get().cloned().flatten()
}

fn ask_node_name() -> Option<String> {
    // SAFETY: `uname` fills the zeroed struct it is given; its fields are NUL-terminated arrays.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer to a utsname.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = uts.nodename.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8(bytes).ok().filter(|name| !name.is_empty())
}

/// The path the main program was started with (`AT_EXECFN`: what `execve` was given, relative to the
/// working directory the process started in), or `None`.
pub fn exec_path() -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: getauxval reads the auxiliary vector the kernel left; it takes and returns plain integers.
    let at = unsafe { libc::getauxval(libc::AT_EXECFN) };
    if at == 0 {
        return None;
    }
    // SAFETY: AT_EXECFN points to the NUL-terminated path the kernel placed on the initial stack, which
    // lives as long as the process.
    let name = unsafe { std::ffi::CStr::from_ptr(at as *const libc::c_char) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// When this process started, in seconds since the epoch: `/proc/self/stat`'s start time (clock ticks
/// since boot) plus the boot time, as the clocks give it (the real-time clock less the time since boot:
/// the kernel's `btime` of `/proc/stat`, without reading that file, whose text grows with the CPUs and
/// took most of the 0.3 ms this cost in the program's first `pthread_create`).
pub fn start_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // SAFETY: sysconf takes a plain constant.
    let ticks_per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&t| t > 0)?;
    start_time_from(&stat, boot_time()?, ticks_per_second)
}

/// When the machine booted, in seconds since the epoch.
fn boot_time() -> Option<u64> {
    let ns = |clock| {
        let at = super::thread::clock(clock);
        at.tv_sec as i128 * 1_000_000_000 + at.tv_nsec as i128
    };
    let real = ns(libc::CLOCK_REALTIME);
    let since_boot = ns(libc::CLOCK_BOOTTIME);
    u64::try_from((real - since_boot).div_euclid(1_000_000_000)).ok()
}

/// [`start_time`] from `/proc/self/stat`'s text and the boot time. The command name in `stat` may hold
/// spaces and parentheses: fields are counted after its last `)`.
fn start_time_from(stat: &str, boot: u64, ticks_per_second: u64) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 22 of the whole line is the 20th after the name (state is field 3).
    let ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    Some(boot + ticks / ticks_per_second)
}

/// Seconds since the epoch now. Async-signal-safe (`clock_gettime`, no allocation).
pub fn now() -> u64 {
    super::thread::clock(libc::CLOCK_REALTIME).tv_sec.max(0) as u64
}

/// The C library's version, as `gnu_get_libc_version` gives it (`2.36`); empty when unknown.
pub fn glibc_version() -> String {
    extern "C" {
        fn gnu_get_libc_version() -> *const std::ffi::c_char;
    }
    // SAFETY: glibc's function returns a static NUL-terminated string.
    let version = unsafe { gnu_get_libc_version() };
    if version.is_null() {
        return String::new();
    }
    // SAFETY: non-null: a static NUL-terminated string of glibc's.
    unsafe { std::ffi::CStr::from_ptr(version) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_counts_fields_after_the_command_name() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(start_time_from(stat, 1_700_000_000, 100), Some(1_700_000_123));
        assert_eq!(start_time_from("garbage", 1_700_000_000, 100), None);
    }

    #[test]
    fn boot_time_is_the_kernels_btime() {
        let text = std::fs::read_to_string("/proc/stat").unwrap();
        let btime: u64 = text.lines().find_map(|l| l.strip_prefix("btime ")).unwrap().trim().parse().unwrap();
        let ours = boot_time().unwrap();
        assert!(ours.abs_diff(btime) <= 1, "{ours} vs /proc/stat's {btime}");
    }

    #[test]
    fn this_process_started_in_the_past_on_a_named_host() {
        let start = start_time().expect("start time");
        assert!(start <= now() && start > now() - 24 * 3600 * 365, "{start}");
        note_node_name();
        assert!(node_name().is_some());
    }
}
