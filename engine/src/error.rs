//! Reason codes of the contract (section 4), as typed errors.

use std::fmt;

/// Why a release request, or one of its targets, was refused.
///
/// Each variant maps one-to-one to a request-level reason code of the
/// contract's section 4; [`Reason::code`] gives the wire spelling.
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
    pub fn code(self) -> &'static str {
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

    /// Parses a wire code back into a reason.
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.iter().copied().find(|r| r.code() == code)
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

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
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
    pub fn code(self) -> &'static str {
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
        f.write_str(self.code())
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
    pub fn code(self) -> &'static str {
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
        f.write_str(self.code())
    }
}

/// A refusal together with the path it concerns, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The reason code.
    pub reason: Reason,
    /// The offending path (a target, or a backing-root entry), when known.
    pub path: Option<std::path::PathBuf>,
    /// A human-readable detail.
    pub detail: String,
}

impl Denial {
    /// A denial without a path.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Denial { reason, path: None, detail: detail.into() }
    }

    /// A denial about `path`.
    pub fn at(reason: Reason, path: impl Into<std::path::PathBuf>, detail: impl Into<String>) -> Self {
        Denial { reason, path: Some(path.into()), detail: detail.into() }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{}: {} ({})", self.reason, p.display(), self.detail),
            None => write!(f, "{}: {}", self.reason, self.detail),
        }
    }
}

impl std::error::Error for Denial {}
