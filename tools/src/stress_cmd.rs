//! `winx-release stress`: a real guardian and frontends under a seeded, checked workload.
//!
//! With no arguments: a self-contained run in a private temporary
//! directory, a readable summary on stdout. `--json` prints the contract's
//! JSON object instead. Exit status 1 when any invariant was violated (or
//! the run could not be carried out), 0 otherwise. See [`stress`] for what a
//! run does.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::{print_json, EXIT_FAILURE, EXIT_OK};

#[path = "stress/mod.rs"]
mod stress;

/// Arguments of `winx-release stress`.
#[derive(Args, Debug)]
#[command(after_help = "Starts a real guardian and real MCP frontends (this executable) in a private directory \
    (XDG_DATA_HOME and HOME inside it, XDG_RUNTIME_DIR unset), fills sessions to their quotas and the backing \
    roots to the 50,000-entry scan bound, runs the named setup checks, then for --duration seconds runs \
    concurrent reads, releases, replays, audits, blocking commands and adversarial changes, checking every \
    step against a ledger of every byte it created. Exit status 1 on any violation.")]
pub struct StressArgs {
    /// Seconds of the timed phase. Setup (filling, the named checks) and the final verification come on
    /// top: with the defaults a whole run takes about 20 s.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    duration: f64,
    /// Print one JSON object (violations, bytes lost, quota violations, latency, throughput and more)
    /// instead of a summary.
    #[arg(long)]
    json: bool,
    /// Worker sessions, one thread each.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    sessions: u64,
    /// MCP frontend processes the workers share (two more serve the embedded and fresh-process checks).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=16))]
    frontends: u64,
    /// Workspaces the sessions are spread over.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=16))]
    workspaces: u64,
    /// Entries the backing roots are held at during the timed phase (at most 49,900).
    #[arg(long, default_value_t = 49_000, value_name = "N")]
    backing_entries: u64,
    /// Seed of every random choice (default: from the clock; printed in the report).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Do not fill sessions to their quotas (faster; the quota probes are skipped).
    #[arg(long)]
    no_fill: bool,
    /// Do not probe the scan bound at exactly 50,000 and 50,001 entries.
    #[arg(long)]
    no_bound_check: bool,
    /// Make the private directory below DIR (default: the system temp dir). It must be on a
    /// filesystem with renameat2(RENAME_NOREPLACE).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the private directory (its path is in the report) for inspection.
    #[arg(long)]
    keep: bool,
    /// Never show progress bars (they go to stderr, and only on a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Long-run mode instead of the timed workload: push N commands (and a release after every
    /// --release-every of a worker's) through a guardian with small retention values, and report
    /// the peak backing-entry count and the latency at the start and at the end.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    commands: Option<u64>,
    /// Long-run mode: a release after every this many commands of a worker (0: none).
    #[arg(long, default_value_t = 10, value_name = "N", requires = "commands")]
    release_every: u64,
    /// Long-run mode: worker sessions.
    #[arg(long, default_value_t = 2, value_name = "N", requires = "commands",
        value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Long-run mode: the guardian's --keep-executions.
    #[arg(long, default_value_t = 50, value_name = "N", requires = "commands")]
    keep_executions: usize,
    /// Long-run mode: the guardian's --keep-receipts-days (0: receipts go once a second old).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "commands")]
    keep_receipts_days: u64,
}

/// Runs the stress workload and prints its report.
pub fn run(args: &StressArgs) -> anyhow::Result<u8> {
    anyhow::ensure!(args.duration.is_finite() && args.duration >= 0.0, "--duration must be a number of seconds");
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    if let Some(commands) = args.commands {
        return long_run(args, commands);
    }
    let cfg = stress::Config {
        duration: Duration::from_secs_f64(args.duration),
        sessions: args.sessions as usize,
        frontends: args.frontends as usize,
        workspaces: args.workspaces as usize,
        backing_entries: args.backing_entries,
        seed,
        fill: !args.no_fill,
        bound_check: !args.no_bound_check,
        dir: args.dir.clone(),
        keep: args.keep,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        call_timeout: Duration::from_secs(120),
    };
    let report = stress::run(&cfg)?;
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", report.table());
    }
    Ok(if report.passed() { EXIT_OK } else { EXIT_FAILURE })
}

fn long_run(args: &StressArgs, commands: u64) -> anyhow::Result<u8> {
    let cfg = stress::longrun::LongConfig {
        commands,
        release_every: args.release_every,
        workers: args.workers as usize,
        keep_executions: args.keep_executions,
        keep_receipts_days: args.keep_receipts_days,
        dir: args.dir.clone(),
        keep: args.keep,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        call_timeout: Duration::from_secs(120),
    };
    let report = stress::longrun::run(&cfg)?;
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", report.table());
    }
    Ok(if report.passed() { EXIT_OK } else { EXIT_FAILURE })
}
