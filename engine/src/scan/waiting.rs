//! The mount table's lines as the scans read them, the filesystems whose
//! lookups may wait, and the mounts a scan does not enter: a mount of a filesystem whose lookups may
//! wait ([`WAITING_FILESYSTEMS`]: NFS, CIFS/SMB, 9p, Ceph, AFS, FUSE,
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
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use winx_release_kernel::mountinfo::{mount_lines, unescape};

use super::ScanRoot;

/// The mount points (field 5, escapes undone) of `table` whose own
/// filesystem is one of [`WAITING_FILESYSTEMS`]: a scan never enters one
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
/// backend ([`lean_scan`](super::lean::lean_scan), [`full_scan`](super::lean::full_scan)) and the guardian's directory
/// cache ask it before they walk.
pub(crate) fn refused_mount(waiting: &[PathBuf], root: &ScanRoot) -> Option<Vec<u8>> {
    if waiting.is_empty() {
        return None;
    }
    let at = path_of_dir(root.dir.as_ref()?.as_fd())?;
    let below = waiting.iter().find_map(|p| p.strip_prefix(&at).ok().filter(|rel| !rel.as_os_str().is_empty()))?;
    Some(below.as_os_str().as_bytes().to_vec())
}

/// Filesystems (`statfs` `f_type`, mountinfo type name) whose lookups may
/// wait on a server or a user-space daemon, so that a `statx` of a path
/// through one can hang while it is unreachable (`fuse.<subtype>` is FUSE
/// too). None is on [`TRUSTED_FILESYSTEMS`](super::TRUSTED_FILESYSTEMS): every entry of their
/// directories is `statx`ed anyway, so a mount point whose parent
/// directory lies on one needs no identity and is never looked at (the
/// directory cache's mount parents, `lean.rs`).
pub const WAITING_FILESYSTEMS: &[(i64, &str)] = &[
    (0x6969, "nfs"),
    (0x6969, "nfs4"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb3"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "ceph"),
    (0x5346_414F, "afs"),
    (0x6573_5546, "fuse"),
    (0x6573_5546, "fuseblk"),
    (0x0187, "autofs"),
];

/// Whether a mountinfo type name is one of [`WAITING_FILESYSTEMS`].
pub(crate) fn waits(fstype: &[u8]) -> bool {
    fstype.starts_with(b"fuse.") || WAITING_FILESYSTEMS.iter().any(|(_, n)| n.as_bytes() == fstype)
}

/// The path of the opened directory `dir`, as the kernel names it
/// (`/proc/self/fd/N`); `None` when it cannot be told (unreachable from
/// this process's root, deleted).
pub(crate) fn path_of_dir(dir: BorrowedFd<'_>) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = rustix::fs::readlink(format!("/proc/self/fd/{}", dir.as_raw_fd()), Vec::new()).ok()?;
    let bytes = link.as_bytes();
    if !bytes.starts_with(b"/") || bytes.ends_with(b" (deleted)") {
        return None;
    }
    Some(PathBuf::from(OsStr::from_bytes(bytes)))
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
