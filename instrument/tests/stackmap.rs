//! The stack map reader on a real `.llvm_stackmaps`: clang-19 compiles and
//! links `tests/data/stackmaps.ll` (stackmap and patchpoint calls in two
//! functions) into an executable, and the decoded section must agree with
//! the symbol table, the machine code, and llvm-readobj.

use goblin::elf::Elf;
use iced_x86::{Decoder, DecoderOptions, Mnemonic};
use racewatch_instrument::format::stackmap::{
    parse, parse_all, LiveOut, LocationKind, StackMap, StackMapError, StackMapErrorKind,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/stackmaps.ll");
const BIG: u64 = 0x0123_4567_89ab_cdef;
const BIG_NEG: u64 = 0xfedc_ba98_7654_3210;

/// A linked executable built from the fixture, or `None` (with a visible
/// skip message) when clang-19 is not installed.
struct Built {
    file: Vec<u8>,
    path: PathBuf,
}

fn clang() -> Option<PathBuf> {
    let candidate = std::env::var_os("RACEWATCH_CLANG").map(PathBuf::from).unwrap_or_else(|| "clang-19".into());
    match Command::new(&candidate).arg("--version").output() {
        Ok(out) if out.status.success() => Some(candidate),
        _ => {
            eprintln!("SKIP: {} not found (apt-get install clang-19); stack map tests skipped", candidate.display());
            None
        }
    }
}

fn built() -> Option<&'static Built> {
    static BUILT: OnceLock<Option<Built>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let clang = clang()?;
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stackmap");
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            let path = dir.join("stackmaps");
            // -no-pie: function addresses in the section are resolved at link
            // time, so they must equal the symbol-table addresses.
            let out =
                Command::new(&clang).args(["-O2", "-no-pie", FIXTURE, "-o"]).arg(&path).output().expect("run clang");
            assert!(out.status.success(), "clang failed:\n{}", String::from_utf8_lossy(&out.stderr));
            Some(Built { file: std::fs::read(&path).expect("read executable"), path })
        })
        .as_ref()
}

fn elf(built: &Built) -> Elf<'_> {
    Elf::parse(&built.file).expect("parse ELF")
}

fn section_bytes<'a>(built: &'a Built, name: &str) -> &'a [u8] {
    let elf = elf(built);
    let sh = elf
        .section_headers
        .iter()
        .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(name))
        .unwrap_or_else(|| panic!("no {name} section"));
    &built.file[sh.sh_offset as usize..(sh.sh_offset + sh.sh_size) as usize]
}

/// (address, size) of a function symbol.
fn symbol(built: &Built, name: &str) -> (u64, u64) {
    let elf = elf(built);
    let sym = elf
        .syms
        .iter()
        .find(|s| elf.strtab.get_at(s.st_name) == Some(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    (sym.st_value, sym.st_size)
}

/// `len` bytes of the loaded image at virtual address `addr`.
fn code_at(built: &Built, addr: u64, len: usize) -> &[u8] {
    let elf = elf(built);
    let sh = elf
        .section_headers
        .iter()
        .find(|sh| sh.is_alloc() && sh.sh_addr <= addr && addr + len as u64 <= sh.sh_addr + sh.sh_size)
        .expect("address inside a section");
    let start = (sh.sh_offset + addr - sh.sh_addr) as usize;
    &built.file[start..start + len]
}

fn real_map(built: &Built) -> StackMap {
    parse(section_bytes(built, ".llvm_stackmaps")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn header_functions_and_constants() {
    let Some(built) = built() else { return };
    let map = real_map(built);
    assert_eq!(map.version, 3);
    let first = symbol(built, "sm_first");
    let second = symbol(built, "sm_second");
    let addresses: Vec<u64> = map.functions.iter().map(|f| f.address).collect();
    assert_eq!(addresses, [first.0, second.0], "function addresses must be the symbols' addresses");
    let counts: Vec<Option<u64>> = map.functions.iter().map(|f| f.record_count).collect();
    assert_eq!(counts, [Some(2), Some(2)]);
    assert!(map.functions.iter().all(|f| f.stack_size > 0 && f.stack_size % 8 == 0));
    // The large constant is pooled once although two records use it.
    assert_eq!(map.constants, [BIG, BIG_NEG]);
}

#[test]
fn records_and_locations() {
    let Some(built) = built() else { return };
    let map = real_map(built);
    let ids: Vec<u64> = map.records.iter().map(|r| r.id).collect();
    assert_eq!(ids, [101, 102, 201, 202]);
    let owners: Vec<Option<usize>> = map.records.iter().map(|r| r.function_index).collect();
    assert_eq!(owners, [Some(0), Some(0), Some(1), Some(1)]);
    let kinds = |i: usize| map.records[i].locations.iter().map(|l| l.kind).collect::<Vec<_>>();
    use LocationKind::*;

    // 101: %a in a register, 7 and -3 inline, the big constant from the pool.
    assert_eq!(kinds(0), [Register, Constant, Constant, ConstantIndex]);
    let locs = &map.records[0].locations;
    assert_eq!(locs[1].constant, Some(7));
    assert_eq!(locs[2].constant, Some(-3i64 as u64));
    assert_eq!((locs[3].offset, locs[3].constant), (0, Some(BIG)));

    // 102: the alloca as a frame address (rsp or rbp based), the pooled constant again.
    assert_eq!(kinds(1), [Direct, ConstantIndex]);
    let direct = &map.records[1].locations[0];
    assert!(direct.dwarf_reg == 6 || direct.dwarf_reg == 7, "Direct off rbp/rsp, got {direct:?}");
    assert_eq!(map.records[1].locations[1].constant, Some(BIG));

    // 201: eight values across a call; some in callee-saved registers, the
    // rest spilled to the frame; then the second pool constant.
    let k = kinds(2);
    assert_eq!(k.len(), 9);
    assert!(k.contains(&Register) && k.contains(&Indirect), "{k:?}");
    assert_eq!(k[8], ConstantIndex);
    assert_eq!(map.records[2].locations[8].constant, Some(BIG_NEG));
    for loc in map.records[2].locations.iter().filter(|l| l.kind == Indirect) {
        assert!(loc.dwarf_reg == 6 || loc.dwarf_reg == 7, "spill slot off rbp/rsp: {loc:?}");
    }

    // Every value is an i64 or a pointer.
    assert!(map.records.iter().flat_map(|r| &r.locations).all(|l| l.size == 8));
    // Only the patch point has live-out registers: 64-bit GPRs (DWARF 0..=16).
    assert!(map.records[..3].iter().all(|r| r.live_outs.is_empty()));
    let live = &map.records[3].live_outs;
    assert!(!live.is_empty());
    assert!(live.iter().all(|&LiveOut { dwarf_reg, size }| dwarf_reg <= 16 && size == 8), "{live:?}");
}

#[test]
fn record_pcs_land_in_their_functions() {
    let Some(built) = built() else { return };
    let map = real_map(built);
    let functions = [symbol(built, "sm_first"), symbol(built, "sm_second")];
    for (i, record) in map.records.iter().enumerate() {
        let pc = map.record_pc(i).expect("v3 records have a PC");
        let (start, size) = functions[record.function_index.unwrap()];
        assert_eq!(pc, start + u64::from(record.instruction_offset));
        assert!(pc > start && pc < start + size, "record {} at {pc:#x} outside its function", record.id);
    }
    // The patch point reserves 16 bytes of NOPs at its PC (null target).
    let pc = map.record_pc(3).unwrap();
    let mut decoder = Decoder::with_ip(64, code_at(built, pc, 16), pc, DecoderOptions::NONE);
    let mut covered = 0;
    while decoder.can_decode() {
        let insn = decoder.decode();
        assert_eq!(insn.mnemonic(), Mnemonic::Nop, "patch point bytes at {:#x}", insn.ip());
        covered += insn.len();
    }
    assert_eq!(covered, 16);
}

/// llvm-readobj's `--stackmap` text, rebuilt from our parse.
fn readobj_text(map: &StackMap) -> String {
    let mut s = String::new();
    writeln!(s, "LLVM StackMap Version: {}", map.version).unwrap();
    writeln!(s, "Num Functions: {}", map.functions.len()).unwrap();
    for f in &map.functions {
        let count = f.record_count.unwrap();
        writeln!(s, "  Function address: {}, stack size: {}, callsite record count: {count}", f.address, f.stack_size)
            .unwrap();
    }
    writeln!(s, "Num Constants: {}", map.constants.len()).unwrap();
    for (i, c) in map.constants.iter().enumerate() {
        writeln!(s, "  #{}: {c}", i + 1).unwrap();
    }
    writeln!(s, "Num Records: {}", map.records.len()).unwrap();
    for r in &map.records {
        writeln!(s, "  Record ID: {}, instruction offset: {}", r.id, r.instruction_offset).unwrap();
        writeln!(s, "    {} locations:", r.locations.len()).unwrap();
        for (i, l) in r.locations.iter().enumerate() {
            let what = match l.kind {
                LocationKind::Register => format!("Register R#{}", l.dwarf_reg),
                LocationKind::Direct => format!("Direct R#{} + {}", l.dwarf_reg, l.offset),
                LocationKind::Indirect => format!("Indirect [R#{} + {}]", l.dwarf_reg, l.offset),
                LocationKind::Constant => format!("Constant {}", l.offset as u32),
                LocationKind::ConstantIndex => format!("ConstantIndex #{} ({})", l.offset, l.constant.unwrap()),
            };
            writeln!(s, "      #{}: {what}, size: {}", i + 1, l.size).unwrap();
        }
        write!(s, "    {} live-outs: [ ", r.live_outs.len()).unwrap();
        for lo in &r.live_outs {
            write!(s, "R#{} ({}-bytes) ", lo.dwarf_reg, lo.size).unwrap();
        }
        writeln!(s, "]").unwrap();
    }
    s
}

#[test]
fn agrees_with_llvm_readobj() {
    let Some(built) = built() else { return };
    let readobj = Path::new("/usr/lib/llvm-19/bin/llvm-readobj");
    let Ok(out) = Command::new(readobj).arg("--stackmap").arg(&built.path).output() else {
        eprintln!("SKIP: {} not found (apt-get install llvm-19); cross-check skipped", readobj.display());
        return;
    };
    assert!(out.status.success(), "llvm-readobj failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let theirs = &text[text.find("LLVM StackMap Version").expect("llvm-readobj printed a stack map")..];
    assert_eq!(readobj_text(&real_map(built)), theirs);
}

/// The real section with `edit` applied.
fn edited(built: &Built, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = section_bytes(built, ".llvm_stackmaps").to_vec();
    edit(&mut bytes);
    bytes
}

#[test]
fn every_truncation_of_the_real_section_is_an_error() {
    let Some(built) = built() else { return };
    let bytes = section_bytes(built, ".llvm_stackmaps");
    for len in 0..bytes.len() {
        match parse(&bytes[..len]) {
            Err(StackMapError { offset, kind: StackMapErrorKind::Truncated(_) }) => {
                assert!(offset <= len, "len {len}: offset {offset}")
            }
            other => panic!("truncated to {len} of {} bytes: {other:?}", bytes.len()),
        }
    }
}

#[test]
fn malformed_real_sections() {
    let Some(built) = built() else { return };
    let map = real_map(built);
    // v3 layout: header 16, functions 24 each, constants 8 each; record 101
    // has a 16-byte header and 12-byte locations, its 4th is ConstantIndex.
    let record0 = 16 + 24 * map.functions.len() + 8 * map.constants.len();
    let loc3 = record0 + 16 + 12 * 3;
    let err = |bytes: Vec<u8>| parse(&bytes).unwrap_err();

    let cases: Vec<(&str, Vec<u8>, StackMapError)> = vec![
        (
            "version 4",
            edited(built, |b| b[0] = 4),
            StackMapError { offset: 0, kind: StackMapErrorKind::UnsupportedVersion(4) },
        ),
        (
            "version 0",
            edited(built, |b| b[0] = 0),
            StackMapError { offset: 0, kind: StackMapErrorKind::UnsupportedVersion(0) },
        ),
        (
            "constant index past the pool",
            edited(built, |b| b[loc3 + 8..loc3 + 12].copy_from_slice(&2i32.to_le_bytes())),
            StackMapError { offset: loc3 + 8, kind: StackMapErrorKind::BadConstantIndex { index: 2, constants: 2 } },
        ),
        (
            "negative constant index",
            edited(built, |b| b[loc3 + 8..loc3 + 12].copy_from_slice(&(-1i32).to_le_bytes())),
            StackMapError { offset: loc3 + 8, kind: StackMapErrorKind::BadConstantIndex { index: -1, constants: 2 } },
        ),
        (
            "location type 0",
            edited(built, |b| b[loc3] = 0),
            StackMapError { offset: loc3, kind: StackMapErrorKind::UnknownLocationType(0) },
        ),
        (
            "record counts 3 + 2 against 4 records",
            edited(built, |b| b[16 + 16] = 3),
            StackMapError { offset: 12, kind: StackMapErrorKind::RecordCountMismatch { num_records: 4, counted: 5 } },
        ),
        (
            "NumRecords 5 with counts 2 + 2",
            edited(built, |b| b[12] = 5),
            StackMapError { offset: 12, kind: StackMapErrorKind::RecordCountMismatch { num_records: 5, counted: 4 } },
        ),
        (
            "trailing bytes",
            edited(built, |b| b.extend_from_slice(&[3, 0, 0, 0])),
            StackMapError {
                offset: section_bytes(built, ".llvm_stackmaps").len(),
                kind: StackMapErrorKind::TrailingData(4),
            },
        ),
    ];
    for (what, bytes, expected) in cases {
        assert_eq!(err(bytes), expected, "{what}");
    }
    assert_eq!(err(edited(built, |b| b[0] = 9)).to_string(), ".llvm_stackmaps: unsupported version 9 at byte 0");
}

#[test]
fn concatenated_real_sections() {
    let Some(built) = built() else { return };
    let one = section_bytes(built, ".llvm_stackmaps");
    let two = [one, one].concat();
    let maps = parse_all(&two).unwrap();
    assert_eq!(maps.len(), 2);
    assert_eq!(maps[0], maps[1]);
    assert_eq!(maps[0], real_map(built));
}
