//! Reason codes of the contract (section 4), and the engine's one error
//! type.
//!
//! [`Refusal`] is what every fallible call of the engine that refuses a
//! request returns (a reason, each target's own, one human line); the codes
//! it carries are [`Reason`] (request-level) and, for outcomes of a run that
//! touched the filesystem, [`TargetReason`]; [`TargetCode`] is either, as a
//! report's per-target `reason`. I/O failures of the engine's own files are
//! `std::io::Error`, which [`crate::release()`] reports as `no_space` or
//! `io_error`.

use std::fmt;

/// Why a release request, or one of its targets, was refused.
///
/// Each variant maps one-to-one to a request-level reason code of the
/// contract's section 4; [`Reason::as_str`] gives the wire spelling.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Malformed JSON shape, unknown field, missing field.
    InvalidInput,
    /// Fewer than 1 or more than 100 entries.
    FileCount,
    /// The same path twice.
    DuplicatePath,
    /// Relative, `.`/`..`/empty component, trailing `/`, NUL, over-long.
    PathNotExact,
    /// `*`, `?` or `[` in a path.
    GlobNotAllowed,
    /// Not every entry is `release_temporary`.
    MixedModes,
    /// `verify_command` with a release.
    VerificationNotAllowed,
    /// Unknown or uninitialised thread.
    ThreadMismatch,
    /// `workspace_root` is not the exact initialised workspace.
    WorkspaceMismatch,
    /// Outside this thread's session directory.
    NotSessionHelper,
    /// Inside another session's directory.
    OtherSession,
    /// Inside the reserved `.winx-release-*` namespace.
    ReservedNamespace,
    /// The path or a component of it is a symbolic link.
    Symlink,
    /// The helper has more than one link.
    Hardlink,
    /// Directory, device, fifo, socket.
    NotRegularFile,
    /// The file does not exist.
    NotFound,
    /// Token missing, malformed, expired, or the file changed since it was read.
    ReadRequired,
    /// `expected_revision` is not the current content's.
    RevisionMismatch,
    /// The mode or tool policy forbids mutation.
    PolicyDenied,
    /// No guardian reachable.
    OwnerUnavailable,
    /// The guardian does not advertise `temporary_release`.
    OwnerUnsupported,
    /// The frontend runs embedded.
    EmbeddedRuntime,
    /// Not Linux.
    UnsupportedPlatform,
    /// A command of the thread is running.
    ExecutionActive,
    /// A process of the user other than the owner and its frontends holds
    /// a target open or mapped.
    InUse,
    /// The session has queued or unresolved actions.
    PendingActions,
    /// A backing-store entry is the same physical file as a target.
    BackingAlias,
    /// A symbolic link inside a backing root.
    BackingSymlink,
    /// A fifo, socket or device inside a backing root.
    BackingUnsupportedEntry,
    /// A backing-root entry cannot be opened or read.
    BackingInaccessible,
    /// More than 50,000 entries or deeper than 16 levels.
    BackingScanLimit,
    /// The filesystem cannot do `RENAME_NOREPLACE`.
    RenameUnsupported,
}

impl Reason {
    /// Every reason, in contract order.
    pub const ALL: [Reason; 32] = [
        Reason::InvalidInput,
        Reason::FileCount,
        Reason::DuplicatePath,
        Reason::PathNotExact,
        Reason::GlobNotAllowed,
        Reason::MixedModes,
        Reason::VerificationNotAllowed,
        Reason::ThreadMismatch,
        Reason::WorkspaceMismatch,
        Reason::NotSessionHelper,
        Reason::OtherSession,
        Reason::ReservedNamespace,
        Reason::Symlink,
        Reason::Hardlink,
        Reason::NotRegularFile,
        Reason::NotFound,
        Reason::ReadRequired,
        Reason::RevisionMismatch,
        Reason::PolicyDenied,
        Reason::OwnerUnavailable,
        Reason::OwnerUnsupported,
        Reason::EmbeddedRuntime,
        Reason::UnsupportedPlatform,
        Reason::ExecutionActive,
        Reason::InUse,
        Reason::PendingActions,
        Reason::BackingAlias,
        Reason::BackingSymlink,
        Reason::BackingUnsupportedEntry,
        Reason::BackingInaccessible,
        Reason::BackingScanLimit,
        Reason::RenameUnsupported,
    ];

    /// The contract's wire spelling of this reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidInput => "invalid_input",
            Reason::FileCount => "file_count",
            Reason::DuplicatePath => "duplicate_path",
            Reason::PathNotExact => "path_not_exact",
            Reason::GlobNotAllowed => "glob_not_allowed",
            Reason::MixedModes => "mixed_modes",
            Reason::VerificationNotAllowed => "verification_not_allowed",
            Reason::ThreadMismatch => "thread_mismatch",
            Reason::WorkspaceMismatch => "workspace_mismatch",
            Reason::NotSessionHelper => "not_session_helper",
            Reason::OtherSession => "other_session",
            Reason::ReservedNamespace => "reserved_namespace",
            Reason::Symlink => "symlink",
            Reason::Hardlink => "hardlink",
            Reason::NotRegularFile => "not_regular_file",
            Reason::NotFound => "not_found",
            Reason::ReadRequired => "read_required",
            Reason::RevisionMismatch => "revision_mismatch",
            Reason::PolicyDenied => "policy_denied",
            Reason::OwnerUnavailable => "owner_unavailable",
            Reason::OwnerUnsupported => "owner_unsupported",
            Reason::EmbeddedRuntime => "embedded_runtime",
            Reason::UnsupportedPlatform => "unsupported_platform",
            Reason::ExecutionActive => "execution_active",
            Reason::InUse => "in_use",
            Reason::PendingActions => "pending_actions",
            Reason::BackingAlias => "backing_alias",
            Reason::BackingSymlink => "backing_symlink",
            Reason::BackingUnsupportedEntry => "backing_unsupported_entry",
            Reason::BackingInaccessible => "backing_inaccessible",
            Reason::BackingScanLimit => "backing_scan_limit",
            Reason::RenameUnsupported => "rename_unsupported",
        }
    }

    /// What the reason means, in a few words, for a human reading a
    /// refusal: `read_required` is "the file changed since it was read, or
    /// its token is missing or expired".
    pub fn describe(self) -> &'static str {
        match self {
            Reason::InvalidInput => "the request is malformed",
            Reason::FileCount => "a release names 1 to 100 targets",
            Reason::DuplicatePath => "the same path is named twice",
            Reason::PathNotExact => {
                "the path is not exact (relative, a . or .. or empty component, a trailing /, NUL, too long)"
            }
            Reason::GlobNotAllowed => "the path holds a glob character",
            Reason::MixedModes => "not every entry is release_temporary",
            Reason::VerificationNotAllowed => "a release takes no verify_command",
            Reason::ThreadMismatch => "the thread is unknown or not initialised",
            Reason::WorkspaceMismatch => "not the exact initialised workspace",
            Reason::NotSessionHelper => "not below this thread's session directory",
            Reason::OtherSession => "below another session's directory",
            Reason::ReservedNamespace => "inside the reserved .winx-release-* namespace",
            Reason::Symlink => "the path or one of its components is a symbolic link",
            Reason::Hardlink => "the file has more than one name",
            Reason::NotRegularFile => "not a regular file",
            Reason::NotFound => "the file does not exist",
            Reason::ReadRequired => "the file changed since it was read, or its token is missing or expired",
            Reason::RevisionMismatch => "expected_revision is not the current content's",
            Reason::PolicyDenied => "the mode or tool policy forbids mutation",
            Reason::OwnerUnavailable => "no guardian owns the session",
            Reason::OwnerUnsupported => "the owner does not advertise temporary_release",
            Reason::EmbeddedRuntime => "the frontend runs embedded",
            Reason::UnsupportedPlatform => "release is supported on Linux only",
            Reason::ExecutionActive => "a command of the thread is running",
            Reason::InUse => "a process holds the file open or mapped",
            Reason::PendingActions => "the session has queued or unresolved actions",
            Reason::BackingAlias => "a backing-store entry is the same physical file",
            Reason::BackingSymlink => "a symbolic link inside a backing root",
            Reason::BackingUnsupportedEntry => "a fifo, socket or device inside a backing root",
            Reason::BackingInaccessible => "a backing-root entry cannot be opened or read",
            Reason::BackingScanLimit => "the backing roots exceed 50,000 entries or 16 levels",
            Reason::RenameUnsupported => {
                "the filesystem cannot move it with RENAME_NOREPLACE into the session's quarantine"
            }
        }
    }

    /// Parses a wire code back into a reason.
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.iter().copied().find(|r| r.as_str() == code)
    }

    /// Whether the request is `invalid_input` rather than `denied` when this
    /// is its reason.
    pub fn is_invalid_input(self) -> bool {
        matches!(
            self,
            Reason::InvalidInput
                | Reason::FileCount
                | Reason::DuplicatePath
                | Reason::PathNotExact
                | Reason::GlobNotAllowed
                | Reason::MixedModes
                | Reason::VerificationNotAllowed
        )
    }
}

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

/// Why one target of a run that touched the filesystem did not end `released`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetReason {
    /// What was captured in quarantine was not the pinned object.
    ReplacedDuringRelease,
    /// The captured object could not be put back: its name is occupied again.
    RestoreBlocked,
    /// The filesystem or a disk quota is full (`ENOSPC`, `EDQUOT`).
    NoSpace,
    /// An I/O error stopped this target.
    IoError,
    /// An earlier target failed; this one was not touched.
    StoppedAfterFailure,
}

impl TargetReason {
    /// The contract's wire spelling of this reason.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetReason::ReplacedDuringRelease => "replaced_during_release",
            TargetReason::RestoreBlocked => "restore_blocked",
            TargetReason::NoSpace => "no_space",
            TargetReason::IoError => "io_error",
            TargetReason::StoppedAfterFailure => "stopped_after_failure",
        }
    }
}

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
        match self {
            TargetCode::Request(r) => r.as_str(),
            TargetCode::Target(r) => r.as_str(),
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
