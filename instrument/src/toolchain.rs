//! Compiler integration: the flags that make rustc and clang emit racewatch
//! metadata, and checks that the installed toolchain can.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// rustc flags: run LLVM's SanitizerBinaryMetadata pass after all IR
/// optimisation, with frame pointers (cheap stacks) and line tables (reports).
pub const RUST_FLAGS: &[&str] = &[
    "-Cpasses=sanmd-module",
    "-Cllvm-args=-sanitizer-metadata-atomics",
    "-Cllvm-args=-sanitizer-metadata-covered",
    "-Cforce-frame-pointers=yes",
    RUST_DEBUGINFO_FLAG,
];

/// The debug-info flag of [`RUST_FLAGS`]: line tables, the least reports need. `racewatch cargo` gets
/// them through cargo's profiles instead, so a project's richer debug info is kept.
pub const RUST_DEBUGINFO_FLAG: &str = "-Cdebuginfo=line-tables-only";

/// clang (>= 17) flags for C and C++.
pub const C_FLAGS: &[&str] =
    &["-fexperimental-sanitize-metadata=atomics", "-fno-omit-frame-pointer", "-gline-tables-only"];

/// Oldest LLVM whose SanitizerBinaryMetadata pass emits the v2 sections and
/// whose clang accepts `-fexperimental-sanitize-metadata=atomics`.
pub const MIN_LLVM_MAJOR: u32 = 17;

/// How to get a clang that is new enough (Debian 12 / Ubuntu).
pub const CLANG_INSTALL_HINT: &str = "apt-get install clang-19 (or set RACEWATCH_CLANG to a clang >= 17)";

/// How to get a rustc whose LLVM is new enough (Rust 1.73 moved to LLVM 17).
pub const RUSTC_INSTALL_HINT: &str = "install or update Rust with rustup: `rustup update stable` (https://rustup.rs)";

/// A compiler that passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolchainInfo {
    /// The program that was run (`rustc`, `/usr/bin/clang-19`, ...).
    pub program: PathBuf,
    /// The compiler's own version (`1.95.0`, `19.1.7`).
    pub version: String,
    /// LLVM major version behind it.
    pub llvm_major: u32,
    /// rustc only: the host target triple (`x86_64-unknown-linux-gnu`).
    pub host: Option<String>,
}

/// Why a compiler cannot be used to build with racewatch metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolchainError {
    /// The program could not be started.
    NotFound { program: PathBuf, hint: &'static str },
    /// It ran but failed.
    Failed { program: PathBuf, detail: String },
    /// Its version output did not say which LLVM it uses.
    Unrecognized { program: PathBuf, first_line: String, hint: &'static str },
    /// Its LLVM is older than [`MIN_LLVM_MAJOR`].
    TooOld { program: PathBuf, version: String, llvm_major: u32, hint: &'static str },
}

impl fmt::Display for ToolchainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolchainError::NotFound { program, hint } => write!(f, "{} not found: {hint}", program.display()),
            ToolchainError::Failed { program, detail } => write!(f, "{} failed: {detail}", program.display()),
            ToolchainError::Unrecognized { program, first_line, hint } => write!(
                f,
                "{} does not report an LLVM version (\"{first_line}\"); racewatch needs LLVM >= {MIN_LLVM_MAJOR}: {hint}",
                program.display()
            ),
            ToolchainError::TooOld { program, version, llvm_major, hint } => write!(
                f,
                "{} {version} uses LLVM {llvm_major}; racewatch needs LLVM >= {MIN_LLVM_MAJOR}: {hint}",
                program.display()
            ),
        }
    }
}

impl std::error::Error for ToolchainError {}

/// Facts parsed from `rustc -vV`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RustcVersion {
    pub release: String,
    pub host: Option<String>,
    pub llvm_major: Option<u32>,
}

/// Parses `rustc -vV` output (`release: 1.95.0`, `host: ...`, `LLVM version: 22.1.2`).
pub fn parse_rustc_verbose_version(output: &str) -> Option<RustcVersion> {
    let field = |name: &str| {
        output.lines().find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(':'))).map(str::trim)
    };
    let release = field("release")?.to_owned();
    Some(RustcVersion {
        release,
        host: field("host").map(str::to_owned),
        llvm_major: field("LLVM version").and_then(leading_number),
    })
}

/// Parses `clang --version` output: `(Vendor )clang version 19.1.7 (...)`.
/// Returns the full version and its major number.
pub fn parse_clang_version(output: &str) -> Option<(String, u32)> {
    output.lines().find_map(|line| {
        let (_, rest) = line.split_once("clang version ")?;
        let version = rest.split_whitespace().next()?;
        Some((version.to_owned(), leading_number(version)?))
    })
}

/// `22` from `22.1.2`, `19` from `19-init`.
fn leading_number(text: &str) -> Option<u32> {
    let digits: &str = &text[..text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len())];
    digits.parse().ok()
}

/// Runs `program args` and returns its stdout.
fn version_output(program: &Path, args: &[&str], hint: &'static str) -> Result<String, ToolchainError> {
    let output = Command::new(program).args(args).output().map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => ToolchainError::NotFound { program: program.to_owned(), hint },
        _ => ToolchainError::Failed { program: program.to_owned(), detail: err.to_string() },
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let detail = format!("{} {}", output.status, stderr.lines().next().unwrap_or("").trim());
        return Err(ToolchainError::Failed { program: program.to_owned(), detail });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The rustc cargo would use: `$RUSTC`, else `rustc`.
pub fn rustc_program() -> PathBuf {
    std::env::var_os("RUSTC").filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from("rustc"), PathBuf::from)
}

/// Checks that [`rustc_program`] runs LLVM >= [`MIN_LLVM_MAJOR`].
pub fn check_rustc() -> Result<ToolchainInfo, ToolchainError> {
    check_rustc_at(&rustc_program())
}

/// Checks the rustc that `cargo +TOOLCHAIN` would use: rustup's proxy given `+TOOLCHAIN` (unless
/// `RUSTC` names a compiler).
pub fn check_rustc_for(toolchain: Option<&str>) -> Result<ToolchainInfo, ToolchainError> {
    match toolchain {
        Some(name) if std::env::var_os("RUSTC").is_none_or(|v| v.is_empty()) => {
            check_rustc_with(Path::new("rustc"), &[&format!("+{name}"), "-vV"])
        }
        _ => check_rustc(),
    }
}

/// Checks a specific rustc.
pub fn check_rustc_at(program: &Path) -> Result<ToolchainInfo, ToolchainError> {
    check_rustc_with(program, &["-vV"])
}

fn check_rustc_with(program: &Path, args: &[&str]) -> Result<ToolchainInfo, ToolchainError> {
    let text = version_output(program, args, RUSTC_INSTALL_HINT)?;
    let first_line = || text.lines().next().unwrap_or("").to_owned();
    let parsed = parse_rustc_verbose_version(&text).ok_or_else(|| ToolchainError::Unrecognized {
        program: program.to_owned(),
        first_line: first_line(),
        hint: RUSTC_INSTALL_HINT,
    })?;
    let Some(llvm_major) = parsed.llvm_major else {
        return Err(ToolchainError::Unrecognized {
            program: program.to_owned(),
            first_line: first_line(),
            hint: RUSTC_INSTALL_HINT,
        });
    };
    at_least(ToolchainInfo { program: program.to_owned(), version: parsed.release, llvm_major, host: parsed.host })
}

/// Checks that the clang at `program` is version >= [`MIN_LLVM_MAJOR`].
pub fn check_clang(program: &Path) -> Result<ToolchainInfo, ToolchainError> {
    let text = version_output(program, &["--version"], CLANG_INSTALL_HINT)?;
    let (version, llvm_major) = parse_clang_version(&text).ok_or_else(|| ToolchainError::Unrecognized {
        program: program.to_owned(),
        first_line: text.lines().next().unwrap_or("").to_owned(),
        hint: CLANG_INSTALL_HINT,
    })?;
    at_least(ToolchainInfo { program: program.to_owned(), version, llvm_major, host: None })
}

/// Finds a usable clang: `$RACEWATCH_CLANG` when set, else the first of
/// `clang-19`, `clang`, `clang-22` … `clang-17` that is new enough. The error
/// is the most informative failure (an old clang beats "not found").
pub fn find_clang() -> Result<ToolchainInfo, ToolchainError> {
    if let Some(path) = std::env::var_os("RACEWATCH_CLANG").filter(|v| !v.is_empty()) {
        return check_clang(Path::new(&path));
    }
    let mut best_error = None;
    for name in ["clang-19", "clang", "clang-22", "clang-21", "clang-20", "clang-18", "clang-17"] {
        match check_clang(Path::new(name)) {
            Ok(info) => return Ok(info),
            Err(err @ ToolchainError::NotFound { .. }) => {
                best_error.get_or_insert(err);
            }
            Err(err) => best_error = Some(err),
        }
    }
    Err(best_error.expect("candidate list is not empty"))
}

fn at_least(info: ToolchainInfo) -> Result<ToolchainInfo, ToolchainError> {
    if info.llvm_major >= MIN_LLVM_MAJOR {
        return Ok(info);
    }
    let hint = if info.host.is_some() { RUSTC_INSTALL_HINT } else { CLANG_INSTALL_HINT };
    Err(ToolchainError::TooOld { program: info.program, version: info.version, llvm_major: info.llvm_major, hint })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUSTC_STABLE: &str = "rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\n\
        commit-hash: 59807616e1fa2540724bfbac14d7976d7e4a3860\ncommit-date: 2026-04-14\n\
        host: x86_64-unknown-linux-gnu\nrelease: 1.95.0\nLLVM version: 22.1.2\n";
    const RUSTC_OLD: &str = "rustc 1.72.1 (d5c2e9c34 2023-09-13)\nbinary: rustc\n\
        commit-hash: d5c2e9c342b358556da91d61ed4133f6f50fc0c3\ncommit-date: 2023-09-13\n\
        host: x86_64-unknown-linux-gnu\nrelease: 1.72.1\nLLVM version: 16.0.5\n";
    const RUSTC_NO_LLVM: &str =
        "rustc 1.80.0-dev\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\nrelease: 1.80.0-dev\n";

    #[test]
    fn rustc_llvm_version_is_parsed() {
        let v = parse_rustc_verbose_version(RUSTC_STABLE).unwrap();
        assert_eq!(v.release, "1.95.0");
        assert_eq!(v.host.as_deref(), Some("x86_64-unknown-linux-gnu"));
        assert_eq!(v.llvm_major, Some(22));
        assert_eq!(parse_rustc_verbose_version(RUSTC_OLD).unwrap().llvm_major, Some(16));
        assert_eq!(parse_rustc_verbose_version(RUSTC_NO_LLVM).unwrap().llvm_major, None);
        assert_eq!(parse_rustc_verbose_version("garbage\n"), None);
        assert_eq!(parse_rustc_verbose_version(""), None);
    }

    #[test]
    fn clang_versions_of_several_vendors_are_parsed() {
        let debian = "Debian clang version 19.1.7 (3+b1)\nTarget: x86_64-pc-linux-gnu\nThread model: posix\n\
            InstalledDir: /usr/lib/llvm-19/bin\n";
        assert_eq!(parse_clang_version(debian), Some(("19.1.7".into(), 19)));
        let ubuntu = "Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64-pc-linux-gnu\n";
        assert_eq!(parse_clang_version(ubuntu), Some(("18.1.3".into(), 18)));
        let upstream = "clang version 17.0.6 (https://github.com/llvm/llvm-project 6009708b4367)\n";
        assert_eq!(parse_clang_version(upstream), Some(("17.0.6".into(), 17)));
        let old = "Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n";
        assert_eq!(parse_clang_version(old), Some(("14.0.6".into(), 14)));
        assert_eq!(parse_clang_version("gcc (Debian 12.2.0-14) 12.2.0\n"), None);
        assert_eq!(parse_clang_version("clang version \n"), None);
    }

    #[test]
    fn old_and_missing_compilers_say_how_to_fix_it() {
        let old =
            at_least(ToolchainInfo { program: "clang".into(), version: "14.0.6".into(), llvm_major: 14, host: None })
                .unwrap_err();
        let msg = old.to_string();
        assert!(msg.contains("LLVM 14") && msg.contains(">= 17") && msg.contains("apt-get install clang-19"), "{msg}");
        let missing = check_clang(Path::new("/nonexistent/clang-19")).unwrap_err();
        assert!(matches!(missing, ToolchainError::NotFound { .. }));
        assert!(missing.to_string().contains("apt-get install clang-19"));
        let old_rustc = at_least(ToolchainInfo {
            program: "rustc".into(),
            version: "1.72.1".into(),
            llvm_major: 16,
            host: Some("x86_64-unknown-linux-gnu".into()),
        })
        .unwrap_err();
        assert!(old_rustc.to_string().contains("rustup update stable"));
    }

    #[test]
    fn the_installed_rustc_passes() {
        let info = check_rustc().expect("the rustc running these tests is new enough");
        assert!(info.llvm_major >= MIN_LLVM_MAJOR);
        assert!(info.host.is_some());
    }
}
