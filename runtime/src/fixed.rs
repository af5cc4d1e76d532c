//! Formatting into fixed storage, for paths that must not allocate (signal handlers, a process dying
//! of a fatal signal whose heap may be corrupt).

use std::fmt;

/// Up to `N` bytes of formatted text; what does not fit is cut at a character boundary.
pub struct FixedBuf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> FixedBuf<N> {
    pub const fn new() -> Self {
        FixedBuf { bytes: [0; N], len: 0 }
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn as_str(&self) -> &str {
        let bytes = &self.bytes[..self.len];
        match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(cut) => std::str::from_utf8(&bytes[..cut.valid_up_to()]).unwrap_or_default(),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl<const N: usize> Default for FixedBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for FixedBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = N - self.len;
        let take = s.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        if take < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn keeps_what_fits_and_cuts_at_a_character() {
        let mut buf = FixedBuf::<8>::new();
        assert!(write!(buf, "ab{}", 12).is_ok());
        assert_eq!(buf.as_str(), "ab12");
        assert!(write!(buf, "éééé").is_err());
        assert_eq!(buf.as_str(), "ab12éé");
        buf.clear();
        assert_eq!(buf.as_str(), "");
    }
}
