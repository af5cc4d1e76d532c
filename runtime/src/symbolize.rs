//! Symbolization with addr2line: functions, file:line:col, inlined frames.
