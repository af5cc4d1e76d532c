//! LLVM PC sections as emitted by the `SanitizerBinaryMetadata` pass:
//! `sanmd_covered<V>` (one entry per analysed function) and
//! `sanmd_atomics<V>` (one entry per atomic instruction).
//!
//! Every entry starts with a PC stored relative to the entry itself
//! (`pc = &entry + *entry`), an `i32`, or an `i64` when bit 16 of the version
//! is set (medium/large code model). A zero offset is padding and ends the
//! table. Entries are not aligned.
//!
//! Covered entries then hold the function size and the feature bits: fixed
//! `u32`s in version 1, ULEB128 in version 2 (LLVM's `!C` option), followed by
//! the stack-arguments size when [`FEATURE_UAR_HAS_SIZE`] is set.

use super::leb128::{read_uleb128, write_uleb128, LebError};
use std::fmt;

/// The function's atomics were analysed (atomic PCs are complete for it).
pub const FEATURE_ATOMICS: u64 = 1 << 0;
/// The function was analysed for use-after-return.
pub const FEATURE_UAR: u64 = 1 << 1;
/// A stack-arguments size follows the features.
pub const FEATURE_UAR_HAS_SIZE: u64 = 1 << 2;
/// Version bit: relative PCs are pointer-sized (8 bytes).
pub const VERSION_WIDE: u32 = 1 << 16;

/// Which table a section holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableKind {
    Covered,
    Atomics,
}

impl TableKind {
    /// `"covered"` or `"atomics"`, as in the section and callback names.
    pub fn name(self) -> &'static str {
        match self {
            TableKind::Covered => "covered",
            TableKind::Atomics => "atomics",
        }
    }
}

/// A PC-section version as passed to `__sanitizer_metadata_*_add`: the base
/// version (1 or 2) in the low 16 bits, [`VERSION_WIDE`] for 8-byte offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Version(u32);

impl Version {
    pub const V1: Version = Version(1);
    pub const V2: Version = Version(2);

    /// Accepts base versions 1 and 2 with or without [`VERSION_WIDE`].
    pub fn from_raw(raw: u32) -> Result<Version, u32> {
        match (raw & !VERSION_WIDE, raw & 0xffff) {
            (1 | 2, _) => Ok(Version(raw)),
            _ => Err(raw),
        }
    }

    pub fn raw(self) -> u32 {
        self.0
    }

    /// 1 or 2.
    pub fn base(self) -> u32 {
        self.0 & 0xffff
    }

    /// True when relative PCs are 8 bytes.
    pub fn wide(self) -> bool {
        self.0 & VERSION_WIDE != 0
    }

    pub fn with_wide(self, wide: bool) -> Version {
        if wide {
            Version(self.0 | VERSION_WIDE)
        } else {
            Version(self.0 & !VERSION_WIDE)
        }
    }

    /// Bytes of one relative PC.
    pub fn offset_size(self) -> usize {
        if self.wide() {
            8
        } else {
            4
        }
    }
}

/// What a section's name says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SectionId {
    pub kind: TableKind,
    pub version: Version,
}

impl SectionId {
    /// The ELF section name LLVM gives this table.
    pub fn section_name(self) -> String {
        let stem = format!("sanmd_{}", self.kind.name());
        if self.version.base() == 1 {
            stem
        } else {
            format!("{stem}{}", self.version.raw())
        }
    }
}

impl fmt::Display for SectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.section_name())
    }
}

/// Parses `sanmd_covered`, `sanmd_atomics2`, `sanmd_covered65538`, …
/// Version-1 names carry no number; their offsets are taken as 4 bytes.
pub fn parse_section_name(name: &str) -> Option<SectionId> {
    let rest = name.strip_prefix("sanmd_")?;
    let (kind, digits) = if let Some(d) = rest.strip_prefix("covered") {
        (TableKind::Covered, d)
    } else if let Some(d) = rest.strip_prefix("atomics") {
        (TableKind::Atomics, d)
    } else {
        return None;
    };
    let version = if digits.is_empty() {
        Version::V1
    } else {
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Version::from_raw(digits.parse().ok()?).ok()?
    };
    Some(SectionId { kind, version })
}

/// One analysed function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoveredEntry {
    /// Address of the function's first instruction.
    pub pc: u64,
    /// Size of the function in bytes.
    pub size: u64,
    /// `FEATURE_*` bits.
    pub features: u64,
    /// Stack-arguments size; present exactly when [`FEATURE_UAR_HAS_SIZE`] is set.
    pub stack_args_size: Option<u64>,
}

/// What is wrong with a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The table ends inside an entry's field.
    Truncated(&'static str),
    /// A ULEB128 field does not fit in 64 bits.
    Overlong(&'static str),
    /// `&entry + *entry` falls outside the address space.
    PcOutOfRange,
    /// A function size beyond 4 GiB (LLVM emits 32-bit sizes).
    SizeTooLarge(u64),
    /// A version other than 1 or 2 (with or without the wide bit).
    UnsupportedVersion(u32),
    /// A relative PC that points outside the code (executable memory, or the file's code sections).
    PcNotCode(u64),
    /// A function that starts in the code but whose size runs past its end.
    FunctionOverrunsCode { pc: u64, size: u64 },
    /// Decoding stopped (a zero offset) before the section's end, with nonzero bytes after it.
    EndsEarly,
}

/// A malformed table: which section, at which byte offset, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The section name (e.g. `sanmd_covered2`).
    pub section: String,
    /// Byte offset of the bad field from the start of the section.
    pub offset: usize,
    pub kind: ErrorKind,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::Truncated(field) => format!("truncated {field}"),
            ErrorKind::Overlong(field) => format!("overlong ULEB128 {field}"),
            ErrorKind::PcOutOfRange => "relative PC points outside the address space".to_string(),
            ErrorKind::SizeTooLarge(size) => format!("function size {size} exceeds 4 GiB"),
            ErrorKind::UnsupportedVersion(v) => format!("unsupported version {v:#x}"),
            ErrorKind::PcNotCode(pc) => format!("relative PC {pc:#x} outside the code"),
            ErrorKind::FunctionOverrunsCode { pc, size } => {
                format!("function at {pc:#x} of size {size} runs past the end of the code")
            }
            ErrorKind::EndsEarly => "end of table (a zero offset) before the section's end".to_string(),
        };
        write!(f, "{}: {} at byte {}", self.section, what, self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// Reads one table. `addr` is the address of `data[0]` in the address space
/// the PCs should come out in (link-time or run-time).
struct Reader<'a> {
    data: &'a [u8],
    addr: u64,
    pos: usize,
    id: SectionId,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], addr: u64, id: SectionId) -> Self {
        Reader { data, addr, pos: 0, id }
    }

    fn error(&self, offset: usize, kind: ErrorKind) -> DecodeError {
        DecodeError { section: self.id.section_name(), offset, kind }
    }

    /// The next entry's PC, or `None` at the end or at zero padding.
    fn pc(&mut self) -> Result<Option<u64>, DecodeError> {
        let size = self.id.version.offset_size();
        let rest = &self.data[self.pos..];
        if rest.len() < size {
            return self.end_of_table(rest).map(|()| None);
        }
        let offset = if size == 8 {
            i64::from_le_bytes(rest[..8].try_into().expect("8 bytes"))
        } else {
            i64::from(i32::from_le_bytes(rest[..4].try_into().expect("4 bytes")))
        };
        if offset == 0 {
            return Ok(None);
        }
        let pc = self.relative_pc(offset)?;
        self.pos += size;
        Ok(Some(pc))
    }

    /// After the last entry: the bytes left (zero padding, if any) must all be zero.
    fn check_rest(&self) -> Result<(), DecodeError> {
        match self.data[self.pos..].iter().all(|&b| b == 0) {
            true => Ok(()),
            false => Err(self.error(self.pos, ErrorKind::EndsEarly)),
        }
    }

    /// `&entry + offset` for the entry at `pos`.
    #[inline]
    fn relative_pc(&self, offset: i64) -> Result<u64, DecodeError> {
        let entry = self.addr.wrapping_add(self.pos as u64);
        entry.checked_add_signed(offset).ok_or_else(|| self.error(self.pos, ErrorKind::PcOutOfRange))
    }

    /// Bytes `rest` at `pos`, too few for a relative PC: fine when they are zero padding.
    fn end_of_table(&self, rest: &[u8]) -> Result<(), DecodeError> {
        if rest.iter().all(|&b| b == 0) {
            Ok(())
        } else {
            Err(self.error(self.pos, ErrorKind::Truncated("relative PC")))
        }
    }

    /// Every remaining entry of an atomics table, `N`-byte offsets read by
    /// `offset`: one pass over whole entries, then the tail.
    #[inline]
    fn atomics<const N: usize>(
        &mut self,
        offset: impl Fn([u8; N]) -> i64,
        mut f: impl FnMut(u64),
    ) -> Result<(), DecodeError> {
        let mut entries = self.data[self.pos..].chunks_exact(N);
        for entry in &mut entries {
            let offset = offset(entry.try_into().expect("N bytes"));
            if offset == 0 {
                return Ok(());
            }
            f(self.relative_pc(offset)?);
            self.pos += N;
        }
        self.end_of_table(entries.remainder())
    }

    /// A constant: fixed `u32` in version 1, ULEB128 in version 2.
    fn constant(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let rest = &self.data[self.pos..];
        if self.id.version.base() == 2 {
            // One- and two-byte ULEB128: the usual sizes and feature bits.
            match *rest {
                [low, ..] if low < 0x80 => {
                    self.pos += 1;
                    return Ok(u64::from(low));
                }
                [low, high, ..] if high < 0x80 => {
                    self.pos += 2;
                    return Ok(u64::from(low & 0x7f) | u64::from(high) << 7);
                }
                _ => {}
            }
        }
        if self.id.version.base() == 1 {
            let bytes: [u8; 4] = rest
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| self.error(self.pos, ErrorKind::Truncated(field)))?;
            self.pos += 4;
            return Ok(u64::from(u32::from_le_bytes(bytes)));
        }
        match read_uleb128(rest) {
            Ok((value, len)) => {
                self.pos += len;
                Ok(value)
            }
            Err(LebError::Truncated) => Err(self.error(self.pos, ErrorKind::Truncated(field))),
            Err(LebError::Overlong) => Err(self.error(self.pos, ErrorKind::Overlong(field))),
        }
    }

    fn covered(&mut self) -> Result<Option<CoveredEntry>, DecodeError> {
        let Some(pc) = self.pc()? else { return Ok(None) };
        let size_at = self.pos;
        let size = self.constant("function size")?;
        if size > u64::from(u32::MAX) {
            return Err(self.error(size_at, ErrorKind::SizeTooLarge(size)));
        }
        let features = self.constant("features")?;
        let stack_args_size =
            if features & FEATURE_UAR_HAS_SIZE != 0 { Some(self.constant("stack-arguments size")?) } else { None };
        Ok(Some(CoveredEntry { pc, size, features, stack_args_size }))
    }
}

fn check_version(id: SectionId) -> Result<(), DecodeError> {
    match Version::from_raw(id.version.raw()) {
        Ok(_) => Ok(()),
        Err(v) => Err(DecodeError {
            section: format!("sanmd_{}{}", id.kind.name(), v),
            offset: 0,
            kind: ErrorKind::UnsupportedVersion(v),
        }),
    }
}

/// Calls `f` with each function of a covered table, in table order.
pub fn for_each_covered(
    data: &[u8],
    addr: u64,
    version: Version,
    mut f: impl FnMut(CoveredEntry),
) -> Result<(), DecodeError> {
    let id = SectionId { kind: TableKind::Covered, version };
    check_version(id)?;
    let mut reader = Reader::new(data, addr, id);
    while let Some(entry) = reader.covered()? {
        f(entry);
    }
    Ok(())
}

/// Calls `f` with each PC of an atomics table, in table order.
pub fn for_each_atomic(data: &[u8], addr: u64, version: Version, f: impl FnMut(u64)) -> Result<(), DecodeError> {
    let id = SectionId { kind: TableKind::Atomics, version };
    check_version(id)?;
    let mut reader = Reader::new(data, addr, id);
    if version.wide() {
        reader.atomics(i64::from_le_bytes, f)
    } else {
        reader.atomics(|b: [u8; 4]| i64::from(i32::from_le_bytes(b)), f)
    }
}

/// Decodes a whole covered table.
pub fn decode_covered(data: &[u8], addr: u64, version: Version) -> Result<Vec<CoveredEntry>, DecodeError> {
    let mut out = Vec::new();
    for_each_covered(data, addr, version, |e| out.push(e))?;
    Ok(out)
}

/// Decodes a whole atomics table.
pub fn decode_atomics(data: &[u8], addr: u64, version: Version) -> Result<Vec<u64>, DecodeError> {
    let mut out = Vec::with_capacity(data.len() / version.offset_size());
    for_each_atomic(data, addr, version, |pc| out.push(pc))?;
    Ok(out)
}

/// Whether `[start, start + len)` lies in the code: executable memory at run time, the code sections
/// of a file.
pub type IsCode<'a> = &'a dyn Fn(u64, u64) -> bool;

/// A table decoded with the PC-offset width that fits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked<T> {
    pub entries: Vec<T>,
    /// The version the table was decoded with: the declared one, or the declared one with the other
    /// offset width.
    pub version: Version,
    /// When `version` is not the declared one: why the declared width did not fit.
    pub declared_misfit: Option<DecodeError>,
}

impl<T> Checked<T> {
    /// The line to print when the table was decoded with the other width than it declares.
    pub fn width_note(&self, declared: Version) -> Option<String> {
        let misfit = self.declared_misfit.as_ref()?;
        let (how, fix) = if self.version.wide() {
            (
                "IR compiled for the small code model, linked with the large one",
                "compile the IR with -mcmodel=large or give the JIT the small code model",
            )
        } else {
            (
                "IR compiled with -mcmodel=large, linked with the small code model",
                "compile the IR without -mcmodel=large or give the JIT the large code model",
            )
        };
        Some(format!(
            "{} holds {}-byte PC offsets although its version {:#x} declares {}-byte ones ({misfit}); decoded as version {:#x} ({how}: {fix})",
            misfit.section,
            self.version.offset_size(),
            declared.raw(),
            declared.offset_size(),
            self.version.raw(),
        ))
    }
}

/// A table that fits neither offset width: why, for each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WidthError {
    pub declared: Version,
    /// What is wrong with the declared width.
    pub error: DecodeError,
    /// What is wrong with the other width (`None` when only the declared one was tried: an
    /// unsupported version).
    pub other: Option<DecodeError>,
}

impl fmt::Display for WidthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(other) = &self.other else { return write!(f, "{}", self.error) };
        let what = |e: &DecodeError| e.to_string().strip_prefix(&format!("{}: ", e.section)).map(str::to_string);
        write!(
            f,
            "{} with its declared {}-byte PC offsets, and {} with {}-byte ones; if the IR was compiled for one code \
             model and linked with another, compile it with -mcmodel=large for a large-code-model JIT or give the \
             JIT the small code model",
            self.error,
            self.declared.offset_size(),
            what(other).unwrap_or_else(|| other.to_string()),
            self.declared.with_wide(!self.declared.wide()).offset_size(),
        )
    }
}

impl std::error::Error for WidthError {}

/// Decodes with the declared width, else with the other one: the first that decodes to the end of the
/// section with every PC (and every function) in the code.
fn checked<T>(
    declared: Version,
    decode: impl Fn(Version) -> Result<Vec<T>, DecodeError>,
) -> Result<Checked<T>, WidthError> {
    let error = match decode(declared) {
        Ok(entries) => return Ok(Checked { entries, version: declared, declared_misfit: None }),
        Err(e) => e,
    };
    if matches!(error.kind, ErrorKind::UnsupportedVersion(_)) {
        return Err(WidthError { declared, error, other: None });
    }
    let other = declared.with_wide(!declared.wide());
    match decode(other) {
        Ok(entries) if !entries.is_empty() => Ok(Checked { entries, version: other, declared_misfit: Some(error) }),
        Ok(_) => Err(WidthError { declared, error, other: None }),
        Err(e) => Err(WidthError { declared, error, other: Some(e) }),
    }
}

/// Decodes a covered table, checking that its declared PC-offset width fits its contents (the table
/// ends at the section's end, every function lies in the code); else tries the other width.
pub fn decode_covered_checked(
    data: &[u8],
    addr: u64,
    declared: Version,
    is_code: IsCode<'_>,
) -> Result<Checked<CoveredEntry>, WidthError> {
    checked(declared, |version| {
        let id = SectionId { kind: TableKind::Covered, version };
        check_version(id)?;
        let mut reader = Reader::new(data, addr, id);
        let mut out = Vec::with_capacity(data.len() / (version.offset_size() + 2));
        loop {
            let at = reader.pos;
            let Some(e) = reader.covered()? else { break };
            if !is_code(e.pc, e.size.max(1)) {
                let kind = match is_code(e.pc, 1) {
                    true => ErrorKind::FunctionOverrunsCode { pc: e.pc, size: e.size },
                    false => ErrorKind::PcNotCode(e.pc),
                };
                return Err(reader.error(at, kind));
            }
            out.push(e);
        }
        reader.check_rest()?;
        Ok(out)
    })
}

/// Decodes an atomics table, checking that its declared PC-offset width fits its contents (the table
/// ends at the section's end, every PC lies in the code); else tries the other width.
pub fn decode_atomics_checked(
    data: &[u8],
    addr: u64,
    declared: Version,
    is_code: IsCode<'_>,
) -> Result<Checked<u64>, WidthError> {
    checked(declared, |version| {
        let id = SectionId { kind: TableKind::Atomics, version };
        check_version(id)?;
        let mut reader = Reader::new(data, addr, id);
        let mut out = Vec::with_capacity(data.len() / version.offset_size());
        if version.wide() {
            reader.atomics(i64::from_le_bytes, |pc| out.push(pc))?;
        } else {
            reader.atomics(|b: [u8; 4]| i64::from(i32::from_le_bytes(b)), |pc| out.push(pc))?;
        }
        if let Some(i) = out.iter().position(|&pc| !is_code(pc, 1)) {
            return Err(reader.error(i * version.offset_size(), ErrorKind::PcNotCode(out[i])));
        }
        reader.check_rest()?;
        Ok(out)
    })
}

/// Why a table could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// Entry `index`'s PC is too far from its entry for the offset size.
    OffsetOutOfRange { index: usize },
    /// Entry `index`'s PC equals its own address: it would read back as padding.
    ZeroOffset { index: usize },
    /// A version-1 field of entry `index` does not fit in a `u32`.
    FieldTooLarge { index: usize },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::OffsetOutOfRange { index } => write!(f, "entry {index}: PC out of range of its offset"),
            EncodeError::ZeroOffset { index } => write!(f, "entry {index}: PC equals the entry address"),
            EncodeError::FieldTooLarge { index } => write!(f, "entry {index}: field does not fit in u32"),
        }
    }
}

impl std::error::Error for EncodeError {}

struct Writer {
    out: Vec<u8>,
    addr: u64,
    version: Version,
}

impl Writer {
    fn pc(&mut self, index: usize, pc: u64) -> Result<(), EncodeError> {
        let entry = self.addr.wrapping_add(self.out.len() as u64);
        let offset = pc.wrapping_sub(entry) as i64;
        if offset == 0 {
            return Err(EncodeError::ZeroOffset { index });
        }
        if entry.checked_add_signed(offset) != Some(pc) {
            return Err(EncodeError::OffsetOutOfRange { index });
        }
        if self.version.wide() {
            self.out.extend_from_slice(&offset.to_le_bytes());
        } else {
            let narrow = i32::try_from(offset).map_err(|_| EncodeError::OffsetOutOfRange { index })?;
            self.out.extend_from_slice(&narrow.to_le_bytes());
        }
        Ok(())
    }

    fn constant(&mut self, index: usize, value: u64) -> Result<(), EncodeError> {
        if self.version.base() == 1 {
            let narrow = u32::try_from(value).map_err(|_| EncodeError::FieldTooLarge { index })?;
            self.out.extend_from_slice(&narrow.to_le_bytes());
        } else {
            write_uleb128(&mut self.out, value);
        }
        Ok(())
    }
}

/// Encodes a covered table to be placed at `addr`. The stack-arguments size
/// is written exactly when `features` has [`FEATURE_UAR_HAS_SIZE`] (0 if absent).
pub fn encode_covered(entries: &[CoveredEntry], addr: u64, version: Version) -> Result<Vec<u8>, EncodeError> {
    let mut w = Writer { out: Vec::new(), addr, version };
    for (index, e) in entries.iter().enumerate() {
        w.pc(index, e.pc)?;
        w.constant(index, e.size)?;
        w.constant(index, e.features)?;
        if e.features & FEATURE_UAR_HAS_SIZE != 0 {
            w.constant(index, e.stack_args_size.unwrap_or(0))?;
        }
    }
    Ok(w.out)
}

/// Encodes an atomics table to be placed at `addr`.
pub fn encode_atomics(pcs: &[u64], addr: u64, version: Version) -> Result<Vec<u8>, EncodeError> {
    let mut w = Writer { out: Vec::new(), addr, version };
    for (index, &pc) in pcs.iter().enumerate() {
        w.pc(index, pc)?;
    }
    Ok(w.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_names() {
        let v2 = parse_section_name("sanmd_covered2").unwrap();
        assert_eq!((v2.kind, v2.version), (TableKind::Covered, Version::V2));
        let wide = parse_section_name("sanmd_atomics65538").unwrap();
        assert_eq!(wide.kind, TableKind::Atomics);
        assert!(wide.version.wide());
        assert_eq!(wide.section_name(), "sanmd_atomics65538");
        assert_eq!(parse_section_name("sanmd_covered").unwrap().version, Version::V1);
        assert_eq!(parse_section_name("sanmd_covered3"), None);
        assert_eq!(parse_section_name("sanmd_covered+2"), None);
        assert_eq!(parse_section_name(".text"), None);
    }

    #[test]
    fn decodes_clang_output() {
        // sanmd_covered2 of a clang-19 build at 0x4010: bump (size 16,
        // atomics) and main (size 17, atomics|UAR).
        let bytes = [0x40, 0xd1, 0xff, 0xff, 0x10, 0x01, 0x4a, 0xd1, 0xff, 0xff, 0x11, 0x03];
        let got = decode_covered(&bytes, 0x4010, Version::V2).unwrap();
        assert_eq!(got[0], CoveredEntry { pc: 0x1150, size: 16, features: 1, stack_args_size: None });
        assert_eq!(got[1], CoveredEntry { pc: 0x1160, size: 17, features: 3, stack_args_size: None });
    }

    /// Tables whose bytes use the other PC-offset width than their version declares (IR compiled for
    /// one code model, linked with another) decode with the width that fits, with a note; garbage is
    /// refused with both widths' reasons.
    #[test]
    fn checked_decoding_picks_the_width_that_fits() {
        let code = 0x7f00_0000_1000u64..0x7f00_0000_3000;
        let is_code = |start: u64, len: u64| start >= code.start && start + len <= code.end;
        let (narrow, wide) = (Version::V2, Version::V2.with_wide(true));
        let entries: Vec<CoveredEntry> = (0..4)
            .map(|i| CoveredEntry { pc: 0x7f00_0000_1000 + i * 0x100, size: 0x80, features: 1, stack_args_size: None })
            .collect();
        let pcs: Vec<u64> = entries.iter().map(|e| e.pc + 8).collect();
        let table = 0x7f00_0000_8000u64;
        for (written, declared) in [(wide, narrow), (narrow, wide), (narrow, narrow), (wide, wide)] {
            let covered = encode_covered(&entries, table, written).unwrap();
            let c = decode_covered_checked(&covered, table, declared, &is_code).unwrap();
            assert_eq!((c.entries.as_slice(), c.version), (entries.as_slice(), written));
            let atomics = encode_atomics(&pcs, table, written).unwrap();
            let a = decode_atomics_checked(&atomics, table, declared, &is_code).unwrap();
            assert_eq!((a.entries.as_slice(), a.version), (pcs.as_slice(), written));
            let note = c.width_note(declared);
            assert_eq!(note.is_some(), written != declared);
            if let Some(note) = note {
                assert!(note.starts_with("sanmd_covered"), "{note}");
                assert!(
                    note.contains(if written.wide() { "-mcmodel=large" } else { "without -mcmodel=large" }),
                    "{note}"
                );
            }
        }
        // PCs outside the code with either width: refused, both reasons named.
        let elsewhere: Vec<u64> = pcs.iter().map(|pc| pc + 0x10_0000).collect();
        let atomics = encode_atomics(&elsewhere, table, narrow).unwrap();
        let err = decode_atomics_checked(&atomics, table, narrow, &is_code).unwrap_err();
        assert_eq!(err.error.kind, ErrorKind::PcNotCode(elsewhere[0]));
        let line = err.to_string();
        assert!(
            line.contains("declared 4-byte") && line.contains("8-byte") && line.contains("-mcmodel=large"),
            "{line}"
        );
        // A zero offset before nonzero bytes: the table ends early.
        let mut covered = encode_covered(&entries[..1], table, narrow).unwrap();
        covered.extend_from_slice(&[0, 0, 0, 0, 7]);
        let err = decode_covered_checked(&covered, table, narrow, &is_code).unwrap_err();
        assert_eq!((err.error.kind, err.error.offset), (ErrorKind::EndsEarly, 7));
        // A function running past the end of the code.
        let long = [CoveredEntry { size: 0x2100, ..entries[0] }];
        let covered = encode_covered(&long, table, narrow).unwrap();
        let err = decode_covered_checked(&covered, table, narrow, &is_code).unwrap_err();
        assert!(matches!(err.error.kind, ErrorKind::FunctionOverrunsCode { size: 0x2100, .. }), "{err}");
        // Trailing zero padding is fine.
        let mut padded = encode_atomics(&pcs, table, narrow).unwrap();
        padded.extend_from_slice(&[0; 7]);
        assert_eq!(decode_atomics_checked(&padded, table, narrow, &is_code).unwrap().entries, pcs);
    }
}
