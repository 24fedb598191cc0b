//! Step `finish` of a release: durability, then the report.
//!
//! # Fsyncs of one release
//! Happy path (every target released), three here and two in the
//! frontend's receipt (docs/DESIGN.md argues each):
//! 1. the journal file (`fdatasync`), and 2. the journal directory, when
//!    the intent is written (`capture::begin`): recovery must find every
//!    moved byte. The directory `fsync` is group-committed: concurrent
//!    releases share one (`durable::fsync_dir`);
//! 3. the session directory, inside `Quarantine::remove_if_empty`: the
//!    moves out of the session and the quarantine's removal are durable
//!    before the journal is removed and before the answer (and so the
//!    receipt) says `released`.
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

use super::capture::Run;
use super::{Outcome, ReleaseReport, Status, TargetResult};

/// Makes the run durable, retires its journal when nothing stays in
/// quarantine, and builds the report.
pub(super) fn finish(run: Run, session: &OwnedFd, files: Vec<TargetResult>, touched: bool) -> ReleaseReport {
    let Run { q, journal } = run;
    if q.remove_if_empty(session.as_fd()) {
        if let Err(e) = journal.retire_after_quarantine() {
            tracing::warn!(error = %e, "journal could not be retired");
        }
    } else {
        let _ = q.sync();
        let _ = rustix::fs::fsync(session.as_fd());
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
