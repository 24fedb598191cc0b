//! Typed errors and the wire codes they map to.
//!
//! Every refusal the frontend makes carries a [`Code`]: one of the contract's
//! reason codes ([`Reason`], section 4), or one of the two codes the frontend
//! adds for ordinary file tools ([`Code::QuotaExceeded`], named by the
//! contract's section 3 for writes, and [`Code::IoError`]).

use std::fmt;

use winx_release_engine::Reason;

/// A wire code the frontend reports as `errorCode` or as a per-file reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// A reason code of the contract's section 4.
    Reason(Reason),
    /// A write would exceed a helper quota (contract sections 3 and 6).
    QuotaExceeded,
    /// An I/O error outside the release path (a read or a write failed).
    IoError,
}

impl Code {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Reason(r) => r.code(),
            Code::QuotaExceeded => "quota_exceeded",
            Code::IoError => "io_error",
        }
    }

    /// The result `status` of a request refused with this code:
    /// `invalid_input` for malformed requests, `denied` otherwise.
    pub fn status(self) -> &'static str {
        match self {
            Code::Reason(r) if r.is_invalid_input() => "invalid_input",
            _ => "denied",
        }
    }

    /// The contract reason, when this code is one.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Code::Reason(r) => Some(r),
            _ => None,
        }
    }
}

impl From<Reason> for Code {
    fn from(r: Reason) -> Code {
        Code::Reason(r)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal of a whole request: its code and a human-readable message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontendError {
    /// The wire code.
    pub code: Code,
    /// What went wrong, for people.
    pub message: String,
}

impl FrontendError {
    /// A refusal with `code` and `message`.
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> FrontendError {
        FrontendError { code: code.into(), message: message.into() }
    }

    /// Shorthand for an `invalid_input` refusal.
    pub fn invalid(message: impl Into<String>) -> FrontendError {
        FrontendError::new(Reason::InvalidInput, message)
    }

    /// The result `status` of this refusal (see [`Code::status`]).
    pub fn status(&self) -> &'static str {
        self.code.status()
    }
}

impl fmt::Display for FrontendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for FrontendError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(Code::from(Reason::MixedModes).status(), "invalid_input");
        assert_eq!(Code::from(Reason::PolicyDenied).status(), "denied");
        assert_eq!(Code::QuotaExceeded.status(), "denied");
        assert_eq!(Code::QuotaExceeded.as_str(), "quota_exceeded");
        assert_eq!(FrontendError::invalid("x").to_string(), "invalid_input: x");
    }
}
