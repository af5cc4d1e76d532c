//! racewatch-instrument: the compile-time half of racewatch.
//!
//! - [`format`]: codecs for PC-keyed metadata (dependency-free; shared with the runtime).
//! - [`toolchain`]: the compiler flags that emit the metadata, toolchain checks.
//! - [`tags`]: [`atomic!`], inline assembly tagged atomic (and `include/racewatch.h` for C).
//! - With the `tools` feature: [`elf`] reads whole ELF files, [`symbols`]
//!   names functions, [`verify`] checks tables against the machine code,
//!   [`coverage`] builds the per-function report.

pub mod format;
pub mod tags;
pub mod toolchain;

#[cfg(feature = "tools")]
pub mod coverage;
#[cfg(feature = "tools")]
pub mod dwarf;
#[cfg(feature = "tools")]
pub mod elf;
pub mod frames;
#[cfg(feature = "tools")]
pub mod jit_object;
pub mod keys;
#[cfg(feature = "tools")]
pub mod symbols;
#[cfg(feature = "tools")]
pub mod verify;
#[cfg(feature = "tools")]
pub mod x86;
