//! A cold directory cache (the first release after a guardian start) over
//! the 50,000-entry bench tree, read sequentially by the walk and by the
//! parallel fill, with `find ROOT -printf '%D %i\n'` over the same root as
//! the baseline in the same group (docs/IO_URING.md, "The directory
//! cache").
//!
//! - `find`: the baseline (a child process, output to a pipe and dropped);
//! - `cold, sequential fill`: a new `DirCache` per scan, every directory
//!   read by the walk (`force_fill_threads(Some(1))`);
//! - `cold, parallel fill, N threads`: the same, read ahead by the
//!   parallel fill's N workers (the calling thread one of them);
//! - `cold, chosen`: a new `DirCache` as a guardian starts with one: its
//!   first large fill runs in parallel (`scan/cache/choose.rs`).
//!
//! Each cache is dropped after its timing (closing its inotify instance
//! waits for the kernel to free the watches, no part of a cold scan).

use std::collections::HashSet;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use winx_release_engine::scan::{DirCache, ScanLimits};

mod common;

fn cold_fill(c: &mut Criterion) {
    let total = if common::smoke() { 1_000 } else { 50_000 };
    let root = std::fs::canonicalize(common::cached_tree(&format!("scan-{}k", total / 1000), total)).unwrap();
    let roots = [root];
    let (lim, none) = (ScanLimits::default(), HashSet::new());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    let mut g = c.benchmark_group("cold_fill");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    g.bench_function("find baseline, 50k entries", |b| b.iter(|| common::find(&roots)));
    let mut cold = |name: String, threads: Option<usize>| {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let cache = DirCache::new();
                    cache.force_fill_threads(threads);
                    cache
                },
                |cache| {
                    assert!(!cache.scan_paths(&roots, lim, &none).failed_closed());
                    cache
                },
                BatchSize::PerIteration,
            )
        });
    };
    cold("cold, sequential fill".into(), Some(1));
    cold(format!("cold, parallel fill, {cores} threads"), Some(cores.max(2)));
    if cores < 4 {
        cold("cold, parallel fill, 4 threads".into(), Some(4));
    }
    cold("cold, chosen".into(), None);
    g.finish();
}

criterion_group!(benches, cold_fill);
criterion_main!(benches);
