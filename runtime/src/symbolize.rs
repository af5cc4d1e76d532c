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
use crate::jit::{self, JitObjects};
use crate::modules;
use racewatch_instrument::dwarf::ModuleDebug;
pub use racewatch_instrument::dwarf::Origin;
pub use racewatch_instrument::frames::{base_name, display_path, Frame};
use racewatch_instrument::symbols::{demangle, find_function, Function};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// The module a global of JIT'd code is reported in (no file holds it).
pub const JIT_MODULE: &str = "<jit>";

/// Maps runtime PCs to frames. Build and use it on one ordinary thread.
pub struct Symbolizer {
    /// Module files read, by the path they were opened at, with what that file was then.
    files: HashMap<PathBuf, (ModuleDebug, Option<FileId>)>,
    cwd: Option<PathBuf>,
    /// The runtime's module when it is a library of its own (preloaded), not linked into the executable.
    runtime_module: Option<String>,
    /// Whether module files are read (`symbolize=1`); without, frames are module, build-id and offset,
    /// named from the dynamic symbol tables already mapped.
    read_files: bool,
    /// JIT'd code: the objects registered through the GDB JIT interface, the perf map.
    jit: JitObjects,
    /// [`module_file`] of the modules met since the last [`Symbolizer::forget_unloaded`] (once per report),
    /// by path and load bias: each look reads the whole of `/proc/self/maps`, and a report asks for every
    /// frame of its stacks.
    module_files: HashMap<(String, u64), Option<PathBuf>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer for the current process (module files are read lazily).
    pub fn new() -> Symbolizer {
        Symbolizer {
            files: HashMap::new(),
            cwd: std::env::current_dir().ok(),
            runtime_module: runtime_library(),
            read_files: true,
            jit: JitObjects::default(),
            module_files: HashMap::new(),
        }
    }

    /// A symbolizer that never opens a file (`symbolize=0`, the production profile): a frame is its
    /// module, the module's build-id and the offset, and the name of the dynamic symbol holding the PC
    /// when there is one; `racewatch triage` names the rest offline, by build-id.
    pub fn without_files() -> Symbolizer {
        Symbolizer { read_files: false, ..Symbolizer::new() }
    }

    /// Whether module files are read now. Not once the program limits its data (`RLIMIT_DATA`), or has
    /// locked all its memory (`mlockall(MCL_FUTURE)`) under a memlock limit: the heap that reading and
    /// parsing them takes, and keeps, is then memory the program could not have (7 MiB and more for a
    /// small C program and its libc; under `mlockall` a report waited for the program to give locked
    /// memory back, and held its exit up to 1.2 s). A program that unlocked again still counts: a report
    /// caught under the lock and printed after the `munlockall` is shown as the others. What was read is
    /// dropped, and from then on frames are as with `symbolize=0` (one warning).
    fn reads_files(&mut self) -> bool {
        if !self.read_files {
            return false;
        }
        let limit = if crate::sys::mem::data_limited() {
            "limits its data (RLIMIT_DATA)"
        } else if crate::sys::mem::lock_limited_once() {
            "locks its memory (mlockall) under a memlock limit"
        } else {
            return true;
        };
        self.read_files = false;
        self.files = HashMap::new();
        crate::log::warn(format_args!(
            "the program {limit}: module files are not read, frames are shown as module offsets"
        ));
        false
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

    /// The global or static variable of a loaded module's symbol table that holds `addr`; for memory
    /// of no module, a global of JIT'd code (module [`JIT_MODULE`], offset the address itself).
    pub fn data_symbol(&mut self, addr: u64) -> Option<DataSymbol> {
        let Some(module) = modules::module_of(addr) else { return self.jit_data_symbol(addr) };
        let module = Some(module).filter(|m| !m.path.is_empty() && m.path.contains('/'))?;
        let offset = addr.wrapping_sub(module.bias);
        if !self.reads_files() {
            let symbol = crate::sys::dl::dynamic_symbol_at(addr)?;
            return Some(DataSymbol {
                name: demangle(&symbol.name),
                size: symbol.size,
                address: symbol.address,
                module: module.path,
                offset,
            });
        }
        let path = self.module_file(&module)?;
        let object = find_function(self.debug_for(&path).objects(), offset)?;
        Some(DataSymbol {
            name: object.name.clone(),
            size: object.size,
            address: object.address.wrapping_add(module.bias),
            module: module.path,
            offset,
        })
    }

    /// A global of JIT'd code holding `addr`: from the registered objects' symbol tables, else from the
    /// ORC plugin's symbol list.
    fn jit_data_symbol(&mut self, addr: u64) -> Option<DataSymbol> {
        let found = self.read_files.then(|| self.jit.holding(addr)).flatten().and_then(|object| {
            let global = find_function(object.debug.objects(), addr)?;
            Some((global.name.clone(), global.size, global.address))
        });
        let (name, size, address) = found.or_else(|| {
            let symbol = jit::symbol_at(addr, false)?;
            Some((demangle(&symbol.name), symbol.end - symbol.start, symbol.start))
        })?;
        Some(DataSymbol { name, size, address, module: JIT_MODULE.to_string(), offset: addr })
    }

    /// Frames of a PC in JIT'd code (no loaded module holds it): from the object the JIT registered
    /// through the GDB JIT interface (function, file, line, inlined frames), else the name from the ORC
    /// plugin's symbol list or the perf map; `None` when nothing names it.
    fn jit_frames(&mut self, pc: u64, is_return_address: bool) -> Option<Vec<Frame>> {
        let probe = if is_return_address { pc.wrapping_sub(1) } else { pc };
        if self.read_files {
            if let Some(object) = self.jit.with_code_at(probe) {
                let origin = Origin { module: None, build_id: None, cwd: self.cwd.as_deref() };
                let frames = object.debug.symbolize(pc, is_return_address, origin);
                if frames.iter().any(|f| f.function.is_some()) {
                    return Some(frames);
                }
            }
        }
        let name = jit::symbol_at(probe, true)
            .map(|s| demangle(&s.name))
            .or_else(|| self.read_files.then(|| self.jit.perf_map_name(probe)).flatten())?;
        Some(vec![Frame { function: Some(name), offset: pc, ..Frame::default() }])
    }

    /// The executable's functions (from its symbol table), sorted by address.
    pub fn executable_functions(&mut self) -> &[Function] {
        if !self.read_files {
            return &[];
        }
        let Some(path) = modules::main_program_path() else { return &[] };
        self.debug_for(&path).functions()
    }

    /// Symbolizes one runtime PC of this process; never empty.
    pub fn symbolize_pc(&mut self, pc: u64, is_return_address: bool) -> Vec<Frame> {
        let Some(module) = modules::module_of(pc).filter(|m| !m.path.is_empty()) else {
            return self
                .jit_frames(pc, is_return_address)
                .unwrap_or_else(|| vec![Frame { offset: pc, ..Frame::default() }]);
        };
        let offset = pc.wrapping_sub(module.bias);
        let file = if self.reads_files() { self.module_file(&module) } else { None };
        let mut frames = if let Some(file) = file {
            self.symbolize_in_file(&file, &module.path, offset, is_return_address)
        } else {
            let probe = if is_return_address { pc.wrapping_sub(1) } else { pc };
            let function = crate::sys::dl::dynamic_symbol_at(probe).map(|s| demangle(&s.name));
            vec![Frame { function, module: Some(module.path.clone()), offset, ..Frame::default() }]
        };
        if !module.build_id.is_empty() {
            frames.iter_mut().for_each(|f| f.build_id = Some(module.build_id.clone()));
        }
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
        self.symbolize_in_file(path, &path.to_string_lossy(), offset, is_return_address)
    }

    /// [`Self::symbolize_in_module`] for the file at `path`, frames naming the module `name`.
    fn symbolize_in_file(&mut self, path: &Path, name: &str, offset: u64, is_return_address: bool) -> Vec<Frame> {
        let cwd = self.cwd.clone();
        let origin = Origin { module: Some(name), build_id: None, cwd: cwd.as_deref() };
        self.debug_for(path).symbolize(offset, is_return_address, origin)
    }

    /// The module file at `path`, read once and kept while it stays the same file: one replaced or
    /// rewritten in place since (a plugin reloaded over its old copy) is read again, its old mapping
    /// dropped before anything reads it (a file truncated under a mapping raises SIGBUS on access).
    fn debug_for(&mut self, path: &Path) -> &ModuleDebug {
        let id = FileId::of(path);
        if self.files.get(path).is_some_and(|(_, was)| *was != id) {
            self.files.remove(path);
        }
        &self.files.entry(path.to_path_buf()).or_insert_with(|| (open_module(path), id)).0
    }

    /// Drops what was read of module files the process no longer maps (a `dlclose`d library): their
    /// mappings leave `/proc/self/maps` as the program's own did. Also forgets which file each module was
    /// mapped from: the reporter calls this before each report, so each report looks that up afresh.
    pub fn forget_unloaded(&mut self) {
        self.module_files.clear();
        if self.files.is_empty() {
            return;
        }
        let mapped = modules::MappedFile::mapped_privately();
        self.files.retain(|path, _| path.to_str().is_some_and(|p| mapped.contains(p)));
    }

    /// [`module_file`], remembered until the next [`Symbolizer::forget_unloaded`].
    fn module_file(&mut self, module: &modules::LoadedModule) -> Option<PathBuf> {
        let key = (module.path.clone(), module.bias);
        self.module_files.entry(key).or_insert_with(|| module_file(module)).clone()
    }

    /// Lets go of every module file read so far and what was parsed of it, and of JIT'd objects copied:
    /// the next report reads what it needs again.
    pub fn forget_files(&mut self) {
        self.files = HashMap::new();
        self.module_files = HashMap::new();
        self.jit = JitObjects::default();
    }

    /// Whether any module file is held.
    pub fn holds_files(&self) -> bool {
        !self.files.is_empty()
    }
}

/// What a file is: device, inode, size and modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileId { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime: (meta.mtime(), meta.mtime_nsec()) })
    }
}

/// The file a loaded module was mapped from, by the absolute path the kernel gives it, when the file
/// at that path now is still that file (and a regular one): not a module the program opened by a
/// relative path from another directory, nor one deleted or replaced since (its frames are then
/// shown as offsets).
fn module_file(module: &modules::LoadedModule) -> Option<PathBuf> {
    let Some(mapped) = module.mapped_file() else {
        // Without `/proc` (a container or chroot that does not mount it) nothing names the mapped file:
        // the loader's absolute path is taken as it is.
        let path = Path::new(&module.path);
        let usable = !modules::proc_readable() && path.is_absolute() && path.metadata().is_ok_and(|m| m.is_file());
        return usable.then(|| path.to_path_buf());
    };
    let meta = std::fs::metadata(&mapped.path).ok()?;
    mapped.is(&meta).then(|| PathBuf::from(mapped.path))
}

/// The runtime's own module when it is a shared library (the preloaded
/// `libracewatch.so`); `None` when the runtime is linked into the executable
/// (its unit tests), where its module is the user's too.
fn runtime_library() -> Option<String> {
    let here = runtime_library as fn() -> Option<String> as usize as u64;
    let module = modules::module_of(here)?;
    let exe = modules::main_program_path()?;
    (Path::new(&module.path) != exe).then_some(module.path)
}

/// Opens a module's file for symbolization: its DWARF now, its symbol table on first need, read through a
/// high descriptor (the program may be closing every descriptor meanwhile).
fn open_module(path: &Path) -> ModuleDebug {
    crate::stats::bump(crate::stats::Counter::ModuleFilesRead);
    if !room_to_load(path) {
        // Under a tight RLIMIT_AS, loading debug info could fail an allocation: show raw module
        // offsets instead.
        crate::log::warn(format_args!(
            "too little address space left (RLIMIT_AS) to read {}: its frames are shown as offsets",
            path.display()
        ));
        return ModuleDebug::unread(path);
    }
    ModuleDebug::open(path, crate::sys::fd::read_file)
}

/// Whether reading `path`'s symbols and DWARF (mapped and parsed: a few times its size) fits in the
/// memory the program's limits leave.
fn room_to_load(path: &Path) -> bool {
    const SLACK: u64 = 16 << 20;
    let Some(headroom) = crate::sys::mem::memory_headroom() else { return true };
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    headroom >= size.saturating_mul(4).saturating_add(SLACK)
}

#[cfg(test)]
mod tests {
    use super::*;

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
