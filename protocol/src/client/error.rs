//! Why a guardian call failed, and the contract reason each failure is.

use std::fmt;
use std::io;

use winx_release_engine::Reason;

use crate::messages::ErrorCode;

/// Where a transport error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// While writing the request: the guardian may have received part of it.
    Write,
    /// While waiting for the reply: the guardian may have run the request.
    Read,
}

/// Why a guardian call failed.
#[non_exhaustive]
#[derive(Debug)]
pub enum ClientError {
    /// No connection could be made (`owner_unavailable`).
    Unavailable(io::Error),
    /// The socket's directory or its peer is not trusted (contract section
    /// 1): nothing was sent, and no guardian may be started there
    /// (`owner_unavailable`). The error names the failed check.
    Untrusted(io::Error),
    /// The guardian is too old for what was asked (`owner_unsupported`).
    Unsupported(String),
    /// The guardian answered with an error.
    Remote {
        /// Its error code: a code this build does not know (a newer
        /// guardian's) is [`ErrorCode::Other`], and maps to no contract
        /// reason.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The connection failed after it was made; a request may have been
    /// delivered and run, and its reply lost.
    Transport {
        /// Where it failed.
        phase: Phase,
        /// The error.
        error: io::Error,
    },
    /// A reply that does not follow the protocol.
    Protocol(String),
}

impl ClientError {
    /// The contract reason of this failure: `owner_unavailable` for
    /// connection trouble, `owner_unsupported` for an older guardian, the
    /// guardian's own code when it is a contract reason, else `None`.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            ClientError::Unavailable(_)
            | ClientError::Untrusted(_)
            | ClientError::Transport { .. }
            | ClientError::Protocol(_) => Some(Reason::OwnerUnavailable),
            ClientError::Unsupported(_) => Some(Reason::OwnerUnsupported),
            ClientError::Remote { code, .. } => code.reason(),
        }
    }

    /// Whether the request may have reached the guardian and run although no
    /// usable reply came back.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ClientError::Transport { .. } | ClientError::Protocol(_))
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Unavailable(e) => write!(f, "guardian unreachable: {e}"),
            ClientError::Untrusted(e) => write!(f, "guardian socket not trusted: {e}"),
            ClientError::Unsupported(m) => write!(f, "guardian unsupported: {m}"),
            ClientError::Remote { code, message } => write!(f, "guardian refused ({}): {message}", code.as_str()),
            ClientError::Transport { phase: Phase::Write, error } => {
                write!(f, "sending to the guardian failed: {error}")
            }
            ClientError::Transport { phase: Phase::Read, error } => write!(f, "guardian reply lost: {error}"),
            ClientError::Protocol(m) => write!(f, "guardian protocol error: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}
