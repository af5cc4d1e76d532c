//! LLVM stack maps: the `.llvm_stackmaps` section written for
//! `llvm.experimental.stackmap`, `llvm.experimental.patchpoint` and
//! statepoints. Dependency-free; every malformed input is a typed
//! [`StackMapError`] naming the byte offset, never a panic.
//!
//! # Layouts
//!
//! All integers are little-endian (x86-64 ELF). All three versions share the
//! header and the record framing:
//!
//! ```text
//! u8 Version, u8 Reserved, u16 Reserved
//! u32 NumFunctions, u32 NumConstants, u32 NumRecords
//! StkSizeRecord[NumFunctions]
//! u64 Constants[NumConstants]
//! StkMapRecord[NumRecords] {
//!     u64 PatchPointID, u32 InstructionOffset, u16 Flags (reserved), u16 NumLocations
//!     Location[NumLocations]
//!     padding to 8 bytes
//!     u16 Padding, u16 NumLiveOuts
//!     LiveOut[NumLiveOuts] { u16 DwarfRegNum, u8 Reserved, u8 SizeInBytes }
//!     padding to 8 bytes
//! }
//! ```
//!
//! What differs:
//!
//! | version | `StkSizeRecord`                                   | `Location` (bytes)                                              |
//! |---------|---------------------------------------------------|-----------------------------------------------------------------|
//! | 1       | `u64 FunctionAddress, u64 StackSize`              | 8: `u8 Type, u8 Size, u16 DwarfRegNum, i32 Offset`             |
//! | 2       | `u64 FunctionAddress, u64 StackSize, u64 RecordCount` | 8: as version 1                                            |
//! | 3       | as version 2                                      | 12: `u8 Type, u8 Reserved, u16 Size, u16 DwarfRegNum, u16 Reserved, i32 Offset` |
//!
//! - **Version 1** is the layout of the LLVM `StackMaps.rst` seed document.
//!   That document calls the location's second byte "Reserved (location
//!   flags)"; LLVM has always written the location size there, so it is read
//!   as [`Location::size`]. With 8-byte locations after a 16-byte record
//!   header the "padding to 8 bytes" after the locations is always empty, so
//!   the shared framing above is exactly the document's record layout.
//!   Version 1 has no record counts: records cannot be tied to functions and
//!   [`StackMapRecord::function_index`] is `None`.
//! - **Version 2** is what LLVM 4–7 actually emitted (LLVM review D23487):
//!   version 1 plus `RecordCount` in each function record, which gives every
//!   record its function. The 2015 "StackMap v2" RFC (the seed proposal) drew
//!   a different, flat layout with offset tables (and LLVM review D13110
//!   drafted it), but it never shipped: no released LLVM writes it, and it
//!   cannot be told apart from the shipped layout by its header, so a reader
//!   must pick one. This one reads the layout that exists in real binaries.
//! - **Version 3** is what LLVM emits today (LLVM 8 and later): 12-byte
//!   locations with a 16-bit size, and alignment padding after the locations.
//!
//! Alignment is counted from the start of the section, which is where a
//! record's alignment comes from: the header, function records and constants
//! are all multiples of 8 bytes. The final padding of the last record must be
//! present (LLVM always writes it), so a section cut anywhere is an error.
//!
//! A linked file made of several objects with stack maps holds their
//! sections back to back; [`parse_all`] reads such a concatenation, while
//! [`parse`] reads exactly one stack map and rejects trailing bytes.
//!
//! Constant locations: `Constant` holds a signed 32-bit value in the offset
//! field, resolved sign-extended to 64 bits; `ConstantIndex` holds an index
//! into the constant pool, resolved to the pool's value.

use std::fmt;

/// A decoded stack map section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackMap {
    /// 1, 2 or 3.
    pub version: u8,
    pub functions: Vec<StackMapFunction>,
    /// The large-constant pool that `ConstantIndex` locations refer to.
    pub constants: Vec<u64>,
    pub records: Vec<StackMapRecord>,
}

/// One function with stack map records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackMapFunction {
    /// Link-time address of the function's entry (after relocation).
    pub address: u64,
    /// Frame size; `u64::MAX` when not statically known (dynamic allocas).
    pub stack_size: u64,
    /// Number of records belonging to this function (versions 2 and 3).
    pub record_count: Option<u64>,
}

/// One stack map or patch point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackMapRecord {
    /// The ID passed to the intrinsic.
    pub id: u64,
    /// Offset of the recorded PC from the start of its function.
    pub instruction_offset: u32,
    /// The reserved record-flags field, as read.
    pub flags: u16,
    /// Index into [`StackMap::functions`]; `None` in version 1.
    pub function_index: Option<usize>,
    pub locations: Vec<Location>,
    pub live_outs: Vec<LiveOut>,
}

/// How a [`Location`] gives its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocationKind {
    /// The value is in register `dwarf_reg`.
    Register,
    /// The value is the address `dwarf_reg + offset` (a frame index).
    Direct,
    /// The value is in memory at `[dwarf_reg + offset]` (a spill slot).
    Indirect,
    /// The value is the small constant in `offset`.
    Constant,
    /// The value is `constants[offset]`.
    ConstantIndex,
}

impl LocationKind {
    fn from_raw(raw: u8) -> Option<LocationKind> {
        Some(match raw {
            1 => LocationKind::Register,
            2 => LocationKind::Direct,
            3 => LocationKind::Indirect,
            4 => LocationKind::Constant,
            5 => LocationKind::ConstantIndex,
            _ => return None,
        })
    }
}

/// Where one live value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub kind: LocationKind,
    /// Size of the value in bytes.
    pub size: u16,
    /// DWARF register number (meaningful for Register, Direct, Indirect).
    pub dwarf_reg: u16,
    /// The raw offset / small constant / constant index field.
    pub offset: i32,
    /// The value for `Constant` (sign-extended) and `ConstantIndex` (from the pool).
    pub constant: Option<u64>,
}

/// A register live across a patch point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LiveOut {
    pub dwarf_reg: u16,
    /// Size in bytes.
    pub size: u8,
}

impl StackMap {
    /// The PC of record `record_index`: its function's address plus the
    /// instruction offset. `None` when the record does not exist or its
    /// function is unknown (version 1).
    pub fn record_pc(&self, record_index: usize) -> Option<u64> {
        let record = self.records.get(record_index)?;
        let function = self.functions.get(record.function_index?)?;
        function.address.checked_add(u64::from(record.instruction_offset))
    }
}

/// What is wrong with a stack map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackMapErrorKind {
    /// The data ends inside the named field.
    Truncated(&'static str),
    /// A version other than 1, 2 or 3.
    UnsupportedVersion(u8),
    /// A location type byte outside 1..=5.
    UnknownLocationType(u8),
    /// A `ConstantIndex` location pointing outside the constant pool.
    BadConstantIndex { index: i32, constants: u32 },
    /// The functions' record counts do not add up to `NumRecords`.
    RecordCountMismatch { num_records: u32, counted: u128 },
    /// Bytes after a complete stack map (in [`parse`]).
    TrailingData(usize),
}

/// A malformed `.llvm_stackmaps`: what is wrong, and at which byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackMapError {
    /// Byte offset of the bad field from the start of the data.
    pub offset: usize,
    pub kind: StackMapErrorKind,
}

impl fmt::Display for StackMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(".llvm_stackmaps: ")?;
        match &self.kind {
            StackMapErrorKind::Truncated(field) => write!(f, "truncated {field}")?,
            StackMapErrorKind::UnsupportedVersion(v) => write!(f, "unsupported version {v}")?,
            StackMapErrorKind::UnknownLocationType(t) => write!(f, "unknown location type {t}")?,
            StackMapErrorKind::BadConstantIndex { index, constants } => {
                write!(f, "constant index {index} outside the pool of {constants}")?
            }
            StackMapErrorKind::RecordCountMismatch { num_records, counted } => {
                write!(f, "function record counts add up to {counted}, NumRecords is {num_records}")?
            }
            StackMapErrorKind::TrailingData(len) => write!(f, "{len} trailing bytes after the stack map")?,
        }
        write!(f, " at byte {}", self.offset)
    }
}

impl std::error::Error for StackMapError {}

/// Reads exactly one stack map; bytes after it are an error
/// ([`StackMapErrorKind::TrailingData`]).
pub fn parse(data: &[u8]) -> Result<StackMap, StackMapError> {
    let mut reader = Reader { data, pos: 0 };
    let map = reader.stack_map()?;
    if reader.pos != data.len() {
        return Err(StackMapError {
            offset: reader.pos,
            kind: StackMapErrorKind::TrailingData(data.len() - reader.pos),
        });
    }
    Ok(map)
}

/// Reads stack maps placed back to back, as a linker concatenates the
/// sections of several objects. Empty data gives no maps.
pub fn parse_all(data: &[u8]) -> Result<Vec<StackMap>, StackMapError> {
    let mut reader = Reader { data, pos: 0 };
    let mut maps = Vec::new();
    while reader.pos < data.len() {
        maps.push(reader.stack_map()?);
    }
    Ok(maps)
}

const HEADER_SIZE: usize = 16;

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn error(&self, offset: usize, kind: StackMapErrorKind) -> StackMapError {
        StackMapError { offset, kind }
    }

    fn bytes<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], StackMapError> {
        let bytes = self
            .pos
            .checked_add(N)
            .and_then(|end| self.data.get(self.pos..end))
            .and_then(|b| <[u8; N]>::try_from(b).ok())
            .ok_or_else(|| self.error(self.pos, StackMapErrorKind::Truncated(field)))?;
        self.pos += N;
        Ok(bytes)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, StackMapError> {
        Ok(self.bytes::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, StackMapError> {
        self.bytes(field).map(u16::from_le_bytes)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, StackMapError> {
        self.bytes(field).map(u32::from_le_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, StackMapError> {
        self.bytes(field).map(i32::from_le_bytes)
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, StackMapError> {
        self.bytes(field).map(u64::from_le_bytes)
    }

    /// Skips padding up to the next multiple of 8 (from the map's start).
    fn align8(&mut self, start: usize, field: &'static str) -> Result<(), StackMapError> {
        let pad = (8 - (self.pos - start) % 8) % 8;
        if self.data.len() - self.pos < pad {
            return Err(self.error(self.pos, StackMapErrorKind::Truncated(field)));
        }
        self.pos += pad;
        Ok(())
    }

    /// A `Vec` for `count` items of `item_size` bytes, never larger than the
    /// remaining data could hold (a corrupt count must not allocate gigabytes).
    fn capacity<T>(&self, count: u32, item_size: usize) -> Vec<T> {
        Vec::with_capacity((count as usize).min((self.data.len() - self.pos) / item_size))
    }

    fn stack_map(&mut self) -> Result<StackMap, StackMapError> {
        let start = self.pos;
        if self.data.len() - start < HEADER_SIZE {
            return Err(self.error(start, StackMapErrorKind::Truncated("header")));
        }
        let version = self.u8("version")?;
        if !(1..=3).contains(&version) {
            return Err(self.error(start, StackMapErrorKind::UnsupportedVersion(version)));
        }
        self.u8("reserved")?;
        self.u16("reserved")?;
        let num_functions = self.u32("NumFunctions")?;
        let num_constants = self.u32("NumConstants")?;
        let num_records_at = self.pos;
        let num_records = self.u32("NumRecords")?;
        let has_counts = version >= 2;

        let mut functions = self.capacity(num_functions, if has_counts { 24 } else { 16 });
        for _ in 0..num_functions {
            let address = self.u64("function address")?;
            let stack_size = self.u64("stack size")?;
            let record_count = if has_counts { Some(self.u64("record count")?) } else { None };
            functions.push(StackMapFunction { address, stack_size, record_count });
        }
        if has_counts {
            let counted: u128 = functions.iter().filter_map(|f| f.record_count).map(u128::from).sum();
            if counted != u128::from(num_records) {
                return Err(self.error(num_records_at, StackMapErrorKind::RecordCountMismatch { num_records, counted }));
            }
        }

        let mut constants = self.capacity(num_constants, 8);
        for _ in 0..num_constants {
            constants.push(self.u64("constant")?);
        }

        // Function of each record, in order: function i owns the next
        // record_count[i] records. The counts were checked to add up.
        let mut owners = functions
            .iter()
            .enumerate()
            .flat_map(|(i, f)| std::iter::repeat_n(i, f.record_count.map_or(0, |c| c as usize)));
        let mut records = self.capacity(num_records, 16);
        for _ in 0..num_records {
            let function_index = if has_counts { owners.next() } else { None };
            records.push(self.record(start, version, &constants, function_index)?);
        }
        Ok(StackMap { version, functions, constants, records })
    }

    fn record(
        &mut self,
        start: usize,
        version: u8,
        constants: &[u64],
        function_index: Option<usize>,
    ) -> Result<StackMapRecord, StackMapError> {
        let id = self.u64("record ID")?;
        let instruction_offset = self.u32("instruction offset")?;
        let flags = self.u16("record flags")?;
        let num_locations = self.u16("NumLocations")?;
        let mut locations = self.capacity(u32::from(num_locations), if version >= 3 { 12 } else { 8 });
        for _ in 0..num_locations {
            locations.push(self.location(version, constants)?);
        }
        self.align8(start, "padding after locations")?;
        self.u16("live-out padding")?;
        let num_live_outs = self.u16("NumLiveOuts")?;
        let mut live_outs = self.capacity(u32::from(num_live_outs), 4);
        for _ in 0..num_live_outs {
            let dwarf_reg = self.u16("live-out register")?;
            self.u8("live-out reserved")?;
            let size = self.u8("live-out size")?;
            live_outs.push(LiveOut { dwarf_reg, size });
        }
        self.align8(start, "padding after live-outs")?;
        Ok(StackMapRecord { id, instruction_offset, flags, function_index, locations, live_outs })
    }

    fn location(&mut self, version: u8, constants: &[u64]) -> Result<Location, StackMapError> {
        let type_at = self.pos;
        let raw_kind = self.u8("location type")?;
        let kind = LocationKind::from_raw(raw_kind)
            .ok_or_else(|| self.error(type_at, StackMapErrorKind::UnknownLocationType(raw_kind)))?;
        let (size, dwarf_reg) = if version >= 3 {
            self.u8("location reserved")?;
            let size = self.u16("location size")?;
            let reg = self.u16("location register")?;
            self.u16("location reserved")?;
            (size, reg)
        } else {
            let size = self.u8("location size")?;
            (u16::from(size), self.u16("location register")?)
        };
        let offset_at = self.pos;
        let offset = self.i32("location offset")?;
        let constant = match kind {
            LocationKind::Constant => Some(i64::from(offset) as u64),
            LocationKind::ConstantIndex => {
                let value = usize::try_from(offset).ok().and_then(|i| constants.get(i)).copied();
                Some(value.ok_or_else(|| {
                    self.error(
                        offset_at,
                        StackMapErrorKind::BadConstantIndex { index: offset, constants: constants.len() as u32 },
                    )
                })?)
            }
            _ => None,
        };
        Ok(Location { kind, size, dwarf_reg, offset, constant })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes stack maps of any version, field by field, for tricky inputs.
    struct Builder {
        version: u8,
        out: Vec<u8>,
    }

    /// (kind, size, reg, offset)
    type Loc = (u8, u16, u16, i32);

    impl Builder {
        fn new(version: u8, functions: &[(u64, u64, u64)], constants: &[u64], num_records: u32) -> Builder {
            let mut out = vec![version, 0, 0, 0];
            out.extend_from_slice(&(functions.len() as u32).to_le_bytes());
            out.extend_from_slice(&(constants.len() as u32).to_le_bytes());
            out.extend_from_slice(&num_records.to_le_bytes());
            for &(address, stack, count) in functions {
                out.extend_from_slice(&address.to_le_bytes());
                out.extend_from_slice(&stack.to_le_bytes());
                if version >= 2 {
                    out.extend_from_slice(&count.to_le_bytes());
                }
            }
            for c in constants {
                out.extend_from_slice(&c.to_le_bytes());
            }
            Builder { version, out }
        }

        fn pad8(&mut self) {
            while self.out.len() % 8 != 0 {
                self.out.push(0);
            }
        }

        fn record(mut self, id: u64, offset: u32, locations: &[Loc], live_outs: &[(u16, u8)]) -> Builder {
            self.out.extend_from_slice(&id.to_le_bytes());
            self.out.extend_from_slice(&offset.to_le_bytes());
            self.out.extend_from_slice(&0u16.to_le_bytes());
            self.out.extend_from_slice(&(locations.len() as u16).to_le_bytes());
            for &(kind, size, reg, off) in locations {
                self.out.push(kind);
                if self.version >= 3 {
                    self.out.push(0);
                    self.out.extend_from_slice(&size.to_le_bytes());
                    self.out.extend_from_slice(&reg.to_le_bytes());
                    self.out.extend_from_slice(&0u16.to_le_bytes());
                } else {
                    self.out.push(size as u8);
                    self.out.extend_from_slice(&reg.to_le_bytes());
                }
                self.out.extend_from_slice(&off.to_le_bytes());
            }
            self.pad8();
            self.out.extend_from_slice(&0u16.to_le_bytes());
            self.out.extend_from_slice(&(live_outs.len() as u16).to_le_bytes());
            for &(reg, size) in live_outs {
                self.out.extend_from_slice(&reg.to_le_bytes());
                self.out.push(0);
                self.out.push(size);
            }
            self.pad8();
            self
        }
    }

    const BIG: u64 = 0x0123_4567_89ab_cdef;

    /// Two functions (two records, one record), one pool constant; every
    /// location kind, live-outs of odd and even counts.
    fn sample(version: u8) -> Vec<u8> {
        Builder::new(version, &[(0x1000, 16, 2), (0x2000, 32, 1)], &[BIG], 3)
            .record(10, 4, &[(1, 8, 3, 0), (4, 8, 0, -3)], &[(3, 8)])
            .record(11, 9, &[(2, 8, 7, 16), (3, 4, 6, -8), (5, 8, 0, 0)], &[])
            .record(20, 0x20, &[(5, 8, 0, 0)], &[(3, 8), (12, 16)])
            .out
    }

    #[test]
    fn all_versions_decode_the_same_content() {
        for version in 1..=3 {
            let map = parse(&sample(version)).unwrap_or_else(|e| panic!("v{version}: {e}"));
            assert_eq!(map.version, version);
            assert_eq!(map.constants, [BIG]);
            assert_eq!(map.functions[1].address, 0x2000);
            assert_eq!(map.functions[1].stack_size, 32);
            let ids: Vec<u64> = map.records.iter().map(|r| r.id).collect();
            assert_eq!(ids, [10, 11, 20]);
            let r0 = &map.records[0];
            assert_eq!(
                r0.locations[1],
                Location {
                    kind: LocationKind::Constant,
                    size: 8,
                    dwarf_reg: 0,
                    offset: -3,
                    constant: Some(-3i64 as u64)
                }
            );
            assert_eq!(r0.live_outs, [LiveOut { dwarf_reg: 3, size: 8 }]);
            let r1 = &map.records[1];
            let kinds: Vec<LocationKind> = r1.locations.iter().map(|l| l.kind).collect();
            assert_eq!(kinds, [LocationKind::Direct, LocationKind::Indirect, LocationKind::ConstantIndex]);
            assert_eq!((r1.locations[1].size, r1.locations[1].dwarf_reg, r1.locations[1].offset), (4, 6, -8));
            assert_eq!(r1.locations[2].constant, Some(BIG));
            assert_eq!(r1.locations[0].constant, None);
            assert_eq!(map.records[2].live_outs.len(), 2);
            if version == 1 {
                assert!(map.functions.iter().all(|f| f.record_count.is_none()));
                assert!(map.records.iter().all(|r| r.function_index.is_none()));
                assert_eq!(map.record_pc(0), None);
            } else {
                let owners: Vec<Option<usize>> = map.records.iter().map(|r| r.function_index).collect();
                assert_eq!(owners, [Some(0), Some(0), Some(1)]);
                assert_eq!(map.record_pc(1), Some(0x1009));
                assert_eq!(map.record_pc(2), Some(0x2020));
            }
            assert_eq!(map.record_pc(3), None);
        }
    }

    #[test]
    fn v3_pads_after_locations() {
        // One 12-byte location: 16 + 12 = 28, padded to 32 before the live-out header.
        let bytes = Builder::new(3, &[(0x1000, 8, 1)], &[], 1).record(1, 0, &[(1, 8, 0, 0)], &[]).out;
        assert_eq!(bytes.len(), 16 + 24 + 32 + 8);
        assert_eq!(parse(&bytes).unwrap().records[0].locations.len(), 1);
        // Version 1 has no such padding: 16 + 8 then the live-out header.
        let bytes = Builder::new(1, &[(0x1000, 8, 0)], &[], 1).record(1, 0, &[(1, 8, 0, 0)], &[]).out;
        assert_eq!(bytes.len(), 16 + 16 + 24 + 8);
        assert!(parse(&bytes).is_ok());
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in 1..=3 {
            let bytes = sample(version);
            for len in 0..bytes.len() {
                let err = parse(&bytes[..len]).expect_err("truncated input parsed");
                assert!(matches!(err.kind, StackMapErrorKind::Truncated(_)), "v{version} len {len}: {err}");
                assert!(err.offset <= len, "v{version} len {len}: {err}");
            }
        }
    }

    #[test]
    fn malformed_inputs() {
        let err = |bytes: &[u8]| parse(bytes).unwrap_err();
        let mut v4 = sample(3);
        v4[0] = 4;
        assert_eq!(err(&v4), StackMapError { offset: 0, kind: StackMapErrorKind::UnsupportedVersion(4) });
        assert_eq!(err(&[0; 16]).kind, StackMapErrorKind::UnsupportedVersion(0));

        // Location type 6 in the first location of the first record (v3).
        let first_location = 16 + 2 * 24 + 8 + 16;
        let mut bad_type = sample(3);
        bad_type[first_location] = 6;
        assert_eq!(
            err(&bad_type),
            StackMapError { offset: first_location, kind: StackMapErrorKind::UnknownLocationType(6) }
        );

        // Constant index 1 with one constant; -1 too.
        for index in [1, -1] {
            let bytes = Builder::new(3, &[(0x1000, 8, 1)], &[BIG], 1).record(1, 0, &[(5, 8, 0, index)], &[]).out;
            let at = 16 + 24 + 8 + 16 + 8;
            assert_eq!(
                err(&bytes),
                StackMapError { offset: at, kind: StackMapErrorKind::BadConstantIndex { index, constants: 1 } }
            );
        }

        // Record counts 2 + 2 against NumRecords 3.
        let bytes = Builder::new(2, &[(0x1000, 8, 2), (0x2000, 8, 2)], &[], 3).out;
        assert_eq!(
            err(&bytes),
            StackMapError { offset: 12, kind: StackMapErrorKind::RecordCountMismatch { num_records: 3, counted: 4 } }
        );
        // Counts that overflow u64 when added.
        let bytes = Builder::new(3, &[(0x1000, 8, u64::MAX), (0x2000, 8, 2)], &[], 1).out;
        assert!(
            matches!(err(&bytes).kind, StackMapErrorKind::RecordCountMismatch { counted, .. } if counted == u128::from(u64::MAX) + 2)
        );

        // Trailing bytes after a complete map.
        let mut trailing = sample(3);
        let len = trailing.len();
        trailing.extend_from_slice(&[0; 8]);
        assert_eq!(err(&trailing), StackMapError { offset: len, kind: StackMapErrorKind::TrailingData(8) });
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        let mut bytes = Builder::new(3, &[], &[], 0).out;
        bytes[4..16].copy_from_slice(&[0xff; 12]);
        assert_eq!(err_kind(&bytes), StackMapErrorKind::Truncated("function address"));
        let mut bytes = Builder::new(1, &[], &[], 0).out;
        bytes[8..12].copy_from_slice(&[0xff; 4]);
        assert_eq!(err_kind(&bytes), StackMapErrorKind::Truncated("constant"));
    }

    fn err_kind(bytes: &[u8]) -> StackMapErrorKind {
        parse(bytes).unwrap_err().kind
    }

    #[test]
    fn concatenated_maps() {
        let mut both = sample(3);
        both.extend_from_slice(&sample(2));
        let maps = parse_all(&both).unwrap();
        assert_eq!(maps.iter().map(|m| m.version).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(parse_all(&[]).unwrap(), []);
        let err = parse_all(&both[..both.len() - 1]).unwrap_err();
        assert!(matches!(err.kind, StackMapErrorKind::Truncated(_)));
    }

    #[test]
    fn display_names_section_and_offset() {
        let err = StackMapError { offset: 40, kind: StackMapErrorKind::UnknownLocationType(9) };
        assert_eq!(err.to_string(), ".llvm_stackmaps: unknown location type 9 at byte 40");
        assert_eq!(parse(&[3, 0]).unwrap_err().to_string(), ".llvm_stackmaps: truncated header at byte 0");
    }
}
