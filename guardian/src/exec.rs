//! Commands of a session: admitted under its barrier, queued behind its
//! running foreground command, run as executions of the engine's runtime.

use std::sync::Arc;

use winx_release_protocol::messages::{CommandReply, CommandReport, ExecutionState};
use winx_release_runtime::{ExecState, Execution, Spawn};

use crate::sessions::{Guardian, OwnedSession};
use crate::sync::lock;

/// Submits a command. The caller holds the session's admission barrier.
pub fn submit(
    g: &Arc<Guardian>,
    session: &Arc<OwnedSession>,
    command: &str,
    background: bool,
) -> std::io::Result<Arc<Execution>> {
    let e = g.runtime.submit(Spawn {
        thread: session.thread.clone(),
        workspace: session.layout.workspace().to_path_buf(),
        cwd: None,
        session: session.key,
        command: command.to_owned(),
        background,
        env: vec![("WINX_TEMP_DIR".into(), session.session_dir.clone().into())],
    })?;
    let mut st = lock(&session.state);
    if !background && (st.fg_running.is_some() || !st.fg_queue.is_empty()) {
        st.fg_queue.push_back(e.clone());
        return Ok(e);
    }
    if !background {
        st.fg_running = Some(e.clone());
    }
    drop(st);
    if g.runtime.run(&e).is_err() && !background {
        // It never ran: the foreground slot is free again.
        free_and_start_next(g, session, &e);
    }
    Ok(e)
}

/// Called by the runtime when `e`'s leader exited (or it failed to
/// start): frees the foreground slot and starts the next queued command,
/// under the admission barrier (so nothing starts while a release runs).
pub fn leader_exited(g: &Arc<Guardian>, e: &Arc<Execution>) {
    if e.background {
        return;
    }
    let Some(key) = e.session else { return };
    let Some(session) = g.session_by_key(&key) else { return };
    let _admission = session.admission.enter();
    free_and_start_next(g, &session, e);
}

/// Frees `e`'s foreground slot and starts the next queued commands until
/// one runs. The caller holds the session's admission barrier.
fn free_and_start_next(g: &Arc<Guardian>, session: &OwnedSession, e: &Arc<Execution>) {
    let mut ended = e.clone();
    loop {
        let next = {
            let mut st = lock(&session.state);
            if st.fg_running.as_ref().is_some_and(|r| Arc::ptr_eq(r, &ended)) {
                st.fg_running = None;
            }
            if st.fg_running.is_some() {
                return;
            }
            let next = st.fg_queue.pop_front();
            st.fg_running.clone_from(&next);
            next
        };
        let Some(next) = next else { return };
        if g.runtime.run(&next).is_ok() {
            return;
        }
        ended = next;
    }
}

/// The `exec` / `exec_status` reply of `e`. `status` is `running` while
/// anything it started runs, `completed` only once it is resolved.
pub fn reply(e: &Execution) -> CommandReply {
    let st = e.state();
    let (status, exit_code) = (ExecutionState::from(st).status(), st.exit_code());
    let (output, output_truncated) = e.output_tail();
    let (leader_exited, leader_exit_code) = match st {
        // The shell is done; processes it left behind still run.
        ExecState::Lingering(code) => (e.leader_exited(), code.map(i64::from)),
        _ => (false, None),
    };
    CommandReply {
        command: CommandReport { status, command_id: e.id.clone(), exit_code, output, output_truncated },
        leader_exit_code,
        leader_exited,
        adopted: e.adopted,
    }
}
