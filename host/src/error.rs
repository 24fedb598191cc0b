//! The library's one error type, [`FrontendError`], and the wire codes it
//! maps to.
//!
//! Every refusal carries a [`Code`]: one of the contract's reason codes
//! ([`Reason`], section 4), or one of the two codes a frontend adds for
//! ordinary file tools ([`Code::QuotaExceeded`], named by the contract's
//! section 3 for writes, and [`Code::IoError`]). A refusal of a request with
//! several targets also names each target's own code, where it has one
//! ([`FrontendError::targets`]); the others take the request's.

use std::fmt;

use winx_release_engine::{Level, Reason, Refusal, WireCode};

/// A wire code the frontend reports as `errorCode` or as a per-file reason:
/// a view of the engine's registry ([`WireCode`]), which spells it.
#[non_exhaustive]
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
        self.code().as_str()
    }

    /// This code in the registry.
    pub fn code(self) -> WireCode {
        match self {
            Code::Reason(r) => r.code(),
            Code::QuotaExceeded => WireCode::QuotaExceeded,
            Code::IoError => WireCode::IoError,
        }
    }

    /// The result `status` of a request refused with this code:
    /// `invalid_input` for malformed requests, `denied` otherwise.
    pub fn status(self) -> &'static str {
        match self.code().level() {
            Level::Shape => "invalid_input",
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

/// A refusal of a whole request: its code, a human-readable message, and
/// each target's own code where it has one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontendError {
    /// The wire code (the request's `errorCode`).
    pub code: Code,
    /// What went wrong, for people.
    pub message: String,
    /// Each target's own code, in request order, where it has one; empty or
    /// `None`: the request's [`FrontendError::code`].
    pub targets: Vec<Option<Code>>,
}

impl FrontendError {
    /// A refusal with `code` and `message`.
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> FrontendError {
        FrontendError { code: code.into(), message: message.into(), targets: Vec::new() }
    }

    /// The same refusal naming each target's own code (request order).
    pub fn with_targets(mut self, targets: Vec<Option<Code>>) -> FrontendError {
        self.targets = targets;
        self
    }

    /// The code of target `i`: its own, else the request's.
    pub fn code_of(&self, i: usize) -> Code {
        self.targets.get(i).copied().flatten().unwrap_or(self.code)
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

/// The engine's refusal (shape, placement, a target's checks) as the
/// frontend's: the same reason, detail and per-target reasons.
impl From<Refusal> for FrontendError {
    fn from(f: Refusal) -> FrontendError {
        let targets = f.own.iter().map(|o| o.map(Code::from)).collect();
        FrontendError::new(f.reason, f.detail).with_targets(targets)
    }
}

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

    #[test]
    fn per_target_codes() {
        let e = FrontendError::new(Reason::NotFound, "m").with_targets(vec![None, Some(Reason::Symlink.into())]);
        assert_eq!(
            (e.code_of(0), e.code_of(1), e.code_of(5)),
            (Reason::NotFound.into(), Reason::Symlink.into(), Reason::NotFound.into())
        );
        let f = Refusal { reason: Reason::Hardlink, own: vec![Some(Reason::Hardlink), None], detail: "d".into() };
        let e = FrontendError::from(f);
        assert_eq!(
            (e.code, e.code_of(0), e.code_of(1), e.message.as_str()),
            (Reason::Hardlink.into(), Reason::Hardlink.into(), Reason::Hardlink.into(), "d")
        );
        assert_eq!(e.targets, vec![Some(Reason::Hardlink.into()), None]);
    }
}
