//! `winx-release guardian`.

use std::path::PathBuf;

use clap::Args;
use winx_release_engine::executions::LivenessChoice;
use winx_release_guardian::{serve_with, ServeOptions};

use crate::EXIT_OK;

/// Arguments of `winx-release guardian`.
#[derive(Args, Debug)]
pub struct GuardianArgs {
    /// Socket path (default: `$WINX_GUARDIAN_SOCKET`, `$XDG_RUNTIME_DIR/winx/guardian.sock`,
    /// `/run/user/<uid>/winx/guardian.sock`, `/tmp/winx-<uid>/guardian.sock`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Resolved executions whose payloads are kept in `D/executions`; older
    /// ones are removed (running or unresolved ones never are).
    #[arg(long, value_name = "N", default_value_t = winx_release_engine::retention::DEFAULT_KEEP_EXECUTIONS)]
    pub keep_executions: usize,
    /// Days mutation receipts in `D/receipts` are kept.
    #[arg(long, value_name = "N", default_value_t = winx_release_engine::retention::DEFAULT_KEEP_RECEIPTS_DAYS,
        value_parser = clap::value_parser!(u64).range(0..=36_500))]
    pub keep_receipts_days: u64,
    /// How the guardian tells that a command still runs: `auto` (a cgroup per execution where a delegated
    /// cgroup v2 subtree can be had, else the /proc signals) or `proc` (the /proc signals only).
    #[arg(long, value_enum, default_value_t = Liveness::Auto, env = "WINX_LIVENESS")]
    pub liveness: Liveness,
}

/// `--liveness`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// cgroup where it can be had, else /proc.
    Auto,
    /// /proc only.
    Proc,
}

/// Runs the guardian in the foreground until SIGTERM or SIGINT.
pub fn run(args: &GuardianArgs) -> anyhow::Result<u8> {
    let socket = args.socket.clone().unwrap_or_else(winx_release_engine::layout::default_socket_path);
    let data_dir = winx_release_engine::layout::default_data_dir();
    let retention = winx_release_engine::retention::RetentionPolicy {
        keep_executions: args.keep_executions,
        keep_receipts: std::time::Duration::from_secs(args.keep_receipts_days * 86_400),
    };
    let liveness = match args.liveness {
        Liveness::Auto => LivenessChoice::Auto,
        Liveness::Proc => LivenessChoice::Proc,
    };
    serve_with(&socket, &data_dir, &ServeOptions { retention, liveness })?;
    Ok(EXIT_OK)
}
