//! How much of the shared 50,000-entry bound the backing roots use.
//!
//! Counted with the synchronous scan over the same roots a release scans,
//! with no alias set and no entry bound (so a count past the bound is still
//! a number), the depth bound unchanged.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Reason;
use crate::layout::Layout;
use crate::release::open_backing_roots;
use crate::scan::{
    open_root, DirCache, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRequest, ScanRoot, SyncBackend, MAX_DEPTH,
    MAX_ENTRIES,
};

/// Share of the bound past which a warning is given, in percent.
pub const WARN_PERCENT: u64 = 80;

/// Backing-root usage, as `winx-release audit` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackingUsage {
    /// Entries in the backing roots (directories and files, roots not counted).
    pub backing_entries: u64,
    /// The shared bound, 50,000.
    pub backing_limit: u64,
    /// A warning when `backing_entries` is over [`WARN_PERCENT`] of the
    /// bound; `null` otherwise.
    pub backing_warning: Option<String>,
    /// Why counting stopped early (a link, an unreadable entry...): the
    /// count is then a lower bound, and a release would fail closed.
    pub backing_scan_reason: Option<Reason>,
    /// Where counting stopped early.
    pub backing_scan_path: Option<PathBuf>,
    /// Trees retention moved out of the backing roots but could not remove
    /// (they wait in `D/retention`). Not zero means retention is behind:
    /// see [`retention_warning`](BackingUsage::retention_warning).
    pub retention_staged: u64,
    /// What to do when `retention_staged` is not zero; `null` otherwise.
    pub retention_warning: Option<String>,
}

impl BackingUsage {
    fn from_report(r: &ScanReport, data_dir: &Path) -> BackingUsage {
        let entries = if r.failed_closed() { r.entries.saturating_sub(1) } else { r.entries };
        BackingUsage {
            backing_entries: entries,
            backing_limit: MAX_ENTRIES,
            backing_warning: warning(entries),
            backing_scan_reason: r.reason,
            backing_scan_path: r.path.clone(),
            ..BackingUsage::staged(data_dir)
        }
    }

    fn failed(reason: Reason, path: PathBuf, data_dir: &Path) -> BackingUsage {
        BackingUsage {
            backing_entries: 0,
            backing_limit: MAX_ENTRIES,
            backing_warning: None,
            backing_scan_reason: Some(reason),
            backing_scan_path: Some(path),
            ..BackingUsage::staged(data_dir)
        }
    }

    fn staged(data_dir: &Path) -> BackingUsage {
        let staged = super::staged_entries(data_dir);
        BackingUsage {
            backing_entries: 0,
            backing_limit: MAX_ENTRIES,
            backing_warning: None,
            backing_scan_reason: None,
            backing_scan_path: None,
            retention_staged: staged,
            retention_warning: (staged > 0).then(|| {
                format!(
                    "retention is behind: {staged} pruned tree(s) could not be removed and wait in {}; the \
                     guardian's log names each one (remove them by hand, e.g. a read-only directory or one \
                     deeper than 16 levels)",
                    data_dir.join(super::STAGING_DIR).display()
                )
            }),
        }
    }
}

/// The warning for `entries`, if over [`WARN_PERCENT`] of the bound.
pub fn warning(entries: u64) -> Option<String> {
    (entries * 100 > MAX_ENTRIES * WARN_PERCENT).then(|| {
        format!(
            "backing roots hold {entries} entries, over {WARN_PERCENT}% of the {MAX_ENTRIES}-entry bound; past it \
             every release fails closed (lower the guardian's --keep-executions / --keep-receipts-days, or clear \
             .winx/scratch)"
        )
    })
}

const COUNT_LIMITS: ScanLimits = ScanLimits { max_entries: u64::MAX, max_depth: MAX_DEPTH };

/// Counts `roots` without a bound: a lean scan (entries, and where and why
/// counting stopped, are a full scan's; sizes are not needed), through
/// `cache` when given.
fn count(roots: &[ScanRoot], cache: Option<&DirCache>) -> ScanReport {
    let none = HashSet::new();
    match cache {
        Some(cache) => cache.scan(roots, COUNT_LIMITS, &none),
        None => SyncBackend.scan(&ScanRequest { roots, limits: COUNT_LIMITS, aliases: &none, mode: ScanMode::Lean }),
    }
}

/// Counts the three backing roots of `layout` as a release would see them.
pub fn backing_usage(layout: &Layout) -> BackingUsage {
    backing_usage_in(layout, None)
}

/// [`backing_usage`] through `cache` when given (a guardian's
/// [`DirCache`], so that a periodic count reads only the directories that
/// changed since the last scan).
pub fn backing_usage_in(layout: &Layout, cache: Option<&DirCache>) -> BackingUsage {
    match open_backing_roots(layout) {
        Ok(roots) => BackingUsage::from_report(&count(&roots, cache), layout.data_dir()),
        Err((reason, path)) => BackingUsage::failed(reason, path, layout.data_dir()),
    }
}

/// Counts the data directory's two backing roots (`D/executions`,
/// `D/receipts`), shared by every workspace.
#[cfg(test)]
pub(crate) fn data_usage(data_dir: &Path) -> BackingUsage {
    data_usage_in(data_dir, None)
}

/// Counts the data directory's two backing roots (`D/executions`,
/// `D/receipts`), shared by every workspace, through `cache` when given.
pub fn data_usage_in(data_dir: &Path, cache: Option<&DirCache>) -> BackingUsage {
    let mut roots = Vec::new();
    for name in ["executions", "receipts"] {
        match open_root(&data_dir.join(name)) {
            Ok(r) => roots.push(r),
            Err(f) => return BackingUsage::failed(f.reason, f.path, data_dir),
        }
    }
    BackingUsage::from_report(&count(&roots, cache), data_dir)
}
