//! The processes of a run and the private directory they live in, shared
//! with the end-to-end tests (`tests/e2e/support`).
//!
//! [`private`] is the stress tool's own use of it: its run directory, logs
//! and gate files, and frontends spawned from this executable.

pub mod client;
pub(crate) mod private;
