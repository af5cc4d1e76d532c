use std::process::ExitCode;

/// `racewatch` with no arguments: build the demos and catch a race.
pub fn run() -> ExitCode {
    eprintln!("racewatch: demo not implemented yet");
    ExitCode::FAILURE
}
