//! libracewatch.so: the preloaded runtime of the racewatch race detector.
//!
//! Start-up: [`api`] (constructor and the exported `__sanitizer_metadata_*`
//! callbacks) → [`options`] → [`modules`] walk → [`registry`] → [`index`].
//! Host contract: [`intercept`] (interposed libc functions) → [`detector`]
//! (started at the second thread, off in sandboxes, reset in forked children);
//! [`exit_status`] (interposed `__libc_start_main` and `exit`: the status of a
//! process that reported races).
//! Run time: [`sampler`] → [`decode`] → [`watch`] → [`judge`] → [`queue`] →
//! [`reporter`] ([`symbolize`], [`report`]). All `unsafe` FFI lives in [`sys`].

pub mod aim;
pub mod api;
pub mod bias;
pub mod decode;
pub mod detector;
pub mod event;
pub mod exit_status;
pub mod fd_view;
pub mod fixed;
pub mod handover;
pub mod index;
pub mod intercept;
pub mod jit;
pub mod judge;
pub mod libcalls;
pub mod log;
pub mod longjmp;
pub mod modules;
pub mod options;
pub mod own_file;
pub mod parent_view;
pub mod proc_view;
pub mod profile;
pub mod queue;
pub mod races_file;
pub mod registry;
pub mod report;
pub mod reporter;
pub mod sampler;
pub mod sandbox_scan;
pub mod seccomp_filter;
pub mod sharing;
#[cfg(test)]
mod source_checks;
pub mod spawn_point;
pub mod stack;
pub mod stats;
pub mod suppressed_pcs;
pub mod suppressions;
pub mod symbolize;
pub mod sys;
pub mod unwind;
pub mod view_fds;
pub mod watch;

/// A failed allocation waits for memory instead of aborting the host ([`sys::alloc`]). Only in the
/// preloaded library: the rlib leaves the allocator to the binary that links it (a test counting
/// allocations brings its own).
#[cfg(feature = "preload")]
#[global_allocator]
static ALLOCATOR: sys::alloc::WaitingAllocator = sys::alloc::WaitingAllocator;
