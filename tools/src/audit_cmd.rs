//! `winx-release audit`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::{print_json, EXIT_OK};

/// Arguments of `winx-release audit`.
#[derive(Args, Debug)]
pub struct AuditArgs {
    /// The workspace root to audit.
    #[arg(long)]
    workspace: PathBuf,
    /// The guardian socket whose liveness mode is reported (default as for `mcp`).
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// Audits the workspace and prints its report; deletes nothing.
pub fn run(args: &AuditArgs) -> anyhow::Result<u8> {
    let meta = std::fs::metadata(&args.workspace).with_context(|| format!("workspace {}", args.workspace.display()))?;
    anyhow::ensure!(meta.is_dir(), "workspace {} is not a directory", args.workspace.display());
    let ws = std::fs::canonicalize(&args.workspace).context("canonical workspace")?;
    let report = winx_release_engine::audit::audit(&ws).with_context(|| format!("audit of {}", ws.display()))?;
    let mut v = serde_json::to_value(&report)?;
    // How much of the shared 50,000-entry scan bound the backing roots use
    // (contract section 6b), with a warning past 80 %.
    let data_dir = winx_release_engine::layout::default_data_dir();
    let layout = winx_release_engine::Layout::new(ws.clone(), data_dir).map_err(|d| anyhow::anyhow!("{d}"))?;
    let usage = winx_release_engine::retention::backing_usage(&layout);
    if let (Some(obj), serde_json::Value::Object(extra)) = (v.as_object_mut(), serde_json::to_value(&usage)?) {
        obj.extend(extra);
    }
    // How the guardian that owns the sessions tells that a command runs:
    // "cgroup", "proc", or null when no guardian answers.
    let socket = winx_release_protocol::resolve_socket_path(args.socket.as_deref());
    let timeouts =
        winx_release_protocol::client::Timeouts { io: std::time::Duration::from_secs(2), ..Default::default() };
    let liveness =
        winx_release_protocol::GuardianClient::connect_hello(&socket, timeouts).ok().and_then(|(_, h)| h.liveness);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("liveness".into(), serde_json::json!(liveness));
    }
    // Which data directory `D` was looked at (contract section 1: it falls
    // back to the password database's home when HOME is unset).
    v["data_dir"] = serde_json::json!(layout.data_dir());
    print_json(&v)?;
    Ok(EXIT_OK)
}
