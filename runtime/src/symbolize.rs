//! Symbolization with addr2line: functions, file:line:col, inlined frames.
//!
//! Runs only on the reporter thread (it allocates, maps files and takes
//! locks). A runtime PC is first mapped to its loaded module with
//! [`crate::modules::containing`] and to the module's own address space
//! (`pc - load bias`); the module file is then symbolized with one cached
//! [`addr2line::Loader`] per module (DWARF, with inlined frames) and the
//! module's ELF function symbols, read and demangled by
//! [`racewatch_instrument::elf`] and [`racewatch_instrument::symbols`].
//!
//! Names: DWARF names a function by its linkage name when the binary has one
//! (`-Cdebuginfo=limited` or more, `-g`), which demangles to the qualified
//! path (`racy_counter::bump`); with line tables only it has just the bare
//! name (`bump`, `{closure#0}`, `write_volatile<u64>`) and no namespace
//! entries to qualify it with. The physical (outermost) frame of a PC then
//! takes the symbol table's qualified name; inlined frames have no symbol of
//! their own and keep the bare DWARF name.

use crate::event::Stack;
use crate::modules;
use racewatch_instrument::symbols::{demangle, find_function, Function};
use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One symbolized frame. A PC inside inlined code yields several frames,
/// innermost first; all but the last of them are `inlined`.
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
    /// Inlined into the next frame (same PC).
    pub inlined: bool,
    /// In racewatch's own shared library (never the user's code).
    pub in_runtime: bool,
    /// In one of libc's memory and string functions that racewatch watches (`memcpy`, `strlen`, …): the
    /// access's own frame, but never the one a summary names (that is its covered caller).
    pub memory_function: bool,
    /// The debug info gave this PC line 0 (a load the compiler hoisted or merged from several lines):
    /// `line` is the nearest real line of the same code (the same innermost inlined function) instead.
    /// When no such line is near, `line` is `None`: a neighbour's line would be another function's.
    pub line_approximate: bool,
    /// Not a frame: the place of the frames left out of a deep stack, and how many (see
    /// [`crate::event::Stack`]); every other field is empty.
    pub elided: usize,
}

/// A global or static variable found in a module's symbol table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSymbol {
    /// Demangled name (`racy_counter::COUNTER`, `counter`).
    pub name: String,
    /// Its size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// Run-time address of its first byte.
    pub address: u64,
    /// Path of the module that defines it.
    pub module: String,
    /// The address asked about, in the module's own address space.
    pub offset: u64,
}

/// Maps runtime PCs to frames. Build and use it on one ordinary thread.
pub struct Symbolizer {
    files: HashMap<PathBuf, ModuleFile>,
    cwd: Option<PathBuf>,
    /// The runtime's module when it is a library of its own (preloaded), not linked into the executable.
    runtime_module: Option<String>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer for the current process (module files are read lazily).
    pub fn new() -> Symbolizer {
        Symbolizer { files: HashMap::new(), cwd: std::env::current_dir().ok(), runtime_module: runtime_library() }
    }

    /// Symbolizes every frame of a captured stack: `pcs[0]` is looked up as
    /// is, return addresses (frames >= 1) at `pc - 1` so they name the call.
    /// Frames left out of a deep stack are one placeholder frame ([`Frame::elided`]) in their place.
    pub fn symbolize_stack(&mut self, stack: &Stack) -> Vec<Frame> {
        let elision = stack.elision();
        let mut frames = Vec::new();
        for (i, &pc) in stack.frames().iter().enumerate() {
            if let Some((_, count)) = elision.filter(|&(at, _)| at == i) {
                frames.push(Frame { elided: count, ..Frame::default() });
            }
            frames.extend(self.symbolize_pc(pc, i > 0));
        }
        frames
    }

    /// Symbolizes return addresses (a thread's creation stack), innermost first.
    pub fn symbolize_return_addresses(&mut self, pcs: &[u64]) -> Vec<Frame> {
        pcs.iter().flat_map(|&pc| self.symbolize_pc(pc, true)).collect()
    }

    /// The global or static variable of a loaded module's symbol table that holds `addr`.
    pub fn data_symbol(&mut self, addr: u64) -> Option<DataSymbol> {
        let module = modules::module_of(addr).filter(|m| !m.path.is_empty() && m.path.contains('/'))?;
        let offset = addr.wrapping_sub(module.bias);
        let path = PathBuf::from(&module.path);
        let file = self.files.entry(path.clone()).or_insert_with(|| ModuleFile::open(&path));
        let object = find_function(&file.symbols().objects, offset)?;
        Some(DataSymbol {
            name: object.name.clone(),
            size: object.size,
            address: object.address.wrapping_add(module.bias),
            module: module.path,
            offset,
        })
    }

    /// The executable's functions (from its symbol table), sorted by address.
    pub fn executable_functions(&mut self) -> &[Function] {
        let Ok(path) = std::env::current_exe() else { return &[] };
        let file = self.files.entry(path.clone()).or_insert_with(|| ModuleFile::open(&path));
        &file.symbols().functions
    }

    /// Symbolizes one runtime PC of this process; never empty.
    pub fn symbolize_pc(&mut self, pc: u64, is_return_address: bool) -> Vec<Frame> {
        let Some(module) = modules::module_of(pc).filter(|m| !m.path.is_empty()) else {
            return vec![Frame { offset: pc, ..Frame::default() }];
        };
        let offset = pc.wrapping_sub(module.bias);
        let mut frames = self.symbolize_in_module(Path::new(&module.path), offset, is_return_address);
        if self.runtime_module.as_deref() == Some(module.path.as_str()) {
            frames.iter_mut().for_each(|f| f.in_runtime = true);
        }
        // Named even where libc has no symbol for it (the body an IFUNC picked, in a stripped libc).
        if let Some(name) = crate::libcalls::name_at(if is_return_address { pc.wrapping_sub(1) } else { pc }) {
            for frame in &mut frames {
                frame.memory_function = true;
                frame.function.get_or_insert_with(|| name.to_string());
            }
        }
        frames
    }

    /// Symbolizes `offset` (an address in the module file's own address space)
    /// inside the ELF file at `path`; never empty.
    pub fn symbolize_in_module(&mut self, path: &Path, offset: u64, is_return_address: bool) -> Vec<Frame> {
        let probe = if is_return_address { offset.saturating_sub(1) } else { offset };
        let module = Some(path.to_string_lossy().into_owned());
        let cwd = self.cwd.clone();
        let file = self.files.entry(path.to_path_buf()).or_insert_with(|| ModuleFile::open(path));
        // DWARF names as found (mangled or bare), innermost first.
        let mut dwarf_names = Vec::new();
        let mut frames = Vec::new();
        // The innermost function's DIE: the scope a line borrowed for a line-0 PC must come from.
        let mut innermost = None;
        if let Some(Ok(mut iter)) = file.loader.as_ref().map(|loader| loader.find_frames(probe)) {
            while let Ok(Some(found)) = iter.next() {
                if frames.is_empty() {
                    innermost = Some(scope_of(&found));
                }
                dwarf_names.push(found.function.as_ref().and_then(|f| f.raw_name().ok()).map(|n| n.into_owned()));
                let (file, line, column) = match found.location {
                    Some(loc) => (loc.file.map(|f| display_path(f, cwd.as_deref())), loc.line, loc.column),
                    None => (None, None, None),
                };
                frames.push(Frame {
                    file,
                    line,
                    column,
                    module: module.clone(),
                    offset,
                    inlined: true,
                    ..Frame::default()
                });
            }
        }
        if let (Some(first), Some(loader), Some(scope)) = (frames.first_mut(), file.loader.as_ref(), &innermost) {
            if first.line.is_none_or(|l| l == 0) {
                // Rows of the same innermost function only: the nearest row may be another inlined
                // function's (an atomic primitive's, the caller's next statement), whose line would name
                // other code. Without one, the frame keeps its function and its row's file, no line.
                first.line = None;
                first.column = None;
                if let Some((near_file, line)) = nearest_line(loader, probe, scope) {
                    first.file = Some(display_path(&near_file, cwd.as_deref()));
                    first.line = Some(line);
                    first.line_approximate = true;
                }
            }
        }
        let symbol = file.function_at(probe).map(|f| f.name.as_str());
        if frames.is_empty() {
            frames.push(Frame { module, offset, ..Frame::default() });
            dwarf_names.push(None);
        }
        let outer = frames.len() - 1;
        for (i, (frame, raw)) in frames.iter_mut().zip(dwarf_names).enumerate() {
            frame.function = if i == outer { physical_name(raw.as_deref(), symbol) } else { raw.map(|n| demangle(&n)) };
        }
        frames[outer].inlined = false;
        frames
    }
}

/// The name of a physical (not inlined) function: DWARF's linkage name
/// demangled; else the symbol table's qualified name when it names the same
/// function as DWARF's bare name (or DWARF has none); else the bare name.
fn physical_name(dwarf: Option<&str>, symbol: Option<&str>) -> Option<String> {
    match (dwarf, symbol) {
        (Some(raw), _) if demangle(raw) != raw => Some(demangle(raw)),
        (Some(bare), Some(symbol)) if same_base_name(bare, symbol) => Some(symbol.to_string()),
        (Some(bare), _) => Some(bare.to_string()),
        (None, symbol) => symbol.map(str::to_string),
    }
}

/// Whether two spellings of a function name end in the same item, ignoring
/// paths, generic arguments, parameters, and the closure spelling
/// (`{closure#0}` in DWARF and v0 symbols, `{{closure}}` in legacy ones).
fn same_base_name(a: &str, b: &str) -> bool {
    let key = |name| {
        let base = base_name(name);
        if base.starts_with("{closure") || base.starts_with("{{closure") {
            "{closure}"
        } else {
            base
        }
    };
    key(a) == key(b)
}

/// The last path segment of a demangled name without its generic arguments
/// or parameter list: `__rust_begin_short_backtrace` for
/// `std::sys::backtrace::__rust_begin_short_backtrace::<F, T>`, `bar` for
/// `foo::bar(int)`, `baz` for `<S as T>::baz<u8>`.
pub fn base_name(name: &str) -> &str {
    /// A segment without its generic arguments or parameters (`<`, `(`) and trailing qualifiers (` const`).
    fn item(segment: &str) -> &str {
        &segment[..segment.find(['<', '(', ' ']).unwrap_or(segment.len())]
    }
    let bytes = name.as_bytes();
    let (mut depth, mut start, mut base) = (0usize, 0, "");
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'(' | b'[' => depth += 1,
            // `->` in a fn type closes nothing.
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' | b')' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                let part = item(&name[start..i]);
                if !part.is_empty() {
                    base = part;
                }
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    match item(&name[start..]) {
        "" => base,
        last => last,
    }
}

/// The runtime's own module when it is a shared library (the preloaded
/// `libracewatch.so`); `None` when the runtime is linked into the executable
/// (its unit tests), where its module is the user's too.
fn runtime_library() -> Option<String> {
    let here = runtime_library as fn() -> Option<String> as usize as u64;
    let module = modules::module_of(here)?;
    let exe = std::env::current_exe().ok()?;
    (Path::new(&module.path) != exe).then_some(module.path)
}

/// What one module file can tell: DWARF (through addr2line) and ELF symbols.
struct ModuleFile {
    path: PathBuf,
    loader: Option<addr2line::Loader>,
    /// Read on first need.
    symbols: OnceCell<Symbols>,
}

/// A module's symbol table: functions and data objects, each sorted by address.
#[derive(Default)]
struct Symbols {
    functions: Vec<Function>,
    objects: Vec<Function>,
}

impl ModuleFile {
    /// Loads the DWARF of `path` (none when it has none or cannot be read).
    fn open(path: &Path) -> ModuleFile {
        let symbols = OnceCell::new();
        if !room_to_load(path) {
            // Under a tight RLIMIT_AS, loading debug info could fail an allocation (an abort): show
            // raw module offsets instead.
            let _ = symbols.set(Symbols::default());
            crate::log::warn(format_args!(
                "too little address space left (RLIMIT_AS) to read {}: its frames are shown as offsets",
                path.display()
            ));
            return ModuleFile { path: path.to_path_buf(), loader: None, symbols };
        }
        ModuleFile { path: path.to_path_buf(), loader: addr2line::Loader::new(path).ok(), symbols }
    }

    /// The symbol table (demangled); empty for unreadable or non-ELF files.
    fn symbols(&self) -> &Symbols {
        self.symbols.get_or_init(|| {
            // Read through a high descriptor: the program may be closing every descriptor meanwhile.
            crate::sys::fd::read_file(&self.path)
                .ok()
                .and_then(|bytes| racewatch_instrument::elf::Module::from_bytes(&self.path, bytes).ok())
                .map(|m| Symbols { functions: m.functions, objects: m.objects })
                .unwrap_or_default()
        })
    }

    /// The symbol-table function containing `addr` (demangled).
    fn function_at(&self, addr: u64) -> Option<&Function> {
        find_function(&self.symbols().functions, addr)
    }
}

/// Which function a frame of addr2line is: its DIE (inlined instance or subprogram) and name.
type Scope = (Option<u64>, Option<String>);

fn scope_of<R: addr2line::gimli::Reader>(frame: &addr2line::Frame<'_, R>) -> Scope {
    use addr2line::gimli::ReaderOffset;
    let die = frame.dw_die_offset.map(|o| o.0.into_u64());
    let name = frame.function.as_ref().and_then(|f| f.raw_name().ok()).map(|n| n.into_owned());
    (die, name)
}

/// The nearest line-table row with a real line around `addr` (forward first: a hoisted load's line is
/// usually the use that follows), within a few instructions, whose innermost function is `scope`.
fn nearest_line(loader: &addr2line::Loader, addr: u64, scope: &Scope) -> Option<(String, u32)> {
    const REACH: u64 = 32;
    let at = |a: u64| {
        let loc = loader.find_location(a).ok()??;
        let line = loc.line.filter(|&l| l > 0)?;
        let near = loc.file?.to_string();
        let mut frames = loader.find_frames(a).ok()?;
        let first = frames.next().ok()??;
        (scope_of(&first) == *scope).then_some((near, line))
    };
    (1..=REACH).find_map(|d| at(addr + d).or_else(|| at(addr.checked_sub(d)?)))
}

/// Whether reading `path`'s symbols and DWARF (mapped and parsed: a few times its size) fits in the
/// address space `RLIMIT_AS` leaves.
fn room_to_load(path: &Path) -> bool {
    const SLACK: u64 = 16 << 20;
    let Some(headroom) = crate::sys::mem::address_space_headroom() else { return true };
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    headroom >= size.saturating_mul(4).saturating_add(SLACK)
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
    fn paths_become_relative_only_under_cwd() {
        let cwd = Path::new("/work/proj");
        assert_eq!(display_path("/work/proj/src/a.rs", Some(cwd)), "src/a.rs");
        assert_eq!(display_path("/work/project/a.rs", Some(cwd)), "/work/project/a.rs");
        assert_eq!(display_path("/rustc/abc/library/std/src/rt.rs", Some(cwd)), "/rustc/abc/library/std/src/rt.rs");
        assert_eq!(display_path("src/a.rs", None), "src/a.rs");
    }

    #[test]
    fn base_names_drop_paths_generics_and_parameters() {
        assert_eq!(
            base_name("std::sys::backtrace::__rust_begin_short_backtrace::<racy_flag::main::{closure#0}, u64>"),
            "__rust_begin_short_backtrace"
        );
        assert_eq!(base_name("__rust_begin_short_backtrace<fn(), ()>"), "__rust_begin_short_backtrace");
        assert_eq!(base_name("call_once<fn() -> u64, ()>"), "call_once");
        assert_eq!(base_name("<alloc::boxed::Box<dyn Fn() -> u8> as core::ops::FnOnce<()>>::call_once"), "call_once");
        assert_eq!(base_name("foo::bar(int, std::vector<int>)"), "bar");
        assert_eq!(base_name("racy_flag::main::{closure#1}"), "{closure#1}");
        assert_eq!(base_name("write_volatile<u64>"), "write_volatile");
        assert_eq!(base_name("bump"), "bump");
        assert_eq!(base_name(""), "");
    }

    #[test]
    fn physical_frames_prefer_linkage_names_then_matching_symbols() {
        let qualified = Some("racy_counter::bump");
        // A linkage name in DWARF wins (and is demangled).
        assert_eq!(physical_name(Some("_ZN1t5outer17hc32217f5853214efE"), qualified).as_deref(), Some("t::outer"));
        // Line tables only: the bare name is qualified by the symbol table.
        assert_eq!(physical_name(Some("bump"), qualified).as_deref(), Some("racy_counter::bump"));
        assert_eq!(
            physical_name(Some("{closure#0}"), Some("m::main::{{closure}}")).as_deref(),
            Some("m::main::{{closure}}")
        );
        assert_eq!(physical_name(Some("known_function"), Some("known_function")).as_deref(), Some("known_function"));
        // A symbol of another name (folded code, aliases) is not trusted.
        assert_eq!(physical_name(Some("consume"), qualified).as_deref(), Some("consume"));
        assert_eq!(physical_name(None, qualified).as_deref(), Some("racy_counter::bump"));
        assert_eq!(physical_name(None, None), None);
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
        assert!(!outer.inlined && !outer.in_runtime, "linked into the test executable: {outer:?}");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(outer.module.as_deref(), Some(exe.to_str().unwrap()));
    }

    #[test]
    fn unknown_pc_yields_one_unknown_frame() {
        let frames = Symbolizer::new().symbolize_pc(8, false);
        assert_eq!(frames, vec![Frame { offset: 8, ..Frame::default() }]);
    }
}
