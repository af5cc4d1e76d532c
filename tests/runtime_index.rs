//! The runtime's start-up index, end to end: real programs built with clang-19
//! and rustc (metadata flags), run with `libracewatch.so` preloaded. The index
//! must agree with what racewatch's own ELF reader decodes from the file, pick
//! up `dlopen`ed libraries from the metadata callbacks and drop them at
//! `dlclose`, and leave programs without metadata untouched.

mod common;

use common::{build_c, build_rust, check, clang, racewatch, scratch};
use racewatch_instrument::elf::Module;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The runtime the CLI carries (`racewatch runtime-path`).
fn runtime() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = check(racewatch().arg("runtime-path").output().unwrap(), "racewatch runtime-path");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// Runs `exe args` with the runtime preloaded and `RACEWATCH_OPTIONS=options` (unset when `None`).
fn preloaded(exe: &Path, args: &[String], options: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args).env("LD_PRELOAD", runtime()).env_remove("RACEWATCH_OPTIONS");
    if let Some(options) = options {
        cmd.env("RACEWATCH_OPTIONS", options);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `verbosity=1` line for `path`, with the counts racewatch's ELF reader decodes from the file.
fn expected_line(path: &Path) -> String {
    let m = Module::open(path).expect("read ELF");
    assert!(!m.covered.is_empty(), "{} has no covered functions", path.display());
    format!(
        "racewatch: indexed {}: {} covered functions, {} atomic PCs",
        path.display(),
        m.covered.len(),
        m.atomics.len()
    )
}

fn count_lines(haystack: &str, line: &str) -> usize {
    haystack.lines().filter(|l| *l == line).count()
}

/// Bumps an atomic and a plain counter; with the runtime loaded, prints the
/// index's verdict (0 uncovered, 1 plain, 2 atomic) for link-time addresses
/// given after the link-time address of `main`.
const C_PROGRAM: &str = r#"
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

atomic_long hits;
long plain;

__attribute__((noinline)) void bump(long n) {
    for (long i = 0; i < n; i++) {
        atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
        plain += i;
    }
}

__attribute__((noinline)) long peek(void) { return atomic_load(&hits) + plain; }

int main(int argc, char **argv) {
    bump(10);
    printf("result %ld\n", peek());
    int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
    if (argc < 2 || !classify) return 0;
    unsigned long bias = (unsigned long)&main - strtoul(argv[1], 0, 16);
    for (int i = 2; i < argc; i++) printf("%s %d\n", argv[i], classify(strtoul(argv[i], 0, 16) + bias));
    return 0;
}
"#;

#[test]
fn c_program_index_matches_the_file() {
    let Some(clang) = clang() else { return };
    let dir = scratch("runtime_index_c");
    let exe = build_c(&clang, &dir, "counter", C_PROGRAM, &[]);
    let m = Module::open(&exe).unwrap();
    let main = m.functions.iter().find(|f| f.name == "main").expect("main symbol").address;

    // Probes at link-time addresses with the verdict the file implies.
    let mut probes: Vec<(u64, i32)> = m.atomics.iter().map(|&pc| (pc, 2)).collect();
    for c in &m.covered {
        if !m.atomics.contains(&c.pc) {
            probes.push((c.pc, 1));
        }
        if !m.atomics.contains(&(c.pc + c.size - 1)) {
            probes.push((c.pc + c.size - 1, 1));
        }
    }
    for f in &m.functions {
        if f.size > 0 && m.covered_containing(f.address).is_none() {
            probes.push((f.address, 0));
        }
    }
    assert!(probes.iter().any(|p| p.1 == 0) && probes.iter().filter(|p| p.1 == 2).count() >= 2, "{probes:?}");
    let mut args = vec![format!("{main:x}")];
    args.extend(probes.iter().map(|(pc, _)| format!("{pc:x}")));

    let out = preloaded(&exe, &args, Some("verbosity=1"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(count_lines(&stderr, &expected_line(&exe)), 1, "stderr:\n{stderr}");
    assert!(stdout.starts_with("result 55\n"), "{stdout}");
    for (line, (pc, want)) in stdout.lines().skip(1).zip(&probes) {
        assert_eq!(line, format!("{pc:x} {want}"), "classify at link-time {pc:#x}");
    }
    assert_eq!(stdout.lines().count(), probes.len() + 1);
}

#[test]
fn rust_program_index_matches_the_file() {
    let dir = scratch("runtime_index_rust");
    let src = r#"
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        fn main() {
            let n = Arc::new(AtomicUsize::new(0));
            let handles: Vec<_> = (0..4).map(|_| {
                let n = n.clone();
                std::thread::spawn(move || for _ in 0..1000 { n.fetch_add(1, Ordering::Relaxed); })
            }).collect();
            for h in handles { h.join().unwrap(); }
            println!("{}", n.load(Ordering::SeqCst));
        }
    "#;
    let exe = build_rust(&dir, "counter", src, &[]);
    let out = preloaded(&exe, &[], Some("verbosity=1:stats=1"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "4000\n");
    assert_eq!(count_lines(&stderr, &expected_line(&exe)), 1, "stderr:\n{stderr}");
    let m = Module::open(&exe).unwrap();
    let stat = |label: &str, n: usize| format!("racewatch: stats: {label}: {n}");
    assert_eq!(count_lines(&stderr, &stat("modules indexed", 1)), 1, "{stderr}");
    assert_eq!(count_lines(&stderr, &stat("covered functions", m.covered.len())), 1, "{stderr}");
    assert_eq!(count_lines(&stderr, &stat("atomic PCs", m.atomics.len())), 1, "{stderr}");
}

/// An instrumented library the executable links against: its constructors call
/// the metadata callbacks before the runtime's constructor ran; the module walk
/// also finds it. Each module must be indexed exactly once.
#[test]
fn linked_library_indexed_once() {
    let Some(clang) = clang() else { return };
    let dir = scratch("runtime_index_linked");
    let lib_src =
        "#include <stdatomic.h>\natomic_int shared;\nint lib_bump(void) { return atomic_fetch_add(&shared, 2) + 2; }\n";
    let lib = build_c(&clang, &dir, "libdep.so", lib_src, &["-fPIC", "-shared"]);
    let main_src =
        "#include <stdio.h>\nint lib_bump(void);\nint main(void) { printf(\"%d\\n\", lib_bump()); return 0; }\n";
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let exe = build_c(&clang, &dir, "uses_lib", main_src, &["-Wl,--no-as-needed", lib.to_str().unwrap(), &rpath]);
    let out = preloaded(&exe, &[], Some("verbosity=1:stats=1"));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout), "2\n");
    assert_eq!(count_lines(&stderr, &expected_line(&exe)), 1, "stderr:\n{stderr}");
    assert_eq!(count_lines(&stderr, &expected_line(&lib)), 1, "stderr:\n{stderr}");
    assert_eq!(count_lines(&stderr, "racewatch: stats: modules indexed: 2"), 1, "stderr:\n{stderr}");
}

/// `dlopen` registers a library through its constructor's callbacks alone;
/// `dlclose` (its destructor's `_del` calls) removes it from the index.
#[test]
fn dlopen_indexes_and_dlclose_removes() {
    let Some(clang) = clang() else { return };
    let dir = scratch("runtime_index_dlopen");
    let plugin_src = r#"
        #include <stdatomic.h>
        atomic_long total;
        long plugin_add(long n) { return atomic_fetch_add(&total, n) + n; }
    "#;
    let plugin = build_c(&clang, &dir, "libplugin.so", plugin_src, &["-fPIC", "-shared"]);
    let host_src = r#"
        #include <dlfcn.h>
        #include <stdio.h>
        int main(int argc, char **argv) {
            int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
            void *h = dlopen(argv[1], RTLD_NOW);
            if (!h || !classify) { printf("setup failed\n"); return 2; }
            long (*add)(long) = (long (*)(long))dlsym(h, "plugin_add");
            unsigned long pc = (unsigned long)add;
            printf("add %ld\n", add(5));
            printf("loaded %d\n", classify(pc));
            fflush(stdout);
            fprintf(stderr, "host: closing\n");
            dlclose(h);
            printf("closed %d\n", classify(pc));
            return 0;
        }
    "#;
    let host = build_c(&clang, &dir, "host", host_src, &[]);
    let out = preloaded(&host, &[plugin.display().to_string()], Some("verbosity=1"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    // plugin_add's first instruction is covered and not atomic; gone after dlclose.
    assert_eq!(stdout, "add 5\nloaded 1\nclosed 0\n", "stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let indexed = lines.iter().position(|l| *l == expected_line(&plugin)).unwrap_or_else(|| panic!("{stderr}"));
    let closing = lines.iter().position(|l| *l == "host: closing").unwrap();
    let unindexed = format!("racewatch: unindexed {}", plugin.display());
    let gone = lines.iter().position(|l| *l == unindexed).unwrap_or_else(|| panic!("{stderr}"));
    assert!(indexed < closing && closing < gone, "{stderr}");
    assert_eq!(count_lines(&stderr, &expected_line(&plugin)), 1, "{stderr}");
}

/// Without metadata the runtime is invisible: same stdout and exit status, no stderr.
#[test]
fn program_without_metadata_is_unaffected() {
    let Some(clang) = clang() else { return };
    let dir = scratch("runtime_index_plain");
    let src = dir.join("plain.c");
    std::fs::write(&src, "#include <stdio.h>\nint main(void) { printf(\"hello %d\\n\", 42); return 7; }\n").unwrap();
    let exe = dir.join("plain");
    check(Command::new(&clang).arg("-O2").arg(&src).arg("-o").arg(&exe).output().unwrap(), "clang");
    assert!(Module::open(&exe).unwrap().covered.is_empty());
    let bare = Command::new(&exe).output().unwrap();
    let with = preloaded(&exe, &[], None);
    assert_eq!(with.status.code(), Some(7));
    assert_eq!(with.status.code(), bare.status.code());
    assert_eq!(text(&with.stdout), text(&bare.stdout));
    assert_eq!(text(&with.stderr), "");
}

/// Bad options: one warning each (even when repeated), defaults kept, program unaffected.
#[test]
fn bad_options_warn_once_each() {
    let Some(clang) = clang() else { return };
    let dir = scratch("runtime_index_options");
    let exe = build_c(&clang, &dir, "counter", C_PROGRAM, &[]);
    let out = preloaded(&exe, &[], Some("bogus=1:verbosity=loud:bogus=1:watchpoints=2"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success());
    assert_eq!(stdout, "result 55\n");
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(warnings[0].starts_with("racewatch: warning: ") && warnings[0].contains("bogus"), "{stderr}");
    assert!(warnings[1].starts_with("racewatch: warning: ") && warnings[1].contains("verbosity"), "{stderr}");
    // verbosity kept its default (0): no "indexed" line.
    assert!(!stderr.contains("indexed"), "{stderr}");
}

/// Code registered at run time from anonymous memory (as a JIT would) is
/// indexed from the callback alone and removed by `_del`; a bad version or a
/// malformed table gets one warning and is ignored.
#[test]
fn jit_tables_from_callbacks_and_bad_tables() {
    let Some(clang) = clang() else { return };
    let dir = scratch("runtime_index_jit");
    let src = r#"
        #include <dlfcn.h>
        #include <stdint.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/mman.h>
        typedef void (*cb_t)(uint32_t, const char *, const char *);
        static cb_t cb(const char *name) { return (cb_t)dlsym(RTLD_DEFAULT, name); }
        static void put_rel(unsigned char *entry, unsigned char *target) {
            int32_t rel = (int32_t)(target - entry);
            memcpy(entry, &rel, 4);
        }
        int main(void) {
            int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
            if (!classify) { printf("no runtime\n"); return 0; }
            unsigned char *page = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            unsigned char *code = page, *covered = page + 4096, *atomics = page + 4200;
            mprotect(code, 4096, PROT_READ | PROT_EXEC); /* tables must point into executable memory */
            put_rel(covered, code);
            covered[4] = 0x80; covered[5] = 0x01; /* size 128 (ULEB128) */
            covered[6] = 0x01;                    /* features: atomics */
            put_rel(atomics, code + 8);
            cb("__sanitizer_metadata_covered_add")(2, (char *)covered, (char *)covered + 7);
            cb("__sanitizer_metadata_atomics_add")(2, (char *)atomics, (char *)atomics + 4);
            printf("added %d %d %d\n", classify((unsigned long)code + 5), classify((unsigned long)code + 8),
                   classify((unsigned long)code + 128));
            cb("__sanitizer_metadata_atomics_del")(2, (char *)atomics, (char *)atomics + 4);
            cb("__sanitizer_metadata_covered_del")(2, (char *)covered, (char *)covered + 7);
            printf("removed %d %d\n", classify((unsigned long)code + 5), classify((unsigned long)code + 8));
            cb("__sanitizer_metadata_covered_add")(7, (char *)covered, (char *)covered + 7);
            cb("__sanitizer_metadata_covered_add")(2, (char *)covered, (char *)covered + 6);
            cb("__sanitizer_metadata_atomics_add")(2, (char *)covered, (char *)0);
            printf("bad %d\n", classify((unsigned long)code + 5));
            return 0;
        }
    "#;
    let c_src = dir.join("jit.c");
    std::fs::write(&c_src, src).unwrap();
    let exe = dir.join("jit");
    check(Command::new(&clang).arg("-O1").arg(&c_src).arg("-o").arg(&exe).output().unwrap(), "clang");
    let out = preloaded(&exe, &[], Some("verbosity=1"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "added 1 2 0\nremoved 0 0\nbad 0\n", "stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let anonymous = |l: &&str| l.starts_with("racewatch: indexed <anonymous 0x");
    assert!(lines.iter().any(|l| anonymous(l) && l.ends_with(": 1 covered functions, 1 atomic PCs")), "{stderr}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("racewatch: unindexed <anonymous 0x")).count(), 1, "{stderr}");
    let warnings: Vec<&&str> = lines.iter().filter(|l| l.starts_with("racewatch: warning: ")).collect();
    assert_eq!(warnings.len(), 3, "{stderr}");
    assert!(warnings[0].contains("unsupported version 0x7"), "{stderr}");
    assert!(warnings[1].contains("sanmd_covered2: truncated features at byte 6"), "{stderr}");
    assert!(warnings[2].contains("bad range"), "{stderr}");
}
