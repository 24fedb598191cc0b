//! `winx-release recover`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::common::{print_json, EXIT_OK};

/// Arguments of `winx-release recover`.
#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// A workspace whose journals and orphan quarantines to recover (all
    /// journals when none is given).
    #[arg(long = "workspace")]
    workspaces: Vec<PathBuf>,
}

/// Runs crash recovery and prints its report. A `--workspace` that does not
/// exist is an error (exit 1, one line on stderr) and nothing runs.
pub fn run(args: &RecoverArgs) -> anyhow::Result<u8> {
    let mut ws = Vec::new();
    for w in &args.workspaces {
        // A workspace that is not there has nothing this command could put
        // back: an error (exit 1), so that a mistyped path is not taken for
        // a clean recovery.
        match std::fs::canonicalize(w) {
            Ok(c) => ws.push(c),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                anyhow::bail!("workspace {} does not exist; nothing was recovered", w.display())
            }
            Err(e) => return Err(e).with_context(|| format!("workspace {}", w.display())),
        }
    }
    let data_dir = winx_release_engine::layout::default_data_dir();
    let report = winx_release_engine::recovery::recover(&data_dir, &ws).context("recovery")?;
    print_json(&report)?;
    Ok(EXIT_OK)
}
