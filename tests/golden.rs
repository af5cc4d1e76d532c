//! Golden checks on real binaries: the PC tables decoded by
//! `racewatch_instrument::elf` must land exactly on the atomic instructions
//! of known functions, as GNU objdump disassembles them, and `verify` must
//! agree with the code.

mod common;

use racewatch_instrument::elf::Module;
use racewatch_instrument::format::pcsections::{parse_section_name, TableKind, FEATURE_ATOMICS, FEATURE_UAR};
use racewatch_instrument::verify::{self, BadPc, Finding};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Functions with known atomics, and the instructions (objdump Intel syntax,
/// as a prefix) that must be tagged in each, in address order.
const C_SOURCE: &str = r#"
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

_Atomic uint64_t counter;
_Atomic uint64_t flag;
uint64_t plain_value;

__attribute__((noinline)) uint64_t rw_fetch_add(uint64_t n) {
    return atomic_fetch_add_explicit(&counter, n, memory_order_seq_cst);
}
__attribute__((noinline)) void rw_add_only(uint64_t n) {
    atomic_fetch_add_explicit(&counter, n, memory_order_relaxed);
}
__attribute__((noinline)) uint64_t rw_exchange(uint64_t v) {
    return atomic_exchange_explicit(&flag, v, memory_order_acq_rel);
}
__attribute__((noinline)) int rw_cas(uint64_t expected, uint64_t desired) {
    return atomic_compare_exchange_strong_explicit(&flag, &expected, desired,
                                                   memory_order_seq_cst, memory_order_seq_cst);
}
__attribute__((noinline)) void rw_store_seq_cst(uint64_t v) {
    atomic_store_explicit(&flag, v, memory_order_seq_cst);
}
__attribute__((noinline)) uint64_t rw_load_acquire(void) {
    return atomic_load_explicit(&flag, memory_order_acquire);
}
__attribute__((noinline)) void rw_store_relaxed(uint64_t v) {
    atomic_store_explicit(&counter, v, memory_order_relaxed);
}
__attribute__((noinline)) void rw_fence(void) {
    atomic_thread_fence(memory_order_seq_cst);
}
__attribute__((noinline)) uint64_t rw_plain(uint64_t v) {
    plain_value += v;
    return plain_value;
}
int main(int argc, char **argv) {
    (void)argv;
    uint64_t s = rw_fetch_add(argc);
    rw_add_only(2);
    s += rw_exchange(3);
    s += rw_cas(3, 4);
    rw_store_seq_cst(5);
    s += rw_load_acquire();
    rw_store_relaxed(6);
    rw_fence();
    s += rw_plain(7);
    printf("%llu\n", (unsigned long long)s);
    return 0;
}
"#;

/// (function, tagged instructions in order). `sete` after `lock cmpxchg` is
/// LLVM copying the cmpxchg's PC section onto the success-flag instruction.
const C_EXPECTED: &[(&str, &[&str])] = &[
    ("rw_fetch_add", &["lock xadd QWORD PTR"]),
    ("rw_add_only", &["lock add QWORD PTR"]),
    ("rw_exchange", &["xchg QWORD PTR"]),
    ("rw_cas", &["lock cmpxchg QWORD PTR", "sete"]),
    ("rw_store_seq_cst", &["xchg QWORD PTR"]),
    ("rw_load_acquire", &["mov rax,QWORD PTR"]),
    ("rw_store_relaxed", &["mov QWORD PTR"]),
    ("rw_fence", &["mfence"]),
    ("rw_plain", &[]),
];

/// One instruction as objdump prints it.
#[derive(Debug)]
struct Insn {
    /// The symbol objdump files it under (demangled, hash suffix removed).
    function: String,
    /// Intel syntax, whitespace collapsed, comment removed.
    text: String,
}

/// `objdump -d -C --no-show-raw-insn -M intel`, keyed by address.
fn objdump(path: &Path) -> BTreeMap<u64, Insn> {
    let out = common::check(
        Command::new("objdump")
            .args(["-d", "-C", "--no-show-raw-insn", "-M", "intel"])
            .arg(path)
            .output()
            .expect("run GNU objdump"),
        "objdump",
    );
    let mut insns = BTreeMap::new();
    let mut function = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "0000000000001160 <rw_fetch_add>:"
        if let Some((addr, rest)) = line.split_once(" <") {
            if u64::from_str_radix(addr, 16).is_ok() && rest.ends_with(">:") {
                function = strip_hash(&rest[..rest.len() - 2]).to_string();
                continue;
            }
        }
        // "    1167:\tlock xadd QWORD PTR [rip+0x2f20],rax        # 4090 <counter>"
        let Some((addr, text)) = line.trim_start().split_once(":\t") else { continue };
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        let text = text.split(" #").next().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ");
        insns.insert(addr, Insn { function: function.clone(), text });
    }
    insns
}

/// `golden::bump::h0123456789abcdef` -> `golden::bump`.
fn strip_hash(name: &str) -> &str {
    match name.rsplit_once("::h") {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => stem,
        _ => name,
    }
}

/// Checks every atomic PC against objdump and the per-function
/// expectations; returns the module for further checks.
fn check_golden(binary: &Path, expected: &[(&str, &[&str])]) -> Module {
    let module = Module::open(binary).expect("read the binary");
    assert!(module.decode_errors().next().is_none(), "decode errors: {:?}", module.decode_errors().collect::<Vec<_>>());
    assert!(!module.atomics.is_empty(), "no atomic PCs in {}", binary.display());
    let insns = objdump(binary);

    // Every decoded PC is exactly an instruction start that objdump lists.
    let mut tagged: BTreeMap<String, Vec<(u64, &str)>> = BTreeMap::new();
    for &pc in &module.atomics {
        let insn = insns.get(&pc).unwrap_or_else(|| panic!("atomic PC {pc:#x} is not an instruction start in objdump"));
        tagged.entry(insn.function.clone()).or_default().push((pc, &insn.text));
    }

    for &(function, mnemonics) in expected {
        let start = module
            .functions
            .iter()
            .find(|f| f.name == function)
            .unwrap_or_else(|| panic!("{function} not in the symbol table"))
            .address;
        let covered = module.covered.iter().find(|c| c.pc == start);
        assert!(covered.is_some(), "{function} at {start:#x} is not covered");
        let got = tagged.get(function).map(Vec::as_slice).unwrap_or(&[]);
        assert_eq!(got.len(), mnemonics.len(), "{function}: tagged {got:#x?}, expected {mnemonics:?}");
        for (&(pc, text), want) in got.iter().zip(mnemonics) {
            assert!(text.starts_with(want), "{function}: {pc:#x} is `{text}`, expected `{want}…`");
        }
    }
    let report = verify::verify(&module);
    assert!(report.passed(), "verify failed on {}: {:#?}", binary.display(), report.findings);
    assert_eq!(report.atomic_pcs, module.atomics.len());
    module
}

fn c_golden(name: &str, extra: &[&str]) -> Option<Module> {
    let clang = common::clang()?;
    let dir = common::scratch(name);
    let mut flags = vec!["-fexperimental-sanitize-metadata=atomics,uar"];
    flags.extend_from_slice(extra);
    let binary = common::build_c(&clang, &dir, "golden", C_SOURCE, &flags);
    Some(check_golden(&binary, C_EXPECTED))
}

/// Names of the PC sections of `module`.
fn table_names(module: &Module, kind: TableKind) -> Vec<String> {
    module.tables.iter().filter(|t| t.id.kind == kind).map(|t| t.name.clone()).collect()
}

#[test]
fn c_atomics_land_on_atomic_instructions() {
    let Some(module) = c_golden("golden_c", &[]) else { return };
    assert_eq!(table_names(&module, TableKind::Atomics), ["sanmd_atomics2"]);
    assert_eq!(table_names(&module, TableKind::Covered), ["sanmd_covered2"]);
    // Every covered function has its atomics analysed; `uar` marks the
    // functions it analysed for use-after-return (here `main`).
    assert!(module.covered.iter().all(|c| c.features & FEATURE_ATOMICS != 0), "{:?}", module.covered);
    let main = module.functions.iter().find(|f| f.name == "main").unwrap();
    let main_entry = module.covered.iter().find(|c| c.pc == main.address).expect("main is covered");
    assert_ne!(main_entry.features & FEATURE_UAR, 0, "{main_entry:?}");
}

#[test]
fn c_large_code_model_uses_wide_entries() {
    let Some(module) = c_golden("golden_c_large", &["-mcmodel=large"]) else { return };
    assert_eq!(table_names(&module, TableKind::Atomics), ["sanmd_atomics65538"]);
    assert_eq!(table_names(&module, TableKind::Covered), ["sanmd_covered65538"]);
    assert!(module.tables.iter().all(|t| t.id.version.wide()));
}

const RUST_SOURCE: &str = r#"
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);
static FLAG: AtomicU64 = AtomicU64::new(0);
static mut PLAIN: u64 = 0;

#[inline(never)]
fn bump(n: u64) -> u64 {
    COUNTER.fetch_add(n, Ordering::SeqCst)
}

#[inline(never)]
fn swap_flag(v: u64) -> u64 {
    FLAG.swap(v, Ordering::AcqRel)
}

#[inline(never)]
fn try_claim(expected: u64, new: u64) -> bool {
    FLAG.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

#[inline(never)]
fn read_flag() -> u64 {
    FLAG.load(Ordering::Acquire)
}

#[inline(never)]
fn plain(v: u64) -> u64 {
    unsafe {
        let p = &raw mut PLAIN;
        *p += v;
        *p
    }
}

fn main() {
    let n = std::env::args().count() as u64;
    let mut s = bump(n);
    s += swap_flag(n);
    s += try_claim(n, 2) as u64;
    s += read_flag();
    s += plain(n);
    println!("{s}");
}
"#;

const RUST_EXPECTED: &[(&str, &[&str])] = &[
    ("golden::bump", &["lock xadd QWORD PTR"]),
    ("golden::swap_flag", &["xchg QWORD PTR"]),
    ("golden::try_claim", &["lock cmpxchg QWORD PTR", "sete"]),
    ("golden::read_flag", &["mov rax,QWORD PTR"]),
    ("golden::plain", &[]),
    ("golden::main", &[]),
];

#[test]
fn rust_atomics_land_on_atomic_instructions() {
    let dir = common::scratch("golden_rust");
    let binary = common::build_rust(&dir, "golden", RUST_SOURCE, &[]);
    let module = check_golden(&binary, RUST_EXPECTED);
    // Precompiled std is not covered (it was built without the pass).
    let std_fn = module
        .functions
        .iter()
        .find(|f| f.name.starts_with("std::rt::lang_start_internal"))
        .expect("std::rt::lang_start_internal is linked in");
    assert!(
        module.covered_containing(std_fn.address).is_none(),
        "{} at {:#x} should not be covered",
        std_fn.name,
        std_fn.address
    );
}

const ASM_GAP_SOURCE: &str = r#"
#include <stdatomic.h>
#include <stdint.h>
_Atomic uint64_t tracked;
uint64_t hidden;
__attribute__((noinline)) void asm_bump(void) {
    atomic_fetch_add_explicit(&tracked, 1, memory_order_relaxed);
    __asm__ volatile("lock addq $1, %0" : "+m"(hidden));
}
int main(void) { asm_bump(); return (int)hidden - 1; }
"#;

/// Builds the inline-asm program; shared with tests/cli_verify.rs in spirit.
fn asm_gap_binary(name: &str) -> Option<std::path::PathBuf> {
    let clang = common::clang()?;
    let dir = common::scratch(name);
    Some(common::build_c(&clang, &dir, "asm_gap", ASM_GAP_SOURCE, &[]))
}

#[test]
fn inline_asm_atomic_is_a_likely_gap() {
    let Some(binary) = asm_gap_binary("golden_asm_gap") else { return };
    let module = Module::open(&binary).unwrap();
    let report = verify::verify(&module);
    assert!(!report.passed());
    let insns = objdump(&binary);
    match report.findings.as_slice() {
        [Finding::LikelyGap { pc, function, disassembly }] => {
            assert_eq!(function, "asm_bump");
            assert!(disassembly.starts_with("lock add qword ptr"), "{disassembly}");
            let insn = &insns[pc];
            assert_eq!(insn.function, "asm_bump");
            assert!(insn.text.starts_with("lock add QWORD PTR"), "{}", insn.text);
            assert!(!module.atomics.contains(pc));
        }
        other => panic!("expected exactly one likely gap, got {other:#?}"),
    }
    // The compiler's own atomic in the same function is tagged and fine.
    assert_eq!(report.atomic_pcs, 1);
}

/// Rewrites the atomics table entry that points at `from` to point at `to`.
fn retarget_atomic(binary: &Path, module: &Module, from: u64, to: u64) -> Vec<u8> {
    let table = module.tables.iter().find(|t| t.id.kind == TableKind::Atomics).expect("an atomics table");
    let id = parse_section_name(&table.name).unwrap();
    let width = id.version.offset_size();
    let offset = module.section_file_offset(&table.name).unwrap();
    let mut bytes = std::fs::read(binary).unwrap();
    for i in 0..table.entries {
        let at = offset + i * width;
        let entry = table.address + (i * width) as u64;
        let rel = if width == 8 {
            i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
        } else {
            i64::from(i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()))
        };
        if entry.wrapping_add_signed(rel) == from {
            let new = to.wrapping_sub(entry) as i64;
            if width == 8 {
                bytes[at..at + 8].copy_from_slice(&new.to_le_bytes());
            } else {
                bytes[at..at + 4].copy_from_slice(&i32::try_from(new).unwrap().to_le_bytes());
            }
            return bytes;
        }
    }
    panic!("no atomics entry points at {from:#x}");
}

#[test]
fn corrupted_atomic_pc_is_reported() {
    let Some(clang) = common::clang() else { return };
    let dir = common::scratch("golden_corrupt");
    let binary = common::build_c(&clang, &dir, "golden", C_SOURCE, &[]);
    let module = Module::open(&binary).unwrap();
    let load = module.functions.iter().find(|f| f.name == "rw_load_acquire").unwrap();
    let from = *module.atomics.iter().find(|&&pc| load.contains(pc)).expect("tagged load");
    // Move the tag from the acquire load onto the function's first
    // instruction (`push rbp`: no memory operand).
    let corrupt = dir.join("golden_corrupt");
    std::fs::write(&corrupt, retarget_atomic(&binary, &module, from, load.address)).unwrap();

    let bad = Module::open(&corrupt).unwrap();
    assert!(bad.atomics.contains(&load.address) && !bad.atomics.contains(&from));
    let report = verify::verify(&bad);
    assert!(!report.passed());
    match report.findings.as_slice() {
        [Finding::BadAtomicPc { pc, function, reason: BadPc::NoMemoryAccess { disassembly } }] => {
            assert_eq!(*pc, load.address);
            assert_eq!(function.as_deref(), Some("rw_load_acquire"));
            assert_eq!(disassembly, "push rbp");
        }
        other => panic!("expected one bad atomic PC, got {other:#?}"),
    }
}
