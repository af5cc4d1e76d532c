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

// ---- The demos (demos/): built once per test binary, run under racewatch ----

/// The header line every race report starts with (DESIGN.md contract).
pub const REPORT_HEADER: &str = "WARNING: racewatch: data race";

/// The exit status of a program that would exit 0 under `racewatch run` (`fail_on_race=1`, its
/// default): 66 when it reported a race, else 0.
pub fn clean_run_status(reported: bool) -> i32 {
    if reported {
        66
    } else {
        0
    }
}

/// Whether `stderr` holds a race report, text or JSON.
pub fn has_report(stderr: &str) -> bool {
    stderr.contains(REPORT_HEADER) || stderr.lines().any(|l| l.starts_with('{') && l.contains(r#""kind":"data_race""#))
}

/// Which half of the demos a program belongs to, from its file name prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemoKind {
    /// `racy_*`: has a data race on the lines marked `racewatch: racy`.
    Racy,
    /// `clean_*`: correctly synchronised.
    Clean,
}

/// One demo program, built.
#[derive(Clone, Debug)]
pub struct Demo {
    /// File stem, e.g. `racy_counter`.
    pub name: String,
    /// `"rust"` (demos/src/bin/*.rs) or `"c"` (demos/c/*.c).
    pub lang: &'static str,
    pub kind: DemoKind,
    /// The built executable.
    pub bin: PathBuf,
    /// The source file, absolute.
    pub source: PathBuf,
    /// The source path relative to demos/, e.g. `src/bin/racy_counter.rs`: report frames end with it.
    pub source_suffix: String,
}

impl Demo {
    /// `rust racy_counter`, for messages.
    pub fn label(&self) -> String {
        format!("{} {}", self.lang, self.name)
    }

    /// 1-based numbers of the source lines carrying a `racewatch: racy` marker.
    pub fn racy_lines(&self) -> Vec<u32> {
        let text = std::fs::read_to_string(&self.source).expect("read demo source");
        text.lines().zip(1..).filter(|(line, _)| line.contains("racewatch: racy")).map(|(_, n)| n).collect()
    }
}

/// The demos workspace.
pub fn demos_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("demos")
}

/// Sources in `dir` named `racy_*` / `clean_*` with extension `ext`, sorted: (stem, kind, path).
fn demo_sources(dir: &Path, ext: &str) -> Vec<(String, DemoKind, PathBuf)> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("read_dir entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == ext))
        .filter_map(|path| {
            let stem = path.file_stem()?.to_str()?.to_string();
            let kind = if stem.starts_with("racy_") {
                DemoKind::Racy
            } else if stem.starts_with("clean_") {
                DemoKind::Clean
            } else {
                return None;
            };
            Some((stem, kind, path))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Environment inherited from the outer `cargo test` (or the user) that would change how the demos
/// build: target dirs, profiles, flags (RUSTFLAGS overrides demos/.cargo/config.toml), wrappers.
fn clear_build_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let cargo_var = (key.starts_with("CARGO_") && key != "CARGO_HOME") || key.starts_with("__CARGO");
        let flags = matches!(
            key,
            "RUSTFLAGS"
                | "RUSTDOCFLAGS"
                | "RUSTC_WRAPPER"
                | "RUSTC_WORKSPACE_WRAPPER"
                | "LD_PRELOAD"
                | "RACEWATCH_OPTIONS"
        );
        if cargo_var || flags {
            cmd.env_remove(key);
        }
    }
}

/// Builds every demo once per test binary: the Rust ones with `cargo build --release` in demos/ (so its
/// .cargo/config.toml flags apply), the C ones with clang-19, `C_FLAGS`, `-O2 -pthread`. C demos are
/// left out (with a SKIP line) when clang-19 is missing.
pub fn demos() -> &'static [Demo] {
    static DEMOS: OnceLock<Vec<Demo>> = OnceLock::new();
    DEMOS.get_or_init(|| {
        let root = demos_dir();
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let mut demos = Vec::new();

        // Shared by the test binaries: cargo's lock on the target dir serialises concurrent builds.
        let target_dir = tmp.join("demos-target");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        clear_build_env(&mut cmd);
        cmd.current_dir(&root).args(["build", "--release", "--bins", "--target-dir"]).arg(&target_dir);
        check(cmd.output().expect("run cargo"), "cargo build --release in demos/");
        for (name, kind, source) in demo_sources(&root.join("src/bin"), "rs") {
            let bin = target_dir.join("release").join(&name);
            assert!(bin.is_file(), "{} was not built", bin.display());
            let source_suffix = format!("src/bin/{name}.rs");
            demos.push(Demo { name, lang: "rust", kind, bin, source, source_suffix });
        }

        if let Some(clang) = clang() {
            // One directory per test binary: never overwrite a program another binary is running.
            let out_dir = tmp.join(format!("c-demos-{}", env!("CARGO_CRATE_NAME")));
            std::fs::create_dir_all(&out_dir).expect("create C demo dir");
            let sources = demo_sources(&root.join("c"), "c");
            let children: Vec<_> = sources
                .iter()
                .map(|(name, _, source)| {
                    let child = Command::new(&clang)
                        .args(C_FLAGS)
                        .args(["-O2", "-pthread"])
                        .arg(source)
                        .arg("-o")
                        .arg(out_dir.join(name))
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .expect("run clang");
                    (name, child)
                })
                .collect();
            for (name, child) in children {
                check(child.wait_with_output().unwrap(), &format!("clang demos/c/{name}.c"));
            }
            for (name, kind, source) in sources {
                let bin = out_dir.join(&name);
                let source_suffix = format!("c/{name}.c");
                demos.push(Demo { name, lang: "c", kind, bin, source, source_suffix });
            }
        }
        demos
    })
}

/// The built demo `name` in language `lang`.
pub fn demo(lang: &str, name: &str) -> &'static Demo {
    demos().iter().find(|d| d.lang == lang && d.name == name).unwrap_or_else(|| panic!("no {lang} demo named {name}"))
}

/// One finished run of a program.
#[derive(Debug)]
pub struct Run {
    pub pid: u32,
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// `racewatch run -o OPT... -- PROGRAM ARGS...`, with no options or preload inherited from the environment.
pub fn run_under(options: &[&str], program: &Path, args: &[&str]) -> Run {
    let mut cmd = racewatch();
    cmd.arg("run");
    for option in options {
        cmd.args(["-o", option]);
    }
    cmd.arg("--").arg(program).args(args);
    cmd.env_remove("RACEWATCH_OPTIONS").env_remove("LD_PRELOAD");
    spawn_and_wait(cmd)
}

/// Runs `cmd` with stdout and stderr captured; `pid` is the child's (racewatch run execs the program, so
/// it is also the program's pid).
pub fn spawn_and_wait(mut cmd: Command) -> Run {
    use std::process::Stdio;
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait");
    Run {
        pid,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The value of `racewatch: stats: <label>: <n>` (printed with `stats=1`).
pub fn stat(stderr: &str, label: &str) -> Option<u64> {
    let prefix = format!("racewatch: stats: {label}: ");
    stderr.lines().find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The `stats=1` block of `stderr` on one line, for failure messages.
pub fn stats_summary(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter_map(|line| line.strip_prefix("racewatch: stats: ")).collect();
    if lines.is_empty() {
        "no stats".to_string()
    } else {
        lines.join(", ")
    }
}

/// Applies `f` to every item, at most `available_parallelism()` at a time; results in input order.
pub fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    results.into_inner().unwrap().into_iter().map(|r| r.expect("worker finished")).collect()
}

/// Calls `attempt` until it returns `Ok(Some(_))` (done), `Err(_)` (a hard failure, returned as is) or
/// `budget` has passed (an error). Returns the value and how many attempts it took.
pub fn retry_for<T>(
    budget: std::time::Duration,
    mut attempt: impl FnMut() -> Result<Option<T>, String>,
) -> Result<(T, usize), String> {
    let start = std::time::Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        if let Some(value) = attempt()? {
            return Ok((value, attempts));
        }
        if start.elapsed() >= budget {
            return Err(format!("nothing after {attempts} runs in {:.1} s", start.elapsed().as_secs_f64()));
        }
    }
}
