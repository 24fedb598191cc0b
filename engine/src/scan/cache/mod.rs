//! A directory cache for the lean backing-root scan, held in memory by its
//! owner (the guardian), never on disk.
//!
//! Per directory it keeps its identity (device, inode, birth time), its
//! change and modification times, when it was read, and its entries (name,
//! class, device and inode). A warm scan `statx`es every cached directory
//! and reads again only those whose record no longer holds (`record.rs`:
//! same identity and times, and a change time far enough before the read —
//! the racy rule). Everything else about
//! the scan — order, bounds, offending entries, aliases — is evaluated
//! afresh on every scan from the records, by the same counting rules as
//! every backend (`tally.rs`), so a cached scan's report equals a fresh
//! lean scan's (but for `elapsed_us`; `backend` says `sync`, the system
//! calls the cache's reads use).
//!
//! What the cache trusts, and what drops it:
//! - only directories the lean scan trusts are kept (`lean.rs`: a trusted
//!   filesystem — ext4, xfs, tmpfs, btrfs —, no mount point in it, and
//!   searchable); any other directory is read afresh every time;
//! - the mount table: `/proc/thread-self/mountinfo` is kept open after it
//!   is read, and read again when a `poll(2)` of it reports a change (a
//!   mount, unmount, move or remount in its namespace) or when the scanning
//!   thread is in another mount namespace (or the table names a mount
//!   point whose parent directory could not be identified: a rename, which
//!   no event reports, could bring it into reach); any difference from the
//!   last table drops every record (a mount appearing or vanishing
//!   anywhere);
//! - the clock: a scan that starts earlier than the last one (the clock
//!   stepped back) drops every record;
//! - a directory replaced by another with the same inode number is a miss:
//!   its birth time differs, and its change time is later than the record's
//!   by the racy rule.
//!
//! A kept record also keeps the descriptor its directory was read through
//! (`handle.rs`, within a budget), and a warm scan `statx`es it through
//! that instead of walking its path (why that is sound: `walk::validate`),
//! or not at all when the inotify watch on it had no event since the
//! record was read (`notify.rs`).
//! A root no scan asked for in 10 minutes loses its records.
//!
//! A root with many directories to read (a cold fill, dropped records, a
//! large miss) is read either by the walk itself or ahead of it by worker
//! threads (`fill.rs`), which make the same records; which way is measured
//! per process (`choose.rs`).
//!
//! The soundness argument is in `docs/IO_URING.md` ("The directory cache").
//! [`DirCache::set_enabled`] is the switch that turns it off (every scan
//! then reads everything, and nothing is kept).
//!
//! # References
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::lean::{Lean, MountParents, MountWatch};
use super::root::scan_opened;
use super::waiting::refused_mount;
use super::{BackendKind, ScanLimits, ScanMode, ScanReport, ScanRoot};
use crate::error::Reason;
use notify::Notify;
use winx_release_kernel::identity::PhysicalId;

mod choose;
mod eval;
mod fill;
mod handle;
mod notify;
mod pending;
mod record;
mod walk;

use choose::{FillChooser, Way};
pub(crate) use eval::evaluate;
use fill::Fill;
pub use handle::budget as descriptor_budget;
pub use record::DirLook;
pub(crate) use walk::RootSnapshot;
use walk::{
    validate, Fetched, Pending, ReadAhead, Reader, RootRecords, Step, ValidRecords, Walk, WalkCounts, DIRENT_BUF,
};

/// A root's records are dropped when no scan has asked for it for this
/// long (checked at every scan).
const ROOT_IDLE: Duration = Duration::from_secs(600);
/// What one scan spends at most on new watches (`notify.rs`), in units of
/// [`walk::watch_cost`]: about 2 ms. A cold scan of the bench's 976
/// directories in 16-level chains (48,000 entries) took 19.5 ms, and 46 ms
/// when it watched every directory; it now watches about a fifth of them,
/// and the next scans the rest.
const NEW_WATCHES: usize = 16_384;

/// What a [`DirCache`] has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Scans served.
    pub scans: u64,
    /// Directories taken from the cache.
    pub hits: u64,
    /// Directories read afresh.
    pub reads: u64,
    /// Subdirectories of directories read afresh whose identity was taken
    /// from the old record instead of a `statx` (see the walk's rule).
    pub reused: u64,
    /// Times every record was dropped (mount table changed, clock stepped
    /// back, cache switched off).
    pub drops: u64,
    /// Records that held without a `statx`: watched, and no event came for
    /// their directories since they were read (`notify.rs`).
    pub quiet: u64,
}

#[derive(Default)]
struct Inner {
    /// The mount table the records were taken under.
    mountinfo: Option<Vec<u8>>,
    /// That table, open: while it reports no change, it is not read again.
    mount_watch: Option<MountWatch>,
    mounts: Option<Arc<MountParents>>,
    roots: HashMap<PathBuf, RootRecords>,
    /// When each root of `roots` was last scanned.
    used: HashMap<PathBuf, Instant>,
    last_start: (i64, u32),
    stats: CacheStats,
}

/// A directory cache for lean scans of backing roots (module docs).
///
/// Safe to share between threads: scans through one cache run one at a
/// time. Hold one per process and keep it for the process's life; it is
/// only as large as the directories scanned (about 40 bytes and a name per
/// entry, and one open descriptor per directory while a quarter of the
/// soft `RLIMIT_NOFILE`, at most 16,384 in the process, allows: each keeps
/// its filesystem busy for `umount` until its record goes).
pub struct DirCache {
    inner: Mutex<Inner>,
    enabled: AtomicBool,
    tick_ns: i128,
    /// The inotify instance records are watched through, made at the first
    /// scan (`None`: none could be had, and every record is validated by
    /// `statx`).
    notify: OnceLock<Option<Arc<Notify>>>,
    /// What a scan may spend on new watches ([`NEW_WATCHES`]; tests lower it).
    watch_budget: AtomicUsize,
    /// How a root with many directories to read is read (`choose.rs`).
    chooser: FillChooser,
    /// A way forced by [`DirCache::force_fill_threads`]; `None`: the
    /// chooser's.
    forced: Mutex<Option<Way>>,
    /// Walks that started a parallel fill of their own.
    #[cfg(test)]
    late_fills: std::sync::atomic::AtomicU64,
}

impl Default for DirCache {
    fn default() -> Self {
        DirCache::new()
    }
}

impl std::fmt::Debug for DirCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirCache").field("enabled", &self.is_enabled()).field("stats", &self.stats()).finish()
    }
}

impl DirCache {
    /// An empty, enabled cache.
    pub fn new() -> DirCache {
        DirCache {
            inner: Mutex::default(),
            enabled: AtomicBool::new(true),
            tick_ns: record::coarse_tick_ns(),
            notify: OnceLock::new(),
            watch_budget: AtomicUsize::new(NEW_WATCHES),
            chooser: FillChooser::new(winx_release_kernel::sys::cores()),
            forced: Mutex::new(None),
            #[cfg(test)]
            late_fills: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Turns the cache on or off. Off, every scan reads every directory
    /// afresh and nothing is kept (the records held are dropped).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
        if !on {
            self.clear();
        }
    }

    /// Whether the cache is on.
    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    /// Drops every record.
    pub(crate) fn clear(&self) {
        let mut g = self.lock();
        if !g.roots.is_empty() {
            g.stats.drops += 1;
        }
        g.roots.clear();
    }

    /// Sets what a scan may spend on new watches, in
    /// [`walk::watch_cost`] units.
    #[cfg(test)]
    pub(crate) fn set_watch_budget(&self, units: usize) {
        self.watch_budget.store(units, Ordering::Relaxed);
    }

    /// Reads every root's misses with `threads` workers (1: sequentially,
    /// by the walk itself; more: the parallel fill, `fill.rs`), however few
    /// they are and whatever the measured costs say; `None`: as they say
    /// (`choose.rs`).
    // Hidden: a test and bench hook that overrides a measured choice.
    #[doc(hidden)]
    pub fn force_fill_threads(&self, threads: Option<usize>) {
        let way = threads.map(|n| if n > 1 { Way::Parallel(n) } else { Way::Sequential });
        *self.forced.lock().unwrap_or_else(|e| e.into_inner()) = way;
    }

    /// How to read a root with `misses` directories to read (at least).
    fn way(&self, misses: usize) -> Way {
        if let Some(way) = *self.forced.lock().unwrap_or_else(|e| e.into_inner()) {
            return way;
        }
        self.chooser.choose(misses)
    }

    /// The workers for a walk that meets a large miss its records did not
    /// foretell (`choose.rs`); `None`: it reads on alone.
    fn late(&self) -> Option<usize> {
        if self.forced.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            return None;
        }
        self.chooser.late()
    }

    /// What the cache has done so far.
    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A scan that panicked left records that were each complete when
        // inserted; the state stays usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Scans the opened `roots` leanly under one shared bound, failing
    /// closed on the first offending entry or any entry whose identity is
    /// in `aliases`: the report of
    /// [`ScanBackend::scan`](super::ScanBackend::scan) in
    /// [`ScanMode::Lean`], reading only the directories whose records no
    /// longer hold.
    pub(crate) fn scan(&self, roots: &[ScanRoot], limits: ScanLimits, aliases: &HashSet<PhysicalId>) -> ScanReport {
        let start = Instant::now();
        let snaps = self.snapshot(roots, limits);
        let refs: Vec<&RootSnapshot> = snaps.iter().collect();
        evaluate(&refs, limits, aliases, start)
    }

    /// Opens every root with [`open_root`](crate::scan::open_root) and scans them with
    /// `DirCache::scan`; a root that cannot be opened fails the scan
    /// closed with nothing scanned, as
    /// [`scan_paths_with`](super::scan_paths_with) does.
    pub fn scan_paths(&self, roots: &[PathBuf], limits: ScanLimits, aliases: &HashSet<PhysicalId>) -> ScanReport {
        scan_opened(roots, || BackendKind::Sync, ScanMode::Lean, |opened| self.scan(opened, limits, aliases))
    }

    /// The walks of `roots` (alias-free), from the records where they hold,
    /// updating the records.
    pub(crate) fn snapshot(&self, roots: &[ScanRoot], limits: ScanLimits) -> Vec<RootSnapshot> {
        let mut g = self.lock();
        let enabled = self.is_enabled();
        // The mount table is read again only when the one kept open since
        // the last read reports a change, or is of another namespace, or
        // named a mount point whose parent could not be identified (a
        // rename, which no event reports, could bring it into reach).
        let kept = g.mountinfo.is_some()
            && g.mounts.as_ref().is_some_and(|m| m.complete())
            && g.mount_watch.as_ref().is_some_and(MountWatch::still_current);
        let table = if kept {
            None
        } else {
            let (watch, table) = MountWatch::open_read().map_or((None, None), |(w, t)| (Some(w), Some(t)));
            g.mount_watch = watch;
            Some(table)
        };
        let start = record::now();
        let moved = table.as_ref().is_some_and(|t| t.is_none() || *t != g.mountinfo);
        let stale = !enabled || moved || start < g.last_start;
        if stale {
            if !g.roots.is_empty() {
                g.stats.drops += 1;
            }
            g.roots.clear();
            if let Some(table) = table {
                g.mounts = table.as_deref().map(MountParents::from_table);
                g.mountinfo = table;
            }
        }
        g.last_start = start;
        g.stats.scans += 1;
        let mounts = g.mounts.clone();
        // Every event queued so far, before any record is validated.
        let notify = if enabled { self.notify.get_or_init(Notify::new).as_ref() } else { None };
        if let Some(n) = notify {
            n.drain();
        }
        let mut new_watches = self.watch_budget.load(Ordering::Relaxed);
        let mut dirents = vec![MaybeUninit::uninit(); DIRENT_BUF];
        let mut snaps = Vec::with_capacity(roots.len());
        for root in roots {
            let Some(dir) = &root.dir else {
                snaps.push(RootSnapshot { path: root.path.clone(), steps: Vec::new() });
                continue;
            };
            // A mount below the root that no scan enters (a FUSE or NFS
            // mount, which could hang the walk), or no mount table to tell:
            // refused, nothing read.
            let refused = match &mounts {
                Some(m) => refused_mount(m.waiting(), root),
                None => Some(Vec::new()),
            };
            if let Some(rel) = refused {
                let steps = vec![Step::Fail { rel, reason: Reason::BackingInaccessible }];
                snaps.push(RootSnapshot { path: root.path.clone(), steps });
                continue;
            }
            let records = g.roots.remove(&root.path).unwrap_or_default();
            let (valid, quiet) = if enabled {
                validate(dir.as_fd(), &records, self.tick_ns, notify, &mut new_watches)
            } else {
                (ValidRecords::none(), 0)
            };
            g.stats.quiet += quiet;
            let budget = AtomicUsize::new(new_watches);
            let misses = if records.is_empty() { choose::LARGE } else { valid.misses() };
            let way = self.way(misses);
            let began = Instant::now();
            let fill =
                Fill { limits, valid: &valid, prev: &records, mounts: mounts.clone(), notify, new_watches: &budget };
            let fetched = match way {
                Way::Parallel(threads) => fill.run(dir.as_fd(), threads, vec![Pending::root()]),
                Way::Sequential => Fetched::default(),
            };
            // A walk that set out sequentially because its records foretold
            // few misses reads the rest in parallel once it has read many.
            let late_threads = if way == Way::Sequential && misses < choose::LARGE { self.late() } else { None };
            let ahead = |pending: Vec<Pending>| fill.run(dir.as_fd(), late_threads.unwrap_or(1), pending);
            let mut walk = Walk {
                limits,
                valid: &valid,
                fetched,
                reader: Reader {
                    lean: Lean::new(mounts.clone()),
                    prev: &records,
                    dirents: std::mem::take(&mut dirents),
                    notify,
                    new_watches: &budget,
                },
                counts: WalkCounts::default(),
                late: late_threads.map(|_| (choose::LARGE as u64, &ahead as ReadAhead<'_>)),
            };
            let snap = walk.root(root.path.clone(), dir.as_fd());
            if !walk.counts.late {
                // A walk that changed ways midway measures neither.
                self.chooser.note(way, walk.counts.reads, began.elapsed());
            }
            #[cfg(test)]
            self.late_fills.fetch_add(u64::from(walk.counts.late), Ordering::Relaxed);
            dirents = std::mem::take(&mut walk.reader.dirents);
            let counts = walk.counts;
            drop(walk);
            new_watches = budget.into_inner();
            g.stats.hits += counts.hits;
            g.stats.reads += counts.reads;
            g.stats.reused += counts.reused;
            if enabled && counts.complete && counts.reads == 0 && snap.steps.len() == records.len() {
                // Every directory came from its record, and every record
                // was used: the records stand as they are.
                g.roots.insert(root.path.clone(), records);
            } else if enabled {
                // A complete walk saw every directory: records of the
                // others are gone. A walk that stopped early keeps them for
                // later (each is validated again before use).
                let mut kept = if counts.complete { RootRecords::new() } else { records };
                for step in &snap.steps {
                    if let Step::Dir(rec) = step {
                        if rec.keep {
                            kept.insert(rec.rel.as_bytes().to_vec(), Arc::clone(rec));
                        } else {
                            kept.remove(rec.rel.as_bytes());
                        }
                    }
                }
                g.roots.insert(root.path.clone(), kept);
            }
            snaps.push(snap);
        }
        // Records (and their descriptors) of roots no scan asked for in a
        // while go: a deleted workspace's, say.
        let now = Instant::now();
        for root in roots {
            g.used.insert(root.path.clone(), now);
        }
        let Inner { roots: kept, used, .. } = &mut *g;
        used.retain(|_, t| now.duration_since(*t) < ROOT_IDLE);
        kept.retain(|p, _| used.contains_key(p));
        snaps
    }
}
