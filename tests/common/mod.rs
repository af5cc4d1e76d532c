//! Helpers shared by the end-to-end tests: build real programs with real
//! compilers, find the racewatch binary and its runtime.
#![allow(dead_code)]

use racewatch_instrument::toolchain::{C_FLAGS, RUST_FLAGS};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The racewatch CLI built for this test run.
pub fn racewatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_racewatch"))
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// clang-19 (or `$RACEWATCH_CLANG`), or `None` with a visible skip message.
pub fn clang() -> Option<PathBuf> {
    static CLANG: OnceLock<Option<PathBuf>> = OnceLock::new();
    CLANG
        .get_or_init(|| {
            let candidate = std::env::var_os("RACEWATCH_CLANG").map(PathBuf::from).unwrap_or_else(|| "clang-19".into());
            match Command::new(&candidate).arg("--version").output() {
                Ok(out) if out.status.success() => Some(candidate),
                _ => {
                    eprintln!("SKIP: {} not found (apt-get install clang-19); C tests skipped", candidate.display());
                    None
                }
            }
        })
        .clone()
}

/// Panics with the compiler's output when it failed.
pub fn check(output: Output, what: &str) -> Output {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Compiles C source `src` to `dir/name` with the metadata flags plus `extra`.
pub fn build_c(clang: &Path, dir: &Path, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    let src_path = dir.join(format!("{name}.c"));
    std::fs::write(&src_path, src).expect("write C source");
    let out = dir.join(name);
    check(
        Command::new(clang).args(C_FLAGS).arg("-O2").args(extra).arg(&src_path).arg("-o").arg(&out).output().unwrap(),
        "clang",
    );
    out
}

/// Compiles Rust source `src` to `dir/name` with rustc and the LLVM pass.
pub fn build_rust(dir: &Path, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    let src_path = dir.join(format!("{name}.rs"));
    std::fs::write(&src_path, src).expect("write Rust source");
    let out = dir.join(name);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    check(
        Command::new(rustc)
            .args(RUST_FLAGS)
            .args(["--edition", "2021", "-O"])
            .args(extra)
            .arg(&src_path)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap(),
        "rustc",
    );
    out
}
