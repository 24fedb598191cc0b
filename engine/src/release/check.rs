//! Steps 6–7 of a release: the request's shape, the owner's execution
//! state, and every target opened through directory handles, re-identified
//! and re-hashed against its pin. The same reads give each target's BLAKE3
//! fingerprint, which the recheck of the captured object compares with.
//!
//! # Why the recheck may compare BLAKE3 digests
//!
//! The check reads a target's bytes once and takes both digests from those
//! reads: SHA-256, compared with the pin, and BLAKE3. The recheck reads the
//! captured object's bytes again, all of them, after the move into
//! quarantine, and compares their BLAKE3 with the check's. Equal digests of
//! a collision-resistant hash mean equal bytes, so the captured bytes are
//! the bytes the check proved equal to the pin: the content is rechecked,
//! not assumed. BLAKE3 hashes ~10 GB/s per core here against ~2 GB/s for
//! SHA-NI SHA-256, and the recheck runs one target after another on one
//! core (a late failure must leave an untouched suffix), so this is where
//! the speed matters.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use super::{ReleaseReport, ReleaseRequest};
use crate::error::Reason;
use crate::hash::Fingerprint;
use crate::identity::{Identity, Pin};
use crate::layout::{self, Layout};
use crate::owner::RuntimeOwner;
use crate::path_rules::{place_helper, HelperPath};
use crate::rehash::{self, HashJob, RehashOptions};
use crate::resolve::{open_dir_abs, open_dir_beneath, open_regular_beneath};

/// A target that passed its identity check.
pub(super) struct Checked {
    /// Its original index in the request.
    pub(super) index: usize,
    pub(super) helper: HelperPath,
    pub(super) pin: Pin,
    /// Its parent directory, opened through handles.
    pub(super) parent: OwnedFd,
    /// The target, opened without following a link.
    pub(super) file: OwnedFd,
    /// BLAKE3 of the bytes the check found equal to the pin (set by
    /// [`rehash_targets`]).
    pub(super) fingerprint: Option<Fingerprint>,
}

/// The session and its targets, opened and re-identified.
pub(super) struct Opened {
    pub(super) session: OwnedFd,
    pub(super) session_path: PathBuf,
    pub(super) targets: Vec<Checked>,
    /// How many targets the request named.
    pub(super) count: usize,
}

/// Validates the request's shape: count, exact paths, duplicates, placement.
///
/// Returns the placed helpers, or the request-level reason and each
/// target's own reason.
pub fn validate_paths(
    layout: &Layout,
    thread_id: &str,
    paths: &[String],
) -> Result<Vec<HelperPath>, (Reason, Vec<Option<Reason>>)> {
    crate::path_rules::check_shape(paths)?;
    let mut own = vec![None; paths.len()];
    let mut helpers = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        match place_helper(layout, thread_id, p) {
            Ok(h) => helpers.push(h),
            Err(r) => own[i] = Some(r),
        }
    }
    match own.iter().flatten().next().copied() {
        Some(first) => Err((first, own)),
        None => Ok(helpers),
    }
}

/// Opens the session directory of `thread_id` through directory handles.
pub fn open_session_dir(layout: &Layout, thread_id: &str) -> Result<OwnedFd, Reason> {
    let ws = open_dir_abs(layout.workspace()).map_err(|e| e.reason())?;
    let session = layout::session_name(thread_id);
    open_dir_beneath(ws.as_fd(), &[layout::WINX_DIR, layout::TMP_DIR, session.as_str()]).map_err(|e| e.reason())
}

/// Checks the request's shape and the owner's state, then opens every
/// target through directory handles and matches its identity against its
/// pin. Any refusal is the whole request's denial, nothing touched.
pub(super) fn open_targets(
    req: &ReleaseRequest<'_>,
    owner: &dyn RuntimeOwner,
    paths: &[String],
) -> Result<Opened, ReleaseReport> {
    let helpers = match validate_paths(req.layout, req.thread_id, paths) {
        Ok(h) => h,
        Err((r, own)) => return Err(ReleaseReport::denied(paths, r, &own, "a target path was refused")),
    };
    if !owner.supports_temporary_release() {
        return Err(ReleaseReport::denied(
            paths,
            Reason::OwnerUnsupported,
            &[],
            "runtime owner lacks temporary_release",
        ));
    }
    // Pending actions first: a queued command is about to run.
    let pending = owner.pending_actions(req.thread_id);
    if pending > 0 {
        return Err(ReleaseReport::denied(paths, Reason::PendingActions, &[], format!("{pending} action(s) pending")));
    }
    let running = owner.running_executions(req.thread_id);
    if running > 0 {
        let detail = owner.running_detail(req.thread_id).unwrap_or_else(|| format!("{running} execution(s) running"));
        return Err(ReleaseReport::denied(paths, Reason::ExecutionActive, &[], detail));
    }
    let session_path = req.layout.session_dir(req.thread_id);
    let session = match open_session_dir(req.layout, req.thread_id) {
        Ok(fd) => fd,
        Err(r) => return Err(ReleaseReport::denied(paths, r, &[], "session directory cannot be opened")),
    };
    let session_dev = match Identity::of_fd(&session) {
        Ok(id) => id.dev,
        Err(e) => return Err(ReleaseReport::denied(paths, Reason::NotFound, &[], format!("session directory: {e}"))),
    };
    let mut own: Vec<Option<Reason>> = vec![None; paths.len()];
    let mut targets = Vec::with_capacity(helpers.len());
    // Two request paths that name one physical file (a bind mount inside
    // the session, say) are refused up front as `hardlink`: one helper with
    // more than one name, as a hardlink would be (the closest contract
    // reason; see docs/DESIGN.md).
    let mut seen: std::collections::HashMap<crate::PhysicalId, usize> = std::collections::HashMap::new();
    for (index, (helper, target)) in helpers.into_iter().zip(req.targets).enumerate() {
        let opened = match open_regular_beneath(session.as_fd(), &helper.rel) {
            Ok(o) => o,
            Err(r) => {
                own[index] = Some(r);
                continue;
            }
        };
        if let Some(&first) = seen.get(&opened.identity.physical()) {
            own[first] = Some(Reason::Hardlink);
            own[index] = Some(Reason::Hardlink);
            continue;
        }
        seen.insert(opened.identity.physical(), index);
        if opened.identity.dev != session_dev {
            own[index] = Some(Reason::RenameUnsupported);
            continue;
        }
        if !target.pin.matches_identity(&opened.identity) {
            own[index] = Some(Reason::ReadRequired);
            continue;
        }
        targets.push(Checked {
            index,
            helper,
            pin: target.pin,
            parent: opened.parent,
            file: opened.file,
            fingerprint: None,
        });
    }
    if let Some(first) = own.iter().flatten().next().copied() {
        return Err(ReleaseReport::denied(paths, first, &own, "a target failed its check"));
    }
    Ok(Opened { session, session_path, targets, count: paths.len() })
}

/// Re-hashes every opened target in one batch (io_uring reads and every
/// core for large batches; see `rehash`), and keeps the fingerprint of
/// each one whose bytes matched, from the same reads. Returns each request
/// index's reason: `read_required` where the bytes are not the pinned ones.
pub(super) fn rehash_targets(opened: &mut Opened) -> Vec<Option<Reason>> {
    let mut own = vec![None; opened.count];
    let jobs: Vec<HashJob<'_>> = opened.targets.iter().map(|c| HashJob::pinned(c.file.as_fd(), c.pin.size)).collect();
    let opts = RehashOptions { fingerprint: true, ..RehashOptions::default() };
    let hashes = rehash::hash_fds(&jobs, &opts);
    drop(jobs);
    for (c, h) in opened.targets.iter_mut().zip(hashes) {
        match h {
            Ok(h) if h.matches(&c.pin) => c.fingerprint = h.fingerprint,
            _ => own[c.index] = Some(Reason::ReadRequired),
        }
    }
    own
}
