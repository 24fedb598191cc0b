//! Group `release_only_by_processes` (issue 57): the releases of 16
//! sessions at once through one engine process, as a guardian under the
//! release-only stress (`stress --mix release --sessions 16`) runs them,
//! with no extra processes (the baseline, same group) and with 1,000 extra
//! idle processes of the user (`sleep`, three descriptors each).
//!
//! Setup: one workspace with 48,000 entries in its backing roots (the tree
//! of `release_by_processes`, shared through the cache), 16 sessions, a
//! warm `SharedScanner` shared by all, kept journals (64, as the
//! guardian), and 16 threads that each release in their own session with
//! their own `Admission` and `IdleOwner`.
//!
//! One iteration is one burst: each thread's fresh 4 KiB helper is written
//! and pinned first (untimed), then the 16 releases are handed out at once
//! and the burst is timed until all 16 have answered; criterion's
//! throughput is the releases a second that implies (16 / burst time). At
//! the end the bench prints the median burst of each case (warm-up bursts
//! included), its releases/s and the ratio 1,000 / 0.
//!
//! Timed: `engine::release` only (checks, scan, the `in_use` sweep of
//! `/proc`, quarantine, journal, move, recheck, unlink, fsyncs). Not in it:
//! the owner's liveness answer (`IdleOwner` here), the receipt, the MCP
//! hops and the frontends: an upper bound on the stress tool's rate.
//!
//! A smoke run (`cargo test --all-targets`): 1,000 backing entries and 0
//! and 20 extra processes.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use winx_release_engine::release::Scanner;
use winx_release_engine::scan::SharedScanner;
use winx_release_engine::{
    release, Admission, IdleOwner, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target,
};

mod common;

/// Sessions releasing at once (the stress tool's `--sessions 16`).
const SESSIONS: usize = 16;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn release_only_by_processes(c: &mut Criterion) {
    let smoke = common::smoke();
    let backing = if smoke { 1_000 } else { 48_000 };
    let counts: [usize; 2] = if smoke { [0, 20] } else { [0, 1_000] };
    let layout = common::release_layout(&format!("by-procs-{}k", backing / 1000), backing);
    let threads: Vec<String> = (0..SESSIONS).map(|t| format!("bench-load-{t}")).collect();
    let sessions: Vec<PathBuf> = threads.iter().map(|t| common::session_dir(&layout, t)).collect();
    // A guardian keeps retired journals for its next releases.
    winx_release_engine::journal::keep_idle_journals(64);
    let warm = SharedScanner::new();

    std::thread::scope(|s| {
        let (done_tx, done_rx) = mpsc::channel::<(usize, ReleaseReport)>();
        let jobs: Vec<mpsc::Sender<Vec<Target>>> = threads
            .iter()
            .enumerate()
            .map(|(t, thread)| {
                let (tx, rx) = mpsc::channel::<Vec<Target>>();
                let done = done_tx.clone();
                let (layout, warm) = (&layout, &warm);
                s.spawn(move || {
                    let admission = Admission::new();
                    // Ends when the bench drops the senders (also on a panic).
                    for targets in rx {
                        let req = ReleaseRequest { layout, thread_id: thread, targets: &targets };
                        let opts = ReleaseOptions { scanner: Scanner::Shared(warm), ..ReleaseOptions::default() };
                        let report = release(&req, &admission.enter(), &IdleOwner, &opts);
                        if done.send((t, report)).is_err() {
                            break;
                        }
                    }
                });
                tx
            })
            .collect();
        drop(done_tx);

        let mut n = 0usize;
        let mut burst = || -> Duration {
            n += 1;
            let targets: Vec<Vec<Target>> = sessions.iter().map(|s| common::pinned_helper(s, n)).collect();
            let start = Instant::now();
            for (job, t) in jobs.iter().zip(targets) {
                job.send(t).unwrap();
            }
            let mut reports = Vec::with_capacity(SESSIONS);
            for _ in 0..SESSIONS {
                reports.push(done_rx.recv_timeout(Duration::from_secs(300)).expect("a release did not answer"));
            }
            let took = start.elapsed();
            for (t, report) in &reports {
                assert_eq!(report.status, Status::Completed, "session {t}: {report:?}");
            }
            took
        };
        // Warm the scanner and the kept journals (a record read within a
        // few clock ticks of its directory's change is read again).
        burst();
        std::thread::sleep(Duration::from_millis(50));
        burst();

        let mut g = c.benchmark_group("release_only_by_processes");
        g.sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5))
            .throughput(Throughput::Elements(SESSIONS as u64));
        let mut kids = Vec::new();
        let mut running = 0;
        let mut medians = Vec::new();
        for count in counts {
            kids.push(common::Sleepers::start(count - running));
            running = count;
            std::thread::sleep(Duration::from_millis(300));
            let mut times = Vec::new();
            g.bench_function(
                format!(
                    "burst of {SESSIONS} warm releases, 1 x 4 KiB each, {}k backing, {count} extra processes",
                    backing / 1000
                ),
                |b| {
                    b.iter_custom(|iters| {
                        (0..iters)
                            .map(|_| {
                                let d = burst();
                                times.push(d);
                                d
                            })
                            .sum()
                    })
                },
            );
            medians.push((count, median(times)));
        }
        g.finish();
        drop(kids);
        for (count, m) in &medians {
            eprintln!(
                "release_only_by_processes: {count} extra processes: median burst {:.2} ms, {:.0} releases/s",
                m.as_secs_f64() * 1e3,
                SESSIONS as f64 / m.as_secs_f64()
            );
        }
        let (last, m) = medians[medians.len() - 1];
        eprintln!("release_only_by_processes: burst {last} / 0 = {:.2}", m.as_secs_f64() / medians[0].1.as_secs_f64());
    });
    winx_release_engine::journal::drop_idle_journals();
}

criterion_group!(benches, release_only_by_processes);
criterion_main!(benches);
