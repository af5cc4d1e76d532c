//! racewatch-instrument: the compile-time half of racewatch.
//!
//! - [`format`]: codecs for PC-keyed metadata (dependency-free; shared with the runtime).
//! - With the `tools` feature: reading whole ELF files, verification against
//!   the machine code, coverage reports and compiler integration.

pub mod format;
