//! Guardian kills under load (`--chaos`): what the workers share with the
//! chaos task (`phases::chaos`), and how a worker carries on after a kill.
//!
//! The chaos task SIGKILLs the guardian at seeded random moments of the
//! mixed timed phase (some right after a worker sent a release) and starts
//! a new one on the same data directory and socket. Around each kill it
//! marks the guardian [`Chaos::down`], then [`Chaos::up`] once the new one
//! printed its ready line (its crash recovery has run by then): a new
//! *epoch*. The frontends stay; a call in flight at the kill, or sent while
//! no guardian listens, fails with a contract code.
//!
//! A worker accepts exactly what the contract allows for such a call:
//!
//! - a release answered `outcome_unknown` (its guardian died while it ran)
//!   or `owner_unavailable` (no guardian) is *interrupted*: the worker waits
//!   for the next guardian, then accounts for every target whose pinned
//!   generation it still holds ([`reconcile`]): at its original path with
//!   its bytes (recovered, or never touched), in a `.winx-release-*`
//!   quarantine of its session with its bytes (preserved), or gone, which
//!   only the release itself could have done to the pinned object it was
//!   sent (removed after verification, as a `released` outcome). Anything
//!   else is for the ledger to find (lost, overwritten). Then the same
//!   request is sent again: the contract judges it afresh (no receipt was
//!   written), so missing or changed generations fail closed;
//! - any other step that failed while a kill happened ([`settle`]): the
//!   worker opens the gates it holds, initialises its thread again, waits
//!   until its shell is back at its prompt, and takes into its ledger the
//!   helpers a command it typed before the kill wrote since.
//!
//! An `Initialize` is the one call with which a frontend starts a guardian
//! of its own when none answers; [`Chaos::init`] keeps every `Initialize`
//! out of the window in which no guardian runs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::oracle::ledger::{hash_file, in_quarantine, record};
use crate::workload::ops::{self, Pinned};
use crate::workload::world::{TrackedSession, World};

/// Longest wait for the next guardian after a kill.
const UP_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Up {
    epoch: u64,
    down: bool,
}

/// Counts of a chaos run.
#[derive(Default)]
pub struct Counts {
    /// Guardians SIGKILLed.
    pub kills: AtomicU64,
    /// Of those, right after a worker sent a release.
    pub kills_mid_release: AtomicU64,
    /// Shells with a command running at a kill that the next guardian
    /// took over: still running, then completed with their output.
    pub reattached: AtomicU64,
    /// Releases answered `outcome_unknown` because their guardian died.
    pub interrupted_releases: AtomicU64,
    /// Releases refused `owner_unavailable` while no guardian ran.
    pub refused_while_down: AtomicU64,
    /// Targets of interrupted releases found at their path with their bytes.
    pub recovered: AtomicU64,
    /// Targets of interrupted releases found in a named quarantine.
    pub preserved: AtomicU64,
    /// Targets of interrupted releases removed (after verification).
    pub removed: AtomicU64,
    /// Interrupted or refused releases sent again after the restart.
    pub replayed: AtomicU64,
    /// Other steps cut short by a kill (the worker settled and went on).
    pub interrupted_steps: AtomicU64,
    /// Helpers a command typed before a kill wrote, taken into the ledger.
    pub adopted: AtomicU64,
}

/// The chaos figures of the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ChaosReport {
    /// Guardians SIGKILLed (each replaced by a new one).
    pub kills: u64,
    /// Of those, right after a worker sent a release.
    pub kills_mid_release: u64,
    /// Shells re-attached with their command still running.
    pub reattached: u64,
    /// Releases whose guardian died while they ran (`outcome_unknown`).
    pub interrupted_releases: u64,
    /// Releases refused `owner_unavailable` while no guardian ran.
    pub refused_while_down: u64,
    /// Their targets found back at their path.
    pub recovered: u64,
    /// Their targets found in a named quarantine.
    pub preserved: u64,
    /// Their targets removed after verification.
    pub removed: u64,
    /// Interrupted or refused releases sent again, judged afresh.
    pub replayed: u64,
    /// Other steps cut short by a kill.
    pub interrupted_steps: u64,
    /// Helpers written by a command across a kill, taken into the ledger.
    pub adopted: u64,
}

/// What the chaos task and the workers share.
#[derive(Default)]
pub struct Chaos {
    up: Mutex<Up>,
    up_cv: Condvar,
    /// Every `Initialize` holds it shared; the chaos task holds it
    /// exclusively from a kill until the next guardian is ready.
    pub init: RwLock<()>,
    armed: AtomicBool,
    sent: Mutex<bool>,
    sent_cv: Condvar,
    /// A moving average of the release latency, in microseconds.
    latency_us: AtomicU64,
    /// The counts.
    pub counts: Counts,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Adds one to `c`.
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Chaos {
    fn state(&self) -> std::sync::MutexGuard<'_, Up> {
        self.up.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Guardians started by the chaos task so far.
    pub fn epoch(&self) -> u64 {
        self.state().epoch
    }

    /// Whether a kill happened since `epoch` was read (or one is under way).
    pub fn interrupted_since(&self, epoch: u64) -> bool {
        let s = self.state();
        s.down || s.epoch != epoch
    }

    /// The guardian is about to be killed.
    pub fn down(&self) {
        self.state().down = true;
    }

    /// A new guardian is ready: the next epoch.
    pub fn up(&self) {
        let mut s = self.state();
        s.down = false;
        s.epoch += 1;
        self.up_cv.notify_all();
    }

    /// Waits until a guardian started after `epoch` is ready; returns the
    /// epoch then.
    pub fn wait_up_after(&self, w: &World, epoch: u64) -> anyhow::Result<u64> {
        let deadline = Instant::now() + UP_TIMEOUT;
        let mut s = self.state();
        while s.down || s.epoch == epoch {
            let now = Instant::now();
            anyhow::ensure!(now < deadline, "no new guardian within {} s of a kill", UP_TIMEOUT.as_secs());
            anyhow::ensure!(!w.stopping(), "the run stopped while no guardian ran");
            let slice = (deadline - now).min(Duration::from_millis(200));
            s = self.up_cv.wait_timeout(s, slice).unwrap_or_else(|e| e.into_inner()).0;
        }
        Ok(s.epoch)
    }

    /// Asks for a signal when a worker sends its next release.
    pub fn arm(&self) {
        *self.sent.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Stops asking.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    /// A worker is sending a release now.
    pub fn release_sending(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            *self.sent.lock().unwrap_or_else(|e| e.into_inner()) = true;
            self.sent_cv.notify_all();
        }
    }

    /// Records the latency of a release that was not cut off.
    pub fn latency(&self, d: Duration) {
        let x = d.as_micros() as u64;
        let _ = self.latency_us.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(if old == 0 { x } else { (old * 7 + x) / 8 })
        });
    }

    /// The moving average of the release latency.
    pub fn typical_latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::Relaxed))
    }

    /// Waits up to `timeout` for a release after [`Chaos::arm`].
    pub fn wait_release(&self, timeout: Duration) -> bool {
        let g = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let (g, _) = self.sent_cv.wait_timeout_while(g, timeout, |sent| !*sent).unwrap_or_else(|e| e.into_inner());
        *g
    }

    /// The report's figures.
    pub fn report(&self) -> ChaosReport {
        let c = &self.counts;
        ChaosReport {
            kills: get(&c.kills),
            kills_mid_release: get(&c.kills_mid_release),
            reattached: get(&c.reattached),
            interrupted_releases: get(&c.interrupted_releases),
            refused_while_down: get(&c.refused_while_down),
            recovered: get(&c.recovered),
            preserved: get(&c.preserved),
            removed: get(&c.removed),
            replayed: get(&c.replayed),
            interrupted_steps: get(&c.interrupted_steps),
            adopted: get(&c.adopted),
        }
    }
}

/// Whether a release answer `v`, sent in `epoch`, was cut off by a kill:
/// `outcome_unknown` or `owner_unavailable` while a kill happened.
pub fn cut_off(w: &World, v: &Value, epoch: u64) -> bool {
    let Some(c) = &w.chaos else { return false };
    let cut = v["outcome_unknown"] == json!(true) || v["errorCode"] == "owner_unavailable";
    if !cut || !c.interrupted_since(epoch) {
        return false;
    }
    if v["outcome_unknown"] == json!(true) {
        inc(&c.counts.interrupted_releases);
    } else {
        inc(&c.counts.refused_while_down);
    }
    true
}

/// After an interrupted release of `targets` sent in `epoch`: waits for
/// the next guardian, then accounts for each target (see the module docs).
pub fn reconcile(w: &World, sess: &mut TrackedSession, targets: &[Pinned], epoch: u64) -> anyhow::Result<()> {
    let Some(c) = &w.chaos else { return Ok(()) };
    c.wait_up_after(w, epoch)?;
    for t in targets {
        let Some(g) = sess.ledger.get(&t.path).filter(|g| g.id == t.gen && sess.ledger.is_present(&t.path)) else {
            continue;
        };
        let (sha, size) = (g.sha, g.size);
        match hash_file(&t.path) {
            Ok((s, n, _)) if s == sha && n == size => inc(&c.counts.recovered),
            // Other bytes: the ledger's check names it.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match in_quarantines(&sess.dir, &sha, size) {
                Some(q) => {
                    sess.ledger.relocate(&t.path, &q);
                    inc(&c.counts.preserved);
                }
                None => {
                    sess.ledger.mark_released(&t.path, t.gen);
                    inc(&c.counts.removed);
                }
            },
            Err(_) => {}
        }
    }
    Ok(())
}

/// A file with these bytes in a `.winx-release-*` quarantine below `dir`.
fn in_quarantines(dir: &Path, sha: &[u8; 32], size: u64) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t)
                    if t.is_file()
                        && in_quarantine(&p)
                        && e.metadata().is_ok_and(|m| m.len() == size)
                        && hash_file(&p).is_ok_and(|(s, n, _)| &s == sha && n == size) =>
                {
                    return Some(p);
                }
                _ => {}
            }
        }
    }
    None
}

/// Initialises `sess`'s thread again on its frontends (the next guardian
/// is another instance).
pub fn rejoin(w: &World, sess: &TrackedSession) -> anyhow::Result<()> {
    let root = w.workspaces[sess.ws].root.clone();
    ops::initialize(w, sess.home, &root, &sess.thread_id, None)?;
    if sess.other != sess.home {
        ops::initialize(w, sess.other, &root, &sess.thread_id, None)?;
    }
    Ok(())
}

/// What became of a worker's thread after a kill.
pub enum Settled {
    /// Its shell is back at its prompt; the epoch of the guardian it
    /// initialised its thread with last.
    Joined(u64),
    /// Its shell never came back to its prompt: the violation
    /// `shell_stuck_after_kill` is recorded and the worker stops (each
    /// command of its thread would be refused).
    Stuck,
}

/// How long a settling worker waits for its shell's prompt once its gates
/// are open (a command of the workload ends well within it).
const PROMPT_WAIT: Duration = Duration::from_secs(20);

/// After a step that failed while a kill happened: the worker's gates
/// open, its thread initialised again, its shell back at its prompt, and
/// what a command it typed before the kill wrote since in its ledger.
pub fn settle(w: &World, sess: &mut TrackedSession, epoch: u64) -> anyhow::Result<Settled> {
    let Some(c) = &w.chaos else { return Ok(Settled::Joined(epoch)) };
    inc(&c.counts.interrupted_steps);
    w.open_my_gates();
    let mut joined = c.wait_up_after(w, epoch)?;
    rejoin(w, sess)?;
    let args = json!({"thread_id": sess.thread_id, "status_check": true, "wait_for_seconds": 1});
    let mut last = Value::Null;
    let deadline = Instant::now() + PROMPT_WAIT;
    while Instant::now() < deadline {
        let e = c.epoch();
        let r = ops::call_ok(w, sess.home, "BashCommand", args.clone())?;
        if r.status() == "completed" {
            adopt(w, c, sess);
            return Ok(Settled::Joined(joined));
        }
        if r.is_error {
            // Only another kill excuses a refusal here.
            anyhow::ensure!(c.interrupted_since(e), "status check of the shell: {}", r.value);
            joined = c.wait_up_after(w, e)?;
            rejoin(w, sess)?;
            continue;
        }
        last = r.value;
    }
    if last.is_null() {
        // Every check was cut short by a kill: nothing to judge by.
        w.findings.note("chaos_settle_unanswered");
        return Ok(Settled::Stuck);
    }
    w.findings.violation(
        "shell_stuck_after_kill",
        &sess.dir,
        format!(
            "the shell of thread {} is not back at its prompt {} s after a guardian kill, its gates open; \
             its last status_check: {last}",
            sess.thread_id,
            PROMPT_WAIT.as_secs()
        ),
    );
    Ok(Settled::Stuck)
}

/// Takes the helpers of `sess`'s directory that its ledger does not know
/// (written by a command whose answer the kill cut off) into its ledger.
fn adopt(w: &World, c: &Chaos, sess: &mut TrackedSession) {
    let mut stack = vec![sess.dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if in_quarantine(&p) {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() && sess.ledger.get(&p).is_none() => {
                    if let Ok(g) = record(&p) {
                        sess.ledger.add(g);
                        inc(&c.counts.adopted);
                    }
                }
                _ => {}
            }
        }
    }
    w.workspaces[sess.ws].book.commit(sess.slot, sess.ledger.usage().1);
}
