//! `racewatch flags --rust|--c`: the compiler flags that emit racewatch
//! metadata, on one line, ready for RUSTFLAGS or CFLAGS/CXXFLAGS. The matching
//! compiler is checked and any problem is reported on stderr; the flags are
//! printed regardless, since they may be meant for another machine.

use racewatch_instrument::toolchain::{self, C_FLAGS, RUST_FLAGS};
use std::process::ExitCode;

#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct Args {
    /// Flags for rustc (RUSTFLAGS).
    #[arg(long)]
    rust: bool,
    /// Flags for clang >= 17 (CFLAGS, CXXFLAGS).
    #[arg(long = "c")]
    c: bool,
}

pub fn run(args: Args) -> ExitCode {
    let (flags, check) = if args.rust {
        (RUST_FLAGS, toolchain::check_rustc().map(drop))
    } else {
        debug_assert!(args.c);
        (C_FLAGS, toolchain::find_clang().map(drop))
    };
    if let Err(err) = check {
        eprintln!("racewatch: warning: {err}");
    }
    println!("{}", flags.join(" "));
    ExitCode::SUCCESS
}
