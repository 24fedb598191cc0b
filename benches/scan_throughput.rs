//! Scan throughput: the io_uring backend, the synchronous backend, and
//! `std::fs::read_dir` + `symlink_metadata` as the baseline, on trees of
//! 10,000 and 50,000 entries with 16-level chains.
//!
//! `WINX_BENCH_TUNING=1` adds the io_uring variants that were tried while
//! tuning (see `benches/README.md`). Under `cargo test` (a smoke run, see
//! `common::smoke`) one 1,000-entry tree only.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use winx_release_engine::scan::{auto_backend, scan_paths, ScanBackend, ScanLimits, SyncBackend};
use winx_release_engine::scan::{UringBackend, UringConfig};
use winx_release_engine::PhysicalId;
use winx_release_kernel::uring::RingConfig;

mod common;

/// The baseline: what a straightforward Rust walk costs.
fn std_walk(dir: &Path, entries: &mut u64, bytes: &mut u64) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = fs::symlink_metadata(e.path()).unwrap();
        *entries += 1;
        if m.is_dir() {
            std_walk(&e.path(), entries, bytes);
        } else {
            *bytes += m.len();
        }
    }
}

fn tuning_variants() -> Vec<(String, UringBackend)> {
    let base = UringConfig::default();
    let ring = RingConfig::default();
    let with = |name: &str, c: UringConfig| (name.to_owned(), UringBackend::new(c));
    vec![
        with("uring_1thread", UringConfig { threads: 1, ..base.clone() }),
        with("uring_3threads", UringConfig { threads: 3, ..base.clone() }),
        with("uring_iowq1", UringConfig { ring: RingConfig { iowq_max_workers: 1, ..ring }, ..base.clone() }),
        with("uring_iowq2", UringConfig { ring: RingConfig { iowq_max_workers: 2, ..ring }, ..base.clone() }),
        with(
            "uring_plain_flags",
            UringConfig { ring: RingConfig { single_issuer: false, defer_taskrun: false, ..ring }, ..base.clone() },
        ),
        with(
            "uring_coop",
            UringConfig {
                ring: RingConfig { single_issuer: false, defer_taskrun: false, coop_taskrun: true, ..ring },
                ..base.clone()
            },
        ),
        with("uring_async_close", UringConfig { ring: RingConfig { async_close: true, ..ring }, ..base.clone() }),
        with("uring_batch1", UringConfig { batch_dirs: 1, ..base.clone() }),
        with("uring_batch16", UringConfig { batch_dirs: 16, ..base.clone() }),
        with("uring_entries64", UringConfig { ring: RingConfig { entries: 64, ..ring }, ..base.clone() }),
        with("uring_entries1024", UringConfig { ring: RingConfig { entries: 1024, ..ring }, ..base.clone() }),
        with("uring_wait_all", UringConfig { ring: RingConfig { wait_divisor: 1, ..ring }, ..base.clone() }),
        with("uring_wait_16th", UringConfig { ring: RingConfig { wait_divisor: 16, ..ring }, ..base }),
    ]
}

fn scan_throughput(c: &mut Criterion) {
    let aliases: HashSet<PhysicalId> = HashSet::new();
    let limits = ScanLimits::default();
    let mut backends: Vec<(String, Box<dyn ScanBackend>)> =
        vec![("uring".to_owned(), Box::new(UringBackend::default())), ("sync".to_owned(), Box::new(SyncBackend))];
    if std::env::var_os("WINX_BENCH_TUNING").is_some() {
        for (name, b) in tuning_variants() {
            backends.push((name, Box::new(b)));
        }
    }
    let mut g = c.benchmark_group("scan_throughput");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    let sizes: &[(&str, usize)] = if common::smoke() { &[("1k", 1_000)] } else { &[("10k", 10_000), ("50k", 50_000)] };
    for &(label, total) in sizes {
        let root = common::cached_tree(&format!("scan-{label}"), total);
        let roots: Vec<PathBuf> = vec![root.clone()];
        g.throughput(Throughput::Elements(total as u64));
        for (name, backend) in &backends {
            g.bench_with_input(BenchmarkId::new(name.as_str(), label), &roots, |b, roots| {
                b.iter(|| {
                    let r = scan_paths(backend.as_ref(), roots, limits, &aliases);
                    assert!(!r.failed_closed() && r.entries == total as u64, "{r:?}");
                    r.entries
                })
            });
        }
        g.bench_with_input(BenchmarkId::new("auto", label), &roots, |b, roots| {
            b.iter(|| scan_paths(auto_backend(), roots, limits, &aliases).entries)
        });
        g.bench_with_input(BenchmarkId::new("std_read_dir", label), &root, |b, root| {
            b.iter(|| {
                let (mut entries, mut bytes) = (0, 0);
                std_walk(root, &mut entries, &mut bytes);
                assert_eq!(entries, total as u64);
                bytes
            })
        });
    }
    g.finish();
}

criterion_group!(benches, scan_throughput);
criterion_main!(benches);
