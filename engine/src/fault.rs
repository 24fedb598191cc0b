//! Deterministic fault points between the steps of a release.
//!
//! A [`FaultHook`] passed in [`crate::release::ReleaseOptions`] is called at
//! every [`FaultPoint`]. It may change the filesystem (swap a target, occupy
//! a name again) or return an error, which the release treats as an I/O
//! error at exactly that step. Release builds carry the hook as an ordinary
//! trait object; no environment variable enables it.

use std::io;
use std::path::Path;

/// A point between two steps of a release.
#[non_exhaustive]
#[derive(Debug)]
pub enum FaultPoint<'a> {
    /// Every target was checked; the backing-root scan is next.
    BeforeScan,
    /// Every target and the backing roots were checked; nothing moved yet.
    AfterChecks,
    /// The quarantine directory exists and the intent journal is durable.
    AfterJournal {
        /// The quarantine directory.
        quarantine: &'a Path,
    },
    /// About to rename target `index` into quarantine.
    BeforeRename {
        /// Index of the target in the request.
        index: usize,
        /// The target's path.
        path: &'a Path,
    },
    /// Target `index` was renamed into quarantine.
    AfterRename {
        /// Index of the target in the request.
        index: usize,
        /// The target's path.
        path: &'a Path,
        /// Where it now is.
        quarantined: &'a Path,
    },
    /// The captured object was re-identified and re-hashed, and is about to
    /// be unlinked (`verified`) or restored.
    AfterRecheck {
        /// Index of the target in the request.
        index: usize,
        /// Where it is.
        quarantined: &'a Path,
        /// Whether it is the pinned object.
        verified: bool,
    },
    /// The verified object was unlinked.
    AfterUnlink {
        /// Index of the target in the request.
        index: usize,
    },
    /// About to restore the captured object under its original name.
    BeforeRestore {
        /// Index of the target in the request.
        index: usize,
        /// The original path.
        path: &'a Path,
    },
    /// Recovery is about to open a journal's quarantine directory; an error
    /// returned here stands for the open's error.
    RecoveryOpenQuarantine {
        /// The quarantine directory.
        quarantine: &'a Path,
    },
    /// A release or recovery is about to `fsync` a directory whose entries
    /// it changed (a restored target's parent, the session directory after
    /// the quarantine's removal); an error returned here stands for the
    /// `fsync`'s error.
    DirSync {
        /// The directory.
        dir: &'a Path,
    },
}

impl FaultPoint<'_> {
    /// A short stable name of this point, for logs and crash tests.
    // Hidden: for the crash tests, which name the point they stop at.
    #[doc(hidden)]
    pub fn as_str(&self) -> &'static str {
        match self {
            FaultPoint::BeforeScan => "before_scan",
            FaultPoint::AfterChecks => "after_checks",
            FaultPoint::AfterJournal { .. } => "after_journal",
            FaultPoint::BeforeRename { .. } => "before_rename",
            FaultPoint::AfterRename { .. } => "after_rename",
            FaultPoint::AfterRecheck { .. } => "after_recheck",
            FaultPoint::AfterUnlink { .. } => "after_unlink",
            FaultPoint::BeforeRestore { .. } => "before_restore",
            FaultPoint::RecoveryOpenQuarantine { .. } => "recovery_open_quarantine",
            FaultPoint::DirSync { .. } => "dir_sync",
        }
    }

    /// The target index, if the point concerns one target.
    // Hidden: for the crash tests, which name the point they stop at.
    #[doc(hidden)]
    pub fn index(&self) -> Option<usize> {
        match self {
            FaultPoint::BeforeScan
            | FaultPoint::AfterChecks
            | FaultPoint::AfterJournal { .. }
            | FaultPoint::RecoveryOpenQuarantine { .. }
            | FaultPoint::DirSync { .. } => None,
            FaultPoint::BeforeRename { index, .. }
            | FaultPoint::AfterRename { index, .. }
            | FaultPoint::AfterRecheck { index, .. }
            | FaultPoint::AfterUnlink { index }
            | FaultPoint::BeforeRestore { index, .. } => Some(*index),
        }
    }
}

/// Code run at each fault point.
pub trait FaultHook: Sync {
    /// Called at `point`; an error is injected as an I/O error there.
    fn at(&self, point: &FaultPoint<'_>) -> io::Result<()>;
}

impl<F: Fn(&FaultPoint<'_>) -> io::Result<()> + Sync> FaultHook for F {
    fn at(&self, point: &FaultPoint<'_>) -> io::Result<()> {
        self(point)
    }
}
