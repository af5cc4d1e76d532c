//! The two identities of a race (see DESIGN.md "Keys"): `race_key`, exact within one build, and
//! `source_key`, stable across rebuilds. Computed the same way by the runtime, when it reports, and by
//! `racewatch triage`, when it ingests reports (or symbolizes them offline).

use crate::frames::{access_frame, base_name, racing_frames, Frame};

/// FNV-1a 64 of the two sides' strings, sorted and joined by `\n` (an unordered pair), as 16 hex digits.
fn pair_key(a: &str, b: &str) -> String {
    let (first, second) = if a <= b { (a, b) } else { (b, a) };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in first.bytes().chain(std::iter::once(b'\n')).chain(second.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The last component of a path.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// One side of a `race_key`: `<build-id>+0x<offset>` of the access frame (its module's file name when it
/// has no build-id).
pub fn race_side(stack: &[Frame]) -> String {
    match access_frame(stack) {
        Some(frame) => {
            let module = frame.build_id.as_deref().filter(|id| !id.is_empty());
            let module = module.or(frame.module.as_deref().map(file_name)).unwrap_or("?");
            format!("{module}+{:#x}", frame.offset)
        }
        None => "?".to_string(),
    }
}

/// The exact identity of a race: the unordered pair of its two accesses' PCs (module build-id + offset).
pub fn race_key(a: &[Frame], b: &[Frame]) -> String {
    pair_key(&race_side(a), &race_side(b))
}

/// A source file's name as it is spelled on every machine that builds it, and by the runtime (which names
/// files under its working directory relative to it) as by triage (which sees the absolute paths of
/// the debug info): Rust's standard library from `library/`, a cargo dependency from its crate directory
/// (`tokio-1.13.0/src/…`), anything else by its file name (`main.rs`).
pub fn normalized_file(path: &str) -> String {
    let after = |marker: &str, skip: usize| -> Option<String> {
        let rest = &path[path.find(marker)? + marker.len()..];
        let mut parts = rest.splitn(skip + 1, '/');
        (0..skip).try_for_each(|_| parts.next().map(drop))?;
        parts.next().filter(|r| !r.is_empty()).map(str::to_string)
    };
    if let Some(std) = after("/rustc/", 1) {
        return std;
    }
    if let Some(dep) = after("/registry/src/", 1).or_else(|| after("/git/checkouts/", 2)) {
        return dep;
    }
    file_name(path).to_string()
}

/// One side of a `source_key`: `<normalized file>:<function's last segment>` of the frame a summary
/// names; `None` when that frame has neither a file nor a function.
fn source_side(frame: Option<&Frame>) -> Option<String> {
    let frame = frame?;
    if frame.file.is_none() && frame.function.is_none() {
        return None;
    }
    let file = match &frame.file {
        Some(file) => normalized_file(file),
        None => frame.module.as_deref().map_or("?", file_name).to_string(),
    };
    let function = frame.function.as_deref().map_or("?", base_name);
    Some(format!("{file}:{function}"))
}

/// The identity of a race across rebuilds: the unordered pair of the two racing frames' file and
/// function (no lines, no addresses). `None` when neither side is symbolized.
pub fn source_key(a: &[Frame], b: &[Frame]) -> Option<String> {
    let (frame_a, frame_b) = racing_frames(a, b);
    let (side_a, side_b) = (source_side(frame_a), source_side(frame_b));
    if side_a.is_none() && side_b.is_none() {
        return None;
    }
    Some(pair_key(side_a.as_deref().unwrap_or("?"), side_b.as_deref().unwrap_or("?")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str, line: u32, offset: u64) -> Frame {
        Frame {
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(line),
            module: Some("/srv/app/bin/server".into()),
            build_id: Some("ab12cd34".into()),
            offset,
            ..Frame::default()
        }
    }

    #[test]
    fn keys_are_unordered_pairs() {
        let a = vec![frame("app::bump", "src/main.rs", 10, 0x1000)];
        let b = vec![frame("app::read", "src/main.rs", 20, 0x2000)];
        assert_eq!(race_key(&a, &b), race_key(&b, &a));
        assert_eq!(source_key(&a, &b), source_key(&b, &a));
        assert_eq!(race_key(&a, &b).len(), 16);
        assert_ne!(race_key(&a, &b), race_key(&a, &a));
        assert_eq!(race_side(&a), "ab12cd34+0x1000");
    }

    #[test]
    fn source_keys_survive_moved_lines_new_addresses_and_other_checkouts() {
        let a = vec![frame("app::bump", "/home/ci/build-1/src/main.rs", 10, 0x1000)];
        let b = vec![frame("app::read<u64>", "src/main.rs", 20, 0x2000)];
        let moved_a = vec![frame("other::path::bump", "/build/x/src/main.rs", 14, 0x1040)];
        let moved_b = vec![frame("app::read<u32>", "/tmp/src/main.rs", 27, 0x2080)];
        assert_eq!(source_key(&a, &b), source_key(&moved_a, &moved_b));
        assert_ne!(race_key(&a, &b), race_key(&moved_a, &moved_b));
        let renamed = vec![frame("app::bump_twice", "src/main.rs", 10, 0x1000)];
        assert_ne!(source_key(&a, &b), source_key(&renamed, &b));
    }

    #[test]
    fn unsymbolized_sides_have_a_race_key_but_no_source_key() {
        let raw = |offset| vec![Frame { module: Some("/a/racy".into()), offset, ..Frame::default() }];
        assert_eq!(source_key(&raw(1), &raw(2)), None);
        assert_eq!(race_side(&raw(0x11b4)), "racy+0x11b4");
        assert_eq!(race_side(&[]), "?");
    }

    #[test]
    fn files_are_normalized_to_what_every_build_machine_shares() {
        assert_eq!(normalized_file("/rustc/59807616e1fa/library/core/src/ptr/mod.rs"), "library/core/src/ptr/mod.rs");
        assert_eq!(
            normalized_file(
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.13.0/src/sync/oneshot.rs"
            ),
            "tokio-1.13.0/src/sync/oneshot.rs"
        );
        assert_eq!(
            normalized_file("/home/u/.cargo/git/checkouts/futures-rs-1a2b/3c4d5e6/futures-util/src/lib.rs"),
            "futures-util/src/lib.rs"
        );
        // The runtime shows files under its working directory relative to it; the debug info has them
        // absolute: the same key either way.
        assert_eq!(normalized_file("/work/proj/src/main.rs"), "main.rs");
        assert_eq!(normalized_file("src/main.rs"), "main.rs");
        assert_eq!(normalized_file("/tmp/build-7/racy.c"), "racy.c");
        assert_eq!(normalized_file("./racy.c"), "racy.c");
        assert_eq!(normalized_file("racy.c"), "racy.c");
    }

    #[test]
    fn the_key_frame_of_a_memcpy_is_its_caller() {
        let memcpy = Frame { memory_function: true, build_id: Some("libc".into()), offset: 0x99, ..Frame::default() };
        let stack = vec![memcpy, frame("app::copy", "src/main.rs", 3, 0x1234)];
        assert_eq!(race_side(&stack), "ab12cd34+0x1234");
    }
}
