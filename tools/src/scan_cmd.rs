//! `winx-release scan`.
//!
//! `--backend` picks the engine: `sync` (synchronous system calls), `uring`
//! (batched io_uring `statx`/`openat`; where io_uring is unavailable it
//! falls back to `sync` with a `tracing` warning and the report says
//! `"backend": "sync"`), `threads` (parallel walkers on plain system calls),
//! or `auto` (the default: the fastest on this machine, see
//! `winx_release_engine::scan::auto_backend`). `--sizes` measures file
//! sizes; without it the scan is lean (`winx_release_engine::scan::ScanMode`).
//!
//! `--cache-check` compares the guardian's directory cache
//! (`winx_release_engine::scan::DirCache`) with a fresh lean scan on the
//! chosen backend: a cold cached scan, one after its records settled, and a
//! warm one, each against a fresh scan taken right after it. It prints
//! `{"cache_check": "equal" | "differs", "fresh": report, "cached":
//! [cold, settled, warm], "stats": {...}}` and exits 1 when any differs
//! (`elapsed_us` and `backend` aside).

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use winx_release_engine::scan::{
    self, scan_paths_with, DirCache, ScanBackend, ScanLimits, ScanMode, ScanReport, MAX_DEPTH, MAX_ENTRIES,
};
use winx_release_kernel::identity::PhysicalId;

use crate::common::{print_json, EXIT_FAILURE, EXIT_FAIL_CLOSED, EXIT_OK};

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
    /// Compare the directory cache (cold, settled and warm) with fresh lean
    /// scans; exit 1 when any report differs.
    #[arg(long, conflicts_with = "sizes")]
    cache_check: bool,
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
    for r in &roots {
        if let Err(e) = std::fs::symlink_metadata(r) {
            if e.kind() == std::io::ErrorKind::NotFound {
                // Contract section 1: a backing root that does not exist is empty.
                eprintln!("winx-release: scan root {} does not exist; counted as empty", r.display());
            }
        }
    }
    let limits = ScanLimits { max_entries: args.max_entries, max_depth: args.max_depth };
    let backend = scan::backend_for(match args.backend {
        BackendChoice::Auto => scan::BackendChoice::Auto,
        BackendChoice::Uring => scan::BackendChoice::Uring,
        BackendChoice::Sync => scan::BackendChoice::Sync,
        BackendChoice::Threads => scan::BackendChoice::Threads,
    });
    if args.cache_check {
        return cache_check(backend, &roots, limits, &aliases);
    }
    let mode = if args.sizes { ScanMode::Sizes } else { ScanMode::Lean };
    let report = scan_paths_with(backend, &roots, limits, &aliases, mode);
    print_json(&report)?;
    Ok(if report.failed_closed() { EXIT_FAIL_CLOSED } else { EXIT_OK })
}

/// `--cache-check`: cached scans against fresh lean scans.
fn cache_check(
    backend: &dyn ScanBackend,
    roots: &[PathBuf],
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
) -> anyhow::Result<u8> {
    let same = |a: &ScanReport, b: &ScanReport| {
        let mut a = a.clone();
        a.elapsed_us = b.elapsed_us;
        a.backend = b.backend;
        a == *b
    };
    let cache = DirCache::new();
    let mut cached = Vec::new();
    let mut fresh = None;
    let mut equal = true;
    for pass in 0..3 {
        if pass == 1 {
            // Records read within a timestamp tick of a change settle later.
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let c = cache.scan_paths(roots, limits, aliases);
        let f = scan_paths_with(backend, roots, limits, aliases, ScanMode::Lean);
        equal &= same(&c, &f);
        cached.push(c);
        fresh = Some(f);
    }
    let verdict = if equal { "equal" } else { "differs" };
    print_json(&serde_json::json!({
        "cache_check": verdict,
        "fresh": fresh,
        "cached": cached,
        "stats": cache.stats(),
    }))?;
    Ok(if equal { EXIT_OK } else { EXIT_FAILURE })
}
