//! The guardian socket of winx-release: what a frontend and a guardian say
//! to each other, and whom they say it to.
//!
//! - [`messages`]: the JSON-lines protocol as types (requests, replies,
//!   error codes), shared by the client and the guardian server;
//! - [`client`]: the synchronous client a frontend uses;
//! - [`shell`]: the `shell` op's actions and reply;
//! - [`socket_path`]: where the guardian socket is;
//! - [`trust`]: whether a socket may be trusted (its directory is the
//!   user's own, mode `0700`, not a link; the peer runs as the user).
//!
//! The protocol sits between the frontend and the guardian; the engine
//! below it neither listens nor connects (it only holds the default socket
//! path's rule, `layout::default_socket_path`, which [`socket_path`] calls).
//! `docs/PROTOCOL.md` shows each op on the wire.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
mod command;
pub mod messages;
pub mod shell;
pub mod socket_path;
pub mod trust;

pub use client::{ClientError, GuardianClient, Hello};
pub use socket_path::{default_socket_path, resolve_socket_path};
