//! The thin FFI layer: every `unsafe` block of the runtime lives below here,
//! each behind a safe wrapper with a `// SAFETY:` comment.

pub mod alloc;
pub mod budget;
pub mod bystander;
pub mod cancel;
pub mod code;
pub mod confined;
pub mod cputime;
pub mod creation;
pub mod dl;
pub mod environ;
pub mod exec_list;
pub mod fatal;
pub mod fd;
pub mod fork;
pub mod hand_on;
pub mod handlers;
pub mod heap;
pub mod hugepage;
pub mod identity;
pub mod jump;
pub mod mem;
pub mod memfile;
pub mod own_imports;
pub mod perf;
pub mod prefault;
pub mod process;
pub mod ptr;
pub mod raw;
pub mod real;
pub mod region;
pub mod seccomp_probe;
pub mod secure_file;
pub mod setxid;
pub mod signal;
pub mod snapshot;
pub mod stacks;
pub mod thread;
pub mod thread_end;
pub mod tls;
pub mod tracer;
pub mod trap_wait;
pub mod unwind_info;
pub mod wake;
pub mod xsave;

/// Capacity of the table of program threads the runtime knows ([`thread`]); the per-thread tables
/// of [`stacks`] have one entry per slot of it.
pub const KNOWN_THREADS: usize = 4096;
