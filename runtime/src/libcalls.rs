//! libc's memory and string functions (`memcpy`, `memset`, `strlen`, `strcpy`, … and their `__*_chk`
//! forms): where they are, for both sides of a watch.
//!
//! - **Sampled side.** The sampler's walk (`decode::reach`) stops at a call or jump to one of them and
//!   watches part of the bytes it is about to access (its arguments give them). A call is recognised
//!   by its target — after following the PLT stub or GOT slot — being the address libc's own symbol
//!   resolves to (the IFUNC's choice for this CPU), never by a name: a program's own `memcpy` is its own.
//! - **Trapping side.** A watchpoint trap inside one of their bodies is decoded and judged as a plain
//!   access of the covered code that called it. libc has no symbols for the bodies the IFUNCs pick
//!   (`__memmove_avx512_unaligned_erms` is not exported, and Debian's libc has no `.symtab`), so a
//!   body is bounded by the `.eh_frame` FDE that covers the resolved entry.
//!
//! [`init`] resolves everything once, when the detector starts (not in a signal handler): `dlopen` of
//! the already loaded libc with `RTLD_NOLOAD`, `dlsym` in it (libc's own definitions, whatever the
//! program or other libraries define), and the FDE bounds from the unwind table. The table is immutable
//! afterwards; the lookups are lock-free and allocation-free (async-signal-safe).

use crate::decode::{MemFn, SYMBOLS};
use crate::sys::{dl, unwind_info};
use addr2line::gimli;
use std::sync::OnceLock;

/// One resolved symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    addr: u64,
    function: MemFn,
}

/// The code of one or more entries: `[start, end)`, named by the first symbol (in [`SYMBOLS`] order)
/// whose entry lies in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Body {
    start: u64,
    end: u64,
    name: &'static str,
}

#[derive(Debug, Default)]
struct Table {
    /// Sorted by address; one per address (the first symbol resolving there).
    entries: Vec<Entry>,
    /// Sorted by start, disjoint.
    bodies: Vec<Body>,
}

static TABLE: OnceLock<Table> = OnceLock::new();

/// Resolves libc's memory and string functions and their bodies (once; later calls do nothing). Call
/// after the unwind table was built (`sys::unwind_info::refresh`), outside signal handlers. Without a
/// dynamically loaded glibc-like libc the table stays empty and nothing is recognised.
pub fn init() {
    crate::sys::xsave::init();
    TABLE.get_or_init(|| {
        let resolved = resolve();
        build(&resolved, function_bounds, jump_targets)
    });
}

/// How far from its entry a jump may lead and still be taken as part of a function's code: glibc's
/// variants of one function share code (the `memset` chosen without ERMS jumps into the ERMS
/// variant's loops, under another FDE), while a far target is another function (`__chk_fail`).
const SHARED_CODE_REACH: u64 = 4096;
/// Bodies at most added to one entry's by following its jumps.
const SHARED_BODIES: usize = 8;

/// The targets of the direct jumps (conditional or not, not calls) in the code `[start, end)`.
fn jump_targets(start: u64, end: u64) -> Vec<u64> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, OpKind};
    let mut code = vec![0u8; usize::try_from(end.saturating_sub(start)).unwrap_or(0).min(64 << 10)];
    let read = crate::sys::mem::read_into(start, &mut code);
    let mut decoder = Decoder::with_ip(64, &code[..read], start, DecoderOptions::NONE);
    let mut targets = Vec::new();
    while decoder.can_decode() {
        let instruction = decoder.decode();
        let jump =
            matches!(instruction.flow_control(), FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch);
        if jump && instruction.op0_kind() == OpKind::NearBranch64 {
            targets.push(instruction.near_branch_target());
        }
    }
    targets
}

/// `(name, function, address)` of every symbol of [`SYMBOLS`] that libc defines.
fn resolve() -> Vec<(&'static str, MemFn, u64)> {
    let Some(libc) = dl::Loaded::find(c"libc.so.6") else { return Vec::new() };
    let mut out = Vec::new();
    for &(name, function) in SYMBOLS {
        let Ok(cname) = std::ffi::CString::new(name) else { continue };
        if let Some(addr) = libc.symbol(&cname) {
            out.push((name, function, addr));
        }
    }
    out
}

/// The bounds `[start, end)` of the function whose CFI (its `.eh_frame` FDE) covers `pc`, in a module of
/// the unwind table.
fn function_bounds(pc: u64) -> Option<(u64, u64)> {
    let found = unwind_info::with_segment(pc, |segment| -> gimli::Result<(u64, u64)> {
        let (_, _, fde) = crate::unwind::fde_for(segment, pc)?;
        Ok((fde.initial_address(), fde.initial_address().saturating_add(fde.len())))
    });
    found?.ok().filter(|(start, end)| (*start..*end).contains(&pc))
}

/// The table for `resolved` symbols (in [`SYMBOLS`] order), bodies bounded by `bounds`, each with the
/// code its direct jumps (`jumps`) lead to nearby.
fn build(
    resolved: &[(&'static str, MemFn, u64)],
    bounds: impl Fn(u64) -> Option<(u64, u64)>,
    jumps: impl Fn(u64, u64) -> Vec<u64>,
) -> Table {
    let mut entries: Vec<Entry> = Vec::new();
    let mut bodies: Vec<Body> = Vec::new();
    for &(name, function, addr) in resolved {
        if !entries.iter().any(|e| e.addr == addr) {
            entries.push(Entry { addr, function });
        }
        if bodies.iter().any(|b| (b.start..b.end).contains(&addr)) {
            continue;
        }
        let Some((start, end)) = bounds(addr).filter(|(start, end)| start < end) else { continue };
        // Never overlapping another body (FDEs do not overlap; be safe anyway).
        if bodies.iter().any(|b| start < b.end && b.start < end) {
            continue;
        }
        bodies.push(Body { start, end, name });
        let (mut pending, mut added) = (vec![(start, end)], 0);
        while let Some((from, to)) = pending.pop() {
            for target in jumps(from, to) {
                if added >= SHARED_BODIES
                    || target.abs_diff(addr) > SHARED_CODE_REACH
                    || bodies.iter().any(|b| (b.start..b.end).contains(&target))
                {
                    continue;
                }
                let Some((start, end)) = bounds(target).filter(|(start, end)| start < end) else { continue };
                if !bodies.iter().any(|b| start < b.end && b.start < end) {
                    bodies.push(Body { start, end, name });
                    pending.push((start, end));
                    added += 1;
                }
            }
        }
    }
    entries.sort_by_key(|e| e.addr);
    bodies.sort_by_key(|b| b.start);
    Table { entries, bodies }
}

fn table() -> Option<&'static Table> {
    TABLE.get()
}

/// The function whose resolved entry is exactly `addr`. Async-signal-safe.
pub fn function_at(addr: u64) -> Option<MemFn> {
    let entries = &table()?.entries;
    let at = entries.binary_search_by_key(&addr, |e| e.addr).ok()?;
    entries.get(at).map(|e| e.function)
}

fn body(pc: u64) -> Option<&'static Body> {
    let bodies = &table()?.bodies;
    let at = bodies.partition_point(|b| b.start <= pc).checked_sub(1)?;
    bodies.get(at).filter(|b| pc < b.end)
}

/// The body `[start, end)` of one of the functions containing `pc`. Async-signal-safe.
pub fn body_containing(pc: u64) -> Option<(u64, u64)> {
    body(pc).map(|b| (b.start, b.end))
}

/// The body `[start, end)` containing `pc` when it is that of libc's `memcpy`, `memmove`, `mempcpy` or
/// `memset` (or a `__*_chk` form): functions that touch exactly the bytes their arguments name, never
/// past either end (unlike the string functions, which read whole aligned blocks around the NUL).
/// Async-signal-safe.
pub fn copy_body_containing(pc: u64) -> Option<(u64, u64)> {
    body(pc)
        .filter(|b| {
            matches!(
                b.name,
                "memcpy"
                    | "memmove"
                    | "mempcpy"
                    | "memset"
                    | "__memcpy_chk"
                    | "__memmove_chk"
                    | "__mempcpy_chk"
                    | "__memset_chk"
            )
        })
        .map(|b| (b.start, b.end))
}

/// The name racewatch gives the libc function whose body contains `pc` (`memcpy`, `strlen`, …).
pub fn name_at(pc: u64) -> Option<&'static str> {
    body(pc).map(|b| b.name)
}

/// Whether any function was recognised.
pub fn is_known() -> bool {
    table().is_some_and(|t| !t.entries.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_named_by_their_first_symbol_and_shared_entries_count_once() {
        // memcpy and memmove share a body (glibc's unaligned variants), mempcpy has its own tiny one.
        let resolved = [
            ("memcpy", MemFn::Memcpy, 0x1800),
            ("memmove", MemFn::Memmove, 0x1800),
            ("mempcpy", MemFn::Mempcpy, 0x17c0),
            ("strlen", MemFn::Strlen, 0x3000),
            ("__memcpy_chk", MemFn::Memcpy, 0x17d0),
        ];
        let bounds = |addr: u64| match addr {
            0x1800 => Some((0x1800, 0x1fa0)),
            0x17c0 => Some((0x17c0, 0x17c8)),
            0x17d0 => Some((0x17d0, 0x17d9)),
            _ => None,
        };
        let table = build(&resolved, bounds, |_, _| Vec::new());
        assert_eq!(table.entries.len(), 4);
        assert_eq!(table.entries[0], Entry { addr: 0x17c0, function: MemFn::Mempcpy });
        assert_eq!(table.entries.iter().find(|e| e.addr == 0x1800).unwrap().function, MemFn::Memcpy);
        let names: Vec<_> = table.bodies.iter().map(|b| (b.start, b.name)).collect();
        assert_eq!(names, vec![(0x17c0, "mempcpy"), (0x17d0, "__memcpy_chk"), (0x1800, "memcpy")]);
    }

    #[test]
    fn code_a_function_jumps_to_nearby_is_part_of_its_body() {
        // memset's entry (without ERMS) jumps into the ERMS variant's loops under another FDE, and to
        // __chk_fail far away; the loops jump back.
        let resolved = [("memset", MemFn::Memset, 0x5000), ("strlen", MemFn::Strlen, 0x9000)];
        let bounds = |addr: u64| match addr {
            0x5000..0x5030 => Some((0x5000, 0x5030)),
            0x5100..0x5200 => Some((0x5100, 0x5200)),
            0x9000..0x9040 => Some((0x9000, 0x9040)),
            0x0100..0x0200 => Some((0x0100, 0x0200)),
            _ => None,
        };
        let jumps = |start: u64, _end: u64| match start {
            0x5000 => vec![0x5010, 0x5150, 0x0120],
            0x5100 => vec![0x5008, 0x5180],
            _ => Vec::new(),
        };
        let table = build(&resolved, bounds, jumps);
        let names: Vec<_> = table.bodies.iter().map(|b| (b.start, b.name)).collect();
        assert_eq!(names, vec![(0x5000, "memset"), (0x5100, "memset"), (0x9000, "strlen")]);
        assert_eq!(table.entries.len(), 2, "entries stay the symbols' own");
    }

    #[test]
    fn this_process_libc_is_resolved_and_bounded() {
        crate::sys::unwind_info::refresh();
        init();
        assert!(is_known(), "libc's memory functions resolved");
        let memcpy = libc::memcpy as *const () as u64;
        // The test binary's own `memcpy` reference may go through its PLT; dlsym's is libc's choice.
        let resolved = resolve();
        let (_, _, addr) = *resolved.iter().find(|(name, _, _)| *name == "memcpy").expect("memcpy");
        assert_eq!(function_at(addr), Some(MemFn::Memcpy));
        assert_eq!(name_at(addr), Some("memcpy"));
        let (start, end) = body_containing(addr).expect("memcpy's body");
        assert!(start <= addr && addr < end && end - start < 64 << 10, "{start:#x}..{end:#x} around {addr:#x}");
        let strlen = resolved.iter().find(|(name, _, _)| *name == "strlen").expect("strlen").2;
        assert_eq!(name_at(strlen), Some("strlen"));
        assert_eq!(function_at(strlen + 1), None);
        assert_eq!(function_at(memcpy.wrapping_add(0x10_0000_0000)), None);
    }
}
