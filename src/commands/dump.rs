//! `racewatch dump [--format text|json] FILE`: every PC-keyed table of an ELF
//! file, decoded, at link-time addresses.
//!
//! Exit status: 0 when everything decoded, 1 when a table is malformed (what
//! decoded is still printed, the error goes to stderr), 2 when the file
//! cannot be read as ELF.

use super::Format;
use racewatch_instrument::coverage::features_label;
use racewatch_instrument::elf::Module;
use racewatch_instrument::format::stackmap::{LocationKind, StackMap};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the output to FILE instead of stdout.
    #[arg(long = "output", short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// The ELF executable or shared library.
    file: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    let module = match super::open_module(&args.file, "racewatch") {
        Ok(module) => module,
        Err(status) => return status,
    };
    let out = match args.format {
        Format::Text => text(&module),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&to_json(&module)).expect("JSON value prints");
            s.push('\n');
            s
        }
    };
    if let Err(status) = super::emit(&out, args.output.as_deref()) {
        return status;
    }
    let mut failed = false;
    for e in module.decode_errors() {
        eprintln!("racewatch: {}: {e}", args.file.display());
        failed = true;
    }
    if let Some(Err(e)) = &module.stackmap {
        eprintln!("racewatch: {}: {e}", args.file.display());
        failed = true;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `name+0x12`, or the bare address when no function contains it.
fn symbolize(module: &Module, addr: u64) -> Option<String> {
    let f = module.function_containing(addr)?;
    Some(if addr == f.address { f.name.clone() } else { format!("{}+{:#x}", f.name, addr - f.address) })
}

fn to_json(module: &Module) -> Value {
    let tables: Vec<Value> = module
        .tables
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "kind": t.id.kind.name(),
                "version": t.id.version.raw(),
                "address": t.address,
                "size": t.size,
                "entries": t.entries,
                "error": t.error.as_ref().map(|e| e.to_string()),
            })
        })
        .collect();
    let covered: Vec<Value> = module
        .covered
        .iter()
        .map(|e| {
            let mut v = json!({ "address": e.pc, "size": e.size, "features": e.features });
            if let Some(n) = e.stack_args_size {
                v["stack_args_size"] = json!(n);
            }
            if let Some(f) = module.function_containing(e.pc) {
                v["function"] = json!(f.name);
            }
            v
        })
        .collect();
    let mut out = json!({
        "path": module.path.to_string_lossy(),
        "tables": tables,
        "covered": covered,
        "atomics": module.atomics,
    });
    match &module.stackmap {
        Some(Ok(map)) => out["stackmap"] = stackmap_json(map),
        Some(Err(e)) => out["stackmap"] = json!({ "error": e.to_string() }),
        None => {}
    }
    out
}

fn location_kind(kind: LocationKind) -> &'static str {
    match kind {
        LocationKind::Register => "register",
        LocationKind::Direct => "direct",
        LocationKind::Indirect => "indirect",
        LocationKind::Constant => "constant",
        LocationKind::ConstantIndex => "constant_index",
    }
}

fn stackmap_json(map: &StackMap) -> Value {
    let functions: Vec<Value> = map
        .functions
        .iter()
        .map(|f| json!({ "address": f.address, "stack_size": f.stack_size, "record_count": f.record_count }))
        .collect();
    let records: Vec<Value> = map
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let locations: Vec<Value> = r
                .locations
                .iter()
                .map(|l| {
                    json!({
                        "kind": location_kind(l.kind),
                        "size": l.size,
                        "dwarf_reg": l.dwarf_reg,
                        "offset": l.offset,
                        "constant": l.constant,
                    })
                })
                .collect();
            let live_outs: Vec<Value> =
                r.live_outs.iter().map(|l| json!({ "dwarf_reg": l.dwarf_reg, "size": l.size })).collect();
            json!({
                "id": r.id,
                "pc": map.record_pc(i),
                "instruction_offset": r.instruction_offset,
                "function_index": r.function_index,
                "locations": locations,
                "live_outs": live_outs,
            })
        })
        .collect();
    json!({
        "version": map.version,
        "functions": functions,
        "constants": map.constants,
        "records": records,
    })
}

fn text(module: &Module) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", module.path.display());
    if module.tables.is_empty() {
        out.push_str("  no PC sections (sanmd_covered*, sanmd_atomics*)\n");
    }
    for t in &module.tables {
        let _ = write!(out, "  {:<20} {:#x} size={} entries={}", t.name, t.address, t.size, t.entries);
        if let Some(e) = &t.error {
            let _ = write!(out, "  ERROR: {e}");
        }
        if let Some(note) = &t.note {
            let _ = write!(out, "  NOTE: {note}");
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\ncovered functions ({}):", module.covered.len());
    for e in &module.covered {
        let name = symbolize(module, e.pc).unwrap_or_else(|| "<unknown>".to_string());
        let _ = write!(out, "  {:#x} {name} size={} features={}", e.pc, e.size, features_label(e.features));
        if let Some(n) = e.stack_args_size {
            let _ = write!(out, " stack_args_size={n}");
        }
        out.push('\n');
    }
    let _ = writeln!(out, "\natomic PCs ({}):", module.atomics.len());
    for &pc in &module.atomics {
        let name = symbolize(module, pc).unwrap_or_else(|| "<unknown>".to_string());
        let _ = writeln!(out, "  {pc:#x} {name}");
    }
    match &module.stackmap {
        Some(Ok(map)) => stackmap_text(&mut out, module, map),
        Some(Err(e)) => {
            let _ = writeln!(out, "\nstack map: ERROR: {e}");
        }
        None => {}
    }
    out
}

fn stackmap_text(out: &mut String, module: &Module, map: &StackMap) {
    let _ = writeln!(
        out,
        "\nstack map (version {}): {} functions, {} constants, {} records",
        map.version,
        map.functions.len(),
        map.constants.len(),
        map.records.len()
    );
    for f in &map.functions {
        let name = symbolize(module, f.address).unwrap_or_else(|| "<unknown>".to_string());
        let _ = writeln!(out, "  function {:#x} {name} stack_size={}", f.address, f.stack_size);
    }
    for (i, r) in map.records.iter().enumerate() {
        let pc = map.record_pc(i).map_or_else(|| format!("+{:#x}", r.instruction_offset), |pc| format!("{pc:#x}"));
        let _ = writeln!(
            out,
            "  record id={} pc={pc} locations={} live_outs={}",
            r.id,
            r.locations.len(),
            r.live_outs.len()
        );
        for l in &r.locations {
            let _ =
                write!(out, "    {} size={} reg={} offset={}", location_kind(l.kind), l.size, l.dwarf_reg, l.offset);
            if let Some(c) = l.constant {
                let _ = write!(out, " value={c}");
            }
            out.push('\n');
        }
        for l in &r.live_outs {
            let _ = writeln!(out, "    live-out reg={} size={}", l.dwarf_reg, l.size);
        }
    }
}
