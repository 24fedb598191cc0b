//! A release of one 4 KiB helper with 48,000 entries in the backing roots,
//! cold and warm, with `find ROOTS -printf '%D %i\n'` over the same roots
//! as the baseline in the same group.
//!
//! - `find`: the baseline (a child process, output to a pipe and dropped);
//! - `fresh scan`: `ReleaseOptions`' default `Scanner::Fresh` (what a one-shot
//!   caller gets: a full lean scan per release);
//! - `cold`: a new `SharedScanner` per release (the first release after a
//!   guardian start: the cache is empty, every directory is read, by the
//!   parallel fill, as a guardian's first large fill is);
//! - `cold, sequential fill`: the same, every directory read by the walk
//!   itself (as before the parallel fill);
//! - `warm`: one `SharedScanner` kept across releases (a guardian that
//!   stays up: only changed directories are read).
//!
//! Each iteration writes and pins one fresh helper (not timed), then
//! releases it (timed): checks, scan, in-use sweep, quarantine, journal,
//! move, recheck, unlink, fsyncs. The receipt and the MCP round trip are
//! not part of it (benches/mcp_vs_openssl.py measures at the client).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use winx_release_engine::rehash::sha256_fd;
use winx_release_engine::release::Scanner;
use winx_release_engine::scan::SharedScanner;
use winx_release_engine::{
    release, Admission, Identity, IdleOwner, Layout, Pin, ReleaseOptions, ReleaseRequest, Status, Target,
};

mod common;

const THREAD: &str = "bench-thread";

fn write_helper(session: &Path, i: usize) -> Vec<Target> {
    let p = session.join(format!("single-{i}.py"));
    fs::write(&p, common::helper_bytes(i, 4096)).unwrap();
    let f = fs::File::open(&p).unwrap();
    let pin = Pin::new(&Identity::of_fd(&f).unwrap(), sha256_fd(&f).unwrap().0);
    vec![Target::new(&p, pin)]
}

fn release_single(c: &mut Criterion) {
    let backing = if common::smoke() { 1_000 } else { 48_000 };
    let base = fs::canonicalize(common::cache_dir()).unwrap().join(format!("single-{}k", backing / 1000));
    let ws = base.join("ws");
    let data = base.join("data");
    fs::create_dir_all(ws.join(".winx")).unwrap();
    fs::create_dir_all(data.join("executions")).unwrap();
    common::cached_tree_at(&ws.join(".winx/scratch"), backing);
    let layout = Layout::new(&ws, &data).unwrap();
    let session: PathBuf = layout.session_dir(THREAD);
    fs::create_dir_all(&session).unwrap();
    fs::set_permissions(&session, fs::Permissions::from_mode(0o700)).unwrap();
    let roots: Vec<PathBuf> = [ws.join(".winx/scratch"), layout.executions_root(), layout.receipts_root()]
        .into_iter()
        .filter(|p| p.exists())
        .collect();

    let warm = SharedScanner::new();
    let mut n = 0usize;
    let mut next = || {
        n += 1;
        write_helper(&session, n)
    };
    let run = |targets: Vec<Target>, scanner: Scanner<'_>| {
        let req = ReleaseRequest { layout: &layout, thread_id: THREAD, targets: &targets };
        let opts = ReleaseOptions { scanner, ..ReleaseOptions::default() };
        let report = release(&req, &Admission::new().enter(), &IdleOwner, &opts);
        assert_eq!(report.status, Status::Completed, "{report:?}");
        report.bytes_reclaimed
    };
    // Let the warm scanner's records settle (a record read within a few
    // clock ticks of its directory's change is read again).
    run(next(), Scanner::Shared(&warm));
    std::thread::sleep(Duration::from_millis(50));
    run(next(), Scanner::Shared(&warm));

    let mut g = c.benchmark_group("release_single");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    g.bench_function("find baseline, 48k entries", |b| b.iter(|| common::find(&roots)));
    g.bench_function("fresh scan, 1 x 4 KiB, 48k backing", |b| {
        b.iter_batched(&mut next, |t| run(t, ReleaseOptions::default().scanner), BatchSize::PerIteration)
    });
    g.bench_function("cold cache, 1 x 4 KiB, 48k backing", |b| {
        // The scanner is returned, so that it is dropped after the timing:
        // a guardian keeps its scanner for life, and dropping one (closing
        // its inotify instance waits for the kernel to free the watches)
        // is no part of a cold release.
        b.iter_batched(
            || (next(), SharedScanner::new()),
            |(t, s)| {
                run(t, Scanner::Shared(&s));
                s
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("cold cache, sequential fill, 1 x 4 KiB, 48k backing", |b| {
        // As before the parallel fill: every directory read by the walk.
        b.iter_batched(
            || {
                let s = SharedScanner::new();
                s.cache().force_fill_threads(Some(1));
                (next(), s)
            },
            |(t, s)| {
                run(t, Scanner::Shared(&s));
                s
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("warm cache, 1 x 4 KiB, 48k backing", |b| {
        b.iter_batched(&mut next, |t| run(t, Scanner::Shared(&warm)), BatchSize::PerIteration)
    });
    g.finish();
    eprintln!("warm scanner: {:?}", warm.cache().stats());
}

criterion_group!(benches, release_single);
criterion_main!(benches);
