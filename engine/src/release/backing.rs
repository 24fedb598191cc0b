//! Step `scan` of a release: the backing-root scan, with every target as an
//! alias.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use crate::error::Reason;
use crate::layout::{self, Layout};
use crate::scan::{RootSpec, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRequest, ScanRoot, SharedScanner};
use winx_release_kernel::identity::PhysicalId;

/// How a release runs its step `scan`: one choice, so no knob is ignored.
#[derive(Clone, Copy)]
pub enum Scanner<'a> {
    /// A fresh lean scan of the backing roots on this backend.
    Fresh(&'a dyn ScanBackend),
    /// The shared, cached scanner a long-lived owner holds (the guardian):
    /// the scan reuses a walk that started after the targets were checked
    /// and reads only the directories that changed ([`SharedScanner`]).
    Shared(&'a SharedScanner),
}

impl std::fmt::Debug for Scanner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scanner::Fresh(backend) => f.debug_tuple("Fresh").field(&backend.kind()).finish(),
            Scanner::Shared(shared) => f.debug_tuple("Shared").field(shared).finish(),
        }
    }
}

/// Opens the backing roots of `layout` ([`backing_specs`]) now, in order.
pub(crate) fn open_backing_roots(layout: &Layout) -> Result<Vec<ScanRoot>, (Reason, PathBuf)> {
    backing_specs(layout).iter().map(|spec| spec.open().map_err(|f| (f.reason, f.path))).collect()
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
        Ok(roots) => backend.scan(&ScanRequest { roots: &roots, limits, aliases, mode: ScanMode::Lean }),
        Err((reason, path)) => {
            crate::scan::fail_report(backend.kind(), ScanMode::Lean, reason, path, start.elapsed().as_micros() as u64)
        }
    }
}

/// The three backing roots of `layout` (contract section 1), the one
/// description of them: `W/.winx/scratch` through no-follow handles from
/// the workspace, `D/executions` and `D/receipts` with their final
/// component no-follow. A fresh scan and a [`SharedScanner`] both open them
/// from here.
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

/// Reads the backing roots of `layout` into `scanner`'s directory cache now
/// (the cold fill a first release would otherwise pay), and returns how
/// many entries the roots hold (0 when the cache is off).
///
/// A long-lived owner calls it off the request path when a workspace's
/// first session opens: a release that comes later scans only the
/// directories whose change time moved since, and one that comes during
/// the fill waits for it and then reads only what changed. Exactness does
/// not depend on it: a release never uses a walk that started before its
/// targets were checked ([`SharedScanner::scan`]). With the cache switched
/// off it does nothing.
pub fn prewarm_backing_roots(layout: &Layout, scanner: &SharedScanner, limits: ScanLimits) -> u64 {
    if !scanner.cache().is_enabled() {
        return 0;
    }
    scan_backing_shared(layout, scanner, limits, &HashSet::new(), Instant::now()).entries
}
