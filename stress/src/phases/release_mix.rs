//! The release-only mix (`--mix release`): the cost of the release path
//! alone, without the writes, commands and adversarial steps of the mixed
//! workload around it.
//!
//! The timed phase runs in rounds. Each round first tops every session up
//! to its file quota (128 helpers of 256 B–8 KiB, tool writes of at most
//! 100 files, checked against the quotas like any write) with the clock
//! and the CPU samples stopped; then every worker reads 1–4 of its own
//! helpers and releases them through the frontend that read them, again
//! and again, until one session has nothing left to release (all stop
//! then, so no round has a tail where fewer workers run) or the phase's
//! time is used up. Only these release stretches are timed: the report's
//! `run_s`, releases per second, latencies and CPU split are theirs alone.
//! Every step is checked against the ledger, as in the mixed workload.
//!
//! Nothing else changes the helpers, so every release should complete: an
//! answer other than `completed` is noted as `release_mix_not_completed`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::config::Config;
use crate::oracle::ledger::in_quarantine;
use crate::oracle::quota::MAX_SESSION_FILES;
use crate::phases::cpu::CpuReport;
use crate::phases::cpu::{Sample, Ticks};
use crate::phases::timed;
use crate::workload::backing::Backing;
use crate::workload::ops::{self, Expect, Written};
use crate::workload::world::{Stats, TrackedSession, World};

/// Most files in one top-up tool write.
const WRITE_CHUNK: usize = 100;

/// Where the rounds stand; changed by the leader of a barrier only.
#[derive(Default)]
struct Clock {
    /// Release time used so far.
    spent: Duration,
    /// When the current round's releases started, and the CPU then.
    round: Option<(Instant, Sample)>,
    /// CPU of the finished rounds.
    ticks: Ticks,
    /// Rounds run.
    rounds: u64,
}

/// The rounds every worker goes through together.
struct Rounds<'a> {
    w: &'a World,
    budget: Duration,
    guardian: u32,
    barrier: Barrier,
    clock: Mutex<Clock>,
    /// This round's releases end (a session ran out, or time is up).
    over: AtomicBool,
    /// No round follows.
    finished: AtomicBool,
    /// The end of the current round's releases at the latest.
    deadline: Mutex<Instant>,
}

impl Rounds<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a round's releases (barrier leader): the clock and the CPU
    /// sample start, or, with the time used up, the rounds finish.
    fn begin(&self) {
        let mut c = self.lock();
        if c.spent >= self.budget || self.w.stopping() {
            self.finished.store(true, Ordering::SeqCst);
            return;
        }
        self.over.store(false, Ordering::SeqCst);
        let now = Instant::now();
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = now + (self.budget - c.spent);
        c.round = Some((now, Sample::take(self.guardian, &self.w.frontend_pids())));
        c.rounds += 1;
        self.w.findings.note("release_mix_rounds");
        self.w.stats.in_run.store(true, Ordering::SeqCst);
    }

    /// Ends a round's releases (barrier leader).
    fn end(&self) {
        let mut c = self.lock();
        if let Some((t, start)) = c.round.take() {
            self.w.stats.in_run.store(false, Ordering::SeqCst);
            let end = Sample::take(self.guardian, &self.w.frontend_pids());
            c.spent += t.elapsed();
            c.ticks.add(Ticks::between(&start, &end));
        }
    }

    fn releasing(&self) -> bool {
        !self.over.load(Ordering::Relaxed)
            && !self.w.stopping()
            && Instant::now() < *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Helpers of `sess` it may release: present, outside quarantines.
fn own_helpers(sess: &TrackedSession) -> usize {
    sess.ledger.present().iter().filter(|g| !in_quarantine(&g.path)).count()
}

/// Tops `sess` up to its file quota with tool writes.
fn top_up(w: &World, sess: &mut TrackedSession) -> anyhow::Result<()> {
    let (files, _) = sess.ledger.usage();
    let missing = MAX_SESSION_FILES.saturating_sub(files) as usize;
    let new: Vec<_> = (0..missing)
        .map(|_| {
            let n = sess.rng.range(256, 8192) as usize;
            (sess.fresh_path("rel"), sess.rng.text(n))
        })
        .collect();
    for chunk in new.chunks(WRITE_CHUNK) {
        match ops::write_files(w, sess, sess.home, chunk)? {
            Written::Yes => {}
            other => anyhow::bail!("a top-up write of {} helpers was refused: {other:?}", chunk.len()),
        }
    }
    Ok(())
}

/// One read and one release of 1–4 of `sess`'s helpers; false when it
/// had none.
fn release_step(w: &World, sess: &mut TrackedSession) -> anyhow::Result<bool> {
    let k = (sess.rng.range(1, 4) as usize).min(own_helpers(sess));
    let paths = crate::workload::scenarios::pick(sess, k, u64::MAX);
    if paths.is_empty() {
        return Ok(false);
    }
    let pinned: Vec<_> = ops::read(w, sess, sess.home, &paths)?.into_iter().filter(|p| p.token.is_some()).collect();
    anyhow::ensure!(!pinned.is_empty(), "a read of {} own helpers pinned none", paths.len());
    let v = ops::release(w, sess, sess.home, &pinned, Expect::Any, &Default::default())?;
    if v["status"] != "completed" {
        w.findings.note("release_mix_not_completed");
    }
    Ok(true)
}

/// One worker: rounds of a top-up and releases until the rounds finish.
/// A worker whose step failed records the error (which stops the run) and
/// keeps meeting the others at the barriers until they finish.
fn worker(r: &Rounds, mut sess: TrackedSession) -> TrackedSession {
    let w = r.w;
    loop {
        if !w.stopping() {
            if let Err(e) = top_up(w, &mut sess) {
                w.fail(&e.context(format!("top-up of session {}", sess.idx)));
            }
            ops::verify(w, &mut sess, "after a top-up");
        }
        if r.barrier.wait().is_leader() {
            r.begin();
        }
        r.barrier.wait();
        if r.finished.load(Ordering::SeqCst) {
            return sess;
        }
        while r.releasing() {
            match release_step(w, &mut sess) {
                Ok(true) => {
                    ops::verify(w, &mut sess, "after a release");
                    Stats::inc(&w.stats.steps);
                }
                Ok(false) => r.over.store(true, Ordering::SeqCst),
                Err(e) => w.fail(&e.context(format!("release of session {}", sess.idx))),
            }
        }
        r.over.store(true, Ordering::SeqCst);
        if r.barrier.wait().is_leader() {
            r.end();
        }
    }
}

/// The timed phase of the release-only mix; returns the sessions, the
/// seconds timed and the CPU split of those seconds.
pub fn run(
    w: &World,
    cfg: &Config,
    pb: &ProgressBar,
    guardian: u32,
    sessions: Vec<TrackedSession>,
    backing: &mut Backing,
    target: u64,
) -> (Vec<TrackedSession>, f64, CpuReport) {
    let n = sessions.len();
    let r = Rounds {
        w,
        budget: cfg.timed_phase(),
        guardian,
        barrier: Barrier::new(n),
        clock: Mutex::new(Clock::default()),
        over: AtomicBool::new(true),
        finished: AtomicBool::new(false),
        deadline: Mutex::new(Instant::now()),
    };
    pb.set_message(format!("release-only rounds, {n} sessions"));
    let done = AtomicBool::new(false);
    let sessions: Vec<TrackedSession> = std::thread::scope(|sc| {
        let keeper = sc.spawn(|| timed::keeper(w, backing, target, &done));
        let handles: Vec<_> = sessions.into_iter().map(|s| sc.spawn(|| worker(&r, s))).collect();
        let out: Vec<TrackedSession> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
        done.store(true, Ordering::SeqCst);
        let _ = keeper.join();
        out
    });
    let c = r.lock();
    let run_s = c.spent.as_secs_f64();
    let cpu = c.ticks.report(run_s, Stats::get(&w.stats.run_releases));
    (sessions, run_s, cpu)
}
