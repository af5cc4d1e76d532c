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

/// The source file of Rust's atomic types (`core::sync::atomic`), as rustc names it in debug info
/// (`/rustc/<commit>/library/core/src/sync/atomic.rs`, or a local `rust-src` checkout's path).
const CORE_ATOMIC_FILE: &str = "core/src/sync/atomic.rs";

/// The C++ standard libraries' files whose inline functions make `std::atomic`'s accesses with the
/// compiler's atomic builtins, and no other access of the atomic object: libstdc++'s `bits/atomic_base.h`
/// and `<atomic>`, libc++'s `__atomic/` implementation. clang drops the pass's tag of some of them while
/// optimising (the relaxed loads of libstdc++'s `atomic<shared_ptr>` spin lock, inlined into the
/// caller, lost theirs in clang 19: a race was reported between that load and the lock's `fetch_sub`).
const CXX_ATOMIC_FILES: &[&str] = &[
    "/bits/atomic_base.h",
    "/__atomic/cxx_atomic_impl.h",
    "/__atomic/atomic_base.h",
    "/__atomic/atomic.h",
    "/__atomic/support/gcc.h",
    "/__atomic/support/c11.h",
];

/// Whether `file` (a source path from debug info) is the source of the standard library's atomic types:
/// Rust's `core::sync::atomic`, or C++'s `std::atomic` ([`CXX_ATOMIC_FILES`], and `<atomic>` itself in a
/// C++ include directory).
pub fn is_core_atomic_file(file: &str) -> bool {
    file.ends_with(CORE_ATOMIC_FILE)
        || CXX_ATOMIC_FILES.iter().any(|name| file.ends_with(name))
        || (file.ends_with("/atomic") && file.contains("/c++/"))
}

/// What the debug info says about the innermost frames of an instruction, for
/// [`is_core_atomic_access`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Innermost<'a> {
    /// The innermost frame's file and line from the line table; line 0 (or none) when the compiler
    /// gave the instruction no line of its own (a line borrowed from a neighbour does not count).
    pub file: Option<&'a str>,
    pub line: u32,
    /// The innermost function's name, when known.
    pub function: Option<&'a str>,
    /// The innermost function is inlined: the next frame is its caller, at `caller_file:caller_line`
    /// (the call site, inside the caller's source).
    pub inlined: bool,
    pub caller_file: Option<&'a str>,
    pub caller_line: u32,
}

/// Whether an instruction is part of an atomic operation of `core::sync::atomic` by its debug info:
/// its own line is in `core/src/sync/atomic.rs` (an inlined `atomic_load`, `AtomicUsize::load`), or,
/// when the compiler gave it line 0 (two loads merged into one), it lies in a function that code of
/// `core/src/sync/atomic.rs` inlined (its intrinsics' wrappers), other than a closure of the caller's
/// (`fetch_update`'s). Every memory access such code makes is the atomic one; an optimisation that
/// merges or moves it can lose its `sanmd_atomics2` tag, not its debug info.
pub fn is_core_atomic_access(frames: &Innermost<'_>) -> bool {
    if frames.line > 0 {
        return frames.file.is_some_and(is_core_atomic_file);
    }
    frames.inlined
        && frames.caller_line > 0
        && frames.caller_file.is_some_and(is_core_atomic_file)
        && !frames.function.is_some_and(|f| f.contains("{closure") || f.contains("{{closure"))
}

/// The standard library's plain accesses that its own atomics order, by innermost file and function:
/// libstdc++'s `_Sp_counted_base::_M_release` stores 0 to both counts with plain stores once an
/// acquire load of both saw the last reference (`_M_weak_count = _M_use_count = 0`), after every other
/// owner's release decrement. libstdc++ leaves that path out under ThreadSanitizer (`_GLIBCXX_TSAN`),
/// which would take the stores for a race with those decrements; racewatch, which sees no
/// happens-before either, reported one at a program's exit (`std::atomic<std::shared_ptr>`, 1 run in
/// about 30 of `std_atomic_shared_ptr_is_not_reported`).
const LIBRARY_ORDERED: &[(&str, &[&str])] = &[("/bits/shared_ptr_base.h", &["_M_release", "_M_release_last_use"])];

/// Whether an access is one of [`LIBRARY_ORDERED`]'s (its own line in that file, in one of those
/// functions): ordered by the library's atomics as an atomic access would be.
pub fn is_library_ordered_access(frames: &Innermost<'_>) -> bool {
    let (Some(file), Some(function)) = (frames.file, frames.function) else { return false };
    let name = function.rsplit("::").next().unwrap_or(function);
    frames.line > 0
        && LIBRARY_ORDERED.iter().any(|(suffix, functions)| file.ends_with(suffix) && functions.contains(&name))
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

#[cfg(test)]
mod tests {
    use super::*;

    const ATOMIC: &str = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src/sync/atomic.rs";

    #[test]
    fn cxx_atomic_accesses_by_their_own_line() {
        let load = Innermost {
            file: Some("/usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/bits/atomic_base.h"),
            line: 488,
            function: Some("load"),
            ..Default::default()
        };
        assert!(is_core_atomic_access(&load));
        let generic = Innermost { file: Some("/usr/include/c++/12/atomic"), line: 293, ..load };
        assert!(is_core_atomic_access(&generic));
        let libcxx = Innermost { file: Some("/usr/lib/llvm-19/include/c++/v1/__atomic/cxx_atomic_impl.h"), ..load };
        assert!(is_core_atomic_access(&libcxx));
        // The plain accesses `atomic<shared_ptr>` makes under its lock are not atomic.
        let under_lock = Innermost { file: Some("/usr/include/c++/12/bits/shared_ptr_atomic.h"), line: 589, ..load };
        assert!(!is_core_atomic_access(&under_lock));
        let user = Innermost { file: Some("/home/me/src/atomic"), ..load };
        assert!(!is_core_atomic_access(&user));
    }

    #[test]
    fn the_last_shared_ptr_releases_plain_stores_are_library_ordered() {
        let release = Innermost {
            file: Some("/usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/bits/shared_ptr_base.h"),
            line: 343,
            function: Some("std::_Sp_counted_base<(__gnu_cxx::_Lock_policy)2>::_M_release"),
            ..Default::default()
        };
        assert!(is_library_ordered_access(&release));
        assert!(!is_core_atomic_access(&release));
        // A shared_ptr object's own pointer, assigned by two threads, is a race of the program's.
        let assign = Innermost { function: Some("operator="), line: 1530, ..release };
        assert!(!is_library_ordered_access(&assign));
        let borrowed_line = Innermost { line: 0, ..release };
        assert!(!is_library_ordered_access(&borrowed_line));
    }

    #[test]
    fn core_atomic_accesses_by_their_own_line_or_their_inlining() {
        // Its own line in atomic.rs: `atomic_load` inlined into `AtomicUsize::load`.
        let load =
            Innermost { file: Some(ATOMIC), line: 3890, function: Some("atomic_load<usize>"), ..Default::default() };
        assert!(is_core_atomic_access(&load));
        // A real line elsewhere: `ptr::read` in an `AtomicCell` is not.
        let read = Innermost { file: Some("/rustc/x/library/core/src/ptr/mod.rs"), line: 1200, ..load };
        assert!(!is_core_atomic_access(&read));
        // Line 0 in a function that atomic.rs inlined (the call site is in atomic.rs).
        let merged = Innermost {
            file: Some(ATOMIC),
            line: 0,
            function: Some("atomic_load<usize>"),
            inlined: true,
            caller_file: Some(ATOMIC),
            caller_line: 2844,
        };
        assert!(is_core_atomic_access(&merged));
        // Line 0 alone (a row's file, or a borrowed line) says nothing.
        assert!(!is_core_atomic_access(&Innermost { inlined: false, caller_file: None, caller_line: 0, ..merged }));
        // Line 0 in `Arc::downgrade` (inlined into the user's code): not atomic by its debug info.
        let downgrade =
            Innermost { function: Some("downgrade<u64>"), caller_file: Some("src/main.rs"), caller_line: 12, ..merged };
        assert!(!is_core_atomic_access(&downgrade));
        // The closure `fetch_update` calls is the caller's code.
        assert!(!is_core_atomic_access(&Innermost { function: Some("{closure#0}"), ..merged }));
        assert!(is_core_atomic_file(ATOMIC) && !is_core_atomic_file("src/atomic.rs"));
    }
}
