//! A scan that stats only what it must.
//!
//! getdents64 already gives every entry's inode number (`d_ino`) and type
//! (`d_type`). On filesystems where `d_ino` is the inode number `statx`
//! reports ([`TRUSTED_FILESYSTEMS`], decided by `fstatfs` `f_type` of each
//! directory, once per device), an entry's (device, inode, type) is the
//! directory's device, `d_ino` and `d_type`, except where a mount hides
//! the underlying entry:
//!
//! - directories are always `statx`ed (they are opened anyway; a mount
//!   point or a btrfs subvolume root is a directory whose device differs
//!   from its parent's);
//! - `DT_UNKNOWN` entries are `statx`ed;
//! - every entry of a directory the scan may not search (no `x`), as a
//!   full scan's `statx` of them would fail;
//! - every entry of a directory that holds a mount point (a bind-mounted
//!   file, say) is `statx`ed: mount points come from the mount table
//!   (`/proc/thread-self/mountinfo`),
//!   read once per scan, and are matched by their parent directory's
//!   identity; when the table changes while the scan runs, the scan is
//!   run again with every entry `statx`ed ([`lean_scan`]).
//!
//! Everywhere else (overlayfs, FUSE, NFS, any unknown type) every entry is
//! `statx`ed, as in the full scan. A lean scan does not measure file sizes
//! (its report's `bytes` is `null`); [`ScanMode::Sizes`] is the full scan.
//!
//! # References
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statfs(2)`](https://man7.org/linux/man-pages/man2/statfs.2.html)
//! - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::{Access, AtFlags, FileType, StatxFlags, CWD};

use super::tally::{physical, Class};
pub use super::waiting::WAITING_FILESYSTEMS;
use super::waiting::{path_of_dir, refused_mount, waiting_points, waits};
use super::{BackendKind, ScanReport, ScanRoot};
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;
use winx_release_kernel::mountinfo::{mount_lines, unescape, MountLine};

/// What a scan measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScanMode {
    /// Every entry `statx`ed, file sizes summed into `bytes`.
    #[default]
    Sizes,
    /// Types and inodes from getdents64 where the filesystem's `d_ino` is
    /// trustworthy; `statx` only where it must (see the module docs);
    /// `bytes` is `null`.
    Lean,
}

/// Filesystems (`statfs` `f_type`, name) whose getdents64 `d_ino` equals
/// the `st_ino` that `statx` reports for every entry that is not a mount
/// point or a btrfs subvolume root (both directories, which are always
/// `statx`ed).
pub const TRUSTED_FILESYSTEMS: &[(i64, &str)] =
    &[(0xEF53, "ext2/ext3/ext4"), (0x5846_5342, "xfs"), (0x0102_1994, "tmpfs"), (0x9123_683E, "btrfs")];

/// Whether `d_ino` can be trusted on a filesystem of type `f_type`.
pub fn trusts_d_ino(f_type: i64) -> bool {
    TRUSTED_FILESYSTEMS.iter().any(|(t, _)| *t == f_type)
}

/// Whether the opened `dir` lies on a filesystem of
/// [`TRUSTED_FILESYSTEMS`] (`fstatfs`); `false` when it cannot be told.
///
/// # References
/// - [`fstatfs(2)`](https://man7.org/linux/man-pages/man2/fstatfs.2.html)
pub fn on_trusted_filesystem(dir: BorrowedFd<'_>) -> bool {
    // `f_type`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstatfs(dir).is_ok_and(|s| trusts_d_ino(s.f_type as i64))
}

/// What a lean scan knows before it starts: the directories that hold a
/// mount point, whether every mount point's parent was identified, and the
/// mount points a scan does not enter
/// ([`waiting_points`](super::waiting::waiting_points)).
#[derive(Clone, Debug, Default)]
pub(crate) struct MountParents {
    parents: HashSet<PhysicalId>,
    complete: bool,
    waiting: Vec<PathBuf>,
}

impl MountParents {
    /// Identifies the parent directory of every mount point of the
    /// mountinfo table `table` (for the directory cache, which compares
    /// whole tables), `statx`ed with `AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC`
    /// like [`MountPlan::read`]'s, except those whose parent directory lies
    /// on one of [`WAITING_FILESYSTEMS`] ([`points_to_identify`]): a hung
    /// NFS or FUSE mount does not stall the scan through a mount inside it.
    pub(crate) fn from_table(table: &[u8]) -> Arc<MountParents> {
        let mut set = HashSet::new();
        let mut complete = true;
        for point in points_to_identify(table) {
            let Some(parent) = point.parent() else { continue };
            // A parent that cannot be identified is not on a path the scan
            // can reach either (it would have to open it), as long as the
            // paths stay as the table names them.
            let flags = AtFlags::NO_AUTOMOUNT | AtFlags::STATX_DONT_SYNC;
            match rustix::fs::statx(CWD, parent, flags, StatxFlags::INO) {
                Ok(st) => {
                    set.insert(physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino));
                }
                Err(_) => complete = false,
            }
        }
        Arc::new(MountParents { parents: set, complete, waiting: waiting_points(table) })
    }

    /// Whether every mount point's parent was identified. Identities stay
    /// true when directories are renamed, which no mount-table event
    /// reports; a parent that could not be identified by its path might be
    /// reachable after a rename, so a table with one is read again at
    /// every scan (see `DirCache`).
    pub(crate) fn complete(&self) -> bool {
        self.complete
    }

    /// The table's mount points of a filesystem whose lookups may wait
    /// ([`waiting_points`]).
    pub(crate) fn waiting(&self) -> &[PathBuf] {
        &self.waiting
    }

    fn holds_mount(&self, dir: PhysicalId) -> bool {
        self.parents.contains(&dir)
    }
}

/// The calling thread's mount table (`/proc/thread-self/mountinfo`, else
/// `/proc/self/mountinfo`); `None` when neither can be read.
///
/// Read into a 16 KiB buffer: `std::fs::read` sizes its buffer from the
/// file's size, which procfs reports as 0, and then reads 32, 32, 64, …
/// bytes at a time (nine `read`s for this machine's table).
pub(crate) fn read_mount_table() -> Option<Vec<u8>> {
    MountWatch::open_read().map(|(_, table)| table)
}

/// An open mount table: `poll(2)` reports `POLLPRI` on it once the mounts
/// of its namespace changed after it was opened (a mount, an unmount, a
/// move or a remount, here or propagated from a peer).
#[derive(Debug)]
pub(crate) struct MountWatch {
    file: std::fs::File,
    /// The mount namespace it is of (`/proc/thread-self/ns/mnt`'s device
    /// and inode), when that could be read.
    ns: Option<(u64, u64)>,
}

impl MountWatch {
    /// Opens the calling thread's mount table and reads it through the
    /// opened file (so a change after the open, even during the read, is
    /// reported by [`MountWatch::changed`]); `None` when it cannot be read.
    ///
    /// # References
    /// - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)
    pub(crate) fn open_read() -> Option<(MountWatch, Vec<u8>)> {
        use std::io::Read;
        let ns = mount_namespace();
        let mut file = std::fs::File::open("/proc/thread-self/mountinfo")
            .or_else(|_| std::fs::File::open("/proc/self/mountinfo"))
            .ok()?;
        let mut table = Vec::with_capacity(16 * 1024);
        file.read_to_end(&mut table).ok()?;
        Some((MountWatch { file, ns }, table))
    }

    /// Whether the mount table changed since [`MountWatch::open_read`]
    /// opened it (`POLLPRI` on the open table), or whether that cannot be
    /// told.
    ///
    /// # References
    /// - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html) ("poll")
    pub(crate) fn changed(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.file, PollFlags::PRI)];
        match poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
            Ok(_) => fds[0].revents().intersects(PollFlags::PRI | PollFlags::ERR),
            Err(_) => true,
        }
    }

    /// Whether the table read through it is, unchanged, the calling
    /// thread's mount table now: it is of the calling thread's mount
    /// namespace and reports no change since it was opened. (A thread may
    /// have a namespace of its own; one that cannot be told is not the
    /// same.)
    pub(crate) fn still_current(&self) -> bool {
        self.ns.is_some() && self.ns == mount_namespace() && !self.changed()
    }
}

/// The calling thread's mount namespace: the device and inode of
/// `/proc/thread-self/ns/mnt`; `None` when it cannot be read.
///
/// # References
/// - [`namespaces(7)`](https://man7.org/linux/man-pages/man7/namespaces.7.html)
fn mount_namespace() -> Option<(u64, u64)> {
    let st = rustix::fs::statx(CWD, "/proc/thread-self/ns/mnt", AtFlags::empty(), StatxFlags::INO).ok()?;
    Some((rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
}

/// The mount table a lean scan relies on: the directories below its roots
/// that hold a mount point, and a watch on the table to tell whether it
/// changed while the scan ran.
#[derive(Debug)]
pub(crate) struct MountPlan {
    /// `None`: every entry must be `statx`ed (a root's path or a mount
    /// point's parent could not be read; a table that cannot be read at
    /// all refuses the scan, `no_mount_table`).
    mounts: Option<Arc<MountParents>>,
    /// The open mount table, to tell whether it changed.
    watch: Option<MountWatch>,
    /// The table's mount points a scan does not enter ([`waiting_points`]).
    waiting: Vec<PathBuf>,
}

impl MountPlan {
    /// Reads the calling thread's mount table (`/proc/thread-self/mountinfo`:
    /// a thread may have its own mount namespace) and identifies the parent
    /// directory of every mount point strictly below one of `roots` (each
    /// root's path as the kernel names its opened descriptor). Mounts
    /// elsewhere are never looked at, so a hung NFS or FUSE mount outside
    /// the backing roots cannot stall a release; the parents below the
    /// roots are `statx`ed with `AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC` (no
    /// automount triggered, no round trip to a network filesystem's
    /// server). Where a root's path or such a parent cannot be read, the
    /// plan has no mount parents: every entry is `statx`ed. Where the table
    /// itself cannot be read, the plan has no watch, and the scan is
    /// refused (`backing_inaccessible`).
    ///
    /// # References
    /// - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)
    /// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
    pub(crate) fn read(roots: &[ScanRoot]) -> MountPlan {
        let Some((watch, table)) = MountWatch::open_read() else {
            return MountPlan { mounts: None, watch: None, waiting: Vec::new() };
        };
        let waiting = waiting_points(&table);
        let mounts = root_paths(roots).and_then(|prefixes| parents_below(&table, &prefixes)).map(Arc::new);
        AFTER_TABLE_READ.with(|hook| hook.take().map(|f| f()));
        MountPlan { mounts, watch: Some(watch), waiting }
    }

    /// Whether the mount table changed since [`MountPlan::read`] opened it
    /// (`POLLPRI` on the open table), or whether that cannot be told.
    ///
    /// # References
    /// - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html) ("poll")
    pub(crate) fn changed(&self) -> bool {
        self.watch.as_ref().is_none_or(MountWatch::changed)
    }
}

thread_local! {
    static AFTER_TABLE_READ: std::cell::Cell<Option<Box<dyn FnOnce()>>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` once, on the calling thread, right after the next lean scan
/// this thread starts has read the mount table (so that a test can make a
/// mount appear mid-scan).
// Hidden: a test hook (a mount made mid-scan).
#[doc(hidden)]
pub fn after_next_mount_table_read(f: impl FnOnce() + 'static) {
    AFTER_TABLE_READ.with(|hook| hook.set(Some(Box::new(f))));
}

/// Runs a lean scan: `walk` with the mount parents of a fresh
/// [`MountPlan`], and, when the mount table changed while it ran (a mount
/// appeared mid-scan, which the plan cannot know of), again with every
/// entry `statx`ed, from the roots' start. `walk` gets `None` where the
/// plan knows no mount parents (it then `statx`es everything at once).
/// A mount below a root that no scan enters
/// ([`refused_mount`]) fails the
/// scan before `walk` runs, with `kind` as its backend.
pub(crate) fn lean_scan(
    roots: &[ScanRoot],
    kind: BackendKind,
    mut walk: impl FnMut(Option<Arc<MountParents>>) -> ScanReport,
) -> ScanReport {
    let plan = MountPlan::read(roots);
    if plan.watch.is_none() {
        return no_mount_table(roots, kind, ScanMode::Lean).unwrap_or_else(|| walk(None));
    }
    if let Some(refused) = refuse_waiting(&plan.waiting, roots, kind, ScanMode::Lean) {
        return refused;
    }
    let Some(mounts) = plan.mounts.clone() else { return walk(None) };
    let report = walk(Some(mounts));
    if !plan.changed() {
        return report;
    }
    tracing::debug!("the mount table changed during a lean scan; scanning again, every entry statx'ed");
    let Some(now) = read_mount_table().map(|t| waiting_points(&t)) else {
        return no_mount_table(roots, kind, ScanMode::Lean).unwrap_or_else(|| walk(None));
    };
    if let Some(refused) = refuse_waiting(&now, roots, kind, ScanMode::Lean) {
        return refused;
    }
    for root in roots {
        let Some(dir) = &root.dir else { continue };
        if rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0)).is_err() {
            let mode = ScanMode::Lean;
            return super::fail_report(report.backend, mode, Reason::BackingInaccessible, root.path.clone(), 0);
        }
    }
    walk(None)
}

/// Runs a full scan ([`ScanMode::Sizes`]): `walk`, unless a mount below a
/// root is one no scan enters ([`refused_mount`]; the mount table is read
/// once, before the walk).
pub(crate) fn full_scan(
    roots: &[ScanRoot],
    kind: BackendKind,
    walk: impl FnOnce(Option<Arc<MountParents>>) -> ScanReport,
) -> ScanReport {
    let Some(waiting) = read_mount_table().map(|t| waiting_points(&t)) else {
        return no_mount_table(roots, kind, ScanMode::Sizes).unwrap_or_else(|| walk(None));
    };
    refuse_waiting(&waiting, roots, kind, ScanMode::Sizes).unwrap_or_else(|| walk(None))
}

/// The report of a scan refused because the mount table cannot be read
/// (no `/proc`): whether a mount below a root could hang the walk cannot be
/// told, so nothing is walked (`backing_inaccessible`, the first root
/// named). `None` when no root was opened (nothing to walk).
fn no_mount_table(roots: &[ScanRoot], kind: BackendKind, mode: ScanMode) -> Option<ScanReport> {
    let root = roots.iter().find(|r| r.dir.is_some())?;
    tracing::warn!(root = %root.path.display(), "the mount table cannot be read: the scan is refused");
    Some(super::fail_report(kind, mode, Reason::BackingInaccessible, root.path.clone(), 0))
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

/// The path of every root's opened directory, as the kernel names it
/// (`/proc/self/fd/N`); `None` when one cannot be told (unreachable from
/// this root, deleted).
fn root_paths(roots: &[ScanRoot]) -> Option<Vec<PathBuf>> {
    roots.iter().filter_map(|r| r.dir.as_ref()).map(|dir| path_of_dir(dir.as_fd())).collect()
}

/// The identities of the parent directories of every mount point in
/// `table` strictly below one of `prefixes`; `None` when one of them
/// cannot be `statx`ed.
fn parents_below(table: &[u8], prefixes: &[PathBuf]) -> Option<MountParents> {
    let mut set = HashSet::new();
    for point in relevant_points(table, prefixes) {
        let parent = point.parent()?;
        let flags = AtFlags::NO_AUTOMOUNT | AtFlags::STATX_DONT_SYNC;
        let st = rustix::fs::statx(CWD, parent, flags, StatxFlags::INO).ok()?;
        set.insert(physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino));
    }
    Some(MountParents { parents: set, complete: true, waiting: Vec::new() })
}

/// The mount points of `table` strictly below one of `prefixes`: the only
/// ones a scan of those roots can meet.
pub(crate) fn relevant_points(table: &[u8], prefixes: &[PathBuf]) -> Vec<PathBuf> {
    points_to_identify(table).into_iter().filter(|p| prefixes.iter().any(|r| p != r && p.starts_with(r))).collect()
}

/// The mount points (field 5, octal escapes undone) of a mountinfo table whose
/// parent directory may lie on a trusted filesystem: all but those whose parent
/// directory's mount is of a type in [`WAITING_FILESYSTEMS`]. Such a directory
/// is never trusted by a scan (its filesystem is not on
/// [`TRUSTED_FILESYSTEMS`], and no rename moves it to another filesystem), so
/// its mount points need no identity, and `statx`ing a path through a hung
/// mount could wait for as long as it is hung. The parent directory's mount is
/// the point's parent mount (field 2), or that mount's own parent where the
/// point is that mount's mount point too (mounts stacked on one path); a point
/// whose parent mount the table does not show is kept.
///
/// # References
/// - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)
pub(crate) fn points_to_identify(table: &[u8]) -> Vec<PathBuf> {
    let lines: Vec<(&[u8], MountLine<'_>)> = mount_lines(table).map(|l| (l.id, l)).collect();
    let by_id: std::collections::HashMap<&[u8], &MountLine<'_>> = lines.iter().map(|(id, l)| (*id, l)).collect();
    lines
        .iter()
        .filter(|(_, line)| {
            let mut holder = by_id.get(line.parent);
            // At most as many steps as lines: a table naming a cycle ends the walk.
            for _ in 0..lines.len() {
                match holder {
                    Some(m) if m.point == line.point => holder = by_id.get(m.parent),
                    _ => break,
                }
            }
            !holder.and_then(|m| m.fstype).is_some_and(waits)
        })
        .map(|(_, line)| PathBuf::from(OsStr::from_bytes(&unescape(line.point))))
        .collect()
}

/// One scanner's view of which directories may be read leanly: the mount
/// parents, and a per-device cache of `fstatfs` verdicts.
#[derive(Debug)]
pub(crate) struct Lean {
    mounts: Option<Arc<MountParents>>,
    devices: HashMap<u64, bool>,
}

impl Lean {
    /// A view for `mode`: `mounts` is `None` in [`ScanMode::Sizes`] (or when
    /// the mount table is unknown), and then nothing is read leanly.
    pub(crate) fn new(mounts: Option<Arc<MountParents>>) -> Lean {
        Lean { mounts, devices: HashMap::new() }
    }

    /// Whether the entries of the directory `dir`, whose identity is `id`,
    /// may be classified from getdents64 alone: not in [`ScanMode::Sizes`],
    /// no mount point among them, a trusted filesystem, and a directory the
    /// scan may search (else every `statx` in it fails, and so must the
    /// scan: a readable but unsearchable directory's entries are
    /// inaccessible).
    pub(crate) fn trusts(&mut self, dir: BorrowedFd<'_>, id: PhysicalId) -> bool {
        let Some(mounts) = &self.mounts else { return false };
        if mounts.holds_mount(id) {
            return false;
        }
        let fs_ok = *self.devices.entry(id.dev).or_insert_with(|| on_trusted_filesystem(dir));
        fs_ok && rustix::fs::accessat(dir, c".", Access::EXEC_OK, AtFlags::EACCESS).is_ok()
    }
}

/// Classifies an entry of a trusted directory on device `dev` from its
/// `d_type` and `d_ino`; `None` when it must be `statx`ed (a directory, or
/// an unknown type).
pub(crate) fn from_dirent(kind: FileType, ino: u64, dev: u64, aliases: &HashSet<PhysicalId>) -> Option<Class> {
    match kind {
        FileType::RegularFile => {
            if !aliases.is_empty() && aliases.contains(&PhysicalId { dev, ino }) {
                Some(Class::Fail(Reason::BackingAlias))
            } else {
                Some(Class::File(None))
            }
        }
        FileType::Symlink => Some(Class::Fail(Reason::BackingSymlink)),
        FileType::Fifo | FileType::Socket | FileType::CharacterDevice | FileType::BlockDevice => {
            Some(Class::Fail(Reason::BackingUnsupportedEntry))
        }
        FileType::Directory | FileType::Unknown => None,
    }
}

/// The identity of an opened directory, for a root.
pub(crate) fn dir_identity(dir: BorrowedFd<'_>) -> Option<PhysicalId> {
    let st = rustix::fs::statx(dir, c"", AtFlags::EMPTY_PATH, StatxFlags::INO).ok()?;
    Some(physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is pinned: adding a filesystem here is a decision that its
    /// `d_ino` equals `statx`'s inode for every non-directory entry.
    #[test]
    fn trusted_list_is_pinned() {
        let names: Vec<&str> = TRUSTED_FILESYSTEMS.iter().map(|(_, n)| *n).collect();
        assert_eq!(names, ["ext2/ext3/ext4", "xfs", "tmpfs", "btrfs"]);
        assert!(trusts_d_ino(0xEF53));
        assert!(!trusts_d_ino(0x794C_7630)); // overlayfs
        assert!(!trusts_d_ino(0x6573_5546)); // FUSE
        assert!(!trusts_d_ino(0x6969)); // NFS
        assert!(!trusts_d_ino(0));
    }

    /// A table whose every mount point's parent is identified is complete;
    /// one naming a parent that cannot be `statx`ed is not (the directory
    /// cache then reads the table at every scan).
    #[test]
    fn a_mount_point_under_an_unidentified_parent_makes_the_parents_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().join("m");
        let reachable =
            format!("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 0:5 / {} rw - tmpfs t rw\n", here.display());
        let parents = MountParents::from_table(reachable.as_bytes());
        assert!(parents.complete());
        let st = std::fs::metadata(dir.path()).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert!(parents.holds_mount(PhysicalId { dev: st.dev(), ino: st.ino() }));
        let gone = dir.path().join("no-such-dir/m");
        let unreachable = format!("{reachable}31 22 0:6 / {} rw - tmpfs t rw\n", gone.display());
        assert!(!MountParents::from_table(unreachable.as_bytes()).complete());
    }

    /// Only mounts strictly below a root are looked at: a hung mount
    /// elsewhere is never `statx`ed.
    #[test]
    fn only_mounts_below_the_roots_are_relevant() {
        let t = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                  30 22 0:5 / /mnt/nfs rw - nfs4 srv:/x rw\n\
                  31 30 0:6 / /mnt/nfs/sub rw - tmpfs tmpfs rw\n\
                  32 22 0:7 / /d/winx/executions rw - tmpfs tmpfs rw\n\
                  33 22 0:8 /f /d/winx/executions/e1/out rw - ext4 /dev/sdb rw\n\
                  34 22 0:9 / /d/winx-other/x rw - tmpfs tmpfs rw\n";
        let roots = [PathBuf::from("/d/winx/executions"), PathBuf::from("/w/.winx/scratch")];
        assert_eq!(relevant_points(t, &roots), [PathBuf::from("/d/winx/executions/e1/out")]);
        assert!(relevant_points(t, &[]).is_empty());
    }

    /// A mount point whose parent directory lies on NFS, FUSE or another
    /// filesystem that may wait is not identified (its directory is never
    /// trusted): with the parent unreachable the table is still complete.
    /// Mounts stacked on one path are passed over to the mount that holds
    /// the path's parent directory.
    #[test]
    fn a_mount_inside_a_waiting_filesystem_is_not_looked_at() {
        let t = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                  30 22 0:5 / /no-such-dir/nfs rw - nfs4 srv:/x rw\n\
                  31 30 0:6 / /no-such-dir/nfs/sub rw - tmpfs tmpfs rw\n\
                  40 22 0:7 / /no-such-dir/fuse rw shared:5 - fuse.sshfs h:/ rw\n\
                  41 40 0:8 / /no-such-dir/fuse/sub rw - tmpfs tmpfs rw\n\
                  50 22 0:9 / /no-such-dir/stacked rw - nfs4 srv:/y rw\n\
                  51 50 0:10 / /no-such-dir/stacked rw - tmpfs tmpfs rw\n";
        let want = ["/", "/no-such-dir/nfs", "/no-such-dir/fuse", "/no-such-dir/stacked", "/no-such-dir/stacked"];
        assert_eq!(points_to_identify(t), want.map(PathBuf::from));
        let inside_only = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                            30 22 0:5 / / rw - nfs4 srv:/x rw\n\
                            31 30 0:6 / /no-such-dir/sub rw - tmpfs tmpfs rw\n";
        assert!(MountParents::from_table(inside_only).complete(), "a mount inside NFS was looked at");
        let unknown_parent = b"31 99 0:6 / /no-such-dir/sub rw - tmpfs tmpfs rw\n";
        assert!(!MountParents::from_table(unknown_parent).complete());
    }

    /// Every filesystem that may wait is one whose directories a scan never
    /// trusts: skipping its mount points' parents hides nothing.
    #[test]
    fn no_waiting_filesystem_is_trusted() {
        for (magic, name) in WAITING_FILESYSTEMS {
            assert!(!trusts_d_ino(*magic), "{name}");
            assert!(waits(name.as_bytes()));
        }
        assert!(waits(b"fuse.sshfs"));
        for name in ["ext4", "xfs", "tmpfs", "btrfs", "devtmpfs", "overlay"] {
            assert!(!waits(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn mountinfo_fields_and_escapes() {
        let t = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                  30 22 0:5 / /mnt/with\\040space rw - tmpfs tmpfs rw\n\
                  31 22 0:6 /f /srv/a\\134b rw - ext4 /dev/sdb rw\n";
        let got = points_to_identify(t);
        assert_eq!(got, [PathBuf::from("/"), PathBuf::from("/mnt/with space"), PathBuf::from("/srv/a\\b")]);
    }

    #[test]
    fn dirent_classes() {
        let none = HashSet::new();
        let alias: HashSet<_> = [PhysicalId { dev: 7, ino: 9 }].into();
        assert_eq!(from_dirent(FileType::RegularFile, 9, 7, &none), Some(Class::File(None)));
        assert_eq!(from_dirent(FileType::RegularFile, 9, 7, &alias), Some(Class::Fail(Reason::BackingAlias)));
        assert_eq!(from_dirent(FileType::RegularFile, 9, 8, &alias), Some(Class::File(None)));
        assert_eq!(from_dirent(FileType::Symlink, 1, 7, &none), Some(Class::Fail(Reason::BackingSymlink)));
        assert_eq!(from_dirent(FileType::Fifo, 1, 7, &none), Some(Class::Fail(Reason::BackingUnsupportedEntry)));
        assert_eq!(from_dirent(FileType::Directory, 1, 7, &none), None);
        assert_eq!(from_dirent(FileType::Unknown, 1, 7, &none), None);
    }
}
