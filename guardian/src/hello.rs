//! What this guardian says of itself in `hello` and its ready line: the
//! ground floor the server reads.

/// Capabilities this guardian advertises in `hello`.
pub const CAPABILITIES: &[&str] = &["temporary_release", "executions", "shells"];
/// Protocol version.
pub const PROTOCOL: u64 = winx_release_protocol::messages::PROTOCOL_VERSION;
