//! `racewatch coverage [--format text|json|html] FILE…`: which functions the
//! metadata pass analysed, with their features and atomic PCs.
//!
//! Exit status: 0 when every file was read cleanly, 1 when a table is
//! malformed (reported, rows use what decoded), 2 when a file cannot be read.

use racewatch_instrument::coverage::{html, json, text, ModuleCoverage};
use racewatch_instrument::elf::Module;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
    Html,
}

#[derive(clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the output to FILE instead of stdout.
    #[arg(long = "output", short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// ELF executables or shared libraries.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(args: Args) -> ExitCode {
    let mut status = 0;
    let mut modules = Vec::new();
    for path in &args.files {
        match Module::open(path) {
            Ok(m) => {
                for e in m.decode_errors() {
                    eprintln!("racewatch: {}: {e}", path.display());
                    status = status.max(1);
                }
                modules.push(ModuleCoverage::new(&m));
            }
            Err(e) => {
                eprintln!("racewatch: {e}");
                status = 2;
            }
        }
    }
    if !modules.is_empty() {
        let out = match args.format {
            Format::Text => text::render(&modules),
            Format::Json => json::render(&modules),
            Format::Html => html::render(&modules),
        };
        if let Err(failed) = super::emit(&out, args.output.as_deref()) {
            return failed;
        }
    }
    ExitCode::from(status)
}
