//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod cargo;
pub mod coverage;
pub mod demo;
pub mod dump;
pub mod flags;
pub mod run;
pub mod verify;
