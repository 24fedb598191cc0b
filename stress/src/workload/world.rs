//! The state shared by the setup, the workers and the report: the private
//! directory, the frontends, the workspaces, the counters and the findings;
//! and the state each worker owns: its session.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::harness::client::McpClient;
use crate::harness::private::Private;
use crate::oracle::ledger::{Findings, Ledger};
use crate::oracle::quota::WorkspaceBook;
use crate::workload::kills::Chaos;
use crate::workload::rng::Rng;

/// One workspace.
pub struct Workspace {
    /// The canonical root, as `Initialize` returns it.
    pub root: String,
    /// Its quota account.
    pub book: WorkspaceBook,
    /// Source files (not helpers) the tool created in it.
    pub sources: Mutex<Ledger>,
}

impl Workspace {
    /// `W/.winx/scratch`, the dropped-output backing root.
    pub fn scratch(&self) -> PathBuf {
        PathBuf::from(&self.root).join(".winx").join("scratch")
    }
}

/// A release the tool may replay: its exact arguments and what it did.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The `EditFiles` arguments, exactly as sent.
    pub args: Value,
    /// Per file: path, outcome, reason.
    pub outcomes: Vec<(String, String, Value)>,
}

/// A helper as read, ready to be released.
#[derive(Clone, Debug)]
pub struct Pinned {
    /// Its exact path.
    pub path: PathBuf,
    /// The ledger generation the read saw.
    pub gen: u64,
    /// `revision`.
    pub revision: String,
    /// `temporary_artifact.artifact_generation`.
    pub token: Option<String>,
    /// Its size.
    pub size: u64,
}

/// One session as the stress tool drives and tracks it: its thread, its
/// directory, the frontends it is initialised on, and the ledger of every
/// helper created in it. Owned by one worker at a time.
pub struct TrackedSession {
    /// Index in the run.
    pub idx: usize,
    /// Its workspace's index.
    pub ws: usize,
    /// Its slot in the workspace's quota book.
    pub slot: usize,
    /// Its thread id.
    pub thread_id: String,
    /// Its session directory (`temporary_artifact_dir`).
    pub dir: PathBuf,
    /// The frontend it was initialised on.
    pub home: usize,
    /// Another frontend it is also initialised on (its tokens differ).
    pub other: usize,
    /// Another session directory of the same workspace, if any.
    pub peer: Option<PathBuf>,
    /// Every helper the tool created in it.
    pub ledger: Ledger,
    /// Releases that touched the filesystem, for replays.
    pub recorded: Vec<Recorded>,
    /// This session's random numbers.
    pub rng: Rng,
    counter: u64,
}

impl TrackedSession {
    /// A session.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        idx: usize,
        ws: usize,
        slot: usize,
        thread_id: String,
        dir: PathBuf,
        home: usize,
        other: usize,
        rng: Rng,
    ) -> TrackedSession {
        TrackedSession {
            idx,
            ws,
            slot,
            thread_id,
            dir,
            home,
            other,
            peer: None,
            ledger: Ledger::default(),
            recorded: Vec::new(),
            rng,
            counter: 0,
        }
    }

    /// A fresh helper path in the session directory (sometimes one level
    /// down), never used before in this run.
    pub fn fresh_path(&mut self, prefix: &str) -> PathBuf {
        self.counter += 1;
        let name = format!("{prefix}-{}-{}.txt", self.idx, self.counter);
        if self.rng.chance(150) {
            self.dir.join(format!("sub{}", self.counter % 3)).join(name)
        } else {
            self.dir.join(name)
        }
    }

    /// A unique number for names.
    pub fn next_number(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }
}

/// Counters of the run.
#[derive(Default)]
pub struct Stats {
    /// Fresh release requests (not replays).
    pub releases: AtomicU64,
    /// Of those, by status.
    pub completed: AtomicU64,
    /// `partial` answers.
    pub partial: AtomicU64,
    /// `denied` and `invalid_input` answers.
    pub denials: AtomicU64,
    /// `failed` answers.
    pub failed: AtomicU64,
    /// Files reported `released`.
    pub released_files: AtomicU64,
    /// Bytes reported reclaimed.
    pub bytes_reclaimed: AtomicU64,
    /// Files reported `restored`.
    pub restored_files: AtomicU64,
    /// Files reported `preserved`.
    pub preserved_files: AtomicU64,
    /// Replays answered `replayed: true`.
    pub replays: AtomicU64,
    /// `ReadFiles` calls.
    pub reads: AtomicU64,
    /// Accepted `EditFiles` writes (requests).
    pub writes: AtomicU64,
    /// Writes refused with `quota_exceeded`.
    pub quota_refusals: AtomicU64,
    /// `BashCommand` calls.
    pub commands: AtomicU64,
    /// Audits run.
    pub audits: AtomicU64,
    /// Adversarial changes made.
    pub adversarial: AtomicU64,
    /// Steps of the run phase.
    pub steps: AtomicU64,
    /// Release requests sent during the timed phase.
    pub run_releases: AtomicU64,
    /// Files released during the timed phase.
    pub run_released_files: AtomicU64,
    /// Whether the timed phase runs.
    pub in_run: AtomicBool,
    denial_reasons: Mutex<BTreeMap<String, u64>>,
    latencies_us: Mutex<Vec<u64>>,
    backing: Mutex<Vec<u64>>,
}

impl Stats {
    /// Adds one to `c`.
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a denial by its code.
    pub fn denial(&self, code: &str) {
        Stats::inc(&self.denials);
        *self.denial_reasons.lock().unwrap_or_else(|e| e.into_inner()).entry(code.to_owned()).or_default() += 1;
    }

    /// Records the latency of one release call; counted in the timed
    /// phase only.
    pub fn latency(&self, d: Duration, released: u64) {
        if self.in_run.load(Ordering::Relaxed) {
            Stats::inc(&self.run_releases);
            self.run_released_files.fetch_add(released, Ordering::Relaxed);
            self.latencies_us.lock().unwrap_or_else(|e| e.into_inner()).push(d.as_micros() as u64);
        }
    }

    /// Records a backing-root entry count sample.
    pub fn backing_sample(&self, n: u64) {
        self.backing.lock().unwrap_or_else(|e| e.into_inner()).push(n);
    }

    /// Denials by code.
    pub fn denial_reasons(&self) -> BTreeMap<String, u64> {
        self.denial_reasons.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Release latencies of the timed phase, sorted, in microseconds.
    pub fn latencies(&self) -> Vec<u64> {
        let mut v = self.latencies_us.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v.sort_unstable();
        v
    }

    /// Backing-root entry samples of the timed phase.
    pub fn backing_samples(&self) -> Vec<u64> {
        self.backing.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// One named check of the setup phase.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether the answer was the expected one.
    pub ok: bool,
    /// What was seen.
    pub detail: String,
}

/// Everything the threads share.
pub struct World {
    /// The private directory.
    pub private: Private,
    /// The frontends.
    pub frontends: Vec<McpClient>,
    /// The workspaces.
    pub workspaces: Vec<Workspace>,
    /// Counters.
    pub stats: Stats,
    /// Findings.
    pub findings: Findings,
    /// Setup checks.
    pub checks: Mutex<Vec<Check>>,
    /// Set to stop the workers early (Ctrl-C, a fatal error).
    pub stop: Arc<AtomicBool>,
    /// Frontends the workers use (the first ones); the others serve checks.
    pub worker_frontends: usize,
    /// The first fatal error of a worker.
    pub fatal: Mutex<Option<String>>,
    /// Gate files still closed, with the thread that made each.
    pub open_gates: Mutex<Vec<(PathBuf, std::thread::ThreadId)>>,
    /// Guardian kills under load (`--chaos`), when on.
    pub chaos: Option<Chaos>,
    gate_counter: AtomicU64,
    /// When the run started.
    pub started: Instant,
    phases: Mutex<(Instant, Vec<(String, f64)>)>,
}

impl World {
    /// A world over a private directory and its frontends.
    pub fn new(
        private: Private,
        frontends: Vec<McpClient>,
        worker_frontends: usize,
        workspaces: Vec<Workspace>,
    ) -> World {
        World {
            private,
            frontends,
            workspaces,
            stats: Stats::default(),
            findings: Findings::default(),
            checks: Mutex::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
            worker_frontends,
            fatal: Mutex::new(None),
            open_gates: Mutex::new(Vec::new()),
            chaos: None,
            gate_counter: AtomicU64::new(0),
            started: Instant::now(),
            phases: Mutex::new((Instant::now(), Vec::new())),
        }
    }

    /// The process ids of the frontends.
    pub fn frontend_pids(&self) -> Vec<u32> {
        self.frontends.iter().map(McpClient::pid).collect()
    }

    /// Records a setup check.
    pub fn check(&self, name: &str, ok: bool, detail: impl Into<String>) {
        let detail = detail.into();
        if !ok {
            tracing::warn!(name, %detail, "stress check not as expected");
        }
        self.checks.lock().unwrap_or_else(|e| e.into_inner()).push(Check { name: name.to_owned(), ok, detail });
    }

    /// A new closed gate: a path that does not exist yet.
    pub fn new_gate(&self) -> PathBuf {
        let n = self.gate_counter.fetch_add(1, Ordering::Relaxed);
        let p = self.private.gates.join(format!("g{n}"));
        self.open_gates.lock().unwrap_or_else(|e| e.into_inner()).push((p.clone(), std::thread::current().id()));
        p
    }

    /// Opens a gate (creates its file): the command waiting on it ends.
    pub fn open_gate(&self, gate: &std::path::Path) {
        let _ = std::fs::write(gate, b"");
        self.open_gates.lock().unwrap_or_else(|e| e.into_inner()).retain(|g| g.0 != gate);
    }

    /// Opens every gate the calling thread made that is still closed.
    pub fn open_my_gates(&self) {
        let me = std::thread::current().id();
        let mine: Vec<PathBuf> = {
            let mut gates = self.open_gates.lock().unwrap_or_else(|e| e.into_inner());
            let (mine, others) = std::mem::take(&mut *gates).into_iter().partition(|g| g.1 == me);
            *gates = others;
            mine.into_iter().map(|g: (PathBuf, _)| g.0).collect()
        };
        for g in mine {
            let _ = std::fs::write(&g, b"");
        }
    }

    /// Opens every gate still closed.
    pub fn open_all_gates(&self) {
        let gates = std::mem::take(&mut *self.open_gates.lock().unwrap_or_else(|e| e.into_inner()));
        for (g, _) in gates {
            let _ = std::fs::write(&g, b"");
        }
    }

    /// Ends a phase: records the seconds since the previous one ended.
    pub fn phase(&self, name: &str) {
        let mut p = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let secs = (now - p.0).as_secs_f64();
        p.1.push((name.to_owned(), (secs * 100.0).round() / 100.0));
        p.0 = now;
    }

    /// The phases so far, in order, with their seconds.
    pub fn phases(&self) -> Vec<(String, f64)> {
        self.phases.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// Whether workers should stop.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Records a fatal error and stops the run.
    pub fn fail(&self, e: &anyhow::Error) {
        let mut f = self.fatal.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(format!("{e:#}"));
        }
        self.stop.store(true, Ordering::SeqCst);
    }
}
