//! The counting and bound rules every scan backend shares.
//!
//! A backend decides what each entry is (a [`Class`]); [`Tally::admit`]
//! decides, in one place, what that means for the scan: the entry is
//! counted, entry number `max_entries + 1` and any entry deeper than
//! `max_depth` fail with `backing_scan_limit`, an entry that vanished since
//! getdents is uncounted, an offending class fails with its reason, and a
//! regular file or directory adds to the counts. Backends call it in the
//! order the contract defines (roots in order, each depth first, a
//! directory's entries in directory order before any of its subdirectories),
//! so every backend gives the same report for the same tree.
//!
//! # References
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use super::ScanLimits;
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;

/// What one entry is, as a backend found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Not inspected: its directory is already at the depth bound, so the
    /// entry itself is too deep (it fails the bound before its class
    /// matters).
    Unstatted,
    /// Removed since getdents: not an entry any more.
    Vanished,
    /// A regular file, with its size when the scan measured it.
    File(Option<u64>),
    /// A directory, with its identity.
    Dir(PhysicalId),
    /// Fails closed with this reason (link, unsupported, inaccessible,
    /// alias).
    Fail(Reason),
}

/// A fail-closed outcome: the reason and the offending path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) reason: Reason,
    pub(crate) path: PathBuf,
}

impl Failure {
    pub(crate) fn new(reason: Reason, path: PathBuf) -> Failure {
        Failure { reason, path }
    }
}

/// The counts of one scan, shared by all its roots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) entries: u64,
    pub(crate) directories: u64,
    pub(crate) files: u64,
    /// Sum of the measured sizes; `None` once a file's size was not
    /// measured.
    pub(crate) bytes: Option<u64>,
    pub(crate) max_depth: u32,
}

impl Tally {
    /// An empty tally; `sizes` says whether file sizes are measured.
    pub(crate) fn new(sizes: bool) -> Tally {
        Tally { bytes: sizes.then_some(0), ..Tally::default() }
    }

    /// Counts one entry of class `class` at depth `depth` (a root's
    /// children are at depth 1) under `limits`; on a failure, `path()`
    /// names the entry.
    ///
    /// In a fail-closed scan, `entries` and `max_depth` include the
    /// offending entry; `directories`, `files` and `bytes` only entries that
    /// passed.
    pub(crate) fn admit(
        &mut self,
        limits: &ScanLimits,
        class: Class,
        depth: u32,
        path: impl FnOnce() -> PathBuf,
    ) -> Result<(), Failure> {
        let fail = |reason: Reason| Err(Failure::new(reason, path()));
        self.entries += 1;
        if self.entries > limits.max_entries {
            return fail(Reason::BackingScanLimit);
        }
        let deepest = self.max_depth;
        self.max_depth = deepest.max(depth);
        if depth > limits.max_depth {
            return fail(Reason::BackingScanLimit);
        }
        match class {
            Class::Vanished => {
                // Removed since getdents: not an entry any more.
                self.entries -= 1;
                self.max_depth = deepest;
                Ok(())
            }
            Class::Unstatted => fail(Reason::BackingScanLimit),
            Class::Fail(r) => fail(r),
            Class::File(size) => {
                self.files += 1;
                self.bytes = match (self.bytes, size) {
                    (Some(b), Some(s)) => Some(b.saturating_add(s)),
                    _ => None,
                };
                Ok(())
            }
            Class::Dir(_) => {
                self.directories += 1;
                Ok(())
            }
        }
    }
}

/// The (device, inode) of a `statx` result's fields.
pub(crate) fn physical(dev_major: u32, dev_minor: u32, ino: u64) -> PhysicalId {
    PhysicalId { dev: rustix::fs::makedev(dev_major, dev_minor), ino }
}

/// What an entry's `statx` returned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// Every field the scan asked for was returned.
    pub(crate) complete: bool,
    pub(crate) mode: u16,
    pub(crate) id: PhysicalId,
    pub(crate) size: u64,
}

/// Classifies an entry from its `statx` (`Err(errno)` on failure), as every
/// backend does: `ENOENT` vanished, another error or a missing field
/// inaccessible, a link `backing_symlink`, a fifo/socket/device
/// `backing_unsupported_entry`, an identity in `aliases` `backing_alias`
/// (whatever its type). `sizes`: keep a file's size.
pub(crate) fn classify_statx(res: Result<Seen, i32>, sizes: bool, aliases: &HashSet<PhysicalId>) -> Class {
    let seen = match res {
        Err(libc::ENOENT) => return Class::Vanished,
        Err(_) => return Class::Fail(Reason::BackingInaccessible),
        Ok(seen) if !seen.complete => return Class::Fail(Reason::BackingInaccessible),
        Ok(seen) => seen,
    };
    let kind = FileType::from_raw_mode(u32::from(seen.mode));
    match kind {
        FileType::RegularFile | FileType::Directory => {}
        FileType::Symlink => return Class::Fail(Reason::BackingSymlink),
        _ => return Class::Fail(Reason::BackingUnsupportedEntry),
    }
    if !aliases.is_empty() && aliases.contains(&seen.id) {
        return Class::Fail(Reason::BackingAlias);
    }
    if kind == FileType::RegularFile {
        Class::File(sizes.then_some(seen.size))
    } else {
        Class::Dir(seen.id)
    }
}

/// `root` joined with `parts`, for a report.
pub(crate) fn join_path<'p>(root: &Path, parts: impl IntoIterator<Item = &'p [u8]>) -> PathBuf {
    let mut p = root.to_path_buf();
    for part in parts {
        p.push(OsStr::from_bytes(part));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(max_entries: u64, max_depth: u32) -> ScanLimits {
        ScanLimits { max_entries, max_depth }
    }

    #[test]
    fn bounds_come_before_the_class() {
        let l = lim(2, 1);
        let mut t = Tally::new(true);
        let p = || PathBuf::from("x");
        assert!(t.admit(&l, Class::File(Some(3)), 1, p).is_ok());
        assert_eq!(
            t.admit(&l, Class::Fail(Reason::BackingSymlink), 2, p).unwrap_err().reason,
            Reason::BackingScanLimit
        );
        assert_eq!((t.entries, t.files, t.bytes, t.max_depth), (2, 1, Some(3), 2));
    }

    #[test]
    fn vanished_is_uncounted_unless_past_a_bound() {
        let l = lim(1, 16);
        let mut t = Tally::new(false);
        assert!(t.admit(&l, Class::Vanished, 1, PathBuf::new).is_ok());
        assert_eq!(t.entries, 0);
        assert!(t.admit(&l, Class::Dir(PhysicalId { dev: 1, ino: 2 }), 1, PathBuf::new).is_ok());
        let f = t.admit(&l, Class::Vanished, 1, || PathBuf::from("v")).unwrap_err();
        assert_eq!((f.reason, t.entries), (Reason::BackingScanLimit, 2));
        assert_eq!(t.bytes, None);
    }
}
