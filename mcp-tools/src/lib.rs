//! The MCP tools of this project's frontend (`Initialize`, `ReadFiles`,
//! `EditFiles`, `BashCommand`), independent of the MCP transport, over this
//! project's guardian protocol; `tools/src/mcp` is the thin rmcp server
//! around them.
//!
//! The rules it shares with any other MCP server live in the host
//! library, `winx-release-host`, and are re-exported here: [`token`],
//! [`receipt`], [`error`], and the release request checks and result
//! ([`winx_release_host::request`], [`ReleaseResult`]). Another server
//! links that library and the engine, not this crate.
//!
//! - [`wire`]: tool arguments, parsed from JSON with unknown fields refused,
//!   and the classification of `EditFiles` into a release or writes;
//! - [`frontend`]: [`Frontend`], whose tool methods take the arguments as
//!   JSON and return the contract's `structuredContent` objects;
//! - [`policy`]: what the shell modes allow;
//! - [`tool`]: each [`Tool`] with its name, description, input and output
//!   schemas, annotation hints and how its result's files render;
//! - [`schema`]: the tool definitions for the MCP server to list.
//!
//! An MCP server is a thin shell: list [`Tool::ALL`] (or [`tool_specs`]), call
//! [`Frontend::call`], and answer with the returned object as
//! `structuredContent` and, serialised as JSON, as its text block (or
//! [`summary`], one line, for hosts that read `structuredContent`), and
//! [`is_error`] as `isError`. (`winx-release mcp` puts a rendering for a
//! language model in the text block by default, `tools/src/mcp/render.rs`;
//! `--text-result json` or `summary` give the two above.)
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod frontend;
pub mod policy;
pub mod schema;
pub mod tool;
pub mod wire;

pub use winx_release_host::{error, receipt, token};

mod bash_args;
mod command_result;
mod embedded;
mod from_value;
mod input_schema;
mod output_schema;

pub use error::{Code, FrontendError};
pub use frontend::{is_error, summary, Frontend, FrontendConfig, GuardianLauncher};
pub use receipt::{Fingerprint, ReceiptStore};
pub use schema::{tool_specs, ToolSpec};
pub use token::{TokenKey, TokenSubject};
pub use tool::Tool;
pub use winx_release_host::{ReleaseCode, ReleaseResult};
pub use wire::EditRequest;
