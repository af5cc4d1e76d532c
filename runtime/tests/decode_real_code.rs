//! The decoder on real compiler output: a small C file compiled by clang-19 -O2, its `.text` bytes taken
//! from the object file with goblin, and each function's accesses checked against the C semantics with
//! known register values (SysV: first arguments in RDI, RSI, RDX).

use iced_x86::{Decoder, DecoderOptions};
use racewatch::decode::{access_at, access_ending_at, warm_up, CodeSlice, MemAccess, Regs, MAX_LOOKAHEAD};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const SOURCE: &str = r#"
struct node { long key; int val; short tag; char flag; struct node *next; };

long sum_list(const struct node *n) {
    long s = 0;
    while (n) { s += n->key + n->val; n = n->next; }
    return s;
}

void store_at(int *a, long i, int v) { a[i + 3] = v; }

long scaled_load(const long *p, long x) { x = x * 3; return p[1] + x; }

void bump(struct node *n) { n->tag += 1; n->flag = 1; }

int fetch_add(int *p) { return __atomic_fetch_add(p, 1, __ATOMIC_RELAXED); }
"#;

/// Where the test pretends `.text` is loaded.
const TEXT: u64 = 0x5555_0000_0000;
const RDI: usize = 7;
const RSI: usize = 6;
const RDX: usize = 2;
/// The struct node pointer / int array passed in RDI.
const OBJ: u64 = 0x7f00_1234_5600;

fn clang() -> Option<PathBuf> {
    let candidate = std::env::var_os("RACEWATCH_CLANG").map(PathBuf::from).unwrap_or_else(|| "clang-19".into());
    match Command::new(&candidate).arg("--version").output() {
        Ok(out) if out.status.success() => Some(candidate),
        _ => {
            eprintln!(
                "SKIP: {} not found (apt-get install clang-19); real-code decode test skipped",
                candidate.display()
            );
            None
        }
    }
}

struct Object {
    text: Vec<u8>,
    /// name -> (start address, size)
    funcs: Vec<(String, u64, u64)>,
}

impl Object {
    fn func(&self, name: &str) -> (u64, u64) {
        let (_, start, size) =
            self.funcs.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("no symbol {name}"));
        (*start, *size)
    }
    fn code(&self) -> CodeSlice<'_> {
        CodeSlice { base: TEXT, bytes: &self.text }
    }
    /// Addresses at which each instruction of `name` ends (decoded independently with iced).
    fn insn_ends(&self, name: &str) -> Vec<u64> {
        let (start, size) = self.func(name);
        let off = (start - TEXT) as usize;
        let bytes = &self.text[off..off + size as usize];
        Decoder::with_ip(64, bytes, start, DecoderOptions::NONE).into_iter().map(|i| i.next_ip()).collect()
    }
}

fn compile(dir: &Path) -> Object {
    let clang = clang().expect("clang");
    let src = dir.join("real.c");
    let obj = dir.join("real.o");
    std::fs::write(&src, SOURCE).unwrap();
    let out = Command::new(clang).args(["-O2", "-c", "-o"]).arg(&obj).arg(&src).output().unwrap();
    assert!(out.status.success(), "clang failed: {}", String::from_utf8_lossy(&out.stderr));
    let file = std::fs::read(&obj).unwrap();
    let elf = goblin::elf::Elf::parse(&file).unwrap();
    let (text_index, text_hdr) = elf
        .section_headers
        .iter()
        .enumerate()
        .find(|(_, h)| elf.shdr_strtab.get_at(h.sh_name) == Some(".text"))
        .expect(".text");
    let range = text_hdr.file_range().expect(".text has bytes");
    let text = file[range].to_vec();
    let funcs = elf
        .syms
        .iter()
        .filter(|s| s.is_function() && s.st_shndx == text_index)
        .map(|s| (elf.strtab.get_at(s.st_name).unwrap_or("").to_string(), TEXT + s.st_value, s.st_size))
        .collect();
    Object { text, funcs }
}

/// The compiled object, built once for all tests of this file (they run in parallel).
fn object() -> Option<&'static Object> {
    static OBJECT: OnceLock<Option<Object>> = OnceLock::new();
    warm_up();
    OBJECT
        .get_or_init(|| {
            clang()?;
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("decode_real_code");
            std::fs::create_dir_all(&dir).unwrap();
            Some(compile(&dir))
        })
        .as_ref()
}

fn regs(rip: u64, rdi: u64, rsi: u64, rdx: u64) -> Regs {
    let mut regs = Regs { rip, ..Regs::default() };
    regs.gpr[RDI] = rdi;
    regs.gpr[RSI] = rsi;
    regs.gpr[RDX] = rdx;
    regs
}

/// Checks that the trap path (decoding from the function start to the instruction ending at `a.pc + a.len`)
/// finds the same access the sample path found.
fn same_on_trap(obj: &Object, name: &str, a: MemAccess, regs: &Regs) {
    let (start, size) = obj.func(name);
    let t = access_ending_at(&obj.code(), start, size, a.pc + u64::from(a.len), regs);
    assert_eq!(t, Some(a), "{name}: trap after the access at {:#x}", a.pc);
}

#[test]
fn indexed_store() {
    let Some(obj) = object() else { return };
    let (start, _) = obj.func("store_at");
    // store_at(a = OBJ, i = 5, v = 42): a[i + 3] = v
    let r = regs(start, OBJ, 5, 42);
    let a = access_at(&obj.code(), &r, MAX_LOOKAHEAD).expect("store found");
    assert_eq!((a.pc, a.addr, a.size, a.is_read, a.is_write, a.locked), (start, OBJ + 4 * 8, 4, false, true, false));
    same_on_trap(obj, "store_at", a, &r);
}

#[test]
fn load_found_by_lookahead_past_arithmetic() {
    let Some(obj) = object() else { return };
    let (start, _) = obj.func("scaled_load");
    // scaled_load(p = OBJ, x = 7): x * 3 is computed first, then p[1] is loaded
    let r = regs(start, OBJ, 7, 0);
    let a = access_at(&obj.code(), &r, MAX_LOOKAHEAD).expect("load found");
    assert!(a.pc > start, "the first instruction computes x * 3");
    assert_eq!((a.addr, a.size, a.is_read, a.is_write), (OBJ + 8, 8, true, false));
    same_on_trap(obj, "scaled_load", a, &r);
}

#[test]
fn linked_list_walk() {
    let Some(obj) = object() else { return };
    let (start, size) = obj.func("sum_list");
    let r = regs(0, OBJ, 0, 0);
    // The entry tests n for NULL and branches: no access before the branch.
    assert_eq!(access_at(&obj.code(), &Regs { rip: start, ..r }, MAX_LOOKAHEAD), None);

    // A trap after each instruction of the function: exactly the three field loads are accesses.
    let found: Vec<MemAccess> = obj
        .insn_ends("sum_list")
        .into_iter()
        .filter_map(|end| access_ending_at(&obj.code(), start, size, end, &Regs { rip: end, ..r }))
        .collect();
    let fields: Vec<(u64, u8, bool)> = found.iter().map(|a| (a.addr, a.size, a.addr_known)).collect();
    assert_eq!(fields.len(), 3, "{found:#x?}");
    assert!(fields.contains(&(OBJ, 8, true)), "n->key: {found:#x?}");
    assert!(fields.contains(&(OBJ + 8, 4, true)), "n->val: {found:#x?}");
    // n = n->next overwrites the base register: after the trap the address cannot be recomputed
    let next = found.iter().find(|a| !a.addr_known).expect("n->next load with unknown address");
    assert_eq!((next.size, next.is_read, next.is_write), (8, true, false));
    assert!(found.iter().all(|a| a.is_read && !a.is_write && !a.locked));

    // Sampled at each load, the address is computed from the registers at the sample.
    for a in found.iter().filter(|a| a.addr_known) {
        let at = access_at(&obj.code(), &Regs { rip: a.pc, ..r }, 0);
        assert_eq!(at, Some(*a));
    }
    let at_next = access_at(&obj.code(), &Regs { rip: next.pc, ..r }, 0).expect("n->next");
    assert_eq!((at_next.addr, at_next.addr_known), (OBJ + 16, true));
}

#[test]
fn adjacent_fields_have_disjoint_byte_ranges() {
    let Some(obj) = object() else { return };
    let (start, _) = obj.func("bump");
    let r = regs(start, OBJ, 0, 0);
    // n->tag += 1: read-modify-write of 2 bytes at offset 12
    let tag = access_at(&obj.code(), &r, MAX_LOOKAHEAD).expect("tag");
    assert_eq!((tag.pc, tag.addr, tag.size, tag.is_read, tag.is_write), (start, OBJ + 12, 2, true, true));
    same_on_trap(obj, "bump", tag, &r);
    // n->flag = 1: write of 1 byte at offset 14, right after the tag
    let next = Regs { rip: tag.pc + u64::from(tag.len), ..r };
    let flag = access_at(&obj.code(), &next, MAX_LOOKAHEAD).expect("flag");
    assert_eq!((flag.addr, flag.size, flag.is_read, flag.is_write), (OBJ + 14, 1, false, true));
    assert!(tag.addr + u64::from(tag.size) <= flag.addr);
    same_on_trap(obj, "bump", flag, &r);
}

#[test]
fn atomic_rmw_is_locked_and_found_by_the_lookahead() {
    let Some(obj) = object() else { return };
    let (start, _) = obj.func("fetch_add");
    let r = regs(start, OBJ, 0, 0);
    // mov eax, 1 then lock xadd: the look-ahead reaches the atomic, flagged locked
    let ends = obj.insn_ends("fetch_add");
    let xadd_pc = ends[0];
    let ahead = access_at(&obj.code(), &r, MAX_LOOKAHEAD).expect("xadd ahead");
    assert_eq!((ahead.pc, ahead.addr, ahead.locked), (xadd_pc, OBJ, true));
    // sampled on the atomic itself
    let a = access_at(&obj.code(), &Regs { rip: xadd_pc, ..r }, 0).expect("xadd");
    assert_eq!((a.addr, a.size, a.is_read, a.is_write, a.locked), (OBJ, 4, true, true, true));
    same_on_trap(obj, "fetch_add", a, &r);
}
