//! An object file a JIT registered through the GDB JIT interface (`__jit_debug_descriptor`), as LLVM's
//! ORC debugger support does: a relocatable ELF object (`ET_REL`) whose allocated sections' `sh_addr`
//! the JIT set to their final run-time addresses. Its DWARF still carries relocations (gdb applies them
//! too): they are applied here, against those addresses, and the result is symbolized with addr2line
//! like any module file. Its symbol table gives the functions and data objects at run-time addresses.

use crate::dwarf::{MemorySlice, ModuleDebug};
use crate::symbols::{functions_from_symbols, RawSymbol};
use goblin::elf::header::{EM_X86_64, ET_REL};
use goblin::elf::section_header::{SHF_ALLOC, SHF_COMPRESSED, SHF_EXECINSTR, SHT_NOBITS};
use goblin::elf::sym::{STB_LOCAL, STT_FUNC, STT_OBJECT};
use goblin::elf::Elf;
use std::sync::Arc;

const R_X86_64_64: u32 = 1;
const R_X86_64_PC32: u32 = 2;
const R_X86_64_32: u32 = 10;
const R_X86_64_32S: u32 = 11;
const R_X86_64_PC64: u32 = 24;

/// A JIT's object, read.
pub struct JitObject {
    /// Run-time `[start, end)` of its executable sections.
    pub code: Vec<(u64, u64)>,
    /// Run-time `[start, end)` of all its allocated sections (code and data).
    pub allocated: Vec<(u64, u64)>,
    /// Its DWARF and symbols, at run-time addresses (the "module offset" is the PC itself).
    pub debug: ModuleDebug,
}

impl JitObject {
    /// Whether `addr` lies in one of its executable sections.
    pub fn has_code_at(&self, addr: u64) -> bool {
        self.code.iter().any(|&(s, e)| (s..e).contains(&addr))
    }

    /// Whether `addr` lies in one of its allocated sections.
    pub fn holds(&self, addr: u64) -> bool {
        self.allocated.iter().any(|&(s, e)| (s..e).contains(&addr))
    }
}

/// Reads an x86-64 relocatable object with run-time section addresses; `None` for anything else (an
/// object without an allocated section at a nonzero address has not been placed by a JIT).
pub fn read(label: &str, bytes: &[u8]) -> Option<JitObject> {
    let elf = Elf::parse(bytes).ok()?;
    if elf.header.e_type != ET_REL || elf.header.e_machine != EM_X86_64 || !elf.is_64 || !elf.little_endian {
        return None;
    }
    let shdrs = &elf.section_headers;
    let alloc = u64::from(SHF_ALLOC);
    let placed = |i: usize| shdrs.get(i).filter(|s| s.sh_flags & alloc != 0 && s.sh_addr != 0);
    let mut code = Vec::new();
    let mut allocated = Vec::new();
    for (i, s) in shdrs.iter().enumerate() {
        if placed(i).is_some() && s.sh_size > 0 {
            let range = (s.sh_addr, s.sh_addr.saturating_add(s.sh_size));
            allocated.push(range);
            if s.sh_flags & u64::from(SHF_EXECINSTR) != 0 {
                code.push(range);
            }
        }
    }
    if allocated.is_empty() {
        return None;
    }
    // A symbol's run-time address: its section's address plus its value (ET_REL values are offsets).
    let address = |sym: &goblin::elf::Sym| -> Option<u64> {
        let section = placed(sym.st_shndx)?;
        Some(section.sh_addr.wrapping_add(sym.st_value))
    };
    let symbols = |kind: u8| {
        functions_from_symbols(elf.syms.iter().filter(|s| s.st_type() == kind).filter_map(|s| {
            Some(RawSymbol {
                name: elf.strtab.get_at(s.st_name)?,
                address: address(&s)?,
                size: s.st_size,
                global: s.st_bind() != STB_LOCAL,
            })
        }))
    };
    let (functions, objects) = (symbols(STT_FUNC), symbols(STT_OBJECT));

    // The debug sections, relocated.
    let section_data = |name: &str| -> Option<Vec<u8>> {
        let (index, s) = shdrs
            .iter()
            .enumerate()
            .find(|(_, s)| s.sh_type != SHT_NOBITS && elf.shdr_strtab.get_at(s.sh_name) == Some(name))?;
        if s.sh_flags & u64::from(SHF_COMPRESSED) != 0 {
            return None;
        }
        let start = usize::try_from(s.sh_offset).ok()?;
        let mut data = bytes.get(start..start.checked_add(usize::try_from(s.sh_size).ok()?)?)?.to_vec();
        for (reloc_index, relocs) in &elf.shdr_relocs {
            if shdrs.get(*reloc_index).map(|r| r.sh_info as usize) != Some(index) {
                continue;
            }
            for r in relocs.iter() {
                let Some(sym) = elf.syms.get(r.r_sym) else { continue };
                let target = if sym.st_shndx == 0 {
                    0
                } else {
                    shdrs.get(sym.st_shndx).map_or(0, |t| if t.sh_flags & alloc != 0 { t.sh_addr } else { 0 })
                };
                let value = target.wrapping_add(sym.st_value).wrapping_add_signed(r.r_addend.unwrap_or(0));
                let place = s.sh_addr.wrapping_add(r.r_offset);
                let at = usize::try_from(r.r_offset).unwrap_or(usize::MAX);
                let patch: Option<Vec<u8>> = match r.r_type {
                    R_X86_64_64 => Some(value.to_le_bytes().to_vec()),
                    R_X86_64_32 | R_X86_64_32S => Some((value as u32).to_le_bytes().to_vec()),
                    R_X86_64_PC32 => Some((value.wrapping_sub(place) as u32).to_le_bytes().to_vec()),
                    R_X86_64_PC64 => Some(value.wrapping_sub(place).to_le_bytes().to_vec()),
                    _ => None,
                };
                if let Some(patch) = patch {
                    if let Some(slot) = at.checked_add(patch.len()).and_then(|end| data.get_mut(at..end)) {
                        slot.copy_from_slice(&patch);
                    }
                }
            }
        }
        Some(data)
    };
    let endian = gimli::RunTimeEndian::Little;
    let dwarf = gimli::Dwarf::load(|id| -> Result<MemorySlice, gimli::Error> {
        let data = section_data(id.name()).unwrap_or_default();
        Ok(gimli::EndianArcSlice::new(Arc::from(data), endian))
    })
    .ok();
    let has_units = dwarf.as_ref().is_some_and(|d| d.units().next().ok().flatten().is_some());
    let context = dwarf.filter(|_| has_units).and_then(|d| addr2line::Context::from_dwarf(d).ok());
    let debug = ModuleDebug::in_memory(label, context, functions, objects);
    Some(JitObject { code, allocated, debug })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_placed_relocatable_objects_are_read() {
        assert!(read("x", b"not an object").is_none());
        // The test binary itself: an executable, not a JIT's object.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(read("x", &exe).is_none());
    }
}
