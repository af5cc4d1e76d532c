//! The thin FFI layer: every `unsafe` block of the runtime lives below here,
//! each behind a safe wrapper with a `// SAFETY:` comment.

pub mod fd;
pub mod process;
pub mod snapshot;
