//! The timed phase: one worker thread per session doing a seeded random
//! sequence of steps until the deadline, each step followed by a check of
//! the session against the ledger; a keeper thread holding the backing
//! roots at their target; a ticker updating the progress bar.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::workload::backing::Backing;
use crate::workload::chaos::{self, Settled};
use crate::workload::kills::Chaos;
use crate::workload::ops::{self, Expect};
use crate::workload::scenarios::{self, Blocker};
use crate::workload::world::{Stats, TrackedSession, World};

/// The steps and their weights (per mille).
const STEPS: &[(Step, u64)] = &[
    (Step::Release, 300),
    (Step::CreateTool, 170),
    (Step::CreateBash, 70),
    (Step::Read, 60),
    (Step::Replay, 80),
    (Step::Identical, 40),
    (Step::Changed, 30),
    (Step::Race, 50),
    (Step::NewAtReleased, 40),
    (Step::Background, 30),
    (Step::InlineWait, 20),
    (Step::Queued, 20),
    (Step::Symlink, 20),
    (Step::Hardlink, 20),
    (Step::CrossFrontend, 20),
    (Step::Source, 10),
    (Step::OtherSession, 10),
    (Step::Audit, 5),
    (Step::Reinitialize, 5),
];

#[derive(Clone, Copy, Debug)]
enum Step {
    Release,
    CreateTool,
    CreateBash,
    Read,
    Replay,
    Identical,
    Changed,
    Race,
    NewAtReleased,
    Background,
    InlineWait,
    Queued,
    Symlink,
    Hardlink,
    CrossFrontend,
    Source,
    OtherSession,
    Audit,
    Reinitialize,
}

fn choose(sess: &mut TrackedSession) -> Step {
    let total: u64 = STEPS.iter().map(|s| s.1).sum();
    let mut r = sess.rng.below(total);
    for (s, w) in STEPS {
        if r < *w {
            return *s;
        }
        r -= w;
    }
    Step::Release
}

fn step(w: &World, sess: &mut TrackedSession) -> anyhow::Result<()> {
    let (files, _) = sess.ledger.usage();
    let chosen = if files < 8 { Step::CreateTool } else { choose(sess) };
    match chosen {
        Step::Release => {
            let _ = scenarios::plain_release(w, sess, Expect::Any)?;
        }
        // An agent told `quota_exceeded` releases before it writes again
        // (nine times in ten; the tenth write still probes the edge). With
        // nothing of its own to release it waits a moment: the workspace is
        // full of other sessions' helpers, which their workers release.
        Step::CreateTool if scenarios::quota_full(w, sess) && !sess.rng.chance(100) => {
            if scenarios::plain_release(w, sess, Expect::Any)?.is_none() {
                ops::nap(5);
            }
        }
        Step::CreateTool => {
            let _ = scenarios::create_tool(w, sess)?;
        }
        Step::CreateBash => scenarios::create_bash(w, sess)?,
        Step::Read => {
            let k = sess.rng.range(1, 5) as usize;
            let paths = scenarios::pick(sess, k, 1 << 20);
            if !paths.is_empty() {
                let fe = sess.rng.index(w.worker_frontends);
                ops::read(w, sess, fe, &paths)?;
            }
        }
        Step::Replay => {
            let _ = scenarios::replay_one(w, sess)?;
        }
        Step::Identical => {
            let _ = scenarios::identical_replacement(w, sess)?;
        }
        Step::Changed => {
            let _ = scenarios::changed_content(w, sess)?;
        }
        Step::Race => {
            let _ = scenarios::racing_replacement(w, sess)?;
        }
        Step::NewAtReleased => {
            let fe = sess.rng.index(w.worker_frontends);
            let _ = scenarios::new_file_at_released_name(w, sess, fe)?;
        }
        Step::Background => {
            let _ = scenarios::blocked_release(w, sess, Blocker::Background)?;
        }
        Step::InlineWait => {
            let _ = scenarios::blocked_release(w, sess, Blocker::InlineWait)?;
        }
        Step::Queued => {
            let _ = scenarios::blocked_release(w, sess, Blocker::Queued)?;
        }
        Step::Symlink => {
            let _ = scenarios::symlink_in_backing(w, sess, None)?;
        }
        Step::Hardlink => {
            let _ = scenarios::hardlink_in_backing(w, sess)?;
        }
        Step::CrossFrontend => {
            let _ = scenarios::cross_frontend(w, sess)?;
        }
        Step::Source => {
            let _ = scenarios::source_release(w, sess)?;
        }
        Step::OtherSession => {
            if let Some(peer) = sess.peer.clone() {
                let _ = scenarios::other_session_release(w, sess, &peer)?;
            }
        }
        Step::Audit => {
            let _ = ops::audit(w, sess.ws, &format!("audit-s{}", sess.idx))?;
        }
        Step::Reinitialize => {
            let root = w.workspaces[sess.ws].root.clone();
            ops::initialize(w, sess.home, &root, &sess.thread_id, None)?;
        }
    }
    Ok(())
}

/// Runs steps on `sess` until `deadline`; returns the session for the
/// final verification.
///
/// With `--chaos`, the worker initialises its thread again after each
/// guardian restart, and a step that failed while a kill happened is not
/// an error of the run: the worker settles (`workload::chaos::settle`)
/// and goes on; the ledger still judges every byte.
pub fn worker(w: &World, mut sess: TrackedSession, deadline: Instant) -> TrackedSession {
    let mut n = 0u64;
    let mut joined = w.chaos.as_ref().map_or(0, Chaos::epoch);
    while Instant::now() < deadline && !w.stopping() {
        let epoch = w.chaos.as_ref().map_or(0, Chaos::epoch);
        let mut r = Ok(());
        if epoch != joined {
            r = chaos::rejoin(w, &sess).map(|()| joined = epoch);
        }
        let r = r.and_then(|()| step(w, &mut sess));
        let r = match (&w.chaos, r) {
            (Some(c), Err(e)) if c.interrupted_since(epoch) => {
                tracing::debug!(error = %format!("{e:#}"), session = sess.idx, "a step cut short by a guardian kill");
                match chaos::settle(w, &mut sess, epoch) {
                    Ok(Settled::Joined(e)) => {
                        joined = e;
                        Ok(())
                    }
                    Ok(Settled::Stuck) => break,
                    Err(e) => Err(e),
                }
            }
            (_, r) => r,
        };
        if let Err(e) = r {
            w.fail(&e.context(format!("worker of session {}", sess.idx)));
            break;
        }
        ops::verify(w, &mut sess, "after a step");
        Stats::inc(&w.stats.steps);
        n += 1;
        if n.is_multiple_of(25) {
            w.workspaces[sess.ws].sources.lock().unwrap_or_else(|e| e.into_inner()).verify(
                &w.findings,
                "sources",
                false,
            );
        }
    }
    sess
}

/// Holds the backing roots at `target` entries until `done`.
pub fn keeper(w: &World, backing: &mut Backing, target: u64, done: &AtomicBool) {
    while !done.load(Ordering::Relaxed) {
        match backing.trim(target) {
            Ok(total) => w.stats.backing_sample(total),
            Err(e) => {
                w.fail(&anyhow::anyhow!("backing keeper: {e}"));
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Updates the run's progress bar until `done`.
pub fn ticker(w: &World, pb: &ProgressBar, start: Instant, done: &AtomicBool) {
    while !done.load(Ordering::Relaxed) {
        pb.set_position(start.elapsed().as_millis() as u64);
        let s = &w.stats;
        pb.set_message(format!(
            "releases {} · files {} · denials {} · replays {} · violations {}",
            Stats::get(&s.releases),
            Stats::get(&s.released_files),
            Stats::get(&s.denials),
            Stats::get(&s.replays),
            w.findings.violations()
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
}
