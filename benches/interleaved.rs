//! Interleaved comparisons for a shared, loaded machine.
//!
//! Criterion measures one variant after another, so a load that drifts
//! between them (other builds on the same two cores) shows up as a
//! difference between variants. This bench runs the variants round-robin,
//! one iteration each per round, and prints for each its median and minimum
//! wall time and its CPU time per iteration (user + system of the whole
//! process, io-wq workers included), which does not depend on the load.
//!
//! ```text
//! cargo bench --bench interleaved -- scan [ROUNDS]     # 50k tree: sync, uring variants
//! cargo bench --bench interleaved -- rehash [ROUNDS]   # 100 helpers: one thread, pipelines
//! cargo bench --bench interleaved -- cold [ROUNDS]     # 50k tree: a cold DirCache, sequential / parallel fill
//! ```
//!
//! Under `cargo test` (no `--bench`) it is a smoke run: one round over a
//! 1,000-entry tree and 10 helpers.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::fd::AsFd;
use std::time::Instant;

use winx_release_engine::rehash::{hash_fds, HashJob, RehashBackend, RehashOptions};
use winx_release_engine::rehash::{sha256_fd_with, HASH_CHUNK};
use winx_release_engine::scan::{scan_paths, DirCache, ScanBackend, ScanLimits, SyncBackend};
use winx_release_engine::scan::{UringBackend, UringConfig};
use winx_release_kernel::uring::RingConfig;

mod common;

/// CPU time (user + system) of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: `rusage` is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

type Variant<'a> = (String, Box<dyn FnMut() + 'a>);

fn run(rounds: usize, mut variants: Vec<Variant<'_>>) {
    let load = || {
        fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    };
    println!("load before: {}   rounds: {rounds}", load());
    for (_, f) in &mut variants {
        f(); // warm up
    }
    let mut wall = vec![Vec::with_capacity(rounds); variants.len()];
    let mut cpu = vec![0.0f64; variants.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in variants.iter_mut().enumerate() {
            let c0 = cpu_seconds();
            let t0 = Instant::now();
            f();
            wall[i].push(t0.elapsed().as_secs_f64() * 1e3);
            cpu[i] += cpu_seconds() - c0;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let base = median(&mut wall[0].clone());
    for (i, (name, _)) in variants.iter().enumerate() {
        let m = median(&mut wall[i]);
        println!(
            "{name:>34}  median {m:9.2} ms  min {:9.2} ms  cpu {:9.2} ms  ratio {:.2}",
            wall[i][0],
            cpu[i] * 1e3 / rounds as f64,
            m / base
        );
    }
    println!("load after:  {}", load());
}

fn scan(rounds: usize, total: usize) {
    let root = common::cached_tree(&format!("scan-{}k", total / 1000), total);
    let roots = vec![root];
    let aliases = HashSet::new();
    let limits = ScanLimits::default();
    let ring = RingConfig::default();
    let base = UringConfig::default();
    let backends: Vec<(String, Box<dyn ScanBackend>)> = vec![
        ("sync".into(), Box::new(SyncBackend)),
        ("uring".into(), Box::new(UringBackend::default())),
        ("uring 1 thread".into(), Box::new(UringBackend::new(UringConfig { threads: 1, ..base.clone() }))),
        (
            "uring io-wq max 2".into(),
            Box::new(UringBackend::new(UringConfig {
                ring: RingConfig { iowq_max_workers: 2, ..ring },
                ..base.clone()
            })),
        ),
        (
            "uring without DEFER_TASKRUN".into(),
            Box::new(UringBackend::new(UringConfig {
                ring: RingConfig { single_issuer: false, defer_taskrun: false, ..ring },
                ..base.clone()
            })),
        ),
        (
            "uring async close".into(),
            Box::new(UringBackend::new(UringConfig { ring: RingConfig { async_close: true, ..ring }, ..base.clone() })),
        ),
        ("uring 16 dirs in flight".into(), Box::new(UringBackend::new(UringConfig { batch_dirs: 16, ..base }))),
    ];
    let variants: Vec<Variant<'_>> = backends
        .iter()
        .map(|(name, b)| {
            let (roots, aliases) = (&roots, &aliases);
            let f: Box<dyn FnMut() + '_> = Box::new(move || {
                let r = scan_paths(b.as_ref(), roots, limits, aliases);
                assert_eq!(r.entries, total as u64, "{r:?}");
            });
            (name.clone(), f)
        })
        .collect();
    run(rounds, variants);
}

fn rehash(rounds: usize, cases: &[(&str, usize, usize)]) {
    for &(label, count, mean) in cases {
        println!("-- {label}");
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<fs::File> = common::helper_sizes(count, mean)
            .into_iter()
            .enumerate()
            .map(|(i, len)| {
                let p = dir.path().join(format!("h{i}"));
                fs::File::create(&p).unwrap().write_all(&common::helper_bytes(i, len)).unwrap();
                fs::File::open(&p).unwrap()
            })
            .collect();
        let jobs: Vec<HashJob<'_>> = files.iter().map(|f| HashJob::new(f.as_fd())).collect();
        let mut buf = vec![0u8; HASH_CHUNK];
        let mut variants: Vec<Variant<'_>> = vec![(
            "sha2 one thread".into(),
            Box::new(|| {
                for f in &files {
                    sha256_fd_with(f, &mut buf).unwrap();
                }
            }),
        )];
        for (name, backend, threads) in [
            ("pipeline uring", RehashBackend::Uring, 0),
            ("pipeline pread", RehashBackend::Sync, 0),
            ("pipeline uring, 1 thread", RehashBackend::Uring, 1),
            ("pipeline pread, 1 thread", RehashBackend::Sync, 1),
            ("pipeline auto", RehashBackend::Auto, 0),
        ] {
            let jobs = &jobs;
            variants.push((
                name.into(),
                Box::new(move || {
                    let r = hash_fds(jobs, &RehashOptions { backend, threads, fingerprint: false });
                    assert!(r.iter().all(|r| r.is_ok()));
                }),
            ));
        }
        run(rounds, variants);
    }
}

/// A cold `DirCache` scan (the first release after a guardian start) of
/// the 50k tree, read sequentially by the walk and by the parallel fill
/// (2 and 4 workers), round-robin. Each cache is made and dropped outside
/// the timing (dropping one closes its inotify instance, which waits for
/// the kernel to free the watches: no part of a cold scan).
fn cold(rounds: usize, total: usize) {
    let root = common::cached_tree(&format!("scan-{}k", total / 1000), total);
    let roots = vec![root];
    let (none, limits) = (HashSet::new(), ScanLimits::default());
    let ways =
        [("cold, sequential fill", 1), ("cold, parallel fill, 2 threads", 2), ("cold, parallel fill, 4 threads", 4)];
    let load = || fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load before: {}   rounds: {rounds}", load().trim());
    let mut wall = vec![Vec::with_capacity(rounds); ways.len()];
    let mut cpu = vec![0.0f64; ways.len()];
    for round in 0..=rounds {
        for (i, (_, threads)) in ways.iter().enumerate() {
            let cache = DirCache::new();
            cache.force_fill_threads(Some(*threads));
            let (c0, t0) = (cpu_seconds(), Instant::now());
            let r = cache.scan_paths(&roots, limits, &none);
            let (ms, c) = (t0.elapsed().as_secs_f64() * 1e3, cpu_seconds() - c0);
            assert_eq!(r.entries, total as u64, "{r:?}");
            drop(cache);
            // Round 0 warms up.
            if round > 0 {
                wall[i].push(ms);
                cpu[i] += c;
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    // Per-round ratios to the sequential fill, then their median.
    for (i, (name, _)) in ways.iter().enumerate() {
        let ratios: Vec<f64> = wall[i].iter().zip(&wall[0]).map(|(w, s)| w / s).collect();
        println!(
            "{name:>34}  median {:9.2} ms  cpu {:9.2} ms  median ratio to sequential {:.2}",
            median(&wall[i]),
            cpu[i] * 1e3 / rounds as f64,
            median(&ratios)
        );
    }
    println!("load after:  {}", load().trim());
}

fn main() {
    // `cargo bench` passes `--bench`; take the first other arguments.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let what = args.first().map(String::as_str).unwrap_or("all");
    // Under `cargo test` (no `--bench`): a smoke run, one small round.
    let smoke = common::smoke();
    let rounds = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(if smoke { 1 } else { 15 });
    if matches!(what, "scan" | "all") {
        scan(rounds, if smoke { 1_000 } else { 50_000 });
    }
    if matches!(what, "cold" | "all") {
        cold(rounds, if smoke { 1_000 } else { 50_000 });
    }
    if matches!(what, "rehash" | "all") {
        let cases: &[(&str, usize, usize)] = if smoke {
            &[("10x16KiB", 10, 16 << 10)]
        } else {
            &[("100x16KiB", 100, 16 << 10), ("100x320KiB", 100, 320 << 10)]
        };
        rehash(rounds, cases);
    }
}
