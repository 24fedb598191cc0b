//! The long-run mode: `winx-release stress --commands N`.
//!
//! Proves that the backing stores stay within budget under any amount of
//! use (architecture invariant 10). A real guardian, started with small
//! retention values (`--keep-executions`, `--keep-receipts-days`), and one
//! real MCP frontend serve `--workers` sessions, each running foreground
//! commands through `BashCommand` until `N` commands have run in all; every
//! `--release-every`-th command of a worker is followed by a fresh helper,
//! its `ReadFiles`, and its release through `EditFiles`, which must
//! complete. A sampler counts the backing roots as a release scans them,
//! four times a second, for the peak.
//!
//! The report gives the peak and final backing-entry counts, how many
//! releases completed, and the p50/p99 latency of commands and releases in
//! the first and the last tenth of the run: with retention working, the
//! latency at the end is that at the start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::ProgressBar;
use serde::Serialize;
use serde_json::{json, Value};
use winx_release_engine::layout::Layout;
use winx_release_engine::retention::backing_usage;

use crate::config::{Config, CALL_TIMEOUT};
use crate::harness::client::McpClient;
use crate::harness::private::Private;
use crate::progress::{self, Progress};

/// Latency in one window of the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Window {
    /// Commands timed in the window.
    pub commands: u64,
    /// Median command latency at the client.
    pub command_p50_ms: f64,
    /// 99th percentile.
    pub command_p99_ms: f64,
    /// Releases timed in the window.
    pub releases: u64,
    /// Median release latency at the client.
    pub release_p50_ms: f64,
    /// 99th percentile.
    pub release_p99_ms: f64,
}

/// The report of a long run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LongReport {
    /// Always `long_run`.
    pub mode: &'static str,
    /// Commands that completed with exit code 0.
    pub commands: u64,
    /// Commands that did not.
    pub commands_failed: u64,
    /// Releases requested.
    pub releases: u64,
    /// Releases that completed.
    pub releases_completed: u64,
    /// Anything that went wrong, by kind (a release's status and reason, a
    /// command's error).
    pub failures: BTreeMap<String, u64>,
    /// Most backing-root entries seen (scratch, executions, receipts).
    pub peak_backing_entries: u64,
    /// Entries at the end.
    pub final_backing_entries: u64,
    /// The shared scan bound.
    pub backing_limit: u64,
    /// Samples taken.
    pub backing_samples: u64,
    /// The first tenth of the run.
    pub start: Window,
    /// The last tenth of the run.
    pub end: Window,
    /// Wall time of the run.
    pub elapsed_s: f64,
    /// Commands per second.
    pub commands_per_s: f64,
    /// The guardian's retention values.
    pub keep_executions: usize,
    /// The guardian's receipt window, in days.
    pub keep_receipts_days: u64,
    /// Worker sessions.
    pub workers: usize,
    /// Failures of the run: failed commands and releases, a peak past the
    /// bound. 0 means it passed.
    pub violations: u64,
    /// Why the run could not go on, if it stopped early.
    pub error: Option<String>,
    /// The private directory, when kept.
    pub private_dir: Option<String>,
}

impl LongReport {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.violations == 0 && self.error.is_none()
    }

    /// A readable summary.
    pub fn table(&self) -> String {
        let w = |n: &str, x: &Window| {
            format!(
                "  {n:<6} commands p50 {:>7.2} ms  p99 {:>7.2} ms   releases p50 {:>7.2} ms  p99 {:>7.2} ms\n",
                x.command_p50_ms, x.command_p99_ms, x.release_p50_ms, x.release_p99_ms
            )
        };
        let mut s = format!(
            "long run: {} commands ({} failed), {} of {} releases completed in {:.1} s ({:.0} commands/s), {} workers\n\
             backing entries: peak {} / {} (final {}, {} samples); guardian --keep-executions {} --keep-receipts-days {}\n",
            self.commands,
            self.commands_failed,
            self.releases_completed,
            self.releases,
            self.elapsed_s,
            self.commands_per_s,
            self.workers,
            self.peak_backing_entries,
            self.backing_limit,
            self.final_backing_entries,
            self.backing_samples,
            self.keep_executions,
            self.keep_receipts_days,
        );
        s.push_str(&w("start", &self.start));
        s.push_str(&w("end", &self.end));
        for (k, n) in &self.failures {
            s.push_str(&format!("  failure {k}: {n}\n"));
        }
        if let Some(e) = &self.error {
            s.push_str(&format!("  error: {e}\n"));
        }
        s.push_str(if self.passed() { "PASSED\n" } else { "FAILED\n" });
        s
    }
}

/// What the workers record.
#[derive(Default)]
struct Log {
    /// (global order, ms) of each command.
    commands: Vec<(u64, f64)>,
    /// (global order of the command it followed, ms) of each release.
    releases: Vec<(u64, f64)>,
    failures: BTreeMap<String, u64>,
    releases_completed: u64,
    commands_failed: u64,
}

struct Shared<'a> {
    fe: &'a McpClient,
    ws: &'a str,
    cfg: &'a Config,
    next: AtomicU64,
    log: Mutex<Log>,
    stop: &'a AtomicBool,
    bar: &'a ProgressBar,
}

impl Shared<'_> {
    fn fail(&self, kind: String) {
        *self.log.lock().unwrap_or_else(|e| e.into_inner()).failures.entry(kind).or_default() += 1;
    }
}

/// Runs the long-run mode.
pub fn run(cfg: &Config) -> anyhow::Result<LongReport> {
    anyhow::ensure!(cfg.workers >= 1 && cfg.commands.unwrap_or(0) >= 1, "--commands and --workers must be at least 1");
    let mut private = Private::create(cfg.dir.as_deref())?;
    let keep_exec = cfg.keep_executions.to_string();
    let keep_days = cfg.keep_receipts_days.to_string();
    let mut guardian = private.start_guardian(&[
        "--keep-executions",
        keep_exec.as_str(),
        "--keep-receipts-days",
        keep_days.as_str(),
    ])?;
    let fe = private.spawn_frontend("mcp-long", &[], CALL_TIMEOUT)?;
    let ws_path = private.dirs.ws.join("ws0");
    std::fs::create_dir_all(&ws_path)?;
    let ws = std::fs::canonicalize(&ws_path)?.to_str().context("workspace path is not UTF-8")?.to_owned();
    let layout = Layout::new(ws.clone(), &private.dirs.data).map_err(|d| anyhow::anyhow!("{d}"))?;

    let stop = AtomicBool::new(false);
    let bar = progress::bar(cfg.progress, Progress::Commands(cfg.commands.unwrap_or(0)));
    let shared =
        Shared { fe: &fe, ws: &ws, cfg, next: AtomicU64::new(0), log: Mutex::default(), stop: &stop, bar: &bar };
    let started = Instant::now();
    let done = AtomicBool::new(false);
    let (peak, samples, result) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let (mut peak, mut samples) = (0u64, 0u64);
            while !done.load(Ordering::SeqCst) {
                peak = peak.max(backing_usage(&layout).backing_entries);
                samples += 1;
                std::thread::sleep(Duration::from_millis(250));
            }
            (peak, samples)
        });
        let workers: Vec<_> = (0..cfg.workers)
            .map(|w| {
                s.spawn({
                    let shared = &shared;
                    move || worker(shared, w)
                })
            })
            .collect();
        let mut result: anyhow::Result<()> = Ok(());
        for h in workers {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err(anyhow::anyhow!("a worker panicked")),
            }
        }
        done.store(true, Ordering::SeqCst);
        let (peak, samples) = sampler.join().unwrap_or((0, 0));
        (peak, samples, result)
    });
    let elapsed = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let final_usage = backing_usage(&layout);
    fe.shutdown(Duration::from_secs(3));
    let code = guardian.stop(Duration::from_secs(10));
    private.end_leftovers();

    let log = shared.log.into_inner().unwrap_or_else(|e| e.into_inner());
    let total = shared.next.load(Ordering::SeqCst).min(cfg.commands.unwrap_or(0));
    let mut r = LongReport {
        mode: "long_run",
        commands: log.commands.len() as u64 - log.commands_failed,
        commands_failed: log.commands_failed,
        releases: log.releases.len() as u64,
        releases_completed: log.releases_completed,
        failures: log.failures.clone(),
        peak_backing_entries: peak.max(final_usage.backing_entries),
        final_backing_entries: final_usage.backing_entries,
        backing_limit: final_usage.backing_limit,
        backing_samples: samples,
        start: window(&log, 0, total / 10),
        end: window(&log, total - total / 10, total),
        elapsed_s: elapsed,
        commands_per_s: log.commands.len() as f64 / elapsed.max(1e-9),
        keep_executions: cfg.keep_executions,
        keep_receipts_days: cfg.keep_receipts_days,
        workers: cfg.workers,
        violations: 0,
        error: result.err().map(|e| format!("{e:#}")),
        private_dir: None,
    };
    if code != Some(0) {
        *r.failures.entry("guardian_exit_not_0".to_owned()).or_default() += 1;
    }
    r.violations = r.commands_failed
        + (r.releases - r.releases_completed)
        + u64::from(r.peak_backing_entries > r.backing_limit)
        + u64::from(code != Some(0));
    if cfg.keep || r.error.is_some() {
        r.private_dir = Some(private.dirs.keep().display().to_string());
    } else {
        private.dirs.remove();
    }
    Ok(r)
}

/// Percentile `p` (0–100) of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

fn window(log: &Log, from: u64, to: u64) -> Window {
    let pick = |v: &[(u64, f64)]| {
        let mut x: Vec<f64> = v.iter().filter(|(i, _)| (from..to).contains(i)).map(|(_, ms)| *ms).collect();
        x.sort_by(f64::total_cmp);
        x
    };
    let (c, r) = (pick(&log.commands), pick(&log.releases));
    Window {
        commands: c.len() as u64,
        command_p50_ms: pct(&c, 50.0),
        command_p99_ms: pct(&c, 99.0),
        releases: r.len() as u64,
        release_p50_ms: pct(&r, 50.0),
        release_p99_ms: pct(&r, 99.0),
    }
}

fn call(sh: &Shared<'_>, tool: &str, args: Value) -> anyhow::Result<(Value, f64)> {
    let t = Instant::now();
    let r = sh.fe.call_tool(tool, args).map_err(|e| anyhow::anyhow!("{tool}: {e}"))?;
    Ok((r.value, t.elapsed().as_secs_f64() * 1000.0))
}

/// One worker: its own session; commands until `N` have been taken.
fn worker(sh: &Shared<'_>, w: usize) -> anyhow::Result<()> {
    let thread = format!("long-run-{w}");
    let (init, _) = call(sh, "Initialize", json!({"any_workspace_path": sh.ws, "thread_id": thread}))?;
    let session = PathBuf::from(init["temporary_artifact_dir"].as_str().context("no temporary_artifact_dir")?);
    let mut mine = 0u64;
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let i = sh.next.fetch_add(1, Ordering::SeqCst);
        if i >= sh.cfg.commands.unwrap_or(0) {
            return Ok(());
        }
        let (v, ms) = call(sh, "BashCommand", json!({"thread_id": thread, "command": format!("echo c{i}")}))?;
        let ok = v["status"] == "completed" && v["exit_code"] == 0;
        {
            let mut log = sh.log.lock().unwrap_or_else(|e| e.into_inner());
            log.commands.push((i, ms));
            if !ok {
                log.commands_failed += 1;
            }
        }
        if !ok {
            sh.fail(format!("command: {}", v.get("errorCode").and_then(Value::as_str).unwrap_or("not completed")));
        }
        sh.bar.inc(1);
        mine += 1;
        if sh.cfg.release_every > 0 && mine.is_multiple_of(sh.cfg.release_every) {
            release_one(sh, &thread, &session, i)?;
        }
    }
}

/// A fresh helper, its read and its release, which must complete.
fn release_one(sh: &Shared<'_>, thread: &str, session: &Path, i: u64) -> anyhow::Result<()> {
    let helper = session.join(format!("h{i}.txt"));
    std::fs::write(&helper, format!("helper {i}\n")).with_context(|| format!("{}", helper.display()))?;
    let (read, _) = call(sh, "ReadFiles", json!({"thread_id": thread, "file_paths": [helper]}))?;
    let f = &read["files"][0];
    let (Some(rev), Some(generation)) =
        (f["revision"].as_str(), f["temporary_artifact"]["artifact_generation"].as_str())
    else {
        sh.fail("read: no revision or generation".to_owned());
        sh.log.lock().unwrap_or_else(|e| e.into_inner()).releases.push((i, 0.0));
        return Ok(());
    };
    let req = json!({"thread_id": thread, "workspace_root": sh.ws, "operation": "release_temporary",
        "files": [{"file_path": helper, "mode": "release_temporary", "expected_revision": rev,
            "artifact_generation": generation}]});
    let (v, ms) = call(sh, "EditFiles", req)?;
    let mut log = sh.log.lock().unwrap_or_else(|e| e.into_inner());
    log.releases.push((i, ms));
    if v["status"] == "completed" {
        log.releases_completed += 1;
    } else {
        let reason = v.get("errorCode").or_else(|| v["files"][0].get("reason")).cloned().unwrap_or(Value::Null);
        *log.failures.entry(format!("release {}: {reason}", v["status"])).or_default() += 1;
    }
    Ok(())
}
