//! Binds the library's calls to its own functions locally (`-Bsymbolic-functions`), and links the unwinder that Rust's standard library calls (`_Unwind_*`) into the preloaded
//! library itself, from the C compiler's `libgcc_eh.a`, so that `libracewatch.so` does not need
//! `libgcc_s.so.1`: a C program that does not load it itself would otherwise find one more
//! module in `dl_iterate_phdr`, `/proc/self/maps` and `dlopen(…, RTLD_NOLOAD)` (guarantees.md).
//! Only for the preloaded build (feature `preload`); the rlib in tests keeps the toolchain's
//! default. Where the compiler has no `libgcc_eh.a` the library falls back to `libgcc_s.so.1`.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    if env::var_os("CARGO_FEATURE_PRELOAD").is_none() {
        return;
    }
    // racewatch's own calls to a function it interposes (its `signal` calling its `sigaction`) bind to
    // its own definition at link time: an executable that exports the same name (a libjsig-style
    // wrapper, linked with -rdynamic) would otherwise see racewatch's calls as foreign ones.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu")
    {
        return;
    }
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let Ok(out) = Command::new(&cc).arg("-print-file-name=libgcc_eh.a").output() else {
        println!("cargo:warning=racewatch runtime: `{cc}` not found; libracewatch.so will need libgcc_s.so.1");
        return;
    };
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let archive = Path::new(&printed);
    // A compiler that does not know the file prints its bare name back.
    let Some(dir) = archive.parent().filter(|d| out.status.success() && archive.is_file() && !d.as_os_str().is_empty())
    else {
        println!("cargo:warning=racewatch runtime: no libgcc_eh.a; libracewatch.so will need libgcc_s.so.1");
        return;
    };
    println!("cargo:rustc-link-search=native={}", dir.display());
    // Whole archive: the standard library's references come later on the link line than this
    // crate's own libraries, so only a whole archive defines them before `-lgcc_s` is reached;
    // `--as-needed` then drops libgcc_s. The cdylib's version script keeps these symbols local.
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
}
