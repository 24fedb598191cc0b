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
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

mod executions;
mod receipts;
pub mod remove;
mod usage;

pub use executions::{prune_executions, read_status, ExecStatus, ExecutionPrune, STATUS_FILE};
pub use receipts::{is_receipt_name, prune_receipts, ReceiptPrune};
pub use usage::{backing_usage, data_usage, BackingUsage, WARN_PERCENT};

/// Default number of resolved executions kept.
pub const DEFAULT_KEEP_EXECUTIONS: usize = 2_000;
/// Default receipt retention, in days.
pub const DEFAULT_KEEP_RECEIPTS_DAYS: u64 = 30;
/// The staging directory below `D`, outside every backing root.
pub const STAGING_DIR: &str = "retention";

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

impl Staging {
    /// Opens (creating, mode 0700) `data_dir/retention`, its final
    /// component without following a link.
    pub fn open(data_dir: &Path) -> io::Result<Staging> {
        let d = rustix::fs::openat(CWD, data_dir, DIR_FLAGS, Mode::empty())?;
        match rustix::fs::mkdirat(&d, STAGING_DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let dir = rustix::fs::openat(&d, STAGING_DIR, DIR_FLAGS, Mode::empty())?;
        Ok(Staging { dir })
    }

    /// Removes whatever an interrupted pass left in staging. Returns the
    /// entries removed.
    pub fn clear(&self) -> io::Result<u64> {
        let mut n = 0;
        for name in remove::list(&self.dir)? {
            n += remove::remove_tree(self.dir.as_fd(), &name, 1)?.entries;
        }
        Ok(n)
    }
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
}

/// The retention state of one data directory: its policy and what earlier
/// passes learnt (which executions are resolved, and when they ended).
#[derive(Debug)]
pub struct Retention {
    data_dir: PathBuf,
    policy: RetentionPolicy,
    resolved: HashMap<String, u64>,
}

impl Retention {
    /// Retention of `data_dir` under `policy`.
    pub fn new(data_dir: &Path, policy: RetentionPolicy) -> Retention {
        Retention { data_dir: data_dir.to_path_buf(), policy, resolved: HashMap::new() }
    }

    /// The policy.
    pub fn policy(&self) -> RetentionPolicy {
        self.policy
    }

    /// Runs one pass: clears staging, prunes executions (asking `claim`
    /// before each, see [`prune_executions`]) and receipts older than the
    /// window as of `now`.
    ///
    /// A missing data directory, `D/executions` or `D/receipts` is empty.
    /// A backing root that is a link or not a directory is left alone.
    pub fn pass(&mut self, now: SystemTime, claim: &mut dyn FnMut(&str) -> bool) -> io::Result<PruneReport> {
        let mut report = PruneReport::default();
        let staging = match Staging::open(&self.data_dir) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
            Err(e) => return Err(e),
        };
        report.staging_cleared = staging.clear()?;
        if let Some(root) = open_store(&self.data_dir.join("executions"))? {
            report.executions =
                prune_executions(root.as_fd(), &staging, self.policy.keep_executions, &mut self.resolved, claim)?;
        }
        if let Some(root) = open_store(&self.data_dir.join("receipts"))? {
            report.receipts = prune_receipts(root.as_fd(), &staging, self.policy.keep_receipts, now)?;
        }
        Ok(report)
    }
}

/// Opens a store directory, its final component without following a link.
/// `None`: it does not exist, or it is not a plain directory (left alone;
/// a release's scan reports it).
fn open_store(path: &Path) -> io::Result<Option<OwnedFd>> {
    match rustix::fs::openat(CWD, path, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
