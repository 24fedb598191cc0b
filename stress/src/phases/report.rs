//! The report of a run: the contract's JSON object (section 9) and a
//! readable summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::config::Config;
use crate::oracle::ledger::Violation;
use crate::workload::kills::ChaosReport;
use crate::workload::world::{Check, Stats, World};

/// Release throughput of the timed phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Throughput {
    /// Release requests per second (denials included, replays not).
    pub releases_per_sec: f64,
    /// Files released per second.
    pub released_files_per_sec: f64,
    /// Workload steps per second.
    pub steps_per_sec: f64,
}

/// Backing-root entries seen by the keeper during the timed phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackingReport {
    /// The target (`--backing-entries`).
    pub target: u64,
    /// Fewest entries seen.
    pub min: u64,
    /// Most entries seen.
    pub max: u64,
    /// Mean of the samples.
    pub mean: u64,
    /// Fill files the tool removed to hold the target as the run added
    /// retained executions and receipts.
    pub fill_files_removed: u64,
}

/// Release answers by status.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Statuses {
    /// `completed`.
    pub completed: u64,
    /// `partial`.
    pub partial: u64,
    /// `denied` or `invalid_input`.
    pub denied: u64,
    /// `failed`.
    pub failed: u64,
}

/// The report (contract section 9, plus detail).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Fresh release requests (not replays), setup included.
    pub releases: u64,
    /// Files reported `released`.
    pub released_files: u64,
    /// Release requests denied (`denied` or `invalid_input`).
    pub denials: u64,
    /// Replays answered `replayed: true`, touching nothing.
    pub replays: u64,
    /// Invariant violations; 0 when every invariant held.
    pub violations: u64,
    /// Bytes of the ledger missing without a `released` outcome.
    pub bytes_lost: u64,
    /// Tool writes accepted beyond a quota.
    pub quota_violations: Vec<Value>,
    /// Median latency of a release call at the client, timed phase.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Release calls timed.
    pub timed_releases: u64,
    /// Throughput of the timed phase.
    pub throughput: Throughput,
    /// Where the CPU of the timed phase went ([`CpuReport`](crate::phases::cpu::CpuReport)).
    pub cpu: crate::phases::cpu::CpuReport,
    /// The guardian's peak resident set at the end of the run, in KiB
    /// (`VmHWM`; of the guardian restarted during the setup, in the mixed
    /// workload).
    pub guardian_peak_rss_kib: Option<u64>,
    /// Release answers by status.
    pub statuses: Statuses,
    /// Denials by `errorCode`.
    pub denial_reasons: BTreeMap<String, u64>,
    /// Files reported `restored`.
    pub restored_files: u64,
    /// Files reported `preserved`.
    pub preserved_files: u64,
    /// Bytes reported reclaimed.
    pub bytes_reclaimed: u64,
    /// `ReadFiles` calls.
    pub reads: u64,
    /// Accepted tool writes.
    pub writes: u64,
    /// Tool writes refused with `quota_exceeded` (as expected).
    pub quota_refusals: u64,
    /// `BashCommand` calls.
    pub commands: u64,
    /// `winx-release audit` runs (each checked to delete nothing).
    pub audits: u64,
    /// Adversarial changes made.
    pub adversarial_changes: u64,
    /// Workload steps of the timed phase.
    pub steps: u64,
    /// The backing roots.
    pub backing_entries: BackingReport,
    /// Setup checks that answered as the contract says.
    pub checks_passed: usize,
    /// Setup checks run.
    pub checks_total: usize,
    /// Every setup check.
    pub checks: Vec<Check>,
    /// Answers that differ from the contract without breaking an invariant.
    pub contract_mismatches: u64,
    /// The first of them.
    pub contract_mismatch_details: Vec<Value>,
    /// The first violations.
    pub violation_details: Vec<Violation>,
    /// Other observations, counted.
    pub notes: BTreeMap<String, u64>,
    /// Seconds of setup (filling, checks).
    pub setup_s: f64,
    /// Seconds of the timed phase.
    pub run_s: f64,
    /// Seconds in all.
    pub total_s: f64,
    /// Seconds of each phase, in order.
    pub phases: Vec<(String, f64)>,
    /// The parameters.
    pub config: Config,
    /// The private directory, when kept.
    pub private_dir: Option<String>,
    /// A fatal error that stopped the run.
    pub error: Option<String>,
    /// Guardian kills under load (`--chaos`): kills, re-attached shells,
    /// interrupted releases and what became of their targets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chaos: Option<ChaosReport>,
    /// Whether SIGINT or SIGTERM cut the run short (the report covers what
    /// ran, and the final verification still ran).
    pub interrupted: bool,
}

fn ms(us: u64) -> f64 {
    (us as f64 / 10.0).round() / 100.0
}

/// The nearest-rank percentile `q` (0..=1) of sorted `v`.
pub fn percentile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn per_sec(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        (n as f64 / s * 10.0).round() / 10.0
    } else {
        0.0
    }
}

impl Report {
    /// The report of `w` after a run.
    pub fn build(w: &World, cfg: &Config, setup_s: f64, run_s: f64, fill_removed: u64) -> Report {
        let s = &w.stats;
        let f = w.findings.report();
        let lat = s.latencies();
        let samples = s.backing_samples();
        let checks = w.checks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Report {
            releases: Stats::get(&s.releases),
            released_files: Stats::get(&s.released_files),
            denials: Stats::get(&s.denials),
            replays: Stats::get(&s.replays),
            violations: f.violations,
            bytes_lost: f.bytes_lost,
            quota_violations: f.quota_violations,
            p50_ms: ms(percentile(&lat, 0.50)),
            p99_ms: ms(percentile(&lat, 0.99)),
            max_ms: ms(lat.last().copied().unwrap_or(0)),
            timed_releases: lat.len() as u64,
            throughput: Throughput {
                releases_per_sec: per_sec(Stats::get(&s.run_releases), run_s),
                released_files_per_sec: per_sec(Stats::get(&s.run_released_files), run_s),
                steps_per_sec: per_sec(Stats::get(&s.steps), run_s),
            },
            cpu: Default::default(),
            guardian_peak_rss_kib: None,
            statuses: Statuses {
                completed: Stats::get(&s.completed),
                partial: Stats::get(&s.partial),
                denied: Stats::get(&s.denials),
                failed: Stats::get(&s.failed),
            },
            denial_reasons: s.denial_reasons(),
            restored_files: Stats::get(&s.restored_files),
            preserved_files: Stats::get(&s.preserved_files),
            bytes_reclaimed: Stats::get(&s.bytes_reclaimed),
            reads: Stats::get(&s.reads),
            writes: Stats::get(&s.writes),
            quota_refusals: Stats::get(&s.quota_refusals),
            commands: Stats::get(&s.commands),
            audits: Stats::get(&s.audits),
            adversarial_changes: Stats::get(&s.adversarial),
            steps: Stats::get(&s.steps),
            backing_entries: BackingReport {
                target: cfg.backing_entries,
                min: samples.iter().copied().min().unwrap_or(0),
                max: samples.iter().copied().max().unwrap_or(0),
                mean: if samples.is_empty() { 0 } else { samples.iter().sum::<u64>() / samples.len() as u64 },
                fill_files_removed: fill_removed,
            },
            checks_passed: checks.iter().filter(|c| c.ok).count(),
            checks_total: checks.len(),
            checks,
            contract_mismatches: f.contract_mismatches,
            contract_mismatch_details: f.contract_mismatch_details,
            violation_details: f.violation_details,
            notes: f.notes,
            setup_s: (setup_s * 10.0).round() / 10.0,
            run_s: (run_s * 10.0).round() / 10.0,
            total_s: (w.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            phases: w.phases(),
            config: cfg.clone(),
            private_dir: None,
            error: None,
            chaos: w.chaos.as_ref().map(|c| c.report()),
            interrupted: false,
        }
    }

    /// Whether the run passed: no violation and no fatal error.
    pub fn passed(&self) -> bool {
        self.violations == 0 && self.bytes_lost == 0 && self.quota_violations.is_empty() && self.error.is_none()
    }

    /// The readable summary.
    pub fn table(&self) -> String {
        let mut o = String::new();
        let c = &self.config;
        let _ = writeln!(
            o,
            "winx-release stress ({:?} mix): {:.1} s timed ({:.1} s setup), {} sessions, {} frontends, {} workspaces, \
             seed {}",
            c.mix,
            self.run_s,
            self.setup_s,
            c.sessions,
            c.frontends,
            c.workspaces,
            c.seed()
        );
        let row = |o: &mut String, k: &str, v: String| {
            let _ = writeln!(o, "  {k:<20} {v}");
        };
        let st = &self.statuses;
        row(
            &mut o,
            "releases",
            format!(
                "{}  (completed {}, partial {}, denied {}, failed {})",
                self.releases, st.completed, st.partial, st.denied, st.failed
            ),
        );
        row(
            &mut o,
            "released files",
            format!(
                "{}  ({:.1} MiB reclaimed; restored {}, preserved {})",
                self.released_files,
                self.bytes_reclaimed as f64 / 1048576.0,
                self.restored_files,
                self.preserved_files
            ),
        );
        let reasons: Vec<String> = self.denial_reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
        row(&mut o, "denials", format!("{}  ({})", self.denials, reasons.join(", ")));
        row(&mut o, "replays", format!("{}  (each touched nothing)", self.replays));
        row(
            &mut o,
            "latency",
            format!(
                "p50 {:.2} ms   p99 {:.2} ms   max {:.2} ms   ({} timed)",
                self.p50_ms, self.p99_ms, self.max_ms, self.timed_releases
            ),
        );
        let t = &self.throughput;
        row(
            &mut o,
            "throughput",
            format!(
                "{:.1} releases/s   {:.1} files/s   {:.1} steps/s",
                t.releases_per_sec, t.released_files_per_sec, t.steps_per_sec
            ),
        );
        let c = &self.cpu;
        row(
            &mut o,
            "cpu (timed)",
            format!(
                "guardian {:.1} s, frontends {:.1} s, this tool {:.1} s, other {:.1} s; {:.0} % of {} cores busy; \
                 per release: guardian {:.2} ms, frontends {:.2} ms, this tool {:.2} ms, machine {:.2} ms",
                c.guardian_s,
                c.frontends_s,
                c.driver_s,
                c.other_s,
                c.busy_share * 100.0,
                c.cores,
                c.guardian_ms_per_release,
                c.frontends_ms_per_release,
                c.driver_ms_per_release,
                c.machine_ms_per_release
            ),
        );
        row(
            &mut o,
            "other calls",
            format!(
                "reads {}, writes {} (quota refusals {}), commands {}, audits {}, adversarial changes {}",
                self.reads, self.writes, self.quota_refusals, self.commands, self.audits, self.adversarial_changes
            ),
        );
        if let Some(k) = self.guardian_peak_rss_kib {
            row(&mut o, "guardian peak rss", format!("{:.1} MiB (VmHWM)", k as f64 / 1024.0));
        }
        let b = &self.backing_entries;
        row(
            &mut o,
            "backing entries",
            format!(
                "target {}, seen {}..{} (mean {}), fill files removed {}",
                b.target, b.min, b.max, b.mean, b.fill_files_removed
            ),
        );
        row(&mut o, "setup checks", format!("{}/{} as the contract says", self.checks_passed, self.checks_total));
        for ch in self.checks.iter().filter(|c| !c.ok) {
            let _ = writeln!(o, "    not as expected: {} ({})", ch.name, ch.detail);
        }
        row(&mut o, "contract mismatches", self.contract_mismatches.to_string());
        for m in self.contract_mismatch_details.iter().take(5) {
            let _ = writeln!(o, "    {m}");
        }
        row(
            &mut o,
            "invariants",
            format!(
                "violations {}   bytes lost {}   quota violations {}",
                self.violations,
                self.bytes_lost,
                self.quota_violations.len()
            ),
        );
        for v in self.violation_details.iter().take(10) {
            let _ = writeln!(o, "    {} {}: {}", v.kind, v.path, v.detail);
        }
        if let Some(k) = &self.chaos {
            row(
                &mut o,
                "chaos",
                format!(
                    "{} guardian kills ({} mid-release), {} shells re-attached; {} releases interrupted ({} refused \
                     while down): targets recovered {}, preserved {}, removed {}; {} sent again; {} other steps \
                     cut short",
                    k.kills,
                    k.kills_mid_release,
                    k.reattached,
                    k.interrupted_releases,
                    k.refused_while_down,
                    k.recovered,
                    k.preserved,
                    k.removed,
                    k.replayed,
                    k.interrupted_steps
                ),
            );
        }
        if !self.notes.is_empty() {
            let notes: Vec<String> = self.notes.iter().map(|(k, v)| format!("{k} {v}")).collect();
            row(&mut o, "notes", notes.join(", "));
        }
        if let Some(d) = &self.private_dir {
            row(&mut o, "private dir", d.clone());
        }
        if self.interrupted {
            row(&mut o, "interrupted", "the run was cut short by a signal".to_owned());
        }
        if let Some(e) = &self.error {
            row(&mut o, "error", e.clone());
        }
        let _ = writeln!(o, "{}", if self.passed() { "PASS: every invariant held" } else { "FAIL" });
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
