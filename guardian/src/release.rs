//! The `release` op: a release of a thread's helpers under the admission
//! barriers of every session of the thread, with the runtime's answer of
//! what of the thread still runs.

use std::sync::Arc;

use crate::sync::lock;
use winx_release_engine::release::{release, ReleaseOptions, ReleaseReport, ReleaseRequest, Scanner, Target};
use winx_release_engine::Reason;
use winx_release_protocol::messages::{ok_line, ReleaseReply};
use winx_release_runtime::OwnerAnswer;

use crate::sessions::{layout_of, Guardian, OpError, OwnedSession};

/// Releases `targets` of `thread` in `workspace` (a dry run when
/// `dry_run`), answering request `id`.
pub(crate) fn release_op(
    g: &Arc<Guardian>,
    id: u64,
    workspace: &str,
    thread: &str,
    targets: &[Target],
    dry_run: bool,
) -> Result<Vec<u8>, OpError> {
    let layout = layout_of(g, workspace, thread)?;
    let paths: Vec<String> = targets.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
    let Some(session) = g.session(&layout, thread) else {
        let report =
            ReleaseReport::denied(&paths, Reason::OwnerUnavailable, &[], "session is not owned by this guardian");
        return Ok(ok_line(id, &ReleaseReply { report }));
    };
    let t0 = std::time::Instant::now();
    // Every session of the thread: one whose directory was removed or moved
    // and made again (a new inode, a new session) still has the shells,
    // queues and commands its thread started there.
    let mut sessions: Vec<Arc<OwnedSession>> = g.sessions().into_iter().filter(|s| s.thread == thread).collect();
    if !sessions.iter().any(|s| s.key == session.key) {
        sessions.push(session.clone());
    }
    // Barriers are taken in one order (by key) by every release that takes
    // more than one, so that two never wait for each other.
    sessions.sort_by_key(|s| (s.key.dev, s.key.ino, s.key.born));
    let (report, liveness_us) = {
        let mut barriers: Vec<_> = sessions.iter().map(|s| (s.key, s.admission.enter())).collect();
        // Under the barriers nothing of the thread starts: what runs now
        // can only end.
        let pending = sessions.iter().map(|s| lock(&s.state).pending()).sum();
        let t1 = std::time::Instant::now();
        let liveness = if pending > 0 { Default::default() } else { g.runtime.thread_liveness(&session.key, thread) };
        let liveness_us = t1.elapsed().as_micros();
        let owner = OwnerAnswer { liveness, pending, exempt: g.in_use_exempt(), session: Some(session.key) };
        // The request's own path to the session (which may differ from the
        // one the session was first opened through: a bind mount).
        let req = ReleaseRequest { layout: &layout, thread_id: thread, targets };
        let opts = ReleaseOptions { scanner: Scanner::Shared(&g.scanner), dry_run, ..ReleaseOptions::default() };
        let at = barriers.iter().position(|(k, _)| *k == session.key).unwrap_or(0);
        let (_, admission) = barriers.swap_remove(at);
        (release(&req, &admission, &owner, &opts), liveness_us)
    };
    tracing::info!(thread = %thread, status = ?report.status, bytes = report.bytes_reclaimed, "release");
    tracing::debug!(total_us = t0.elapsed().as_micros(), liveness_us, "release op (us)");
    Ok(ok_line(id, &ReleaseReply { report }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use winx_release_engine::layout::Layout;
    use winx_release_engine::read::{read_pinned, Keep};
    use winx_release_engine::release::Target;

    use super::release_op;
    use crate::exec;

    /// A thread whose session directory was moved away and made again (the
    /// next registration makes it: a new inode, a new session) keeps the
    /// command it started before: a release of a helper in the new
    /// directory is refused `execution_active` while it runs.
    #[test]
    fn a_session_directory_made_again_still_counts_the_threads_command() {
        let (data, g) = crate::sessions::tests::guardian();
        let g = Arc::new(g);
        let ws = tempfile::tempdir().unwrap();
        let wsp = ws.path().canonicalize().unwrap();
        let layout = Layout::new(&wsp, data.path()).unwrap();
        let first = g.register(layout.clone(), "t").unwrap();
        let stop = wsp.join("stop");
        // Also ends once the workspace is gone (a test that ends first
        // leaves no loop behind).
        let command = format!("while [ ! -e '{}' ] && [ -d '{}' ]; do sleep 0.05; done", stop.display(), wsp.display());
        {
            let _barrier = first.admission.enter();
            exec::submit(&g, &first, &command, true).unwrap();
        }
        let dir = layout.session_dir("t");
        std::fs::rename(&dir, wsp.join("moved-away")).unwrap();
        let second = g.register(layout.clone(), "t").unwrap();
        assert_ne!(first.key, second.key);
        let h = dir.join("h.py");
        std::fs::write(&h, "print(1)\n").unwrap();
        let read = read_pinned(&dir, &h, Keep::Text(4096)).unwrap();
        let release = |g: &Arc<crate::sessions::Guardian>| {
            let line = release_op(g, 1, wsp.to_str().unwrap(), "t", &[Target::new(&h, read.pin)], false);
            serde_json::from_slice::<serde_json::Value>(&line.unwrap()).unwrap()
        };
        let v = release(&g);
        assert_eq!(v["report"]["status"], "denied", "{v}");
        assert_eq!(v["report"]["errorCode"], "execution_active", "{v}");
        assert!(h.exists());
        // Once the command ends, the release goes through.
        std::fs::write(&stop, b"").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut v = release(&g);
        while v["report"]["status"] != "completed" && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
            v = release(&g);
        }
        assert_eq!(v["report"]["status"], "completed", "{v}");
        assert!(!h.exists());
    }

    /// The session is looked up by its path and the release opens that path
    /// again: a directory renamed into place between the two (another
    /// thread's) must not let the release through while this thread's
    /// command runs.
    #[test]
    fn a_directory_renamed_into_place_meanwhile_does_not_hide_the_threads_command() {
        let (data, g) = crate::sessions::tests::guardian();
        let g = Arc::new(g);
        let ws = tempfile::tempdir().unwrap();
        let wsp = ws.path().canonicalize().unwrap();
        let layout = Layout::new(&wsp, data.path()).unwrap();
        let busy = g.register(layout.clone(), "t1").unwrap();
        let idle = g.register(layout.clone(), "t2").unwrap();
        let stop = wsp.join("stop");
        // Also ends once the workspace is gone (a test that ends first
        // leaves no loop behind).
        let command = format!("while [ ! -e '{}' ] && [ -d '{}' ]; do sleep 0.05; done", stop.display(), wsp.display());
        {
            let _barrier = busy.admission.enter();
            exec::submit(&g, &busy, &command, true).unwrap();
        }
        let (d1, d2, aside) = (layout.session_dir("t1"), layout.session_dir("t2"), wsp.join("aside"));
        let h = d1.join("h.py");
        std::fs::write(&h, "print(1)\n").unwrap();
        let read = read_pinned(&d1, &h, Keep::Text(4096)).unwrap();
        // t1's name names t2's directory while the release looks it up.
        std::fs::rename(&d1, &aside).unwrap();
        std::fs::rename(&d2, &d1).unwrap();
        let held = idle.admission.enter();
        let worker = {
            let (g, w, t) = (g.clone(), wsp.to_str().unwrap().to_owned(), Target::new(&h, read.pin));
            std::thread::spawn(move || release_op(&g, 1, &w, "t1", &[t], false).unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        std::fs::rename(&d1, &d2).unwrap();
        std::fs::rename(&aside, &d1).unwrap();
        drop(held);
        let v: serde_json::Value = serde_json::from_slice(&worker.join().unwrap()).unwrap();
        std::fs::write(&stop, b"").unwrap();
        assert_eq!(v["report"]["status"], "denied", "{v}");
        assert!(h.exists(), "{v}");
    }
}
