//! The loaded modules' unwind tables (`.eh_frame_hdr` and the `.eh_frame` it points into), as byte
//! slices of mapped memory for the CFI unwinder, which runs in signal handlers.
//!
//! The table is built outside signal handlers (`dl_iterate_phdr`: detector start-up, and the reporter
//! thread when an unwind met a PC of a module loaded since) and published in a [`SnapshotCell`], so
//! readers never block or allocate. A module's mapped bytes stay valid while a reader holds the
//! snapshot because the interposed `dlclose` first publishes an empty table (which waits for every
//! reader of the old one to leave; if one does not leave in time, the module is not unloaded) and
//! only then lets the loader unmap anything; afterwards the table is rebuilt, and a rebuild from a
//! list taken while a `dlclose` ran is thrown away. Unloads that bypass `dlclose` (glibc's own, of
//! gconv and NSS modules) are caught by a non-faulting check of each module's `.eh_frame_hdr` before
//! it is read.

use super::snapshot::SnapshotCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One loaded module's unwind data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Module {
    /// The first bytes of its `.eh_frame_hdr`, as read when the table was built: a module unloaded
    /// behind the interposed `dlclose` (glibc's internal unloads) and replaced by another at the same
    /// address does not match.
    fingerprint: [u8; 16],
    /// Run-time address range of its loaded segments.
    lo: u64,
    hi: u64,
    /// The read-only segment holding `.eh_frame_hdr` (and, in every linker's layout, `.eh_frame`).
    segment: u64,
    segment_len: u64,
    /// Run-time address of `.eh_frame_hdr`.
    hdr: u64,
}

/// What the unwinder gets for a module: its unwind segment's bytes and where they live.
pub struct UnwindSegment<'a> {
    /// The mapped bytes of the segment holding `.eh_frame_hdr`.
    pub bytes: &'a [u8],
    /// Run-time address of `bytes[0]`.
    pub addr: u64,
    /// Run-time address of `.eh_frame_hdr` (inside `bytes`).
    pub hdr: u64,
}

static EMPTY: Vec<Module> = Vec::new();
static TABLE: SnapshotCell<Vec<Module>> = SnapshotCell::new(&EMPTY);
/// Set by an unwind that met a PC outside every known module; the reporter rebuilds the table.
static STALE: AtomicBool = AtomicBool::new(false);
/// Whether the table is in use at all (the detector started).
static IN_USE: AtomicBool = AtomicBool::new(false);

const PT_LOAD: u32 = 1;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;

/// `dlclose` calls under way (the table must not be rebuilt from a list taken meanwhile), and how
/// many have finished (a list taken before one finished may still name its module).
static CLOSING: AtomicUsize = AtomicUsize::new(0);
static CLOSED: AtomicUsize = AtomicUsize::new(0);

/// Rebuilds the table from the loader's list, unless a `dlclose` ran or runs meanwhile (the table
/// then stays stale and a later call rebuilds it). Not for signal handlers.
pub fn refresh() {
    IN_USE.store(true, Ordering::Release);
    STALE.store(false, Ordering::Relaxed);
    let closed = CLOSED.load(Ordering::SeqCst);
    let modules = loaded_modules();
    let published =
        TABLE.replace_if(modules, || CLOSING.load(Ordering::SeqCst) == 0 && CLOSED.load(Ordering::SeqCst) == closed);
    if published.is_none() {
        STALE.store(true, Ordering::Relaxed);
    }
}

/// Rebuilds the table if an unwind asked for it. Not for signal handlers.
pub fn refresh_if_stale() {
    if STALE.load(Ordering::Relaxed) && IN_USE.load(Ordering::Acquire) {
        refresh();
    }
}

/// What [`suspend`] leaves to do.
pub struct Closing {
    /// A table was in use: rebuild it after the loader is done.
    pub rebuild: bool,
    /// Every reader of the old table left: the loader may unmap modules.
    pub safe: bool,
}

/// A `dlclose` begins: empties the table and waits for its readers. Call [`closed`] when the loader
/// is done (whether or not it ran).
pub fn suspend() -> Closing {
    CLOSING.fetch_add(1, Ordering::SeqCst);
    let rebuild = IN_USE.load(Ordering::Acquire);
    let safe = !rebuild || TABLE.replace_if(Vec::new(), || true) == Some(true);
    Closing { rebuild, safe }
}

/// The `dlclose` that [`suspend`] announced is over.
pub fn closed(closing: &Closing) {
    CLOSED.fetch_add(1, Ordering::SeqCst);
    CLOSING.fetch_sub(1, Ordering::SeqCst);
    if closing.rebuild {
        refresh();
    }
}

/// In a forked child: readers counted by the parent's other threads are gone.
pub fn forget_readers_after_fork() {
    TABLE.forget_readers_after_fork();
}

/// Runs `f` on the unwind segment of the module containing `pc`; `None` when no known module with
/// an `.eh_frame_hdr` contains it. Async-signal-safe: no lock, no allocation, no syscall.
pub fn with_segment<R>(pc: u64, f: impl FnOnce(&UnwindSegment<'_>) -> R) -> Option<R> {
    TABLE.read(|modules| {
        let at = modules.partition_point(|m| m.hi <= pc);
        let Some(module) = modules.get(at).filter(|m| m.lo <= pc) else {
            if IN_USE.load(Ordering::Relaxed) {
                STALE.store(true, Ordering::Relaxed);
            }
            return None;
        };
        // Still mapped, and still this module: a non-faulting look at both ends of the segment.
        let mut now = [0u8; 16];
        let mut tail = [0u8; 8];
        let end = module.segment + module.segment_len.saturating_sub(8);
        if super::mem::read_into(module.hdr, &mut now) != 16
            || now != module.fingerprint
            || super::mem::read_into(end, &mut tail) != 8
        {
            STALE.store(true, Ordering::Relaxed);
            return None;
        }
        // SAFETY: `segment..segment + segment_len` is a readable PT_LOAD segment of a module that the
        // loader reported, and it stays mapped while this reader holds the snapshot: `dlclose` (the
        // only way a module goes away) waits in `suspend` for readers of this table before unmapping.
        let bytes =
            unsafe { std::slice::from_raw_parts(module.segment as usize as *const u8, module.segment_len as usize) };
        Some(f(&UnwindSegment { bytes, addr: module.segment, hdr: module.hdr }))
    })
}

/// The runtime's own module, once found in the table: its unwind data stays mapped as long as this
/// code runs.
static OWN: std::sync::OnceLock<Module> = std::sync::OnceLock::new();

/// Runs `f` on the unwind segment of racewatch's own module when `pc` lies in that module; `None`
/// otherwise (or before the table first lists the module). No check of the mapping is needed: the
/// module holding this function cannot be unloaded under it. Not for signal handlers (the first call
/// looks the module up).
pub fn with_own_segment<R>(pc: u64, f: impl FnOnce(&UnwindSegment<'_>) -> R) -> Option<R> {
    let own = match OWN.get() {
        Some(own) => own,
        None => {
            let here = with_own_segment::<()> as fn(u64, fn(&UnwindSegment<'_>)) -> Option<()> as usize as u64;
            let found = TABLE.read(|modules| modules.iter().copied().find(|m| (m.lo..m.hi).contains(&here)))?;
            OWN.get_or_init(|| found)
        }
    };
    if !(own.lo..own.hi).contains(&pc) {
        return None;
    }
    // SAFETY: the PT_LOAD segment of the module holding this very function, which stays mapped while
    // the function can run (a `dlclose` of racewatch's library would unmap the caller too).
    let bytes = unsafe { std::slice::from_raw_parts(own.segment as usize as *const u8, own.segment_len as usize) };
    Some(f(&UnwindSegment { bytes, addr: own.segment, hdr: own.hdr }))
}

fn loaded_modules() -> Vec<Module> {
    let mut modules: Vec<Module> = Vec::new();
    // SAFETY: the callback only reads the `dl_phdr_info` the loader passes for the duration of the
    // call, and `data` is the `&mut Vec` above, alive for the whole iteration.
    super::fork::walking_modules(|| unsafe {
        libc::dl_iterate_phdr(Some(collect), (&mut modules as *mut Vec<Module>).cast())
    });
    modules.sort_by_key(|m| m.lo);
    modules
}

unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the loader passes a valid `info` for this call; `data` is the Vec given to
    // `dl_iterate_phdr` in `loaded_modules`.
    let (info, modules) = unsafe { (&*info, &mut *data.cast::<Vec<Module>>()) };
    if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        return 0;
    }
    // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers of a loaded module.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let bias = info.dlpi_addr;
    let loads = || headers.iter().filter(|h| h.p_type == PT_LOAD && h.p_memsz > 0);
    let (Some(lo), Some(hi)) = (
        loads().map(|h| bias.wrapping_add(h.p_vaddr)).min(),
        loads().map(|h| bias.wrapping_add(h.p_vaddr + h.p_memsz)).max(),
    ) else {
        return 0;
    };
    let Some(eh) = headers.iter().find(|h| h.p_type == PT_GNU_EH_FRAME) else { return 0 };
    let hdr = bias.wrapping_add(eh.p_vaddr);
    let Some(segment) =
        loads().find(|h| (bias.wrapping_add(h.p_vaddr)..bias.wrapping_add(h.p_vaddr + h.p_filesz)).contains(&hdr))
    else {
        return 0;
    };
    let start = bias.wrapping_add(segment.p_vaddr);
    let mut fingerprint = [0u8; 16];
    if super::mem::read_into(hdr, &mut fingerprint) != 16 {
        return 0;
    }
    modules.push(Module { fingerprint, lo, hi, segment: start, segment_len: segment.p_filesz, hdr });
    // The unwind tables (`.eh_frame_hdr`, `.eh_frame` and what follows them in the segment), read by the
    // handlers of every thread: faulted in here, in the thread that takes the table.
    super::prefault::readable(hdr as usize, (start + segment.p_filesz) as usize);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_code_has_an_unwind_segment_holding_its_header() {
        refresh();
        let pc = own_code_has_an_unwind_segment_holding_its_header as fn() as usize as u64;
        let found = with_segment(pc, |s| (s.addr, s.bytes.len() as u64, s.hdr)).expect("own module");
        assert!(found.0 <= found.2 && found.2 < found.0 + found.1, "{found:x?}");
        assert_eq!(with_segment(8, |_| ()), None);
        // The same segment, as the runtime's own module (linked into this test executable).
        assert_eq!(with_own_segment(pc, |s| (s.addr, s.bytes.len() as u64, s.hdr)), Some(found));
        assert_eq!(with_own_segment(8, |_| ()), None);
    }
}
