//! The engine's one error type, and the reason on a target's result.
//!
//! [`Refusal`] is what every fallible call of the engine that refuses a
//! request returns (a reason, each target's own, one human line); the codes
//! it carries are [`Reason`] (request-level) and, for outcomes of a run that
//! touched the filesystem, [`TargetReason`] (both views of the one registry,
//! `codes.rs`); [`TargetCode`] is either, as a report's per-target `reason`. I/O failures of the engine's own files are
//! `std::io::Error`, which [`crate::release()`] reports as `no_space` or
//! `io_error`.

use std::fmt;

// Re-exported: the engine's modules name the codes `crate::error::Reason`.
use crate::codes::WireCode;
pub(crate) use crate::codes::{Reason, TargetReason};

/// The wire code (`read_required`); with `{:#}`, the code and what it
/// means: `read_required (the file changed since it was read, ...)`.
impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if f.alternate() {
            write!(f, " ({})", self.describe())?;
        }
        Ok(())
    }
}

impl std::error::Error for Reason {}

impl fmt::Display for TargetReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reason on one target's result: a request-level [`Reason`] (on a
/// `denied` target) or a [`TargetReason`] (on a target of a run that touched
/// the filesystem). On the wire it is the plain code string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum TargetCode {
    /// A request-level reason.
    Request(Reason),
    /// A target-level reason.
    Target(TargetReason),
}

impl TargetCode {
    /// The contract's wire spelling.
    pub fn as_str(self) -> &'static str {
        self.code().as_str()
    }

    /// This code in the registry.
    pub fn code(self) -> WireCode {
        match self {
            TargetCode::Request(r) => r.code(),
            TargetCode::Target(r) => r.code(),
        }
    }
}

impl From<Reason> for TargetCode {
    fn from(r: Reason) -> TargetCode {
        TargetCode::Request(r)
    }
}

impl From<TargetReason> for TargetCode {
    fn from(r: TargetReason) -> TargetCode {
        TargetCode::Target(r)
    }
}

impl fmt::Display for TargetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request refused before anything was touched: the request's reason,
/// each target's own reason (in request order), and one line naming the
/// first refused target and why.
///
/// [`crate::preflight::preflight`] returns it; a release turns it into a
/// `denied` (or `invalid_input`) [`ReleaseReport`](crate::ReleaseReport)
/// that names the same reasons and line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The request-level reason: the first refused target's own reason, or
    /// the reason that refuses the whole request.
    pub reason: Reason,
    /// Each target's own reason, in request order (`None` where the target
    /// itself passed).
    pub own: Vec<Option<Reason>>,
    /// One human line: `<path>: <code> (<what it means>)` for a target's
    /// refusal, else what refused the whole request.
    pub detail: String,
}

impl Refusal {
    /// A refusal of all `count` targets for one reason that none of them
    /// carries on its own.
    pub(crate) fn whole(count: usize, reason: Reason, detail: impl Into<String>) -> Refusal {
        Refusal { reason, own: vec![None; count], detail: detail.into() }
    }

    /// The refusal of the targets that have a reason of their own, or
    /// `None` when none has. The first of them (request order) gives the
    /// request's reason and the detail; `why` adds that target's cause when
    /// the caller knows more than the reason says.
    pub fn of_targets<P: AsRef<std::path::Path>>(
        paths: &[P],
        own: Vec<Option<Reason>>,
        why: impl Fn(usize) -> Option<String>,
    ) -> Option<Refusal> {
        let (i, reason) = own.iter().enumerate().find_map(|(i, r)| r.map(|r| (i, r)))?;
        let path = paths.get(i).map(|p| p.as_ref().display().to_string()).unwrap_or_default();
        let cause = why(i).unwrap_or_else(|| reason.describe().to_owned());
        let others = own.iter().flatten().count() - 1;
        let mut detail = format!("{path}: {reason} ({cause})");
        if others > 0 {
            detail.push_str(&format!("; {others} more target(s) refused"));
        }
        Some(Refusal { reason, own, detail })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused, {}: {}", self.reason, self.detail)
    }
}

impl std::error::Error for Refusal {}
