//! Reading a whole ELF file: every PC-keyed table, at link-time addresses,
//! and the functions of its symbol table.
//!
//! Only 64-bit little-endian x86-64 executables and shared objects are read.
//! A table that fails to decode keeps the entries decoded before the error
//! and records the error in [`Table::error`]; the file still loads.

use crate::format::pcsections::{
    decode_atomics_checked, decode_covered_checked, for_each_atomic, for_each_covered, parse_section_name,
    CoveredEntry, DecodeError, ErrorKind, SectionId, TableKind,
};
use crate::format::stackmap::{self, StackMap, StackMapError};
use crate::symbols::{self, find_function, functions_from_symbols, RawSymbol, SourceMap};
use goblin::container::{Container, Ctx, Endian};
use goblin::elf::header::{self, EM_X86_64, ET_DYN, ET_EXEC, ET_REL};
use goblin::elf::program_header::{ProgramHeader, PT_LOAD};
use goblin::elf::section_header::{SectionHeader, SHF_ALLOC, SHF_COMPRESSED, SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB};
use goblin::elf::sym::{Symtab, STB_LOCAL, STT_FUNC, STT_GNU_IFUNC, STT_OBJECT};
use std::fmt;
use std::path::{Path, PathBuf};

/// One PC section found in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub id: SectionId,
    /// The section name as written in the file.
    pub name: String,
    /// Link-time address of the section (the base of its relative PCs).
    pub address: u64,
    /// Size of the section in bytes.
    pub size: u64,
    /// Entries decoded (all of them, or those before [`Table::error`]).
    pub entries: usize,
    pub error: Option<DecodeError>,
    /// Set when the table was decoded with the other PC-offset width than its version declares: why.
    pub note: Option<String>,
}

/// An ELF file with its tables decoded.
pub struct Module {
    pub path: PathBuf,
    /// Every PC section, in section-header order.
    pub tables: Vec<Table>,
    /// Every covered table merged, sorted by PC.
    pub covered: Vec<CoveredEntry>,
    /// Every atomics table merged, sorted, without duplicates.
    pub atomics: Vec<u64>,
    /// The `.llvm_stackmaps` section, when the file has one. Several stack
    /// maps placed back to back by the linker are merged into one.
    pub stackmap: Option<Result<StackMap, StackMapError>>,
    /// Functions of `.symtab` (or `.dynsym`), sorted by address.
    pub functions: Vec<symbols::Function>,
    /// Data objects of `.symtab` (or `.dynsym`): globals and statics (`STT_OBJECT`, not thread-local),
    /// sorted by address, one per address.
    pub objects: Vec<symbols::Function>,
    bytes: Vec<u8>,
    sections: Vec<Section>,
    segments: Vec<Segment>,
}

/// What the reader keeps of a section header.
#[derive(Clone, Debug)]
struct Section {
    name: String,
    kind: u32,
    flags: u64,
    addr: u64,
    /// File range, clipped to the file.
    data: std::ops::Range<usize>,
    size: u64,
}

/// A `PT_LOAD` segment's file-backed part.
#[derive(Clone, Debug)]
struct Segment {
    vaddr: u64,
    data: std::ops::Range<usize>,
}

/// Why a file could not be read. Display is one line naming the file.
#[derive(Debug)]
pub enum ElfError {
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    NotElf {
        path: PathBuf,
    },
    /// Valid ELF that racewatch does not read (not x86-64, not 64-bit
    /// little-endian, relocatable object, core file…).
    Unsupported {
        path: PathBuf,
        what: String,
    },
    /// Headers that point outside the file or make no sense.
    Malformed {
        path: PathBuf,
        what: String,
    },
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ElfError::NotElf { path } => write!(f, "{}: not an ELF file", path.display()),
            ElfError::Unsupported { path, what } => write!(f, "{}: unsupported: {what}", path.display()),
            ElfError::Malformed { path, what } => write!(f, "{}: malformed ELF: {what}", path.display()),
        }
    }
}

impl std::error::Error for ElfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ElfError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Module {
    /// Reads and decodes the file at `path`.
    pub fn open(path: &Path) -> Result<Module, ElfError> {
        let bytes = std::fs::read(path).map_err(|source| ElfError::Io { path: path.to_path_buf(), source })?;
        Module::from_bytes(path, bytes)
    }

    /// Decodes a file already in memory; `path` is only used for messages.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Module, ElfError> {
        let unsupported = |what: String| ElfError::Unsupported { path: path.to_path_buf(), what };
        let malformed = |what: String| ElfError::Malformed { path: path.to_path_buf(), what };

        if bytes.get(..header::SELFMAG) != Some(&header::ELFMAG[..]) {
            return Err(ElfError::NotElf { path: path.to_path_buf() });
        }
        if bytes.get(header::EI_CLASS) != Some(&header::ELFCLASS64) {
            return Err(unsupported("not a 64-bit ELF file".into()));
        }
        if bytes.get(header::EI_DATA) != Some(&header::ELFDATA2LSB) {
            return Err(unsupported("not a little-endian ELF file".into()));
        }
        let hdr = goblin::elf::Elf::parse_header(&bytes).map_err(|e| malformed(format!("ELF header: {e}")))?;
        if hdr.e_machine != EM_X86_64 {
            return Err(unsupported(format!(
                "machine {} (only x86-64 is supported)",
                goblin::elf::header::machine_to_str(hdr.e_machine)
            )));
        }
        let relocatable = match hdr.e_type {
            ET_EXEC | ET_DYN => false,
            ET_REL => true,
            other => return Err(unsupported(format!("ELF type {} ({other})", header::et_to_str(other)))),
        };
        let ctx = Ctx::new(Container::Big, Endian::Little);
        let len = bytes.len();
        let clip = |offset: u64, size: u64| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(len);
            let end = usize::try_from(offset.saturating_add(size)).unwrap_or(usize::MAX).min(len);
            start..end
        };

        let phdrs = if hdr.e_phoff == 0 {
            Vec::new()
        } else {
            ProgramHeader::parse(&bytes, hdr.e_phoff as usize, hdr.e_phnum as usize, ctx)
                .map_err(|e| malformed(format!("program headers: {e}")))?
        };
        let segments = phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| Segment { vaddr: p.p_vaddr, data: clip(p.p_offset, p.p_filesz) })
            .collect();

        let shdrs = if hdr.e_shoff == 0 {
            Vec::new()
        } else {
            SectionHeader::parse(&bytes, hdr.e_shoff as usize, hdr.e_shnum as usize, ctx)
                .map_err(|e| malformed(format!("section headers: {e}")))?
        };
        let shstrndx = if hdr.e_shstrndx as u32 == goblin::elf::section_header::SHN_XINDEX {
            shdrs.first().map_or(0, |s| s.sh_link as usize)
        } else {
            hdr.e_shstrndx as usize
        };
        let shstrtab = shdrs.get(shstrndx).map_or(&[][..], |s| &bytes[clip(s.sh_offset, s.sh_size)]);
        let sections: Vec<Section> = shdrs
            .iter()
            .map(|s| Section {
                name: cstr(shstrtab, s.sh_name).unwrap_or("").to_string(),
                kind: s.sh_type,
                flags: s.sh_flags,
                addr: s.sh_addr,
                data: if s.sh_type == SHT_NOBITS { 0..0 } else { clip(s.sh_offset, s.sh_size) },
                size: s.sh_size,
            })
            .collect();

        // A relocatable file with code is an object file whose PCs need relocation; one without (dwz's
        // multifile, DWARF that several debug files share) is read for its debug info and build-id.
        let has_code = sections
            .iter()
            .any(|s| s.flags & u64::from(goblin::elf::section_header::SHF_EXECINSTR) != 0 && !s.data.is_empty());
        if relocatable && has_code {
            return Err(unsupported(
                "relocatable object (.o): its PCs need relocation; link it into an executable or shared library first"
                    .into(),
            ));
        }
        let functions = read_symbols(&bytes, &shdrs, ctx, &[STT_FUNC, STT_GNU_IFUNC]);
        let objects = read_symbols(&bytes, &shdrs, ctx, &[STT_OBJECT]);
        let mut module = Module {
            path: path.to_path_buf(),
            tables: Vec::new(),
            covered: Vec::new(),
            atomics: Vec::new(),
            stackmap: None,
            functions,
            objects,
            bytes,
            sections,
            segments,
        };
        module.decode_tables();
        module.stackmap = module.section_data(".llvm_stackmaps").map(|(_, data)| read_stackmaps(data));
        Ok(module)
    }

    fn decode_tables(&mut self) {
        // Where PCs may point: the code sections, at link-time addresses.
        let exec = u64::from(goblin::elf::section_header::SHF_EXECINSTR);
        let code: Vec<(u64, u64)> = self
            .sections
            .iter()
            .filter(|s| s.flags & exec != 0 && s.flags & u64::from(SHF_ALLOC) != 0)
            .map(|s| (s.addr, s.addr.saturating_add(s.size)))
            .collect();
        let is_code = |start: u64, len: u64| {
            code.iter().any(|&(s, e)| start >= s && start.checked_add(len).is_some_and(|end| end <= e))
        };
        for section in &self.sections {
            let Some(id) = parse_section_name(&section.name) else { continue };
            let data = &self.bytes[section.data.clone()];
            let mut entries = 0;
            let mut note = None;
            // A table whose declared width does not fit is decoded with the other one when that fits; one
            // that fits neither is refused when its entries point outside the code (or it ends early),
            // and otherwise keeps the entries decoded before its first error.
            let checked = match id.kind {
                TableKind::Covered => decode_covered_checked(data, section.addr, id.version, &is_code).map(|c| {
                    note = c.width_note(id.version);
                    entries = c.entries.len();
                    self.covered.extend(c.entries);
                }),
                TableKind::Atomics => decode_atomics_checked(data, section.addr, id.version, &is_code).map(|c| {
                    note = c.width_note(id.version);
                    entries = c.entries.len();
                    self.atomics.extend(c.entries);
                }),
            };
            let result = match checked {
                Ok(()) => Ok(()),
                Err(w)
                    if matches!(
                        w.error.kind,
                        ErrorKind::PcNotCode(_) | ErrorKind::FunctionOverrunsCode { .. } | ErrorKind::EndsEarly
                    ) =>
                {
                    Err(w.error)
                }
                Err(_) => match id.kind {
                    TableKind::Covered => for_each_covered(data, section.addr, id.version, |e| {
                        entries += 1;
                        self.covered.push(e);
                    }),
                    TableKind::Atomics => for_each_atomic(data, section.addr, id.version, |pc| {
                        entries += 1;
                        self.atomics.push(pc);
                    }),
                },
            };
            let mut error = result.err();
            if error.is_none() && section.kind != SHT_NOBITS && (data.len() as u64) < section.size {
                error = Some(DecodeError {
                    section: section.name.clone(),
                    offset: data.len(),
                    kind: ErrorKind::Truncated("section data (file ends)"),
                });
            }
            self.tables.push(Table {
                id,
                name: section.name.clone(),
                address: section.addr,
                size: section.size,
                entries,
                error,
                note,
            });
        }
        self.covered.sort_by_key(|e| e.pc);
        self.atomics.sort_unstable();
        self.atomics.dedup();
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Link-time address and contents of the first section called `name`.
    pub fn section_data(&self, name: &str) -> Option<(u64, &[u8])> {
        let s = self.sections.iter().find(|s| s.name == name)?;
        Some((s.addr, &self.bytes[s.data.clone()]))
    }

    /// Whether `addr` lies in a section the program does not write once it runs: allocated without
    /// `SHF_WRITE`, or relocated once and then protected (`.got`, `.data.rel.ro`).
    pub fn is_read_only(&self, addr: u64) -> bool {
        self.sections.iter().any(|s| {
            s.flags & u64::from(SHF_ALLOC) != 0
                && (addr.wrapping_sub(s.addr)) < s.size
                && (s.flags & u64::from(goblin::elf::section_header::SHF_WRITE) == 0
                    || s.name == ".got"
                    || s.name.starts_with(".data.rel.ro"))
        })
    }

    /// The GNU build-id (`.note.gnu.build-id`) in lower-case hex; empty when the file has none.
    pub fn build_id(&self) -> String {
        let Some((_, note)) = self.section_data(".note.gnu.build-id") else { return String::new() };
        let word = |at: usize| note.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let (Some(name_size), Some(desc_size)) = (word(0), word(4)) else { return String::new() };
        let desc_start = 12 + name_size.div_ceil(4) * 4;
        note.get(desc_start..desc_start + desc_size)
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_default()
    }

    /// File offset of the first section called `name`.
    pub fn section_file_offset(&self, name: &str) -> Option<usize> {
        self.sections.iter().find(|s| s.name == name && s.kind != SHT_NOBITS).map(|s| s.data.start)
    }

    /// `len` bytes of loaded code or data at link-time address `vaddr`, from
    /// an allocated section, or from a `PT_LOAD` segment when the file has no
    /// section headers. `None` if any byte is not backed by the file.
    pub fn read_at(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        let slice = |base: u64, range: &std::ops::Range<usize>| {
            let start = vaddr.checked_sub(base)?;
            let end = start.checked_add(len as u64)?;
            if end > (range.end - range.start) as u64 {
                return None;
            }
            Some(&self.bytes[range.start + start as usize..range.start + end as usize])
        };
        self.sections
            .iter()
            .filter(|s| s.flags & u64::from(SHF_ALLOC) != 0 && s.kind != SHT_NOBITS && s.addr != 0)
            .find_map(|s| slice(s.addr, &s.data))
            .or_else(|| self.segments.iter().find_map(|s| slice(s.vaddr, &s.data)))
    }

    /// The function of the symbol table that contains `addr`.
    pub fn function_containing(&self, addr: u64) -> Option<&symbols::Function> {
        find_function(&self.functions, addr)
    }

    /// The data object of the symbol table that contains `addr` (a global or static).
    pub fn object_containing(&self, addr: u64) -> Option<&symbols::Function> {
        find_function(&self.objects, addr)
    }

    /// The decode errors of all tables.
    pub fn decode_errors(&self) -> impl Iterator<Item = &DecodeError> {
        self.tables.iter().filter_map(|t| t.error.as_ref())
    }

    /// The covered entry whose function contains `pc`.
    pub fn covered_containing(&self, pc: u64) -> Option<&CoveredEntry> {
        let end = self.covered.partition_point(|e| e.pc <= pc);
        self.covered[..end].last().filter(|e| pc == e.pc || pc - e.pc < e.size)
    }

    /// Address-to-line lookups from the file's DWARF, if it has line tables
    /// (uncompressed). Building one costs a pass over the unit headers: build
    /// it once and reuse it.
    pub fn source_map(&self) -> Option<SourceMap<'_>> {
        SourceMap::load(|name| {
            let s = self.sections.iter().find(|s| s.name == name)?;
            if s.flags & u64::from(SHF_COMPRESSED) != 0 {
                return None;
            }
            Some(&self.bytes[s.data.clone()])
        })
    }
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("path", &self.path)
            .field("tables", &self.tables)
            .field("covered", &self.covered.len())
            .field("atomics", &self.atomics.len())
            .field("functions", &self.functions.len())
            .finish()
    }
}

/// Reads the stack maps of a linked file: one per object, back to back,
/// merged into one (function indexes shifted; constants are already resolved).
fn read_stackmaps(data: &[u8]) -> Result<StackMap, StackMapError> {
    let mut maps = stackmap::parse_all(data)?.into_iter();
    let Some(mut merged) = maps.next() else {
        return Err(StackMapError {
            offset: 0,
            kind: stackmap::StackMapErrorKind::Truncated("header (empty section)"),
        });
    };
    for map in maps {
        let base = merged.functions.len();
        merged.functions.extend(map.functions);
        merged.constants.extend(map.constants);
        merged.records.extend(map.records.into_iter().map(|mut r| {
            r.function_index = r.function_index.map(|i| i + base);
            r
        }));
    }
    Ok(merged)
}

/// The NUL-terminated string at `offset` of a string table.
fn cstr(table: &[u8], offset: usize) -> Option<&str> {
    let rest = table.get(offset..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// Functions of `.symtab`, or of `.dynsym` when there is no `.symtab`.
/// The defined symbols of the symbol table (`.symtab`, else `.dynsym`) of the given types, sorted by
/// address, one per address.
fn read_symbols(bytes: &[u8], shdrs: &[SectionHeader], ctx: Ctx, types: &[u8]) -> Vec<symbols::Function> {
    let table =
        shdrs.iter().rfind(|s| s.sh_type == SHT_SYMTAB).or_else(|| shdrs.iter().rfind(|s| s.sh_type == SHT_DYNSYM));
    let Some(table) = table else { return Vec::new() };
    let Some(strtab) = shdrs.get(table.sh_link as usize) else { return Vec::new() };
    let Some(strings) = usize::try_from(strtab.sh_offset)
        .ok()
        .zip(usize::try_from(strtab.sh_size).ok())
        .and_then(|(o, n)| bytes.get(o..o.checked_add(n)?))
    else {
        return Vec::new();
    };
    let entsize = goblin::elf::sym::Sym::size(ctx.container) as u64;
    let count = (table.sh_size / entsize) as usize;
    let Ok(syms) = Symtab::parse(bytes, table.sh_offset as usize, count, ctx) else { return Vec::new() };
    functions_from_symbols(syms.iter().filter_map(|s| {
        if !types.contains(&s.st_type()) || s.st_shndx == 0 {
            return None;
        }
        Some(RawSymbol {
            name: cstr(strings, s.st_name)?,
            address: s.st_value,
            size: s.st_size,
            global: s.st_bind() != STB_LOCAL,
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(bytes: Vec<u8>) -> Result<Module, ElfError> {
        Module::from_bytes(Path::new("x.bin"), bytes)
    }

    static DATA_OBJECT_MARKER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(7);

    #[test]
    fn reads_global_data_objects_with_their_sizes() {
        DATA_OBJECT_MARKER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let m = Module::open(&std::env::current_exe().unwrap()).unwrap();
        let object = m.objects.iter().find(|o| o.name.ends_with("DATA_OBJECT_MARKER")).expect("the static");
        assert_eq!(object.size, 8);
        assert_eq!(m.object_containing(object.address + 7).unwrap().name, object.name);
        assert!(m.object_containing(object.address + 8).is_none_or(|o| o.name != object.name));
        assert!(m.functions.iter().all(|f| !f.name.ends_with("DATA_OBJECT_MARKER")), "not a function");
    }

    #[test]
    fn reads_its_own_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let m = Module::open(&exe).unwrap();
        let f = m.functions.iter().find(|f| f.name.ends_with("reads_its_own_test_binary")).expect("own function");
        assert!(f.size > 0);
        assert_eq!(m.function_containing(f.address + 1).unwrap().address, f.address);
        // The function's first bytes are readable at its link-time address.
        assert!(m.read_at(f.address, f.size as usize).is_some());
        assert!(m.read_at(u64::MAX - 2, 8).is_none());
        assert!(m.source_map().is_some() || m.section_data(".debug_line").is_none());
    }

    #[test]
    fn rejects_non_elf_and_bad_headers_without_panicking() {
        assert!(matches!(load(b"hello".to_vec()), Err(ElfError::NotElf { .. })));
        let err = load(Vec::new()).unwrap_err();
        assert_eq!(err.to_string(), "x.bin: not an ELF file");
        let mut elf32 = b"\x7fELF\x01\x01\x01".to_vec();
        elf32.resize(64, 0);
        assert!(matches!(load(elf32), Err(ElfError::Unsupported { .. })));
        // A header cut short, then every prefix and some byte flips of a real file.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for cut in [5, 16, 63, 64, 100, 1000, 4096] {
            let _ = load(exe[..cut.min(exe.len())].to_vec());
        }
        let mut rng = 0x2545f4914f6cdd1d_u64;
        for _ in 0..200 {
            let mut copy = exe[..exe.len().min(64 * 1024)].to_vec();
            for _ in 0..8 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let i = 16 + (rng as usize) % 48.min(copy.len() - 16);
                copy[i] = (rng >> 32) as u8;
            }
            if let Err(e) = load(copy) {
                assert!(!e.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn relocatable_objects_are_unsupported_with_a_reason() {
        let mut obj = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        obj[16..18].copy_from_slice(&ET_REL.to_le_bytes());
        let msg = load(obj).unwrap_err().to_string();
        assert!(msg.contains("relocatable object"), "{msg}");
    }
}
