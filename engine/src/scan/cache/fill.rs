//! The parallel fill: reading many directories of one root at once, ahead
//! of the walk, when the cache has many to read (a cold fill, a root whose
//! records were dropped, a large miss); or, started by the walk itself,
//! from the directories it has still to look at once it has read many
//! that no record foretold (a new subtree; `Walk::late`).
//!
//! Worker threads (the calling thread and `threads - 1` more) traverse the
//! root as the walk does: from the root, each directory taken from its
//! valid record where that record is the directory its parent names, read
//! afresh otherwise, by the walk's own [`Reader::fresh`] (opened beneath
//! the root without following links, checked to be the directory its
//! parent names, watched before it is read, `statx`ed, then its entries
//! read); each worker goes depth first through the subdirectories of what
//! it read, and hands half of them (the shallowest) to a shared stack when
//! another worker has nothing to do. A worker does not descend where the walk would
//! stop at that directory whatever else it holds (an offending entry,
//! entries too deep), and every worker stops once the entries read
//! exceed the scan's bound or an offending entry is found.
//!
//! The walk ([`Walk::root`](super::walk::Walk::root)) then runs as
//! before, in its order, and takes a record read ahead only where it
//! reaches that path and its parent names that very directory (device and
//! inode), as it takes a valid cached record; anywhere else (a directory
//! the fill did not read, or read under another parent's entry, or whose
//! opening failed) it reads afresh itself. So the snapshot is built by
//! the walk's rules from records each made by the walk's reader, at a
//! time within the scan: the records, the steps and the report are the
//! sequential fill's (the parity test in this file compares them).
//! Records read ahead that the walk does not reach are dropped with their
//! descriptors and watches.
//!
//! Whether a root is filled in parallel is `choose.rs`'s decision.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::super::lean::{Lean, MountParents};
use super::super::ScanLimits;
use super::notify::Notify;
use super::record::DirRecord;
use super::walk::{stops_at, Fetched, Pending, Reader, RootRecords, ValidRecords, DIRENT_BUF};

/// What the parallel fill of one root works from.
pub(crate) struct Fill<'a> {
    pub(crate) limits: ScanLimits,
    pub(crate) valid: &'a ValidRecords<'a>,
    pub(crate) prev: &'a RootRecords,
    pub(crate) mounts: Option<Arc<MountParents>>,
    pub(crate) notify: Option<&'a Arc<Notify>>,
    pub(crate) new_watches: &'a AtomicUsize,
}

/// The shared stack of directories to look at.
struct Queue {
    stack: Vec<Pending>,
    /// Workers with nothing of their own to look at.
    idle: usize,
    /// The number of workers (fewer than asked for when a thread could
    /// not be had).
    threads: usize,
}

/// The state the workers share.
struct Shared {
    queue: Mutex<Queue>,
    more: Condvar,
    /// Workers waiting for directories: one that has more than one of its
    /// own then shares half of them.
    waiting: AtomicUsize,
    /// Entries of the directories looked at so far.
    entries: AtomicU64,
    /// Set once the walk must stop before the end, or every directory was
    /// looked at: no worker takes more.
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next directory from the shared stack, waiting while another
    /// worker may still share some; `None` once every worker is idle with
    /// the stack empty, or the fill stops.
    fn next(&self) -> Option<Pending> {
        let mut q = self.lock();
        q.idle += 1;
        let got = loop {
            if self.stop.load(Ordering::SeqCst) {
                break None;
            }
            if let Some(p) = q.stack.pop() {
                break Some(p);
            }
            if q.idle == q.threads {
                break None;
            }
            self.waiting.fetch_add(1, Ordering::SeqCst);
            q = self.more.wait(q).unwrap_or_else(|e| e.into_inner());
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        };
        q.idle -= 1;
        got
    }

    /// Stops every worker: the stop is seen under the lock before any
    /// worker waits, and the waiting ones are woken.
    fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.lock());
        self.more.notify_all();
    }
}

/// Stops the fill when its worker leaves, also by a panic, so that no
/// other worker waits for directories it will never share.
struct Leaving<'a>(&'a Shared);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

impl Fill<'_> {
    /// Reads ahead the directories of `start` and below them (in the root
    /// opened as `root`) that have no valid record, on `threads` workers
    /// (the calling thread one of them).
    pub(crate) fn run(&self, root: BorrowedFd<'_>, threads: usize, start: Vec<Pending>) -> Fetched {
        let threads = threads.max(1);
        let shared = Shared {
            queue: Mutex::new(Queue { stack: start, idle: 0, threads }),
            more: Condvar::new(),
            waiting: AtomicUsize::new(0),
            entries: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        };
        let mut fetched = HashMap::new();
        std::thread::scope(|s| {
            // A worker no thread can be had for (the user's task limit) is
            // not counted: the others would wait for it to go idle.
            let workers: Vec<_> = (1..threads)
                .filter_map(|_| match std::thread::Builder::new().spawn_scoped(s, || self.work(root, &shared)) {
                    Ok(w) => Some(w),
                    Err(_) => {
                        shared.lock().threads -= 1;
                        shared.more.notify_all();
                        None
                    }
                })
                .collect();
            fetched = self.work(root, &shared);
            for w in workers {
                // A worker that panicked read nothing the walk needs: the
                // walk reads what is missing itself.
                if let Ok(more) = w.join() {
                    fetched.extend(more);
                }
            }
        });
        Fetched::from(fetched)
    }

    /// One worker: looks at directories depth first, its own first (the
    /// subdirectories of those it read), then the shared stack's, until
    /// none is left anywhere or the fill stops. It shares half of its own
    /// (the shallowest: the larger subtrees) when another worker waits.
    fn work(&self, root: BorrowedFd<'_>, shared: &Shared) -> HashMap<Vec<u8>, (Arc<DirRecord>, u64)> {
        let mut reader = Reader {
            lean: Lean::new(self.mounts.clone()),
            prev: self.prev,
            dirents: vec![MaybeUninit::uninit(); DIRENT_BUF],
            notify: self.notify,
            new_watches: self.new_watches,
        };
        let _leaving = Leaving(shared);
        let mut out = HashMap::new();
        let mut own: Vec<Pending> = Vec::new();
        loop {
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let Some(p) = own.pop().or_else(|| shared.next()) else { break };
            own.extend(self.look(root, &p, &mut reader, shared, &mut out));
            if own.len() > 1 && shared.waiting.load(Ordering::SeqCst) > 0 {
                let half = own.len() / 2;
                shared.lock().stack.extend(own.drain(..half));
                shared.more.notify_all();
            }
        }
        out
    }

    /// Looks at `p`: its valid record, or a fresh read kept in `out`; the
    /// subdirectories to look at next.
    fn look(
        &self,
        root: BorrowedFd<'_>,
        p: &Pending,
        reader: &mut Reader<'_>,
        shared: &Shared,
        out: &mut HashMap<Vec<u8>, (Arc<DirRecord>, u64)>,
    ) -> Vec<Pending> {
        let rec = match self.valid.get(&p.rel) {
            Some(rec) if p.expect.is_none_or(|id| id == rec.stat.id) => Arc::clone(rec),
            _ => match reader.fresh(root, p) {
                Ok(Some((rec, reused))) => {
                    let rec = Arc::new(rec);
                    out.insert(p.rel.clone(), (Arc::clone(&rec), reused));
                    rec
                }
                // The walk meets the same and says so.
                Ok(None) | Err(_) => return Vec::new(),
            },
        };
        let entries = shared.entries.fetch_add(rec.entries.len() as u64, Ordering::Relaxed) + rec.entries.len() as u64;
        let offends = rec.failed.is_some() || rec.summary.offends;
        if offends || entries > self.limits.max_entries {
            shared.finish();
        }
        if stops_at(&rec, p.depth, self.limits) {
            return Vec::new();
        }
        p.children(&rec).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::os::fd::AsFd;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use super::super::walk::{RootSnapshot, Step};
    use super::super::DirCache;
    use super::*;
    use crate::scan::{open_root, scan_paths_with, ScanMode, ScanReport, SyncBackend};

    /// What a step says, but for when it was read and what it keeps open.
    fn steps(snap: &RootSnapshot) -> Vec<String> {
        snap.steps
            .iter()
            .map(|s| match s {
                Step::Dir(r) => format!(
                    "dir {:?} depth {} {:?} {:?} failed {:?} keep {} files {} dirs {} offends {} ids {:?}",
                    r.rel,
                    r.depth,
                    r.stat,
                    r.entries,
                    r.failed,
                    r.keep,
                    r.summary.files,
                    r.summary.dirs,
                    r.summary.offends,
                    r.summary.ids
                ),
                Step::Fail { rel, reason } => format!("fail {rel:?} {reason:?}"),
            })
            .collect()
    }

    /// 6 chains of 5 directories with 3 files each, and a few directories
    /// hanging off the middle of each chain.
    fn tree(top: &Path) {
        for c in 0..6 {
            let mut d = top.join(format!("c{c}"));
            for level in 0..5 {
                std::fs::create_dir_all(&d).unwrap();
                for f in 0..3 {
                    std::fs::write(d.join(format!("f{f}")), b"x").unwrap();
                }
                if level == 2 {
                    for side in 0..3 {
                        std::fs::create_dir(d.join(format!("side{side}"))).unwrap();
                        std::fs::write(d.join(format!("side{side}/g")), b"").unwrap();
                    }
                }
                d = d.join(format!("l{level}"));
            }
        }
    }

    fn normal(mut r: ScanReport) -> ScanReport {
        r.elapsed_us = 0;
        r
    }

    /// Scans `roots` through a sequential cache and a parallel one (same
    /// history), and checks that their walks step for step, their stats
    /// and their reports are equal, and the reports a fresh lean scan's.
    fn same(seq: &DirCache, par: &DirCache, roots: &[PathBuf], lim: ScanLimits, what: &str) {
        let opened = |roots: &[PathBuf]| roots.iter().map(|r| open_root(r).unwrap()).collect::<Vec<_>>();
        let a = seq.snapshot(&opened(roots), lim);
        let b = par.snapshot(&opened(roots), lim);
        assert_eq!(a.len(), b.len());
        for (a, b) in a.iter().zip(&b) {
            assert_eq!(steps(a), steps(b), "{what}: the parallel fill's walk of {:?}", a.path);
        }
        let (sa, sb) = (seq.stats(), par.stats());
        assert_eq!((sa.hits, sa.reads, sa.reused), (sb.hits, sb.reads, sb.reused), "{what}");
        let none = HashSet::new();
        let fresh = normal(scan_paths_with(&SyncBackend, roots, lim, &none, ScanMode::Lean));
        assert_eq!(normal(par.scan_paths(roots, lim, &none)), fresh, "{what}");
        assert_eq!(normal(seq.scan_paths(roots, lim, &none)), fresh, "{what}");
    }

    fn caches() -> (DirCache, DirCache) {
        let (seq, par) = (DirCache::new(), DirCache::new());
        seq.force_fill_threads(Some(1));
        par.force_fill_threads(Some(4));
        (seq, par)
    }

    #[test]
    fn the_parallel_fill_reads_what_the_walk_reads() {
        let t = tempfile::tempdir().unwrap();
        tree(t.path());
        let root = open_root(t.path()).unwrap();
        let (valid, prev) = (ValidRecords::none(), RootRecords::new());
        let budget = AtomicUsize::new(0);
        let mounts = crate::scan::lean::read_mount_table().map(|t| MountParents::from_table(&t));
        let fill = Fill {
            limits: ScanLimits::default(),
            valid: &valid,
            prev: &prev,
            mounts,
            notify: None,
            new_watches: &budget,
        };
        // The root, 6 x 5 chain links and 6 x 3 side directories.
        assert_eq!(fill.run(root.dir.as_ref().unwrap().as_fd(), 3, vec![Pending::root()]).len(), 1 + 30 + 18);
    }

    #[test]
    fn parallel_and_sequential_fills_make_the_same_records() {
        let t = tempfile::tempdir().unwrap();
        let roots = [t.path().join("a"), t.path().join("b")];
        for r in &roots {
            tree(r);
        }
        // Past the racy window before every read, so that the records both
        // caches read settle alike (their stats are compared).
        let settle = || std::thread::sleep(Duration::from_millis(50));
        settle();
        let (seq, par) = caches();
        same(&seq, &par, &roots, ScanLimits::default(), "cold");
        same(&seq, &par, &roots, ScanLimits::default(), "warm");
        // A large miss: a file more in every directory of a, a chain moved.
        for (i, d) in walkdir(&roots[0]).iter().enumerate() {
            std::fs::write(d.join(format!("new{i}")), b"").unwrap();
        }
        std::fs::rename(roots[0].join("c1/l0"), roots[0].join("c2/moved")).unwrap();
        settle();
        same(&seq, &par, &roots, ScanLimits::default(), "large miss");
        // Bounds and an offending entry stop the walk part way.
        for max_depth in [0, 1, 3, 7] {
            let (seq, par) = caches();
            same(&seq, &par, &roots, ScanLimits { max_depth, ..ScanLimits::default() }, "depth bound");
        }
        for max_entries in [5, 40, 200] {
            let (seq, par) = caches();
            same(&seq, &par, &roots, ScanLimits { max_entries, ..ScanLimits::default() }, "entry bound");
        }
        std::os::unix::fs::symlink("/", roots[1].join("c3/l0/l1/link")).unwrap();
        settle();
        let (seq, par) = caches();
        same(&seq, &par, &roots, ScanLimits::default(), "a link");
    }

    /// A cache left to its chooser reads a cold root of many directories
    /// in parallel first, then sequentially, and measures both; a root of
    /// few is read sequentially and not measured.
    #[test]
    fn a_cold_cache_fills_in_parallel_first_and_measures_both_ways() {
        let t = tempfile::tempdir().unwrap();
        let (big, small) = (t.path().join("big"), t.path().join("small"));
        for c in 0..3 {
            tree(&big.join(format!("t{c}")));
        }
        tree(&small);
        let (lim, none) = (ScanLimits::default(), HashSet::new());
        let cache = DirCache::new();
        if winx_release_kernel::sys::cores() < 2 {
            eprintln!("SKIPPED: one core: every fill is sequential");
            return;
        }
        let _ = cache.scan_paths(std::slice::from_ref(&small), lim, &none);
        assert_eq!(cache.chooser.costs(), (None, None), "49 directories: not a large fill");
        let _ = cache.scan_paths(std::slice::from_ref(&big), lim, &none);
        let (seq, par) = cache.chooser.costs();
        assert!(seq.is_none() && par.is_some(), "the first large fill ran in parallel: {seq:?} {par:?}");
        cache.clear();
        let _ = cache.scan_paths(std::slice::from_ref(&big), lim, &none);
        let (seq, _) = cache.chooser.costs();
        assert!(seq.is_some(), "the second ran sequentially");
    }

    /// A walk whose records foretold few misses, that meets a new subtree
    /// of 100 directories, reads the rest in parallel once it has read 64,
    /// and its records are the sequential walk's.
    #[test]
    fn a_large_miss_the_records_did_not_foretell_is_read_in_parallel_too() {
        if winx_release_kernel::sys::cores() < 2 {
            eprintln!("SKIPPED: one core: every fill is sequential");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("r");
        tree(&root.join("a"));
        tree(&root.join("b"));
        let settle = || std::thread::sleep(Duration::from_millis(50));
        settle();
        let roots = [root.clone()];
        let lim = ScanLimits::default();
        let (seq, _) = caches();
        let chosen = DirCache::new();
        same(&seq, &chosen, &roots, lim, "cold");
        assert_eq!(chosen.late_fills.load(Ordering::Relaxed), 0, "the cold fill ran in parallel from the root");
        for i in 0..10 {
            for j in 0..10 {
                let d = root.join(format!("a/c0/new{i}/d{j}"));
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join("f"), b"").unwrap();
            }
        }
        settle();
        same(&seq, &chosen, &roots, lim, "a new subtree");
        assert_eq!(chosen.late_fills.load(Ordering::Relaxed), 1, "the walk read the new subtree in parallel");
    }

    /// Every directory below `top`, `top` included.
    fn walkdir(top: &Path) -> Vec<PathBuf> {
        let mut out = vec![top.to_path_buf()];
        let mut i = 0;
        while i < out.len() {
            for e in std::fs::read_dir(&out[i]).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    out.push(e.path());
                }
            }
            i += 1;
        }
        out
    }
}
