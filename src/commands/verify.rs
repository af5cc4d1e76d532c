//! `racewatch verify FILE`: check the PC tables against the machine code.
//!
//! Exit status: 0 when the tables agree with the code, 1 with findings, 2 when
//! the file cannot be read as an x86-64 ELF file.

use super::Format;
use racewatch_instrument::verify::{self, Report};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also list tagged non-memory instructions accepted as compiler output
    /// (fences, the tail of a lowered atomic).
    #[arg(long, short)]
    verbose: bool,
    /// Write the output to FILE instead of stdout.
    #[arg(long = "output", short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// The executable or shared library to check.
    file: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    let module = match super::open_module(&args.file, "racewatch verify") {
        Ok(module) => module,
        Err(status) => return status,
    };
    let report = verify::verify(&module);
    if module.tables.is_empty() {
        eprintln!(
            "racewatch verify: {}: note: no sanmd_* tables (built without the metadata flags? see `racewatch flags`)",
            args.file.display()
        );
    }
    let out = match args.format {
        Format::Text => text(&args.file.display().to_string(), &report, args.verbose),
        Format::Json => {
            let mut value = serde_json::to_value(&report).expect("report serializes");
            value["file"] = args.file.display().to_string().into();
            value["passed"] = report.passed().into();
            format!("{value}\n")
        }
    };
    if let Err(status) = super::emit(&out, args.output.as_deref()) {
        return status;
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The human report: one summary line, or the findings then `FAIL`.
fn text(file: &str, report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    if verbose {
        for e in &report.explained {
            let why = match e.why {
                verify::Explanation::Fence => "fence".to_string(),
                verify::Explanation::LoweringOf { atomic } => format!("lowering of the atomic at {atomic:#x}"),
                verify::Explanation::FenceLabel { atomic } => {
                    format!("label of a compiler-only fence after the atomic at {atomic:#x}")
                }
            };
            out +=
                &format!("racewatch verify: {file}: note: {:#x} in {}: {} ({why})\n", e.pc, e.function, e.disassembly);
        }
    }
    for r in &report.rule_atomics {
        out += &format!(
            "racewatch verify: {file}: note: {:#x} in {}: untagged {} in inline-assembly atomic code ({}): \
             treated as atomic by rule\n",
            r.pc, r.function, r.disassembly, r.file
        );
    }
    for u in &report.untagged_locked {
        out += &format!(
            "racewatch verify: {file}: note: {:#x} in {}: untagged {}, {}: atomic by its encoding at run time\n",
            u.pc, u.function, u.disassembly, u.why
        );
    }
    for l in &report.lost_atomics {
        out += &format!(
            "racewatch verify: {file}: note: {:#x} in {}: untagged {} in core::sync::atomic ({}): an atomic whose \
             metadata an optimisation lost; judged atomic from the debug info\n",
            l.pc, l.function, l.disassembly, l.location
        );
    }
    if !report.lost_atomics.is_empty() {
        let n = report.lost_atomics.len();
        out += &format!(
            "racewatch verify: {file}: note: {n} untagged plain {} in core::sync::atomic (metadata lost by an \
             optimisation)\n",
            if n == 1 { "access" } else { "accesses" }
        );
    }
    let summary = format!("{} atomic PCs checked in {} covered functions", report.atomic_pcs, report.covered_functions);
    if report.passed() {
        out += &format!("racewatch verify: {file}: {summary}: ok\n");
    } else {
        for finding in &report.findings {
            out += &format!("racewatch verify: {file}: {finding}\n");
        }
        out += &format!("racewatch verify: {file}: {summary}: {} findings: FAIL\n", report.findings.len());
    }
    out
}
