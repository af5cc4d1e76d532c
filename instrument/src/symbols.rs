//! Function names from the symbol table and DWARF, demangled.
//!
//! [`Function`]s come from `.symtab` (or `.dynsym` in a stripped binary):
//! every defined `STT_FUNC`/`STT_GNU_IFUNC`, sorted by address, one per
//! address. [`SourceMap`] answers "which source line is this address" from
//! the DWARF line tables, when the file has them.

use addr2line::gimli::{self, EndianSlice, LittleEndian};

/// One function of the symbol table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Demangled: Rust without the hash, C++ in full, anything else as is.
    pub name: String,
    /// The symbol as it appears in the file.
    pub raw_name: String,
    /// Link-time address of the first instruction.
    pub address: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
}

impl Function {
    /// True when `addr` lies inside the function (or is its address, for a
    /// function of unknown size).
    pub fn contains(&self, addr: u64) -> bool {
        addr == self.address || (addr > self.address && addr - self.address < self.size)
    }
}

/// Demangles a Rust (legacy or v0) or C++ (Itanium) symbol; returns anything
/// else unchanged.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        // `{:#}` leaves out the hash.
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    raw.to_string()
}

/// Candidate symbol for [`functions_from_symbols`].
pub(crate) struct RawSymbol<'a> {
    pub name: &'a str,
    pub address: u64,
    pub size: u64,
    pub global: bool,
}

/// Sorts by address and keeps one symbol per address: global (or weak)
/// before local, then the larger size, then the first seen.
pub(crate) fn functions_from_symbols<'a>(syms: impl IntoIterator<Item = RawSymbol<'a>>) -> Vec<Function> {
    let mut syms: Vec<RawSymbol<'a>> = syms.into_iter().filter(|s| s.address != 0 && !s.name.is_empty()).collect();
    // Stable sort: among equals, the table order decides.
    syms.sort_by(|a, b| a.address.cmp(&b.address).then(b.global.cmp(&a.global)).then(b.size.cmp(&a.size)));
    syms.dedup_by_key(|s| s.address);
    syms.into_iter()
        .map(|s| Function { name: demangle(s.name), raw_name: s.name.to_string(), address: s.address, size: s.size })
        .collect()
}

/// The innermost function containing `addr` in a list sorted by address.
pub fn find_function(functions: &[Function], addr: u64) -> Option<&Function> {
    let end = functions.partition_point(|f| f.address <= addr);
    // Functions rarely nest; look back a few in case a sized one encloses a smaller neighbour.
    functions[..end].iter().rev().take(4).find(|f| f.contains(addr))
}

/// A Rust function name without generic arguments, as Rust's own backtraces print paths:
/// `{closure#0}<app::main::{closure_env#0}, u64>` is `{closure#0}`, and
/// `<alloc::boxed::Box<dyn FnOnce<()>> as core::ops::FnOnce<()>>::call_once` is
/// `<alloc::boxed::Box as core::ops::FnOnce>::call_once`. A `<` that opens a qualified path is kept.
pub fn without_generics(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut skipping = 0usize;
    let mut previous = ' ';
    for c in name.chars() {
        if skipping > 0 {
            match c {
                '<' => skipping += 1,
                '>' => skipping -= 1,
                _ => {}
            }
            continue;
        }
        if c == '<' && (previous.is_alphanumeric() || matches!(previous, '_' | '}' | '>')) {
            skipping = 1;
            continue;
        }
        out.push(c);
        previous = c;
    }
    out
}

/// A source position from the DWARF line table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceLocation {
    pub file: String,
    pub line: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

impl std::fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if let Some(c) = self.column {
            write!(f, ":{c}")?;
        }
        Ok(())
    }
}

/// Address-to-line lookups for one file. Build it once per file (see
/// [`crate::elf::Module::source_map`]) and reuse it.
pub struct SourceMap<'a> {
    ctx: addr2line::Context<EndianSlice<'a, LittleEndian>>,
}

impl<'a> SourceMap<'a> {
    /// Loads the DWARF sections that `section` returns by name (e.g.
    /// `.debug_line`). `None` when the file has no usable line information.
    pub fn load(section: impl Fn(&str) -> Option<&'a [u8]>) -> Option<SourceMap<'a>> {
        section(".debug_line")?;
        let dwarf = gimli::Dwarf::load(|id: gimli::SectionId| -> Result<_, gimli::Error> {
            Ok(EndianSlice::new(section(id.name()).unwrap_or(&[]), LittleEndian))
        })
        .ok()?;
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(SourceMap { ctx })
    }

    /// The first and last line of `file` that the line table gives the code in `[start, end)` (a
    /// function's own lines, without those of code inlined from other files).
    pub fn line_span(&self, start: u64, end: u64, file: &str) -> Option<(u32, u32)> {
        let rows = self.ctx.find_location_range(start, end).ok()?;
        let mut span: Option<(u32, u32)> = None;
        for (_, _, loc) in rows {
            let (Some(f), Some(line)) = (loc.file, loc.line.filter(|&l| l > 0)) else { continue };
            if f == file {
                span = Some(span.map_or((line, line), |(lo, hi)| (lo.min(line), hi.max(line))));
            }
        }
        span
    }

    /// The address ranges `[start, end)` whose line-table file satisfies `wanted`, merged.
    pub fn ranges_in_files(&self, wanted: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let Ok(rows) = self.ctx.find_location_range(0, u64::MAX) else { return ranges };
        for (addr, len, loc) in rows {
            if !loc.file.is_some_and(&wanted) {
                continue;
            }
            match ranges.last_mut() {
                Some(last) if last.1 == addr => last.1 = addr + len,
                _ => ranges.push((addr, addr + len)),
            }
        }
        ranges.sort_unstable();
        ranges
    }

    /// The line of the instruction at link-time address `addr` in the source of the function that holds
    /// it: the outermost frame of its inlining chain (for an access inlined from `core::ptr`, the line
    /// of the caller that the function's own file shows).
    pub fn outer_location(&self, addr: u64) -> Option<SourceLocation> {
        let mut frames = self.ctx.find_frames(addr).skip_all_loads().ok()?;
        let mut outer = None;
        while let Ok(Some(frame)) = frames.next() {
            if let Some(loc) = frame.location {
                if let (Some(file), Some(line)) = (loc.file, loc.line) {
                    outer =
                        Some(SourceLocation { file: file.to_string(), line, column: loc.column.filter(|&c| c != 0) });
                }
            }
        }
        outer.or_else(|| self.location(addr))
    }

    /// The files of every frame of the inlining chain at `addr` that has a line (innermost first); empty
    /// when the debug info gives the address no line.
    pub fn frame_files(&self, addr: u64) -> Vec<String> {
        let mut files = Vec::new();
        if let Ok(mut frames) = self.ctx.find_frames(addr).skip_all_loads() {
            while let Ok(Some(frame)) = frames.next() {
                if let Some(loc) = frame.location.filter(|l| l.line.is_some_and(|n| n > 0)) {
                    files.extend(loc.file.map(str::to_string));
                }
            }
        }
        if files.is_empty() {
            files.extend(self.location(addr).filter(|l| l.line > 0).map(|l| l.file));
        }
        files
    }

    /// Whether the debug info places the instruction at `addr` in `core::sync::atomic`
    /// ([`crate::tags::is_core_atomic_access`], on its innermost frames).
    pub fn in_core_atomic(&self, addr: u64) -> bool {
        let Ok(mut frames) = self.ctx.find_frames(addr).skip_all_loads() else { return false };
        let Ok(Some(first)) = frames.next() else { return false };
        let caller = frames.next().ok().flatten();
        let function = first.function.as_ref().and_then(|f| f.demangle().ok());
        let (file, line) = first.location.as_ref().map_or((None, 0), |l| (l.file, l.line.unwrap_or(0)));
        let (caller_file, caller_line) =
            caller.as_ref().and_then(|c| c.location.as_ref()).map_or((None, 0), |l| (l.file, l.line.unwrap_or(0)));
        crate::tags::is_core_atomic_access(&crate::tags::Innermost {
            file,
            line,
            function: function.as_deref(),
            inlined: caller.is_some(),
            caller_file,
            caller_line,
        })
    }

    /// File, line and column of the instruction at link-time address `addr`.
    pub fn location(&self, addr: u64) -> Option<SourceLocation> {
        let loc = self.ctx.find_location(addr).ok()??;
        Some(SourceLocation { file: loc.file?.to_string(), line: loc.line?, column: loc.column.filter(|&c| c != 0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_cpp_and_c() {
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
        assert_eq!(demangle("_RNvCs1234_7mycrate4bump"), "mycrate::bump");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("bump"), "bump");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn dedups_by_address_preferring_global_and_sized() {
        let raw = [
            RawSymbol { name: "local_alias", address: 0x20, size: 8, global: false },
            RawSymbol { name: "b", address: 0x20, size: 8, global: true },
            RawSymbol { name: "a", address: 0x10, size: 0, global: true },
            RawSymbol { name: "a_sized", address: 0x10, size: 16, global: true },
            RawSymbol { name: "undefined", address: 0, size: 0, global: true },
        ];
        let f = functions_from_symbols(raw);
        let names: Vec<_> = f.iter().map(|f| f.raw_name.as_str()).collect();
        assert_eq!(names, ["a_sized", "b"]);
        assert_eq!(find_function(&f, 0x1f).unwrap().raw_name, "a_sized");
        assert_eq!(find_function(&f, 0x27).unwrap().raw_name, "b");
        assert!(find_function(&f, 0x28).is_none());
        assert!(find_function(&f, 0x5).is_none());
    }
}
