//! Step 10 of a release: durability, then the report.
//!
//! # Fsyncs of one release
//! Happy path (every target released), five in all:
//! 1. the journal file, and 2. the journal directory, when the intent is
//!    written (`capture::begin`): recovery must find every moved byte;
//! 3. the quarantine directory: the unlinks in it (and anything preserved
//!    there) are durable;
//! 4. the session directory, inside `Quarantine::remove_if_empty`: the
//!    moves out of the session and the quarantine's removal are durable
//!    (when the quarantine stays, the session is fsynced here instead);
//! 5. the journal directory, when the journal is retired; or, when
//!    something stays in quarantine, the journal file's marks instead.
//!
//! Plus one per restored target (its parent directory, `capture::restore`).
//! Journal marks are not fsynced one by one (see `Journal::mark`).

use std::os::fd::{AsFd, OwnedFd};

use super::capture::Run;
use super::{Outcome, ReleaseReport, Status, TargetResult};

/// Makes the run durable, retires its journal when nothing stays in
/// quarantine, and builds the report.
pub(super) fn finish(run: Run, session: &OwnedFd, files: Vec<TargetResult>, touched: bool) -> ReleaseReport {
    let Run { q, journal } = run;
    let _ = q.sync();
    if q.remove_if_empty(session.as_fd()) {
        if let Err(e) = journal.retire() {
            tracing::warn!(error = %e, "journal could not be retired");
        }
    } else {
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
