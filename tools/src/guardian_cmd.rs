//! `winx-release guardian`.

use std::path::PathBuf;

use clap::Args;
use winx_release_guardian::{serve_with, ServeOptions};

use crate::EXIT_OK;

/// Arguments of `winx-release guardian`.
#[derive(Args, Debug)]
pub struct GuardianArgs {
    /// Socket path (default: `$WINX_GUARDIAN_SOCKET`, `$XDG_RUNTIME_DIR/winx/guardian.sock`,
    /// `/tmp/winx-<uid>/guardian.sock`).
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
}

/// Runs the guardian in the foreground until SIGTERM or SIGINT.
pub fn run(args: &GuardianArgs) -> anyhow::Result<u8> {
    let socket = args.socket.clone().unwrap_or_else(winx_release_engine::layout::default_socket_path);
    let data_dir = winx_release_engine::layout::default_data_dir();
    let retention = winx_release_engine::retention::RetentionPolicy {
        keep_executions: args.keep_executions,
        keep_receipts: std::time::Duration::from_secs(args.keep_receipts_days * 86_400),
    };
    serve_with(&socket, &data_dir, &ServeOptions { retention })?;
    Ok(EXIT_OK)
}
