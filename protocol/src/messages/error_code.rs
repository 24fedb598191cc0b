//! The error codes of an error reply, and its body.

use serde::{Deserialize, Serialize};
use winx_release_engine::Reason;

/// The error codes a guardian answers with.
///
/// On the wire a code is a string. The guardian's own codes come first; a
/// contract reason code (for instance `path_not_exact` for a workspace that
/// is not exact) is carried as [`ErrorCode::Reason`]; anything else (a newer
/// guardian) is kept as [`ErrorCode::Other`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ErrorCode {
    /// The request line is malformed.
    InvalidInput,
    /// The op is not known to this guardian.
    UnknownOp,
    /// The session directory cannot be made or opened without following links.
    SessionUnavailable,
    /// The command id is not known (never started, or pruned by retention).
    NotFound,
    /// An I/O error on the guardian's side.
    IoError,
    /// A contract reason code.
    Reason(Reason),
    /// A code this client does not know.
    Other(String),
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::SessionUnavailable => "session_unavailable",
            ErrorCode::NotFound => "not_found",
            ErrorCode::IoError => "io_error",
            ErrorCode::Reason(r) => r.as_str(),
            ErrorCode::Other(s) => s,
        }
    }

    /// The contract reason this code is, if it is one.
    pub fn reason(&self) -> Option<Reason> {
        Reason::from_code(self.as_str())
    }
}

impl From<String> for ErrorCode {
    fn from(s: String) -> ErrorCode {
        match s.as_str() {
            "invalid_input" => ErrorCode::InvalidInput,
            "unknown_op" => ErrorCode::UnknownOp,
            "session_unavailable" => ErrorCode::SessionUnavailable,
            "not_found" => ErrorCode::NotFound,
            "io_error" => ErrorCode::IoError,
            other => Reason::from_code(other).map(ErrorCode::Reason).unwrap_or(ErrorCode::Other(s)),
        }
    }
}

impl From<ErrorCode> for String {
    fn from(c: ErrorCode) -> String {
        c.as_str().to_owned()
    }
}

/// The body of an error reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What kind of error.
    pub code: ErrorCode,
    /// A human-readable line.
    #[serde(default)]
    pub message: String,
}
