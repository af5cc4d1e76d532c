//! `racewatch triage`'s offline symbolizer on real files and a real debuginfod server: a C program
//! built with clang-19 (`-g -O1`, a function inlined into another), its stripped copy and separate
//! debug file made the standard way (objcopy), found by module path, `.gnu_debuglink`, `--debug-dir`
//! (`.build-id/xx/rest.debug` and a plain file in the directory), and from elfutils' `debuginfod`
//! (Debian package `debuginfod`) through its cache.

mod common;

use racewatch_instrument::elf::Module;
use racewatch_instrument::frames::Frame;
use racewatch_triage::symbolize::OfflineSymbolizer;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROGRAM: &str = r#"#include <stdlib.h>

volatile int counter;

static inline __attribute__((always_inline)) void bump(int by) {
    counter += by; /* BUMP */
}

__attribute__((noinline)) int work(int n) {
    for (int i = 0; i < n; i++)
        bump(i); /* CALL */
    return counter;
}

int main(int argc, char **argv) {
    (void)argv;
    return work(argc * 3) & 1; /* MAIN */
}
"#;

/// The 1-based line of `PROGRAM` that carries `marker`.
fn line_of(marker: &str) -> u32 {
    PROGRAM.lines().position(|l| l.contains(marker)).expect("marker in the program") as u32 + 1
}

/// The program, built once per test: the binary with DWARF, its stripped copy (with a
/// `.gnu_debuglink` to `prog.debug`) and the separate debug file, in `dir`.
struct Built {
    dir: PathBuf,
    full: PathBuf,
    stripped: PathBuf,
    debug: PathBuf,
    /// Stripped of DWARF only: its symbol table names functions.
    symtab_only: PathBuf,
    build_id: String,
    /// `work`'s first instruction and size.
    work: (u64, u64),
}

fn run(command: &mut Command, what: &str) {
    common::check(command.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}")), what);
}

fn build(name: &str) -> Option<Built> {
    build_in(common::scratch(name), "prog")
}

/// Builds `PROGRAM` as `dir/<stem>` (another stem, another build-id: DWARF names the source file).
fn build_in(dir: PathBuf, stem: &str) -> Option<Built> {
    let clang = common::clang()?;
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join(format!("{stem}.c"));
    std::fs::write(&source, PROGRAM).unwrap();
    let full = dir.join(stem);
    run(Command::new(&clang).args(["-g", "-O1", "-Wl,--build-id"]).arg(&source).arg("-o").arg(&full), "clang");
    let debug = dir.join(format!("{stem}.debug"));
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&debug), "objcopy --only-keep-debug");
    let stripped = dir.join(format!("{stem}.stripped"));
    run(
        Command::new("objcopy")
            .args(["--strip-debug", "--strip-unneeded"])
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&full)
            .arg(&stripped),
        "objcopy --strip-debug --strip-unneeded --add-gnu-debuglink",
    );
    let symtab_only = dir.join(format!("{stem}.symtab-only"));
    run(Command::new("objcopy").arg("--strip-debug").arg(&full).arg(&symtab_only), "objcopy --strip-debug");
    let module = Module::open(&full).unwrap();
    let build_id = module.build_id();
    assert_eq!(build_id.len(), 40, "clang -Wl,--build-id gives a SHA-1 build-id");
    let work = module.functions.iter().find(|f| f.name == "work").expect("work in the symbol table");
    let work = (work.address, work.size);
    assert!(Module::open(&stripped).unwrap().functions.iter().all(|f| f.name != "work"), "stripped of .symtab");
    assert_eq!(Module::open(&stripped).unwrap().build_id(), build_id);
    Some(Built { dir, full, stripped, debug, symtab_only, build_id, work })
}

/// A symbolizer that asks no debuginfod server.
fn offline(debug_dirs: Vec<PathBuf>, cache: &Path) -> OfflineSymbolizer {
    OfflineSymbolizer::with_debuginfod(debug_dirs, Vec::new(), cache.to_path_buf(), Duration::from_secs(5))
}

/// An offset in `work` where `bump` is inlined, and its frames, found with the unstripped binary.
fn inlined_offset(built: &Built) -> (u64, Vec<Frame>) {
    let mut symbolizer = offline(Vec::new(), &built.dir.join("no-cache"));
    let path = built.full.to_str().unwrap();
    let (start, size) = built.work;
    for offset in start..start + size {
        let frames = symbolizer.symbolize(&built.build_id, Some(path), offset, false).expect("unstripped: symbolized");
        if frames.len() == 2 && frames[0].function.as_deref() == Some("bump") {
            return (offset, frames);
        }
    }
    panic!("no offset of work() symbolizes to bump inlined into work; messages: {:?}", symbolizer.take_messages());
}

/// The frames of the inlined store: `bump` at its line, inlined into `work` at the call.
fn assert_inlined_frames(frames: &[Frame], module: Option<&str>, offset: u64) {
    assert_eq!(frames.len(), 2, "{frames:#?}");
    let (inner, outer) = (&frames[0], &frames[1]);
    assert_eq!(inner.function.as_deref(), Some("bump"), "{frames:#?}");
    assert!(inner.inlined && !outer.inlined, "{frames:#?}");
    assert!(inner.file.as_deref().is_some_and(|f| f.ends_with("/prog.c")), "{frames:#?}");
    assert_eq!(inner.line, Some(line_of("/* BUMP */")), "{frames:#?}");
    assert_eq!(outer.function.as_deref(), Some("work"), "{frames:#?}");
    assert_eq!(outer.line, Some(line_of("/* CALL */")), "{frames:#?}");
    for frame in frames {
        assert_eq!(frame.module.as_deref(), module, "{frames:#?}");
        assert_eq!(frame.offset, offset, "{frames:#?}");
    }
}

#[test]
fn local_files_module_path_debuglink_and_debug_dirs() {
    let Some(built) = build("triage_symbolize_local") else { return };
    let (offset, frames) = inlined_offset(&built);
    let cache = built.dir.join("cache");

    // (a) The report's module path is the unstripped binary.
    let full = built.full.to_str().unwrap();
    assert_inlined_frames(&frames, Some(full), offset);
    // The return address of main's call of work names main's line.
    let mut symbolizer = offline(Vec::new(), &cache);
    let main = Module::open(&built.full).unwrap().functions.iter().find(|f| f.name == "main").unwrap().clone();
    let after_call = (main.address + 1..main.address + main.size)
        .find(|&o| {
            symbolizer.symbolize(&built.build_id, Some(full), o, true).is_some_and(|f| {
                f.last().is_some_and(|f| f.function.as_deref() == Some("main") && f.line == Some(line_of("/* MAIN */")))
            })
        })
        .expect("a return address in main names its line");
    assert!(after_call > main.address);
    assert!(symbolizer.take_messages().is_empty());

    // Stripped, alone in a directory: its debuglink leads nowhere, and it has no symbols left.
    let alone = built.dir.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    let stripped = alone.join("prog");
    std::fs::copy(&built.stripped, &stripped).unwrap();
    let stripped = stripped.to_str().unwrap();
    let mut symbolizer = offline(Vec::new(), &cache);
    assert_eq!(symbolizer.symbolize(&built.build_id, Some(stripped), offset, false), None);
    assert_eq!(symbolizer.symbolize(&built.build_id, Some(stripped), offset + 1, false), None);
    let messages = symbolizer.take_messages();
    eprintln!("stripped alone: {messages:#?}");
    assert_eq!(messages.len(), 1, "one note per build-id: {messages:#?}");
    assert!(messages[0].contains(&built.build_id) && messages[0].contains("(prog)"), "{messages:#?}");
    assert!(messages[0].contains(".gnu_debuglink prog.debug"), "{messages:#?}");
    assert!(messages[0].contains("/usr/lib/debug"), "{messages:#?}");

    // The stripped binary beside its debug file: the .gnu_debuglink leads to it. (A later report
    // that names the module at another path gets that path tried, though the build-id was missed.)
    let beside = built.stripped.to_str().unwrap();
    let frames = symbolizer.symbolize(&built.build_id, Some(beside), offset, false).expect("debuglink followed");
    assert_inlined_frames(&frames, Some(beside), offset);
    let frames = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false).expect("found before");
    assert_inlined_frames(&frames, Some(stripped), offset);
    assert!(symbolizer.take_messages().is_empty());
    // ... and in a .debug/ subdirectory.
    let sub = alone.join(".debug");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&built.debug, sub.join("prog.debug")).unwrap();
    let mut symbolizer = offline(Vec::new(), &cache);
    let frames = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false).expect("debuglink in .debug/");
    assert_inlined_frames(&frames, Some(stripped), offset);
    std::fs::remove_dir_all(&sub).unwrap();

    // (b) --debug-dir with .build-id/xx/rest.debug.
    let debug_dir = built.dir.join("debug-dir");
    let (head, rest) = built.build_id.split_at(2);
    std::fs::create_dir_all(debug_dir.join(".build-id").join(head)).unwrap();
    std::fs::copy(&built.debug, debug_dir.join(".build-id").join(head).join(format!("{rest}.debug"))).unwrap();
    let mut symbolizer = offline(vec![built.dir.join("missing-dir"), debug_dir], &cache);
    let frames = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false).expect("found by build-id");
    assert_inlined_frames(&frames, Some(stripped), offset);
    // The module path may be unknown, or name a file that is not there (another machine's path).
    let frames = symbolizer.symbolize(&built.build_id, None, offset, false).unwrap();
    assert_inlined_frames(&frames, None, offset);
    let frames = symbolizer.symbolize(&built.build_id, Some("/opt/app/bin/prog"), offset, false).unwrap();
    assert_inlined_frames(&frames, Some("/opt/app/bin/prog"), offset);
    assert!(symbolizer.take_messages().is_empty());
    // ... and with xx/rest.debug (no .build-id level).
    let flat_dir = built.dir.join("flat-dir");
    std::fs::create_dir_all(flat_dir.join(head)).unwrap();
    std::fs::copy(&built.debug, flat_dir.join(head).join(format!("{rest}.debug"))).unwrap();
    let mut symbolizer = offline(vec![flat_dir], &cache);
    let frames = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false).expect("found by build-id");
    assert_inlined_frames(&frames, Some(stripped), offset);

    // --debug-dir holding the debug file under any name (and other ELF files, and other files).
    let plain_dir = built.dir.join("plain-dir");
    std::fs::create_dir_all(&plain_dir).unwrap();
    std::fs::copy(&built.debug, plain_dir.join("whatever.dbg")).unwrap();
    std::fs::write(plain_dir.join("README"), "not ELF").unwrap();
    std::fs::write(plain_dir.join("truncated"), &std::fs::read(&built.full).unwrap()[..100]).unwrap();
    let mut symbolizer = offline(vec![plain_dir], &cache);
    let frames = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false).expect("found in the scan");
    assert_inlined_frames(&frames, Some(stripped), offset);

    // Another build's file at the module path is not used.
    let other_id = "1".repeat(40);
    let mut symbolizer = offline(Vec::new(), &cache);
    assert_eq!(symbolizer.symbolize(&other_id, Some(full), offset, false), None);
    let messages = symbolizer.take_messages();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].contains(&format!("build-id {}: another build", built.build_id)), "{messages:#?}");

    // A binary stripped of DWARF only, with no debug file anywhere: its symbol table names the
    // function (no file:line), and a note says so.
    let symtab_dir = built.dir.join("symtab-only");
    std::fs::create_dir_all(&symtab_dir).unwrap();
    let symtab_only = symtab_dir.join("prog");
    std::fs::copy(&built.symtab_only, &symtab_only).unwrap();
    let symtab_only = symtab_only.to_str().unwrap();
    let mut symbolizer = offline(Vec::new(), &cache);
    let frames = symbolizer.symbolize(&built.build_id, Some(symtab_only), offset, false).expect("symbols");
    let expected = Frame {
        function: Some("work".into()),
        module: Some(symtab_only.into()),
        build_id: Some(built.build_id.clone()),
        offset,
        ..Frame::default()
    };
    assert_eq!(frames, [expected]);
    let messages = symbolizer.take_messages();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].starts_with(&format!("only symbols for build-id {}", built.build_id)), "{messages:#?}");

    // Corrupt debug files: a truncated one is passed over (the next directory has a good one); one
    // whose DWARF is overwritten with garbage is read without a panic.
    let bytes = std::fs::read(&built.debug).unwrap();
    let [truncated_dir, good_dir, garbage_dir] = ["truncated", "good", "garbage"].map(|d| built.dir.join(d));
    for dir in [&truncated_dir, &good_dir, &garbage_dir] {
        std::fs::create_dir_all(dir.join(".build-id").join(head)).unwrap();
    }
    let at = |dir: &Path| dir.join(".build-id").join(head).join(format!("{rest}.debug"));
    std::fs::write(at(&truncated_dir), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::copy(&built.debug, at(&good_dir)).unwrap();
    let mut symbolizer = offline(vec![truncated_dir.clone(), good_dir], &cache);
    let frames = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false).expect("the good copy");
    assert_inlined_frames(&frames, Some(stripped), offset);
    let mut symbolizer = offline(vec![truncated_dir], &cache);
    assert_eq!(symbolizer.symbolize(&built.build_id, Some(stripped), offset, false), None);
    let messages = symbolizer.take_messages();
    eprintln!("truncated: {messages:#?}");
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].contains("unreadable"), "{messages:#?}");
    let debug_info = Module::open(&built.debug).unwrap().section_file_offset(".debug_info").unwrap();
    let mut garbage = bytes.clone();
    let end = (debug_info + 4096).min(garbage.len());
    garbage[debug_info..end].iter_mut().enumerate().for_each(|(i, b)| *b = (i * 7 + 0x5a) as u8);
    std::fs::write(at(&garbage_dir), &garbage).unwrap();
    let mut symbolizer = offline(vec![garbage_dir], &cache);
    let start = built.work.0;
    for offset in start..start + built.work.1 {
        // Whatever garbage DWARF says, but no panic.
        let _ = symbolizer.symbolize(&built.build_id, Some(stripped), offset, false);
    }
}

/// A debuginfod server, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts elfutils' debuginfod on the ELF files of `dir` and waits (up to 60 s) until it serves
/// `build_id`'s debuginfo.
fn start_debuginfod(dir: &Path, work: &Path, build_id: &str) -> Server {
    let port = free_port();
    let log = std::fs::File::create(work.join("debuginfod.log")).unwrap();
    let child = Command::new("debuginfod")
        .arg("-F")
        .args(["-p", &port.to_string()])
        .arg("-d")
        .arg(work.join("db.sqlite"))
        .arg(dir)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start debuginfod ({e}): install the `debuginfod` package (apt-get install debuginfod), \
                 which this test runs as a real server"
            )
        });
    let server = Server { child, url: format!("http://127.0.0.1:{port}") };
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(2)).build();
    let ready = Instant::now();
    while ready.elapsed() < Duration::from_secs(60) {
        if agent.get(&format!("{}/buildid/{build_id}/debuginfo", server.url)).call().is_ok() {
            eprintln!("debuginfod ready after {:?}", ready.elapsed());
            return server;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(work.join("debuginfod.log")).unwrap_or_default();
    panic!("debuginfod did not serve {build_id} within 60 s; its log:\n{log}");
}

#[test]
fn debuginfod_downloads_once_then_serves_from_the_cache() {
    let Some(built) = build("triage_symbolize_debuginfod") else { return };
    let (offset, _) = inlined_offset(&built);
    let served = built.dir.join("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::copy(&built.stripped, served.join("prog")).unwrap();
    std::fs::copy(&built.debug, served.join("prog.debug")).unwrap();
    // Another build (another source file name) of which the server has only the executable, with
    // its symbol table.
    let variant = build_in(built.dir.join("variant"), "variant").unwrap();
    assert_ne!(variant.build_id, built.build_id);
    std::fs::copy(&variant.symtab_only, served.join("variant")).unwrap();
    let server = start_debuginfod(&served, &built.dir, &built.build_id);
    let cache = built.dir.join("cache");
    // The report names the module at a path that does not exist here (the fleet machine's).
    let module = Some("/opt/app/bin/prog");
    let timeout = Duration::from_secs(10);

    // A closed port first: it is skipped for the rest of the run, and the live server answers.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let mut symbolizer =
        OfflineSymbolizer::with_debuginfod(Vec::new(), vec![dead.clone(), server.url.clone()], cache.clone(), timeout);
    let first = Instant::now();
    let frames = symbolizer.symbolize(&built.build_id, module, offset, false).expect("from debuginfod");
    let first = first.elapsed();
    assert_inlined_frames(&frames, module, offset);
    assert!(cache.join(&built.build_id).join("debuginfo").is_file(), "cached as <build-id>/debuginfo");
    let again = Instant::now();
    assert_eq!(symbolizer.symbolize(&built.build_id, module, offset, false).as_deref(), Some(&frames[..]));
    let again = again.elapsed();
    let messages = symbolizer.take_messages();
    eprintln!("with a closed port first: {messages:#?}");
    assert_eq!(messages.len(), 1, "the closed port, once: {messages:#?}");
    assert!(messages[0].contains(&dead) && messages[0].contains("not asked again"), "{messages:#?}");
    // Only the executable: named by its symbol table.
    let frames = symbolizer.symbolize(&variant.build_id, module, variant.work.0, false).expect("from /executable");
    assert_eq!((frames.len(), frames[0].function.as_deref(), frames[0].line), (1, Some("work"), None), "{frames:#?}");
    assert!(cache.join(&variant.build_id).join("executable").is_file());
    let messages = symbolizer.take_messages();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].starts_with(&format!("only symbols for build-id {}", variant.build_id)), "{messages:#?}");
    let leftovers: Vec<_> =
        std::fs::read_dir(cache.join(&built.build_id)).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(leftovers, ["debuginfo"], "no temporary file left");

    // The server gone, a new symbolizer (a new run) with the same cache still names the frame.
    drop(server);
    let mut symbolizer = OfflineSymbolizer::with_debuginfod(Vec::new(), vec![dead], cache.clone(), timeout);
    let cached = Instant::now();
    let frames = symbolizer.symbolize(&built.build_id, module, offset, false).expect("from the cache");
    let cached = cached.elapsed();
    assert_inlined_frames(&frames, module, offset);
    assert!(symbolizer.take_messages().is_empty());
    eprintln!(
        "first lookup (download and open): {first:?}; same PC again: {again:?}; new run from the cache: {cached:?}"
    );
}

#[test]
fn an_unknown_build_id_and_an_unreachable_server_are_one_note_fast() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    let cache = common::scratch("triage_symbolize_unreachable").join("cache");
    let mut symbolizer =
        OfflineSymbolizer::with_debuginfod(Vec::new(), vec![dead.clone()], cache.clone(), Duration::from_secs(10));
    let unknown = "0123456789abcdef0123456789abcdef01234567";
    let started = Instant::now();
    for offset in 0..50 {
        assert_eq!(symbolizer.symbolize(unknown, Some("/opt/app/bin/app"), 0x1000 + offset, true), None);
    }
    let messages = symbolizer.take_messages();
    eprintln!("unknown build-id: {messages:#?}");
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].contains(unknown) && messages[0].contains("(app)"), "{messages:#?}");
    assert!(messages[0].contains(&dead) && messages[0].contains("unreachable"), "{messages:#?}");
    // Another unknown module does not ask the dead server again.
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    assert_eq!(symbolizer.symbolize(other, None, 0x10, false), None);
    let messages = symbolizer.take_messages();
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert!(messages[0].contains(other) && messages[0].contains("unreachable earlier"), "{messages:#?}");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert!(!cache.exists(), "nothing cached for a miss");
    eprintln!("51 lookups of 2 unknown build-ids with the server down: {elapsed:?}");
}

#[test]
fn a_server_that_never_answers_costs_one_timeout_per_run() {
    // Connections complete in the kernel's backlog, but nothing is ever read or answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let cache = common::scratch("triage_symbolize_silent").join("cache");
    let timeout = Duration::from_secs(1);
    let mut symbolizer = OfflineSymbolizer::with_debuginfod(Vec::new(), vec![url.clone()], cache, timeout);
    let started = Instant::now();
    assert_eq!(symbolizer.symbolize(&"ab".repeat(20), None, 0x1000, false), None);
    let first = started.elapsed();
    assert!(first >= timeout && first < timeout * 3, "{first:?}");
    for id in ["cd", "ef", "01"] {
        for offset in 0..10 {
            assert_eq!(symbolizer.symbolize(&id.repeat(20), None, offset, true), None);
        }
    }
    let all = started.elapsed();
    assert!(all < first + Duration::from_millis(500), "one timeout only: first {first:?}, all {all:?}");
    let messages = symbolizer.take_messages();
    assert_eq!(messages.len(), 4, "one per build-id: {messages:#?}");
    assert!(messages[0].contains(&url) && messages[0].contains("not asked again"), "{messages:#?}");
    assert!(messages[1..].iter().all(|m| m.contains("unreachable earlier")), "{messages:#?}");
    eprintln!(
        "{messages:#?}\nsilent server: first lookup {first:?}, 31 more lookups of 3 more build-ids {:?}",
        all - first
    );
}

/// Debug files that dwz made share a supplementary file (`.gnu_debugaltlink`: Debian's and Fedora's
/// debug packages are built this way): function names and files live there. Here the link names a path
/// that does not exist, so the supplementary file is found by its build-id in the `--debug-dir`.
#[test]
fn dwz_supplementary_files_are_found_by_build_id() {
    let Some(clang) = common::clang() else { return };
    let dwz = Command::new("dwz").arg("--version").output();
    assert!(dwz.is_ok(), "dwz is not installed: apt-get install dwz (CI installs it)");
    let dir = common::scratch("triage_dwz");
    let debug_dir = dir.join("debug");
    std::fs::create_dir_all(&debug_dir).unwrap();
    let mut built = Vec::new();
    for stem in ["one", "two"] {
        // dwz reads DWARF 4 (it stops at DWARF 5's .debug_addr).
        let source = dir.join(format!("{stem}.c"));
        std::fs::write(&source, PROGRAM.replace("work", &format!("work_{stem}"))).unwrap();
        let full = dir.join(stem);
        run(
            Command::new(&clang).args(["-gdwarf-4", "-O1", "-Wl,--build-id"]).arg(&source).arg("-o").arg(&full),
            "clang",
        );
        let debug = debug_dir.join(format!("{stem}.debug"));
        run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&debug), "objcopy --only-keep-debug");
        built.push((stem, full, debug));
    }
    let common_file = debug_dir.join("common.debug");
    run(
        Command::new("dwz")
            .arg("-m")
            .arg(&common_file)
            .args(["-M", "/nonexistent/.dwz/common.debug"])
            .arg(&built[0].2)
            .arg(&built[1].2),
        "dwz -m",
    );
    let (stem, full, _) = &built[0];
    let module = Module::open(full).unwrap();
    let function = format!("work_{stem}");
    let work = module.functions.iter().find(|f| f.name == function).expect("work in the symbol table");
    let mut symbolizer = offline(vec![debug_dir.clone()], &dir.join("cache"));
    // The module path names nothing readable: only the debug dir has this build's DWARF.
    let found = (work.address..work.address + work.size).find_map(|offset| {
        let frames = symbolizer.symbolize(&module.build_id(), Some("/srv/gone/one"), offset, false)?;
        (frames.len() == 2 && frames[0].function.as_deref() == Some("bump")).then_some(frames)
    });
    let frames = found.unwrap_or_else(|| panic!("bump inlined into {function}: {:?}", symbolizer.take_messages()));
    assert_eq!(frames[1].function.as_deref(), Some(function.as_str()), "{frames:#?}");
    assert!(frames[0].file.as_deref().is_some_and(|f| f.ends_with("/one.c")), "{frames:#?}");
    assert_eq!(frames[0].line, Some(line_of("/* BUMP */")), "{frames:#?}");
}
