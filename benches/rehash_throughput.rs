//! Rehash throughput: the rehash pipeline on io_uring and on `pread(2)`
//! (both on worker threads), against one thread hashing file after file
//! with `sha2` (`hash::sha256_fd_with`), over 100 helpers (10 in a smoke
//! run under `cargo test`, see `common::smoke`).

use std::fs;
use std::io::Write;
use std::os::fd::AsFd;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use winx_release_engine::rehash::{hash_fds, HashJob, RehashBackend, RehashOptions};
use winx_release_engine::rehash::{sha256_fd_with, HASH_CHUNK};

mod common;

fn rehash_throughput(c: &mut Criterion) {
    let mut g = c.benchmark_group("rehash_throughput");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    let cases: &[(&str, usize, usize)] = if common::smoke() {
        &[("10x16KiB", 10, 16 << 10)]
    } else {
        &[("100x16KiB", 100, 16 << 10), ("100x320KiB", 100, 320 << 10)]
    };
    for &(label, count, mean) in cases {
        let dir = tempfile::tempdir().unwrap();
        let sizes = common::helper_sizes(count, mean);
        let files: Vec<fs::File> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let p = dir.path().join(format!("h{i}"));
                fs::File::create(&p).unwrap().write_all(&common::helper_bytes(i, len)).unwrap();
                fs::File::open(&p).unwrap()
            })
            .collect();
        let total: u64 = sizes.iter().map(|&s| s as u64).sum();
        let jobs: Vec<HashJob<'_>> = files.iter().map(|f| HashJob::new(f.as_fd())).collect();
        g.throughput(Throughput::Bytes(total));
        for (name, backend) in
            [("uring", RehashBackend::Uring), ("sync", RehashBackend::Sync), ("auto", RehashBackend::Auto)]
        {
            let opts = RehashOptions { backend, threads: 0, fingerprint: false };
            g.bench_with_input(BenchmarkId::new(name, label), &jobs, |b, jobs| {
                b.iter(|| {
                    let r = hash_fds(jobs, &opts);
                    assert!(r.iter().all(|r| r.is_ok()));
                    r.len()
                })
            });
        }
        let mut buf = vec![0u8; HASH_CHUNK];
        g.bench_with_input(BenchmarkId::new("sha2_one_thread", label), &files, |b, files| {
            b.iter(|| files.iter().map(|f| sha256_fd_with(f, &mut buf).unwrap().1).sum::<u64>())
        });
    }
    g.finish();
}

criterion_group!(benches, rehash_throughput);
criterion_main!(benches);
