//! The program's memory budgets (`RLIMIT_AS`, `RLIMIT_DATA`) kept whole: racewatch's own mappings are
//! added to the limit the kernel enforces, so that the program can map as much as it could without
//! racewatch, and the program reads back the limits it set.
//!
//! The kernel counts every mapping of the process against `RLIMIT_AS` (its address space) and every
//! private writable one against `RLIMIT_DATA`, racewatch's library, heap and stacks (about 12 MB and
//! 6 MB) among them: a program that allocates until `malloc` fails got fewer blocks with racewatch (set
//! 37: 118 4-MiB blocks under a 512 MiB `RLIMIT_AS` instead of 121). Here the program's limits are
//! kept as its view (`getrlimit`, `prlimit`, `/proc/self/limits`), and the kernel's soft limit is the
//! program's plus what racewatch has mapped at that moment ([`own_footprint`], read off
//! `/proc/self/maps`), set again whenever racewatch maps or unmaps memory; the kernel's hard limit is the
//! program's plus that and [`SPARE`], room for racewatch's later mappings (a report's symbolization). A
//! raise of the hard limit past the program's needs `CAP_SYS_RESOURCE`, as it would without racewatch.
//!
//! A new image (`exec`) starts with the program's soft limit in the kernel, and is told the program's
//! limits (`RACEWATCH_VIEW` items `as<soft>:<hard>`, `data<soft>:<hard>`), which its racewatch takes as
//! its program's; a child started by a spawn is told the same. A limit the process started with and
//! was not told of (a shell's `ulimit -v`) is taken as the program's: its soft limit is raised by
//! racewatch's footprint up to the hard one, which only a raise of the hard limit could go past.
//!
//! Not kept: limits read with the program's own `syscall` instruction or by other processes (`prlimit
//! --pid`) show the kernel's; in a `vfork` child the program's `setrlimit` goes to the kernel as given.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

const INFINITY: u64 = libc::RLIM_INFINITY;
/// How far the kernel's hard limit goes past the program's, beyond racewatch's footprint when set.
const SPARE: u64 = 32 << 20;
const CAP_SYS_RESOURCE: u32 = 24;
const PAGE: usize = 4096;

/// A soft and a hard limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub soft: u64,
    pub hard: u64,
}

/// One resource's program view: its limits, once racewatch keeps them (`on`).
struct Budget {
    resource: u32,
    /// The `RACEWATCH_VIEW` item's name.
    item: &'static [u8],
    /// The `/proc/<pid>/limits` line's name.
    line: &'static [u8],
    on: AtomicBool,
    soft: AtomicU64,
    hard: AtomicU64,
    /// What a `RACEWATCH_VIEW` item told (`told_soft` [`INFINITY`] with `told_hard` 0: nothing).
    told_soft: AtomicU64,
    told_hard: AtomicU64,
}

impl Budget {
    const fn new(resource: u32, item: &'static [u8], line: &'static [u8]) -> Budget {
        Budget {
            resource,
            item,
            line,
            on: AtomicBool::new(false),
            soft: AtomicU64::new(INFINITY),
            hard: AtomicU64::new(INFINITY),
            told_soft: AtomicU64::new(INFINITY),
            told_hard: AtomicU64::new(0),
        }
    }

    fn program(&self) -> Option<Limit> {
        self.on
            .load(Ordering::Acquire)
            .then(|| Limit { soft: self.soft.load(Ordering::Acquire), hard: self.hard.load(Ordering::Acquire) })
    }

    fn keep(&self, limit: Limit) {
        self.soft.store(limit.soft, Ordering::Release);
        self.hard.store(limit.hard, Ordering::Release);
        self.on.store(true, Ordering::Release);
        ANY.store(true, Ordering::Release);
    }

    fn told(&self) -> Option<Limit> {
        let (soft, hard) = (self.told_soft.load(Ordering::Acquire), self.told_hard.load(Ordering::Acquire));
        (soft <= hard).then_some(Limit { soft, hard })
    }

    /// What racewatch's footprint counts against this resource.
    fn own(&self, footprint: Footprint) -> u64 {
        if self.resource == libc::RLIMIT_AS {
            footprint.address_space
        } else {
            footprint.data
        }
    }
}

static BUDGETS: [Budget; 2] = [
    Budget::new(libc::RLIMIT_AS, b"as", b"Max address space"),
    Budget::new(libc::RLIMIT_DATA, b"data", b"Max data size"),
];
/// Some budget is kept.
static ANY: AtomicBool = AtomicBool::new(false);
/// Held while the kernel's limits are read and set.
static LOCK: spin::Mutex<()> = spin::Mutex::new(());
/// racewatch's mappings changed while another thread held [`LOCK`]: it sets the limits again.
static STALE: AtomicBool = AtomicBool::new(false);
/// racewatch's footprint when last read ([`Footprint`]'s fields).
static OWN_SPACE: AtomicU64 = AtomicU64::new(0);
static OWN_DATA: AtomicU64 = AtomicU64::new(0);

fn budget(resource: u32) -> Option<&'static Budget> {
    BUDGETS.iter().find(|b| b.resource == resource)
}

/// What racewatch's own mappings count, in bytes: against `RLIMIT_AS` (every mapping) and against
/// `RLIMIT_DATA` (private writable ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub address_space: u64,
    pub data: u64,
}

/// Mappings of racewatch's outside its module and its region (the decoder's huge-page tables, the
/// warm-up thread's stack, the tables of thread-local slots): start and end, 0 for a free entry.
const LOOSE: usize = 32;
static LOOSE_RANGES: [(AtomicUsize, AtomicUsize); LOOSE] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; LOOSE];

/// `[start, start + len)` is a mapping of racewatch's outside its regions (counted in its footprint until
/// unmapped whole).
pub fn note_own(start: usize, len: usize) {
    if may_adjust() {
        super::raw::keep_apart(start, len);
    }
    if LOOSE_RANGES.iter().any(|(lo, _)| lo.load(Ordering::Acquire) == start) {
        return; // Known already (glibc's kept stack, taken by the next runtime thread).
    }
    for (lo, hi) in &LOOSE_RANGES {
        if lo.compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            hi.store(start + len, Ordering::Release);
            break;
        }
    }
    changed();
}

/// In a thread of racewatch's, first thing: the stack glibc mapped for it (the mapping that holds the
/// thread's own record, `inside`, at most `max_len` bytes, with the inaccessible guard page below it when
/// there is one) is racewatch's. glibc keeps it mapped after the thread ends, for the next thread of
/// racewatch's that asks for that size.
pub fn note_own_stack(inside: usize, max_len: usize) {
    let (mut below, mut found) = ((0, 0, false), None);
    super::raw::for_each_line(c"/proc/self/maps", &mut |line| {
        let Some((start, end, perms)) = super::raw::maps_entry(line) else { return true };
        if (start..end).contains(&inside) {
            let start = start.max(end.saturating_sub(max_len));
            let guard = below.1 == start && below.2 && start - below.0 == PAGE;
            found = Some(if guard { (below.0, end) } else { (start, end) });
            return false;
        }
        below = (start, end, perms.starts_with(b"---p"));
        true
    });
    if let Some((start, end)) = found {
        note_own(start, end - start);
    }
}

/// racewatch unmapped `[addr, addr + len)`.
pub fn unmapped(addr: usize, len: usize) {
    let end = addr + len.next_multiple_of(PAGE);
    for (lo, hi) in &LOOSE_RANGES {
        let start = lo.load(Ordering::Acquire);
        if start != 0 && addr <= start && hi.load(Ordering::Acquire) <= end {
            hi.store(0, Ordering::Release);
            lo.store(0, Ordering::Release);
        }
    }
    changed();
}

/// The ranges racewatch's mappings lie in: its module (with the mapping over the gap above it), its
/// region, and the loose ones.
fn own_ranges(each: &mut dyn FnMut(usize, usize)) {
    let (lo, hi) = super::prefault::own_span();
    each(lo, hi);
    let (gap, gap_len) = super::region::gap_above_own_module();
    each(gap, gap + gap_len);
    let (lo, hi) = super::region::span();
    each(lo, hi);
    for (lo, hi) in &LOOSE_RANGES {
        each(lo.load(Ordering::Acquire), hi.load(Ordering::Acquire));
    }
}

/// Changes racewatch made to its own mappings (maps, unmaps, protections, loose ranges noted).
static CHANGES: AtomicU64 = AtomicU64::new(0);
/// The footprint the views last read ([`footprint_at`]): the count of [`CHANGES`] and the process's
/// address space it was read at (`u64::MAX`: never read).
static VIEWED: spin::Mutex<(u64, u64, Footprint)> =
    spin::Mutex::new((u64::MAX, 0, Footprint { address_space: 0, data: 0 }));

/// racewatch changed the protection of a mapping of its own (its writable part is its `RLIMIT_DATA` share).
pub fn protected() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
}

/// racewatch's footprint for a view of the process's memory figures, the process's address space being
/// `total` bytes as the kernel's text showed it: `/proc/self/maps` is read again only when racewatch
/// changed its mappings since the last read, or the address space changed (a mapping racewatch did not
/// make itself, as glibc's stack of a runtime thread that glibc unmaps unseen, changes it too). A view of
/// a process whose mappings stay put costs no read of `maps` (most of its cost: 53 us of 58 for `statm`).
pub fn footprint_at(total: u64) -> Footprint {
    let changes = CHANGES.load(Ordering::Acquire);
    // Never waits: a signal handler's `open` may come while this thread holds the lock.
    if let Some(viewed) = VIEWED.try_lock() {
        if viewed.0 == changes && viewed.1 == total {
            return viewed.2;
        }
    }
    let own = own_footprint();
    if let Some(mut viewed) = VIEWED.try_lock() {
        *viewed = (changes, total, own);
    }
    own
}

/// racewatch's footprint now, read off `/proc/self/maps`: the part of each mapping inside its ranges.
pub fn own_footprint() -> Footprint {
    let mut footprint = Footprint::default();
    super::raw::for_each_line(c"/proc/self/maps", &mut |line| {
        if let Some((start, end, perms)) = super::raw::maps_entry(line) {
            let mut inside = 0;
            own_ranges(&mut |lo, hi| inside += overlap(start, end, lo, hi));
            footprint.address_space += inside as u64;
            if perms.get(1) == Some(&b'w') && perms.get(3) == Some(&b'p') {
                footprint.data += inside as u64;
            }
        }
        true
    });
    footprint
}

fn overlap(start: usize, end: usize, lo: usize, hi: usize) -> usize {
    if lo >= hi {
        return 0;
    }
    end.min(hi).saturating_sub(start.max(lo))
}

/// The kernel's soft limit for a program soft limit `soft` with racewatch's `own` bytes on top, within
/// `hard`.
fn raised(soft: u64, own: u64, hard: u64) -> u64 {
    if soft == INFINITY {
        INFINITY
    } else {
        soft.saturating_add(own).min(hard)
    }
}

/// Whether racewatch may make system calls about its own mappings here (read and set the limits, mark
/// a mapping with [`super::raw::keep_apart`]): not in a `vfork` child (the records are its parent's) nor
/// under a seccomp filter of the program's (the calls may be forbidden).
pub fn may_adjust() -> bool {
    !super::signal::in_borrowed_memory() && !super::confined::here() && !crate::detector::is_sandboxed()
}

/// Sets every kept budget's kernel soft limit to the program's plus racewatch's footprint `own` (plus
/// `more`, about to be mapped).
fn apply(own: Footprint, more: u64) {
    for b in &BUDGETS {
        let Some(program) = b.program() else { continue };
        let Some((soft, hard)) = super::raw::limit(b.resource) else { continue };
        let wanted = raised(program.soft, b.own(own) + more, hard);
        if wanted != soft {
            let _ = super::raw::set_limit(b.resource, wanted, hard);
        }
    }
}

/// racewatch's mappings changed: the kernel's limits follow, when a budget is kept.
fn changed() {
    CHANGES.fetch_add(1, Ordering::AcqRel);
    if !ANY.load(Ordering::Acquire) || !may_adjust() {
        return;
    }
    STALE.store(true, Ordering::Release);
    // A thread holding the lock (or this one, interrupted in it) sets them again before it lets go.
    while let Some(guard) = LOCK.try_lock() {
        STALE.store(false, Ordering::Release);
        let own = own_footprint();
        remember(own);
        apply(own, 0);
        drop(guard);
        if !STALE.load(Ordering::Acquire) {
            break;
        }
    }
}

fn remember(own: Footprint) {
    OWN_SPACE.store(own.address_space, Ordering::Release);
    OWN_DATA.store(own.data, Ordering::Release);
}

fn remembered() -> Footprint {
    Footprint { address_space: OWN_SPACE.load(Ordering::Acquire), data: OWN_DATA.load(Ordering::Acquire) }
}

/// racewatch is about to map `len` more bytes: the kernel's limits make room for them first, so that
/// its mapping takes nothing of the program's budget ([`changed`] follows the mapping).
pub fn before_mapping(len: usize) {
    if !ANY.load(Ordering::Acquire) || !may_adjust() {
        return;
    }
    if let Some(_guard) = LOCK.try_lock() {
        apply(remembered(), len as u64);
    }
}

/// racewatch mapped memory (after [`before_mapping`]).
pub fn mapped() {
    changed();
}

/// Before `main`: keeps the process's budgets as the program's (those a `RACEWATCH_VIEW` item told,
/// else the kernel's), and raises the kernel's soft limits by racewatch's footprint.
pub fn init() {
    if !may_adjust() {
        return;
    }
    let _guard = LOCK.lock();
    for b in &BUDGETS {
        let Some((soft, hard)) = super::raw::limit(b.resource) else { continue };
        // An item agrees with the kernel when the kernel's limits are the told ones, or the told plus
        // a parent racewatch's footprint (a spawned child) and spare room.
        let told = b.told().filter(|t| t.soft <= soft && t.hard <= hard && (t.soft == INFINITY) == (soft == INFINITY));
        let program = told.unwrap_or(Limit { soft, hard });
        if program.soft != INFINITY || program.hard != INFINITY {
            b.keep(program);
        }
    }
    if ANY.load(Ordering::Acquire) {
        let own = own_footprint();
        remember(own);
        apply(own, 0);
    }
}

/// The program's limits of `resource` as it set them, when racewatch keeps them.
pub fn program_limit(resource: u32) -> Option<Limit> {
    budget(resource)?.program()
}

/// Whether `resource` is one whose limits racewatch keeps for the program ([`program_sets`]).
pub fn is_budget(resource: u32) -> bool {
    budget(resource).is_some()
}

/// The program sets `new` for `resource` (one [`is_budget`] accepts): the kernel gets it with racewatch's
/// footprint on top; `Err(errno)` as the kernel would refuse it without racewatch.
pub fn program_sets(resource: u32, new: Limit) -> Result<(), i32> {
    let Some(b) = budget(resource) else { return Err(libc::EINVAL) };
    if new.soft > new.hard {
        return Err(libc::EINVAL);
    }
    if !may_adjust() {
        return super::raw::set_limit(resource, new.soft, new.hard);
    }
    let _guard = LOCK.lock();
    let (_, kernel_hard) = super::raw::limit(resource).ok_or(libc::EINVAL)?;
    let program_hard = b.program().map_or(kernel_hard, |p| p.hard);
    let capable = || super::raw::has_capability(CAP_SYS_RESOURCE);
    if new.hard > program_hard && !capable() {
        return Err(libc::EPERM);
    }
    let own = own_footprint();
    remember(own);
    let own = b.own(own);
    let mut hard = if new.hard == INFINITY { INFINITY } else { new.hard.saturating_add(own + SPARE) };
    if hard > kernel_hard && !capable() {
        hard = kernel_hard;
    }
    super::raw::set_limit(resource, raised(new.soft, own, hard), hard)?;
    b.keep(new);
    Ok(())
}

/// Before an `exec`: the new image starts with the program's soft limits in the kernel (racewatch's
/// footprint goes with the old image); true when one was lowered ([`after_failed_exec`] raises them).
pub fn before_exec() -> bool {
    let mut lowered = false;
    for b in &BUDGETS {
        let Some(program) = b.program() else { continue };
        let Some((soft, hard)) = super::raw::limit(b.resource) else { continue };
        if soft != program.soft.min(hard) {
            lowered |= super::raw::set_limit(b.resource, program.soft.min(hard), hard).is_ok();
        }
    }
    lowered
}

/// The `exec` failed: the kernel's soft limits get racewatch's footprint back.
pub fn after_failed_exec() {
    if may_adjust() {
        apply(remembered(), 0);
    }
}

/// The `RACEWATCH_VIEW` items that tell a new image the program's budgets (`as<soft>:<hard>`, `-` for no
/// limit), comma separated; empty when none is kept.
pub fn items() -> Vec<u8> {
    let mut out = Vec::new();
    for b in &BUDGETS {
        let Some(program) = b.program() else { continue };
        if !out.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(b.item);
        out.extend_from_slice(&number_text(program.soft));
        out.push(b':');
        out.extend_from_slice(&number_text(program.hard));
    }
    out
}

fn number_text(value: u64) -> Vec<u8> {
    if value == INFINITY {
        b"-".to_vec()
    } else {
        value.to_string().into_bytes()
    }
}

fn number(text: &[u8]) -> Option<u64> {
    if text == b"-" {
        return Some(INFINITY);
    }
    std::str::from_utf8(text).ok()?.parse().ok().filter(|_| text.iter().all(u8::is_ascii_digit))
}

/// Before `main`: notes a budget item of `RACEWATCH_VIEW` (others are ignored).
pub fn note_told(item: &[u8]) {
    for b in &BUDGETS {
        let Some(rest) = item.strip_prefix(b.item) else { continue };
        let mut fields = rest.split(|&b| b == b':');
        let (Some(soft), Some(hard), None) =
            (fields.next().and_then(number), fields.next().and_then(number), fields.next())
        else {
            continue;
        };
        b.told_soft.store(soft, Ordering::Release);
        b.told_hard.store(hard, Ordering::Release);
    }
}

/// Whether a `limits` file of this process shows anything of racewatch's.
pub fn any_kept() -> bool {
    ANY.load(Ordering::Acquire)
}

/// `/proc/self/limits` with the program's budgets in their lines (the kernel's format: name in 25
/// columns, soft and hard limit in 20 each, then the units); `None` when `out` is too small.
pub fn rewrite_limits(text: &[u8], out: &mut [u8]) -> Option<usize> {
    rewrite_limits_with(text, out, &program_limit)
}

/// [`rewrite_limits`] with the program's limits of each resource from `program`.
fn rewrite_limits_with(text: &[u8], out: &mut [u8], program: &dyn Fn(u32) -> Option<Limit>) -> Option<usize> {
    let mut len = 0;
    let mut put = |bytes: &[u8]| -> Option<()> {
        out.get_mut(len..len + bytes.len())?.copy_from_slice(bytes);
        len += bytes.len();
        Some(())
    };
    for line in text.split_inclusive(|&b| b == b'\n') {
        let kept = BUDGETS.iter().find(|b| line.starts_with(b.line) && line.get(b.line.len()) == Some(&b' '));
        match kept.and_then(|b| program(b.resource)).filter(|_| line.len() >= 68) {
            Some(program) => {
                put(&line[..26])?;
                put(&column(program.soft))?;
                put(&column(program.hard))?;
                put(&line[68..])?;
            }
            None => put(line)?,
        }
    }
    Some(len)
}

/// A limit as `/proc/<pid>/limits` prints it: 20 columns and a space.
fn column(value: u64) -> Vec<u8> {
    let text = if value == INFINITY { "unlimited".to_string() } else { value.to_string() };
    format!("{text:<20} ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_soft_limit_is_the_programs_plus_the_footprint_within_the_hard_one() {
        assert_eq!(raised(100, 10, 200), 110);
        assert_eq!(raised(100, 10, 105), 105);
        assert_eq!(raised(INFINITY, 10, 200), INFINITY);
        assert_eq!(raised(INFINITY - 5, 10, INFINITY), INFINITY);
    }

    #[test]
    fn items_are_read_back() {
        assert_eq!(number(b"-"), Some(INFINITY));
        assert_eq!(number(b"536870912"), Some(512 << 20));
        assert_eq!(number(b"+5"), None);
        assert_eq!(number(b""), None);
    }

    #[test]
    fn limits_lines_show_the_programs_budget() {
        let text = b"Limit                     Soft Limit           Hard Limit           Units     \n\
Max data size             unlimited            unlimited            bytes     \n\
Max stack size            8388608              unlimited            bytes     \n\
Max address space         549755813888         549755813888         bytes     \n";
        let program = |resource| (resource == libc::RLIMIT_AS).then_some(Limit { soft: 512 << 20, hard: INFINITY });
        let mut out = [0u8; 1024];
        let n = rewrite_limits_with(text, &mut out, &program).unwrap();
        let shown = std::str::from_utf8(&out[..n]).unwrap();
        assert!(
            shown.contains("Max address space         536870912            unlimited            bytes     \n"),
            "{shown}"
        );
        assert!(shown.contains("Max data size             unlimited            unlimited            bytes     \n"));
        assert!(shown.contains("Max stack size            8388608 "));
        assert_eq!(n, text.len(), "the same columns");
    }

    #[test]
    fn a_views_footprint_is_read_again_after_racewatch_maps() {
        // Not taken for the address space of a real process: read off maps the first time.
        // (Other tests map and unmap meanwhile: what is checked is that the remembered value is not
        // given again.)
        let total = 1 << 40;
        let before = footprint_at(total);
        let len = 64 << 10;
        let Some(mem) = crate::sys::mem::map_private(len) else { return };
        note_own(mem as usize, len);
        let grown = footprint_at(total);
        assert_ne!(grown, before, "the new mapping is counted though the total given is the same");
        crate::sys::raw::munmap(mem as usize, len);
        assert_ne!(footprint_at(total), grown, "and left out once unmapped");
    }

    #[test]
    fn the_footprint_counts_the_runtimes_own_module() {
        let own = own_footprint();
        let (lo, hi) = crate::sys::prefault::own_span();
        assert!(hi > lo);
        assert!(own.address_space >= (hi - lo) as u64 / 2, "{own:?} for a module of {} bytes", hi - lo);
        assert!(own.data > 0 && own.data < own.address_space, "{own:?}");
    }
}
