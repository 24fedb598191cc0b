//! The one registry of the wire codes: every code the engine, a frontend
//! and a guardian answer with, each with its wire spelling, what it means
//! and its [`Level`], written once in the list at the end of this file.
//!
//! The list produces [`WireCode`] (every code) and its two views the
//! engine answers with: [`Reason`] (request-level, the contract's section
//! 4 table) and [`TargetReason`] (a target of a run that touched the
//! filesystem). The frontend's and the guardian's code types
//! (`winx_release_host::Code`, `winx_release_host::ReleaseCode`,
//! `winx_release_protocol::ErrorCode`) are views of it too: they spell no
//! code themselves. `io_error`, `invalid_input` and `not_found` are each
//! one entry, whichever level answers them.

/// Where a [`WireCode`] is answered, and with which request `status`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// A request-level reason of the request's shape: the request is
    /// `invalid_input`.
    Shape,
    /// A request-level reason: the request is `denied` (a release's
    /// `errorCode`, a `denied` target's `reason`).
    Request,
    /// A target's `reason` on an outcome of a run that touched the
    /// filesystem, and a release's `errorCode` when its journal or data
    /// directory cannot be written.
    Target,
    /// A frontend's own code: an ordinary file tool's refusal, a release
    /// whose receipt could not be written.
    Frontend,
    /// A guardian's own code in an error reply of the socket protocol.
    Guardian,
}

/// Generates [`WireCode`], [`Reason`] and [`TargetReason`] from the one
/// list below.
macro_rules! registry {
    (
        request($n:literal) { $( $(#[doc = $rd:literal])* $rv:ident = $rw:tt, $rl:ident, $rx:literal; )* }
        target { $( $(#[doc = $td:literal])* $tv:ident = $tw:tt, $tx:literal; )* }
        own { $( $(#[doc = $od:literal])* $ov:ident = $ow:tt, $ol:ident, $ox:literal; )* }
    ) => {
        /// Every wire code: the contract's request-level reasons (in its
        /// order), its target-level reasons, then the frontend's and the
        /// guardian's own codes.
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum WireCode {
            $( $(#[doc = $rd])* $rv, )*
            $( $(#[doc = $td])* $tv, )*
            $( $(#[doc = $od])* $ov, )*
        }

        impl WireCode {
            /// Every code, in registry order.
            pub const ALL: &'static [WireCode] =
                &[$(WireCode::$rv,)* $(WireCode::$tv,)* $(WireCode::$ov,)*];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(WireCode::$rv => $rw,)*
                    $(WireCode::$tv => $tw,)*
                    $(WireCode::$ov => $ow,)*
                }
            }

            /// What the code means, in a few words, for a human.
            pub fn describe(self) -> &'static str {
                match self {
                    $(WireCode::$rv => $rx,)*
                    $(WireCode::$tv => $tx,)*
                    $(WireCode::$ov => $ox,)*
                }
            }

            /// Where the code is answered.
            pub fn level(self) -> Level {
                match self {
                    $(WireCode::$rv => Level::$rl,)*
                    $(WireCode::$tv => Level::Target,)*
                    $(WireCode::$ov => Level::$ol,)*
                }
            }

            /// The code spelled `code` on the wire.
            pub fn from_code(code: &str) -> Option<WireCode> {
                WireCode::ALL.iter().copied().find(|c| c.as_str() == code)
            }

            /// The request-level reason this code is, if it is one.
            pub fn reason(self) -> Option<Reason> {
                match self {
                    $(WireCode::$rv => Some(Reason::$rv),)*
                    _ => None,
                }
            }

            /// The target-level reason this code is, if it is one.
            pub fn target_reason(self) -> Option<TargetReason> {
                match self {
                    $(WireCode::$tv => Some(TargetReason::$tv),)*
                    _ => None,
                }
            }
        }

        /// Why a release request, or one of its targets, was refused.
        ///
        /// Each variant maps one-to-one to a request-level reason code of the
        /// contract's section 4; [`Reason::as_str`] gives the wire spelling.
        /// A view of [`WireCode`] ([`Reason::code`]).
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum Reason {
            $( $(#[doc = $rd])* #[serde(rename = $rw)] $rv, )*
        }

        impl Reason {
            /// Every reason, in contract order.
            pub const ALL: [Reason; $n] = [$(Reason::$rv,)*];

            /// This reason in the registry.
            pub fn code(self) -> WireCode {
                match self {
                    $(Reason::$rv => WireCode::$rv,)*
                }
            }
        }

        /// Why one target of a run that touched the filesystem did not end
        /// `released`. A view of [`WireCode`] ([`TargetReason::code`]).
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum TargetReason {
            $( $(#[doc = $td])* #[serde(rename = $tw)] $tv, )*
        }

        impl TargetReason {
            /// This reason in the registry.
            pub fn code(self) -> WireCode {
                match self {
                    $(TargetReason::$tv => WireCode::$tv,)*
                }
            }
        }
    };
}

impl Reason {
    /// The contract's wire spelling of this reason.
    pub fn as_str(self) -> &'static str {
        self.code().as_str()
    }

    /// What the reason means, in a few words, for a human reading a
    /// refusal: `read_required` is "the file changed since it was read, or
    /// its token is missing or expired".
    pub fn describe(self) -> &'static str {
        self.code().describe()
    }

    /// Parses a wire code back into a reason.
    pub fn from_code(code: &str) -> Option<Reason> {
        WireCode::from_code(code).and_then(WireCode::reason)
    }

    /// Whether the request is `invalid_input` rather than `denied` when this
    /// is its reason.
    pub fn is_invalid_input(self) -> bool {
        self.code().level() == Level::Shape
    }
}

impl TargetReason {
    /// The contract's wire spelling of this reason.
    pub fn as_str(self) -> &'static str {
        self.code().as_str()
    }

    /// What the reason means, in a few words.
    pub fn describe(self) -> &'static str {
        self.code().describe()
    }
}

impl std::fmt::Display for WireCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Reason> for WireCode {
    fn from(r: Reason) -> WireCode {
        r.code()
    }
}

impl From<TargetReason> for WireCode {
    fn from(r: TargetReason) -> WireCode {
        r.code()
    }
}

registry! {
    request(32) {
        /// Malformed JSON shape, unknown field, missing field.
        InvalidInput = "invalid_input", Shape, "the request is malformed";
        /// Fewer than 1 or more than 100 entries.
        FileCount = "file_count", Shape, "a release names 1 to 100 targets";
        /// The same path twice.
        DuplicatePath = "duplicate_path", Shape, "the same path is named twice";
        /// Relative, `.`/`..`/empty component, trailing `/`, NUL, over-long.
        PathNotExact = "path_not_exact", Shape,
            "the path is not exact (relative, a . or .. or empty component, a trailing /, NUL, too long)";
        /// `*`, `?` or `[` in a path.
        GlobNotAllowed = "glob_not_allowed", Shape, "the path holds a glob character";
        /// Not every entry is `release_temporary`.
        MixedModes = "mixed_modes", Shape, "not every entry is release_temporary";
        /// `verify_command` with a release.
        VerificationNotAllowed = "verification_not_allowed", Shape, "a release takes no verify_command";
        /// Unknown or uninitialised thread.
        ThreadMismatch = "thread_mismatch", Request, "the thread is unknown or not initialised";
        /// `workspace_root` is not the exact initialised workspace.
        WorkspaceMismatch = "workspace_mismatch", Request, "not the exact initialised workspace";
        /// Outside this thread's session directory.
        NotSessionHelper = "not_session_helper", Request, "not below this thread's session directory";
        /// Inside another session's directory.
        OtherSession = "other_session", Request, "below another session's directory";
        /// Inside the reserved `.winx-release-*` namespace.
        ReservedNamespace = "reserved_namespace", Request, "inside the reserved .winx-release-* namespace";
        /// The path or a component of it is a symbolic link.
        Symlink = "symlink", Request, "the path or one of its components is a symbolic link";
        /// The helper has more than one link.
        Hardlink = "hardlink", Request, "the file has more than one name";
        /// Directory, device, fifo, socket.
        NotRegularFile = "not_regular_file", Request, "not a regular file";
        /// The file does not exist. (A guardian's error reply also answers
        /// it for a command id it does not know: never started, or pruned.)
        NotFound = "not_found", Request, "the file does not exist";
        /// Token missing, malformed, expired, or the file changed since it was read.
        ReadRequired = "read_required", Request,
            "the file changed since it was read, or its token is missing or expired";
        /// `expected_revision` is not the current content's.
        RevisionMismatch = "revision_mismatch", Request, "expected_revision is not the current content's";
        /// The mode or tool policy forbids mutation.
        PolicyDenied = "policy_denied", Request, "the mode or tool policy forbids mutation";
        /// No guardian reachable.
        OwnerUnavailable = "owner_unavailable", Request, "no guardian owns the session";
        /// The guardian does not advertise `temporary_release`.
        OwnerUnsupported = "owner_unsupported", Request, "the owner does not advertise temporary_release";
        /// The frontend runs embedded.
        EmbeddedRuntime = "embedded_runtime", Request, "the frontend runs embedded";
        /// Not Linux.
        UnsupportedPlatform = "unsupported_platform", Request, "release is supported on Linux only";
        /// A command of the thread is running.
        ExecutionActive = "execution_active", Request, "a command of the thread is running";
        /// A process of the user other than the owner and its frontends holds
        /// a target open or mapped.
        InUse = "in_use", Request, "a process holds the file open or mapped";
        /// The session has queued or unresolved actions.
        PendingActions = "pending_actions", Request, "the session has queued or unresolved actions";
        /// A backing-store entry is the same physical file as a target.
        BackingAlias = "backing_alias", Request, "a backing-store entry is the same physical file";
        /// A symbolic link inside a backing root.
        BackingSymlink = "backing_symlink", Request, "a symbolic link inside a backing root";
        /// A fifo, socket or device inside a backing root.
        BackingUnsupportedEntry = "backing_unsupported_entry", Request,
            "a fifo, socket or device inside a backing root";
        /// A backing-root entry cannot be opened or read.
        BackingInaccessible = "backing_inaccessible", Request, "a backing-root entry cannot be opened or read";
        /// More than 50,000 entries or deeper than 16 levels.
        BackingScanLimit = "backing_scan_limit", Request, "the backing roots exceed 50,000 entries or 16 levels";
        /// The filesystem cannot do `RENAME_NOREPLACE`.
        RenameUnsupported = "rename_unsupported", Request,
            "the filesystem cannot move it with RENAME_NOREPLACE into the session's quarantine";
    }
    target {
        /// What was captured in quarantine was not the pinned object.
        ReplacedDuringRelease = "replaced_during_release",
            "what was captured in quarantine was not the pinned object: put back";
        /// The captured object could not be put back: its name is occupied again.
        RestoreBlocked = "restore_blocked", "the captured object could not be put back: its name is occupied again";
        /// The filesystem or a disk quota is full (`ENOSPC`, `EDQUOT`).
        NoSpace = "no_space", "the filesystem or a disk quota is full";
        /// An I/O error stopped this target (a frontend's read or write,
        /// and a guardian's own I/O, answer it too).
        IoError = "io_error", "an I/O error";
        /// An earlier target failed; this one was not touched.
        StoppedAfterFailure = "stopped_after_failure", "an earlier target failed; this one was not touched";
    }
    own {
        /// A write would exceed a helper quota (contract sections 3 and 6).
        QuotaExceeded = "quota_exceeded", Frontend, "a write would exceed a helper quota";
        /// The receipt of a run that touched the filesystem could not be
        /// persisted.
        ReceiptUnavailable = "receipt_unavailable", Frontend,
            "the release touched the filesystem but its receipt could not be written";
        /// A tool failed inside the frontend (it panicked); the server goes
        /// on.
        InternalError = "internal_error", Frontend, "the tool failed inside the frontend";
        /// The op is not known to the guardian.
        UnknownOp = "unknown_op", Guardian, "the guardian does not know the op";
        /// The session directory cannot be made or opened without following
        /// links.
        SessionUnavailable = "session_unavailable", Guardian,
            "the session directory cannot be made or opened without following links";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire spellings, pinned: they must stay byte-identical (the
    /// contract's section 4, then the frontend's and the guardian's own).
    #[test]
    fn wire_spellings_are_pinned() {
        let got: Vec<&str> = WireCode::ALL.iter().map(|c| c.as_str()).collect();
        let want = [
            "invalid_input",
            "file_count",
            "duplicate_path",
            "path_not_exact",
            "glob_not_allowed",
            "mixed_modes",
            "verification_not_allowed",
            "thread_mismatch",
            "workspace_mismatch",
            "not_session_helper",
            "other_session",
            "reserved_namespace",
            "symlink",
            "hardlink",
            "not_regular_file",
            "not_found",
            "read_required",
            "revision_mismatch",
            "policy_denied",
            "owner_unavailable",
            "owner_unsupported",
            "embedded_runtime",
            "unsupported_platform",
            "execution_active",
            "in_use",
            "pending_actions",
            "backing_alias",
            "backing_symlink",
            "backing_unsupported_entry",
            "backing_inaccessible",
            "backing_scan_limit",
            "rename_unsupported",
            "replaced_during_release",
            "restore_blocked",
            "no_space",
            "io_error",
            "stopped_after_failure",
            "quota_exceeded",
            "receipt_unavailable",
            "internal_error",
            "unknown_op",
            "session_unavailable",
        ];
        assert_eq!(got, want);
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "a code spelled twice");
    }

    /// The views say what the registry says: serde's spelling is the
    /// registry's, and each view's code parses back to itself.
    #[test]
    fn views_agree_with_the_registry() {
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            assert_eq!(serde_json::from_value::<Reason>(r.as_str().into()).unwrap(), r);
            assert_eq!(Reason::from_code(r.as_str()), Some(r));
            assert_eq!(WireCode::from(r).reason(), Some(r));
        }
        let shape: Vec<&str> = Reason::ALL.iter().filter(|r| r.is_invalid_input()).map(|r| r.as_str()).collect();
        assert_eq!(
            shape,
            [
                "invalid_input",
                "file_count",
                "duplicate_path",
                "path_not_exact",
                "glob_not_allowed",
                "mixed_modes",
                "verification_not_allowed"
            ]
        );
        for c in WireCode::ALL.iter().copied() {
            if let Some(t) = c.target_reason() {
                assert_eq!(serde_json::to_value(t).unwrap(), c.as_str());
                assert_eq!(t.code(), c);
                assert_eq!(c.level(), Level::Target);
            }
            assert_eq!(c.reason().is_some(), matches!(c.level(), Level::Shape | Level::Request), "{c}");
            assert_eq!(WireCode::from_code(c.as_str()), Some(c));
        }
        assert_eq!(Reason::from_code("no_space"), None);
        assert_eq!(Reason::ReadRequired.describe(), Reason::ReadRequired.code().describe());
    }
}
