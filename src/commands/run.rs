use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("racewatch: not implemented yet");
    ExitCode::FAILURE
}

pub fn print_runtime_path() -> ExitCode {
    ExitCode::FAILURE
}
