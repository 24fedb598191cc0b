//! Frontend-side adapter of winx-release: everything the MCP frontend does,
//! independent of the MCP transport.
//!
//! - [`wire`]: tool arguments, parsed from JSON with unknown fields refused,
//!   and the shape rules of `EditFiles`;
//! - [`token`]: generation tokens (HMAC-SHA256 under a process secret over
//!   length-framed fields);
//! - [`receipt`]: durable receipts of releases that touched the filesystem,
//!   replayed by request fingerprint;
//! - [`frontend`]: [`Frontend`], whose tool methods take the arguments as
//!   JSON and return the contract's `structuredContent` objects;
//! - [`policy`]: what the shell modes allow;
//! - [`schema`]: the tool definitions for the MCP server to list.
//!
//! An MCP server is a thin shell: list [`tool_specs`], call
//! [`Frontend::call`], and answer with the returned object as
//! `structuredContent` and, serialised as JSON, as its text block (or
//! [`summary`], one line, for hosts that read `structuredContent`), and
//! [`is_error`] as `isError`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod error;
pub mod frontend;
pub mod policy;
pub mod receipt;
pub mod schema;
pub mod token;
pub mod wire;

mod command_result;
mod embedded;
mod output_schema;

pub use error::{Code, FrontendError};
pub use frontend::{is_error, summary, Frontend, FrontendConfig, GuardianLauncher};
pub use receipt::{Fingerprint, ReceiptStore};
pub use schema::{tool_specs, ToolSpec};
pub use token::{TokenKey, TokenSubject};
pub use wire::EditRequest;
