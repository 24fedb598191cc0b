//! The `in_use` check of eight releases, one after another (the baseline:
//! no two sweeps of `/proc` can be shared) and all at once (eight threads,
//! as eight sessions' releases in a guardian under load: sweeps are shared,
//! `engine/src/procfs/shared.rs`), with 300 extra processes of the user on
//! the machine and 10 targets per release, none held. Wall time of the
//! eight checks; with both cores busy, all at once can be no faster than
//! one after another unless the sweeps are shared.
//!
//! Group `in_use_by_processes` (issue 57): the `in_use` check of one
//! release of one target, none held, as a warm release runs it, with 300
//! (the baseline, same group), 1,000 and 3,000 extra idle processes of the
//! user (`sleep`, three descriptors each): how a check's cost grows with
//! the machine's processes.
//!
//! A smoke run (`cargo test --all-targets`) uses 20 extra processes (and
//! 20, 30, 40 for the second group).

use std::collections::HashSet;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use winx_release_engine::release::in_use::{in_use, Held};
use winx_release_engine::PhysicalId;

mod common;

/// Releases per round, targets per release.
const RELEASES: usize = 8;
const TARGETS: usize = 10;

fn in_use_shared(c: &mut Criterion) {
    let extra = if common::smoke() { 20 } else { 300 };
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<fs::File> = (0..RELEASES * TARGETS)
        .map(|i| {
            let p = dir.path().join(format!("h{i:03}"));
            fs::write(&p, b"helper").unwrap();
            fs::File::open(&p).unwrap()
        })
        .collect();
    let ids: Vec<PhysicalId> = files
        .iter()
        .map(|f| {
            let m = f.metadata().unwrap();
            PhysicalId { dev: m.dev(), ino: m.ino() }
        })
        .collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    let paths: Vec<String> = (0..RELEASES * TARGETS).map(|i| format!("h{i:03}")).collect();
    let releases: Vec<Vec<Held<'_>>> = (0..RELEASES)
        .map(|r| {
            (r * TARGETS..(r + 1) * TARGETS)
                .map(|i| Held { path: &paths[i], id: ids[i], file: files[i].as_fd() })
                .collect()
        })
        .collect();
    let kids = common::Sleepers::start(extra);
    std::thread::sleep(Duration::from_millis(300));
    let me = [std::process::id() as i32];
    let check = |held: &[Held<'_>]| assert_eq!(in_use(held, &me), None);

    let mut g = c.benchmark_group("in_use_shared");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    g.bench_function(format!("{RELEASES} releases one after another, {extra} extra processes"), |b| {
        b.iter(|| releases.iter().for_each(|held| check(held)))
    });
    g.bench_function(format!("{RELEASES} releases at once, {extra} extra processes"), |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for held in &releases {
                    s.spawn(move || check(held));
                }
            })
        })
    });
    g.finish();
    drop(kids);
}

fn in_use_by_processes(c: &mut Criterion) {
    let counts: [usize; 3] = if common::smoke() { [20, 30, 40] } else { [300, 1_000, 3_000] };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h");
    fs::write(&p, b"helper").unwrap();
    let file = fs::File::open(&p).unwrap();
    let m = file.metadata().unwrap();
    let held = [Held { path: "h", id: PhysicalId { dev: m.dev(), ino: m.ino() }, file: file.as_fd() }];
    let me = [std::process::id() as i32];
    let mut g = c.benchmark_group("in_use_by_processes");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    let mut kids = Vec::new();
    let mut running = 0;
    for n in counts {
        kids.push(common::Sleepers::start(n - running));
        running = n;
        std::thread::sleep(Duration::from_millis(300));
        g.bench_function(format!("one release, one target, {n} extra processes"), |b| {
            b.iter(|| assert_eq!(in_use(&held, &me), None))
        });
    }
    g.finish();
    drop(kids);
}

criterion_group!(benches, in_use_shared, in_use_by_processes);
criterion_main!(benches);
