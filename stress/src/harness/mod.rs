//! The processes of a run and the private directory they live in, shared
//! with the end-to-end tests (`tests/e2e/support`): the directory
//! ([`dirs`]), a guardian started and waited for until its ready line
//! ([`guardian`], [`read_line`]), and two clients over a frontend's stdio
//! ([`stdio`]): the JSON-RPC client the stress workers share ([`client`])
//! and a raw one that sends any bytes and returns every line ([`raw`]).
//!
//! `private` is the stress tool's own use of it: the run's directory with
//! its logs and gate files, and processes spawned from this executable.

pub mod client;
pub mod dirs;
pub mod guardian;
pub(crate) mod private;
pub mod raw;
pub mod read_line;
pub mod stdio;
