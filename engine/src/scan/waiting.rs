//! Mounts a scan does not enter: a mount of a filesystem whose lookups may
//! wait ([`WAITING_FILESYSTEMS`](super::WAITING_FILESYSTEMS): NFS, CIFS/SMB, 9p, Ceph, AFS, FUSE,
//! autofs) strictly below a backing root fails the scan closed with
//! `backing_inaccessible`, before anything is walked.
//!
//! Opening or `statx`ing anything through a hung NFS mount, or a FUSE mount
//! whose daemon does not answer, waits for as long as it is so; the walk,
//! which enters every directory below a root to look for aliases, would
//! wait with it, and a release with its session's barrier held. A backing
//! root that itself lies on such a filesystem is walked as before (a
//! workspace on NFS stays usable); only a mount below a root is refused.
//! The mount table is read before the walk: a mount that appears while a
//! lean scan runs makes it scan again, and the table is asked again first;
//! a full scan ([`ScanMode::Sizes`]) does not watch it.
//!
//! # References
//! - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)
//! - [`fuse(4)`](https://man7.org/linux/man-pages/man4/fuse.4.html)

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::lean::{mount_lines, path_of_dir, read_mount_table, unescape, waits, MountParents};
use super::{BackendKind, ScanMode, ScanReport, ScanRoot};
use crate::error::Reason;

/// The mount points (field 5, escapes undone) of `table` whose own
/// filesystem is one of [`WAITING_FILESYSTEMS`](super::WAITING_FILESYSTEMS): a scan never enters one
/// below a backing root ([`refused_mount`]).
pub(crate) fn waiting_points(table: &[u8]) -> Vec<PathBuf> {
    mount_lines(table)
        .filter(|l| l.fstype.is_some_and(waits))
        .map(|l| PathBuf::from(OsStr::from_bytes(&unescape(l.point))))
        .collect()
}

/// The first of the mount points `waiting` (of filesystems whose lookups may
/// wait, [`waiting_points`]) strictly below the opened `root`, as its path
/// below the root: a scan fails closed there (`backing_inaccessible`)
/// rather than enter it, since opening or `statx`ing anything through a
/// hung NFS mount or a FUSE mount whose daemon does not answer waits for as
/// long as it is so. `None` when there is none, or when the root's path
/// cannot be told (the walk then goes where the root leads, as before).
///
/// This is the one place the rule lives: the one-shot scans of every
/// backend ([`lean_scan`](super::lean::lean_scan), [`full_scan`]) and the guardian's directory
/// cache ask it before they walk.
pub(crate) fn refused_mount(waiting: &[PathBuf], root: &ScanRoot) -> Option<Vec<u8>> {
    if waiting.is_empty() {
        return None;
    }
    let at = path_of_dir(root.dir.as_ref()?.as_fd())?;
    let below = waiting.iter().find_map(|p| p.strip_prefix(&at).ok().filter(|rel| !rel.as_os_str().is_empty()))?;
    Some(below.as_os_str().as_bytes().to_vec())
}

/// Runs a full scan ([`ScanMode::Sizes`]): `walk`, unless a mount below a
/// root is one no scan enters ([`refused_mount`]; the mount table is read
/// once, before the walk).
pub(crate) fn full_scan(
    roots: &[ScanRoot],
    kind: BackendKind,
    walk: impl FnOnce(Option<Arc<MountParents>>) -> ScanReport,
) -> ScanReport {
    let waiting = read_mount_table().map(|t| waiting_points(&t)).unwrap_or_default();
    refuse_waiting(&waiting, roots, kind, ScanMode::Sizes).unwrap_or_else(|| walk(None))
}

/// The report of a scan refused because a mount of `waiting` lies below
/// one of `roots` ([`refused_mount`]), the first root's first such mount;
/// `None` when none does.
pub(crate) fn refuse_waiting(
    waiting: &[PathBuf],
    roots: &[ScanRoot],
    kind: BackendKind,
    mode: ScanMode,
) -> Option<ScanReport> {
    roots.iter().find_map(|root| {
        let rel = refused_mount(waiting, root)?;
        let path = root.path.join(OsStr::from_bytes(&rel));
        Some(super::fail_report(kind, mode, Reason::BackingInaccessible, path, 0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::open_root;

    #[test]
    fn only_mounts_of_waiting_filesystems_are_listed() {
        let table = b"21 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                      40 21 0:50 / /w/scratch/remote rw - fuse.sshfs host: rw\n\
                      41 21 0:51 / /w/scratch/nfs\\040share rw,relatime shared:9 - nfs4 srv:/x rw\n\
                      42 21 0:52 / /w/scratch/tmp rw - tmpfs tmpfs rw\n";
        let got = waiting_points(table);
        assert_eq!(got, [PathBuf::from("/w/scratch/remote"), PathBuf::from("/w/scratch/nfs share")]);
    }

    #[test]
    fn a_waiting_mount_strictly_below_the_root_is_refused_by_its_path_below_it() {
        let t = tempfile::tempdir().unwrap();
        let at = std::fs::canonicalize(t.path()).unwrap();
        let root = open_root(&at).unwrap();
        let below = vec![at.join("sub/remote")];
        assert_eq!(refused_mount(&below, &root), Some(b"sub/remote".to_vec()));
        // The root itself on such a filesystem, a sibling that shares a
        // prefix, and no waiting mount at all: walked as before.
        assert_eq!(refused_mount(std::slice::from_ref(&at), &root), None);
        let sibling = PathBuf::from(format!("{}x/remote", at.display()));
        assert_eq!(refused_mount(&[sibling], &root), None);
        assert_eq!(refused_mount(&[], &root), None);
        // A root that does not exist (empty) has nothing below it.
        assert_eq!(refused_mount(&below, &ScanRoot { path: at.join("gone"), dir: None }), None);
    }
}
