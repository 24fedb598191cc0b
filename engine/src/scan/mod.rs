//! The backing-root scan (contract section 5).
//!
//! One scan serves all backing roots of a release: at most
//! [`ScanLimits::max_entries`] entries in all and [`ScanLimits::max_depth`]
//! levels below each root, links never followed. A root's children are at
//! depth 1. Symbolic links, fifos, sockets, devices, unreadable entries, the
//! bound, and any entry whose (device, inode) is in the alias set fail closed.
//!
//! Backends implement [`ScanBackend`] side by side: [`SyncBackend`]
//! (`sync.rs`: rustix `openat`, getdents64 and `statx(AT_SYMLINK_NOFOLLOW)`
//! on the calling thread) and [`UringBackend`] (`uring/`: parallel walkers
//! with batched `openat`/`statx` on io_uring where the kernel allows). They
//! decide what each entry is; the counting and bound rules live once, in
//! `tally.rs`, and every backend calls them in the same order, so all give
//! identical reports.
//!
//! # References
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Instant;

use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;

mod auto;
mod cache;
pub use cache::{descriptor_budget, DirLook};
mod lean;
pub use lean::on_trusted_filesystem;
pub(crate) use lean::read_mount_table;
mod root;
mod shared;
mod sync;
mod tally;
mod threads;
pub(crate) mod uring;
mod waiting;

pub use auto::{auto_backend, backend_for, AutoBackend, BackendChoice};
pub use cache::{CacheStats, DirCache};
pub use shared::{RootSpec, SharedScanner, SharedStats};

// Hidden: a test hook (a mount made mid-scan).
#[doc(hidden)]
pub use lean::after_next_mount_table_read;
pub use lean::{trusts_d_ino, ScanMode, TRUSTED_FILESYSTEMS, WAITING_FILESYSTEMS};
pub(crate) use root::fail_report;
pub use root::{open_root, open_root_beneath, scan_paths, scan_paths_with, RootFailure};
pub use sync::SyncBackend;
pub use threads::ThreadsBackend;
pub use uring::{UringBackend, UringConfig};

/// The contract's bound on entries across all roots of one scan.
pub const MAX_ENTRIES: u64 = 50_000;
/// The contract's bound on depth below each root.
pub const MAX_DEPTH: u32 = 16;

/// Bounds of one scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanLimits {
    /// Entries allowed in all roots together; entry number `max_entries + 1`
    /// fails the scan.
    pub max_entries: u64,
    /// Deepest level allowed; a root's children are at depth 1, an entry at
    /// depth `max_depth + 1` fails the scan.
    pub max_depth: u32,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits { max_entries: MAX_ENTRIES, max_depth: MAX_DEPTH }
    }
}

/// A root opened for scanning.
#[derive(Debug)]
pub struct ScanRoot {
    /// The root's path, for reports.
    pub path: PathBuf,
    /// The opened directory, or `None` when the root does not exist (an
    /// empty root).
    pub dir: Option<OwnedFd>,
}

/// The verdict of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every entry was inspected and none failed closed.
    Clean,
    /// Something failed closed; see [`ScanReport::reason`].
    FailClosed,
}

/// Which backend produced a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// The io_uring backend.
    Uring,
    /// The synchronous rustix backend.
    Sync,
    /// Parallel walkers on plain system calls.
    Threads,
}

/// The result of a scan, shaped as `winx-release scan` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ScanReport {
    /// `clean` or `fail_closed`.
    pub verdict: Verdict,
    /// The fail-closed reason: one of `backing_alias`, `backing_symlink`,
    /// `backing_unsupported_entry`, `backing_inaccessible`,
    /// `backing_scan_limit`.
    pub reason: Option<Reason>,
    /// The offending path.
    pub path: Option<PathBuf>,
    /// Entries inspected (roots themselves not counted).
    pub entries: u64,
    /// Directories among them.
    pub directories: u64,
    /// Regular files among them.
    pub files: u64,
    /// Sum of regular files' sizes; `None` when the scan did not measure
    /// them ([`ScanMode::Lean`]).
    pub bytes: Option<u64>,
    /// Deepest level seen.
    pub max_depth: u32,
    /// The backend that ran.
    pub backend: BackendKind,
    /// Wall time of the scan.
    pub elapsed_us: u64,
}

impl ScanReport {
    /// Whether the scan failed closed.
    pub fn failed_closed(&self) -> bool {
        self.verdict == Verdict::FailClosed
    }
}

/// One scan asked of a [`ScanBackend`].
#[derive(Clone, Copy, Debug)]
pub struct ScanRequest<'a> {
    /// The opened roots, scanned in order under one shared bound.
    pub roots: &'a [ScanRoot],
    /// The bound.
    pub limits: ScanLimits,
    /// Identities that fail the scan closed wherever they are met (a
    /// release's targets).
    pub aliases: &'a HashSet<PhysicalId>,
    /// [`ScanMode::Sizes`] measures every regular file; [`ScanMode::Lean`]
    /// gives the same verdict, path and counts without `statx`ing what
    /// getdents64 already tells, and no `bytes`.
    pub mode: ScanMode,
}

/// A scan strategy.
pub trait ScanBackend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Scans `req.roots` under one shared bound, failing closed on the first
    /// offending entry or any entry whose identity is in `req.aliases`.
    fn scan(&self, req: &ScanRequest<'_>) -> ScanReport;
}

/// Builds a report from a backend's tally and first failure.
fn report(backend: BackendKind, t: &tally::Tally, failure: Option<tally::Failure>, start: Instant) -> ScanReport {
    let (verdict, reason, path) = match failure {
        Some(f) => (Verdict::FailClosed, Some(f.reason), Some(f.path)),
        None => (Verdict::Clean, None, None),
    };
    ScanReport {
        verdict,
        reason,
        path,
        entries: t.entries,
        directories: t.directories,
        files: t.files,
        bytes: t.bytes,
        max_depth: t.max_depth,
        backend,
        elapsed_us: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
    }
}
