//! The reference guardian of winx-release: the durable runtime owner of
//! sessions and their executions, serving the JSON-lines protocol of
//! `docs/PROTOCOL.md` (the `winx-release-protocol` crate) on a Unix socket.
//!
//! It holds one admission barrier per session, runs commands as
//! executions, and performs releases under that barrier with the engine.
//! The `winx-release guardian` subcommand runs [`serve_with`].
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod activation;
mod error;
mod exec;
mod hello;
mod in_flight;
mod kick;
mod pool;
mod prewarm;
mod reattach_at_start;
mod recover;
mod release;
mod retention;
mod server;
mod sessions;
mod shell;
mod shell_op;
mod status;
mod stop;
mod sync;

pub use hello::{CAPABILITIES, PROTOCOL};
pub use server::{serve, serve_with, ServeOptions};
pub use sessions::Guardian;
pub use stop::stop_blockers;
