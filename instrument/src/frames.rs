//! Symbolized frames and what a report makes of them: which frames are the standard library's or the
//! runtime's plumbing, and which frame of each access a summary (and a `source_key`) names.
//!
//! Shared by the runtime, which symbolizes in the process, and `racewatch triage`, which symbolizes
//! offline by build-id: both must pick the same frames, or their keys would differ.

/// One symbolized frame. A PC inside inlined code yields several frames,
/// innermost first; all but the last of them are `inlined`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Demangled function name (Rust without the hash), if known.
    pub function: Option<String>,
    /// Source file, relative to the current directory when under it.
    pub file: Option<String>,
    /// 1-based source line.
    pub line: Option<u32>,
    /// 1-based source column.
    pub column: Option<u32>,
    /// Path of the module (executable or shared library) holding the PC.
    pub module: Option<String>,
    /// The module's GNU build-id in hex, when known.
    pub build_id: Option<String>,
    /// The PC in the module's own address space (`pc - load bias`), or the raw PC when the module is unknown.
    pub offset: u64,
    /// Inlined into the next frame (same PC).
    pub inlined: bool,
    /// In racewatch's own shared library (never the user's code).
    pub in_runtime: bool,
    /// In one of libc's memory and string functions that racewatch watches (`memcpy`, `strlen`, …): the
    /// access's own frame, but never the one a summary names (that is its covered caller).
    pub memory_function: bool,
    /// The debug info gave this PC line 0 (a load the compiler hoisted or merged from several lines):
    /// `line` is the nearest real line of the same code (the same innermost inlined function) instead.
    /// When no such line is near, `line` is `None`: a neighbour's line would be another function's.
    pub line_approximate: bool,
    /// Not a frame: the place of the frames left out of a deep stack, and how many; every other field
    /// is empty.
    pub elided: usize,
}

/// Where Rust's standard library sources are (`/rustc/<commit>/library/...`).
pub const STD_SOURCES: &str = "/rustc/";
/// Where the crates the standard library vendors in are (`/rust/deps/hashbrown-0.16.1/src/map.rs`: the
/// table under `std::collections::HashMap`; also `compiler_builtins`, `memchr`, `addr2line`, …): the
/// precompiled standard library's debug info names them there, and they are part of it.
pub const STD_DEPS: &str = "/rust/deps/";
/// The directory of the C++ standard library's headers, under any prefix (libstdc++'s
/// `/usr/include/c++/12/…`, reached as `/usr/lib/gcc/x86_64-linux-gnu/12/../../../../include/c++/12/…`;
/// libc++'s `…/include/c++/v1/…`).
pub const CXX_STD_HEADERS: &str = "/include/c++/";

/// The standard library a frame's source is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdLib {
    Rust,
    Cxx,
}

/// The standard library a frame's source is in, if any.
pub fn std_lib(frame: &Frame) -> Option<StdLib> {
    let file = frame.file.as_deref()?;
    if file.starts_with(STD_SOURCES) || file.starts_with(STD_DEPS) {
        Some(StdLib::Rust)
    } else if file.contains(CXX_STD_HEADERS) {
        Some(StdLib::Cxx)
    } else {
        None
    }
}

/// Whether the frame's source is Rust's or C++'s standard library.
pub fn in_std(frame: &Frame) -> bool {
    std_lib(frame).is_some()
}

/// Whether a frame is the Rust runtime's plumbing rather than code anybody wrote: `__rust_try` (the
/// landing pad of `catch_unwind`), the short-backtrace markers, the allocator shims (`__rust_alloc`).
pub fn is_plumbing(frame: &Frame) -> bool {
    frame.function.as_deref().is_some_and(|name| base_name(name).starts_with("__rust_"))
}

/// Whether a frame may be named by a summary: code somebody wrote, not the standard library, not the
/// runtime, not a known atomic primitive such as `ck_pr.h`'s, not a libc memory function racewatch
/// watches (its covered caller is named), not the placeholder of elided frames.
pub fn is_summary_candidate(frame: &Frame) -> bool {
    let in_atomic_primitive = frame.file.as_deref().is_some_and(crate::tags::is_asm_atomic_file);
    frame.elided == 0
        && !in_std(frame)
        && !is_plumbing(frame)
        && !frame.in_runtime
        && !in_atomic_primitive
        && !frame.memory_function
}

/// The frame a summary names for one access: its first frame in the user's code (see
/// [`is_summary_candidate`]), else its innermost frame.
pub fn summary_frame(stack: &[Frame]) -> Option<&Frame> {
    stack.iter().find(|f| is_summary_candidate(f)).or(stack.iter().find(|f| f.elided == 0))
}

/// The frame of the access itself: the first frame that is neither racewatch's own nor a libc memory
/// function (for a `memcpy`, the covered call site). Its module and offset identify the access exactly.
pub fn access_frame(stack: &[Frame]) -> Option<&Frame> {
    stack.iter().find(|f| f.elided == 0 && !f.in_runtime && !f.memory_function)
}

/// Where cargo keeps the sources of the crates it fetched (`$CARGO_HOME/registry/src/…`,
/// `$CARGO_HOME/git/checkouts/…`, whatever `CARGO_HOME` is) and where `cargo vendor` puts them.
const FETCHED_SOURCES: [&str; 3] = ["/registry/src/", "/git/checkouts/", "/vendor/"];

/// The directory of the crate a source file is in (the part before its last `/src/`), for the crates
/// cargo fetched (`~/.cargo/registry/…/tokio-1.40.0`, a git checkout, a vendored copy); `None` for the
/// user's own files, whether shown relative to the working directory or, for a program run elsewhere,
/// as absolute paths, and for files without a `src` directory.
pub fn dependency_crate(frame: &Frame) -> Option<&str> {
    let file = frame.file.as_deref().filter(|f| f.starts_with('/') && !in_std(frame))?;
    let after = FETCHED_SOURCES.iter().filter_map(|dir| file.find(dir).map(|at| at + dir.len() - 1)).min()?;
    file[after..].rfind("/src/").map(|at| &file[..after + at])
}

/// The trait methods through which a library uses its users' values on whatever thread it likes:
/// `clone` (a shared value copied by each reader), `drop` (a value dropped where the library runs it),
/// and the comparisons and hashing of a concurrent container's keys. A race inside one of them, on a
/// value the library shared or moved between threads, is the library's to answer for (its `Send`/`Sync`
/// bounds). Not `fmt` or `default`: a logger formats a value on the thread that holds it.
const CALLBACKS: [&str; 7] = [
    " as core::clone::Clone>::clone",
    " as core::ops::drop::Drop>::drop",
    " as core::cmp::PartialEq>::eq",
    " as core::cmp::PartialEq>::ne",
    " as core::cmp::PartialOrd>::partial_cmp",
    " as core::cmp::Ord>::cmp",
    " as core::hash::Hash>::hash",
];

/// The frame that stands for one access in a summary before the two sides are compared: its
/// [`summary_frame`], or, when that is the user's implementation of a trait method a dependency calls
/// (`<Msg as Clone>::clone` called by tokio's broadcast receiver, a `Drop` run by tokio's task harness),
/// the dependency's frame that called it: the race is in the library that made the calls concurrent.
fn own_frame(stack: &[Frame]) -> Option<&Frame> {
    let first = stack.iter().position(is_summary_candidate).filter(|&at| is_callback_frame(&stack[at]));
    let Some(at) = first else { return summary_frame(stack) };
    let caller = stack[at + 1..].iter().find(|f| is_summary_candidate(f) && !is_callback_frame(f));
    caller.filter(|f| dependency_crate(f).is_some()).or(Some(&stack[at]))
}

/// Whether a frame is a trait callback (see [`CALLBACKS`]) of the user's, which a dependency's frame
/// further out may have called.
fn is_callback_frame(frame: &Frame) -> bool {
    dependency_crate(frame).is_none()
        && frame.function.as_deref().is_some_and(|f| CALLBACKS.iter().any(|c| f.contains(c)))
}

/// The frames a summary names, one per access: each access's own frame (its [`summary_frame`], or the
/// dependency's frame that called the user's trait callback it is in: see [`own_frame`]), except that an
/// access whose own frame is the user's code while the other access's is in a dependency names its own
/// frame in that dependency when its stack has one. The race is in the library both accesses go through
/// (a tokio `LocalSet`'s), not in the test that drove it.
pub fn racing_frames<'a>(a: &'a [Frame], b: &'a [Frame]) -> (Option<&'a Frame>, Option<&'a Frame>) {
    let (first_a, first_b) = (own_frame(a), own_frame(b));
    let prefer = |stack: &'a [Frame], mine: Option<&Frame>, other: Option<&Frame>| -> Option<&'a Frame> {
        let mine = mine?;
        if dependency_crate(mine).is_some() || mine.file.is_none() {
            return None;
        }
        let wanted = dependency_crate(other?)?;
        stack.iter().find(|f| is_summary_candidate(f) && dependency_crate(f) == Some(wanted))
    };
    (prefer(a, first_a, first_b).or(first_a), prefer(b, first_b, first_a).or(first_b))
}

/// Rust's marker frames: below `__rust_begin_short_backtrace` is thread or
/// process start-up, above `__rust_end_short_backtrace` panic machinery.
const BEGIN_SHORT_BACKTRACE: &str = "__rust_begin_short_backtrace";
const END_SHORT_BACKTRACE: &str = "__rust_end_short_backtrace";

/// Cuts a Rust stack the way Rust's short backtraces do: the
/// `__rust_begin_short_backtrace` frame and everything outside it (thread
/// and `main` start-up) go, and so do the frames from the access out to a
/// `__rust_end_short_backtrace` frame (panic machinery). The frames of the
/// accessing PC itself (the first physical frame with its inlined frames)
/// are always kept. Stacks without the markers (C, C++) are unchanged.
pub fn short_backtrace(mut frames: Vec<Frame>) -> Vec<Frame> {
    let is =
        |marker: &'static str| move |f: &Frame| f.function.as_deref().is_some_and(|name| base_name(name) == marker);
    // The accessing PC's frames: up to and including the first physical one.
    let access = frames.iter().position(|f| !f.inlined).map_or(frames.len(), |i| i + 1);
    if let Some(begin) = frames.iter().position(is(BEGIN_SHORT_BACKTRACE)) {
        frames.truncate(begin.max(1));
    }
    if let Some(end) = frames.get(access..).and_then(|outer| outer.iter().position(is(END_SHORT_BACKTRACE))) {
        frames.drain(access..=access + end);
    }
    frames
}

/// How a report spells file paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paths {
    /// As symbolized (JSON).
    Full,
    /// Standard-library paths from `library/` on (text).
    Short,
}

/// `data race <file:line:col> in <function>` after the first access's racing frame, then ` / ` and the
/// other access's when it is another (see [`racing_frames`]): a report's SUMMARY.
pub fn summary(a: &[Frame], b: &[Frame], paths: Paths) -> String {
    let named =
        |frame: &Frame| format!("{} in {}", location(frame, paths), frame.function.as_deref().unwrap_or("<unknown>"));
    match racing_frames(a, b) {
        (Some(x), Some(y)) if named(x) != named(y) => format!("data race {} / {}", named(x), named(y)),
        (Some(frame), _) | (None, Some(frame)) => format!("data race {}", named(frame)),
        (None, None) => "data race".to_string(),
    }
}

/// `file:line:col` (shorter when parts are unknown), or `(module+0xoff)` without a file.
pub fn location(frame: &Frame, paths: Paths) -> String {
    let file = frame.file.as_deref().map(|file| match paths {
        Paths::Full => file,
        Paths::Short => short_path(file),
    });
    let approx = if frame.line_approximate { "~" } else { "" };
    match (file, frame.line.filter(|&l| l > 0), frame.column.filter(|&c| c > 0)) {
        (Some(file), Some(line), Some(column)) => format!("{file}:{approx}{line}:{column}"),
        (Some(file), Some(line), None) => format!("{file}:{approx}{line}"),
        (Some(file), None, _) => file.to_string(),
        (None, _, _) => module_offset(frame),
    }
}

/// `library/...` for a standard-library path `/rustc/<commit>/library/...`, `c++/...` for a C++
/// standard header `.../include/c++/...`; any other path unchanged.
pub fn short_path(file: &str) -> &str {
    if let Some(at) = file.find(CXX_STD_HEADERS) {
        return &file[at + "/include/".len()..];
    }
    file.strip_prefix(STD_SOURCES)
        .and_then(|rest| rest.split_once('/'))
        .map(|(_commit, rest)| rest)
        .filter(|rest| rest.starts_with("library/"))
        .unwrap_or(file)
}

/// `(module+0xoffset)` with the module's file name, or `(0xpc)` when the module is unknown.
pub fn module_offset(frame: &Frame) -> String {
    match &frame.module {
        Some(path) => {
            let name = path.rsplit('/').next().unwrap_or(path);
            format!("({name}+{:#x})", frame.offset)
        }
        None => format!("({:#x})", frame.offset),
    }
}

/// The last path segment of a demangled name without its generic arguments
/// or parameter list: `__rust_begin_short_backtrace` for
/// `std::sys::backtrace::__rust_begin_short_backtrace::<F, T>`, `bar` for
/// `foo::bar(int)`, `baz` for `<S as T>::baz<u8>`.
pub fn base_name(name: &str) -> &str {
    /// A segment without its generic arguments or parameters (`<`, `(`) and trailing qualifiers (` const`).
    fn item(segment: &str) -> &str {
        &segment[..segment.find(['<', '(', ' ']).unwrap_or(segment.len())]
    }
    let bytes = name.as_bytes();
    let (mut depth, mut start, mut base) = (0usize, 0, "");
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'(' | b'[' => depth += 1,
            // `->` in a fn type closes nothing.
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' | b')' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                let part = item(&name[start..i]);
                if !part.is_empty() {
                    base = part;
                }
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    match item(&name[start..]) {
        "" => base,
        last => last,
    }
}

/// `path` relative to `cwd` when it lies under it, else unchanged.
pub fn display_path(path: &str, cwd: Option<&std::path::Path>) -> String {
    cwd.and_then(|cwd| std::path::Path::new(path).strip_prefix(cwd).ok())
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(|rel| rel.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn at(function: &str, file: &str) -> Frame {
        Frame { function: Some(function.into()), file: Some(file.into()), line: Some(1), ..Frame::default() }
    }

    #[test]
    fn paths_become_relative_only_under_cwd() {
        let cwd = Path::new("/work/proj");
        assert_eq!(display_path("/work/proj/src/a.rs", Some(cwd)), "src/a.rs");
        assert_eq!(display_path("/work/project/a.rs", Some(cwd)), "/work/project/a.rs");
        assert_eq!(display_path("/rustc/abc/library/std/src/rt.rs", Some(cwd)), "/rustc/abc/library/std/src/rt.rs");
        assert_eq!(display_path("src/a.rs", None), "src/a.rs");
    }

    #[test]
    fn base_names_drop_paths_generics_and_parameters() {
        assert_eq!(
            base_name("std::sys::backtrace::__rust_begin_short_backtrace::<racy_flag::main::{closure#0}, u64>"),
            "__rust_begin_short_backtrace"
        );
        assert_eq!(base_name("__rust_begin_short_backtrace<fn(), ()>"), "__rust_begin_short_backtrace");
        assert_eq!(base_name("call_once<fn() -> u64, ()>"), "call_once");
        assert_eq!(base_name("<alloc::boxed::Box<dyn Fn() -> u8> as core::ops::FnOnce<()>>::call_once"), "call_once");
        assert_eq!(base_name("foo::bar(int, std::vector<int>)"), "bar");
        assert_eq!(base_name("racy_flag::main::{closure#1}"), "{closure#1}");
        assert_eq!(base_name("write_volatile<u64>"), "write_volatile");
        assert_eq!(base_name("bump"), "bump");
        assert_eq!(base_name(""), "");
    }

    #[test]
    fn the_summary_frame_skips_std_plumbing_and_memory_functions() {
        let memcpy = Frame { function: Some("memcpy".into()), memory_function: true, ..Frame::default() };
        let stack = vec![
            memcpy.clone(),
            at("write<u64>", "/rustc/abc/library/core/src/ptr/mod.rs"),
            at("__rust_try", "src/x.rs"),
            at("app::bump", "src/main.rs"),
        ];
        assert_eq!(summary_frame(&stack).unwrap().function.as_deref(), Some("app::bump"));
        assert_eq!(access_frame(&stack).unwrap().function.as_deref(), Some("write<u64>"));
        // Nothing of the user's: the innermost real frame.
        assert_eq!(summary_frame(&stack[..2]).unwrap().function.as_deref(), Some("memcpy"));
    }

    #[test]
    fn dependencies_are_the_crates_cargo_fetched_wherever_the_program_runs() {
        let crate_of = |file| dependency_crate(&at("f", file)).map(str::to_owned);
        let registry = "/root/.cargo/registry/src/index.crates.io-1/crossbeam-deque-0.8.5/src/deque.rs";
        assert_eq!(
            crate_of(registry).as_deref(),
            Some("/root/.cargo/registry/src/index.crates.io-1/crossbeam-deque-0.8.5")
        );
        let custom_home = "/usr/local/cargo/registry/src/index.crates.io-1/tokio-1.44.1/src/sync/broadcast.rs";
        assert_eq!(
            crate_of(custom_home).as_deref(),
            Some("/usr/local/cargo/registry/src/index.crates.io-1/tokio-1.44.1")
        );
        let git = "/home/u/.cargo/git/checkouts/rayon-abc/1234567/rayon-core/src/registry.rs";
        assert_eq!(crate_of(git).as_deref(), Some("/home/u/.cargo/git/checkouts/rayon-abc/1234567/rayon-core"));
        let vendored = "/srv/app/vendor/parking_lot/src/mutex.rs";
        assert_eq!(crate_of(vendored).as_deref(), Some("/srv/app/vendor/parking_lot"));
        // The program's own files: relative under its working directory, absolute when it runs elsewhere.
        assert_eq!(crate_of("src/main.rs"), None);
        assert_eq!(crate_of("/srv/app/src/main.rs"), None);
        assert_eq!(crate_of("/work/accept7/min/own_volatile/src/main.rs"), None);
        assert_eq!(crate_of("/srv/app/crates/worker/src/lib.rs"), None);
        // A fetched crate's file outside its `src` (a build script) names no crate.
        assert_eq!(crate_of("/root/.cargo/registry/src/index.crates.io-1/libc-0.2.170/build.rs"), None);
    }

    #[test]
    fn crates_vendored_into_std_are_std() {
        // dashmap 5.0's shards are std HashMaps: a race in one (RUSTSEC-2022-0002) goes through std's
        // hashbrown, which the standard library's debug info places under /rust/deps/.
        let hashbrown = at("hashbrown::map::HashMap<K,V,S,A>::insert", "/rust/deps/hashbrown-0.16.1/src/map.rs");
        let stack = vec![
            hashbrown.clone(),
            at(
                "std::collections::hash::map::HashMap<K,V,S>::insert",
                "/rustc/abc/library/std/src/collections/hash/map.rs",
            ),
            at(
                "dashmap::DashMap<K,V,S>::_insert",
                "/root/.cargo/registry/src/index.crates.io-1/dashmap-5.0.0/src/lib.rs",
            ),
            at("app::main", "src/main.rs"),
        ];
        assert_eq!(std_lib(&hashbrown), Some(StdLib::Rust));
        assert_eq!(dependency_crate(&hashbrown), None);
        assert_eq!(summary_frame(&stack).unwrap().function.as_deref(), Some("dashmap::DashMap<K,V,S>::_insert"));
        // Only the standard library's own vendored tree: a project that happens to have a `rust/deps`
        // directory is not std.
        assert_eq!(std_lib(&at("f", "/home/u/rust/deps/x/src/lib.rs")), None);
        assert_eq!(std_lib(&at("f", "rust/deps/x/src/lib.rs")), None);
    }

    #[test]
    fn a_callback_a_dependency_calls_is_named_at_the_dependency_call() {
        let dep = "/root/.cargo/registry/src/index.crates.io-1/tokio-1.44.1/src/sync/broadcast.rs";
        let clone =
            |line| Frame { line: Some(line), ..at("<race::Msg as core::clone::Clone>::clone", "tests/race.rs") };
        let side = |line| {
            vec![
                at("core::cell::Cell<T>::set", "/rustc/abc/library/core/src/cell.rs"),
                clone(line),
                at("tokio::sync::broadcast::RecvGuard<T>::clone_value", dep),
                at("race::receiver", "tests/race.rs"),
            ]
        };
        let (a, b) = (side(21), side(22));
        let (fa, fb) = racing_frames(&a, &b);
        assert_eq!(fa.unwrap().function.as_deref(), Some("tokio::sync::broadcast::RecvGuard<T>::clone_value"));
        assert_eq!(fb.unwrap().function.as_deref(), Some("tokio::sync::broadcast::RecvGuard<T>::clone_value"));
        // A Drop the program runs itself, and a closure a library runs (rayon's), stay the program's.
        let own_drop =
            vec![at("<app::Guard as core::ops::drop::Drop>::drop", "src/lib.rs"), at("app::work", "src/lib.rs")];
        let rayon = "/root/.cargo/registry/src/index.crates.io-1/rayon-1.10.0/src/iter/mod.rs";
        let closure =
            vec![at("app::work::{{closure}}", "src/lib.rs"), at("rayon::iter::ParallelIterator::for_each", rayon)];
        let (fa, fb) = racing_frames(&own_drop, &closure);
        assert_eq!(fa.unwrap().function.as_deref(), Some("<app::Guard as core::ops::drop::Drop>::drop"));
        assert_eq!(fb.unwrap().function.as_deref(), Some("app::work::{{closure}}"));
    }

    #[test]
    fn a_race_in_a_dependency_is_named_there_on_both_sides() {
        let dep = "/root/.cargo/registry/src/index.crates.io-1/tokio-1.8.0/src/task/local.rs";
        let test_side = vec![at("tests::abort", "tests/abort.rs"), at("tokio::LocalSet::run", dep)];
        let lib_side = vec![at("tokio::LocalSet::drop", dep)];
        let (a, b) = racing_frames(&test_side, &lib_side);
        assert_eq!(a.unwrap().function.as_deref(), Some("tokio::LocalSet::run"));
        assert_eq!(b.unwrap().function.as_deref(), Some("tokio::LocalSet::drop"));
    }
}
