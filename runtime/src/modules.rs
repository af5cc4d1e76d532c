//! Walking the loaded modules and finding their PC sections.
//!
//! The loader's list (`dl_iterate_phdr` via findshlibs) gives each module's
//! path and load bias; the section headers come from the module's file (only
//! the ELF header, the section header table and the section-name table are
//! read). The sections are `SHF_ALLOC`, so their bytes are read from the
//! module's mapped memory at `sh_addr + bias` through a non-faulting copy.
//! The vDSO (no file), missing or unreadable files and non-ELF files are
//! skipped quietly.

use crate::sys::mem;
use findshlibs::{Segment, SharedLibrary, TargetSharedLibrary};
use goblin::elf::section_header::SHF_ALLOC;
use goblin::elf64::header::Header;
use goblin::elf64::section_header::SectionHeader;
use racewatch_instrument::format::pcsections::{parse_section_name, SectionId};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// One PC section of a loaded module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcSection {
    pub id: SectionId,
    /// Run-time address of its first byte (`sh_addr` + load bias).
    pub addr: u64,
    pub size: u64,
}

/// A loaded module and its PC sections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedModule {
    /// The path the loader knows (the executable's resolved path for the main program).
    pub path: String,
    pub bias: u64,
    /// The GNU build-id note, in hex (empty when the module has none).
    pub build_id: String,
    /// Empty when the module has none or its file could not be read.
    pub sections: Vec<PcSection>,
    /// Run-time address ranges of its loaded segments.
    segments: Vec<(u64, u64)>,
}

impl LoadedModule {
    pub fn contains(&self, addr: u64) -> bool {
        self.segments.iter().any(|&(start, end)| (start..end).contains(&addr))
    }

    /// The file the kernel mapped this module from, as `/proc/self/maps` names it at its first loaded
    /// segment: an absolute path whatever the working directory is now (a library the program opened
    /// as `./plugin.so` before a `chdir`). `None` when that file was deleted or replaced since.
    pub fn mapped_file(&self) -> Option<MappedFile> {
        let &(start, _) = self.segments.first()?;
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines()
            .find_map(|line| MappedFile::parse(line).filter(|(range, _)| range.contains(&start)).map(|(_, f)| f))
    }
}

/// A file mapped into the process: its path, device and inode as `/proc/<pid>/maps` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    pub path: String,
    /// Device (major, minor).
    pub dev: (u32, u32),
    pub ino: u64,
}

impl MappedFile {
    /// One line of `/proc/<pid>/maps`: its address range and file (`None` for anonymous memory, a
    /// pseudo-file such as `[heap]`, or a file deleted since it was mapped).
    fn parse(line: &str) -> Option<(std::ops::Range<u64>, MappedFile)> {
        let mut rest = line;
        let mut field = || {
            let trimmed = rest.trim_start();
            let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
            rest = &trimmed[end..];
            &trimmed[..end]
        };
        let (start, end) = field().split_once('-')?;
        let (_perms, _offset, dev, ino) = (field(), field(), field(), field());
        let path = rest.trim_start();
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            return None;
        }
        let (major, minor) = dev.split_once(':')?;
        let file = MappedFile {
            path: path.to_string(),
            dev: (u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?),
            ino: ino.parse().ok()?,
        };
        Some((u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?, file))
    }

    /// The files the process has mapped privately now (as the loader maps modules; racewatch's own
    /// mappings of module files for symbols are shared, read-only).
    pub fn mapped_privately() -> std::collections::HashSet<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        maps.lines()
            .filter(|line| line.split_whitespace().nth(1).is_some_and(|perms| perms.ends_with('p')))
            .filter_map(|line| MappedFile::parse(line).map(|(_, file)| file.path))
            .collect()
    }

    /// Whether `meta` (of the file at [`Self::path`] now) is this very file, and a regular one.
    pub fn is(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        let dev = meta.dev();
        meta.is_file() && meta.ino() == self.ino && (libc::major(dev), libc::minor(dev)) == self.dev
    }
}

fn loaded() -> Vec<LoadedModule> {
    let mut out = Vec::new();
    crate::sys::fork::walking_modules(|| {
        TargetSharedLibrary::each(|lib| {
            let bias = lib.virtual_memory_bias().0 as u64;
            let segments = lib
                .segments()
                .filter(|s| s.is_load())
                .map(|s| {
                    let start = s.actual_virtual_memory_address(lib).0 as u64;
                    (start, start + s.len() as u64)
                })
                .collect();
            let mut path = lib.name().to_string_lossy().into_owned();
            if path.is_empty() && out.is_empty() {
                // The main program, where `/proc/self/exe` cannot be read (no `/proc` mounted).
                path = main_path_without_proc().to_string();
            }
            let build_id = match lib.id() {
                Some(findshlibs::SharedLibraryId::GnuBuildId(bytes)) => {
                    bytes.iter().map(|b| format!("{b:02x}")).collect()
                }
                _ => String::new(),
            };
            out.push(LoadedModule { path, bias, build_id, sections: Vec::new(), segments });
        })
    });
    out
}

/// The main program's file as it was started, made absolute against the working directory at the
/// first call (call once at start-up, before the program can `chdir`); empty when unknown.
pub fn main_path_without_proc() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let Some(path) = crate::sys::identity::exec_path() else { return String::new() };
        let absolute = if path.is_absolute() {
            path
        } else {
            std::env::current_dir().map(|dir| dir.join(path)).unwrap_or_default()
        };
        absolute.to_string_lossy().into_owned()
    })
}

/// The main program's file: `/proc/self/exe`, else the path it was started with.
pub fn main_program_path() -> Option<std::path::PathBuf> {
    std::env::current_exe().ok().or_else(|| {
        let path = main_path_without_proc();
        (!path.is_empty()).then(|| path.into())
    })
}

/// Whether this process's `/proc` files can be read (not in a container or chroot without `/proc`).
pub fn proc_readable() -> bool {
    std::path::Path::new("/proc/self/maps").exists()
}

/// Every loaded module (PC sections not read), in the loader's order.
pub fn all() -> Vec<LoadedModule> {
    loaded()
}

/// Every loaded module that has PC sections, in the loader's order.
pub fn walk() -> Vec<LoadedModule> {
    loaded()
        .into_iter()
        .filter_map(|mut m| {
            m.sections = pc_sections(&m.path, m.bias)?;
            (!m.sections.is_empty()).then_some(m)
        })
        .collect()
}

/// The loaded module whose segments contain `addr`, without its PC sections (no file is opened).
pub fn module_of(addr: u64) -> Option<LoadedModule> {
    loaded().into_iter().find(|m| m.contains(addr))
}

/// The loaded module whose segments contain `addr`, with its PC sections when its file is readable.
pub fn containing(addr: u64) -> Option<LoadedModule> {
    let mut m = loaded().into_iter().find(|m| m.contains(addr))?;
    m.sections = pc_sections(&m.path, m.bias).unwrap_or_default();
    Some(m)
}

/// The `SHF_ALLOC` PC sections named in the file at `path`, at run-time
/// addresses for load bias `bias`. `None` for files that cannot be read as 64-bit ELF.
pub fn pc_sections(path: &str, bias: u64) -> Option<Vec<PcSection>> {
    // Loader names without a slash are not files (the vDSO is "linux-vdso.so.1").
    if !path.contains('/') {
        return None;
    }
    let mut file = File::open(path).ok()?;
    let header = Header::from_fd(&mut file).ok()?;
    if &header.e_ident[..4] != b"\x7fELF" || header.e_ident[4] != goblin::elf::header::ELFCLASS64 {
        return None;
    }
    let count = usize::from(header.e_shnum);
    if count == 0 || count > 65_280 || usize::from(header.e_shstrndx) >= count {
        return None;
    }
    let headers = SectionHeader::from_fd(&mut file, header.e_shoff, count).ok()?;
    let strtab = &headers[usize::from(header.e_shstrndx)];
    let mut names = vec![0u8; usize::try_from(strtab.sh_size).ok().filter(|&n| n <= 1 << 24)?];
    file.read_exact_at(&mut names, strtab.sh_offset).ok()?;
    let sections = headers
        .iter()
        .filter(|sh| sh.sh_flags & u64::from(SHF_ALLOC) != 0)
        .filter_map(|sh| {
            let name = names.get(sh.sh_name as usize..)?;
            let name = std::str::from_utf8(&name[..name.iter().position(|&b| b == 0)?]).ok()?;
            let id = parse_section_name(name)?;
            Some(PcSection { id, addr: sh.sh_addr.wrapping_add(bias), size: sh.sh_size })
        })
        .collect();
    Some(sections)
}

/// The start of the memory mapping (from `/proc/self/maps`) containing `addr`:
/// groups the tables of code registered from anonymous memory (a JIT) into one module.
pub fn mapping_start(addr: u64) -> Option<u64> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let (start, end) = line.split_whitespace().next()?.split_once('-')?;
        let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
        (start..end).contains(&addr).then_some(start)
    })
}

/// The executable mappings of the process (from `/proc/self/maps`), adjacent ones merged: where the
/// PCs of a table may point.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeRanges(Vec<(u64, u64)>);

impl CodeRanges {
    /// The executable mappings now; where `/proc` cannot be read (a container or chroot without it
    /// mounted), the loaded modules' executable segments (JIT'd code is then left out).
    pub fn now() -> CodeRanges {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let ranges = CodeRanges::parse(&maps);
        if !ranges.0.is_empty() {
            return ranges;
        }
        let mut segments = Vec::new();
        crate::sys::fork::walking_modules(|| {
            TargetSharedLibrary::each(|lib| {
                segments.extend(lib.segments().filter(|s| s.is_code()).map(|s| {
                    let start = s.actual_virtual_memory_address(lib).0 as u64;
                    (start, start + s.len() as u64)
                }));
            })
        });
        CodeRanges::merged(segments)
    }

    /// Ranges sorted, adjacent and overlapping ones merged.
    fn merged(mut ranges: Vec<(u64, u64)>) -> CodeRanges {
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if last.1 >= start => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        CodeRanges(merged)
    }

    /// Parses `/proc/<pid>/maps` text.
    pub fn parse(maps: &str) -> CodeRanges {
        let ranges: Vec<(u64, u64)> = maps
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let (start, end) = fields.next()?.split_once('-')?;
                let perms = fields.next()?;
                (perms.as_bytes().get(2) == Some(&b'x'))
                    .then_some((u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?))
            })
            .collect();
        CodeRanges::merged(ranges)
    }

    /// Whether `[start, start + len)` lies in one executable mapping.
    pub fn contains(&self, start: u64, len: u64) -> bool {
        let at = self.0.partition_point(|&(s, _)| s <= start);
        at > 0 && {
            let (_, end) = self.0[at - 1];
            start < end && start.checked_add(len).is_some_and(|e| e <= end)
        }
    }
}

/// Copies `len` bytes of this process's memory at `addr`; `None` if any of it is unreadable.
pub fn read_memory(addr: u64, len: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok().filter(|&n| n <= 1 << 32)?;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = mem::read_into(addr.checked_add(done as u64)?, &mut buf[done..]);
        if n == 0 {
            return None;
        }
        done += n;
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_name_files_by_absolute_path_device_and_inode() {
        let line = "7f3a1c000000-7f3a1c021000 r-xp 00001000 fe:01 1835562                    /opt/my app/lib.so";
        let (range, file) = MappedFile::parse(line).unwrap();
        assert_eq!(range, 0x7f3a_1c00_0000..0x7f3a_1c02_1000);
        assert_eq!(file, MappedFile { path: "/opt/my app/lib.so".into(), dev: (0xfe, 1), ino: 1_835_562 });
        assert_eq!(MappedFile::parse("7f3a1c000000-7f3a1c021000 rw-p 00000000 00:00 0 "), None, "anonymous");
        assert_eq!(MappedFile::parse("55d0c4e5a000-55d0c4e7b000 rw-p 00000000 00:00 0   [heap]"), None);
        assert_eq!(MappedFile::parse("7f3a1c000000-7f3a1c021000 r-xp 00000000 fe:01 12 /tmp/p.so (deleted)"), None);
        // The test binary's own module resolves to its file, the same one as on disk.
        let exe = std::env::current_exe().unwrap();
        let module = loaded().into_iter().find(|m| std::path::Path::new(&m.path) == exe).unwrap();
        let mapped = module.mapped_file().unwrap();
        assert!(mapped.is(&std::fs::metadata(&mapped.path).unwrap()), "{mapped:?}");
    }

    #[test]
    fn walk_finds_the_test_binary_and_skips_the_vdso() {
        let all = loaded();
        let exe = std::env::current_exe().unwrap();
        assert!(all.iter().any(|m| std::path::Path::new(&m.path) == exe), "{all:?}");
        // The test binary has no PC sections; nothing in the walk is unreadable or the vDSO.
        for m in walk() {
            assert!(m.path.contains('/'));
        }
        assert_eq!(pc_sections("linux-vdso.so.1", 0), None);
        assert_eq!(pc_sections("/nonexistent/file", 0), None);
        assert_eq!(pc_sections("/proc/self/status", 0), None);
        assert_eq!(pc_sections(exe.to_str().unwrap(), 0), Some(vec![]));
    }

    #[test]
    fn containing_finds_own_code() {
        let here = containing_finds_own_code as fn() as usize as u64;
        let m = containing(here).expect("own module");
        assert_eq!(std::path::Path::new(&m.path), std::env::current_exe().unwrap());
        assert_eq!(containing(8), None);
        let boxed = Box::new([0u8; 64]);
        let at = boxed.as_ptr() as u64;
        assert!(mapping_start(at).is_some_and(|start| start <= at && start % 4096 == 0));
        assert_eq!(mapping_start(8), None);
    }

    #[test]
    fn code_ranges_are_the_executable_mappings() {
        let maps =
            "1000-3000 r-xp 0 0:0 0 /a\n3000-4000 r-xp 0 0:0 0 /a\n5000-6000 rw-p 0 0:0 0\n7000-8000 --xp 0 0:0 0\n";
        let code = CodeRanges::parse(maps);
        assert!(code.contains(0x1000, 1) && code.contains(0x2ff0, 0x20) && code.contains(0x7000, 0x1000));
        assert!(!code.contains(0xfff, 1) && !code.contains(0x3ff0, 0x20) && !code.contains(0x5000, 1));
        assert!(!code.contains(0x8000, 1) && !code.contains(u64::MAX, 2));
        let here = code_ranges_are_the_executable_mappings as fn() as usize as u64;
        assert!(CodeRanges::now().contains(here, 16));
        let data = [0u8; 8];
        assert!(!CodeRanges::now().contains(data.as_ptr() as u64, 1));
    }

    #[test]
    fn reads_memory_without_faulting() {
        let data = [1u8, 2, 3, 4];
        assert_eq!(read_memory(data.as_ptr() as u64, 4), Some(vec![1, 2, 3, 4]));
        assert_eq!(read_memory(16, 4), None);
        assert_eq!(read_memory(data.as_ptr() as u64, 0), Some(vec![]));
    }
}
