//! Step `scan` of a release: the backing-root scan, with every target as an
//! alias.

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Instant;

use crate::error::Reason;
use crate::identity::PhysicalId;
use crate::layout::{self, Layout};
use crate::resolve::open_dir_abs;
use crate::scan::{
    open_root, open_root_beneath, RootSpec, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRoot, SharedScanner,
};

/// Opens the three backing roots of `layout`: `W/.winx/scratch` through
/// no-follow handles from the workspace, `D/executions` and `D/receipts`
/// with their final component no-follow.
pub(crate) fn open_backing_roots(layout: &Layout) -> Result<Vec<ScanRoot>, (Reason, PathBuf)> {
    let ws = open_dir_abs(layout.workspace()).map_err(|e| {
        (Reason::BackingInaccessible, {
            let _ = e;
            layout.workspace().to_path_buf()
        })
    })?;
    let scratch = open_root_beneath(ws.as_fd(), layout.workspace(), &[layout::WINX_DIR, layout::SCRATCH_DIR])
        .map_err(|f| (f.reason, f.path))?;
    let exec = open_root(&layout.executions_root()).map_err(|f| (f.reason, f.path))?;
    let receipts = open_root(&layout.receipts_root()).map_err(|f| (f.reason, f.path))?;
    Ok(vec![scratch, exec, receipts])
}

/// Scans the backing roots of `layout` with `aliases`, leanly
/// ([`ScanMode::Lean`]: a release needs no sizes).
pub(crate) fn scan_backing_roots(
    layout: &Layout,
    backend: &dyn ScanBackend,
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
) -> ScanReport {
    let start = Instant::now();
    match open_backing_roots(layout) {
        Ok(roots) => backend.scan_with(&roots, limits, aliases, ScanMode::Lean),
        Err((reason, path)) => {
            crate::scan::fail_report(backend.kind(), ScanMode::Lean, reason, path, start.elapsed().as_micros() as u64)
        }
    }
}

/// The backing roots of `layout` as a [`SharedScanner`] opens them: the
/// same roots, opened the same way, as [`open_backing_roots`].
pub(crate) fn backing_specs(layout: &Layout) -> Vec<RootSpec> {
    vec![
        RootSpec::Beneath {
            base: layout.workspace().to_path_buf(),
            rel: vec![layout::WINX_DIR.to_owned(), layout::SCRATCH_DIR.to_owned()],
        },
        RootSpec::Path(layout.executions_root()),
        RootSpec::Path(layout.receipts_root()),
    ]
}

/// [`scan_backing_roots`] through `scanner`: a walk that started at or after
/// `checked_at` (when the targets were checked), shared with concurrent
/// releases.
pub(crate) fn scan_backing_shared(
    layout: &Layout,
    scanner: &SharedScanner,
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
    checked_at: Instant,
) -> ScanReport {
    scanner.scan(&backing_specs(layout), limits, aliases, checked_at)
}
