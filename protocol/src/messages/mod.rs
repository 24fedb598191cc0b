//! The guardian socket protocol as types, shared by the client
//! ([`crate::client`]) and the guardian server (`winx-release-guardian`).
//!
//! JSON lines over a Unix stream socket: one [`RequestLine`] per line, one
//! reply per line. A reply is `{"id": n, "ok": true, ...body}` with the body
//! of the op ([`Hello`], [`SessionOpened`], [`CommandReply`], [`ReleaseReply`],
//! [`StatusReply`]), or `{"id": n, "ok": false, "error": {"code", "message"}}`
//! ([`ErrorBody`]). `docs/PROTOCOL.md` shows each op on the wire.
//!
//! Unknown fields are ignored in both directions, so a newer peer can add
//! fields; an unknown op is answered with [`ErrorCode::UnknownOp`], which an
//! older client reads as "this guardian does not support that".

mod error_code;
mod line;
mod reply;
mod request;
#[cfg(test)]
mod tests;

pub use crate::command::{CommandReport, CommandStatus};
pub use error_code::{ErrorBody, ErrorCode};
pub use line::{error_line, ok_line, ReplyLine};
pub use reply::{
    CommandReply, ExecutionState, ExecutionSummary, GuardianStatus, Hello, ReleaseReply, RunningExecution,
    SessionOpened, SessionSummary, StatusReply, StopReply,
};
pub use request::{parse_request, LineError, Request, RequestLine};

/// The protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;
/// The capability a guardian must advertise for releases.
pub const CAP_TEMPORARY_RELEASE: &str = "temporary_release";
/// Longest request line a guardian accepts, in bytes.
pub const MAX_REQUEST_BYTES: u64 = 1024 * 1024;
/// Longest reply line a client accepts, in bytes.
pub const MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;
/// Longest thread id, in bytes.
pub const MAX_THREAD_ID_BYTES: usize = 256;

/// Whether `thread_id` has a thread id's shape: at most
/// [`MAX_THREAD_ID_BYTES`] bytes, no control character (NUL included).
/// The frontend and the guardian hold thread ids to this one rule.
pub fn thread_id_shape_ok(thread_id: &str) -> bool {
    thread_id.len() <= MAX_THREAD_ID_BYTES && !thread_id.chars().any(char::is_control)
}
