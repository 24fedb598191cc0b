//! Pruning mutation receipts (`D/receipts/<hh>/<fingerprint>.json`, and
//! flat `D/receipts/<fingerprint>.json` of earlier versions) older than
//! the retention window. `<hh>` is a shard directory named by the
//! fingerprint's first two hex digits; empty shards are left (at most 256).
//!
//! Age is the file's modification time (the frontend writes a receipt once,
//! with a temporary file and a rename). Only regular files whose names the
//! frontend makes are considered: `<64 hex>.json` receipts and leftover
//! `.<name>.tmp-*` temporaries of an interrupted write. An old one is moved
//! into the private staging directory with `RENAME_NOREPLACE` and looked at
//! again there: if what was moved is young after all (a new receipt was
//! renamed over the name between the look and the move), it is put back
//! without overwriting; otherwise it is removed.
//!
//! A replay whose receipt was pruned is simply not a replay any more: the
//! frontend judges the request afresh (a released helper is then
//! `not_found`).
//!
//! # References
//! - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, StatxFlags};
use rustix::io::Errno;

use super::remove::list;
use super::Staging;
use crate::quarantine::rename_noreplace;

/// What one pass over `D/receipts` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReceiptPrune {
    /// Receipts (and leftover temporaries) seen.
    pub seen: u64,
    /// Removed for age.
    pub removed: u64,
    /// Old receipts that could not be removed (left, and logged).
    pub failed: u64,
}

/// Whether `name` is one the frontend's receipt store makes.
pub fn is_receipt_name(name: &str) -> bool {
    let receipt =
        |s: &str| s.strip_suffix(".json").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    receipt(name) || name.strip_prefix('.').and_then(|s| s.split_once(".tmp-")).is_some_and(|(r, _)| receipt(r))
}

/// Whether `name` is a receipt shard directory's: two lowercase hex
/// digits.
pub fn is_shard_name(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Modification time (seconds since the epoch) of the regular file `name`
/// in `dir`, never following a link. `None`: gone, or not a regular file.
fn mtime(dir: BorrowedFd<'_>, name: &str) -> io::Result<Option<i64>> {
    match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE | StatxFlags::MTIME) {
        Ok(st) if FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::RegularFile => {
            Ok(Some(st.stx_mtime.tv_sec))
        }
        Ok(_) | Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removes receipts in `root` (the opened `D/receipts`) last modified more
/// than `max_age` before `now`.
pub fn prune_receipts(
    root: BorrowedFd<'_>,
    staging: &Staging,
    max_age: Duration,
    now: SystemTime,
) -> io::Result<ReceiptPrune> {
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let cutoff = i64::try_from(now.saturating_sub(max_age.as_secs())).unwrap_or(i64::MAX);
    let mut report = ReceiptPrune::default();
    // One listing per directory: a second `getdents64` through the same
    // descriptor would go on from where the first ended.
    let names = list(root)?;
    for name in names.iter().filter(|n| is_shard_name(n)) {
        let shard = match rustix::fs::openat(root, name.as_str(), super::DIR_FLAGS, Mode::empty()) {
            Ok(shard) => list(&shard).map(|inner| (inner, shard)),
            // Gone, a link or not a directory: not a shard of ours.
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
            Err(e) => Err(e.into()),
        };
        match shard {
            Ok((inner, shard)) => prune_dir(shard.as_fd(), inner, staging, cutoff, &mut report),
            // Best effort per shard too: one that cannot be read is
            // counted, logged and left; the pass goes on.
            Err(e) => {
                report.failed += 1;
                tracing::warn!(shard = name, error = %e, "retention could not read a receipt shard");
            }
        }
    }
    prune_dir(root, names, staging, cutoff, &mut report);
    Ok(report)
}

/// Removes the receipts among `names` of `root` (`D/receipts` or one of
/// its shards) last modified before `cutoff`, counting into `report`.
fn prune_dir(root: BorrowedFd<'_>, names: Vec<String>, staging: &Staging, cutoff: i64, report: &mut ReceiptPrune) {
    for name in names {
        if !is_receipt_name(&name) {
            continue;
        }
        report.seen += 1;
        // Best effort per receipt: one that cannot be looked at, moved or
        // removed is left, counted and logged, and the pass goes on.
        match prune_one(root, staging, &name, cutoff) {
            Ok(true) => report.removed += 1,
            Ok(false) => {}
            Err(e) => {
                report.failed += 1;
                tracing::warn!(receipt = name, error = %e, "retention could not remove a receipt");
            }
        }
    }
}

/// Removes the receipt `name` of `root` if it was last modified before
/// `cutoff`; returns whether it was removed.
fn prune_one(root: BorrowedFd<'_>, staging: &Staging, name: &str, cutoff: i64) -> io::Result<bool> {
    match mtime(root, name)? {
        Some(t) if t < cutoff => {}
        _ => return Ok(false),
    }
    let staged = format!("{}-{name}", winx_release_kernel::sys::random_hex(4));
    match rename_noreplace(root, name, staging.dir.as_fd(), &staged) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => return Ok(false),
        Err(e) => return Err(e),
    }
    if mtime(staging.dir.as_fd(), &staged)?.is_some_and(|t| t >= cutoff) {
        // Replaced between the look and the move: put it back. If the
        // name is taken again, a newer receipt of the same request
        // stands there and this one is surplus.
        match rename_noreplace(staging.dir.as_fd(), &staged, root, name) {
            Ok(()) => return Ok(false),
            Err(e) if e.raw_os_error() == Some(Errno::EXIST.raw_os_error()) => {}
            Err(e) => return Err(e),
        }
    }
    match rustix::fs::unlinkat(staging.dir.as_fd(), staged.as_str(), AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
