//! Pruning retained execution payloads (`D/executions/<command_id>/`).
//!
//! An execution directory is a candidate only when its `status.json` says
//! `"state": "resolved"` (the guardian writes that once no process of the
//! execution remains) *and* the guardian's `claim` agrees. Resolved
//! executions are ordered by when that status was written (the status
//! file's modification time, in nanoseconds; then by name); the newest
//! `keep` stay. Each removed one is first moved whole, with
//! `RENAME_NOREPLACE`, out of the backing root into the private staging
//! directory `D/retention`, so a concurrent backing-root scan sees the
//! directory either complete or not at all; only then is it emptied and
//! removed there.
//!
//! # References
//! - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};
use rustix::io::Errno;

use super::remove::{list, remove_tree};
use super::Staging;
use crate::quarantine::rename_noreplace;

/// The name of an execution's status file.
pub const STATUS_FILE: &str = "status.json";
/// Largest status file read.
const MAX_STATUS_BYTES: u64 = 64 * 1024;

/// What one pass over `D/executions` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExecutionPrune {
    /// Resolved executions seen.
    pub resolved: u64,
    /// Executions not resolved (running, or unreadable status): never removed.
    pub unresolved: u64,
    /// Executions removed.
    pub removed: u64,
    /// Entries (directories and files) removed with them.
    pub entries_removed: u64,
    /// Candidates the guardian did not let go (still running in its table).
    pub refused: u64,
    /// Executions that could not be removed (left, and logged).
    pub failed: u64,
}

/// What a status file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadStatus {
    /// Resolved; its status file was last written at this time
    /// (nanoseconds since the epoch).
    Resolved(u64),
    /// Anything else: running, unreadable, missing.
    Unresolved,
}

/// Reads `dir/status.json` (no-follow, bounded) and classifies it.
pub fn read_status(exec_root: BorrowedFd<'_>, name: &str) -> PayloadStatus {
    let flags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
    let Ok(dir) = rustix::fs::openat(exec_root, name, flags, Mode::empty()) else { return PayloadStatus::Unresolved };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(&dir, STATUS_FILE, flags, Mode::empty()) else {
        return PayloadStatus::Unresolved;
    };
    let mtime = rustix::fs::statx(&fd, c"", AtFlags::EMPTY_PATH, StatxFlags::TYPE | StatxFlags::MTIME).ok();
    if !mtime.as_ref().is_some_and(|st| FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::RegularFile) {
        return PayloadStatus::Unresolved;
    }
    let mut bytes = Vec::new();
    if std::fs::File::from(fd).take(MAX_STATUS_BYTES).read_to_end(&mut bytes).is_err() {
        return PayloadStatus::Unresolved;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return PayloadStatus::Unresolved };
    if v.get("state").and_then(serde_json::Value::as_str) != Some("resolved") {
        return PayloadStatus::Unresolved;
    }
    // The status file is rewritten when the execution resolves, so its
    // modification time (to the nanosecond; `ended_unix` is whole seconds)
    // orders resolutions.
    let ns = mtime.map_or(0, |st| {
        u64::try_from(st.stx_mtime.tv_sec).unwrap_or(0).saturating_mul(1_000_000_000) + u64::from(st.stx_mtime.tv_nsec)
    });
    PayloadStatus::Resolved(ns)
}

/// Prunes `exec_root` (the opened `D/executions`) down to the newest `keep`
/// resolved executions.
///
/// `resolved` caches what earlier passes read (a resolved execution stays
/// resolved); names no longer present are dropped from it. `claim(id)` is
/// asked right before an execution is moved away: it returns false to keep
/// it (the guardian still counts it as running), true to let it go (and
/// the guardian forgets it).
pub fn prune_executions(
    exec_root: BorrowedFd<'_>,
    staging: &Staging,
    keep: usize,
    resolved: &mut HashMap<String, u64>,
    claim: &mut dyn FnMut(&str) -> bool,
) -> io::Result<ExecutionPrune> {
    let names = list(exec_root)?;
    let mut report = ExecutionPrune::default();
    let present: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    resolved.retain(|n, _| present.contains(n.as_str()));
    let mut done: Vec<(u64, &str)> = Vec::with_capacity(names.len());
    for name in &names {
        if let Some(&ended) = resolved.get(name) {
            done.push((ended, name));
            continue;
        }
        match read_status(exec_root, name) {
            PayloadStatus::Resolved(ended) => {
                resolved.insert(name.clone(), ended);
                done.push((ended, name));
            }
            PayloadStatus::Unresolved => report.unresolved += 1,
        }
    }
    report.resolved = done.len() as u64;
    if done.len() <= keep {
        return Ok(report);
    }
    // Newest first; everything after the first `keep` goes.
    done.sort_unstable_by(|a, b| b.cmp(a));
    for &(_, name) in &done[keep..] {
        if !claim(name) {
            report.refused += 1;
            continue;
        }
        match staging.take(exec_root, name) {
            Ok(Some(n)) => {
                report.removed += 1;
                report.entries_removed += n;
                resolved.remove(name);
            }
            Ok(None) => {
                resolved.remove(name);
            }
            Err(e) => {
                report.failed += 1;
                tracing::warn!(command_id = name, error = %e, "retention could not remove an execution");
            }
        }
    }
    Ok(report)
}

impl Staging {
    /// Moves the entry `name` of `root` into staging (`RENAME_NOREPLACE`,
    /// under a fresh name) and removes it there. `None`: it was gone already.
    /// Where staging is on another filesystem (`EXDEV`) the entry is removed
    /// in place instead: a concurrent scan treats entries that vanish as
    /// never seen.
    pub(crate) fn take(&self, root: BorrowedFd<'_>, name: &str) -> io::Result<Option<u64>> {
        let staged = format!("{}-{name}", winx_release_kernel::sys::random_hex(4));
        match rename_noreplace(root, name, self.dir.as_fd(), &staged) {
            Ok(()) => remove_tree(self.dir.as_fd(), &staged, 1).map(|r| Some(r.entries)),
            Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => Ok(None),
            Err(e) if e.raw_os_error() == Some(Errno::XDEV.raw_os_error()) => {
                remove_tree(root, name, 1).map(|r| Some(r.entries))
            }
            Err(e) => Err(e),
        }
    }
}
