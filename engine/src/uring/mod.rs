//! io_uring: the batched scan backend, the probe that decides whether
//! io_uring can be used, and the ring pipeline the rehash pipeline shares.
//!
//! Unsafe code is allowed in this module only: every operation handed to a
//! ring names memory and descriptors that must stay valid until its
//! completion is reaped. [`ring`](self) keeps that invariant in one place
//! (see its ownership rules); each `unsafe` block says why it holds.
//!
//! - [`UringBackend`]: the scan backend (`statx`/`openat` batched, one ring
//!   per worker thread, getdents64 synchronous);
//! - [`probe()`], [`probe_with`], [`gather`]: availability and the reason
//!   it is missing;
//! - [`RingConfig`]: ring set-up knobs.
//!
//! # References
//! - [`io_uring(7)`](https://man7.org/linux/man-pages/man7/io_uring.7.html)

mod probe;
pub(crate) mod read;
pub(crate) mod ring;
mod scan;

pub use probe::{gather, probe, probe_with, Capabilities, ProbeInputs, Unavailable, REQUIRED_OPS};
pub use ring::RingConfig;
pub use scan::{UringBackend, UringConfig};
