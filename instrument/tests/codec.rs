//! The PC-section codec: encode→decode round trips over versions 1 and 2,
//! narrow and wide offsets, with and without stack-args sizes, at arbitrary
//! table addresses; every truncation; zero padding; and a table of malformed
//! inputs with the exact error kind and byte offset.

use proptest::prelude::*;
use racewatch_instrument::format::pcsections::{
    decode_atomics, decode_covered, encode_atomics, encode_covered, for_each_atomic, for_each_covered,
    parse_section_name, CoveredEntry, DecodeError, ErrorKind, SectionId, TableKind, Version, FEATURE_ATOMICS,
    FEATURE_UAR, FEATURE_UAR_HAS_SIZE, VERSION_WIDE,
};

/// Tables in these tests stay below this many bytes, so an entry's position
/// never cancels its PC delta.
const MAX_TABLE: i64 = 1 << 16;

fn version(base: u32, wide: bool) -> Version {
    Version::from_raw(base).unwrap().with_wide(wide)
}

fn versions() -> impl Strategy<Value = Version> {
    (1u32..=2, any::<bool>()).prop_map(|(base, wide)| version(base, wide))
}

/// A table address; leaves room for the table itself below `u64::MAX`.
fn bases() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX - (1 << 20)), 0..=u64::MAX - (1 << 20), 0x1000u64..0x1_0000_0000]
}

/// A PC about `delta` bytes from `base`, mirrored when that would leave the
/// address space. `|delta| >= MAX_TABLE` keeps every relative offset non-zero.
fn pc_near(base: u64, delta: i64) -> u64 {
    base.checked_add_signed(delta).or_else(|| base.checked_add_signed(-delta)).expect("|delta| <= 2^62")
}

/// Deltas whose relative offsets fit the version's offset size.
fn deltas(v: Version) -> BoxedStrategy<i64> {
    let max: i64 = if v.wide() { 1 << 62 } else { (1 << 31) - 2 * MAX_TABLE };
    (MAX_TABLE..=max, any::<bool>()).prop_map(|(m, neg)| if neg { -m } else { m }).boxed()
}

/// Covered entries that version `v` can hold, placed around `base`.
fn covered_entries(v: Version, base: u64) -> impl Strategy<Value = Vec<CoveredEntry>> {
    let field_max = u64::from(u32::MAX);
    let features = if v.base() == 1 { (0..=field_max).boxed() } else { any::<u64>().boxed() };
    let extra = if v.base() == 1 { (0..=field_max).boxed() } else { any::<u64>().boxed() };
    let entry = (deltas(v), 0..=field_max, features, any::<bool>(), extra).prop_map(
        move |(delta, size, features, has_size, extra)| {
            let features = if has_size { features | FEATURE_UAR_HAS_SIZE } else { features & !FEATURE_UAR_HAS_SIZE };
            CoveredEntry { pc: pc_near(base, delta), size, features, stack_args_size: has_size.then_some(extra) }
        },
    );
    prop::collection::vec(entry, 0..40)
}

fn covered_case() -> impl Strategy<Value = (Version, u64, Vec<CoveredEntry>)> {
    (versions(), bases()).prop_flat_map(|(v, base)| (Just(v), Just(base), covered_entries(v, base)))
}

fn atomics_case() -> impl Strategy<Value = (Version, u64, Vec<u64>)> {
    (versions(), bases()).prop_flat_map(|(v, base)| {
        let pcs = prop::collection::vec(deltas(v).prop_map(move |d| pc_near(base, d)), 0..200);
        (Just(v), Just(base), pcs)
    })
}

/// What decoding `bytes[..len]` must give, where `boundaries[i]` is where
/// entry `i` starts and `entries_len` the number of entries: whole entries
/// decode, a cut inside an entry is `Truncated` at or after its start —
/// except a cut inside the first PC whose bytes so far are all zero, which
/// reads as padding.
fn check_truncation<T: PartialEq + std::fmt::Debug>(
    got: Result<Vec<T>, DecodeError>,
    all: &[T],
    boundaries: &[usize],
    bytes: &[u8],
    len: usize,
    offset_size: usize,
) -> Result<(), TestCaseError> {
    let whole = boundaries.iter().rposition(|&b| b <= len).unwrap();
    let start = boundaries[whole];
    let cut = &bytes[start..len];
    let padding_like = cut.len() < offset_size && cut.iter().all(|&b| b == 0);
    if len == start || padding_like {
        prop_assert_eq!(got.as_deref().ok(), Some(&all[..whole]), "len {}", len);
    } else {
        let err = got.expect_err("a cut entry must be an error");
        prop_assert!(matches!(err.kind, ErrorKind::Truncated(_)), "len {}: {}", len, err);
        prop_assert!(err.offset >= start && err.offset <= len, "len {}: {}", len, err);
        if len - start < offset_size {
            prop_assert_eq!(err.kind, ErrorKind::Truncated("relative PC"));
            prop_assert_eq!(err.offset, start);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn covered_round_trips((v, base, entries) in covered_case()) {
        let bytes = encode_covered(&entries, base, v).unwrap();
        prop_assert_eq!(&decode_covered(&bytes, base, v).unwrap(), &entries);
        let mut streamed = Vec::new();
        for_each_covered(&bytes, base, v, |e| streamed.push(e)).unwrap();
        prop_assert_eq!(&streamed, &entries);
        if v.base() == 1 {
            // Fixed fields: offset + 3 or 4 u32s per entry.
            let fixed: usize = entries.iter().map(|e| v.offset_size() + if e.stack_args_size.is_some() { 12 } else { 8 }).sum();
            prop_assert_eq!(bytes.len(), fixed);
        }
    }

    #[test]
    fn atomics_round_trip((v, base, pcs) in atomics_case()) {
        let bytes = encode_atomics(&pcs, base, v).unwrap();
        prop_assert_eq!(bytes.len(), pcs.len() * v.offset_size());
        prop_assert_eq!(&decode_atomics(&bytes, base, v).unwrap(), &pcs);
        let mut streamed = Vec::new();
        for_each_atomic(&bytes, base, v, |pc| streamed.push(pc)).unwrap();
        prop_assert_eq!(&streamed, &pcs);
    }

    /// The same bytes at another address decode to PCs moved by the same amount.
    #[test]
    fn tables_are_position_independent((v, base, pcs) in atomics_case(), shift in -(1i64 << 40)..(1i64 << 40)) {
        let bytes = encode_atomics(&pcs, base, v).unwrap();
        let Some(moved) = base.checked_add_signed(shift) else { return Ok(()) };
        if let Ok(got) = decode_atomics(&bytes, moved, v) {
            let expected: Vec<u64> = pcs.iter().map(|pc| pc.wrapping_add_signed(shift)).collect();
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn every_truncation_of_a_covered_table((v, base, entries) in covered_case()) {
        let bytes = encode_covered(&entries, base, v).unwrap();
        let boundaries: Vec<usize> =
            (0..=entries.len()).map(|i| encode_covered(&entries[..i], base, v).unwrap().len()).collect();
        for len in 0..=bytes.len() {
            check_truncation(decode_covered(&bytes[..len], base, v), &entries, &boundaries, &bytes, len, v.offset_size())?;
        }
    }

    #[test]
    fn every_truncation_of_an_atomics_table((v, base, pcs) in atomics_case()) {
        let bytes = encode_atomics(&pcs, base, v).unwrap();
        let boundaries: Vec<usize> = (0..=pcs.len()).map(|i| i * v.offset_size()).collect();
        for len in 0..=bytes.len() {
            check_truncation(decode_atomics(&bytes[..len], base, v), &pcs, &boundaries, &bytes, len, v.offset_size())?;
        }
    }

    /// Zero padding ends a table: whatever follows a zero relative PC is ignored.
    #[test]
    fn zero_padding_ends_a_table(
        (v, base, entries) in covered_case(),
        pad in 0usize..24,
        garbage in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let mut bytes = encode_covered(&entries, base, v).unwrap();
        bytes.extend(std::iter::repeat_n(0, pad));
        if pad >= v.offset_size() {
            bytes.extend_from_slice(&garbage);
        }
        prop_assert_eq!(decode_covered(&bytes, base, v).unwrap(), entries);
    }

    /// Arbitrary bytes never panic: a list of entries or a typed error inside the data.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96), v in versions(), base in bases()) {
        if let Err(e) = decode_covered(&bytes, base, v) {
            prop_assert!(e.offset <= bytes.len());
            prop_assert!(e.to_string().starts_with("sanmd_covered"));
        }
        if let Err(e) = decode_atomics(&bytes, base, v) {
            prop_assert!(e.offset <= bytes.len());
        }
    }
}

fn entry(pc: u64, size: u64, features: u64, stack_args_size: Option<u64>) -> CoveredEntry {
    CoveredEntry { pc, size, features, stack_args_size }
}

fn uleb(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

#[test]
fn known_bytes_decode() {
    let v2 = Version::V2;
    // Entry at 0x2000 pointing 0x100 back; size 300 (two ULEB bytes);
    // features atomics|UAR|has-size; 24 bytes of stack arguments.
    let bytes = [&(-0x100i32).to_le_bytes()[..], &uleb(300), &uleb(7), &uleb(24)].concat();
    assert_eq!(bytes.len(), 8);
    let features = FEATURE_ATOMICS | FEATURE_UAR | FEATURE_UAR_HAS_SIZE;
    assert_eq!(decode_covered(&bytes, 0x2000, v2).unwrap(), [entry(0x1f00, 300, features, Some(24))]);
    // Version 1: fixed u32 fields.
    let v1 = [&0x40i32.to_le_bytes()[..], &17u32.to_le_bytes(), &1u32.to_le_bytes()].concat();
    assert_eq!(decode_covered(&v1, 0x1000, Version::V1).unwrap(), [entry(0x1040, 17, 1, None)]);
    // Wide atomics: i64 offsets relative to each entry.
    let wide = version(2, true);
    assert_eq!(wide.raw(), 2 | VERSION_WIDE);
    let bytes = [(-8i64).to_le_bytes(), (1i64 << 40).to_le_bytes()].concat();
    assert_eq!(decode_atomics(&bytes, 0x10_0000, wide).unwrap(), [0x10_0000 - 8, 0x10_0008 + (1 << 40)]);
}

/// One malformed table: decoding `bytes` at `addr` must fail with exactly `kind` at `offset`.
struct Bad {
    what: &'static str,
    table: TableKind,
    version: Version,
    addr: u64,
    bytes: Vec<u8>,
    offset: usize,
    kind: ErrorKind,
}

fn bad(what: &'static str, table: TableKind, version: Version, bytes: Vec<u8>, offset: usize, kind: ErrorKind) -> Bad {
    Bad { what, table, version, addr: 0x40_0000, bytes, offset, kind }
}

#[test]
fn malformed_tables() {
    use ErrorKind::*;
    use TableKind::{Atomics, Covered};
    let v1 = Version::V1;
    let v2 = Version::V2;
    let wide = version(2, true);
    let pc = |rel: i32| rel.to_le_bytes().to_vec();
    let cat = |parts: &[&[u8]]| parts.concat();

    let mut cases = vec![
        bad("3 of 4 PC bytes", Atomics, v2, vec![0x10, 0, 0], 0, Truncated("relative PC")),
        bad("second PC cut", Atomics, v2, cat(&[&pc(0x10), &[0, 0, 1]]), 4, Truncated("relative PC")),
        bad(
            "7 of 8 wide PC bytes",
            Atomics,
            wide,
            cat(&[&(-16i64).to_le_bytes(), &[1; 7]]),
            8,
            Truncated("relative PC"),
        ),
        bad(
            "covered PC cut",
            Covered,
            v2,
            cat(&[&pc(-0x100), &uleb(16), &uleb(1), &[5, 0]]),
            6,
            Truncated("relative PC"),
        ),
        bad("no size", Covered, v2, pc(-0x100), 4, Truncated("function size")),
        bad("size ULEB cut", Covered, v2, cat(&[&pc(-0x100), &[0x80, 0x80]]), 4, Truncated("function size")),
        bad("no features", Covered, v2, cat(&[&pc(-0x100), &uleb(300)]), 6, Truncated("features")),
        bad("features ULEB cut", Covered, v2, cat(&[&pc(-0x100), &uleb(300), &[0x81]]), 6, Truncated("features")),
        bad(
            "no stack-args size",
            Covered,
            v2,
            cat(&[&pc(-0x100), &uleb(16), &uleb(FEATURE_UAR_HAS_SIZE | FEATURE_UAR)]),
            6,
            Truncated("stack-arguments size"),
        ),
        bad(
            "stack-args ULEB cut",
            Covered,
            wide,
            cat(&[&(-0x100i64).to_le_bytes(), &uleb(16), &uleb(6), &[0xff, 0xff]]),
            10,
            Truncated("stack-arguments size"),
        ),
        bad("v1 size cut", Covered, v1, cat(&[&pc(-0x100), &[16, 0, 0]]), 4, Truncated("function size")),
        bad("v1 features cut", Covered, v1, cat(&[&pc(-0x100), &16u32.to_le_bytes(), &[1]]), 8, Truncated("features")),
        bad(
            "v1 stack-args cut",
            Covered,
            v1,
            cat(&[&pc(-0x100), &16u32.to_le_bytes(), &4u32.to_le_bytes(), &[0, 0]]),
            12,
            Truncated("stack-arguments size"),
        ),
        bad("11-byte size ULEB", Covered, v2, cat(&[&pc(-0x100), &[0x80; 10], &[0]]), 4, Overlong("function size")),
        bad(
            "size ULEB above 2^64",
            Covered,
            v2,
            cat(&[&pc(-0x100), &[0xff; 9], &[0x02]]),
            4,
            Overlong("function size"),
        ),
        bad("overlong features", Covered, v2, cat(&[&pc(-0x100), &uleb(1), &[0xff; 10]]), 5, Overlong("features")),
        bad(
            "overlong stack-args size",
            Covered,
            v2,
            cat(&[&pc(-0x100), &uleb(1), &uleb(4), &[0xff; 10], &[1]]),
            6,
            Overlong("stack-arguments size"),
        ),
        bad("size 4 GiB", Covered, v2, cat(&[&pc(-0x100), &uleb(1 << 32), &uleb(0)]), 4, SizeTooLarge(1 << 32)),
        bad(
            "second entry's size is u64::MAX",
            Covered,
            v2,
            cat(&[&pc(-0x100), &uleb(8), &uleb(0), &pc(-0x200), &uleb(u64::MAX), &uleb(0)]),
            10,
            SizeTooLarge(u64::MAX),
        ),
    ];
    // PCs outside the address space, below 0 and above u64::MAX.
    let mut below = bad("PC below 0", Atomics, v2, pc(-0x20), 0, PcOutOfRange);
    below.addr = 0x10;
    let mut second_below = bad("second PC below 0", Atomics, v2, cat(&[&pc(0x10), &pc(-0x20)]), 4, PcOutOfRange);
    second_below.addr = 0x10;
    let mut above = bad("PC above u64::MAX", Atomics, wide, i64::MAX.to_le_bytes().to_vec(), 0, PcOutOfRange);
    above.addr = u64::MAX - 0x100;
    let mut covered_above =
        bad("covered PC above u64::MAX", Covered, v2, cat(&[&pc(0x200), &uleb(1), &uleb(0)]), 0, PcOutOfRange);
    covered_above.addr = u64::MAX - 0x100;
    cases.extend([below, second_below, above, covered_above]);

    for case in cases {
        let err = match case.table {
            TableKind::Covered => decode_covered(&case.bytes, case.addr, case.version).map(drop),
            TableKind::Atomics => decode_atomics(&case.bytes, case.addr, case.version).map(drop),
        }
        .expect_err(case.what);
        let section = SectionId { kind: case.table, version: case.version }.section_name();
        assert_eq!(
            err,
            DecodeError { section, offset: case.offset, kind: case.kind },
            "{}: bytes {:02x?}",
            case.what,
            case.bytes
        );
    }
}

#[test]
fn error_messages_name_section_field_and_offset() {
    let err = decode_covered(&[0xc0, 0xff, 0xff, 0xff, 0x80], 0x4000, Version::V2).unwrap_err();
    assert_eq!(err.to_string(), "sanmd_covered2: truncated function size at byte 4");
    let err = decode_atomics(&[1, 0, 0], 0, version(2, true)).unwrap_err();
    assert_eq!(err.to_string(), "sanmd_atomics65538: truncated relative PC at byte 0");
    let size = [&(-8i32).to_le_bytes()[..], &uleb(5 << 32), &uleb(0)].concat();
    let err = decode_covered(&size, 0x4000, Version::V2).unwrap_err();
    assert_eq!(err.to_string(), "sanmd_covered2: function size 21474836480 exceeds 4 GiB at byte 4");
}

#[test]
fn unsupported_versions_are_refused() {
    // A Version can only be built for 1 or 2 (narrow or wide), so an
    // unsupported version is refused before any table is read.
    for raw in [0, 3, 3 | VERSION_WIDE, 1 << 17 | 2, u32::MAX] {
        assert_eq!(Version::from_raw(raw), Err(raw), "{raw:#x}");
    }
    for raw in [1, 2, 1 | VERSION_WIDE, 2 | VERSION_WIDE] {
        assert_eq!(Version::from_raw(raw).map(Version::raw), Ok(raw));
    }
    for name in ["sanmd_covered3", "sanmd_atomics65539", "sanmd_atomics0", "sanmd_covered131074"] {
        assert_eq!(parse_section_name(name), None, "{name}");
    }
    assert_eq!(parse_section_name("sanmd_atomics65537").map(|id| id.version.raw()), Some(1 | VERSION_WIDE));
}

#[test]
fn encoder_refuses_what_the_decoder_could_not_read() {
    use racewatch_instrument::format::pcsections::EncodeError;
    let v2 = Version::V2;
    // A PC equal to its entry's address would read back as padding.
    assert_eq!(encode_atomics(&[0x1000], 0x1000, v2), Err(EncodeError::ZeroOffset { index: 0 }));
    assert_eq!(encode_atomics(&[0x2000, 0x1004], 0x1000, v2), Err(EncodeError::ZeroOffset { index: 1 }));
    // 2^31 away does not fit a narrow offset, but does fit a wide one.
    let far = 0x1000 + (1u64 << 31);
    assert_eq!(encode_atomics(&[far], 0x1000, v2), Err(EncodeError::OffsetOutOfRange { index: 0 }));
    let wide = version(2, true);
    assert_eq!(decode_atomics(&encode_atomics(&[far], 0x1000, wide).unwrap(), 0x1000, wide).unwrap(), [far]);
    // Version 1 fields are u32.
    let big = [entry(0x2000, 1 << 32, 0, None)];
    assert_eq!(encode_covered(&big, 0x1000, Version::V1), Err(EncodeError::FieldTooLarge { index: 0 }));
}

#[test]
fn section_names_round_trip() {
    for (kind, version, name) in [
        (TableKind::Covered, Version::V1, "sanmd_covered"),
        (TableKind::Atomics, Version::V2, "sanmd_atomics2"),
        (TableKind::Covered, version(2, true), "sanmd_covered65538"),
    ] {
        let id = SectionId { kind, version };
        assert_eq!(id.section_name(), name);
        assert_eq!(parse_section_name(name), Some(id));
    }
    // Version-1 sections carry no number whatever the offset size (the
    // wide bit then only comes from the callback's version argument).
    assert_eq!(SectionId { kind: TableKind::Atomics, version: version(1, true) }.section_name(), "sanmd_atomics");
}
