//! The kernel toolkit under winx-release: the system calls, rings and
//! `/proc` reads the process runtime and the release engine are built on.
//! It knows nothing of releases, sessions or executions: it opens, reads,
//! hashes and identifies objects, and answers who holds them.
//!
//! - [`identity`]: the physical identity of an opened object (device,
//!   inode, birth time, generation) and the [`Pin`] of a read;
//! - [`hash`] and [`revision`]: SHA-256 of an opened file's bytes, what a
//!   read keeps of them, and the `sha256:<hex>` revision string;
//! - [`sys`]: locks that survive a panicked holder, randomness, durable
//!   small writes, the descriptor table, leases, pidfds, peer credentials;
//! - [`uring`]: the io_uring pipeline, its owned operations and its probe;
//! - [`procfs`]: processes' state, descriptor tables and memory maps;
//! - [`mountinfo`]: the mount table's one parser.
//!
//! Every `unsafe` block of the workspace is in this crate, each in a fenced
//! file (`uring/`, `sys/lease.rs`, `sys/peer.rs`, `generation.rs`) that
//! says why it holds; every other file denies it.
//!
//! # Platforms
//!
//! The system calls are Linux's. Elsewhere (and on Linux with `--cfg
//! winx_foreign`) the crate is its types: [`identity`], [`revision`] and
//! what a read keeps ([`hash::Head`], [`hash::Keep`]); the Linux-only
//! dependencies (`rustix`, `io-uring`, `libc`) are not pulled in.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod hash;
pub mod identity;
pub mod revision;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod mountinfo;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod procfs;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod sys;
// The rings: `unsafe` fenced in this module (see its docs).
#[allow(unsafe_code)]
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod uring;

// `FS_IOC_GETVERSION`, which rustix does not wrap: its `unsafe` is fenced
// in that one file.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod generation;

pub use identity::{Identity, PhysicalId, Pin};
