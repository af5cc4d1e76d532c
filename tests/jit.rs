//! JIT'd code for real: LLVM's ORC JIT (LLJIT) running IR that clang-19 emitted with racewatch's C flags,
//! with racewatch's ORC plugin (orc/include/racewatch/orc.h) and without, and stock `lli-19`; plus the
//! tables that cannot be misread (a declared PC-offset width that does not fit) and the `0x0..0x0` range.
//!
//! The LLJIT host (tests/jit/host.cpp, against libLLVM-19) is built once per test binary; tests that need
//! it are skipped with a SKIP line when `llvm-config-19` or `clang++-19` is missing (apt-get install
//! llvm-19-dev clang-19).

mod common;

use common::{build_c, check, clang, has_report, retry_for, run_under, scratch, spawn_and_wait, Run, REPORT_HEADER};
use racewatch_instrument::toolchain::C_FLAGS;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The JIT'd program: racy, relaxed-atomic and mutex-guarded (clean) counters.
fn race_c() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jit/race.c")
}

/// The 1-based line of tests/jit/race.c marked `racewatch: racy`.
fn racy_line() -> u32 {
    let text = std::fs::read_to_string(race_c()).unwrap();
    text.lines().zip(1..).find(|(l, _)| l.contains("racewatch: racy")).map(|(_, n)| n).unwrap()
}

/// Runs `program args` with `options` under `racewatch run` (which sets `fail_on_race=1`).
fn run(options: &[&str], program: &Path, args: &[&str]) -> Run {
    run_under(options, program, args)
}

fn lines_with<'a>(stderr: &'a str, needle: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(needle)).collect()
}

// ---- Tables that cannot be misread ----

/// A library whose IR was compiled for the small code model (its tables declare version 2, 4-byte PC
/// offsets) and then built with `-mcmodel=large` (8-byte offsets), as a large-code-model JIT links such
/// IR: `racewatch dump` and the runtime (at `dlopen`) decode it with the width that fits, and say so in
/// one line. A table that fits neither width is refused with one line naming both reasons and the fix.
#[test]
fn misread_width_is_decoded_with_the_width_that_fits_or_refused() {
    let Some(clang) = clang() else { return };
    let dir = scratch("jit_misread_width");
    let lib_c = dir.join("lib.c");
    std::fs::write(
        &lib_c,
        "#include <stdatomic.h>\natomic_long hits; long plain;\n\
         __attribute__((noinline)) long work(long n) { for (long i = 0; i < n; i++) { \
         atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed); plain += i; } return plain; }\n",
    )
    .unwrap();
    let ll = dir.join("lib.ll");
    check(
        Command::new(&clang)
            .args(C_FLAGS)
            .args(["-O1", "-fPIC", "-S", "-emit-llvm"])
            .arg(&lib_c)
            .arg("-o")
            .arg(&ll)
            .output()
            .unwrap(),
        "clang -emit-llvm",
    );
    let lib = dir.join("libmisread.so");
    check(
        Command::new(&clang)
            .args(["-mcmodel=large", "-fPIC", "-shared"])
            .arg(&ll)
            .arg("-o")
            .arg(&lib)
            .output()
            .unwrap(),
        "clang -mcmodel=large -shared lib.ll",
    );

    // Files: the dump decodes every entry, with a note and no error.
    let out = common::racewatch().arg("dump").arg(&lib).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("NOTE: sanmd_covered2 holds 8-byte PC offsets"), "{stdout}");
    assert!(stdout.contains("-mcmodel=large") && !stdout.contains("ERROR"), "{stdout}");
    assert!(stdout.contains(" work size="), "{stdout}");

    // dlopen: the constructor's callbacks; one note line, the function covered, its atomic atomic.
    let main_src = format!(
        r#"
        #include <dlfcn.h>
        #include <stdio.h>
        int main(void) {{
            void *lib = dlopen("{}", RTLD_NOW);
            if (!lib) {{ printf("dlopen failed\n"); return 1; }}
            long (*work)(long) = (long (*)(long))dlsym(lib, "work");
            int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
            printf("work %ld classify %d\n", work(3), classify ? classify((unsigned long)work) : -1);
            return 0;
        }}
    "#,
        lib.display()
    );
    let exe = build_c(&clang, &dir, "main", &main_src, &[]);
    let out = run(&["verbosity=1"], &exe, &[]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "work 3 classify 1\n", "{}", out.stderr);
    let notes = lines_with(&out.stderr, "holds 8-byte PC offsets although its version 0x2 declares 4-byte ones");
    assert_eq!(notes.len(), 1, "{}", out.stderr);
    assert!(notes[0].starts_with("racewatch: ") && notes[0].contains("libmisread.so"), "{}", out.stderr);
    assert!(out.stderr.contains("libmisread.so: 1 covered functions, 1 atomic PCs"), "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);

    // A table whose PCs point outside executable memory with either width: refused, one line.
    let src = r#"
        #include <dlfcn.h>
        #include <stdint.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/mman.h>
        typedef void (*cb_t)(uint32_t, const char *, const char *);
        int main(void) {
            cb_t add = (cb_t)dlsym(RTLD_DEFAULT, "__sanitizer_metadata_atomics_add");
            int (*classify)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "__racewatch_classify");
            if (!add || !classify) { printf("no runtime\n"); return 0; }
            unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            for (int i = 0; i < 4; i++) { int32_t rel = 64 + i; memcpy(page + 4 * i, &rel, 4); }
            add(2, (char *)page, (char *)page + 16);
            printf("classify %d\n", classify((unsigned long)page + 64));
            return 0;
        }
    "#;
    let exe = build_c(&clang, &dir, "refused", src, &[]);
    let out = run(&[], &exe, &[]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "classify 0\n", "{}", out.stderr);
    let warnings = lines_with(&out.stderr, "racewatch: warning:");
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    for needle in ["ignoring PC table of <anonymous", "outside the code", "declared 4-byte", "8-byte", "-mcmodel=large"]
    {
        assert!(warnings[0].contains(needle), "{needle}: {}", out.stderr);
    }
}

/// A module constructor whose `__start_`/`__stop_` symbols resolved to nothing (what JITLink does to the
/// tables of stock `lli`): one line naming the cause and the fix, not a generic "bad range".
#[test]
fn zero_range_names_the_dropped_tables_and_the_plugin() {
    let Some(clang) = clang() else { return };
    let dir = scratch("jit_zero_range");
    let src = r#"
        #include <stdint.h>
        #include <stdio.h>
        void __sanitizer_metadata_covered_add(uint32_t, const char *, const char *) __attribute__((weak));
        void __sanitizer_metadata_atomics_add(uint32_t, const char *, const char *) __attribute__((weak));
        int main(void) {
            for (int i = 0; i < 2; i++) {
                if (__sanitizer_metadata_covered_add) __sanitizer_metadata_covered_add(2, 0, 0);
                if (__sanitizer_metadata_atomics_add) __sanitizer_metadata_atomics_add(2, 0, 0);
            }
            printf("done\n");
            return 0;
        }
    "#;
    let exe = build_c(&clang, &dir, "zero", src, &[]);
    let out = run(&[], &exe, &[]);
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("racewatch:")).collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    for needle in ["0x0..0x0", "JIT linker dropped", "lli", "ORC plugin", "orc/include/racewatch/orc.h"] {
        assert!(lines[0].contains(needle), "{needle}: {}", out.stderr);
    }
    assert!(!out.stderr.contains("bad range"), "{}", out.stderr);
}
