//! Tags for the atomics the compiler pass cannot see: inline assembly.
//!
//! LLVM's SanitizerBinaryMetadata pass tags atomic IR instructions; an atomic
//! written as inline assembly (a `mov` that is atomic because it is aligned,
//! as in `atomic-maybe-uninit`) is invisible to it, and racewatch would
//! report two threads using it as a race. [`atomic!`](crate::atomic) is
//! `core::arch::asm!` plus one `sanmd_atomics2` entry for the instruction
//! that follows its label: the same entry the pass writes (a 4-byte offset
//! from the entry to the PC), so the linker merges it into the module's
//! table and the runtime and `racewatch verify` read it like any other. The
//! section is marked retained (`R`, SHF_GNU_RETAIN): nothing references it,
//! and `--gc-sections` (rustc's default) would drop it otherwise. The
//! C header `instrument/include/racewatch.h` does the same for C and C++.

/// Source files of crates whose inline assembly is atomic: (crate directory, path inside it). The pass
/// cannot tag inline assembly, so their aligned MOVs would look like plain accesses: the runtime treats
/// accesses whose own source line is in these files as atomic, and `racewatch verify` lists them.
pub const ASM_ATOMIC_CODE: &[(&str, &str)] = &[
    // atomic-maybe-uninit (crossbeam's AtomicCell, and others): every arch backend is asm atomics.
    ("/atomic-maybe-uninit-", "/src/arch/"),
    // portable-atomic: its implementations (inline-assembly atomics among them).
    ("/portable-atomic-", "/src/imp/"),
    // Concurrency Kit (C): `ck_pr_load_*`/`ck_pr_store_*` are inline-assembly `mov`s in the
    // architecture's `gcc/<arch>/ck_pr.h`, volatile accesses in the generic one; atomic by contract.
    ("/ck_pr.h", ""),
];

/// Whether `file` (a source path from debug info) is in [`ASM_ATOMIC_CODE`].
pub fn is_asm_atomic_file(file: &str) -> bool {
    ASM_ATOMIC_CODE.iter().any(|(dir, sub)| file.contains(dir) && file.contains(sub))
}

/// `core::arch::asm!` with the (first) instruction of `template` tagged atomic in `sanmd_atomics2`.
///
/// ```
/// # #[cfg(target_arch = "x86_64")] {
/// let word = 7u64;
/// let value: u64;
/// // SAFETY: an aligned 8-byte load from a live u64.
/// unsafe { racewatch_instrument::atomic!("mov {0}, qword ptr [{1}]", out(reg) value, in(reg) &word) };
/// assert_eq!(value, 7);
/// # }
/// ```
#[macro_export]
macro_rules! atomic {
    ($template:literal $(, $($rest:tt)*)?) => {
        ::core::arch::asm!(
            "998:",
            $template,
            ".pushsection sanmd_atomics2,\"aR\",@progbits",
            ".long 998b - .",
            ".popsection"
            $(, $($rest)*)?
        )
    };
}
