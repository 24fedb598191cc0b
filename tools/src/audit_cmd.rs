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
}

/// Audits the workspace and prints its report; deletes nothing.
pub fn run(args: &AuditArgs) -> anyhow::Result<u8> {
    let meta = std::fs::metadata(&args.workspace).with_context(|| format!("workspace {}", args.workspace.display()))?;
    anyhow::ensure!(meta.is_dir(), "workspace {} is not a directory", args.workspace.display());
    let ws = std::fs::canonicalize(&args.workspace).context("canonical workspace")?;
    let report = winx_release_engine::audit::audit(&ws).with_context(|| format!("audit of {}", ws.display()))?;
    print_json(&report)?;
    Ok(EXIT_OK)
}
