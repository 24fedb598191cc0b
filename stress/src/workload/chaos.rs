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
//!   generation it still holds ([`reconcile`](crate::workload::interrupted::reconcile)): at its original path with
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

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::oracle::ledger::{in_quarantine, record};
use crate::workload::kills::{inc, Chaos};
use crate::workload::ops;
use crate::workload::world::{TrackedSession, World};

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
    let mut joined = c.wait_up_after(&w.stop, epoch)?;
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
            joined = c.wait_up_after(&w.stop, e)?;
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
