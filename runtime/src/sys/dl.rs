//! Symbols of an already loaded library, read from its dynamic symbol table in memory.

use std::ffi::{c_int, CStr};

/// A library that was loaded already: its dynamic symbol table, as the loader mapped (and relocated) it.
///
/// Not `dlopen(RTLD_NOLOAD)` and `dlsym`: for a library loaded as a dependency, that `dlopen` builds its
/// search list with the program's `malloc`, and before `main` that first call made the main thread's
/// malloc cache (656 bytes that a program measuring `mallinfo2` around its first `malloc` missed); a
/// `dlsym` that finds nothing allocates its error record there too.
pub struct Loaded {
    base: u64,
    symtab: u64,
    strtab: u64,
    versym: u64,
    gnu_hash: u64,
    /// `DT_RELA`/`DT_RELASZ` and `DT_JMPREL`/`DT_PLTRELSZ`: address and size in bytes.
    rela: (u64, u64),
    jmprel: (u64, u64),
}

/// An entry of a dynamic section (`Elf64_Dyn`).
#[repr(C)]
struct Dyn {
    tag: i64,
    value: u64,
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const STT_FUNC: u8 = 2;
const SHN_UNDEF: u16 = 0;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const STT_GNU_IFUNC: u8 = 10;
const VERSYM_HIDDEN: u16 = 0x8000;

impl Loaded {
    /// The loaded library whose file name (the last part of its path) is `name` (`libc.so.6`), or `None`
    /// when it is not loaded or has no GNU hash table.
    pub fn find(name: &CStr) -> Option<Loaded> {
        let (base, dynamic) = dynamic_section(name.to_bytes())?;
        Loaded::at(base, dynamic)
    }

    /// The module loaded at `base` whose dynamic section is at `dynamic`, or `None` when it has no GNU
    /// hash table.
    fn at(base: u64, dynamic: u64) -> Option<Loaded> {
        let mut table = Loaded { base, symtab: 0, strtab: 0, versym: 0, gnu_hash: 0, rela: (0, 0), jmprel: (0, 0) };
        let mut entry = dynamic as *const Dyn;
        loop {
            // SAFETY: the loaded module's PT_DYNAMIC array, mapped while it stays loaded, ends with DT_NULL.
            let (tag, value) = unsafe { ((*entry).tag, (*entry).value) };
            // The loader relocates these entries in place in most modules; an address below the base is
            // still an offset.
            let at = if value < base { base + value } else { value };
            match tag {
                DT_NULL => break,
                DT_SYMTAB => table.symtab = at,
                DT_STRTAB => table.strtab = at,
                DT_VERSYM => table.versym = at,
                DT_GNU_HASH => table.gnu_hash = at,
                DT_RELA => table.rela.0 = at,
                DT_RELASZ => table.rela.1 = value,
                DT_JMPREL => table.jmprel.0 = at,
                DT_PLTRELSZ => table.jmprel.1 = value,
                _ => {}
            }
            // SAFETY: still inside the array (DT_NULL not reached).
            entry = unsafe { entry.add(1) };
        }
        (table.symtab != 0 && table.strtab != 0 && table.gnu_hash != 0).then_some(table)
    }

    /// The address `symbol` resolves to in this library (its default version; an IFUNC resolves to the
    /// implementation it picks for this CPU, as `dlsym` does), or `None` when it does not define it.
    pub fn symbol(&self, symbol: &CStr) -> Option<u64> {
        self.lookup(symbol, false)
    }

    /// As [`Loaded::symbol`], for a function (or IFUNC) only: never a data object.
    pub fn function(&self, symbol: &CStr) -> Option<u64> {
        self.lookup(symbol, true)
    }

    fn lookup(&self, symbol: &CStr, functions_only: bool) -> Option<u64> {
        let name = symbol.to_bytes();
        let hash = name.iter().fold(5381u32, |h, &b| h.wrapping_mul(33).wrapping_add(b as u32));
        let words = self.gnu_hash as *const u32;
        // SAFETY: the GNU hash table's header, buckets, bloom filter and chains are mapped with the
        // module; every index below stays within the counts the header gives.
        unsafe {
            let (nbuckets, symoffset, bloom_size) = (*words, *words.add(1), *words.add(2));
            if nbuckets == 0 {
                return None;
            }
            let buckets = words.add(4).cast::<u64>().add(bloom_size as usize).cast::<u32>();
            let chains = buckets.add(nbuckets as usize);
            let mut index = *buckets.add((hash % nbuckets) as usize);
            if index < symoffset {
                return None;
            }
            loop {
                let chain_hash = *chains.add((index - symoffset) as usize);
                if chain_hash | 1 == hash | 1 {
                    if let Some(addr) = self.definition(index, name, functions_only) {
                        return Some(addr);
                    }
                }
                if chain_hash & 1 != 0 {
                    return None;
                }
                index += 1;
            }
        }
    }

    /// Symbol `index`'s address when it is a default-version definition named `name` (a function's, when
    /// `functions_only`).
    fn definition(&self, index: u32, name: &[u8], functions_only: bool) -> Option<u64> {
        // SAFETY: `index` comes from the module's own hash chains, so it is an entry of its symbol table
        // and of its version table; `st_name` is an offset into its string table.
        unsafe {
            let sym = &*(self.symtab as *const libc::Elf64_Sym).add(index as usize);
            if sym.st_shndx == SHN_UNDEF || sym.st_value == 0 {
                return None;
            }
            if CStr::from_ptr((self.strtab + sym.st_name as u64) as *const libc::c_char).to_bytes() != name {
                return None;
            }
            if self.versym != 0 && *(self.versym as *const u16).add(index as usize) & VERSYM_HIDDEN != 0 {
                return None; // An older version (`name@VERSION`), not the default (`name@@VERSION`).
            }
            if functions_only && !matches!(sym.st_info & 0xf, STT_FUNC | STT_GNU_IFUNC) {
                return None;
            }
            let addr = self.base + sym.st_value;
            if sym.st_info & 0xf != STT_GNU_IFUNC {
                return Some(addr);
            }
            // The resolver picks the implementation for this CPU, as the loader does for relocations.
            let resolver: extern "C" fn() -> u64 = std::mem::transmute(addr as usize);
            Some(resolver()).filter(|&a| a != 0)
        }
    }
}

/// A symbol this module imports and the slot of its global offset table the loader bound it in.
pub struct Import<'a> {
    pub name: &'a CStr,
    pub slot: *mut u64,
}

impl Loaded {
    /// The module whose loaded segments hold `addr`, with its `PT_GNU_RELRO` range (start, end), which
    /// the loader made read-only after relocating it.
    pub fn containing(addr: u64) -> Option<(Loaded, Option<(u64, u64)>)> {
        let mut found = None;
        each_dynamic_section(&mut |_, base, dynamic, headers| {
            let holds = headers
                .iter()
                .any(|h| h.p_type == libc::PT_LOAD && (base + h.p_vaddr..base + h.p_vaddr + h.p_memsz).contains(&addr));
            if holds {
                let relro = headers.iter().find(|h| h.p_type == libc::PT_GNU_RELRO);
                found = Some((base, dynamic, relro.map(|h| (base + h.p_vaddr, base + h.p_vaddr + h.p_memsz))));
            }
            holds
        });
        let (base, dynamic, relro) = found?;
        Some((Loaded::at(base, dynamic)?, relro))
    }

    /// The lowest and highest address of the `PT_LOAD` segments of the module holding `addr`.
    pub fn range_containing(addr: u64) -> Option<(u64, u64)> {
        let mut found = None;
        each_dynamic_section(&mut |_, base, _, headers| {
            let loads = || headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
            let start = loads().map(|h| base + h.p_vaddr).min().unwrap_or(0);
            let end = loads().map(|h| base + h.p_vaddr + h.p_memsz).max().unwrap_or(0);
            let holds = (start..end).contains(&addr);
            if holds {
                found = Some((start, end));
            }
            holds
        });
        found
    }

    /// The functions and objects this module imports by name (its `GLOB_DAT` and `JUMP_SLOT` relocations
    /// of undefined symbols), each with the slot the loader wrote its address in.
    pub fn imports(&self) -> impl Iterator<Item = Import<'_>> + '_ {
        let table = |(at, size): (u64, u64)| {
            // SAFETY: the module's relocation table, mapped with it: `size` bytes of `Elf64_Rela`.
            (at != 0).then(|| unsafe {
                std::slice::from_raw_parts(at as *const libc::Elf64_Rela, size as usize / size_of::<libc::Elf64_Rela>())
            })
        };
        let relocations = table(self.rela).into_iter().chain(table(self.jmprel)).flatten();
        relocations.filter_map(move |r| {
            let (index, kind) = ((r.r_info >> 32) as usize, r.r_info as u32);
            if index == 0 || !matches!(kind, R_X86_64_GLOB_DAT | R_X86_64_JUMP_SLOT) {
                return None;
            }
            // SAFETY: the relocation's symbol index is an entry of the module's symbol table, and its
            // name an offset into its string table.
            let sym = unsafe { &*(self.symtab as *const libc::Elf64_Sym).add(index) };
            if sym.st_shndx != SHN_UNDEF {
                return None;
            }
            // SAFETY: as above.
            let name = unsafe { CStr::from_ptr((self.strtab + sym.st_name as u64) as *const libc::c_char) };
            Some(Import { name, slot: (self.base + r.r_offset) as *mut u64 })
        })
    }
}

/// The load address and the address of the dynamic section of the loaded module whose file name is
/// `name`.
fn dynamic_section(name: &[u8]) -> Option<(u64, u64)> {
    let mut found = None;
    each_dynamic_section(&mut |path, base, dynamic, _| {
        let named = path.rsplit(|&b| b == b'/').next() == Some(name);
        if named {
            found = Some((base, dynamic));
        }
        named
    });
    found
}

/// A module's program headers.
type Headers<'a> = &'a [libc::Elf64_Phdr];
/// What [`each_dynamic_section`] calls for each module.
type Visit<'a> = dyn FnMut(&[u8], u64, u64, Headers) -> bool + 'a;

/// Calls `f(path, load address, dynamic section, program headers)` for each loaded module with a dynamic
/// section, in load order (the executable, with an empty path, first), until it returns true.
fn each_dynamic_section(f: &mut Visit) {
    struct Search<'a> {
        f: &'a mut Visit<'a>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Search` passed below; `info` is the loader's record for this call, its
        // name NUL-terminated and its program headers mapped.
        let (search, info) = unsafe { (&mut *(data as *mut Search), &*info) };
        // SAFETY: as above.
        let path =
            if info.dlpi_name.is_null() { &b""[..] } else { unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes() };
        // SAFETY: `dlpi_phdr` points at `dlpi_phnum` program headers.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        match headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC) {
            Some(h) => c_int::from((search.f)(path, info.dlpi_addr, info.dlpi_addr + h.p_vaddr, headers)),
            None => 0,
        }
    }
    let mut search = Search { f };
    // SAFETY: `visit` matches the callback type and only reads what the loader hands it for the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast()) };
}

/// A symbol of a loaded module's dynamic symbol table (already mapped: no file is read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicSymbol {
    /// The symbol's name as the table spells it (mangled).
    pub name: String,
    /// Its run-time address and size.
    pub address: u64,
    pub size: u64,
}

/// The dynamic symbol whose extent holds `addr` (`dladdr1` finds the nearest one at or below it; a
/// symbol that ends before `addr` names other code and is not returned).
pub fn dynamic_symbol_at(addr: u64) -> Option<DynamicSymbol> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut sym: *const libc::Elf64_Sym = std::ptr::null();
    const RTLD_DL_SYMENT: libc::c_int = 1;
    // SAFETY: `info` and `sym` are valid out-pointers; with RTLD_DL_SYMENT, `sym` receives a pointer into
    // the module's mapped symbol table, which stays mapped while the module is loaded (read at once here).
    let found = unsafe {
        libc::dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&mut sym as *mut *const libc::Elf64_Sym).cast(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || info.dli_sname.is_null() || sym.is_null() {
        return None;
    }
    // SAFETY: non-null results of a successful dladdr1: a NUL-terminated name and a symbol table entry.
    let (name, size) = unsafe { (CStr::from_ptr(info.dli_sname).to_string_lossy().into_owned(), (*sym).st_size) };
    let address = info.dli_saddr as u64;
    (addr >= address && addr - address < size.max(1)).then_some(DynamicSymbol { name, address, size })
}

/// The address of `name` in the process's global scope (the executable, then the libraries in load
/// order), as `dlsym(RTLD_DEFAULT)` finds it, read from the modules' dynamic symbol tables: a `dlsym`
/// that finds nothing leaves an error record allocated with the program's `malloc` (an executable that
/// defines `malloc` counted one more allocation from the loader). Not from a signal handler (it takes
/// the loader's lock).
pub fn global_symbol(name: &CStr) -> Option<u64> {
    let mut found = None;
    each_dynamic_section(&mut |_, base, dynamic, _| {
        found = Loaded::at(base, dynamic).and_then(|module| module.symbol(name));
        found.is_some()
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `dlsym` on libc's own handle says (the test may call `malloc`).
    fn dlsym_in_libc(name: &CStr) -> u64 {
        // SAFETY: NUL-terminated names; RTLD_NOLOAD only returns the loaded libc's handle.
        unsafe {
            let handle = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            assert!(!handle.is_null());
            libc::dlsym(handle, name.as_ptr()) as u64
        }
    }

    #[test]
    fn libc_symbols_are_those_dlsym_finds() {
        let libc = Loaded::find(c"libc.so.6").expect("libc is loaded");
        // Plain functions, symbols with older versions beside the default (`pthread_create`,
        // `sigaction`... `realpath@GLIBC_2.2.5` and `@@GLIBC_2.3`), and IFUNCs (`memcpy`, `strlen`).
        for name in [c"getpid", c"pthread_create", c"sigaction", c"realpath", c"memcpy", c"strlen", c"close_range"] {
            assert_eq!(libc.symbol(name), Some(dlsym_in_libc(name)), "{name:?}");
        }
        assert_eq!(libc.symbol(c"racewatch_no_such_symbol"), None);
        assert!(Loaded::find(c"libno-such-library.so.1").is_none());
    }

    #[test]
    fn the_functions_this_executable_imports_from_libc_are_bound_to_libc() {
        // No interposer in a test process: every function the test executable imports that libc defines
        // is bound to libc's own definition, as `Loaded::function` finds it.
        let libc = Loaded::find(c"libc.so.6").expect("libc is loaded");
        let here = (Loaded::find as fn(&CStr) -> Option<Loaded>) as usize as u64;
        let (module, relro) = Loaded::containing(here).expect("this executable");
        assert!(relro.is_some(), "a BIND_NOW, RELRO build");
        let mut checked = Vec::new();
        for import in module.imports() {
            if let Some(target) = libc.function(import.name) {
                // SAFETY: the loader's slot for this import, mapped (read-only) with the module.
                assert_eq!(unsafe { *import.slot }, target, "{:?}", import.name);
                checked.push(import.name.to_owned());
            }
        }
        for name in [c"write", c"clock_gettime", c"pthread_self"] {
            assert!(checked.iter().any(|n| n.as_c_str() == name), "{name:?} not among {checked:?}");
        }
        // Data objects are not functions.
        assert_eq!(libc.function(c"environ"), None);
        assert!(libc.symbol(c"environ").is_some());
    }

    #[test]
    fn global_symbols_are_those_dlsym_finds_by_default() {
        for name in [c"malloc", c"free", c"_r_debug", c"pthread_create"] {
            // SAFETY: RTLD_DEFAULT is a valid pseudo-handle; the names are NUL-terminated.
            let expected = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as u64;
            assert_eq!(global_symbol(name), Some(expected), "{name:?}");
        }
        assert_eq!(global_symbol(c"__racewatch_no_such_symbol"), None);
    }
}
