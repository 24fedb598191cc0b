//! The synchronous scan backend: `openat` + getdents64 + `statx`.
//!
//! # Traversal
//!
//! Roots are scanned in the order given, each depth-first. A directory is
//! read completely (one getdents64 buffer, reused for the whole scan) and
//! each of its entries is inspected with
//! `statx(dirfd, name, AT_SYMLINK_NOFOLLOW, STATX_TYPE|STATX_INO|STATX_SIZE)`
//! in directory order; only then are its subdirectories entered, in the same
//! order. So the "first offending entry" is the first in that order, and the
//! entry counter is shared by all roots.
//!
//! For every entry, in this order:
//! 1. it is counted; entry number `max_entries + 1` fails with
//!    `backing_scan_limit`;
//! 2. an entry deeper than `max_depth` fails with `backing_scan_limit`;
//! 3. `statx`: `ENOENT` (it vanished since getdents) uncounts it; any other
//!    error fails with `backing_inaccessible`;
//! 4. a symbolic link fails with `backing_symlink`; a fifo, socket or device
//!    with `backing_unsupported_entry`;
//! 5. a (device, inode) in the alias set fails with `backing_alias`,
//!    whatever its type;
//! 6. a regular file adds to `files` and `bytes`; a directory to
//!    `directories`, and is entered later.
//!
//! A directory is entered with
//! `openat(parent, name, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC)` and its
//! descriptor's (device, inode) must equal what `statx` saw, else it was
//! replaced under us (`backing_inaccessible`; `ELOOP`, a link swapped in,
//! gives `backing_symlink`; `ENOENT`, removed since, is skipped). An error
//! opening or reading a directory fails with `backing_inaccessible`, except
//! `ENOENT` from getdents64: the directory was removed after it was opened
//! (retention pruning it, say), and a directory can only be removed empty,
//! so its reading simply ends.
//!
//! In a fail-closed report, `entries` and `max_depth` include the offending
//! entry; `directories`, `files` and `bytes` count only entries that passed.
//!
//! Open descriptors: one per directory on the current chain (at most
//! `max_depth + 1`), whatever the width of the tree. No allocation per entry:
//! names of pending subdirectories go into one byte buffer per depth, reused;
//! paths are only built for a report.
//!
//! In [`ScanMode::Lean`] an entry of a directory whose getdents64 `d_ino`
//! can be trusted (`lean.rs`) is classified from its `d_type` and `d_ino`
//! instead of step 3's `statx`; directories and `DT_UNKNOWN` entries are
//! still `statx`ed.
//!
//! # References
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::collections::HashSet;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::fs::{AtFlags, FileType, Mode, RawDir, Statx, StatxFlags};
use rustix::io::Errno;

use super::lean::full_scan;
use super::lean::{dir_identity, from_dirent, lean_scan, Lean, MountParents};
use super::root::DIR_FLAGS;
use super::tally::{classify_statx, join_path, physical, Class, Failure, Seen, Tally};
use super::{BackendKind, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRequest, ScanRoot};
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;

/// Size of the getdents64 buffer.
const DIRENT_BUF: usize = 64 * 1024;

/// What an entry's `statx` must return (the device is always filled).
const ENTRY_MASK: StatxFlags = StatxFlags::TYPE.union(StatxFlags::INO).union(StatxFlags::SIZE);

/// What an opened directory's `statx` must return.
const DIR_MASK: StatxFlags = StatxFlags::TYPE.union(StatxFlags::INO);

/// The synchronous backend (rustix `openat` + getdents64 +
/// `statx(AT_SYMLINK_NOFOLLOW)`), available everywhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncBackend;

impl ScanBackend for SyncBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Sync
    }

    fn scan(&self, req: &ScanRequest<'_>) -> ScanReport {
        let start = Instant::now();
        let walk = |mounts| {
            let mut scan = Scan::new(req.limits, req.aliases, req.mode, mounts);
            let failure = req.roots.iter().find_map(|root| scan.root(root).err());
            super::report(BackendKind::Sync, &scan.tally, failure, start)
        };
        match req.mode {
            ScanMode::Lean => lean_scan(req.roots, BackendKind::Sync, walk),
            ScanMode::Sizes => full_scan(req.roots, BackendKind::Sync, walk),
        }
    }
}

/// A subdirectory waiting to be entered.
#[derive(Clone, Copy)]
struct Pending {
    /// Start of its NUL-terminated name in [`Level::names`].
    start: usize,
    /// End of the name, NUL included.
    end: usize,
    /// What `statx` saw.
    id: PhysicalId,
}

/// Per-depth state, kept for the whole scan so its buffers are reused.
#[derive(Default)]
struct Level {
    /// NUL-terminated names of the subdirectories of the directory at this
    /// depth on the current chain.
    names: Vec<u8>,
    /// Those subdirectories, in directory order.
    subdirs: Vec<Pending>,
    /// How many of `subdirs` have been entered; the last one entered
    /// (`next - 1`) is the next directory down the chain.
    next: usize,
}

impl Level {
    fn clear(&mut self) {
        self.names.clear();
        self.subdirs.clear();
        self.next = 0;
    }

    /// The name of subdirectory `i`, NUL included.
    fn name(&self, i: usize) -> &[u8] {
        let p = &self.subdirs[i];
        &self.names[p.start..p.end]
    }
}

/// One scan's shared state.
struct Scan<'a> {
    limits: ScanLimits,
    aliases: &'a HashSet<PhysicalId>,
    tally: Tally,
    /// Measure sizes ([`ScanMode::Sizes`]).
    sizes: bool,
    /// Which directories may be read from getdents64 alone.
    lean: Lean,
    /// The getdents64 buffer.
    dirents: Vec<MaybeUninit<u8>>,
    /// State of the directory at each depth of the current chain.
    levels: Vec<Level>,
}

/// The path of the directory at depth `depth` on the current chain, joined
/// with `leaf` if any.
fn chain_path(root: &Path, levels: &[Level], depth: usize, leaf: Option<&[u8]>) -> PathBuf {
    let chain = levels[..depth].iter().map(|level| {
        let name = level.name(level.next - 1);
        &name[..name.len() - 1]
    });
    join_path(root, chain.chain(leaf))
}

fn file_type(mode: u16) -> FileType {
    FileType::from_raw_mode(u32::from(mode))
}

fn statx_id(st: &Statx) -> PhysicalId {
    physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino)
}

impl<'a> Scan<'a> {
    fn new(
        limits: ScanLimits,
        aliases: &'a HashSet<PhysicalId>,
        mode: ScanMode,
        mounts: Option<std::sync::Arc<MountParents>>,
    ) -> Self {
        let sizes = mode == ScanMode::Sizes;
        Scan {
            limits,
            aliases,
            tally: Tally::new(sizes),
            sizes,
            lean: Lean::new(mounts),
            dirents: vec![MaybeUninit::uninit(); DIRENT_BUF],
            levels: Vec::new(),
        }
    }

    /// Scans one root, depth first, keeping one descriptor per directory on
    /// the current chain.
    fn root(&mut self, root: &ScanRoot) -> Result<(), Failure> {
        let Some(dir) = &root.dir else { return Ok(()) };
        // `fds[i]` is the directory at depth `i + 1` on the current chain.
        let mut fds: Vec<OwnedFd> = Vec::new();
        let id = if self.sizes { None } else { dir_identity(dir.as_fd()) };
        self.read_dir(&root.path, dir.as_fd(), id, 0)?;
        loop {
            // The directory whose subdirectories are walked now: the root, or
            // the last of `fds`.
            let depth = fds.len();
            let level = &mut self.levels[depth];
            if level.next == level.subdirs.len() {
                if fds.pop().is_none() {
                    return Ok(());
                }
                continue;
            }
            let pending = level.subdirs[level.next];
            level.next += 1;
            let parent = fds.last().map_or(dir.as_fd(), AsFd::as_fd);
            if let Some(child) = self.enter(&root.path, parent, depth, pending)? {
                self.read_dir(&root.path, child.as_fd(), Some(pending.id), depth + 1)?;
                fds.push(child);
            }
        }
    }

    /// Opens the subdirectory `pending` of `parent` (at depth `depth`), the
    /// last one taken from `levels[depth]`, and checks it is the directory
    /// `statx` saw. `None`: it was removed since.
    fn enter(
        &self,
        root: &Path,
        parent: BorrowedFd<'_>,
        depth: usize,
        pending: Pending,
    ) -> Result<Option<OwnedFd>, Failure> {
        let fail = |reason: Reason| Err(Failure::new(reason, chain_path(root, &self.levels, depth + 1, None)));
        let Ok(name) = CStr::from_bytes_with_nul(&self.levels[depth].names[pending.start..pending.end]) else {
            return fail(Reason::BackingInaccessible);
        };
        let child = match rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return fail(Reason::BackingSymlink),
            Err(_) => return fail(Reason::BackingInaccessible),
        };
        match rustix::fs::statx(&child, c"", AtFlags::EMPTY_PATH, DIR_MASK) {
            Ok(st)
                if st.stx_mask & DIR_MASK.bits() == DIR_MASK.bits()
                    && file_type(st.stx_mode) == FileType::Directory
                    && statx_id(&st) == pending.id =>
            {
                Ok(Some(child))
            }
            _ => fail(Reason::BackingInaccessible),
        }
    }

    /// Reads the directory `dir` (identity `id`, when known) at depth
    /// `depth` on the current chain: inspects every entry and records its
    /// subdirectories in `levels[depth]`.
    fn read_dir(
        &mut self,
        root: &Path,
        dir: BorrowedFd<'_>,
        id: Option<PhysicalId>,
        depth: usize,
    ) -> Result<(), Failure> {
        // Lean: entries classified from getdents64 where it can be trusted.
        let trusted = match id {
            Some(id) if !self.sizes && self.lean.trusts(dir, id) => Some(id.dev),
            _ => None,
        };
        if self.levels.len() <= depth {
            self.levels.resize_with(depth + 1, Level::default);
        }
        let (above, rest) = self.levels.split_at_mut(depth);
        let level = &mut rest[0];
        level.clear();
        let child_depth = u32::try_from(depth + 1).unwrap_or(u32::MAX);
        let mut iter = RawDir::new(dir, &mut self.dirents);
        while let Some(entry) = iter.next() {
            let entry = match entry {
                Ok(e) => e,
                // The directory was removed while we held it (getdents64
                // answers ENOENT for a removed directory, and only an empty
                // directory can be removed): nothing more is in it.
                Err(Errno::NOENT) => break,
                Err(_) => return Err(Failure::new(Reason::BackingInaccessible, chain_path(root, above, depth, None))),
            };
            let name = entry.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            // An entry past a bound fails before it is inspected.
            let class = if self.tally.entries >= self.limits.max_entries || child_depth > self.limits.max_depth {
                Class::Unstatted
            } else if let Some(c) =
                trusted.and_then(|dev| from_dirent(entry.file_type(), entry.ino(), dev, self.aliases))
            {
                c
            } else {
                let st = rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, ENTRY_MASK);
                let seen = st.map_err(|e| e.raw_os_error()).map(|st| Seen {
                    complete: st.stx_mask & ENTRY_MASK.bits() == ENTRY_MASK.bits(),
                    mode: st.stx_mode,
                    id: statx_id(&st),
                    size: st.stx_size,
                });
                classify_statx(seen, self.sizes, self.aliases)
            };
            self.tally.admit(&self.limits, class, child_depth, || chain_path(root, above, depth, Some(bytes)))?;
            if let Class::Dir(id) = class {
                let start = level.names.len();
                level.names.extend_from_slice(name.to_bytes_with_nul());
                level.subdirs.push(Pending { start, end: level.names.len(), id });
            }
        }
        Ok(())
    }
}
