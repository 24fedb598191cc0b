//! The error codes of an error reply, and its body.

use serde::{Deserialize, Serialize};
use winx_release_engine::{Level, Reason, WireCode};

/// The error codes a guardian answers with.
///
/// On the wire a code is a string. The guardian's own codes come first; a
/// contract reason code (for instance `path_not_exact` for a workspace that
/// is not exact) is carried as [`ErrorCode::Reason`]; anything else (a newer
/// guardian) is kept as [`ErrorCode::Other`]. A view of the engine's
/// registry ([`WireCode`]), which spells every code.
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
            ErrorCode::Other(s) => s,
            known => known.code().map_or("", WireCode::as_str),
        }
    }

    /// This code in the registry (`None` for [`ErrorCode::Other`]).
    /// [`ErrorCode::NotFound`] is the registry's `not_found`, which a
    /// guardian answers for a command id it does not know.
    pub fn code(&self) -> Option<WireCode> {
        Some(match self {
            ErrorCode::InvalidInput => WireCode::InvalidInput,
            ErrorCode::UnknownOp => WireCode::UnknownOp,
            ErrorCode::SessionUnavailable => WireCode::SessionUnavailable,
            ErrorCode::NotFound => WireCode::NotFound,
            ErrorCode::IoError => WireCode::IoError,
            ErrorCode::Reason(r) => r.code(),
            ErrorCode::Other(_) => return None,
        })
    }

    /// The contract reason this code is, if it is one.
    pub fn reason(&self) -> Option<Reason> {
        Reason::from_code(self.as_str())
    }
}

impl From<String> for ErrorCode {
    fn from(s: String) -> ErrorCode {
        let Some(code) = WireCode::from_code(&s) else { return ErrorCode::Other(s) };
        match code {
            WireCode::InvalidInput => ErrorCode::InvalidInput,
            WireCode::UnknownOp => ErrorCode::UnknownOp,
            WireCode::SessionUnavailable => ErrorCode::SessionUnavailable,
            WireCode::NotFound => ErrorCode::NotFound,
            WireCode::IoError => ErrorCode::IoError,
            c if matches!(c.level(), Level::Shape | Level::Request) => {
                c.reason().map_or(ErrorCode::Other(s), ErrorCode::Reason)
            }
            // A target's or a frontend's code: no guardian answers it.
            _ => ErrorCode::Other(s),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The guardian's codes keep their spellings and variants; a target's
    /// or a frontend's code is none of a guardian's.
    #[test]
    fn codes_parse_as_before() {
        let cases = [
            ("invalid_input", ErrorCode::InvalidInput),
            ("unknown_op", ErrorCode::UnknownOp),
            ("session_unavailable", ErrorCode::SessionUnavailable),
            ("not_found", ErrorCode::NotFound),
            ("io_error", ErrorCode::IoError),
            ("path_not_exact", ErrorCode::Reason(Reason::PathNotExact)),
            ("no_space", ErrorCode::Other("no_space".into())),
            ("quota_exceeded", ErrorCode::Other("quota_exceeded".into())),
            ("newer_code", ErrorCode::Other("newer_code".into())),
        ];
        for (wire, code) in cases {
            assert_eq!(ErrorCode::from(wire.to_owned()), code, "{wire}");
            assert_eq!(code.as_str(), wire);
            assert_eq!(serde_json::to_value(&code).unwrap(), wire);
        }
    }
}
