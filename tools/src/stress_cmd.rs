//! `winx-release stress`.

use clap::Args;

/// Arguments of `winx-release stress`.
#[derive(Args, Debug)]
pub struct StressArgs {
    /// Seconds to run.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Runs the stress workload.
pub fn run(_args: &StressArgs) -> anyhow::Result<u8> {
    anyhow::bail!("stress: not built yet")
}
