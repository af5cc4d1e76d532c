use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("racewatch: not implemented yet");
    ExitCode::FAILURE
}
