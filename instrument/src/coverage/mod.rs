//! The per-function coverage report: which functions of a file were analysed
//! by the metadata pass, with which features, and how many atomic PCs each
//! holds. [`ModuleCoverage::new`] computes the model (pure data) from an
//! [`elf::Module`]; [`text`], [`json`] and [`html`] render it.

pub mod html;
pub mod json;
pub mod lcov;
pub mod profile;
pub mod report;
pub mod text;

use crate::elf;
use crate::format::pcsections::{FEATURE_ATOMICS, FEATURE_UAR, FEATURE_UAR_HAS_SIZE};
use crate::symbols::SourceLocation;
use serde::Serialize;

/// Name of a row for a covered function the symbol table does not know.
pub const UNKNOWN: &str = "<unknown>";

/// One function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FunctionRow {
    /// Demangled name, or [`UNKNOWN`].
    pub name: String,
    /// The symbol as written in the file; absent for [`UNKNOWN`] rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_name: Option<String>,
    pub address: u64,
    /// Bytes: the symbol's size, or the covered entry's when the symbol has none.
    pub size: u64,
    pub covered: bool,
    /// `FEATURE_*` bits of the covered entry (0 when not covered).
    pub features: u64,
    /// Names of the feature bits, e.g. `["atomics", "uar"]`.
    pub feature_names: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_args_size: Option<u64>,
    /// Tagged atomic PCs inside `[address, address + size)`.
    pub atomics: usize,
    /// Source position of the first instruction, from DWARF.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
}

/// Totals for one file.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub functions: usize,
    pub covered_functions: usize,
    /// Sum of the sizes of all rows.
    pub text_bytes: u64,
    /// Sum of the sizes of covered rows.
    pub covered_text_bytes: u64,
    /// `covered_text_bytes / text_bytes` in percent (0 for an empty file).
    pub covered_text_percent: f64,
    /// Atomic PCs in the file (inside functions or not).
    pub atomics: usize,
}

/// The report for one file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModuleCoverage {
    /// The file, as given (lossy UTF-8).
    pub path: String,
    /// Sorted by address.
    pub functions: Vec<FunctionRow>,
    pub summary: Summary,
    /// Tables that failed to decode (one line each); the rows use what decoded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The names of the set feature bits.
pub fn feature_names(features: u64) -> Vec<&'static str> {
    let mut names = Vec::new();
    if features & FEATURE_ATOMICS != 0 {
        names.push("atomics");
    }
    if features & FEATURE_UAR != 0 {
        names.push("uar");
    }
    if features & FEATURE_UAR_HAS_SIZE != 0 {
        names.push("stack-args");
    }
    let known = FEATURE_ATOMICS | FEATURE_UAR | FEATURE_UAR_HAS_SIZE;
    if features & !known != 0 {
        names.push("unknown");
    }
    names
}

/// Feature names joined with `,`; `-` for none.
pub fn features_label(features: u64) -> String {
    let names = feature_names(features);
    if names.is_empty() {
        "-".to_string()
    } else {
        names.join(",")
    }
}

/// Number of sorted `pcs` in `[start, start + size)`.
fn count_in(pcs: &[u64], start: u64, size: u64) -> usize {
    let end = start.saturating_add(size.max(1));
    pcs.partition_point(|&pc| pc < end) - pcs.partition_point(|&pc| pc < start)
}

impl ModuleCoverage {
    /// One row per function of the symbol table, plus one [`UNKNOWN`] row per
    /// covered entry that starts at no symbol.
    pub fn new(module: &elf::Module) -> ModuleCoverage {
        let sources = module.source_map();
        let locate = |addr| sources.as_ref().and_then(|s| s.location(addr));
        let covered_at = |addr: u64| {
            let i = module.covered.partition_point(|e| e.pc < addr);
            module.covered.get(i).filter(|e| e.pc == addr)
        };
        let mut rows: Vec<FunctionRow> = module
            .functions
            .iter()
            .map(|f| {
                let entry = covered_at(f.address);
                let size = if f.size == 0 { entry.map_or(0, |e| e.size) } else { f.size };
                let features = entry.map_or(0, |e| e.features);
                FunctionRow {
                    name: f.name.clone(),
                    raw_name: Some(f.raw_name.clone()),
                    address: f.address,
                    size,
                    covered: entry.is_some(),
                    features,
                    feature_names: feature_names(features),
                    stack_args_size: entry.and_then(|e| e.stack_args_size),
                    atomics: count_in(&module.atomics, f.address, size),
                    source: locate(f.address),
                }
            })
            .collect();
        for e in &module.covered {
            if module.functions.binary_search_by_key(&e.pc, |f| f.address).is_err() {
                rows.push(FunctionRow {
                    name: UNKNOWN.to_string(),
                    raw_name: None,
                    address: e.pc,
                    size: e.size,
                    covered: true,
                    features: e.features,
                    feature_names: feature_names(e.features),
                    stack_args_size: e.stack_args_size,
                    atomics: count_in(&module.atomics, e.pc, e.size),
                    source: locate(e.pc),
                });
            }
        }
        rows.sort_by_key(|r| r.address);
        rows.dedup_by_key(|r| r.address);
        // A test binary's `main` is the harness rustc generates, placed at line 1 of the crate root
        // (`lib.rs:1`, `tests/x.rs:1`): not a function the user wrote.
        if module.functions.iter().any(|f| f.name == "test::test_main_static") {
            rows.retain(|r| !(r.name.ends_with("::main") && r.source.as_ref().is_some_and(|s| s.line == 1)));
        }
        let summary = Summary::of(&rows, module.atomics.len());
        ModuleCoverage {
            path: module.path.to_string_lossy().into_owned(),
            functions: rows,
            summary,
            errors: module.decode_errors().map(|e| e.to_string()).collect(),
        }
    }
}

impl Summary {
    fn of(rows: &[FunctionRow], atomics: usize) -> Summary {
        let text_bytes: u64 = rows.iter().map(|r| r.size).sum();
        let covered_text_bytes: u64 = rows.iter().filter(|r| r.covered).map(|r| r.size).sum();
        Summary {
            functions: rows.len(),
            covered_functions: rows.iter().filter(|r| r.covered).count(),
            text_bytes,
            covered_text_bytes,
            covered_text_percent: if text_bytes == 0 {
                0.0
            } else {
                (covered_text_bytes as f64 * 1000.0 / text_bytes as f64).round() / 10.0
            },
            atomics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_pcs_in_half_open_ranges() {
        let pcs = [0x10, 0x14, 0x20, 0x2f, 0x30];
        assert_eq!(count_in(&pcs, 0x10, 0x20), 4);
        assert_eq!(count_in(&pcs, 0x30, 0), 1);
        assert_eq!(count_in(&pcs, 0x31, 4), 0);
        assert_eq!(count_in(&pcs, u64::MAX - 1, 8), 0);
    }

    #[test]
    fn names_features() {
        assert_eq!(features_label(0), "-");
        assert_eq!(features_label(1), "atomics");
        assert_eq!(features_label(7), "atomics,uar,stack-args");
        assert_eq!(feature_names(1 << 9), ["unknown"]);
    }
}
