//! racewatch's thread-local storage, kept in a table of its own instead of glibc's static TLS.
//!
//! Why: a preloaded library's `PT_TLS` segment is part of glibc's static TLS block, which glibc
//! carves from the top of every thread's stack (a recursion to the guard page of a small stack stopped
//! 5–6 frames earlier) and which gives the library a slot in every thread's DTV (32 bytes more of
//! the program's `malloc` per thread). racewatch's variables and the standard library's (296 bytes
//! in all) live here instead: the library defines a hidden `__tls_get_addr`, which every thread-local
//! access in it calls (the general- and local-dynamic models of a shared library; there is no other),
//! and the build turns the segment's program header into [`PT_RACEWATCH_TLS`], so that the loader
//! gives it no TLS at all (build.rs). The accesses then land in this table's block for the thread.
//!
//! A block is found by the thread pointer (`fs:0`, glibc's thread descriptor) and checked against
//! the thread id glibc keeps in it: no system call, no lock, async-signal-safe, also in a thread
//! whose seccomp sandbox allows none. A thread's first access copies the segment's initial image in.
//! A descriptor glibc hands to a new thread (its stack cache) comes with a new id, and the block is
//! initialised again; in a forked child the forking thread keeps its block (its id is the child's
//! pid now). Blocks are never released while their thread may run: destructors the standard library
//! registered with glibc run after racewatch's last code in a thread. A table with no free entry takes
//! back the entry of a thread the kernel says is gone.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The program header type the build gives racewatch's `PT_TLS` segment (ignored by the loader).
pub const PT_RACEWATCH_TLS: u32 = 0x6f72_7774;
const PT_TLS: u32 = 7;

/// Entries of one table. The first table is static; more are mapped as threads need them.
const ENTRIES: usize = 4096;
/// Tables at most (65,536 threads with a block at once).
const TABLES: usize = 16;
/// Entries a thread looks at in a table, from its home entry, before it goes on to the next table.
const PROBES: usize = 64;
/// The largest block (the segment's size, rounded up to 64 bytes); the build checks the segment.
pub const MAX_BLOCK: usize = 512;
/// Blocks per chunk: the first chunk is static, the others are mapped ahead or as threads need them.
const CHUNK: usize = 32;
/// Blocks at most, and their chunks.
const BLOCKS: usize = ENTRIES * TABLES;
const CHUNKS: usize = BLOCKS / CHUNK;
/// Where glibc (2.26 and later, x86-64) keeps a thread's id in its descriptor.
const GLIBC_TID_OFFSET: usize = 0x2d0;

/// A table of entries (all zero: empty; a mapping of zeroes is one).
#[repr(C)]
struct Table {
    /// The thread pointer each entry belongs to (0: free).
    owner: [AtomicUsize; ENTRIES],
    /// The thread id the entry's block was initialised for (0: being initialised).
    tid: [AtomicI32; ENTRIES],
    /// The block each entry has (its number + 1; 0: none yet). An entry taken over keeps its block.
    block: [AtomicUsize; ENTRIES],
}

static FIRST_TABLE: Table = Table {
    owner: [const { AtomicUsize::new(0) }; ENTRIES],
    tid: [const { AtomicI32::new(0) }; ENTRIES],
    block: [const { AtomicUsize::new(0) }; ENTRIES],
};
/// The tables after the first (0: not mapped yet).
static MORE_TABLES: [AtomicUsize; TABLES] = [const { AtomicUsize::new(0) }; TABLES];
/// Blocks handed out so far (numbered in order, so that chunks fill one after the other).
static NEXT_BLOCK: AtomicUsize = AtomicUsize::new(0);
/// Each chunk's address (0: not mapped yet); chunk 0 is [`FIRST`].
static CHUNK_AT: [AtomicUsize; CHUNKS] = [const { AtomicUsize::new(0) }; CHUNKS];

/// Zeroed memory of `len` bytes, mapped now (raw `mmap`: async-signal-safe, no thread-local state),
/// published in `slot` unless another thread did first; `None` when the kernel refuses.
fn map_into(slot: &AtomicUsize, len: usize) -> Option<usize> {
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
    super::budget::before_mapping(len);
    let mapped = super::raw::syscall6(libc::SYS_mmap, [0, len as u64, prot, flags, u64::MAX, 0]);
    if mapped < 0 {
        super::budget::mapped();
        return None;
    }
    match slot.compare_exchange(0, mapped as usize, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            super::budget::note_own(mapped as usize, len);
            Some(mapped as usize)
        }
        Err(other) => {
            super::raw::munmap(mapped as usize, len);
            Some(other)
        }
    }
}

/// Table `k`, mapped now the first time it is needed.
fn table(k: usize) -> Option<&'static Table> {
    if k == 0 {
        return Some(&FIRST_TABLE);
    }
    let slot = MORE_TABLES.get(k)?;
    let at = match slot.load(Ordering::Acquire) {
        0 => map_into(slot, std::mem::size_of::<Table>())?,
        at => at,
    };
    // SAFETY: a mapping of a whole `Table`, zeroed (empty entries), never unmapped.
    Some(unsafe { &*(at as *const Table) })
}

#[repr(C, align(64))]
struct Blocks<const N: usize>([u8; N]);

// `static mut`s only for their addresses: blocks are reached through raw pointers, one thread each.
/// The first chunk (untouched until threads use its blocks).
static mut FIRST: Blocks<{ CHUNK * MAX_BLOCK }> = Blocks([0; CHUNK * MAX_BLOCK]);
/// The block of a thread beyond [`ENTRIES`] live ones, or one whose chunk could not be mapped: shared.
static mut SPARE: Blocks<MAX_BLOCK> = Blocks([0; MAX_BLOCK]);

/// The segment's initial image: address, bytes to copy, block size (0 until [`template`] found it;
/// `usize::MAX` as the address when the library has no usable segment).
static IMAGE: AtomicUsize = AtomicUsize::new(0);
static IMAGE_COPY: AtomicUsize = AtomicUsize::new(0);
static IMAGE_SIZE: AtomicUsize = AtomicUsize::new(0);
/// Whether glibc's thread id sits at [`GLIBC_TID_OFFSET`] (1), not (2), or is not known yet (0).
static TID_KNOWN: AtomicUsize = AtomicUsize::new(0);

/// The segment racewatch's accesses refer to, as found in its own program headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The initial image's address in memory.
    pub image: usize,
    /// Bytes of initial values (the rest of a block starts zeroed).
    pub file_size: usize,
    /// The block's size.
    pub mem_size: usize,
    /// Its alignment.
    pub align: usize,
}

extern "C" {
    /// The linker's name for the ELF header of the module that refers to it (mapped with the first segment).
    static __ehdr_start: libc::Elf64_Ehdr;
}

/// The ELF header of the module this code is linked into (libracewatch.so; a test's executable).
fn own_ehdr() -> &'static libc::Elf64_Ehdr {
    // SAFETY: the linker defines the symbol at the module's mapped ELF header.
    unsafe { &*std::ptr::addr_of!(__ehdr_start) }
}

/// The program headers of a mapped module, from its ELF header.
fn program_headers(ehdr: &'static libc::Elf64_Ehdr) -> &'static [libc::Elf64_Phdr] {
    if usize::from(ehdr.e_phentsize) != std::mem::size_of::<libc::Elf64_Phdr>() {
        return &[];
    }
    let at = (ehdr as *const libc::Elf64_Ehdr as usize).wrapping_add(ehdr.e_phoff as usize);
    // SAFETY: a mapped module's program headers follow its header in the first segment (the loader read
    // them there too), `e_phnum` of them.
    unsafe { std::slice::from_raw_parts(at as *const libc::Elf64_Phdr, usize::from(ehdr.e_phnum)) }
}

/// The TLS segment of the mapped module whose ELF header is `ehdr`, patched or not.
pub fn segment_of(ehdr: &'static libc::Elf64_Ehdr) -> Option<Segment> {
    let phdrs = program_headers(ehdr);
    let base = ehdr as *const libc::Elf64_Ehdr as usize;
    let bias =
        phdrs.iter().find(|p| p.p_type == libc::PT_LOAD && p.p_offset == 0).map(|p| base - p.p_vaddr as usize)?;
    let tls = phdrs.iter().find(|p| p.p_type == PT_TLS || p.p_type == PT_RACEWATCH_TLS)?;
    Some(Segment {
        image: bias + tls.p_vaddr as usize,
        file_size: tls.p_filesz as usize,
        mem_size: tls.p_memsz as usize,
        align: tls.p_align.max(1) as usize,
    })
}

/// Whether a block can hold `segment` in the table.
pub fn fits(segment: &Segment) -> bool {
    segment.file_size <= segment.mem_size && segment.mem_size <= MAX_BLOCK && segment.align <= 64
}

/// The initial image to copy into a new block: (address, bytes, block size); found once.
fn template() -> (usize, usize, usize) {
    let image = IMAGE.load(Ordering::Acquire);
    if image != 0 {
        return (image, IMAGE_COPY.load(Ordering::Relaxed), IMAGE_SIZE.load(Ordering::Relaxed));
    }
    let found = segment_of(own_ehdr()).filter(fits);
    let (image, copy, size) = found.map_or((usize::MAX, 0, 0), |s| (s.image, s.file_size, s.mem_size));
    IMAGE_COPY.store(copy, Ordering::Relaxed);
    IMAGE_SIZE.store(size, Ordering::Relaxed);
    IMAGE.store(image, Ordering::Release);
    (image, copy, size)
}

/// The id glibc keeps for the thread whose descriptor is at `tp` (1 where glibc keeps none racewatch
/// could find: blocks are then told apart by thread pointer alone).
fn thread_id(tp: usize) -> i32 {
    let known = match TID_KNOWN.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: `tp` is this thread's descriptor, larger than the offset in every glibc that keeps it
            // there; read once, before the answer is known, and compared with the kernel's.
            let kept = unsafe { ((tp + GLIBC_TID_OFFSET) as *const i32).read_volatile() };
            let known = if kept == super::raw::gettid() { 1 } else { 2 };
            TID_KNOWN.store(known, Ordering::Relaxed);
            known
        }
        known => known,
    };
    if known == 1 {
        // SAFETY: glibc's descriptor of this thread keeps its id there (checked above).
        unsafe { ((tp + GLIBC_TID_OFFSET) as *const i32).read_volatile() }
    } else {
        1
    }
}

/// The start of this thread's block of racewatch's thread-local storage.
pub fn block_of_this_thread() -> *mut u8 {
    let tp = super::confined::thread_pointer();
    let tid = thread_id(tp);
    // (A thread in a seccomp sandbox of its own asks no system call: a reused descriptor starts afresh.)
    let pid = || if super::confined::here() { 0 } else { super::raw::getpid() };
    let entry = entry_for(tp, tid, &pid, &|tid| !super::confined::here() && !super::raw::thread_alive(tid));
    block(entry)
}

/// The block of `entry` (table and index: `k * ENTRIES + i`), handed out with its first claim; the
/// spare one when none can be had.
fn block(entry: usize) -> *mut u8 {
    let spare = std::ptr::addr_of_mut!(SPARE).cast::<u8>();
    let Some(had) = table(entry / ENTRIES).map(|t| &t.block[entry % ENTRIES]) else { return spare };
    let mut number = had.load(Ordering::Acquire);
    if number == 0 {
        let next = NEXT_BLOCK.fetch_add(1, Ordering::AcqRel);
        if next >= BLOCKS {
            return spare;
        }
        // Only this entry's owner hands it a block (the thread pointer is one live thread's).
        had.store(next + 1, Ordering::Release);
        number = next + 1;
    }
    let (chunk, within) = ((number - 1) / CHUNK, (number - 1) % CHUNK);
    chunk_at(chunk).map_or(spare, |at| at.wrapping_add(within * MAX_BLOCK))
}

const CHUNK_BYTES: usize = CHUNK * MAX_BLOCK;
/// The chunks after the first of the first table's blocks, mapped whole before `main` ([`reserve`]; 0:
/// not mapped).
static RESERVED: AtomicUsize = AtomicUsize::new(0);
const RESERVED_CHUNKS: usize = ENTRIES / CHUNK - 1;
const RESERVED_BYTES: usize = RESERVED_CHUNKS * CHUNK_BYTES;

/// Before `main`, without a memory budget: maps the chunks after the first (about 2 MiB of address space,
/// untouched until threads use their blocks), so that the program's threads, however many, change
/// nothing of its address space (a program starting threads up to its `RLIMIT_AS` must get as many).
/// Under a budget, chunks are mapped as threads need them.
pub fn reserve() {
    if super::mem::memory_budgeted() || RESERVED.load(Ordering::Acquire) != 0 {
        return;
    }
    if let Some(at) = super::region::map(RESERVED_BYTES, super::region::Use::Heap) {
        RESERVED.store(at, Ordering::Release);
    }
}

/// Before an `mlockall(MCL_CURRENT)` of the program's while no thread but the first used a block: the
/// chunks mapped ahead are given back (they would be locked, and counted against its `RLIMIT_MEMLOCK`).
pub fn before_locking_all() {
    let at = RESERVED.load(Ordering::Acquire);
    if at == 0 || NEXT_BLOCK.load(Ordering::Acquire) > CHUNK {
        return;
    }
    RESERVED.store(0, Ordering::Release);
    super::region::unmap(at, RESERVED_BYTES);
}

/// Chunk `chunk`'s address: the first is static, the others mapped ahead ([`reserve`]) or now, the
/// first time (raw `mmap`: async-signal-safe, no thread-local state); `None` when the kernel refuses.
fn chunk_at(chunk: usize) -> Option<*mut u8> {
    if chunk == 0 {
        return Some(std::ptr::addr_of_mut!(FIRST).cast::<u8>());
    }
    let slot = CHUNK_AT.get(chunk)?;
    let at = slot.load(Ordering::Acquire);
    if at != 0 {
        return Some(at as *mut u8);
    }
    let reserved = RESERVED.load(Ordering::Acquire);
    if reserved != 0 && chunk <= RESERVED_CHUNKS {
        let at = reserved + (chunk - 1) * CHUNK_BYTES;
        return Some(match slot.compare_exchange(0, at, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => at,
            Err(other) => other,
        } as *mut u8);
    }
    map_into(slot, CHUNK_BYTES).map(|at| at as *mut u8)
}

/// Fills `entry`'s block with the initial image and marks it as thread `tid`'s.
fn initialise(entry: usize, tid: i32) {
    let (image, copy, size) = template();
    let to = block(entry);
    if image != usize::MAX {
        // SAFETY: the block holds MAX_BLOCK >= size >= copy bytes, and is this thread's alone; the image
        // is the library's own mapped segment.
        unsafe {
            std::ptr::copy_nonoverlapping(image as *const u8, to, copy);
            std::ptr::write_bytes(to.add(copy), 0, size - copy);
        }
    }
    if let Some(t) = table(entry / ENTRIES) {
        t.tid[entry % ENTRIES].store(tid, Ordering::Release);
    }
}

fn home(tp: usize) -> usize {
    ((tp >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) % ENTRIES
}

/// The entry (`k * ENTRIES + i`) of the thread whose descriptor is at `tp` and whose id is `tid`,
/// claimed (and initialised) if it has none: in the first table whose [`PROBES`] entries from its home
/// have it, a free one, or one of a thread that is gone. `pid` is asked only when an entry with this
/// descriptor has another id (the forking thread, in a child, or a new thread on a descriptor glibc
/// reused); `gone` only when a table's entries there are all taken. Entries are never freed, so a
/// thread's entry always comes before any free one in that order.
fn entry_for(tp: usize, tid: i32, pid: &dyn Fn() -> i32, gone: &dyn Fn(i32) -> bool) -> usize {
    let start = home(tp);
    for k in 0..TABLES {
        let Some(t) = table(k) else { break };
        let at = |step: usize| (start + step) % ENTRIES;
        for i in (0..PROBES).map(at) {
            let owner = t.owner[i].load(Ordering::Acquire);
            if owner == tp {
                let had = t.tid[i].load(Ordering::Acquire);
                if had != tid {
                    if had != 0 && tid == pid() {
                        t.tid[i].store(tid, Ordering::Release); // A forked child's only thread: same state.
                    } else {
                        initialise(k * ENTRIES + i, tid);
                    }
                }
                return k * ENTRIES + i;
            }
            if owner == 0 && t.owner[i].compare_exchange(0, tp, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                initialise(k * ENTRIES + i, tid);
                return k * ENTRIES + i;
            }
        }
        // All taken here: the entry of a thread that is gone.
        for i in (0..PROBES).map(at) {
            let (owner, had) = (t.owner[i].load(Ordering::Acquire), t.tid[i].load(Ordering::Acquire));
            if had > 0
                && gone(had)
                && t.owner[i].compare_exchange(owner, tp, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                initialise(k * ENTRIES + i, tid);
                return k * ENTRIES + i;
            }
        }
    }
    // No table could be had: this thread shares the spare block (never fails).
    usize::MAX
}

// The library's own `__tls_get_addr` (hidden: bound at link time by racewatch's calls, invisible to every
// other module). Callers may come with the stack misaligned, as for glibc's.
#[cfg(feature = "preload")]
std::arch::global_asm!(
    ".pushsection .text.racewatch_tls_get_addr,\"ax\",@progbits",
    ".globl __tls_get_addr",
    ".hidden __tls_get_addr",
    ".type __tls_get_addr,@function",
    "__tls_get_addr:",
    ".cfi_startproc",
    "push rbp",
    ".cfi_adjust_cfa_offset 8",
    ".cfi_rel_offset rbp, 0",
    "mov rbp, rsp",
    ".cfi_def_cfa_register rbp",
    "push rdi",
    "and rsp, -16",
    "call {block}",
    "mov rdi, [rbp - 8]",
    "add rax, [rdi + 8]",
    "leave",
    ".cfi_def_cfa rsp, 8",
    "ret",
    ".cfi_endproc",
    ".size __tls_get_addr, . - __tls_get_addr",
    ".popsection",
    block = sym racewatch_tls_block,
);

#[cfg(feature = "preload")]
extern "C" fn racewatch_tls_block() -> *mut u8 {
    block_of_this_thread()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: i32) -> bool {
        false
    }

    /// Whether no two of `items` are equal.
    fn all_distinct<T: Ord + Clone>(items: &[T]) -> bool {
        let mut sorted = items.to_vec();
        sorted.sort_unstable();
        sorted.windows(2).all(|pair| pair[0] != pair[1])
    }

    #[test]
    fn a_thread_keeps_its_entry_and_a_new_thread_on_the_same_descriptor_starts_afresh() {
        let tp = 0x7f00_dead_0740;
        let first = entry_for(tp, 1001, &|| 1000, &never);
        assert_eq!(entry_for(tp, 1001, &|| 1000, &never), first);
        // SAFETY: the entry is this test's (a thread pointer no real thread has).
        unsafe { block(first).write(0xab) };
        // glibc reused the descriptor for thread 1002: its block starts with the initial image.
        assert_eq!(entry_for(tp, 1002, &|| 1000, &never), first);
        assert_eq!(FIRST_TABLE.tid[first].load(Ordering::Relaxed), 1002);
        // SAFETY: as above.
        assert_ne!(unsafe { block(first).read() }, 0xab);
    }

    #[test]
    fn a_forked_child_keeps_the_forking_threads_block() {
        let tp = 0x7f00_beef_0740;
        let entry = entry_for(tp, 2001, &|| 2000, &never);
        // SAFETY: the entry is this test's.
        unsafe { block(entry).write(0x5a) };
        // In the child the thread's id is the child's pid.
        assert_eq!(entry_for(tp, 3000, &|| 3000, &never), entry);
        // SAFETY: as above.
        assert_eq!(unsafe { block(entry).read() }, 0x5a);
    }

    #[test]
    fn more_live_threads_than_a_table_holds_get_entries_of_their_own() {
        let entries: Vec<usize> =
            (0..5000).map(|i| entry_for(0x7d00_0000_0740 + i * 0x2_0000, 7000 + i as i32, &|| 1, &never)).collect();
        assert!(all_distinct(&entries));
        assert!(entries.iter().all(|&e| e != usize::MAX), "a thread was left with the spare block");
        assert!(entries.iter().any(|&e| e >= ENTRIES), "all in the first table");
        let blocks: Vec<usize> = entries.iter().map(|&e| block(e) as usize).collect();
        assert!(all_distinct(&blocks));
    }

    #[test]
    fn descriptors_get_entries_of_their_own() {
        let entries: Vec<usize> =
            (0..64).map(|i| entry_for(0x7e00_0000_0740 + i * 0x80_0000, 5000 + i as i32, &|| 1, &never)).collect();
        assert!(all_distinct(&entries));
    }
}
