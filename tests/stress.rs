//! `winx-release stress`: a short run with small knobs must hold every
//! invariant and exercise releases, replays and denials.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

#[test]
fn short_stress_run_holds_every_invariant() {
    let tmp = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_winx-release"))
        .args([
            "stress",
            "--json",
            "--duration",
            "3",
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
            "--no-progress",
        ])
        .arg("--dir")
        .arg(tmp.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line expected on stdout, got {stdout:?}; stderr {stderr}");
    let v: Value = serde_json::from_str(lines[0]).unwrap();
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
    assert_eq!(out.status.code(), Some(0), "stderr {stderr}");
    // Nothing left behind in the directory it was given.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "the private directory was not removed");
    assert!(start.elapsed() < Duration::from_secs(120));
}

#[test]
fn release_only_mix_releases_its_own_helpers_and_splits_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_winx-release"))
        .args([
            "stress",
            "--json",
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
            "--no-progress",
        ])
        .arg("--dir")
        .arg(tmp.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON object expected ({e}), got {stdout:?}; stderr {stderr}"));
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
    assert_eq!(out.status.code(), Some(0), "stderr {stderr}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "the private directory was not removed");
}

/// `--chaos`: the guardian SIGKILLed and restarted a few times during the
/// mixed workload (mid-release included): no byte lost, no violation, and
/// the probe shells' commands survive every kill.
#[test]
fn chaos_run_kills_the_guardian_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_winx-release"))
        .args([
            "stress",
            "--json",
            "--chaos",
            "--chaos-every",
            "1",
            "--duration",
            "6",
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
            "--no-progress",
        ])
        .arg("--dir")
        .arg(tmp.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON object expected ({e}), got {stdout:?}; stderr {stderr}"));
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
    assert_eq!(out.status.code(), Some(0), "stderr {stderr}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "the private directory was not removed");
    assert!(start.elapsed() < Duration::from_secs(120));
}
