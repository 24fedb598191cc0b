//! Shared backing-root scans (single flight) over one [`DirCache`].
//!
//! A release must scan its backing roots *after* it checked its targets:
//! the scan proves that no entry is a link, an unsupported entry or an
//! alias of a target at a time after the targets were pinned. Any scan that
//! **started** after that time proves it as well as one of its own, so
//! concurrent releases share: a release that finds a scan of its roots in
//! flight that started after its check waits for it; one that finds none
//! starts one, for its own roots and every root that waiting releases asked
//! for; one that finds a finished scan that started after its check uses
//! it at once. The unit shared is one root's walk (its directories in scan
//! order, without aliases, `cache::walk`), so sessions and workspaces that
//! share a backing root (`D/executions` and `D/receipts` are per user)
//! share its walk; each release then evaluates the walks of its own roots,
//! in its own order, with its own aliases and bound
//! (`cache::eval`): the report is exactly a fresh lean scan's.
//!
//! The guardian holds one [`SharedScanner`] for its life and hands it to
//! every release ([`crate::release::ReleaseOptions::scanner`]).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::cache::{evaluate, DirCache, RootSnapshot};
use super::root::{fail_report, open_root, open_root_beneath, RootFailure};
use super::{BackendKind, ScanLimits, ScanMode, ScanReport, ScanRoot};
use crate::error::Reason;
use crate::resolve::open_dir_abs;
use winx_release_kernel::identity::PhysicalId;

/// How a backing root is opened, each time a scan of it starts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RootSpec {
    /// An operator-given path ([`open_root`]).
    Path(PathBuf),
    /// `base/rel...`, `base` opened through no-follow handles from `/` and
    /// every component of `rel` without following a link
    /// ([`open_root_beneath`]).
    Beneath {
        /// The absolute directory the root lies below.
        base: PathBuf,
        /// The components below it.
        rel: Vec<String>,
    },
}

impl RootSpec {
    /// The root's full path: the key walks are shared by.
    pub(crate) fn path(&self) -> PathBuf {
        match self {
            RootSpec::Path(p) => p.clone(),
            RootSpec::Beneath { base, rel } => rel.iter().fold(base.clone(), |p, c| p.join(c)),
        }
    }

    /// Opens the root now.
    pub(crate) fn open(&self) -> Result<ScanRoot, RootFailure> {
        match self {
            RootSpec::Path(p) => open_root(p),
            RootSpec::Beneath { base, rel } => {
                let dir = open_dir_abs(base)
                    .map_err(|_| RootFailure { reason: Reason::BackingInaccessible, path: base.clone() })?;
                let rel: Vec<&str> = rel.iter().map(String::as_str).collect();
                open_root_beneath(dir.as_fd(), base, &rel)
            }
        }
    }
}

/// What a [`SharedScanner`] has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SharedStats {
    /// Scans requested.
    pub requests: u64,
    /// Walks run (each over one or more roots).
    pub flights: u64,
}

type Walked = Result<Arc<RootSnapshot>, RootFailure>;

/// The latest finished walk of one root.
struct Latest {
    started: Instant,
    limits: ScanLimits,
    walked: Walked,
}

struct Flight {
    started: Instant,
    limits: ScanLimits,
    roots: HashSet<PathBuf>,
}

#[derive(Default)]
struct State {
    flight: Option<Flight>,
    latest: HashMap<PathBuf, Latest>,
    /// Roots that waiting requests need in the next flight.
    wanted: Vec<RootSpec>,
    stats: SharedStats,
}

/// Single-flight backing-root scans over one [`DirCache`] (module docs).
#[derive(Default)]
pub struct SharedScanner {
    cache: DirCache,
    state: Mutex<State>,
    done: Condvar,
}

impl std::fmt::Debug for SharedScanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedScanner").field("cache", &self.cache).field("stats", &self.stats()).finish()
    }
}

/// Clears the flight when its leader leaves, also by a panic, so waiters
/// never wait for a flight that will not land.
struct Landing<'a>(&'a SharedScanner);

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        self.0.lock().flight = None;
        self.0.done.notify_all();
    }
}

impl SharedScanner {
    /// A scanner with an empty, enabled cache.
    pub fn new() -> SharedScanner {
        SharedScanner::default()
    }

    /// The directory cache (to switch it off: [`DirCache::set_enabled`]).
    pub fn cache(&self) -> &DirCache {
        &self.cache
    }

    /// What the scanner has done so far.
    pub fn stats(&self) -> SharedStats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Scans `roots` leanly under one shared bound with `aliases`, using
    /// only walks that started at or after `checked_at` (when the caller's
    /// targets were checked): a report equal to a fresh lean scan's of
    /// roots opened after `checked_at` (but for `elapsed_us`; `backend` is
    /// `sync`). A root that cannot be opened fails the scan closed with
    /// nothing scanned, the first such root in `roots` order.
    pub fn scan(
        &self,
        roots: &[RootSpec],
        limits: ScanLimits,
        aliases: &HashSet<PhysicalId>,
        checked_at: Instant,
    ) -> ScanReport {
        let start = Instant::now();
        let keys: Vec<PathBuf> = roots.iter().map(RootSpec::path).collect();
        let mut g = self.lock();
        g.stats.requests += 1;
        loop {
            let fresh = |l: &Latest| l.started >= checked_at && l.limits == limits;
            let ready: Option<Vec<Walked>> =
                keys.iter().map(|k| g.latest.get(k).filter(|l| fresh(l)).map(|l| l.walked.clone())).collect();
            if let Some(walked) = ready {
                drop(g);
                return report(&walked, limits, aliases, start);
            }
            if let Some(f) = &g.flight {
                let joins = f.started >= checked_at && f.limits == limits && keys.iter().all(|k| f.roots.contains(k));
                if !joins {
                    for spec in roots {
                        if !g.wanted.contains(spec) {
                            g.wanted.push(spec.clone());
                        }
                    }
                }
                g = self.done.wait(g).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Lead a flight: these roots and every root others wait for.
            let mut specs: Vec<RootSpec> = roots.to_vec();
            for spec in std::mem::take(&mut g.wanted) {
                if !specs.contains(&spec) {
                    specs.push(spec);
                }
            }
            let started = Instant::now();
            g.flight = Some(Flight { started, limits, roots: specs.iter().map(RootSpec::path).collect() });
            g.stats.flights += 1;
            drop(g);
            let landing = Landing(self);
            let walked = self.fly(&specs, limits);
            g = self.lock();
            for (spec, walked) in specs.iter().zip(walked) {
                g.latest.insert(spec.path(), Latest { started, limits, walked });
            }
            drop(g);
            drop(landing);
            g = self.lock();
        }
    }

    /// Opens and walks `specs` now.
    fn fly(&self, specs: &[RootSpec], limits: ScanLimits) -> Vec<Walked> {
        let mut roots = Vec::with_capacity(specs.len());
        let mut failures: Vec<Option<RootFailure>> = Vec::with_capacity(specs.len());
        for spec in specs {
            match spec.open() {
                Ok(r) => {
                    roots.push(r);
                    failures.push(None);
                }
                Err(f) => failures.push(Some(f)),
            }
        }
        let mut snaps = self.cache.snapshot(&roots, limits).into_iter();
        let lost = |spec: &RootSpec| RootFailure { reason: Reason::BackingInaccessible, path: spec.path() };
        specs
            .iter()
            .zip(failures)
            .map(|(spec, failure)| match failure {
                Some(f) => Err(f),
                None => snaps.next().map(Arc::new).ok_or_else(|| lost(spec)),
            })
            .collect()
    }
}

/// The report of `walked` (one per root, in order).
fn report(walked: &[Walked], limits: ScanLimits, aliases: &HashSet<PhysicalId>, start: Instant) -> ScanReport {
    if let Some(f) = walked.iter().find_map(|w| w.as_ref().err()) {
        let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        return fail_report(BackendKind::Sync, ScanMode::Lean, f.reason, f.path.clone(), us);
    }
    let snaps: Vec<&RootSnapshot> = walked.iter().filter_map(|w| w.as_ref().ok()).map(|s| &**s).collect();
    evaluate(&snaps, limits, aliases, start)
}
