//! `winx-release scan`.
//!
//! `--backend` picks the engine: `sync` (synchronous system calls), `uring`
//! (batched io_uring `statx`/`openat`; where io_uring is unavailable it
//! falls back to `sync` with a `tracing` warning and the report says
//! `"backend": "sync"`), `threads` (parallel walkers on plain system calls),
//! or `auto` (the default: the fastest on this machine, see
//! `winx_release_engine::scan::auto_backend`). `--sizes` measures file
//! sizes; without it the scan is lean (`winx_release_engine::scan::ScanMode`).

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use winx_release_engine::identity::PhysicalId;
use winx_release_engine::scan::{self, scan_paths_with, ScanLimits, ScanMode, MAX_DEPTH, MAX_ENTRIES};

use crate::{print_json, EXIT_FAIL_CLOSED, EXIT_OK};

/// Which scan backend to use.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum BackendChoice {
    /// The faster backend on this machine, falling back to `sync`.
    Auto,
    /// io_uring, falling back to `sync` where it is unavailable.
    Uring,
    /// Synchronous syscalls.
    Sync,
    /// Parallel walkers on plain syscalls.
    Threads,
}

/// Arguments of `winx-release scan`.
#[derive(Args, Debug)]
pub struct ScanArgs {
    /// Scan backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Most entries in all roots together.
    #[arg(long, default_value_t = MAX_ENTRIES)]
    max_entries: u64,
    /// Deepest level below each root.
    #[arg(long, default_value_t = MAX_DEPTH)]
    max_depth: u32,
    /// Measure file sizes (`bytes`): every entry is `statx`ed. Without it,
    /// entries whose type and inode getdents64 already gives reliably are
    /// not `statx`ed and `bytes` is null.
    #[arg(long)]
    sizes: bool,
    /// A file whose (device, inode) is an alias that fails the scan.
    #[arg(long = "alias", value_name = "FILE")]
    aliases: Vec<PathBuf>,
    /// Backing roots to scan.
    #[arg(value_name = "ROOT", required = true)]
    roots: Vec<PathBuf>,
}

/// Runs the scan and prints its report.
pub fn run(args: &ScanArgs) -> anyhow::Result<u8> {
    let mut aliases = HashSet::new();
    for a in &args.aliases {
        let m = std::fs::metadata(a).with_context(|| format!("alias {}", a.display()))?;
        use std::os::unix::fs::MetadataExt;
        aliases.insert(PhysicalId { dev: m.dev(), ino: m.ino() });
    }
    let cwd = std::env::current_dir().context("current directory")?;
    let roots: Vec<PathBuf> =
        args.roots.iter().map(|r| if r.is_absolute() { r.clone() } else { cwd.join(r) }).collect();
    let limits = ScanLimits { max_entries: args.max_entries, max_depth: args.max_depth };
    let backend = scan::backend_for(match args.backend {
        BackendChoice::Auto => scan::BackendChoice::Auto,
        BackendChoice::Uring => scan::BackendChoice::Uring,
        BackendChoice::Sync => scan::BackendChoice::Sync,
        BackendChoice::Threads => scan::BackendChoice::Threads,
    });
    let mode = if args.sizes { ScanMode::Sizes } else { ScanMode::Lean };
    let report = scan_paths_with(backend, &roots, limits, &aliases, mode);
    print_json(&report)?;
    Ok(if report.failed_closed() { EXIT_FAIL_CLOSED } else { EXIT_OK })
}
