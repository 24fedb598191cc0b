//! A whole release: 100 helpers in a session, a 48,000-entry backing store
//! under `W/.winx/scratch`, with the scan on `uring`, `sync` and `auto`.
//!
//! Each iteration writes and pins 100 fresh helpers (not timed), then
//! releases them all (timed): checks, scan, quarantine, journal, moves,
//! rechecks, unlinks.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use winx_release_engine::rehash::sha256_fd;
use winx_release_engine::release::Scanner;
use winx_release_engine::scan::{auto_backend, ScanBackend, SyncBackend, UringBackend};
use winx_release_engine::{
    release, Admission, Identity, IdleOwner, Layout, Pin, ReleaseOptions, ReleaseRequest, Status, Target,
};

mod common;

const THREAD: &str = "bench-thread";

fn write_helpers(session: &std::path::Path, count: usize) -> Vec<Target> {
    common::helper_sizes(count, 16 << 10)
        .into_iter()
        .enumerate()
        .map(|(i, len)| {
            let p = session.join(format!("helper-{i}.py"));
            fs::write(&p, common::helper_bytes(i, len)).unwrap();
            let f = fs::File::open(&p).unwrap();
            let pin = Pin::new(&Identity::of_fd(&f).unwrap(), sha256_fd(&f).unwrap().0);
            Target::new(&p, pin)
        })
        .collect()
}

fn release_end_to_end(c: &mut Criterion) {
    // A smoke run (`cargo test`, see `common::smoke`): 10 helpers, 1,000 entries.
    let (helpers, backing) = if common::smoke() { (10, 1_000) } else { (100, 48_000) };
    let base = fs::canonicalize(common::cache_dir()).unwrap().join(format!("release-{}k", backing / 1000));
    let ws = base.join("ws");
    let data = base.join("data");
    fs::create_dir_all(ws.join(".winx")).unwrap();
    fs::create_dir_all(&data).unwrap();
    common::cached_tree_at(&ws.join(".winx/scratch"), backing);
    let layout = Layout::new(&ws, &data).unwrap();
    let session: PathBuf = layout.session_dir(THREAD);
    fs::create_dir_all(&session).unwrap();
    fs::set_permissions(&session, fs::Permissions::from_mode(0o700)).unwrap();

    let uring = UringBackend::default();
    let backends: [(&str, &dyn ScanBackend); 3] = [("uring", &uring), ("sync", &SyncBackend), ("auto", auto_backend())];
    let mut g = c.benchmark_group("release_end_to_end");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    for (name, backend) in backends {
        g.bench_function(BenchmarkId::new(name, "100 helpers, 48k backing"), |b| {
            b.iter_batched(
                || write_helpers(&session, helpers),
                |targets| {
                    let req = ReleaseRequest { layout: &layout, thread_id: THREAD, targets: &targets };
                    let opts = ReleaseOptions { scanner: Scanner::Fresh(backend), ..ReleaseOptions::default() };
                    let report = release(&req, &Admission::new().enter(), &IdleOwner, &opts);
                    assert_eq!(report.status, Status::Completed, "{report:?}");
                    report.bytes_reclaimed
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, release_end_to_end);
criterion_main!(benches);
