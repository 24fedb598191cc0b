//! The one configuration of a stress run: the `winx-release stress`
//! options (`clap::Args`) and the echo in the report (`Serialize`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use serde::Serialize;

/// Longest wait for one tool call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How a stress run goes: the timed workload (default) or, with
/// `--commands`, the long run through small retention values.
#[derive(Args, Clone, Debug, Serialize)]
#[command(after_help = "Starts a real guardian and real MCP frontends (this executable) in a private directory \
    (XDG_DATA_HOME and HOME inside it, XDG_RUNTIME_DIR unset), fills sessions to their quotas and the backing \
    roots to the 50,000-entry scan bound, runs the named setup checks, then for --duration seconds runs \
    concurrent reads, releases, replays, audits, blocking commands and adversarial changes, checking every \
    step against a ledger of every byte it created. Exit status 1 on any violation.")]
pub struct Config {
    /// Seconds of the timed phase. Setup (filling, the named checks) and the final verification come on
    /// top: with the defaults a whole run takes about 20 s.
    #[arg(long = "duration", default_value_t = 10.0, value_name = "SECONDS", value_parser = seconds)]
    #[serde(rename = "duration_s")]
    pub duration: f64,
    /// Print one JSON object (violations, bytes lost, quota violations, latency, throughput and more)
    /// instead of a summary.
    #[arg(long)]
    #[serde(skip)]
    pub json: bool,
    /// What the timed phase runs: `mixed` (every kind of step, adversarial ones included) or `release`
    /// (each session only reads and releases helpers it wrote just before, in rounds: every round tops
    /// the sessions up to 128 helpers by tool writes, untimed, then times reads and releases until a
    /// session has none left; the setup fills only the backing roots).
    #[arg(long, value_enum, default_value_t = Mix::Mixed, conflicts_with = "commands")]
    pub mix: Mix,
    /// Worker sessions, one thread each.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = count(1, 64))]
    pub sessions: usize,
    /// MCP frontend processes the workers share (two more serve the embedded and fresh-process checks).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = count(1, 16))]
    pub frontends: usize,
    /// Workspaces the sessions are spread over.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = count(1, 16))]
    pub workspaces: usize,
    /// Entries the backing roots are held at during the timed phase (at most 49,900).
    #[arg(long, default_value_t = 49_000, value_name = "N")]
    pub backing_entries: u64,
    /// Seed of every random choice (default: from the clock; printed in the report).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Do not fill sessions to their quotas: faster, and the quota probes are skipped (default:
    /// filled).
    #[arg(long = "no-fill", action = ArgAction::SetFalse)]
    pub fill: bool,
    /// Do not probe the scan bound at exactly 50,000 and 50,001 entries (default: probed).
    #[arg(long = "no-bound-check", action = ArgAction::SetFalse)]
    pub bound_check: bool,
    /// Make the private directory below DIR (default: the system temp dir). It must be on a
    /// filesystem with renameat2(RENAME_NOREPLACE).
    #[arg(long, value_name = "DIR")]
    #[serde(skip)]
    pub dir: Option<PathBuf>,
    /// Keep the private directory (its path is in the report) for inspection.
    #[arg(long)]
    #[serde(skip)]
    pub keep: bool,
    /// Never show progress bars (default: on stderr when it is a terminal).
    #[arg(long = "no-progress", action = ArgAction::SetFalse)]
    #[serde(skip)]
    pub progress: bool,
    /// Long-run mode instead of the timed workload: push N commands (and a release after every
    /// --release-every of a worker's) through a guardian with small retention values, and report
    /// the peak backing-entry count and the latency at the start and at the end.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commands: Option<u64>,
    /// Long-run mode: a release after every this many commands of a worker (0: none).
    #[arg(long, default_value_t = 10, value_name = "N", requires = "commands")]
    #[serde(skip)]
    pub release_every: u64,
    /// Long-run mode: worker sessions.
    #[arg(long, default_value_t = 2, value_name = "N", requires = "commands", value_parser = count(1, 64))]
    #[serde(skip)]
    pub workers: usize,
    /// Long-run mode: the guardian's --keep-executions.
    #[arg(long, default_value_t = 50, value_name = "N", requires = "commands")]
    #[serde(skip)]
    pub keep_executions: usize,
    /// Soak: run the timed workload N times, seeds --seed, --seed + 1, ... (from the clock when no
    /// --seed), printing one line per seed (one JSON object per line with --json) and exiting 1 when
    /// any run broke an invariant. Not for CI: N × (--duration + setup) seconds.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "commands")]
    #[serde(skip)]
    pub soak: Option<u64>,
    /// Guardian kills under load: during the mixed timed phase, SIGKILL the guardian at seeded random
    /// moments (every other one right after a worker sent a release) and start a new one on the same
    /// data directory and socket. Shells with a command running across each kill must be re-attached
    /// with it still running; interrupted releases must be recovered (at their path or a named
    /// quarantine) or removed after verification, and their retry is judged afresh. The report counts
    /// the kills and re-attachments (`chaos`).
    #[arg(long, conflicts_with = "commands")]
    pub chaos: bool,
    /// With --chaos: the mean number of seconds between two kills (each interval drawn uniformly from
    /// 0.5 to 1.5 times it, from --seed).
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS", value_parser = seconds, requires = "chaos")]
    pub chaos_every: f64,
    /// Long-run mode: the guardian's --keep-receipts-days (0: receipts go once a second old).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "commands")]
    #[serde(skip)]
    pub keep_receipts_days: u64,
}

/// What the timed phase of a stress run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mix {
    /// Every kind of step: writes, reads, releases, replays, commands,
    /// adversarial changes (the default).
    Mixed,
    /// Reads and releases only, of helpers written in an untimed top-up
    /// before each round.
    Release,
}

impl Config {
    /// The configuration as the command line's defaults give it.
    pub fn defaults() -> Config {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            config: Config,
        }
        <Cli as clap::Parser>::parse_from(["stress"]).config
    }

    /// This configuration ready to run: the seed drawn from the clock when
    /// none was given, progress bars only on a terminal.
    pub fn resolved(&self) -> Config {
        let mut c = self.clone();
        c.seed = Some(self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        }));
        c.progress = self.progress && std::io::stderr().is_terminal();
        c
    }

    /// The length of the timed phase.
    pub fn timed_phase(&self) -> Duration {
        Duration::from_secs_f64(self.duration)
    }

    /// The seed of every random choice (1 before [`Config::resolved`]).
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(1)
    }
}

impl Default for Config {
    fn default() -> Config {
        Config::defaults()
    }
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("a number of seconds, 0 or more".to_owned()),
    }
}

fn count(min: usize, max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |s: &str| match s.parse::<usize>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("a whole number from {min} to {max}")),
    }
}
