//! Group `release_by_processes` (issue 57): one warm release of one 4 KiB
//! helper through the engine, with 48,000 entries in the backing roots, a
//! warm `SharedScanner` and kept journals (as a guardian that stays up
//! releases), with 300 (the baseline, same group), 1,000 and 3,000 extra
//! idle processes of the user (`sleep`, three descriptors each): how a
//! whole release's cost grows with the machine's processes.
//!
//! Timed: `engine::release` (checks, scan, the `in_use` sweep of `/proc`,
//! quarantine, journal, move, recheck, unlink, fsyncs). Not in it: the
//! owner's liveness answer (the runtime's `/proc` snapshots, which a
//! guardian takes before it calls the engine; `IdleOwner` here), the
//! receipt and the MCP hops (benches/mcp_single.py `--sleepers N` measures
//! those at the client). Each iteration writes and pins a fresh helper
//! first, untimed.
//!
//! A smoke run (`cargo test --all-targets`): 1,000 backing entries and 20,
//! 30, 40 extra processes.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use winx_release_engine::release::Scanner;
use winx_release_engine::scan::SharedScanner;
use winx_release_engine::{release, Admission, IdleOwner, ReleaseOptions, ReleaseRequest, Status, Target};

mod common;

const THREAD: &str = "bench-thread";

fn release_by_processes(c: &mut Criterion) {
    let smoke = common::smoke();
    let backing = if smoke { 1_000 } else { 48_000 };
    let counts: [usize; 3] = if smoke { [20, 30, 40] } else { [300, 1_000, 3_000] };
    let layout = common::release_layout(&format!("by-procs-{}k", backing / 1000), backing);
    let session = common::session_dir(&layout, THREAD);
    // A guardian keeps retired journals for its next releases.
    winx_release_engine::journal::keep_idle_journals(4);

    let warm = SharedScanner::new();
    let mut n = 0usize;
    let mut next = || {
        n += 1;
        common::pinned_helper(&session, n)
    };
    let run = |targets: Vec<Target>| {
        let req = ReleaseRequest { layout: &layout, thread_id: THREAD, targets: &targets };
        let opts = ReleaseOptions { scanner: Scanner::Shared(&warm), ..ReleaseOptions::default() };
        let report = release(&req, &Admission::new().enter(), &IdleOwner, &opts);
        assert_eq!(report.status, Status::Completed, "{report:?}");
    };
    // Warm the scanner and the kept journal (a record read within a few
    // clock ticks of its directory's change is read again).
    run(next());
    std::thread::sleep(Duration::from_millis(50));
    run(next());

    let mut g = c.benchmark_group("release_by_processes");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    let mut kids = Vec::new();
    let mut running = 0;
    for count in counts {
        kids.push(common::Sleepers::start(count - running));
        running = count;
        std::thread::sleep(Duration::from_millis(300));
        g.bench_function(
            format!("warm release, 1 x 4 KiB, {}k backing, {count} extra processes", backing / 1000),
            |b| b.iter_batched(&mut next, &run, BatchSize::PerIteration),
        );
    }
    g.finish();
    drop(kids);
    winx_release_engine::journal::drop_idle_journals();
}

criterion_group!(benches, release_by_processes);
criterion_main!(benches);
