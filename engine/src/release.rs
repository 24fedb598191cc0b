//! The guarded release transaction.
//!
//! All targets are checked before removal begins: exact paths, the owner's
//! execution state, each target opened through directory handles and
//! re-identified and re-hashed against its pin, and the backing roots
//! scanned for links, unsupported entries and aliases. Then, as a small
//! synchronous section, each target is moved with `RENAME_NOREPLACE` into a
//! private quarantine, the captured object is re-identified and re-hashed,
//! and only the verified pinned object is unlinked. Anything else is put
//! back without overwriting, or preserved in quarantine and named.
//!
//! # References
//! - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html)
//! - [`unlinkat(2)`](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::{Reason, TargetReason};
use crate::fault::{FaultHook, FaultPoint};
use crate::identity::{Identity, Pin, IDENTITY_MASK};
use crate::journal::{Journal, JournalIntent, JournalMark, JournalTarget};
use crate::layout::{self, Layout};
use crate::owner::RuntimeOwner;
use crate::path_rules::{place_helper, HelperPath};
use crate::quarantine::{entry_name, rename_noreplace, Quarantine, QuarantineError};
use crate::rehash::{self, HashJob, RehashOptions};
use crate::resolve::{open_dir_abs, open_dir_beneath, open_regular_beneath};
use crate::scan::{open_root, open_root_beneath, ScanBackend, ScanLimits, ScanReport, ScanRoot};

pub use crate::path_rules::MAX_TARGETS;

/// One target of a release: its exact path and what its read pinned.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// The exact path.
    pub path: String,
    /// The pinned identity and digest.
    pub pin: Pin,
}

/// A release request as the engine receives it.
#[derive(Clone, Debug)]
pub struct ReleaseRequest<'a> {
    /// The workspace and data directory.
    pub layout: &'a Layout,
    /// The thread whose session the targets must belong to.
    pub thread_id: &'a str,
    /// The targets, in request order.
    pub targets: &'a [Target],
}

/// Knobs of one release.
pub struct ReleaseOptions<'a> {
    /// The scan bound.
    pub scan_limits: ScanLimits,
    /// The scan backend (default: [`crate::scan::auto_backend`]).
    pub backend: &'a dyn ScanBackend,
    /// Fault points, for tests.
    pub faults: Option<&'a dyn FaultHook>,
}

impl Default for ReleaseOptions<'_> {
    fn default() -> Self {
        ReleaseOptions { scan_limits: ScanLimits::default(), backend: crate::scan::auto_backend(), faults: None }
    }
}

/// The outcome of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The pinned object was verified in quarantine and removed.
    Released,
    /// What was captured was not the pinned object; it is back under its name.
    Restored,
    /// It could not be put back; it stays at `quarantine_path`.
    Preserved,
    /// The whole request was refused before anything was touched.
    Denied,
    /// A late failure stopped the run before this target; it was not touched.
    NotAttempted,
    /// This target failed; it is at its original path.
    Failed,
}

/// The result of one target.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TargetResult {
    /// The exact path, as requested.
    pub file_path: String,
    /// What happened.
    pub outcome: Outcome,
    /// The reason code, if any.
    pub reason: Option<String>,
    /// Bytes its removal freed (allocated blocks × 512).
    pub bytes_reclaimed: u64,
    /// Where it stays, for `preserved`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub quarantine_path: Option<PathBuf>,
}

/// The status of a whole release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every target was released.
    Completed,
    /// The filesystem was touched but not every target was released.
    Partial,
    /// Refused; nothing was touched.
    Denied,
    /// Malformed request; nothing was touched.
    InvalidInput,
    /// An unexpected error before any target moved; nothing was touched.
    Failed,
}

/// The report of one release.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseReport {
    /// Overall status.
    pub status: Status,
    /// The request-level reason, for `denied` and `invalid_input`.
    pub error_code: Option<Reason>,
    /// A human-readable detail of a denial or failure.
    pub detail: Option<String>,
    /// Whether any target moved (the run must be recorded as a receipt).
    pub touched: bool,
    /// Total bytes reclaimed.
    pub bytes_reclaimed: u64,
    /// Per-target results, in request order.
    pub files: Vec<TargetResult>,
}

impl ReleaseReport {
    /// A report refusing every target with `reason`; per-target reasons
    /// override it where a target has its own.
    pub fn denied(targets: &[String], reason: Reason, own: &[Option<Reason>], detail: impl Into<String>) -> Self {
        let files = targets
            .iter()
            .enumerate()
            .map(|(i, p)| TargetResult {
                file_path: p.clone(),
                outcome: Outcome::Denied,
                reason: Some(own.get(i).copied().flatten().unwrap_or(reason).code().to_owned()),
                bytes_reclaimed: 0,
                quarantine_path: None,
            })
            .collect();
        ReleaseReport {
            status: if reason.is_invalid_input() { Status::InvalidInput } else { Status::Denied },
            error_code: Some(reason),
            detail: Some(detail.into()),
            touched: false,
            bytes_reclaimed: 0,
            files,
        }
    }
}

struct Checked {
    helper: HelperPath,
    pin: Pin,
    parent: OwnedFd,
    file: OwnedFd,
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

/// Opens the three backing roots of `layout`: `W/.winx/scratch` through
/// no-follow handles from the workspace, `D/executions` and `D/receipts`
/// with their final component no-follow.
pub fn open_backing_roots(layout: &Layout) -> Result<Vec<ScanRoot>, (Reason, PathBuf)> {
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

/// Scans the backing roots of `layout` with `aliases`.
pub fn scan_backing_roots(
    layout: &Layout,
    backend: &dyn ScanBackend,
    limits: ScanLimits,
    aliases: &HashSet<crate::identity::PhysicalId>,
) -> ScanReport {
    let start = Instant::now();
    match open_backing_roots(layout) {
        Ok(roots) => backend.scan(&roots, limits, aliases),
        Err((reason, path)) => {
            crate::scan::fail_report(backend.kind(), reason, path, start.elapsed().as_micros() as u64)
        }
    }
}

fn fault(opts: &ReleaseOptions<'_>, point: FaultPoint<'_>) -> io::Result<()> {
    match opts.faults {
        Some(h) => h.at(&point),
        None => Ok(()),
    }
}

/// Re-identifies and re-hashes a captured object; returns its identity when
/// it is exactly the pinned object.
fn recheck_captured(q: &Quarantine, qname: &str, pin: &Pin) -> io::Result<Option<Identity>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(q.dir.as_fd(), qname, flags, Mode::empty()) {
        Ok(fd) => fd,
        // A symlink, or something else that cannot be opened as a file: not
        // the pinned object.
        Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::NXIO) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let id = Identity::of_fd(&fd)?;
    if !id.is_regular() || id.physical() != pin.physical() || id.nlink != 1 || id.size != pin.size {
        return Ok(None);
    }
    let hashed = rehash::hash_fds(&[HashJob::pinned(fd.as_fd(), pin.size)], &RehashOptions::default());
    match hashed.into_iter().next() {
        Some(Ok(h)) if h.matches(pin) => {}
        Some(Err(e)) => return Err(e),
        _ => return Ok(None),
    }
    // The name must still denote the descriptor we verified.
    let again = rustix::fs::statx(q.dir.as_fd(), qname, AtFlags::SYMLINK_NOFOLLOW, IDENTITY_MASK)?;
    if Identity::from_statx(&again).physical() != id.physical() {
        return Ok(None);
    }
    Ok(Some(id))
}

/// Runs one release under the caller's admission barrier.
///
/// Never panics on bad input; every refusal is a [`ReleaseReport`] with
/// status `denied` or `invalid_input` and nothing touched.
pub fn release(req: &ReleaseRequest<'_>, owner: &dyn RuntimeOwner, opts: &ReleaseOptions<'_>) -> ReleaseReport {
    let paths: Vec<String> = req.targets.iter().map(|t| t.path.clone()).collect();
    if !cfg!(target_os = "linux") {
        return ReleaseReport::denied(&paths, Reason::UnsupportedPlatform, &[], "release is supported on Linux only");
    }
    let helpers = match validate_paths(req.layout, req.thread_id, &paths) {
        Ok(h) => h,
        Err((r, own)) => return ReleaseReport::denied(&paths, r, &own, "a target path was refused"),
    };
    if !owner.supports_temporary_release() {
        return ReleaseReport::denied(&paths, Reason::OwnerUnsupported, &[], "runtime owner lacks temporary_release");
    }
    // Pending actions first: a queued command is about to run.
    let pending = owner.pending_actions(req.thread_id);
    if pending > 0 {
        return ReleaseReport::denied(&paths, Reason::PendingActions, &[], format!("{pending} action(s) pending"));
    }
    let running = owner.running_executions(req.thread_id);
    if running > 0 {
        return ReleaseReport::denied(&paths, Reason::ExecutionActive, &[], format!("{running} execution(s) running"));
    }

    // Check every target.
    let session_path = req.layout.session_dir(req.thread_id);
    let session = match open_session_dir(req.layout, req.thread_id) {
        Ok(fd) => fd,
        Err(r) => return ReleaseReport::denied(&paths, r, &[], "session directory cannot be opened"),
    };
    let session_dev = match Identity::of_fd(&session) {
        Ok(id) => id.dev,
        Err(e) => return ReleaseReport::denied(&paths, Reason::NotFound, &[], format!("session directory: {e}")),
    };
    let mut own: Vec<Option<Reason>> = vec![None; paths.len()];
    let mut checked = Vec::with_capacity(helpers.len());
    for (i, (helper, target)) in helpers.into_iter().zip(req.targets).enumerate() {
        let opened = match open_regular_beneath(session.as_fd(), &helper.rel) {
            Ok(o) => o,
            Err(r) => {
                own[i] = Some(r);
                continue;
            }
        };
        if opened.identity.dev != session_dev {
            own[i] = Some(Reason::RenameUnsupported);
            continue;
        }
        if !target.pin.matches_identity(&opened.identity) {
            own[i] = Some(Reason::ReadRequired);
            continue;
        }
        checked.push((i, Checked { helper, pin: target.pin, parent: opened.parent, file: opened.file }));
    }
    // Re-hash every target that passed its identity check, in one batch
    // (io_uring reads and both cores for large batches; see `rehash`).
    let jobs: Vec<HashJob<'_>> = checked.iter().map(|(_, c)| HashJob::pinned(c.file.as_fd(), c.pin.size)).collect();
    let hashes = rehash::hash_fds(&jobs, &RehashOptions::default());
    drop(jobs);
    for ((i, c), h) in checked.iter().zip(hashes) {
        if !matches!(&h, Ok(h) if h.matches(&c.pin)) {
            own[*i] = Some(Reason::ReadRequired);
        }
    }
    let checked: Vec<Checked> = checked.into_iter().map(|(_, c)| c).collect();
    if let Some(first) = own.iter().flatten().next().copied() {
        return ReleaseReport::denied(&paths, first, &own, "a target failed its check");
    }

    if let Err(e) = fault(opts, FaultPoint::BeforeScan) {
        return failed_untouched(&paths, format!("before scan: {e}"));
    }
    // Scan the backing roots with every target as an alias.
    let aliases: HashSet<_> = checked.iter().map(|c| c.pin.physical()).collect();
    let scan = scan_backing_roots(req.layout, opts.backend, opts.scan_limits, &aliases);
    if scan.failed_closed() {
        let reason = scan.reason.unwrap_or(Reason::BackingInaccessible);
        let at = scan.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        return ReleaseReport::denied(&paths, reason, &[], format!("backing-root scan failed closed at {at}"));
    }
    if let Err(e) = fault(opts, FaultPoint::AfterChecks) {
        return failed_untouched(&paths, format!("after checks: {e}"));
    }

    // The synchronous section.
    let q = match Quarantine::create(session.as_fd(), &session_path) {
        Ok(q) => q,
        Err(QuarantineError::RenameUnsupported) => {
            return ReleaseReport::denied(&paths, Reason::RenameUnsupported, &[], "RENAME_NOREPLACE unsupported")
        }
        Err(QuarantineError::Io(e)) => return failed_untouched(&paths, format!("quarantine: {e}")),
    };
    let intent = JournalIntent {
        version: 1,
        id: q.name.trim_start_matches(layout::RESERVED_PREFIX).to_owned(),
        workspace: req.layout.workspace().to_path_buf(),
        session_dir: session_path.clone(),
        quarantine_dir: q.path.clone(),
        targets: checked
            .iter()
            .enumerate()
            .map(|(i, c)| JournalTarget {
                file_path: PathBuf::from(&c.helper.path),
                quarantine_name: entry_name(i),
                pin: c.pin,
            })
            .collect(),
    };
    let mut journal = match Journal::begin(&req.layout.journal_dir(), &intent) {
        Ok(j) => j,
        Err(e) => {
            q.remove_if_empty(session.as_fd());
            return failed_untouched(&paths, format!("journal: {e}"));
        }
    };
    if let Err(e) = fault(opts, FaultPoint::AfterJournal { quarantine: &q.path }) {
        q.remove_if_empty(session.as_fd());
        let _ = journal.retire();
        return failed_untouched(&paths, format!("after journal: {e}"));
    }

    let mut files: Vec<TargetResult> = Vec::with_capacity(checked.len());
    let mut touched = false;
    let mut stopped = false;
    for (i, c) in checked.iter().enumerate() {
        let path = c.helper.as_path();
        let mut result = TargetResult {
            file_path: c.helper.path.clone(),
            outcome: Outcome::NotAttempted,
            reason: Some(TargetReason::StoppedAfterFailure.code().to_owned()),
            bytes_reclaimed: 0,
            quarantine_path: None,
        };
        if stopped {
            files.push(result);
            continue;
        }
        let qname = entry_name(i);
        let qpath = q.entry_path(&qname);
        let moved = fault(opts, FaultPoint::BeforeRename { index: i, path })
            .and_then(|()| rename_noreplace(c.parent.as_fd(), c.helper.name(), q.dir.as_fd(), &qname));
        if let Err(e) = moved {
            tracing::warn!(path = %c.helper.path, error = %e, "rename into quarantine failed");
            result.outcome = Outcome::Failed;
            result.reason = Some(TargetReason::IoError.code().to_owned());
            files.push(result);
            stopped = true;
            continue;
        }
        touched = true;
        let verdict = fault(opts, FaultPoint::AfterRename { index: i, path, quarantined: &qpath })
            .and_then(|()| recheck_captured(&q, &qname, &c.pin))
            .and_then(|v| {
                fault(opts, FaultPoint::AfterRecheck { index: i, quarantined: &qpath, verified: v.is_some() })?;
                Ok(v)
            });
        match verdict {
            Ok(Some(id)) => {
                let removed = journal.mark(&JournalMark::Verified { index: i }).and_then(|()| {
                    rustix::fs::unlinkat(q.dir.as_fd(), qname.as_str(), AtFlags::empty()).map_err(Into::into)
                });
                match removed {
                    Ok(()) => {
                        result.outcome = Outcome::Released;
                        result.reason = None;
                        result.bytes_reclaimed = id.allocated_bytes();
                        if let Err(e) = fault(opts, FaultPoint::AfterUnlink { index: i }) {
                            tracing::warn!(error = %e, "failure after unlink");
                            stopped = true;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(path = %c.helper.path, error = %e, "unlink failed");
                        restore(opts, &q, c, i, &qname, &qpath, &mut result, Some(TargetReason::IoError));
                        stopped = true;
                    }
                }
            }
            Ok(None) => {
                restore(opts, &q, c, i, &qname, &qpath, &mut result, None);
            }
            Err(e) => {
                tracing::warn!(path = %c.helper.path, error = %e, "recheck failed");
                restore(opts, &q, c, i, &qname, &qpath, &mut result, Some(TargetReason::IoError));
                stopped = true;
            }
        }
        files.push(result);
    }

    let _ = q.sync();
    let _ = rustix::fs::fsync(session.as_fd());
    if q.remove_if_empty(session.as_fd()) {
        if let Err(e) = journal.retire() {
            tracing::warn!(error = %e, "journal could not be retired");
        }
    } else {
        // Something stays in quarantine: the journal, marks included, must
        // stay durable for recovery.
        let _ = journal.sync();
    }
    let bytes_reclaimed = files.iter().map(|f| f.bytes_reclaimed).sum();
    let all_released = files.iter().all(|f| f.outcome == Outcome::Released);
    let status = if all_released {
        Status::Completed
    } else if touched {
        Status::Partial
    } else {
        Status::Failed
    };
    ReleaseReport { status, error_code: None, detail: None, touched, bytes_reclaimed, files }
}

fn failed_untouched(paths: &[String], detail: String) -> ReleaseReport {
    let files = paths
        .iter()
        .enumerate()
        .map(|(i, p)| TargetResult {
            file_path: p.clone(),
            outcome: if i == 0 { Outcome::Failed } else { Outcome::NotAttempted },
            reason: Some(
                if i == 0 { TargetReason::IoError } else { TargetReason::StoppedAfterFailure }.code().to_owned(),
            ),
            bytes_reclaimed: 0,
            quarantine_path: None,
        })
        .collect();
    ReleaseReport {
        status: Status::Failed,
        error_code: None,
        detail: Some(detail),
        touched: false,
        bytes_reclaimed: 0,
        files,
    }
}

/// Puts a captured object back under its name without overwriting, or
/// leaves it in quarantine and names it.
///
/// `failure` is set when an error (rather than a mismatch) led here: the
/// outcome is then `failed` when the object is back, `preserved` otherwise.
#[allow(clippy::too_many_arguments)]
fn restore(
    opts: &ReleaseOptions<'_>,
    q: &Quarantine,
    c: &Checked,
    index: usize,
    qname: &str,
    qpath: &Path,
    result: &mut TargetResult,
    failure: Option<TargetReason>,
) {
    let back = fault(opts, FaultPoint::BeforeRestore { index, path: c.helper.as_path() })
        .and_then(|()| rename_noreplace(q.dir.as_fd(), qname, c.parent.as_fd(), c.helper.name()));
    match back {
        Ok(()) => {
            let _ = rustix::fs::fsync(c.parent.as_fd());
            match failure {
                Some(r) => {
                    result.outcome = Outcome::Failed;
                    result.reason = Some(r.code().to_owned());
                }
                None => {
                    result.outcome = Outcome::Restored;
                    result.reason = Some(TargetReason::ReplacedDuringRelease.code().to_owned());
                }
            }
        }
        Err(e) => {
            let blocked = e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error());
            result.outcome = Outcome::Preserved;
            result.reason = Some(
                if blocked && failure.is_none() {
                    TargetReason::RestoreBlocked
                } else {
                    failure.unwrap_or(TargetReason::IoError)
                }
                .code()
                .to_owned(),
            );
            if blocked && failure.is_some() {
                result.reason = Some(TargetReason::RestoreBlocked.code().to_owned());
            }
            result.quarantine_path = Some(qpath.to_path_buf());
        }
    }
}
