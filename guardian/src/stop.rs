//! The guardian as a whole: `guardian_status`, and `stop` with the one
//! rule of what blocks it.

use std::sync::atomic::Ordering;

use winx_release_protocol::messages::{GuardianStatus, RunningExecution, SessionSummary, StopReply};

use crate::sessions::Guardian;
use crate::sync::lock;

/// What would block a stop: every execution of this guardian that is
/// running or lingering (its leader exited while something it started may
/// still run), adopted ones included; a thread's or a background shell
/// counts while it is busy (an idle shell does not). A queued command is
/// not listed: it waits behind one that is. The one rule `stop` and
/// `guardian_status` use.
pub fn stop_blockers(g: &Guardian) -> Vec<RunningExecution> {
    let mut v: Vec<RunningExecution> = g
        .runtime
        .executions()
        .iter()
        .filter(|e| e.state().is_unresolved() && !g.runtime.is_idle_shell(e))
        .map(|e| RunningExecution {
            // A busy shell is named by the command typed into it last.
            command_id: g.shells.last_command_of(&e.id).unwrap_or_else(|| e.id.clone()),
            thread_id: e.thread.clone(),
            workspace: e.workspace.display().to_string(),
            state: e.state().into(),
            background: e.background,
            adopted: e.adopted,
        })
        .collect();
    v.sort_by(|a, b| a.command_id.cmp(&b.command_id));
    v
}

/// The `guardian_status` reply.
pub fn guardian_status(g: &Guardian) -> GuardianStatus {
    let running = stop_blockers(g);
    let mut sessions: Vec<SessionSummary> = g
        .sessions()
        .iter()
        .map(|s| SessionSummary {
            workspace: s.layout.workspace().display().to_string(),
            thread_id: s.thread.clone(),
            session_dir: s.session_dir.display().to_string(),
            mode_name: lock(&s.policy).as_ref().map(|p| p.mode_name.clone()),
            running: g.runtime.executions_of(&s.key).iter().filter(|e| e.state().is_unresolved()).count(),
        })
        .collect();
    sessions.sort_by(|a, b| (&a.workspace, &a.thread_id).cmp(&(&b.workspace, &b.thread_id)));
    GuardianStatus {
        guardian: concat!("winx-release-guardian/", env!("CARGO_PKG_VERSION")).to_owned(),
        pid: u64::from(std::process::id()),
        instance: g.instance.clone(),
        liveness: g.runtime.liveness_mode().as_str().to_owned(),
        data_dir: g.data_dir.display().to_string(),
        sessions,
        running,
    }
}

/// `stop`: unless `force`, refused while [`stop_blockers`] finds anything
/// (the message names each by command id and thread); else the guardian's
/// stop flag is set, as SIGTERM sets it: it stops accepting, finishes what
/// is in flight (this reply included) and exits. Nothing is signalled.
pub fn stop(g: &Guardian, force: bool) -> Result<StopReply, String> {
    let running = stop_blockers(g);
    if !running.is_empty() && !force {
        let named: Vec<String> =
            running.iter().map(|r| format!("{} (thread {}, {:?})", r.command_id, r.thread_id, r.state)).collect();
        return Err(format!(
            "{} execution(s) still run: {}; wait for them, or stop anyway with --force (they keep running)",
            running.len(),
            named.join(", ")
        ));
    }
    tracing::info!(force, running = running.len(), "stop asked over the socket");
    g.shutdown.store(true, Ordering::SeqCst);
    Ok(StopReply { stopping: true, running })
}
