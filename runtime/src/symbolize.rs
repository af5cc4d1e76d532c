//! Symbolization with addr2line: functions, file:line:col, inlined frames.
//!
//! Runs only on the reporter thread (it allocates, maps files and takes
//! locks). A runtime PC is first mapped to its module (the main executable or
//! a shared library, found with `findshlibs`) and to the module's own address
//! space (`pc - load bias`); the module file is then symbolized with one
//! cached [`addr2line::Loader`] per module: DWARF when present (with inlined
//! frames), else the ELF symbol table, else nothing.

use crate::event::Stack;
use findshlibs::{Segment, SharedLibrary, TargetSharedLibrary};
use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One symbolized frame. A PC inside inlined code yields several frames,
/// innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Demangled function name (Rust without the hash), if known.
    pub function: Option<String>,
    /// Source file, relative to the current directory when under it.
    pub file: Option<String>,
    /// 1-based source line.
    pub line: Option<u32>,
    /// 1-based source column.
    pub column: Option<u32>,
    /// Path of the module (executable or shared library) holding the PC.
    pub module: Option<String>,
    /// The PC in the module's own address space (`pc - load bias`), or the raw PC when the module is unknown.
    pub offset: u64,
}

/// A loaded module: where its code lives in this process.
#[derive(Clone, Debug)]
struct Module {
    path: PathBuf,
    bias: u64,
    ranges: Vec<(u64, u64)>,
}

/// Maps runtime PCs to frames. Build and use it on one ordinary thread.
pub struct Symbolizer {
    modules: Vec<Module>,
    files: HashMap<PathBuf, ModuleFile>,
    cwd: Option<PathBuf>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer for the current process (modules are scanned lazily).
    pub fn new() -> Symbolizer {
        Symbolizer { modules: Vec::new(), files: HashMap::new(), cwd: std::env::current_dir().ok() }
    }

    /// Symbolizes every frame of a captured stack: `pcs[0]` is looked up as
    /// is, return addresses (frames >= 1) at `pc - 1` so they name the call.
    pub fn symbolize_stack(&mut self, stack: &Stack) -> Vec<Frame> {
        stack.frames().iter().enumerate().flat_map(|(i, &pc)| self.symbolize_pc(pc, i > 0)).collect()
    }

    /// Symbolizes one runtime PC of this process; never empty.
    pub fn symbolize_pc(&mut self, pc: u64, is_return_address: bool) -> Vec<Frame> {
        match self.module_of(pc) {
            Some(module) => {
                let offset = pc.wrapping_sub(module.bias);
                self.symbolize_in_module(&module.path, offset, is_return_address)
            }
            None => vec![Frame { offset: pc, ..Frame::default() }],
        }
    }

    /// Symbolizes `offset` (an address in the module file's own address space)
    /// inside the ELF file at `path`; never empty.
    pub fn symbolize_in_module(&mut self, path: &Path, offset: u64, is_return_address: bool) -> Vec<Frame> {
        let probe = if is_return_address { offset.saturating_sub(1) } else { offset };
        let module = Some(path.to_string_lossy().into_owned());
        let cwd = self.cwd.clone();
        let file = self.files.entry(path.to_path_buf()).or_insert_with(|| ModuleFile::open(path));
        let mut frames = Vec::new();
        if let Some(Ok(mut iter)) = file.loader.as_ref().map(|loader| loader.find_frames(probe)) {
            while let Ok(Some(found)) = iter.next() {
                let function = found.function.as_ref().and_then(|f| f.raw_name().ok()).map(|name| demangle(&name));
                let (file, line, column) = match found.location {
                    Some(loc) => (loc.file.map(|f| display_path(f, cwd.as_deref())), loc.line, loc.column),
                    None => (None, None, None),
                };
                frames.push(Frame { function, file, line, column, module: module.clone(), offset });
            }
        }
        match frames.last_mut() {
            // DWARF without a name for the outermost function: take the symbol table's.
            Some(outer) if outer.function.is_none() => outer.function = file.function_at(probe),
            Some(_) => {}
            None => frames.push(Frame { function: file.function_at(probe), module, offset, ..Frame::default() }),
        }
        frames
    }

    /// The module whose code contains `pc`, rescanning once on a miss (dlopen).
    fn module_of(&mut self, pc: u64) -> Option<Module> {
        let find = |modules: &[Module]| {
            modules.iter().find(|m| m.ranges.iter().any(|&(start, end)| (start..end).contains(&pc))).cloned()
        };
        if let Some(module) = find(&self.modules) {
            return Some(module);
        }
        self.modules = scan_modules();
        find(&self.modules)
    }
}

/// What one module file can tell: DWARF (through addr2line) and ELF function symbols.
struct ModuleFile {
    path: PathBuf,
    loader: Option<addr2line::Loader>,
    /// Read on first need: most lookups are answered by DWARF.
    functions: OnceCell<Vec<FunctionSymbol>>,
}

/// A defined function of the ELF symbol table, `[start, end)`.
struct FunctionSymbol {
    start: u64,
    end: u64,
    name: String,
}

impl ModuleFile {
    /// Loads the DWARF of `path` (none when it has none or cannot be read).
    fn open(path: &Path) -> ModuleFile {
        ModuleFile { path: path.to_path_buf(), loader: addr2line::Loader::new(path).ok(), functions: OnceCell::new() }
    }

    /// The demangled name of the function symbol containing `addr` (sizes respected).
    fn function_at(&self, addr: u64) -> Option<String> {
        let functions = self
            .functions
            .get_or_init(|| std::fs::read(&self.path).map(|bytes| function_symbols(&bytes)).unwrap_or_default());
        let end = functions.partition_point(|f| f.start <= addr);
        // A few steps back in case a large symbol encloses smaller neighbours.
        functions[..end].iter().rev().take(4).find(|f| addr < f.end).map(|f| demangle(&f.name))
    }
}

/// Defined `STT_FUNC`/`STT_GNU_IFUNC` symbols of `.symtab` (or `.dynsym` when
/// stripped), sorted by address; empty for anything that is not ELF.
fn function_symbols(bytes: &[u8]) -> Vec<FunctionSymbol> {
    const STT_GNU_IFUNC: u8 = 10;
    let Ok(elf) = goblin::elf::Elf::parse(bytes) else {
        return Vec::new();
    };
    let (syms, strtab) = if elf.syms.is_empty() { (&elf.dynsyms, &elf.dynstrtab) } else { (&elf.syms, &elf.strtab) };
    let mut functions: Vec<FunctionSymbol> = syms
        .iter()
        .filter(|s| (s.is_function() || s.st_type() == STT_GNU_IFUNC) && s.st_shndx != 0 && s.st_value != 0)
        .filter_map(|s| {
            let name = strtab.get_at(s.st_name).filter(|n| !n.is_empty())?;
            Some(FunctionSymbol { start: s.st_value, end: s.st_value + s.st_size.max(1), name: name.to_string() })
        })
        .collect();
    functions.sort_by_key(|f| (f.start, std::cmp::Reverse(f.end)));
    functions
}

/// The modules loaded in this process with their executable ranges.
fn scan_modules() -> Vec<Module> {
    let mut modules = Vec::new();
    TargetSharedLibrary::each(|lib| {
        let bias = lib.virtual_memory_bias().0 as u64;
        let ranges: Vec<(u64, u64)> = lib
            .segments()
            .filter(|seg| seg.is_code())
            .map(|seg| {
                let start = seg.actual_virtual_memory_address(lib).0 as u64;
                (start, start + seg.len() as u64)
            })
            .collect();
        let path = PathBuf::from(lib.name());
        if !ranges.is_empty() && !path.as_os_str().is_empty() {
            modules.push(Module { path, bias, ranges });
        }
    });
    modules
}

/// Demangles a Rust (legacy or v0, printed without the hash) or C++ symbol;
/// anything else is returned as is.
pub fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_string()
}

/// `path` relative to `cwd` when it lies under it, else unchanged.
pub fn display_path(path: &str, cwd: Option<&Path>) -> String {
    cwd.and_then(|cwd| Path::new(path).strip_prefix(cwd).ok())
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(|rel| rel.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_without_hash_and_cpp() {
        assert_eq!(demangle("_ZN12racy_counter4bump17h0123456789abcdefE"), "racy_counter::bump");
        assert_eq!(demangle("_RNvCs1234_7mycrate4bump"), "mycrate::bump");
        assert_eq!(demangle("_ZN3foo3barEi"), "foo::bar(int)");
        assert_eq!(demangle("bump"), "bump");
        assert_eq!(demangle("_Z"), "_Z");
    }

    #[test]
    fn paths_become_relative_only_under_cwd() {
        let cwd = Path::new("/work/proj");
        assert_eq!(display_path("/work/proj/src/a.rs", Some(cwd)), "src/a.rs");
        assert_eq!(display_path("/work/project/a.rs", Some(cwd)), "/work/project/a.rs");
        assert_eq!(display_path("/rustc/abc/library/std/src/rt.rs", Some(cwd)), "/rustc/abc/library/std/src/rt.rs");
        assert_eq!(display_path("src/a.rs", None), "src/a.rs");
    }

    #[inline(never)]
    fn known_function() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn symbolizes_a_function_of_this_process() {
        let function: fn() -> u64 = known_function;
        let pc = function as *const () as u64;
        let frames = Symbolizer::new().symbolize_pc(pc, false);
        let outer = frames.last().unwrap();
        assert_eq!(outer.function.as_deref(), Some("racewatch::symbolize::tests::known_function"));
        assert_eq!(outer.file.as_deref(), Some("src/symbolize.rs"));
        let exe = std::env::current_exe().unwrap();
        assert_eq!(outer.module.as_deref(), Some(exe.to_str().unwrap()));
    }

    #[test]
    fn unknown_pc_yields_one_unknown_frame() {
        let frames = Symbolizer::new().symbolize_pc(8, false);
        assert_eq!(frames, vec![Frame { offset: 8, ..Frame::default() }]);
    }
}
