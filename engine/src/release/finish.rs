//! Step `finish` of a release: durability, then the report.
//!
//! # Fsyncs of one release
//! Happy path (every target released), three here and two in the
//! frontend's receipt (docs/DESIGN.md argues each):
//! 1. the journal file (`fdatasync`), and 2. the journal directory, when
//!    the intent is written (`capture::begin`): recovery must find every
//!    moved byte. The directory `fsync` is group-committed: concurrent
//!    releases share one (`durable::fsync_dir`);
//! 3. the session directory, after `Quarantine::remove_if_empty`: the
//!    moves out of the session and the quarantine's removal are durable
//!    before the journal is removed and before the answer (and so the
//!    receipt) says `released`. When that `fsync` (or a restored target's
//!    directory's) fails, the journal is not retired but synced, and the
//!    report's `detail` says so: the outcomes hold now, and a recovery
//!    after a crash finds the objects wherever they then are.
//!
//! Not fsynced: the quarantine directory when it was removed (its removal
//! needs it empty, and a filesystem that kept the removal without the
//! unlinks it depended on would not be consistent), and the journal's
//! removal (`Journal::retire_after_quarantine`: a journal that comes back
//! after a power loss names a quarantine that is gone, and recovery
//! retires it).
//!
//! When something stays in quarantine: the quarantine directory, the
//! session directory, and the journal file's marks. Plus one per restored
//! target (its parent directory, `capture::restore`). Journal marks are not
//! fsynced one by one (see `Journal::mark`).

use std::os::fd::{AsFd, OwnedFd};

use super::capture::{sync_dir, Run};
use super::{Outcome, ReleaseOptions, ReleaseReport, Status, TargetResult};

/// Makes the run durable, retires its journal when nothing stays in
/// quarantine and everything it did is durable, and builds the report.
pub(super) fn finish(
    run: Run,
    opts: &ReleaseOptions<'_>,
    session: &OwnedFd,
    files: Vec<TargetResult>,
    touched: bool,
) -> ReleaseReport {
    let Run { q, journal, unsynced } = run;
    let mut unsynced = unsynced.into_inner();
    let removed = q.remove_if_empty(session.as_fd());
    if removed {
        if let Err(e) = sync_dir(opts, session.as_fd(), q.path.parent().unwrap_or(&q.path)) {
            unsynced.get_or_insert(format!("session directory of {}: {e}", q.path.display()));
        }
    }
    if removed && unsynced.is_none() {
        if let Err(e) = journal.retire_after_quarantine() {
            tracing::warn!(error = %e, "journal could not be retired");
        }
    } else {
        // Something stays in quarantine, or a move may not be durable: the
        // journal, marks included, must stay durable for recovery.
        let _ = q.sync();
        let _ = rustix::fs::fsync(session.as_fd());
        if let Err(e) = journal.sync() {
            tracing::warn!(error = %e, "the journal could not be synced");
        }
    }
    let detail = unsynced.map(|why| {
        tracing::warn!(%why, "a release's moves could not be made durable; its journal stays");
        format!(
            "a directory could not be synced ({why}): the outcomes hold now but may not survive a crash; the \
             release's journal stays for `winx-release recover`"
        )
    });
    let bytes_reclaimed = files.iter().map(|f| f.bytes_reclaimed).sum();
    let all_released = files.iter().all(|f| f.outcome == Outcome::Released);
    let status = if all_released {
        Status::Completed
    } else if touched {
        Status::Partial
    } else {
        Status::Failed
    };
    ReleaseReport { status, error_code: None, detail, touched, bytes_reclaimed, files }
}
