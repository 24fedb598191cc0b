//! Step `capture` of a release, the synchronous section: a private quarantine and
//! a journal, then per target `renameat2(RENAME_NOREPLACE)` into the
//! quarantine, a recheck of the captured object, and `unlinkat` of the
//! verified pinned object, or a restore without overwriting, or the object
//! preserved and named.

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::check::{Checked, Opened};
use super::freed::Freed;
use super::{failed_untouched, fault, Outcome, ReleaseOptions, ReleaseReport, ReleaseRequest, TargetResult};
use crate::error::{Reason, TargetReason};
use crate::fault::FaultPoint;
use crate::journal::{DirIdentity, Journal, JournalIntent, JournalLock, JournalMark, JournalTarget};
use crate::layout;
use crate::no_space;
use crate::quarantine::{entry_name, rename_noreplace, Quarantine, QuarantineError};
use winx_release_kernel::hash::{fingerprint_fd, Fingerprint, HASH_CHUNK};
use winx_release_kernel::identity::{Identity, Pin, IDENTITY_MASK};

/// A release's quarantine and journal, once both exist.
pub(super) struct Run {
    pub(super) q: Quarantine,
    pub(super) journal: Journal,
    /// Why a restored target's name may not be durable (its directory's
    /// `fsync` failed): the journal then stays, for recovery.
    pub(super) unsynced: std::cell::RefCell<Option<String>>,
}

impl Run {
    /// Undoes a [`begin`] whose release goes no further (nothing moved):
    /// removes the empty quarantine (its removal made durable), then
    /// retires the journal. Where the quarantine cannot be removed the
    /// journal stays too, for recovery: a journal is retired only once its
    /// quarantine is gone.
    pub(super) fn abandon(self, opts: &ReleaseOptions<'_>, session: std::os::fd::BorrowedFd<'_>) {
        if self.q.remove_if_empty(session) && sync_dir(opts, session, &self.q.path).is_ok() {
            let _ = self.journal.retire_after_quarantine();
        }
    }
}

/// `fsync`s the directory `dir` (at `path`, for the fault point and
/// messages) whose entries a release changed.
///
/// # References
/// - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
pub(super) fn sync_dir(
    opts: &ReleaseOptions<'_>,
    dir: std::os::fd::BorrowedFd<'_>,
    path: &std::path::Path,
) -> io::Result<()> {
    fault(opts, FaultPoint::DirSync { dir: path })?;
    rustix::fs::fsync(dir).map_err(Into::into)
}

/// Creates the quarantine (proving `RENAME_NOREPLACE` works) and durably
/// writes the journal's intent. On failure nothing was touched.
pub(super) fn begin(
    req: &ReleaseRequest<'_>,
    opts: &ReleaseOptions<'_>,
    opened: &Opened,
) -> Result<Run, ReleaseReport> {
    let paths: Vec<String> = req.targets.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
    let session = opened.session.as_fd();
    // The journal directory's shared lock, before the quarantine exists: no
    // recovery sweeps or retires anything of this run while it is live.
    let jdir = req.layout.journal_dir();
    let failed = |what: &str, at: &std::path::Path, e: &io::Error| {
        failed_untouched(&paths, no_space::reason_of(e), no_space::detail(what, at, e))
    };
    let lock = match JournalLock::shared(&jdir) {
        Ok(l) => l,
        Err(e) => return Err(failed("journal lock", &jdir, &e)),
    };
    let q = match Quarantine::create(session, &opened.session_path) {
        Ok(q) => q,
        Err(QuarantineError::RenameUnsupported) => {
            return Err(ReleaseReport::denied(&paths, Reason::RenameUnsupported, &[], "RENAME_NOREPLACE unsupported"))
        }
        Err(QuarantineError::Io(e)) => return Err(failed("quarantine", &opened.session_path, &e)),
    };
    // The quarantine's identity, journaled so that recovery never takes
    // another directory at its path for it: without it, nothing moves.
    let quarantine_identity = match Identity::of_fd(&q.dir) {
        Ok(id) => DirIdentity::of(&id),
        Err(e) => {
            drop_empty(opts, &q, session);
            return Err(failed("quarantine", &q.path, &e));
        }
    };
    let intent = JournalIntent {
        version: 1,
        id: q.name.trim_start_matches(layout::RESERVED_PREFIX).to_owned(),
        workspace: req.layout.workspace().to_path_buf(),
        session_dir: opened.session_path.clone(),
        quarantine_dir: q.path.clone(),
        quarantine_identity: Some(quarantine_identity),
        targets: opened
            .targets
            .iter()
            .enumerate()
            .map(|(i, c)| JournalTarget {
                file_path: PathBuf::from(&c.helper.path),
                quarantine_name: entry_name(i),
                pin: c.pin,
            })
            .collect(),
    };
    // Two fsyncs (the journal file, then its directory): the intent must be
    // durable before the first rename, so recovery finds every moved byte.
    let journal = match Journal::begin(lock, &jdir, &intent) {
        Ok(j) => j,
        Err(e) => {
            drop_empty(opts, &q, session);
            return Err(failed("journal", &jdir, &e));
        }
    };
    if let Err(e) = fault(opts, FaultPoint::AfterJournal { quarantine: &q.path }) {
        drop_empty(opts, &q, session);
        let _ = journal.retire();
        return Err(failed("after journal", &jdir, &e));
    }
    Ok(Run { q, journal, unsynced: Default::default() })
}

/// Removes the quarantine of a run that moved nothing. Its removal is
/// synced when it can be; an empty quarantine that a crash brings back
/// holds nothing, and the orphan sweep of `winx-release recover
/// --workspace W` removes it.
fn drop_empty(opts: &ReleaseOptions<'_>, q: &Quarantine, session: std::os::fd::BorrowedFd<'_>) {
    if q.remove_if_empty(session) {
        if let Err(e) = sync_dir(opts, session, &q.path) {
            tracing::warn!(quarantine = %q.path.display(), error = %e, "an empty quarantine's removal could not be synced");
        }
    }
}

/// Where one target is captured.
struct Place<'a> {
    q: &'a Quarantine,
    target: &'a Checked,
    /// Its index among the checked targets (its quarantine entry).
    index: usize,
    qname: String,
    qpath: PathBuf,
    /// Set when a restore's `fsync` failed (see [`Run::unsynced`]).
    unsynced: &'a std::cell::RefCell<Option<String>>,
    /// The watches that tell what each removal freed.
    freed: &'a Freed,
}

/// Captures every target in order; after a failure the rest are
/// `not_attempted`. Returns the per-target results and whether any target
/// moved. A released target's `bytes_reclaimed` is 0 here: `freed` watches
/// it, and [`Freed::settle`] sets it once the release closed its
/// descriptors.
pub(super) fn capture_all(
    run: &mut Run,
    opts: &ReleaseOptions<'_>,
    targets: &[Checked],
    freed: &Freed,
) -> (Vec<TargetResult>, bool) {
    let mut files: Vec<TargetResult> = Vec::with_capacity(targets.len());
    // One read buffer for every recheck.
    let mut buf = vec![0u8; HASH_CHUNK];
    let mut stopped = false;
    let mut touched = false;
    for (i, c) in targets.iter().enumerate() {
        let mut result = TargetResult {
            file_path: c.helper.path.to_string_lossy().into_owned(),
            outcome: Outcome::NotAttempted,
            reason: Some(TargetReason::StoppedAfterFailure.into()),
            bytes_reclaimed: 0,
            quarantine_path: None,
        };
        if !stopped {
            let qname = entry_name(i);
            let Run { q, journal, unsynced } = &mut *run;
            let place =
                Place { q, target: c, index: i, qpath: q.entry_path(&qname), qname, unsynced: &*unsynced, freed };
            let step = capture_one(journal, opts, &place, &mut buf, &mut result);
            touched |= step.moved;
            stopped = !step.go_on;
        }
        files.push(result);
    }
    (files, touched)
}

/// How capturing one target went.
struct Step {
    /// The target left its name (it may be back by now).
    moved: bool,
    /// The run goes on to the next target.
    go_on: bool,
}

/// Moves one target into quarantine, rechecks it, and unlinks it or puts it
/// back.
fn capture_one(
    journal: &mut Journal,
    opts: &ReleaseOptions<'_>,
    p: &Place<'_>,
    buf: &mut [u8],
    result: &mut TargetResult,
) -> Step {
    let (c, i, q) = (p.target, p.index, p.q);
    let path = c.helper.as_path();
    let moved = fault(opts, FaultPoint::BeforeRename { index: i, path })
        .and_then(|()| rename_noreplace(c.parent.as_fd(), c.helper.name(), q.dir.as_fd(), &p.qname));
    if let Err(e) = moved {
        tracing::warn!(path = %c.helper.path.display(), error = %e, "rename into quarantine failed");
        result.outcome = Outcome::Failed;
        result.reason = Some(no_space::reason_of(&e).into());
        return Step { moved: false, go_on: false };
    }
    let stop = Step { moved: true, go_on: false };
    let verdict = fault(opts, FaultPoint::AfterRename { index: i, path, quarantined: &p.qpath })
        .and_then(|()| recheck_captured(q, &p.qname, &c.pin, c.fingerprint, buf))
        .and_then(|v| {
            fault(opts, FaultPoint::AfterRecheck { index: i, quarantined: &p.qpath, verified: v.is_some() })?;
            Ok(v)
        });
    match verdict {
        Ok(Some(id)) => {
            let removed = journal.mark(&JournalMark::Verified { index: i }).and_then(|()| {
                // What the removal frees is known once the release closed
                // its descriptors (`Freed::settle`).
                p.freed.watch(i, c.file.as_fd(), &id);
                rustix::fs::unlinkat(q.dir.as_fd(), p.qname.as_str(), AtFlags::empty()).map_err(Into::into)
            });
            match removed {
                Ok(()) => {
                    result.outcome = Outcome::Released;
                    result.reason = None;
                    if let Err(e) = fault(opts, FaultPoint::AfterUnlink { index: i }) {
                        tracing::warn!(error = %e, "failure after unlink");
                        return stop;
                    }
                    Step { moved: true, go_on: true }
                }
                Err(e) => {
                    tracing::warn!(path = %c.helper.path.display(), error = %e, "unlink failed");
                    restore(opts, p, result, Some(no_space::reason_of(&e)));
                    stop
                }
            }
        }
        Ok(None) => {
            restore(opts, p, result, None);
            Step { moved: true, go_on: true }
        }
        Err(e) => {
            tracing::warn!(path = %c.helper.path.display(), error = %e, "recheck failed");
            restore(opts, p, result, Some(no_space::reason_of(&e)));
            stop
        }
    }
}

/// Re-identifies a captured object and reads all its bytes again; returns
/// its identity when it is exactly the pinned object: the pinned inode, one
/// link, the pinned size, and bytes whose BLAKE3 is the check's
/// `fingerprint` (see `check.rs`). Without a fingerprint nothing verifies.
fn recheck_captured(
    q: &Quarantine,
    qname: &str,
    pin: &Pin,
    fingerprint: Option<Fingerprint>,
    buf: &mut [u8],
) -> io::Result<Option<Identity>> {
    let Some(fingerprint) = fingerprint else { return Ok(None) };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(q.dir.as_fd(), qname, flags, Mode::empty()) {
        Ok(fd) => fd,
        // A symlink, or something else that cannot be opened as a file: not
        // the pinned object.
        Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::NXIO) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let id = Identity::of_fd(&fd)?;
    if !id.is_regular() || !pin.same_object(&id) || id.nlink != 1 || id.size != pin.size {
        return Ok(None);
    }
    // One file, read once from the start with `pread` on this thread (a
    // ring for a single file costs its set-up and saves nothing), up to one
    // byte past the pinned size.
    let (print, len) = fingerprint_fd(fd.as_fd(), buf, pin.size)?;
    if len != pin.size || print != fingerprint {
        return Ok(None);
    }
    // The name must still denote the descriptor we verified.
    let again = rustix::fs::statx(q.dir.as_fd(), qname, AtFlags::SYMLINK_NOFOLLOW, IDENTITY_MASK)?;
    if Identity::from_statx(&again).physical() != id.physical() {
        return Ok(None);
    }
    Ok(Some(id))
}

/// Puts a captured object back under its name without overwriting, or
/// leaves it in quarantine and names it.
///
/// `failure` is set when an error (rather than a mismatch) led here: the
/// outcome is then `failed` when the object is back, `preserved` otherwise.
fn restore(opts: &ReleaseOptions<'_>, p: &Place<'_>, result: &mut TargetResult, failure: Option<TargetReason>) {
    let c = p.target;
    let back = fault(opts, FaultPoint::BeforeRestore { index: p.index, path: c.helper.as_path() })
        .and_then(|()| rename_noreplace(p.q.dir.as_fd(), &p.qname, c.parent.as_fd(), c.helper.name()));
    match back {
        Ok(()) => {
            // One fsync per restored target (its parent directory): the
            // name is back durably before the response says so. Where it
            // fails, the journal stays (`finish`), so that a recovery after
            // a crash finds the object wherever it then is.
            if let Err(e) = sync_dir(opts, c.parent.as_fd(), c.helper.as_path()) {
                tracing::warn!(path = %c.helper.path.display(), error = %e, "a restored target's directory could not be synced");
                p.unsynced.borrow_mut().get_or_insert(format!("{}: {e}", c.helper.path.display()));
            }
            match failure {
                Some(r) => {
                    result.outcome = Outcome::Failed;
                    result.reason = Some(r.into());
                }
                None => {
                    result.outcome = Outcome::Restored;
                    result.reason = Some(TargetReason::ReplacedDuringRelease.into());
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
                .into(),
            );
            if blocked && failure.is_some() {
                result.reason = Some(TargetReason::RestoreBlocked.into());
            }
            result.quarantine_path = Some(p.qpath.clone());
        }
    }
}
