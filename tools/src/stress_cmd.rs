//! `winx-release stress`: a real guardian and frontends under a seeded,
//! checked workload (the `winx-release-stress` crate).
//!
//! With no arguments: a self-contained run in a private temporary
//! directory, a readable summary on stdout. `--json` prints the contract's
//! JSON object instead. Exit status 1 when any invariant was violated (or
//! the run could not be carried out), 0 otherwise. `--soak N` runs it for N
//! seeds in a row, one line per seed.

use winx_release_stress::Config;

use crate::common::{print_json, EXIT_FAILURE, EXIT_OK};

/// Runs the stress workload (or the long run, with `--commands`) and prints its report.
pub fn run(args: &Config) -> anyhow::Result<u8> {
    let cfg = args.resolved();
    if let Some(n) = cfg.soak {
        let passed = winx_release_stress::soak(&cfg, n, &mut std::io::stdout().lock())?;
        return Ok(if passed { EXIT_OK } else { EXIT_FAILURE });
    }
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
        // Not `print!`: a reader that went away is an error to report
        // (main ends quietly on a broken pipe), never a panic.
        std::io::Write::write_all(&mut std::io::stdout().lock(), table.as_bytes())?;
    }
    Ok(if passed { EXIT_OK } else { EXIT_FAILURE })
}
