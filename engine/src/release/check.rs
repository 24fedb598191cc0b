//! Step `check` of a release: the request's shape, the owner's execution
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
use std::path::{Path, PathBuf};

use super::{ReleaseReport, ReleaseRequest};
use crate::error::{Reason, Refusal};
use crate::owner::RuntimeOwner;
use crate::preflight::{open_all, place_all, HelperPath};
use crate::rehash::{self, HashJob, RehashOptions};
use winx_release_kernel::hash::Fingerprint;
use winx_release_kernel::identity::Pin;

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

/// Step `check`: the request's shape and placement ([`place_all`]), the
/// owner's state, then every target opened through directory handles
/// ([`open_all`], the same `preflight` the frontend runs) and its identity
/// matched against its pin. Any refusal is the whole request's denial,
/// nothing touched.
pub(super) fn open_targets(
    req: &ReleaseRequest<'_>,
    owner: &dyn RuntimeOwner,
    paths: &[String],
) -> Result<Opened, ReleaseReport> {
    let exact: Vec<&Path> = req.targets.iter().map(|t| t.path.as_path()).collect();
    let helpers = place_all(req.layout, req.thread_id, &exact).map_err(|r| ReleaseReport::refused(paths, r))?;
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
    let pre = open_all(req.layout, req.thread_id, helpers).map_err(|r| ReleaseReport::refused(paths, r))?;
    // The session directory opened must be the one the owner answered for.
    if let Some((dev, ino)) = owner.session_dir() {
        let opened = winx_release_kernel::identity::Identity::of_fd(&pre.session).map(|id| (id.dev, id.ino));
        if opened.as_ref().ok() != Some(&(dev, ino)) {
            return Err(ReleaseReport::denied(
                paths,
                Reason::OtherSession,
                &[],
                "the session directory is not the one whose executions were asked about (it was replaced \
                 meanwhile); nothing was touched",
            ));
        }
    }
    let mut own: Vec<Option<Reason>> = vec![None; paths.len()];
    let mut targets = Vec::with_capacity(pre.targets.len());
    for t in pre.targets {
        let target = &req.targets[t.index];
        if !target.pin.matches_identity(&t.identity) {
            own[t.index] = Some(Reason::ReadRequired);
            continue;
        }
        targets.push(Checked {
            index: t.index,
            helper: t.helper,
            pin: target.pin,
            parent: t.parent,
            file: t.file,
            fingerprint: None,
        });
    }
    let why = |_| Some("its identity (inode, size or change time) changed since it was read".to_owned());
    if let Some(refusal) = Refusal::of_targets(paths, own, why) {
        return Err(ReleaseReport::refused(paths, refusal));
    }
    Ok(Opened { session: pre.session, session_path: pre.session_path, targets, count: paths.len() })
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
