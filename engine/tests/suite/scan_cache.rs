//! The directory cache is exact: random sequences of changes inside backing
//! roots, and after every step the cached scan (through a `DirCache` and
//! through a `SharedScanner`) must report exactly what a fresh lean scan
//! reports (verdict, reason, path, counts, depth), with the default bound
//! and with a small one, with and without an alias.
//!
//! The changes: create, unlink, mkdir, rmdir, rename within and across
//! roots and in and out of them, hard links (also of the alias into a
//! root), a directory replaced by a new one under the same name, symlinks
//! and fifos, two changes within one timestamp tick, `utimensat`
//! back-dating a directory's mtime (also right after a change, which only
//! the change time then shows), waits that let records settle, and (as
//! root) a tmpfs mounted on a directory inside a root. Not root: the mount
//! step prints why it is skipped. The `SharedScanner`'s cache reads every
//! miss through the parallel fill (`cache/fill.rs`), the `DirCache` as its
//! chooser says.
//!
//! `SCAN_CACHE_CASES=N` runs N cases (default 24).

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::status;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use winx_release_engine::scan::{
    scan_paths_with, CacheStats, DirCache, RootSpec, ScanLimits, ScanMode, ScanReport, SharedScanner, SyncBackend,
};
use winx_release_engine::PhysicalId;

#[derive(Clone, Debug)]
enum Op {
    File(u8, u8),
    Dir(u8, u8),
    Unlink(u8),
    Rmdir(u8),
    Rename(u8, u8, u8),
    Out(u8),
    In(u8, u8),
    Link(u8, u8, u8),
    LinkAlias(u8, u8),
    Replace(u8),
    Symlink(u8, u8),
    Fifo(u8, u8),
    Backdate(u8),
    Hidden(u8, u8),
    Tick(u8, u8),
    Wait,
    Mount(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let b = any::<u8>;
    prop_oneof![
        4 => (b(), b()).prop_map(|(d, n)| Op::File(d, n)),
        3 => (b(), b()).prop_map(|(d, n)| Op::Dir(d, n)),
        2 => b().prop_map(Op::Unlink),
        1 => b().prop_map(Op::Rmdir),
        2 => (b(), b(), b()).prop_map(|(e, d, n)| Op::Rename(e, d, n)),
        1 => b().prop_map(Op::Out),
        1 => (b(), b()).prop_map(|(d, n)| Op::In(d, n)),
        1 => (b(), b(), b()).prop_map(|(e, d, n)| Op::Link(e, d, n)),
        1 => (b(), b()).prop_map(|(d, n)| Op::LinkAlias(d, n)),
        2 => b().prop_map(Op::Replace),
        1 => (b(), b()).prop_map(|(d, n)| Op::Symlink(d, n)),
        1 => (b(), b()).prop_map(|(d, n)| Op::Fifo(d, n)),
        2 => b().prop_map(Op::Backdate),
        3 => (b(), b()).prop_map(|(d, n)| Op::Hidden(d, n)),
        2 => (b(), b()).prop_map(|(d, n)| Op::Tick(d, n)),
        4 => Just(Op::Wait),
        1 => b().prop_map(Op::Mount),
    ]
}

/// Every directory below `roots` (the roots first), and every
/// non-directory entry, sorted; links are not followed.
fn inventory(roots: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dirs = Vec::new();
    let mut others = Vec::new();
    let mut stack: Vec<PathBuf> = roots.iter().rev().cloned().collect();
    while let Some(d) = stack.pop() {
        dirs.push(d.clone());
        let mut names: Vec<PathBuf> =
            fs::read_dir(&d).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        names.sort();
        for p in names.into_iter().rev() {
            match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => stack.push(p),
                Ok(_) => others.push(p),
                Err(_) => {}
            }
        }
    }
    others.sort();
    (dirs, others)
}

fn pick<T: Clone>(v: &[T], i: u8) -> Option<T> {
    (!v.is_empty()).then(|| v[usize::from(i) % v.len()].clone())
}

fn name(n: u8) -> String {
    format!("n{}", n % 5)
}

/// Writes `bytes` to the file at `p`, never waiting on a FIFO an earlier
/// step left at that name (`O_NONBLOCK`: no reader is `ENXIO`, not a
/// hang, which `fs::write` would be).
fn write_file(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(p)?;
    f.write_all(bytes)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A world: two roots, a missing root, a directory outside them, and the
/// alias (a file outside the roots whose identity is in the alias set).
struct World {
    _tmp: tempfile::TempDir,
    roots: Vec<PathBuf>,
    out: PathBuf,
    alias: PathBuf,
    mounts: Vec<PathBuf>,
    counter: u32,
}

impl Drop for World {
    fn drop(&mut self) {
        // Every mount below the world, wherever renames took it.
        self.umount_all();
    }
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let roots = vec![base.join("r0"), base.join("r1"), base.join("missing")];
        fs::create_dir(&roots[0]).unwrap();
        fs::create_dir(&roots[1]).unwrap();
        let out = base.join("out");
        fs::create_dir(&out).unwrap();
        let alias = out.join("alias");
        fs::write(&alias, b"alias").unwrap();
        World { _tmp: tmp, roots, out, alias, mounts: Vec::new(), counter: 0 }
    }

    fn umount_all(&self) {
        let base = self.out.parent().unwrap().to_path_buf();
        let table = fs::read("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<PathBuf> = String::from_utf8_lossy(&table)
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
            .filter(|p| p.starts_with(&base))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for m in points {
            let _ = status(Command::new("umount").arg("-l").arg(&m));
        }
    }

    fn fresh_name(&mut self) -> String {
        self.counter += 1;
        format!("m{}", self.counter)
    }

    fn apply(&mut self, op: &Op) {
        let (dirs, others) = inventory(&self.roots[..2]);
        let all: Vec<PathBuf> = others.iter().chain(dirs.iter().skip(2)).cloned().collect();
        let dir = |i: u8| pick(&dirs, i).unwrap();
        match *op {
            Op::File(d, n) => drop(write_file(&dir(d).join(name(n)), b"x")),
            Op::Dir(d, n) => drop(fs::create_dir(dir(d).join(name(n)))),
            Op::Unlink(e) => drop(pick(&others, e).map(fs::remove_file)),
            Op::Rmdir(d) => drop(pick(&dirs[2..], d).map(fs::remove_dir)),
            Op::Rename(e, d, n) => {
                if let Some(p) = pick(&all, e) {
                    let _ = fs::rename(p, dir(d).join(name(n)));
                }
            }
            Op::Out(e) => {
                if let Some(p) = pick(&all, e) {
                    let fresh = self.fresh_name();
                    let to = self.out.join(fresh);
                    let _ = fs::rename(p, to);
                }
            }
            Op::In(d, n) => {
                let outside: Vec<PathBuf> = fs::read_dir(&self.out).unwrap().flatten().map(|e| e.path()).collect();
                let mut outside: Vec<PathBuf> = outside.into_iter().filter(|p| *p != self.alias).collect();
                outside.sort();
                if let Some(p) = pick(&outside, n) {
                    let _ = fs::rename(p, dir(d).join(name(n)));
                }
            }
            Op::Link(e, d, n) => drop(pick(&others, e).map(|p| fs::hard_link(p, dir(d).join(name(n))))),
            Op::LinkAlias(d, n) => drop(fs::hard_link(&self.alias, dir(d).join(name(n)))),
            Op::Replace(d) => {
                // The directory goes away (out of the roots) and a new,
                // empty one takes its name: same path, another directory.
                if let Some(p) = pick(&dirs[2..], d) {
                    let fresh = self.fresh_name();
                    let to = self.out.join(fresh);
                    if fs::rename(&p, &to).is_ok() {
                        let _ = fs::create_dir(&p);
                        let _ = fs::remove_dir_all(&to);
                    }
                }
            }
            Op::Symlink(d, n) => drop(symlink("/", dir(d).join(name(n)))),
            Op::Fifo(d, n) => {
                let _ = rustix::fs::mknodat(
                    rustix::fs::CWD,
                    dir(d).join(format!("p{}", n % 3)),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                );
            }
            Op::Backdate(d) => drop(filetime_back(&dir(d))),
            Op::Hidden(d, n) => {
                // A change, then the directory's mtime set back to what it
                // was: only the change time tells.
                let p = dir(d);
                let Ok(before) = fs::symlink_metadata(&p) else { return };
                let f = p.join(name(n));
                if fs::remove_file(&f).is_err() {
                    let _ = write_file(&f, b"h");
                }
                set_mtime(&p, &before);
            }
            Op::Tick(d, n) => {
                // Two changes within one timestamp tick.
                let p = dir(d);
                let _ = write_file(&p.join(name(n)), b"t");
                let _ = fs::remove_file(p.join(name(n.wrapping_add(1))));
                let _ = fs::create_dir(p.join(name(n.wrapping_add(2))));
            }
            Op::Wait => std::thread::sleep(Duration::from_millis(12)),
            Op::Mount(d) => {
                if !is_root() {
                    eprintln!("scan_cache: mount step skipped: not root (mounting tmpfs needs CAP_SYS_ADMIN)");
                    return;
                }
                if self.mounts.len() >= 2 {
                    self.mounts.clear();
                    self.umount_all();
                    return;
                }
                if false {
                    if let Some(m) = self.mounts.pop() {
                        let _ = status(Command::new("umount").arg("-l").arg(&m));
                    }
                    return;
                }
                if let Some(p) = pick(&dirs[2..], d) {
                    let ok = status(Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(&p));
                    if ok.is_ok_and(|s| s.success()) {
                        let _ = fs::write(p.join("in-mount"), b"m");
                        self.mounts.push(p);
                    }
                }
            }
        }
    }
}

/// Sets `dir`'s mtime a day back (`utimensat`).
fn filetime_back(dir: &Path) -> std::io::Result<()> {
    let m = fs::symlink_metadata(dir)?;
    use std::os::unix::fs::MetadataExt;
    let t = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: m.atime(), tv_nsec: m.atime_nsec() as _ },
        last_modification: rustix::fs::Timespec { tv_sec: m.mtime() - 86_400, tv_nsec: m.mtime_nsec() as _ },
    };
    rustix::fs::utimensat(rustix::fs::CWD, dir, &t, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Sets `dir`'s atime and mtime to those of `before` (`utimensat`).
fn set_mtime(dir: &Path, before: &fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    let t = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: before.atime(), tv_nsec: before.atime_nsec() as _ },
        last_modification: rustix::fs::Timespec { tv_sec: before.mtime(), tv_nsec: before.mtime_nsec() as _ },
    };
    let _ = rustix::fs::utimensat(rustix::fs::CWD, dir, &t, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
}

fn id_of(p: &Path) -> PhysicalId {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(p).unwrap();
    PhysicalId { dev: m.dev(), ino: m.ino() }
}

fn normal(mut r: ScanReport) -> ScanReport {
    r.elapsed_us = 0;
    r
}

/// Checks every way of scanning `w` against a fresh lean scan.
fn check(w: &World, cache: &DirCache, shared: &SharedScanner, step: usize, op: &Op) -> Result<(), TestCaseError> {
    let aliases: HashSet<PhysicalId> = [id_of(&w.alias)].into();
    let none = HashSet::new();
    let specs: Vec<RootSpec> = w.roots.iter().cloned().map(RootSpec::Path).collect();
    for limits in [ScanLimits::default(), ScanLimits { max_entries: 9, max_depth: 3 }] {
        for a in [&none, &aliases] {
            let fresh = normal(scan_paths_with(&SyncBackend, &w.roots, limits, a, ScanMode::Lean));
            let cached = normal(cache.scan_paths(&w.roots, limits, a));
            prop_assert_eq!(&cached, &fresh, "DirCache after step {} ({:?}), {:?}", step, op, limits);
            let via = normal(shared.scan(&specs, limits, a, Instant::now()));
            prop_assert_eq!(&via, &fresh, "SharedScanner after step {} ({:?}), {:?}", step, op, limits);
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("SCAN_CACHE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn cached_scan_equals_a_fresh_scan(ops in proptest::collection::vec(op(), 1..28)) {
        let mut w = World::new();
        let cache = DirCache::new();
        let shared = SharedScanner::new();
        // The shared scanner's cache reads every miss through the parallel
        // fill, however few; the plain cache as its chooser says.
        shared.cache().force_fill_threads(Some(3));
        check(&w, &cache, &shared, 0, &Op::Wait)?;
        for (i, op) in ops.iter().enumerate() {
            w.apply(op);
            check(&w, &cache, &shared, i + 1, op)?;
        }
    }
}

/// Settles the records of `roots` in `cache`: a scan (returned), a wait
/// past the racy window, a scan.
fn settle(cache: &DirCache, roots: &[PathBuf], lim: ScanLimits) -> ScanReport {
    let first = normal(cache.scan_paths(roots, lim, &HashSet::new()));
    std::thread::sleep(Duration::from_millis(30));
    let _ = cache.scan_paths(roots, lim, &HashSet::new());
    first
}

/// Runs `measure` (a value, and the cache's stats before and after the scan
/// it measures) until no drop of every record came in between: a mount
/// made meanwhile by another test (the property test mounts tmpfs as root)
/// rightly drops them, and such a try is made again. `tries` counts over
/// every call of one test.
fn without_drops<T>(
    tries: &mut u32,
    mut measure: impl FnMut() -> (T, CacheStats, CacheStats),
) -> (T, CacheStats, CacheStats) {
    loop {
        *tries += 1;
        assert!(*tries < 50, "the mount table kept changing");
        let (value, before, after) = measure();
        if after.drops == before.drops {
            return (value, before, after);
        }
    }
}

/// The cache is used: after a wait, an unchanged tree is served from the
/// records (no directory read), and a hidden change (mtime set back) is
/// still seen.
#[test]
fn warm_scan_reads_only_what_changed() {
    let w = World::new();
    let r0 = &w.roots[0];
    for i in 0..4 {
        fs::create_dir_all(r0.join(format!("d{i}/e"))).unwrap();
        fs::write(r0.join(format!("d{i}/e/f")), b"x").unwrap();
    }
    let cache = DirCache::new();
    let none = HashSet::new();
    let lim = ScanLimits::default();
    let mut tries = 0;
    let ((first, again), before, after) = without_drops(&mut tries, || {
        let first = settle(&cache, &w.roots, lim);
        let before = cache.stats();
        let again = normal(cache.scan_paths(&w.roots, lim, &none));
        ((first, again), before, cache.stats())
    });
    assert_eq!(again, first);
    assert_eq!(after.reads - before.reads, 0, "{after:?}");
    assert_eq!(after.hits - before.hits, 10, "{after:?}");
    // The eight below the roots were watched and had no event: no `statx`.
    if after.quiet == before.quiet {
        eprintln!("SKIPPED (the event check): no record was watched here (no inotify instance?)");
    } else {
        assert_eq!(after.quiet - before.quiet, 8, "{after:?}");
    }
    // A hidden change: one directory read again, the verdict follows.
    let d = r0.join("d2/e");
    let (got, before, after) = without_drops(&mut tries, || {
        let _ = fs::remove_file(d.join("l"));
        settle(&cache, &w.roots, lim);
        let before = cache.stats();
        let m = fs::symlink_metadata(&d).unwrap();
        symlink("/", d.join("l")).unwrap();
        set_mtime(&d, &m);
        (normal(cache.scan_paths(&w.roots, lim, &none)), before, cache.stats())
    });
    let reads = after.reads - before.reads;
    let fresh = normal(scan_paths_with(&SyncBackend, &w.roots, lim, &none, ScanMode::Lean));
    assert_eq!(got, fresh);
    assert!(got.failed_closed());
    assert_eq!(reads, 1);
    // Switched off: everything is read.
    cache.set_enabled(false);
    let s = cache.stats();
    let _ = cache.scan_paths(&w.roots, lim, &none);
    assert_eq!(cache.stats().hits, s.hits);
}

/// A directory read again because an entry was added takes its unchanged
/// subdirectories' identities from its old record (no `statx`), and a
/// subdirectory replaced under the same name is `statx`ed afresh: the
/// verdict equals a fresh scan's, and a descent into the new directory
/// finds the identity its parent's entry names.
#[test]
fn a_reread_directory_keeps_its_unchanged_subdirectories() {
    let w = World::new();
    let r0 = &w.roots[0];
    for i in 0..6 {
        fs::create_dir_all(r0.join(format!("s{i}"))).unwrap();
        fs::write(r0.join(format!("s{i}/f")), b"x").unwrap();
    }
    let cache = DirCache::new();
    let none = HashSet::new();
    let lim = ScanLimits::default();
    // Settled records, then `change`, then the scan that reads the root
    // again: the subdirectory identities it reused.
    let mut tries = 0;
    let mut reread = |change: &mut dyn FnMut()| {
        let (got, before, after) = without_drops(&mut tries, || {
            settle(&cache, &w.roots, lim);
            let before = cache.stats();
            change();
            std::thread::sleep(Duration::from_millis(30));
            (normal(cache.scan_paths(&w.roots, lim, &none)), before, cache.stats())
        });
        assert_eq!(got, normal(scan_paths_with(&SyncBackend, &w.roots, lim, &none, ScanMode::Lean)));
        assert!(!got.failed_closed(), "{got:?}");
        after.reused - before.reused
    };
    // The root changes: it is read again, its six subdirectories are not
    // statxed.
    let mut n = 0;
    assert_eq!(
        reread(&mut || {
            n += 1;
            fs::write(r0.join(format!("new{n}")), b"y").unwrap();
        }),
        6
    );
    // One subdirectory replaced by another under the same name (moved in
    // from outside, so its inode differs): not reused, and the scan agrees
    // with a fresh one.
    let mut m = 0;
    assert_eq!(
        reread(&mut || {
            m += 1;
            let outside = w.out.join(format!("outside-dir{m}"));
            fs::create_dir_all(outside.join("g")).unwrap();
            fs::remove_dir_all(r0.join("s3")).unwrap();
            fs::rename(&outside, r0.join("s3")).unwrap();
        }),
        5
    );
}

/// A directory replaced within one timestamp tick by a new one that
/// reuses its inode number (ext4 hands a freed inode out again at once)
/// must be a miss. With multigrain timestamps (6.13+) its change time
/// already differs (emptying the old directory, whose change time the scan
/// queried, hands out a fine-grained stamp, and the new directory's stamp
/// is at least that); without them the racy rule (a record read within a
/// tick of its change time is not trusted) makes it a miss. Reports how
/// often the inode number was reused (the filesystem decides); asserted on
/// every try.
#[test]
fn replaced_within_one_tick_is_a_miss() {
    let w = World::new();
    let r0 = &w.roots[0];
    let cache = DirCache::new();
    let none = HashSet::new();
    let lim = ScanLimits::default();
    let mut reused = 0;
    for i in 0..40 {
        let a = r0.join(format!("a{i}"));
        fs::create_dir(&a).unwrap();
        fs::write(a.join("f"), b"x").unwrap();
        symlink("/", a.join("l")).unwrap();
        let before = id_of(&a);
        let first = normal(cache.scan_paths(&w.roots, lim, &none));
        fs::remove_file(a.join("f")).unwrap();
        fs::remove_file(a.join("l")).unwrap();
        fs::remove_dir(&a).unwrap();
        fs::create_dir(&a).unwrap();
        if id_of(&a) == before {
            reused += 1;
        }
        let got = normal(cache.scan_paths(&w.roots, lim, &none));
        let fresh = normal(scan_paths_with(&SyncBackend, &w.roots, lim, &none, ScanMode::Lean));
        assert!(first.failed_closed());
        assert_eq!(got, fresh, "try {i}");
        fs::remove_dir(&a).unwrap();
    }
    eprintln!("replaced_within_one_tick_is_a_miss: inode number reused in {reused} of 40 tries");
}

/// A mount made between two scans, and its unmount, each drop every record
/// (the mount table kept open reports the change), and each scan equals a
/// fresh lean scan: the mount's two files are seen instead of the one it
/// hides, then gone.
#[test]
fn a_mount_between_two_scans_drops_every_record() {
    if !is_root() {
        eprintln!("skipped: mounting tmpfs needs CAP_SYS_ADMIN (not root)");
        return;
    }
    let w = World::new();
    let d = w.roots[0].join("d");
    fs::create_dir_all(d.join("e")).unwrap();
    fs::write(d.join("e/f"), b"x").unwrap();
    let cache = DirCache::new();
    let none = HashSet::new();
    let lim = ScanLimits::default();
    let fresh = || normal(scan_paths_with(&SyncBackend, &w.roots, lim, &none, ScanMode::Lean));
    let first = settle(&cache, &w.roots, lim);
    let before = cache.stats();
    let ok = status(Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(d.join("e")));
    assert!(ok.is_ok_and(|s| s.success()), "mount failed");
    fs::write(d.join("e/in-mount"), b"m").unwrap();
    fs::write(d.join("e/in-mount-2"), b"m").unwrap();
    let mounted = normal(cache.scan_paths(&w.roots, lim, &none));
    let after = cache.stats();
    assert!(after.drops > before.drops, "the mount did not drop the records: {after:?}");
    assert_ne!(mounted, first, "the scan did not see the mount");
    assert_eq!(mounted, fresh());
    let before = cache.stats();
    // Lazily: the cache keeps a descriptor of the mounted directory it read.
    let ok = status(Command::new("umount").arg("-l").arg(d.join("e")));
    assert!(ok.is_ok_and(|s| s.success()), "umount failed");
    let unmounted = normal(cache.scan_paths(&w.roots, lim, &none));
    assert!(cache.stats().drops > before.drops, "the unmount did not drop the records");
    assert_eq!(unmounted, fresh());
    assert_eq!(unmounted, first);
}
