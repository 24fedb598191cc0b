//! Retention of the guardian's own backing stores (contract section 6b).
//!
//! The three backing roots share one 50,000-entry scan bound, and a release
//! fails closed past it. `D/executions` and `D/receipts` grow with use, so
//! the guardian keeps them within budget: the newest
//! [`RetentionPolicy::keep_executions`] resolved executions' payloads and the
//! receipts of the last [`RetentionPolicy::keep_receipts`] stay; older ones
//! are removed. A running or unresolved execution is never removed, and
//! nothing outside those two directories (`W/.winx/scratch`, helpers) is
//! ever touched.
//!
//! Removal never makes a concurrent release fail closed: each pruned entry
//! is first moved whole out of its backing root into the private staging
//! directory `D/retention` (outside every backing root) with
//! `RENAME_NOREPLACE`, and removed there through directory handles without
//! following links ([`remove::remove_tree`]). A scan therefore sees an
//! execution directory complete or not at all; and entries that vanish
//! while a scan runs are not a failure (see [`crate::scan`]).
//!
//! # References
//! - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html)
//! - [`unlinkat(2)`](https://man7.org/linux/man-pages/man2/unlinkat.2.html)

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

mod executions;
mod receipts;
pub mod remove;
mod usage;

pub(crate) use executions::prune_executions;
pub use executions::{ExecutionPrune, STATUS_FILE};
pub(crate) use receipts::prune_receipts;
pub use receipts::ReceiptPrune;
#[cfg(test)]
use usage::data_usage;
pub use usage::{backing_usage, backing_usage_in, data_usage_in, BackingUsage, WARN_PERCENT};

/// Default number of resolved executions kept.
pub const DEFAULT_KEEP_EXECUTIONS: usize = 2_000;
/// Default receipt retention, in days.
pub const DEFAULT_KEEP_RECEIPTS_DAYS: u64 = 30;
/// The staging directory below `D`, outside every backing root.
pub const STAGING_DIR: &str = "retention";
/// The longest a pass leaves `D/receipts` unlooked at (see
/// `receipts_every`).
pub const RECEIPTS_EVERY_MAX: Duration = Duration::from_secs(60);

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// How much the guardian keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Newest resolved executions kept in `D/executions`.
    pub keep_executions: usize,
    /// Receipts younger than this are kept.
    pub keep_receipts: Duration,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            keep_executions: DEFAULT_KEEP_EXECUTIONS,
            keep_receipts: Duration::from_secs(DEFAULT_KEEP_RECEIPTS_DAYS * 86_400),
        }
    }
}

/// The opened staging directory `D/retention`.
#[derive(Debug)]
pub struct Staging {
    dir: OwnedFd,
}

/// Opens the data directory `D` for retention.
///
/// Its path is resolved by the kernel once, links included (a symlinked
/// `~/.local/share/winx` is common: dotfiles managers, a data disk), and
/// what it reaches is trusted only when it is a directory owned by this
/// user and not writable by others; everything below it (staging, the
/// stores, their entries) is then opened relative to that descriptor,
/// never following a link.
///
/// # References
/// - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
/// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
pub(crate) fn open_data_dir(data_dir: &Path) -> io::Result<OwnedFd> {
    let d = rustix::fs::openat(CWD, data_dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&d)?;
    let others_write = st.st_mode & 0o002 != 0;
    if st.st_uid != rustix::process::geteuid().as_raw() || others_write {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "data directory {} resolves to a directory not owned by this user, or writable by others: not \
                 pruned",
                data_dir.display()
            ),
        ));
    }
    Ok(d)
}

impl Staging {
    /// Opens (creating, mode 0700) `data_dir/retention`: the data directory
    /// as `open_data_dir` resolves it, `retention` without following a
    /// link.
    pub fn open(data_dir: &Path) -> io::Result<Staging> {
        Staging::open_in(open_data_dir(data_dir)?.as_fd())
    }

    /// Opens (creating, mode 0700) `retention` in the opened data
    /// directory `d`, without following a link.
    pub(crate) fn open_in(d: BorrowedFd<'_>) -> io::Result<Staging> {
        match rustix::fs::mkdirat(d, STAGING_DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let dir = rustix::fs::openat(d, STAGING_DIR, DIR_FLAGS, Mode::empty())?;
        Ok(Staging { dir })
    }

    /// Removes whatever an earlier pass left in staging, entry by entry:
    /// one that cannot be removed (deeper than
    /// [`remove::REMOVE_MAX_DEPTH`] levels, a directory it may not write)
    /// is left and counted, and the others are still removed. Returns the
    /// entries removed and the staged trees left.
    pub(crate) fn clear(&self) -> io::Result<(u64, u64)> {
        let (mut removed, mut stuck) = (0, 0);
        for name in remove::list(&self.dir)? {
            match remove::remove_tree(self.dir.as_fd(), &name, 1) {
                Ok(r) => removed += r.entries,
                Err(e) => {
                    stuck += 1;
                    tracing::warn!(staged = name, error = %e, "retention cannot remove a staged tree; left in staging");
                }
            }
        }
        Ok((removed, stuck))
    }
}

/// Staged trees waiting in `data_dir/retention`: more than none between
/// passes means retention is behind (something it moved out of a backing
/// root could not be removed). `0` when there is no staging directory.
pub(crate) fn staged_entries(data_dir: &Path) -> u64 {
    let d = rustix::fs::openat(CWD, data_dir.join(STAGING_DIR), DIR_FLAGS, Mode::empty());
    d.ok().and_then(|d| remove::list(&d).ok()).map_or(0, |names| names.len() as u64)
}

/// What one retention pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PruneReport {
    /// The executions part.
    pub executions: ExecutionPrune,
    /// The receipts part.
    pub receipts: ReceiptPrune,
    /// Entries left over in staging by an interrupted pass, removed now.
    pub staging_cleared: u64,
    /// Staged trees that could not be removed and stay in staging: when
    /// not zero, retention is behind (see `PruneReport::behind`).
    pub staging_stuck: u64,
}

impl PruneReport {
    /// Entries this pass could not remove (staged trees left, executions
    /// and receipts that failed): retention is behind when not zero.
    pub(crate) fn behind(&self) -> u64 {
        self.staging_stuck + self.executions.failed + self.receipts.failed
    }
}

/// The retention state of one data directory: its policy and what earlier
/// passes learnt (which executions are resolved, and when they ended).
#[derive(Debug)]
pub struct Retention {
    data_dir: PathBuf,
    policy: RetentionPolicy,
    resolved: HashMap<String, u64>,
    receipts_pruned: Option<SystemTime>,
}

/// How often a pass looks at `D/receipts`, for a receipt window of
/// `keep`: a 1,440th of the window (a minute a day), at most
/// [`RECEIPTS_EVERY_MAX`]; every pass for a window of 0.
///
/// A pass runs after every release (debounced), and looking at the
/// receipts is one `statx` per receipt: with tens of thousands of receipts
/// that was most of a core under steady releases, for a window counted in
/// days. A receipt so lives at most this much past its window: a minute
/// past 30 days.
pub(crate) fn receipts_every(keep: Duration) -> Duration {
    (keep / 1440).min(RECEIPTS_EVERY_MAX)
}

impl Retention {
    /// Retention of `data_dir` under `policy`.
    pub fn new(data_dir: &Path, policy: RetentionPolicy) -> Retention {
        Retention { data_dir: data_dir.to_path_buf(), policy, resolved: HashMap::new(), receipts_pruned: None }
    }

    /// Runs one pass: clears staging, prunes executions (asking `claim`
    /// before each, see `prune_executions`) and receipts older than the
    /// window as of `now`. Receipts are looked at on the first pass and
    /// then once `receipts_every` has gone by since they last were (or
    /// the clock went back); otherwise the report's receipts part is
    /// zero.
    ///
    /// Best effort per entry: an entry that cannot be removed is left,
    /// counted (`PruneReport::behind`) and logged, and the pass goes on;
    /// a store that cannot be read does not keep the other from its pass.
    /// The data directory is resolved once per pass (`open_data_dir`).
    /// A missing data directory, `D/executions` or `D/receipts` is empty.
    /// A backing root that is a link or not a directory is left alone.
    pub fn pass(&mut self, now: SystemTime, claim: &mut dyn FnMut(&str) -> bool) -> io::Result<PruneReport> {
        let mut report = PruneReport::default();
        let d = match open_data_dir(&self.data_dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
            Err(e) => return Err(e),
        };
        let staging = Staging::open_in(d.as_fd())?;
        (report.staging_cleared, report.staging_stuck) = staging.clear()?;
        let mut first_error = None;
        match open_store(d.as_fd(), "executions") {
            Ok(Some(root)) => {
                match prune_executions(root.as_fd(), &staging, self.policy.keep_executions, &mut self.resolved, claim) {
                    Ok(r) => report.executions = r,
                    Err(e) => first_error = Some(e),
                }
            }
            Ok(None) => {}
            Err(e) => first_error = Some(e),
        }
        let every = receipts_every(self.policy.keep_receipts);
        let due = self.receipts_pruned.is_none_or(|t| now.duration_since(t).map_or(true, |gone| gone >= every));
        if due {
            match open_store(d.as_fd(), "receipts") {
                Ok(Some(root)) => match prune_receipts(root.as_fd(), &staging, self.policy.keep_receipts, now) {
                    Ok(r) => {
                        report.receipts = r;
                        self.receipts_pruned = Some(now);
                    }
                    Err(e) => first_error = first_error.or(Some(e)),
                },
                Ok(None) => self.receipts_pruned = Some(now),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        if report.behind() > 0 {
            tracing::warn!(
                staged_left = report.staging_stuck,
                executions_failed = report.executions.failed,
                receipts_failed = report.receipts.failed,
                "retention is behind: entries it could not remove stay (see `winx-release audit`, \
                 retention_staged)"
            );
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

/// Opens the store `name` of the opened data directory, without following
/// a link. `None`: it does not exist, or it is not a plain directory (left
/// alone; a release's scan reports it).
fn open_store(d: BorrowedFd<'_>, name: &str) -> io::Result<Option<OwnedFd>> {
    match rustix::fs::openat(d, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
