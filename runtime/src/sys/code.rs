//! The executable segments of the loaded modules, as mapped (for [`crate::sandbox_scan`]).

use std::ffi::{c_int, c_void, CStr};

/// One loaded module's executable, readable `PT_LOAD` segments.
pub struct CodeModule<'a> {
    /// The loader's name for it (empty for the main program).
    pub name: String,
    /// Its load bias: a segment's run-time address minus its `p_vaddr`.
    pub bias: u64,
    /// Run-time start address and bytes of each executable segment.
    pub segments: Vec<(u64, &'a [u8])>,
}

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const PF_R: u32 = 4;

/// How many modules the loader has loaded and unloaded so far (`dlpi_adds`, `dlpi_subs`): while it
/// stays the same, no module came or went (`None`: a loader without the counts). Takes the loader's
/// lock for one callback; allocates nothing.
pub fn load_generation() -> Option<(u64, u64)> {
    extern "C" fn first(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the pair passed below, alive for the whole walk; `info` is the loader's,
        // valid during this callback, with `size` bytes of it filled in.
        let (out, info) = unsafe { (&mut *(data as *mut Option<(u64, u64)>), &*info) };
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + std::mem::size_of::<u64>() {
            *out = Some((info.dlpi_adds, info.dlpi_subs));
        }
        1 // The first module is enough: every one carries the counts.
    }
    let mut counts: Option<(u64, u64)> = None;
    // SAFETY: the callback only reads the loader's record into `counts`.
    super::fork::walking_modules(|| unsafe {
        libc::dl_iterate_phdr(Some(first), (&mut counts as *mut Option<(u64, u64)>).cast())
    });
    counts
}

/// The loader's `_r_debug` (its list of loaded modules), found by [`loaded_fingerprint`]'s first call.
static R_DEBUG: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A fingerprint of the loader's list of loaded modules (`_r_debug`'s chain of link maps: which records,
/// how many), read without the loader's lock and without faulting: it changes when a module is loaded
/// or unloaded (and may, read while the loader edits the list, when none was). Async-signal-safe after
/// a first call outside a signal handler (which looks `_r_debug` up).
pub fn loaded_fingerprint() -> u64 {
    use std::sync::atomic::Ordering;
    let mut r_debug = R_DEBUG.load(Ordering::Acquire);
    if r_debug == 0 {
        r_debug = super::dl::global_symbol(c"_r_debug").unwrap_or(0);
        R_DEBUG.store(r_debug, Ordering::Release);
    }
    if r_debug == 0 {
        return 0;
    }
    // struct r_debug { int r_version; struct link_map *r_map; ... }; struct link_map { l_addr, l_name,
    // l_ld, l_next, l_prev, ... }.
    let mut fingerprint: u64 = 0xcbf2_9ce4_8422_2325;
    let mut map = super::mem::read_u64(r_debug + 8).unwrap_or(0);
    for _ in 0..4096 {
        if map == 0 {
            break;
        }
        fingerprint = (fingerprint ^ map).wrapping_mul(0x0100_0000_01b3);
        map = super::mem::read_u64(map + 24).unwrap_or(0);
    }
    fingerprint
}

/// Calls `f` with every loaded module and its executable segments, in the loader's order (the index
/// counts from 0, the main program). It runs inside `dl_iterate_phdr`, under the loader's lock: no
/// module can be unmapped meanwhile, and `f` must not load or unload one.
pub fn for_each(f: &mut dyn FnMut(usize, &CodeModule<'_>)) {
    struct Walk<'f> {
        f: &'f mut dyn FnMut(usize, &CodeModule<'_>),
        index: usize,
    }
    extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `Walk` passed below, alive for the whole walk; `info` and its
        // program headers are the loader's, valid during this callback.
        let (walk, info) = unsafe { (&mut *(data as *mut Walk<'_>), &*info) };
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string of the loader's.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
        };
        let mut segments = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != PT_LOAD || ph.p_flags & (PF_X | PF_R) != (PF_X | PF_R) || ph.p_memsz == 0 {
                continue;
            }
            let start = info.dlpi_addr.wrapping_add(ph.p_vaddr);
            let len = ph.p_filesz.min(ph.p_memsz) as usize;
            // SAFETY: a readable PT_LOAD segment of a loaded module is mapped at `start` for
            // `p_filesz` bytes; the loader's lock, held during this callback, keeps it loaded.
            let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
            segments.push((start, bytes));
        }
        (walk.f)(walk.index, &CodeModule { name, bias: info.dlpi_addr, segments });
        walk.index += 1;
        0
    }
    let mut walk = Walk { f, index: 0 };
    // SAFETY: the callback only reads the loader's records and calls `f`.
    super::fork::walking_modules(|| unsafe { libc::dl_iterate_phdr(Some(visit), (&mut walk as *mut Walk<'_>).cast()) });
}
