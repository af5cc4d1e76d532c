//! Builds the preload runtime (`libracewatch.so`, package `racewatch-runtime`)
//! with a nested `cargo build --release` and hands its path to `src/embedded.rs`,
//! which embeds it with `include_bytes!`. An installed `racewatch` therefore
//! carries its runtime and never needs the source tree.
//!
//! The nested build uses its own target directory (no lock contention with the
//! outer cargo), shared by the outer debug and release profiles so the runtime
//! is compiled once, and it is incremental: a no-op rebuild costs one cargo
//! start-up. Inherited flags (RUSTFLAGS, coverage/clippy wrappers, racewatch's
//! own metadata flags) are cleared: the runtime is never built with them.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const RUNTIME_PACKAGE: &str = "racewatch-runtime";
const RUNTIME_FILE: &str = "libracewatch.so";

/// Inherited variables that would change how (or whether) the nested build
/// compiles the runtime, or confuse it about which package it is building.
/// The jobserver (CARGO_MAKEFLAGS) is kept: the nested cargo shares the outer
/// build's job slots instead of oversubscribing the machine.
const CLEARED_VARS: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "CLIPPY_ARGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
    "RUSTDOC",
    "__CARGO_FIX_PLZ",
];

/// Prefixes of inherited variables cleared for the same reason.
const CLEARED_PREFIXES: &[&str] = &["CARGO_CFG_", "CARGO_FEATURE_", "CARGO_PKG_", "DEP_", "CARGO_BIN_"];

fn main() {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    // Only what the runtime library is built from (not its tests or benches).
    for path in [
        "runtime/src",
        "runtime/Cargo.toml",
        "runtime/build.rs",
        "instrument/src",
        "instrument/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }

    let target = env::var("TARGET").expect("TARGET");
    let host = env::var("HOST").expect("HOST");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let nested_target_dir = nested_target_dir(&out_dir);

    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root)
        .arg("build")
        .arg("--release")
        .arg("--package")
        .arg(RUNTIME_PACKAGE)
        .arg("--lib")
        .arg("--features")
        .arg("preload")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&nested_target_dir);
    if target != host {
        cmd.arg("--target").arg(&target);
    }
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let cleared = CLEARED_VARS.contains(&key)
            || CLEARED_PREFIXES.iter().any(|p| key.starts_with(p))
            || (key.starts_with("CARGO_TARGET_") && key.ends_with("_RUSTFLAGS"));
        if cleared {
            cmd.env_remove(key);
        }
    }

    // The embedded runtime carries no debug info (the standard library's included): `racewatch run`
    // compares the cached file with the embedded bytes on every use, and a report that reads its own
    // module's DWARF pays for it too. 3.5 MB instead of 20; its own frames keep their symbol names.
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "false").env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    // One codegen unit: 12% less machine code (2.01 MB of text -> 1.78), which a process under
    // `mlockall` holds as locked memory of its budget.
    cmd.env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    let output = match cmd.output() {
        Ok(output) => output,
        Err(err) => panic!("racewatch build: cannot run `{}`: {err}", Path::new(&cargo).display()),
    };
    if !output.status.success() {
        // Show the nested cargo's own diagnostics, then fail the outer build.
        eprintln!("{}", String::from_utf8_lossy(&output.stdout));
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        eprintln!("racewatch build: building the runtime ({RUNTIME_PACKAGE}) failed: {}", output.status);
        std::process::exit(1);
    }

    let mut so = nested_target_dir.clone();
    if target != host {
        so.push(&target);
    }
    so.push("release");
    so.push(RUNTIME_FILE);
    let mut bytes =
        std::fs::read(&so).unwrap_or_else(|err| panic!("racewatch build: cannot read {}: {err}", so.display()));
    if let Err(why) = hide_tls_segment(&mut bytes) {
        panic!("racewatch build: {}: {why}", so.display());
    }
    let so = out_dir.join(RUNTIME_FILE);
    std::fs::write(&so, &bytes).unwrap_or_else(|err| panic!("racewatch build: cannot write {}: {err}", so.display()));

    println!("cargo:rustc-env=RACEWATCH_RUNTIME_SO={}", so.display());
    println!("cargo:rustc-env=RACEWATCH_RUNTIME_HASH={:016x}", fnv1a64(&bytes));
}

/// The program header type that `runtime/src/sys/tls.rs` reads its segment from (`PT_RACEWATCH_TLS`).
const PT_RACEWATCH_TLS: u32 = 0x6f72_7774;
const PT_TLS: u32 = 7;
/// The largest segment the runtime's table of thread-local blocks holds (`tls::MAX_BLOCK`).
const MAX_TLS_BLOCK: u64 = 512;

/// Turns the runtime's `PT_TLS` program header into `PT_RACEWATCH_TLS`, which the loader ignores: it then
/// gives the library no static TLS (carved from every thread's stack) and no DTV slot. The library's
/// own `__tls_get_addr` serves its thread-local accesses from blocks of its own (`sys/tls.rs`), which
/// find the segment under either type. Fails for a segment too large for those blocks.
fn hide_tls_segment(elf: &mut [u8]) -> Result<(), String> {
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Err("not a little-endian ELF64 file".into());
    }
    let (phoff, phentsize, phnum) = (u64_at(elf, 32) as usize, u16_at(elf, 54) as usize, u16_at(elf, 56) as usize);
    if phentsize != 56 || phoff + phentsize * phnum > elf.len() {
        return Err("unexpected program headers".into());
    }
    for at in (0..phnum).map(|k| phoff + k * phentsize) {
        let kind = u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes"));
        if kind != PT_TLS && kind != PT_RACEWATCH_TLS {
            continue;
        }
        let (mem_size, align) = (u64_at(elf, at + 40), u64_at(elf, at + 48));
        if mem_size > MAX_TLS_BLOCK || align > 64 {
            return Err(format!(
                "thread-local storage of {mem_size} bytes (alignment {align}) outgrows the runtime's blocks \
                 ({MAX_TLS_BLOCK}, 64): raise tls::MAX_BLOCK"
            ));
        }
        elf[at..at + 4].copy_from_slice(&PT_RACEWATCH_TLS.to_le_bytes());
    }
    Ok(())
}

/// `<outer target dir>/racewatch-runtime` when OUT_DIR has cargo's usual shape
/// (`<target>/<profile>/build/<pkg>-<hash>/out`), so debug and release outer
/// builds share one runtime build; otherwise a directory under OUT_DIR.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    let build_dir = out_dir.parent().and_then(Path::parent);
    match build_dir {
        Some(build) if build.file_name().is_some_and(|n| n == "build") => match build.parent().and_then(Path::parent) {
            Some(target_root) => target_root.join("racewatch-runtime"),
            None => out_dir.join("runtime-target"),
        },
        _ => out_dir.join("runtime-target"),
    }
}

/// 64-bit FNV-1a: names the runtime's cache directory by content.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}
