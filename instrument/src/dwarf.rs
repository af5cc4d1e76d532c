//! Symbolizing addresses of one ELF file: DWARF (through addr2line, inlined frames included) and the
//! ELF symbol table. The runtime uses it on the files of its loaded modules; `racewatch triage` on the
//! files and separate debug files it finds by build-id.
//!
//! Names: DWARF names a function by its linkage name when the binary has one
//! (`-Cdebuginfo=limited` or more, `-g`), which demangles to the qualified
//! path (`racy_counter::bump`); with line tables only it has just the bare
//! name (`bump`, `{closure#0}`, `write_volatile<u64>`) and no namespace
//! entries to qualify it with. The physical (outermost) frame of a PC then
//! takes the symbol table's qualified name; inlined frames have no symbol of
//! their own and keep the bare DWARF name.

use crate::frames::{base_name, display_path, Frame};
use crate::symbols::{demangle, find_function, Function};
use std::cell::OnceCell;
use std::io;
use std::path::{Path, PathBuf};

/// How a caller reads a whole file (the runtime reads through a descriptor the program cannot close).
pub type ReadFile = fn(&Path) -> io::Result<Vec<u8>>;

/// A module's DWARF: a file's (mapped by addr2line), or an in-memory object's (relocated, see
/// [`crate::jit_object`]).
enum Dwarf {
    File(Box<addr2line::Loader>),
    Memory(Box<addr2line::Context<MemorySlice>>),
}

/// The reader of in-memory DWARF.
pub(crate) type MemorySlice = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// One frame addr2line found for a PC, owned.
struct RawFrame {
    scope: Scope,
    name: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    column: Option<u32>,
}

fn raw_frames<R: addr2line::gimli::Reader, E>(iter: Result<addr2line::FrameIter<'_, R>, E>) -> Vec<RawFrame> {
    let mut out = Vec::new();
    let Ok(mut iter) = iter else { return out };
    while let Ok(Some(found)) = iter.next() {
        let (file, line, column) = match &found.location {
            Some(loc) => (loc.file.map(str::to_string), loc.line, loc.column),
            None => (None, None, None),
        };
        let name = found.function.as_ref().and_then(|f| f.raw_name().ok()).map(|n| n.into_owned());
        out.push(RawFrame { scope: scope_of(&found), name, file, line, column });
    }
    out
}

impl Dwarf {
    /// The frames of `probe`, innermost first.
    fn frames(&self, probe: u64) -> Vec<RawFrame> {
        match self {
            Dwarf::File(loader) => raw_frames(loader.find_frames(probe)),
            Dwarf::Memory(context) => raw_frames(context.find_frames(probe).skip_all_loads()),
        }
    }

    /// The file and line of the line-table row of `probe`.
    fn location(&self, probe: u64) -> Option<(String, Option<u32>)> {
        let loc = match self {
            Dwarf::File(loader) => loader.find_location(probe).ok()??,
            Dwarf::Memory(context) => context.find_location(probe).ok()??,
        };
        Some((loc.file?.to_string(), loc.line))
    }
}

/// What one ELF file can tell about its addresses.
pub struct ModuleDebug {
    path: PathBuf,
    loader: Option<Dwarf>,
    read: ReadFile,
    /// Read on first need.
    symbols: OnceCell<Symbols>,
}

/// A module's symbol table: functions and data objects, each sorted by address.
#[derive(Default)]
struct Symbols {
    functions: Vec<Function>,
    objects: Vec<Function>,
}

/// The place a frame came from, copied into every frame of a PC.
#[derive(Clone, Copy, Debug, Default)]
pub struct Origin<'a> {
    /// The module's path as the process knew it.
    pub module: Option<&'a str>,
    /// Its GNU build-id.
    pub build_id: Option<&'a str>,
    /// File names under this directory are shown relative to it.
    pub cwd: Option<&'a Path>,
}

impl ModuleDebug {
    /// Loads the DWARF of `path` (none when it has none or cannot be read); its symbol table is read
    /// with `read` on first need.
    pub fn open(path: &Path, read: ReadFile) -> ModuleDebug {
        ModuleDebug::open_with_sup(path, None, read)
    }

    /// [`ModuleDebug::open`] for a debug file whose DWARF refers to a supplementary file (dwz's
    /// multifile, named by `.gnu_debugaltlink`): names and types shared by several packages live there.
    pub fn open_with_sup(path: &Path, sup: Option<&Path>, read: ReadFile) -> ModuleDebug {
        let loader = addr2line::Loader::new_with_sup(path, sup).ok().map(|l| Dwarf::File(Box::new(l)));
        ModuleDebug { path: path.to_path_buf(), loader, read, symbols: OnceCell::new() }
    }

    /// An object in memory (a JIT's): its DWARF already relocated to run-time addresses, and its
    /// functions and data objects at run-time addresses (each sorted by address). `label` names it.
    pub(crate) fn in_memory(
        label: &str,
        context: Option<addr2line::Context<MemorySlice>>,
        functions: Vec<Function>,
        objects: Vec<Function>,
    ) -> ModuleDebug {
        let symbols = OnceCell::new();
        let _ = symbols.set(Symbols { functions, objects });
        ModuleDebug {
            path: PathBuf::from(label),
            loader: context.map(|c| Dwarf::Memory(Box::new(c))),
            read: |_| Err(io::ErrorKind::Unsupported.into()),
            symbols,
        }
    }

    /// A module whose file is not read at all: every address yields a bare frame.
    pub fn unread(path: &Path) -> ModuleDebug {
        let symbols = OnceCell::new();
        let _ = symbols.set(Symbols::default());
        ModuleDebug {
            path: path.to_path_buf(),
            loader: None,
            read: |_| Err(io::ErrorKind::Unsupported.into()),
            symbols,
        }
    }

    /// Whether the file has DWARF (or at least a symbol table): whether it can name anything.
    pub fn can_name(&self) -> bool {
        self.loader.is_some() || !self.functions().is_empty()
    }

    /// The file's functions (demangled), sorted by address; empty for unreadable or non-ELF files.
    pub fn functions(&self) -> &[Function] {
        &self.symbols().functions
    }

    /// The file's data objects (globals, statics), sorted by address.
    pub fn objects(&self) -> &[Function] {
        &self.symbols().objects
    }

    fn symbols(&self) -> &Symbols {
        self.symbols.get_or_init(|| {
            (self.read)(&self.path)
                .ok()
                .and_then(|bytes| crate::elf::Module::from_bytes(&self.path, bytes).ok())
                .map(|m| Symbols { functions: m.functions, objects: m.objects })
                .unwrap_or_default()
        })
    }

    /// Symbolizes `offset` (an address in the file's own address space); never empty. A return address
    /// is looked up at `offset - 1`, so that it names the call.
    pub fn symbolize(&self, offset: u64, is_return_address: bool, origin: Origin<'_>) -> Vec<Frame> {
        let probe = if is_return_address { offset.saturating_sub(1) } else { offset };
        let bare = Frame {
            module: origin.module.map(str::to_string),
            build_id: origin.build_id.map(str::to_string),
            offset,
            inlined: true,
            ..Frame::default()
        };
        // DWARF names as found (mangled or bare), innermost first.
        let mut dwarf_names = Vec::new();
        let mut frames = Vec::new();
        // The innermost function's DIE: the scope a line borrowed for a line-0 PC must come from.
        let mut innermost = None;
        for found in self.loader.as_ref().map(|dwarf| dwarf.frames(probe)).unwrap_or_default() {
            if frames.is_empty() {
                innermost = Some(found.scope.clone());
            }
            dwarf_names.push(found.name);
            let file = found.file.map(|f| display_path(&f, origin.cwd));
            frames.push(Frame { file, line: found.line, column: found.column, ..bare.clone() });
        }
        if let (Some(first), Some(dwarf), Some(scope)) = (frames.first_mut(), self.loader.as_ref(), &innermost) {
            if first.line.is_none_or(|l| l == 0) {
                // Rows of the same innermost function only: the nearest row may be another inlined
                // function's (an atomic primitive's, the caller's next statement), whose line would name
                // other code. Without one, the frame keeps its function and its row's file, no line.
                first.line = None;
                first.column = None;
                if let Some((near_file, line)) = nearest_line(dwarf, probe, scope) {
                    first.file = Some(display_path(&near_file, origin.cwd));
                    first.line = Some(line);
                    first.line_approximate = true;
                }
            }
        }
        let symbol = find_function(self.functions(), probe).map(|f| f.name.as_str());
        if frames.is_empty() {
            frames.push(bare);
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
fn nearest_line(dwarf: &Dwarf, addr: u64, scope: &Scope) -> Option<(String, u32)> {
    const REACH: u64 = 32;
    let at = |a: u64| {
        let (near, line) = dwarf.location(a)?;
        let line = line.filter(|&l| l > 0)?;
        let first = dwarf.frames(a).into_iter().next()?;
        (first.scope == *scope).then_some((near, line))
    };
    (1..=REACH).find_map(|d| at(addr + d).or_else(|| at(addr.checked_sub(d)?)))
}

/// The supplementary file a debug file's `.gnu_debugaltlink` section names: its path as written (absolute,
/// or relative to the debug file) and its build-id in hex.
pub fn debug_altlink(section: &[u8]) -> Option<(String, String)> {
    let end = section.iter().position(|&b| b == 0)?;
    let path = std::str::from_utf8(&section[..end]).ok().filter(|p| !p.is_empty())?;
    let id = &section[end + 1..];
    (!id.is_empty()).then(|| (path.to_string(), id.iter().map(|b| format!("{b:02x}")).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn altlinks_name_a_path_and_a_build_id() {
        let mut section = b"/usr/lib/debug/.dwz/x86_64-linux-gnu/libc6.debug\0".to_vec();
        section.extend_from_slice(&[0xab, 0x01, 0xff]);
        assert_eq!(
            debug_altlink(&section),
            Some(("/usr/lib/debug/.dwz/x86_64-linux-gnu/libc6.debug".to_string(), "ab01ff".to_string()))
        );
        assert_eq!(debug_altlink(b"no-terminator"), None);
        assert_eq!(debug_altlink(b"\0\x01"), None);
        assert_eq!(debug_altlink(b"path\0"), None);
    }

    #[test]
    fn an_unreadable_file_gives_one_bare_frame() {
        let module = ModuleDebug::open(Path::new("/nonexistent/file"), |p| std::fs::read(p));
        assert!(!module.can_name());
        let frames = module.symbolize(0x1234, true, Origin { module: Some("/x/app"), build_id: Some("ab"), cwd: None });
        assert_eq!(
            frames,
            vec![Frame {
                module: Some("/x/app".into()),
                build_id: Some("ab".into()),
                offset: 0x1234,
                ..Frame::default()
            }]
        );
    }
}
