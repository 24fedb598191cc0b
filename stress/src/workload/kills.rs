//! What the chaos task (`phases::chaos`) and the workers share about
//! guardian kills (`--chaos`): the epochs of the guardians started, the
//! lock that keeps every `Initialize` out of the window in which no
//! guardian runs, the signal of a release being sent, and the counts of
//! the report. How a worker carries on after a kill is `workload::chaos`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

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
    pub fn wait_up_after(&self, stop: &AtomicBool, epoch: u64) -> anyhow::Result<u64> {
        let deadline = Instant::now() + UP_TIMEOUT;
        let mut s = self.state();
        while s.down || s.epoch == epoch {
            let now = Instant::now();
            anyhow::ensure!(now < deadline, "no new guardian within {} s of a kill", UP_TIMEOUT.as_secs());
            anyhow::ensure!(!stop.load(Ordering::Relaxed), "the run stopped while no guardian ran");
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
