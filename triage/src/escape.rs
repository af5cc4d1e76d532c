//! Text from report logs made safe for a terminal.

/// `text` safe to print on a terminal as one line of a table or a message: control characters (C0
/// including newline, carriage return and escape, DEL, C1) and the bidirectional-override characters
/// that reorder what is shown are written as escapes (`\n`, `\r`, `\t`, `\x1b`, `\u{202e}`), so that
/// a function name or a path from a report log cannot move the cursor, retitle the window, clear a
/// line or start a fake row. Anything else, backslashes included, is kept as it is.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && unsafe_char(c) => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::escape("main::run"), "main::run");
        assert_eq!(super::escape("a\x1b]0;pwned\x07b"), "a\\x1b]0;pwned\\x07b");
        assert_eq!(super::escape("f\nrace:/\r"), "f\\nrace:/\\r");
        assert_eq!(super::escape("x\u{9b}2J\u{202e}y"), "x\\u{9b}2J\\u{202e}y");
        assert_eq!(super::escape("tab\there ünïcödé"), "tab\\there ünïcödé");
    }
}
