//! The soak: the timed workload for N seeds in a row, one line per seed.
//!
//! Each run is a whole stress run (its own private directory, guardian and
//! frontends) with the same parameters and the next seed, so a violation
//! names the seed that reproduces it (`winx-release stress --seed S`). Not
//! for CI: it takes N × (duration + setup).

use std::io::Write;

use serde::Serialize;

use crate::config::Config;
use crate::phases::run::run;

/// One seed's result, as the soak prints it.
#[derive(Clone, Debug, Serialize)]
pub struct SoakLine {
    /// The seed of the run.
    pub seed: u64,
    /// Invariant violations (0 when every invariant held).
    pub violations: u64,
    /// Bytes of the ledger missing without a `released` outcome.
    pub bytes_lost: u64,
    /// Tool writes accepted beyond a quota.
    pub quota_violations: usize,
    /// Answers that differ from the contract without breaking an invariant.
    pub contract_mismatches: u64,
    /// Release requests per second of the timed phase.
    pub releases_per_sec: f64,
    /// 99th percentile of a release call's latency, timed phase.
    pub p99_ms: f64,
    /// Release calls timed.
    pub timed_releases: u64,
    /// Seconds of the timed phase.
    pub run_s: f64,
    /// A fatal error that stopped the run.
    pub error: Option<String>,
    /// Whether the run held every invariant.
    pub passed: bool,
}

impl SoakLine {
    fn text(&self) -> String {
        let mut line = format!(
            "seed {}: violations {}, bytes_lost {}, quota_violations {}, contract_mismatches {}, releases/s {:.1}, \
             p99 {:.1} ms ({} timed), {:.1} s",
            self.seed,
            self.violations,
            self.bytes_lost,
            self.quota_violations,
            self.contract_mismatches,
            self.releases_per_sec,
            self.p99_ms,
            self.timed_releases,
            self.run_s
        );
        if let Some(e) = &self.error {
            line.push_str(&format!(", error: {e}"));
        }
        line
    }
}

/// Runs the timed workload of `cfg` for `n` seeds (`cfg`'s seed, then the
/// next ones), writing one line per seed to `out` as each run ends, and a
/// last summary line. Returns whether every run held every invariant.
pub fn soak(cfg: &Config, n: u64, out: &mut dyn Write) -> anyhow::Result<bool> {
    let first = cfg.seed();
    let mut all = true;
    for i in 0..n {
        let mut one = cfg.clone();
        one.seed = Some(first.wrapping_add(i));
        one.soak = None;
        one.progress = false;
        let line = match run(&one) {
            Ok(r) => SoakLine {
                seed: one.seed(),
                violations: r.violations,
                bytes_lost: r.bytes_lost,
                quota_violations: r.quota_violations.len(),
                contract_mismatches: r.contract_mismatches,
                releases_per_sec: r.throughput.releases_per_sec,
                p99_ms: r.p99_ms,
                timed_releases: r.timed_releases,
                run_s: r.run_s,
                passed: r.passed(),
                error: r.error.clone(),
            },
            Err(e) => SoakLine {
                seed: one.seed(),
                violations: 0,
                bytes_lost: 0,
                quota_violations: 0,
                contract_mismatches: 0,
                releases_per_sec: 0.0,
                p99_ms: 0.0,
                timed_releases: 0,
                run_s: 0.0,
                passed: false,
                error: Some(format!("{e:#}")),
            },
        };
        all &= line.passed;
        if cfg.json {
            writeln!(out, "{}", serde_json::to_string(&line)?)?;
        } else {
            writeln!(out, "{}", line.text())?;
        }
        out.flush()?;
    }
    if !cfg.json {
        writeln!(out, "soak: {n} seeds from {first}: {}", if all { "every invariant held" } else { "FAILED" })?;
    }
    Ok(all)
}
