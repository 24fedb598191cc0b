//! The engine's tests: one test binary, a module per subject (each was a
//! test binary of its own, linking the engine and its dependencies once
//! per file). Run one module with
//! `cargo test -p winx-release-engine --test suite release::`.
//!
//! The modules share one process, so what is process-wide is shared too:
//! a test that starts a process takes [`common::no_fork_now`] (a child
//! between its `fork` and its `exec` holds a copy of every descriptor, a
//! release's included), and a test that changes a process-wide setting
//! runs in a process of its own ([`common::isolated`]).
//!
//! Built with `--cfg winx_foreign` (the engine off Linux, `.ci/foreign.sh`)
//! only [`foreign`] is compiled.

/// Shared fixtures (also the runtime's `no_threads` test's: hence not
/// below `suite/`).
#[cfg(not(winx_foreign))]
#[path = "../common/mod.rs"]
mod common;

#[cfg(not(winx_foreign))]
mod async_barrier;
#[cfg(not(winx_foreign))]
mod bind_mount;
#[cfg(not(winx_foreign))]
mod crash;
mod foreign;
#[cfg(not(winx_foreign))]
mod fs_matrix;
#[cfg(not(winx_foreign))]
mod generation;
#[cfg(not(winx_foreign))]
mod in_use_cost;
#[cfg(not(winx_foreign))]
mod in_use_processes;
#[cfg(not(winx_foreign))]
mod journal_reuse;
#[cfg(not(winx_foreign))]
mod lean;
#[cfg(not(winx_foreign))]
mod no_space;
#[cfg(not(winx_foreign))]
mod parity;
#[cfg(not(winx_foreign))]
mod path_props;
#[cfg(not(winx_foreign))]
mod race;
#[cfg(not(winx_foreign))]
mod read_pinned;
#[cfg(not(winx_foreign))]
mod read_whole;
#[cfg(not(winx_foreign))]
mod recovery;
#[cfg(not(winx_foreign))]
mod rehash_parity;
#[cfg(not(winx_foreign))]
mod release;
#[cfg(not(winx_foreign))]
mod release_capture;
#[cfg(not(winx_foreign))]
mod retention_scan;
#[cfg(not(winx_foreign))]
mod scan;
#[cfg(not(winx_foreign))]
mod scan_cache;
#[cfg(not(winx_foreign))]
mod unsupported_owner;
