//! The loaded modules' unwind tables (`.eh_frame_hdr` and the `.eh_frame` it points into), as byte
//! slices of mapped memory for the CFI unwinder, which runs in signal handlers.
//!
//! The table is built outside signal handlers (`dl_iterate_phdr`: detector start-up, and the reporter
//! thread when an unwind met a PC of a module loaded since) and published in a [`SnapshotCell`], so
//! readers never block or allocate. A module's mapped bytes stay valid while a reader holds the
//! snapshot because the interposed `dlclose` first publishes an empty table (which waits for every
//! reader of the old one to leave) and only then lets the loader unmap anything; afterwards the table
//! is rebuilt.

use super::snapshot::SnapshotCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// One loaded module's unwind data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Module {
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

/// Rebuilds the table from the loader's list. Not for signal handlers.
pub fn refresh() {
    IN_USE.store(true, Ordering::Release);
    STALE.store(false, Ordering::Relaxed);
    TABLE.replace(loaded_modules());
}

/// Rebuilds the table if an unwind asked for it. Not for signal handlers.
pub fn refresh_if_stale() {
    if STALE.load(Ordering::Relaxed) && IN_USE.load(Ordering::Acquire) {
        refresh();
    }
}

/// Empties the table and waits for its readers: call before the loader may unmap a module.
/// Returns whether there was a table to rebuild afterwards.
pub fn suspend() -> bool {
    let in_use = IN_USE.load(Ordering::Acquire);
    if in_use {
        TABLE.replace(Vec::new());
    }
    in_use
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
        // SAFETY: `segment..segment + segment_len` is a readable PT_LOAD segment of a module that the
        // loader reported, and it stays mapped while this reader holds the snapshot: `dlclose` (the
        // only way a module goes away) waits in `suspend` for readers of this table before unmapping.
        let bytes =
            unsafe { std::slice::from_raw_parts(module.segment as usize as *const u8, module.segment_len as usize) };
        Some(f(&UnwindSegment { bytes, addr: module.segment, hdr: module.hdr }))
    })
}

fn loaded_modules() -> Vec<Module> {
    let mut modules: Vec<Module> = Vec::new();
    // SAFETY: the callback only reads the `dl_phdr_info` the loader passes for the duration of the
    // call, and `data` is the `&mut Vec` above, alive for the whole iteration.
    unsafe { libc::dl_iterate_phdr(Some(collect), (&mut modules as *mut Vec<Module>).cast()) };
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
    modules.push(Module { lo, hi, segment: start, segment_len: segment.p_filesz, hdr });
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
    }
}
