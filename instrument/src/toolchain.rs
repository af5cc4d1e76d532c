//! Compiler integration: the flags that make rustc and clang emit racewatch
//! metadata, and checks that the installed toolchain can.

/// rustc flags: run LLVM's SanitizerBinaryMetadata pass after all IR
/// optimisation, with frame pointers (cheap stacks) and line tables (reports).
pub const RUST_FLAGS: &[&str] = &[
    "-Cpasses=sanmd-module",
    "-Cllvm-args=-sanitizer-metadata-atomics",
    "-Cllvm-args=-sanitizer-metadata-covered",
    "-Cforce-frame-pointers=yes",
    "-Cdebuginfo=line-tables-only",
];

/// clang (>= 17) flags for C and C++.
pub const C_FLAGS: &[&str] =
    &["-fexperimental-sanitize-metadata=atomics", "-fno-omit-frame-pointer", "-gline-tables-only"];
