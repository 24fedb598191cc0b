//! The guardian's retention worker (contract section 6b).
//!
//! One background thread keeps `D/executions` and `D/receipts` within
//! budget with [`winx_release_engine::retention`]: a pass at start, then one
//! after every completed command and release, debounced (kicks that arrive
//! while a pass is pending are folded into it), and one at least every
//! [`PERIOD`] so that receipts age out on an idle guardian too.
//!
//! An execution's payload is removed only when its `status.json` says it is
//! resolved *and* this guardian's table does not hold it as anything but
//! final (`Runtime::claim_for_retention` of the engine); the runtime then forgets it,
//! so a later status check answers `not_found` ("unknown command_id").
//!
//! After a pass the worker ends the background shells whose command is
//! done and of which nothing runs (`retire_idle_background`; a
//! background command's end kicks it), and puts the screens of quiet shells to sleep
//! (`Shells::rest`), and (at most every [`USAGE_EVERY`]) counts the
//! backing roots of every workspace it has served, as a release would scan
//! them, and logs a warning past 80 % of the 50,000-entry bound.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use winx_release_engine::layout::Layout;
use winx_release_engine::retention::{backing_usage_in, data_usage_in, BackingUsage, Retention, RetentionPolicy};

use crate::sessions::Guardian;

/// How long a kick waits for more kicks before the pass runs.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// Longest time between passes.
pub const PERIOD: Duration = Duration::from_secs(600);
/// Shortest time between two backing-usage counts.
pub const USAGE_EVERY: Duration = Duration::from_secs(5);

/// Runs the worker until `stop` is set.
pub fn run(g: &Guardian, policy: RetentionPolicy, stop: &AtomicBool) {
    let mut retention = Retention::new(&g.data_dir, policy);
    let mut last_usage: Option<Instant> = None;
    let mut warned = false;
    loop {
        pass(g, &mut retention);
        // Background shells whose command is done end (`shell/retire.rs`).
        retire_idle_background(g);
        // The quiet shells' screens sleep (`shell/screen.rs`): here, where
        // no request waits for it.
        g.shells.rest();
        if last_usage.is_none_or(|t| t.elapsed() >= USAGE_EVERY) {
            last_usage = Some(Instant::now());
            warned = check_usage(g, warned);
        }
        let kicked = g.retention.wait(PERIOD, stop);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if kicked {
            // Fold the kicks of a burst into one pass.
            std::thread::sleep(DEBOUNCE);
            g.retention.clear();
        }
    }
}

/// Ends every background shell whose command is done and of which nothing
/// runs (`shell/retire.rs`); returns how many ended.
fn retire_idle_background(g: &Guardian) -> usize {
    let mut ended = 0;
    for t in g.shells.done_background() {
        let Some(session) = g.session_by_key(&t.session) else { continue };
        let admitted = session.admission.enter();
        ended += usize::from(t.retire(&g.runtime, &admitted));
    }
    ended
}

fn pass(g: &Guardian, retention: &mut Retention) {
    let result = retention.pass(SystemTime::now(), &mut |id| g.runtime.claim_for_retention(id));
    match result {
        Ok(r) if r.executions.removed + r.receipts.removed + r.staging_cleared > 0 => tracing::info!(
            executions_removed = r.executions.removed,
            executions_kept = r.executions.resolved - r.executions.removed,
            unresolved = r.executions.unresolved,
            receipts_removed = r.receipts.removed,
            "retention pass"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "retention pass failed; nothing more removed this time"),
    }
}

/// Counts the backing roots of every workspace served (or the data
/// directory's alone) and warns past the threshold. Returns whether a
/// warning stands, so it is logged once per crossing.
fn check_usage(g: &Guardian, warned: bool) -> bool {
    // The releases' directory cache: a count reads only what changed.
    let cache = Some(g.scanner.cache());
    let workspaces: Vec<PathBuf> = g.retention.workspaces();
    let mut usages: Vec<(Option<PathBuf>, BackingUsage)> = workspaces
        .into_iter()
        .filter_map(|ws| Layout::new(ws.clone(), &g.data_dir).ok().map(|l| (Some(ws), backing_usage_in(&l, cache))))
        .collect();
    if usages.is_empty() {
        usages.push((None, data_usage_in(&g.data_dir, cache)));
    }
    let mut over = false;
    for (ws, u) in usages {
        if let Some(w) = &u.backing_warning {
            over = true;
            if !warned {
                let ws = ws.map(|p| p.display().to_string()).unwrap_or_default();
                tracing::warn!(workspace = %ws, entries = u.backing_entries, limit = u.backing_limit, "{w}");
            }
        }
    }
    over
}
