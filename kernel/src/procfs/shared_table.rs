//! One process-table snapshot for every liveness answer waiting at once: a
//! group commit of [`snapshot`](super::snapshot), as `shared.rs` is of the
//! holder sweep.
//!
//! A snapshot reads every process's `stat` and owner; liveness answers of
//! releases running at once (one per session, each under its own admission
//! barrier) read the same table. So one snapshot runs at a time: a caller
//! that asks while one runs waits for the next, and gets its own copy of
//! that one's table. No caller is answered by a snapshot that started
//! before it asked: every read of the table it gets came after its ask,
//! which is all that a snapshot of its own proves (and two asks in a row,
//! the union's "two looks", get two snapshots the second of which started
//! after the first was answered).
//!
//! Callers may ask for the processes started since a bound
//! ([`snapshot_shared_since`]): a flight reads since the lowest bound of
//! the callers it serves, so each gets at least what it asked for.
//!
//! A snapshot that fails fails every caller it serves (with the same
//! message); a leader that panics lets the next caller lead.

use std::sync::{Arc, Condvar, Mutex};

use super::table::{snapshot_since, ProcTable};
use super::ProcError;
use crate::sys::lock;

/// A finished snapshot: its flight's number, its bound and what it gave.
type Landed = (u64, u64, Arc<Result<ProcTable, String>>);

struct State {
    /// Flights started so far (the running one included).
    started: u64,
    /// Whether a flight runs now.
    running: bool,
    /// The last flight that landed.
    landed: Option<Landed>,
    /// The lowest bound asked for by the callers that wait for the next
    /// flight (`u64::MAX`: none).
    next_since: u64,
}

static STATE: Mutex<State> = Mutex::new(State { started: 0, running: false, landed: None, next_since: u64::MAX });
static DONE: Condvar = Condvar::new();

/// Clears `running` when the leader leaves, also by a panic.
struct Landing;

impl Drop for Landing {
    fn drop(&mut self) {
        lock(&STATE).running = false;
        DONE.notify_all();
    }
}

/// A snapshot of every process ([`snapshot`](super::snapshot)) whose
/// reads all started after this call, shared with the callers that asked
/// at the same time.
pub fn snapshot_shared() -> Result<ProcTable, ProcError> {
    snapshot_shared_since(0)
}

/// [`snapshot_shared`] of the processes started at or after `since`
/// ([`snapshot_since`]): the table may also hold older ones, and is
/// complete from its [`ProcTable::since`], which is at most `since`.
pub fn snapshot_shared_since(since: u64) -> Result<ProcTable, ProcError> {
    let mut g = lock(&STATE);
    // The first flight that starts after now: the next one, which reads
    // since this caller's bound or lower.
    let mut need = g.started + 1;
    g.next_since = g.next_since.min(since);
    loop {
        let landed = g.landed.as_ref().filter(|(n, _, _)| *n >= need).map(|(_, from, r)| (*from, Arc::clone(r)));
        if let Some((from, r)) = landed {
            if from <= since {
                drop(g);
                return copy(&r);
            }
            // A later flight than the one that read for this caller (it
            // slept through that one's landing) may have read since a
            // higher bound: wait for the next, which reads since this one.
            need = g.started + 1;
            g.next_since = g.next_since.min(since);
        }
        if !g.running {
            g.running = true;
            g.started += 1;
            let n = g.started;
            let from = g.next_since.min(since);
            g.next_since = u64::MAX;
            drop(g);
            let landing = Landing;
            let r = snapshot_since(from);
            let shared = Arc::new(r.as_ref().map(copy_table).unwrap_or_else(|e| Err(e.to_string())));
            g = lock(&STATE);
            g.landed = Some((n, from, shared));
            drop(g);
            drop(landing);
            return r;
        }
        g = DONE.wait(g).unwrap_or_else(|e| e.into_inner());
    }
}

/// The caller's own copy of a landed table (its own `/proc` handle).
fn copy(r: &Result<ProcTable, String>) -> Result<ProcTable, ProcError> {
    match r {
        Ok(t) => copy_table(t).map_err(|e| ProcError::Unavailable(std::io::Error::other(e))),
        Err(e) => Err(ProcError::Unavailable(std::io::Error::other(e.clone()))),
    }
}

fn copy_table(t: &ProcTable) -> Result<ProcTable, String> {
    let proc = t.proc.try_clone().map_err(|e| format!("/proc cannot be read: {e}"))?;
    Ok(ProcTable {
        proc,
        entries: t.entries.clone(),
        kernel_threads_passed: t.kernel_threads_passed,
        since: t.since,
        older_passed: t.older_passed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Callers at once get tables of the same processes, each a snapshot
    /// of its own start or later; this process is in every one.
    #[test]
    fn callers_at_once_share_a_snapshot_that_started_after_them() {
        let _settling = super::super::settling(false);
        let me = std::process::id() as i32;
        let tables: Vec<ProcTable> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6).map(|_| s.spawn(|| snapshot_shared().unwrap())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for t in &tables {
            assert!(t.get(me).is_some());
        }
        // A child started after a caller's ask is in the table it gets.
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        let t = snapshot_shared().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(t.get(pid).is_some(), "a table older than the ask");
    }
}
