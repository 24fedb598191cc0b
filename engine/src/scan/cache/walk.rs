//! Building one root's snapshot: the directories a lean scan would read,
//! in its order, each taken from the cache when its record is still valid
//! and read afresh otherwise.
//!
//! The order is the synchronous backend's: a directory's entries in
//! directory order, then its subdirectories depth first, in that order
//! (preorder). A fresh read classifies every entry as the lean synchronous
//! scan does (`d_type`/`d_ino` on a trusted directory, `statx` otherwise,
//! and always for directories), but without the alias set: aliases are
//! applied when the snapshot is evaluated, so one snapshot serves releases
//! with different targets.
//!
//! A directory below the root is opened with `openat2(root, rel,
//! RESOLVE_NO_SYMLINKS)` and must be the directory its parent's entry
//! names (device and inode), as the synchronous backend checks after its
//! `openat`: `ENOENT` skips it (removed since), `ELOOP` is
//! `backing_symlink`, anything else `backing_inaccessible`.
//!
//! The walk stops where evaluation must stop whatever the aliases: after a
//! directory holding an offending entry, a directory whose entries are too
//! deep, or once the root alone holds more entries than the bound.
//!
//! # References
//! - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, RawDir, ResolveFlags, StatxFlags};
use rustix::io::Errno;

use super::super::lean::{from_dirent, Lean};
use super::super::root::DIR_FLAGS;
use super::super::tally::{classify_statx, physical, Class, Seen};
use super::super::ScanLimits;
use super::handle::Handle;
use super::notify::{Notify, Watch};
use super::record::{now, stat_dir, DirRecord, DirStat, Entry, Kind, Summary};
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;

pub(crate) use super::pending::{Fetched, Pending, ReadAhead};

/// Size of the getdents64 buffer.
pub(crate) const DIRENT_BUF: usize = 64 * 1024;

/// What an entry's `statx` must return, as in the synchronous backend.
const ENTRY_MASK: StatxFlags = StatxFlags::TYPE.union(StatxFlags::INO).union(StatxFlags::SIZE);

/// One step of a root's walk.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// A directory read (from the cache or afresh): its entries are admitted
    /// in order.
    Dir(Arc<DirRecord>),
    /// Entering the directory `rel` failed with `reason`.
    Fail {
        /// Its path below the root.
        rel: Vec<u8>,
        /// Why.
        reason: Reason,
    },
}

/// One root's walk.
#[derive(Clone, Debug)]
pub(crate) struct RootSnapshot {
    /// The root's path, for reports.
    pub(crate) path: PathBuf,
    /// The directories in scan order.
    pub(crate) steps: Vec<Step>,
}

/// Counts of one walk.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WalkCounts {
    pub(crate) hits: u64,
    pub(crate) reads: u64,
    pub(crate) reused: u64,
    pub(crate) complete: bool,
    /// The walk started a parallel fill of its own ([`Walk::late`]).
    pub(crate) late: bool,
}

/// The records of one root, by path below the root.
pub(crate) type RootRecords = HashMap<Vec<u8>, Arc<DirRecord>>;

/// The records of one root that are still valid: the root's records less
/// those whose directory changed since it was read. A warm scan finds few
/// of those, so this holds them, not a copy of the many valid ones.
pub(crate) struct ValidRecords<'a> {
    /// The root's records; `None` when none may be used.
    records: Option<&'a RootRecords>,
    /// The records of `records` that are not valid.
    invalid: HashSet<&'a [u8]>,
}

impl<'a> ValidRecords<'a> {
    /// No record is valid (the cache is switched off).
    pub(crate) fn none() -> ValidRecords<'a> {
        ValidRecords { records: None, invalid: HashSet::new() }
    }

    /// How many of the root's records are not valid: directories the walk
    /// reads again (at least).
    pub(crate) fn misses(&self) -> usize {
        self.invalid.len()
    }

    /// The valid record of the directory `rel` below the root.
    pub(crate) fn get(&self, rel: &[u8]) -> Option<&'a Arc<DirRecord>> {
        let rec = self.records?.get(rel)?;
        (!self.invalid.contains(rel)).then_some(rec)
    }
}

/// The cached records that are still valid for the root opened as `root`:
/// every record's directory is `statx`ed: through the descriptor the
/// record kept (`handle.rs`), else by its path below the root (the root
/// through `root`).
///
/// A `statx` through the kept descriptor sees the directory the record was
/// read from, wherever it is now; by its path, whatever is at the path.
/// Both are sound because the walk uses a valid record of path `P` only
/// where `P`'s parent, as the walk has it (its own valid record, or read
/// afresh), names at `P`'s name a directory of the record's identity
/// ([`Walk::record`], `expect`). A parent whose record holds has had no
/// entry added, removed or renamed since it was read (each such change
/// moves its change time), so the name still denotes that directory; a
/// parent read afresh names what is there now. And a kept descriptor pins
/// its directory's inode, so no other directory can take its inode number
/// meanwhile. The root has no parent: it is always `statx`ed through
/// `root`, opened afresh for this scan.
///
/// A record whose kept descriptor carries a watch that has had no event
/// since the record was read needs no `statx`: its directory's entries are
/// what it holds (`notify.rs`; the last [`Notify::drain`](super::notify::Notify::drain)
/// came first). The walk's parent rule applies to it as to the others.
/// Returns the records valid, and how many were taken without a `statx`.
///
/// A kept record without a watch gets one here, while `new_watches` (in
/// [`watch_cost`] units) lasts, **before** its `statx`: if that `statx` says the record holds, its
/// entries are the directory's at a time after the watch was added, and
/// every later change is an event.
pub(crate) fn validate<'a>(
    root: BorrowedFd<'_>,
    records: &'a RootRecords,
    tick_ns: i128,
    notify: Option<&Arc<Notify>>,
    new_watches: &mut usize,
) -> (ValidRecords<'a>, u64) {
    let mut quiet = 0;
    let invalid = records
        .iter()
        .filter(|(_, rec)| {
            let now = match &rec.handle {
                Some(h) if rec.keep && h.watch().is_some_and(Watch::quiet) => {
                    quiet += 1;
                    return false;
                }
                Some(h) => {
                    if let Some(n) = notify.filter(|_| rec.keep && h.watch().is_none() && *new_watches > 0) {
                        if let Some(w) = n.watch(h.as_fd()) {
                            *new_watches = new_watches.saturating_sub(watch_cost(rec.entries.len()));
                            h.attach(w);
                        }
                    }
                    stat_dir(h.as_fd(), c"")
                }
                None => stat_dir(root, &rec.rel),
            };
            !now.is_ok_and(|now| rec.still_valid(&now, tick_ns))
        })
        .map(|(rel, _)| rel.as_slice())
        .collect();
    (ValidRecords { records: Some(records), invalid }, quiet)
}

/// What adding a watch on a directory of `entries` entries costs, in units
/// of one entry: the kernel marks each cached entry of a directory when
/// its first watch asking for events on entries is added (inotify always
/// does), about 0.12 µs an entry and 5 µs a watch on this machine
/// (`inotify_add_watch` through `/proc/self/fd/N`, 200 directories of 50
/// files: 14.5 µs each; 48 of 999 files: 122 µs each; 2026-12-01).
pub(crate) fn watch_cost(entries: usize) -> usize {
    entries + 40
}

/// One walk of one root.
pub(crate) struct Walk<'a> {
    pub(crate) limits: ScanLimits,
    /// The records that are still valid.
    pub(crate) valid: &'a ValidRecords<'a>,
    /// Records read ahead of the walk by the parallel fill (`fill.rs`),
    /// taken where the walk reaches them; empty when the fill was
    /// sequential.
    pub(crate) fetched: Fetched,
    pub(crate) reader: Reader<'a>,
    pub(crate) counts: WalkCounts,
    /// A parallel fill the walk starts itself, over the directories it
    /// has still to look at, once it has read this many afresh: a large
    /// miss the records did not foretell (a new subtree).
    pub(crate) late: Option<(u64, ReadAhead<'a>)>,
}

/// What reads directories afresh: one per walk, and one per worker of the
/// parallel fill (`fill.rs`).
pub(crate) struct Reader<'a> {
    pub(crate) lean: Lean,
    /// Every record the root had before this walk, valid or not: a
    /// directory read afresh takes the identities of its subdirectories
    /// from its old record where nothing can have changed them
    /// ([`Reader::read`]).
    pub(crate) prev: &'a RootRecords,
    pub(crate) dirents: Vec<MaybeUninit<u8>>,
    /// Where directories read afresh are watched before they are read
    /// (`notify.rs`); `None`: not watched.
    pub(crate) notify: Option<&'a Arc<Notify>>,
    /// What this scan may still spend on new watches, in [`watch_cost`]
    /// units (a cold scan watches some directories, later scans the rest);
    /// shared by the fill's workers.
    pub(crate) new_watches: &'a AtomicUsize,
}

/// Whether a walk that reached `rec`, the record of a directory at `depth`,
/// stops there whatever else it holds: an offending entry, or entries
/// deeper than the bound (the entry bound is the walk's own count).
pub(crate) fn stops_at(rec: &DirRecord, depth: u32, limits: ScanLimits) -> bool {
    let offends = rec.failed.is_some() || rec.summary.offends;
    offends || (depth + 1 > limits.max_depth && !rec.entries.is_empty())
}

impl Walk<'_> {
    /// Walks the root `path` opened as `root` and returns its steps.
    pub(crate) fn root(&mut self, path: PathBuf, root: BorrowedFd<'_>) -> RootSnapshot {
        let mut steps = Vec::new();
        let mut stack = vec![Pending::root()];
        let mut entries: u64 = 0;
        self.counts.complete = false;
        while let Some(p) = stack.pop() {
            if let Some((_, ahead)) = self.late.filter(|(after, _)| self.counts.reads >= *after) {
                self.late = None;
                self.counts.late = true;
                let mut pending = stack.clone();
                pending.push(p.clone());
                self.fetched.extend(ahead(pending));
            }
            let rec = match self.record(root, &p) {
                Ok(Some(rec)) => rec,
                Ok(None) => continue,
                Err(reason) => {
                    steps.push(Step::Fail { rel: p.rel, reason });
                    return RootSnapshot { path, steps };
                }
            };
            entries += rec.entries.len() as u64;
            // The record's summary, made when it was read, answers without
            // a walk over its entries (a warm scan passes every record).
            let stop = stops_at(&rec, p.depth, self.limits) || entries > self.limits.max_entries;
            if !stop {
                stack.extend(p.children(&rec));
            }
            steps.push(Step::Dir(rec));
            if stop {
                return RootSnapshot { path, steps };
            }
        }
        self.counts.complete = true;
        RootSnapshot { path, steps }
    }

    /// The record of `p`: the cached one when still valid and the directory
    /// its parent names, else the one the fill read ahead when it is that
    /// directory, else a fresh read. `Ok(None)`: removed since.
    fn record(&mut self, root: BorrowedFd<'_>, p: &Pending) -> Result<Option<Arc<DirRecord>>, Reason> {
        if let Some(rec) = self.valid.get(&p.rel) {
            if p.expect.is_none_or(|id| id == rec.stat.id) {
                self.counts.hits += 1;
                return Ok(Some(Arc::clone(rec)));
            }
        }
        self.counts.reads += 1;
        if let Some((rec, reused)) = self.fetched.take(p) {
            self.counts.reused += reused;
            return Ok(Some(rec));
        }
        let got = self.reader.fresh(root, p)?;
        Ok(got.map(|(rec, reused)| {
            self.counts.reused += reused;
            Arc::new(rec)
        }))
    }
}

impl Reader<'_> {
    /// Reads the directory `p` afresh: opened beneath `root` (the root
    /// itself when `p.rel` is empty), watched, `statx`ed and checked to be
    /// the directory `p.expect` names, then its entries read. Returns the
    /// record and how many subdirectory identities it took from the old
    /// record; `Ok(None)`: removed since.
    pub(crate) fn fresh(&mut self, root: BorrowedFd<'_>, p: &Pending) -> Result<Option<(DirRecord, u64)>, Reason> {
        let rel = CString::new(p.rel.as_slice()).map_err(|_| Reason::BackingInaccessible)?;
        let opened: Option<OwnedFd> = if p.rel.is_empty() {
            None
        } else {
            let how = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH;
            match rustix::fs::openat2(root, &rel, DIR_FLAGS, Mode::empty(), how) {
                Ok(fd) => Some(fd),
                Err(Errno::NOENT) => return Ok(None),
                Err(Errno::LOOP) => return Err(Reason::BackingSymlink),
                Err(_) => return Err(Reason::BackingInaccessible),
            }
        };
        let dir = opened.as_ref().map_or(root, |fd| fd.as_fd());
        // Watched before it is read, through the descriptor its record
        // keeps (`notify.rs`); the root is `statx`ed at every scan.
        let watch = match (&opened, self.notify) {
            (Some(fd), Some(n)) if self.new_watches.load(Ordering::Relaxed) > 0 => n.watch(fd.as_fd()),
            _ => None,
        };
        let read_start = now();
        let stat = match stat_dir(dir, c"") {
            Ok(st) => st,
            Err(_) => return Err(Reason::BackingInaccessible),
        };
        if p.expect.is_some_and(|id| id != stat.id) {
            return Err(Reason::BackingInaccessible);
        }
        let prev = self.prev.get(&p.rel).filter(|r| r.stat.id == stat.id && r.stat.btime == stat.btime).cloned();
        let (mut rec, reused) = self.read(dir, rel, p.depth, stat, read_start, prev.as_deref());
        if watch.is_some() {
            let cost = watch_cost(rec.entries.len());
            let _ =
                self.new_watches.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(cost)));
        }
        if rec.keep {
            // The descriptor the record describes (`stat` came through it).
            rec.handle = opened.and_then(|fd| Handle::keep(fd, watch));
        }
        Ok(Some((rec, reused)))
    }

    /// Reads the entries of `dir` afresh.
    ///
    /// A subdirectory is `statx`ed, as in the lean scan, unless `prev`, the
    /// old record of this same directory (device, inode and birth time),
    /// holds an entry of the same name that was a directory with the
    /// inode `d_ino` names now, on this directory's device, and the
    /// directory is trusted now (no mount point in it by the current mount
    /// table, a filesystem whose `d_ino` is the inode). Its `statx` would
    /// then return that same identity: a subdirectory's device differs
    /// from its parent's only at a mount point or a btrfs subvolume root;
    /// the first is excluded by the mount table, the second by the old
    /// identity on the parent's device (a subvolume root is always on a
    /// device of its own, and a directory cannot turn into one in place).
    fn read(
        &mut self,
        dir: BorrowedFd<'_>,
        rel: CString,
        depth: u32,
        stat: DirStat,
        read_start: (i64, u32),
        prev: Option<&DirRecord>,
    ) -> (DirRecord, u64) {
        let trusted = self.lean.trusts(dir, stat.id);
        let old_dirs: HashMap<&[u8], PhysicalId> = match prev {
            Some(prev) if trusted && prev.summary.dirs > 0 => prev
                .entries
                .iter()
                .filter_map(|e| match e.kind {
                    Kind::Dir(id) if id.dev == stat.id.dev => Some((&*e.name, id)),
                    _ => None,
                })
                .collect(),
            _ => HashMap::new(),
        };
        let none = HashSet::new();
        let mut reused = 0;
        let mut entries = Vec::new();
        let mut failed = None;
        let mut vanished = false;
        let mut iter = RawDir::new(dir, &mut self.dirents);
        while let Some(entry) = iter.next() {
            let entry = match entry {
                Ok(e) => e,
                Err(Errno::NOENT) => break,
                Err(_) => {
                    failed = Some(Reason::BackingInaccessible);
                    break;
                }
            };
            let name = entry.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let lean = if trusted { from_dirent(entry.file_type(), entry.ino(), stat.id.dev, &none) } else { None };
            let known = match old_dirs.get(bytes) {
                Some(&id) if entry.file_type() == FileType::Directory && id.ino == entry.ino() => Some(id),
                _ => None,
            };
            let kind = match (known, lean) {
                (Some(id), _) => {
                    reused += 1;
                    Kind::Dir(id)
                }
                (None, Some(Class::File(_))) => Kind::File(PhysicalId { dev: stat.id.dev, ino: entry.ino() }),
                (None, Some(Class::Fail(r))) => Kind::Fail(r),
                (None, _) => {
                    let st = rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, ENTRY_MASK);
                    let seen = st.map_err(|e| e.raw_os_error()).map(|st| Seen {
                        complete: st.stx_mask & ENTRY_MASK.bits() == ENTRY_MASK.bits(),
                        mode: st.stx_mode,
                        id: physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino),
                        size: st.stx_size,
                    });
                    let id = seen.as_ref().map(|s| s.id).ok();
                    match (classify_statx(seen, false, &none), id) {
                        (Class::Vanished, _) => {
                            vanished = true;
                            continue;
                        }
                        (Class::File(_), Some(id)) => Kind::File(id),
                        (Class::Dir(id), _) => Kind::Dir(id),
                        (Class::Fail(r), _) => Kind::Fail(r),
                        _ => Kind::Fail(Reason::BackingInaccessible),
                    }
                }
            };
            entries.push(Entry { name: bytes.into(), kind });
        }
        let keep = trusted && failed.is_none() && !vanished && stat.complete;
        let summary = Summary::of(&entries);
        (DirRecord { rel, depth, stat, read_start, entries, failed, keep, summary, handle: None }, reused)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    use crate::scan::{scan_paths_with, ScanMode, SyncBackend};

    use rustix::fs::{Mode, OFlags};

    use super::super::DirCache;
    use super::*;
    use crate::scan::{open_root, ScanLimits};

    fn names(rec: &DirRecord) -> Vec<&[u8]> {
        rec.entries.iter().map(|e| &*e.name).collect()
    }

    fn open_dir(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY, Mode::empty()).unwrap()
    }

    /// A record validated through its kept descriptor says only that *its*
    /// directory is unchanged, wherever that directory is now: the walk
    /// must use it only where the parent names that directory. Here the
    /// record at `x` is made the record (and descriptor) of `y`, as if `y`
    /// had stood at `x` when it was read and had been moved since without
    /// its change time moving; the parent, unchanged, names the real `x`.
    #[test]
    fn a_kept_record_is_used_only_where_its_parent_names_its_directory() {
        let t = tempfile::tempdir().unwrap();
        for (d, f) in [("x", "in-x"), ("y", "in-y")] {
            std::fs::create_dir(t.path().join(d)).unwrap();
            std::fs::write(t.path().join(d).join(f), b"").unwrap();
        }
        // Past the racy window, so that the records settle when read.
        std::thread::sleep(Duration::from_millis(50));
        let cache = DirCache::new();
        let lim = ScanLimits::default();
        cache.snapshot(&[open_root(t.path()).unwrap()], lim);
        {
            let mut g = cache.lock();
            let recs = g.roots.get_mut(t.path()).expect("records of the root");
            let Some(y) = recs.get(b"y".as_slice()).cloned() else {
                eprintln!("skipped: this filesystem's directories are not cached (not trusted by the lean scan)");
                return;
            };
            assert!(y.keep && y.handle.is_some(), "y's record keeps its descriptor");
            let forged = DirRecord {
                rel: c"x".into(),
                depth: y.depth,
                stat: y.stat,
                read_start: y.read_start,
                entries: y.entries.clone(),
                failed: None,
                keep: true,
                summary: Summary::of(&y.entries),
                handle: Handle::keep(open_dir(&t.path().join("y")), None),
            };
            recs.insert(b"x".to_vec(), Arc::new(forged));
        }
        let snap = cache.snapshot(&[open_root(t.path()).unwrap()], lim).remove(0);
        let dir = |rel: &[u8]| {
            snap.steps.iter().find_map(|s| match s {
                Step::Dir(r) if r.rel.as_bytes() == rel => Some(Arc::clone(r)),
                _ => None,
            })
        };
        let (root, x) = (dir(b"").unwrap(), dir(b"x").unwrap());
        assert_eq!(names(&x), [b"in-x".as_slice()], "x scanned with y's entries");
        // The test means something only if the parent's record held (so the
        // name-to-directory check, not a re-read of the parent, decided).
        assert!(Arc::ptr_eq(&root, cache.lock().roots[t.path()].get(b"".as_slice()).unwrap()));
        assert!(cache.stats().hits >= 2, "the root and y came from the cache: {:?}", cache.stats());
    }

    /// A record read while no watch could be added gets one at a later
    /// scan, before its `statx`; from the scan after that it holds without
    /// one, and a change in its directory is still seen.
    #[test]
    fn a_record_read_unwatched_is_watched_later_and_a_change_still_seen() {
        let t = tempfile::tempdir().unwrap();
        for d in ["a", "b", "c"] {
            std::fs::create_dir(t.path().join(d)).unwrap();
            std::fs::write(t.path().join(d).join("f"), b"").unwrap();
        }
        let roots = [t.path().to_path_buf()];
        let (lim, none) = (ScanLimits::default(), HashSet::new());
        let cache = DirCache::new();
        cache.set_watch_budget(0);
        // Past the racy window, so that the records settle when read.
        std::thread::sleep(Duration::from_millis(50));
        let _ = cache.scan_paths(&roots, lim, &none);
        cache.set_watch_budget(usize::MAX);
        let s0 = cache.stats();
        let _ = cache.scan_paths(&roots, lim, &none);
        let s1 = cache.stats();
        if s1.hits - s0.hits < 4 {
            eprintln!("SKIPPED: this filesystem's directories are not cached (not trusted by the lean scan)");
            return;
        }
        assert_eq!((s1.quiet - s0.quiet, s1.reads - s0.reads), (0, 0), "statxed, and watched now: {s1:?}");
        let _ = cache.scan_paths(&roots, lim, &none);
        let s2 = cache.stats();
        if super::super::notify::Notify::new().is_none() {
            eprintln!("SKIPPED: no inotify instance can be had here");
            return;
        }
        assert_eq!(s2.quiet - s1.quiet, 3, "{s2:?}");
        // A change in b: its event makes it be read again, and the verdict
        // is a fresh scan's.
        std::os::unix::fs::symlink("/", t.path().join("b/l")).unwrap();
        let got = cache.scan_paths(&roots, lim, &none);
        let s3 = cache.stats();
        assert_eq!((s3.quiet - s2.quiet, s3.reads - s2.reads), (2, 1), "{s3:?}");
        let fresh = scan_paths_with(&SyncBackend, &roots, lim, &none, ScanMode::Lean);
        assert!(got.failed_closed() && fresh.failed_closed());
        assert_eq!((got.reason, got.path), (fresh.reason, fresh.path));
    }
}
