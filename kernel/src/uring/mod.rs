//! io_uring: the ring pipeline that the scan's io_uring backend and the
//! rehash pipeline share, its safe owned-operation layer, and the probe that
//! decides whether io_uring can be used.
//!
//! Unsafe code is allowed in this module only: every operation handed to a
//! ring names memory and descriptors that must stay valid until its
//! completion is reaped. [`ring`](self) keeps that invariant in one place
//! (see its ownership rules); each `unsafe` block says why it holds.
//!
//! - `owned`: `openat`/`statx` whose paths and descriptors the pipeline
//!   holds until completion, so the scan backend
//!   (the release engine's `UringBackend`) needs no `unsafe`;
//! - [`probe()`], [`probe_with`], [`gather`]: availability and the reason
//!   it is missing;
//! - [`RingConfig`]: ring set-up knobs;
//!
//! # References
//! - [`io_uring(7)`](https://man7.org/linux/man-pages/man7/io_uring.7.html)

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod ops;
pub mod owned;
pub mod probe;
pub mod read;
pub mod ring;

pub use probe::{deny_io_uring_setup, gather, probe, probe_with, Capabilities, ProbeInputs, Unavailable, REQUIRED_OPS};
pub use ring::RingConfig;
