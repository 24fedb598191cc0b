//! `winx-release stress`: a short run with small knobs must hold every
//! invariant and exercise releases, replays and denials.

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A finished `winx-release stress --json` run: its report (the one JSON
/// object it printed on stdout), its exit status, its stderr, and the
/// private directory it was given.
struct Run {
    report: Value,
    status: ExitStatus,
    stderr: String,
    dir: tempfile::TempDir,
}

/// The small mixed run of the invariant and chaos tests: 2 sessions on 2
/// frontends in 1 workspace, 2,000 backing entries unfilled, no bound
/// check, seed 42.
const SMALL: &[&str] = &[
    "--sessions",
    "2",
    "--frontends",
    "2",
    "--workspaces",
    "1",
    "--backing-entries",
    "2000",
    "--no-fill",
    "--no-bound-check",
    "--seed",
    "42",
];

/// Runs `winx-release stress --json ARGS --no-progress` on a fresh private
/// directory, with no `RUST_LOG`.
fn run_stress(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_winx-release"))
        .args(["stress", "--json"])
        .args(args)
        .arg("--no-progress")
        .arg("--dir")
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON object expected ({e}), got {stdout:?}; stderr {stderr}"));
    Run { report, status: out.status, stderr, dir }
}

impl Run {
    /// Nothing left behind in the directory it was given.
    fn assert_dir_removed(&self) {
        assert_eq!(std::fs::read_dir(self.dir.path()).unwrap().count(), 0, "the private directory was not removed");
    }
}

#[test]
fn short_stress_run_holds_every_invariant() {
    let start = Instant::now();
    let run = run_stress(&[&["--duration", "3"], SMALL].concat());
    let (v, stderr) = (&run.report, &run.stderr);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} is not a count in {v}"));
    assert_eq!(v["error"], Value::Null, "{v:#}");
    assert_eq!(n("violations"), 0, "{:#}", v["violation_details"]);
    assert_eq!(n("bytes_lost"), 0, "{v:#}");
    assert_eq!(v["quota_violations"], serde_json::json!([]), "{v:#}");
    assert!(n("releases") > 0, "{v:#}");
    assert!(n("released_files") > 0, "{v:#}");
    assert!(n("replays") > 0, "{v:#}");
    assert!(n("denials") > 0, "{v:#}");
    assert!(v["p50_ms"].as_f64().is_some() && v["p99_ms"].as_f64().is_some(), "{v:#}");
    assert_eq!(v["checks_passed"], v["checks_total"], "{:#}", v["checks"]);
    // Processes left behind across a SIGKILLed and restarted guardian.
    let restart = v["checks"].as_array().and_then(|c| {
        c.iter().find(|c| c["name"] == "after a guardian restart, the earlier command's processes: execution_active")
    });
    assert_eq!(restart.map(|c| c["ok"].clone()), Some(Value::Bool(true)), "{:#}", v["checks"]);
    assert_eq!(run.status.code(), Some(0), "stderr {stderr}");
    // Nothing left behind in the directory it was given.
    run.assert_dir_removed();
    assert!(start.elapsed() < Duration::from_secs(120));
}

#[test]
fn release_only_mix_releases_its_own_helpers_and_splits_the_cpu() {
    let run = run_stress(&[
        "--mix",
        "release",
        "--duration",
        "2",
        "--sessions",
        "2",
        "--frontends",
        "1",
        "--workspaces",
        "1",
        "--backing-entries",
        "2000",
        "--seed",
        "7",
    ]);
    let (v, stderr) = (&run.report, &run.stderr);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} is not a count in {v}"));
    assert_eq!(v["error"], Value::Null, "{v:#}");
    assert_eq!(v["config"]["mix"], "release", "{v:#}");
    assert_eq!(n("violations"), 0, "{:#}", v["violation_details"]);
    assert_eq!(n("bytes_lost"), 0, "{v:#}");
    // Only reads and releases are timed: every release request of the run
    // is a timed one, each completed, and nothing else was asked.
    let releases = n("releases");
    assert!(releases > 0, "{v:#}");
    assert_eq!(n("timed_releases"), releases, "{v:#}");
    assert_eq!(v["statuses"]["completed"].as_u64(), Some(releases), "{v:#}");
    assert_eq!(n("denials") + n("replays") + n("commands") + n("adversarial_changes"), 0, "{v:#}");
    assert!(n("released_files") >= releases, "{v:#}");
    assert!(v["notes"]["release_mix_rounds"].as_u64().is_some_and(|r| r >= 1), "{v:#}");
    assert!(v["run_s"].as_f64().is_some_and(|s| (1.5..4.0).contains(&s)), "{v:#}");
    // The CPU split per release, by process, and the guardian's peak RSS.
    let cpu = &v["cpu"];
    for k in ["guardian_ms_per_release", "frontends_ms_per_release", "driver_ms_per_release"] {
        assert!(cpu[k].as_f64().is_some(), "{k} missing: {cpu:#}");
    }
    assert!(cpu["guardian_s"].as_f64().is_some_and(|s| s > 0.0), "{cpu:#}");
    assert!(v["guardian_peak_rss_kib"].as_u64().is_some_and(|k| k > 1024), "{v:#}");
    assert_eq!(run.status.code(), Some(0), "stderr {stderr}");
    run.assert_dir_removed();
}

/// `--chaos`: the guardian SIGKILLed and restarted a few times during the
/// mixed workload (mid-release included): no byte lost, no violation, and
/// the probe shells' commands survive every kill.
#[test]
fn chaos_run_kills_the_guardian_and_loses_nothing() {
    let start = Instant::now();
    let run = run_stress(&[&["--chaos", "--chaos-every", "1", "--duration", "6"], SMALL].concat());
    let (v, stderr) = (&run.report, &run.stderr);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} is not a count in {v}"));
    assert_eq!(v["error"], Value::Null, "{v:#}");
    assert_eq!(n("bytes_lost"), 0, "{v:#}");
    // Every violation fails (the takeover bug the first chaos runs found,
    // `shell_stuck_after_kill`, is fixed: tests/e2e/monitor.rs).
    assert_eq!(n("violations"), 0, "{:#}", v["violation_details"]);
    let chaos = &v["chaos"];
    let c = |k: &str| chaos[k].as_u64().unwrap_or_else(|| panic!("chaos.{k} is not a count in {chaos}"));
    assert!(c("kills") >= 2, "{chaos:#}");
    assert!(c("reattached") >= 1, "{chaos:#}");
    // Every probe shell with a command running at a kill came back.
    assert_eq!(c("reattached"), 2 * c("kills"), "{chaos:#}");
    assert!(n("releases") > 0, "{v:#}");
    assert_eq!(run.status.code(), Some(0), "stderr {stderr}");
    run.assert_dir_removed();
    assert!(start.elapsed() < Duration::from_secs(120));
}
