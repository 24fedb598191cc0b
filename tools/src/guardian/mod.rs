//! `winx-release guardian`: the durable runtime owner of sessions and their
//! executions, serving the JSON-lines protocol of `docs/PROTOCOL.md` on a
//! Unix socket.

mod exec;
mod server;
mod sessions;

use std::path::PathBuf;

use clap::Args;

pub use server::serve;
pub use sessions::Guardian;

/// Capabilities this guardian advertises in `hello`.
pub const CAPABILITIES: &[&str] = &["temporary_release", "executions"];
/// Protocol version.
pub const PROTOCOL: u64 = winx_release_frontend_adapter::protocol::PROTOCOL_VERSION;

/// Arguments of `winx-release guardian`.
#[derive(Args, Debug)]
pub struct GuardianArgs {
    /// Socket path (default: `$WINX_GUARDIAN_SOCKET`, `$XDG_RUNTIME_DIR/winx/guardian.sock`,
    /// `/tmp/winx-<uid>/guardian.sock`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
}

/// Runs the guardian in the foreground until SIGTERM or SIGINT.
pub fn run(args: &GuardianArgs) -> anyhow::Result<u8> {
    let socket = args.socket.clone().unwrap_or_else(winx_release_engine::layout::default_socket_path);
    let data_dir = winx_release_engine::layout::default_data_dir();
    serve(&socket, &data_dir)?;
    Ok(crate::EXIT_OK)
}
