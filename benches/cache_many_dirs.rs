//! A warm cached scan of a backing root of many small directories: the
//! shape of `D/executions` at the default retention (2,000 executions, each
//! a directory of `command`, `output` and `status.json`), with
//! `find ROOT -printf '%D %i\n'` over the same root as the baseline in the
//! same group.
//!
//! - `find`: the baseline (a child process, output to a pipe and dropped);
//! - `fresh lean scan`: the synchronous lean scan, no cache;
//! - `warm cache`: one `DirCache` kept across scans, after enough scans
//!   that every directory is watched (docs/IO_URING.md, point 9): a warm
//!   scan then reads the event queue and `statx`es the root, and no
//!   directory whose watch had no event.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use winx_release_engine::scan::{scan_paths_with, DirCache, ScanLimits, ScanMode, SyncBackend};

mod common;

/// `dirs` directories of three small files under `root` (kept between
/// runs, marked complete by `<root>.done`).
fn tree(root: &Path, dirs: usize) {
    let done = PathBuf::from(format!("{}.done", root.display()));
    if fs::read_to_string(&done).ok().as_deref() == Some(dirs.to_string().as_str()) {
        return;
    }
    if root.exists() {
        fs::remove_dir_all(root).unwrap();
    }
    for i in 0..dirs {
        let d = root.join(format!("{i:016x}"));
        fs::create_dir_all(&d).unwrap();
        for f in ["command", "output", "status.json"] {
            fs::write(d.join(f), b"{}").unwrap();
        }
    }
    fs::write(&done, dirs.to_string()).unwrap();
}

fn cache_many_dirs(c: &mut Criterion) {
    let dirs = if common::smoke() { 100 } else { 2_000 };
    let root = fs::canonicalize(common::cache_dir()).unwrap().join(format!("many-dirs-{dirs}"));
    tree(&root, dirs);
    let roots = [root.clone()];
    let (lim, none) = (ScanLimits::default(), HashSet::new());
    let warm = DirCache::new();
    // Past the racy window, then scans until every directory is watched.
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..12 {
        assert!(!warm.scan_paths(&roots, lim, &none).failed_closed());
    }

    let mut g = c.benchmark_group("cache_many_dirs");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    g.bench_function(format!("find baseline, {dirs} directories"), |b| b.iter(|| common::find(&roots)));
    g.bench_function(format!("fresh lean scan, {dirs} directories"), |b| {
        b.iter(|| assert!(!scan_paths_with(&SyncBackend, &roots, lim, &none, ScanMode::Lean).failed_closed()))
    });
    g.bench_function(format!("warm cache, {dirs} directories"), |b| {
        b.iter(|| assert!(!warm.scan_paths(&roots, lim, &none).failed_closed()))
    });
    g.finish();
    eprintln!("warm cache: {:?}", warm.stats());
}

criterion_group!(benches, cache_many_dirs);
criterion_main!(benches);
