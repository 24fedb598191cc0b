//! `status`: what the guardian knows of a thread's session, its executions
//! and its recorded mode.

use std::sync::Arc;

use winx_release_protocol::messages::{ok_line, ExecutionSummary, StatusReply};

use crate::sessions::{layout_of, Guardian, OpError};
use crate::sync::lock;

/// Answers `status` for `thread` in `workspace`.
pub(crate) fn status_op(g: &Arc<Guardian>, id: u64, workspace: &str, thread: &str) -> Result<Vec<u8>, OpError> {
    let layout = layout_of(g, workspace, thread)?;
    let Some(s) = g.session(&layout, thread) else {
        let reply = StatusReply {
            known: false,
            running: 0,
            pending: 0,
            executions: vec![],
            mode_name: None,
            code_writer_config: None,
            containment: Some(g.runtime.containment().to_owned()),
        };
        return Ok(ok_line(id, &reply));
    };
    let all = g.runtime.executions_of(&s.key);
    let executions = all
        .iter()
        .map(|e| ExecutionSummary { command_id: e.id.clone(), state: e.state().into(), background: e.background })
        .collect();
    let running = all.iter().filter(|e| e.state().is_unresolved()).count();
    let pending = lock(&s.state).pending();
    let recorded = lock(&s.policy).clone();
    let (mode_name, code_writer_config) = match recorded {
        Some(p) => (Some(p.mode_name), p.code_writer_config),
        None => (None, None),
    };
    let containment = Some(g.runtime.containment().to_owned());
    Ok(ok_line(
        id,
        &StatusReply { known: true, running, pending, executions, mode_name, code_writer_config, containment },
    ))
}
