//! Unsigned LEB128, as LLVM emits it for `!C`-compressed PC-section constants.

/// Why a ULEB128 value could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LebError {
    /// The input ended before a byte without the continuation bit.
    Truncated,
    /// The value does not fit in 64 bits (or uses more than 10 bytes).
    Overlong,
}

/// Reads one ULEB128 value from the start of `bytes`; returns it and the
/// number of bytes it took.
pub fn read_uleb128(bytes: &[u8]) -> Result<(u64, usize), LebError> {
    let mut value: u64 = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let low = u64::from(byte & 0x7f);
        let shift = 7 * i as u32;
        if shift >= 64 || (shift == 63 && low > 1) {
            return Err(LebError::Overlong);
        }
        value |= low << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(LebError::Truncated)
}

/// Appends `value` to `out` as ULEB128 (shortest form).
pub fn write_uleb128(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encodings() {
        for (value, bytes) in [
            (0u64, &[0x00][..]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (624_485, &[0xe5, 0x8e, 0x26]),
            (u64::MAX, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        ] {
            let mut out = Vec::new();
            write_uleb128(&mut out, value);
            assert_eq!(out, bytes);
            assert_eq!(read_uleb128(bytes), Ok((value, bytes.len())));
        }
    }

    #[test]
    fn malformed() {
        assert_eq!(read_uleb128(&[]), Err(LebError::Truncated));
        assert_eq!(read_uleb128(&[0x80, 0x80]), Err(LebError::Truncated));
        assert_eq!(read_uleb128(&[0xff; 10]), Err(LebError::Overlong));
        let mut too_big = vec![0xff; 9];
        too_big.push(0x02);
        assert_eq!(read_uleb128(&too_big), Err(LebError::Overlong));
    }
}
