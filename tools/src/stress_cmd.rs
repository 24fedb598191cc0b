//! `winx-release stress`: a real guardian and frontends under a seeded,
//! checked workload (the `winx-release-stress` crate).
//!
//! With no arguments: a self-contained run in a private temporary
//! directory, a readable summary on stdout. `--json` prints the contract's
//! JSON object instead. Exit status 1 when any invariant was violated (or
//! the run could not be carried out), 0 otherwise.

use winx_release_stress::Config;

use crate::{print_json, EXIT_FAILURE, EXIT_OK};

/// Runs the stress workload (or the long run, with `--commands`) and prints its report.
pub fn run(args: &Config) -> anyhow::Result<u8> {
    let cfg = args.resolved();
    let (passed, json, table) = if cfg.commands.is_some() {
        let r = winx_release_stress::longrun::run(&cfg)?;
        (r.passed(), serde_json::to_value(&r)?, r.table())
    } else {
        let r = winx_release_stress::run(&cfg)?;
        (r.passed(), serde_json::to_value(&r)?, r.table())
    };
    if cfg.json {
        print_json(&json)?;
    } else {
        print!("{table}");
    }
    Ok(if passed { EXIT_OK } else { EXIT_FAILURE })
}
