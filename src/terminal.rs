//! The terminal the CLI writes to (its only FFI).

use std::io::IsTerminal;

/// Text from logs made safe to print (shared with the triage library, whose views print it).
pub use racewatch_triage::escape;

/// `$COLUMNS`, or (when the output goes to stdout and that is a terminal) the terminal's width;
/// `None` when neither says.
pub fn width(to_stdout: bool) -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return Some(n);
    }
    if !to_stdout || !std::io::stdout().is_terminal() {
        return None;
    }
    let mut size = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ fills the live `winsize` for descriptor 1, or fails and leaves it unchanged.
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
