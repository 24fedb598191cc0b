//! Executions this guardian did not start: found in `D/executions` after a
//! guardian restart (or started by another guardian of the same data
//! directory), attributed to their (workspace, thread) from `status.json`,
//! and watched until nothing of them runs.

use std::io::Read;
use std::sync::Arc;

use serde_json::Value;
use winx_release_engine::layout::Layout;

use crate::exec::{ExecState, Execution};
use crate::liveness::{self, Leader};
use crate::sessions::{lock, Guardian};

/// Largest `status.json` read.
const MAX_STATUS: u64 = 64 * 1024;

/// Whether `id` has the shape of a command id (16 lowercase hex digits).
pub fn is_command_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Reads `D/executions/<id>/status.json`.
fn read_status(g: &Guardian, id: &str) -> Option<Value> {
    let path = g.data_dir.join("executions").join(id).join("status.json");
    let f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(MAX_STATUS).read_to_end(&mut buf).ok()?;
    serde_json::from_slice(&buf).ok()
}

fn execution_of(g: &Guardian, id: &str, v: &Value, state: ExecState) -> Option<Execution> {
    let workspace = v.get("workspace")?.as_str()?;
    let thread = v.get("thread_id")?.as_str()?;
    let e = Execution::new(
        id.to_owned(),
        v.get("command").and_then(Value::as_str).unwrap_or_default().to_owned(),
        v.get("background").and_then(Value::as_bool).unwrap_or(false),
        g.data_dir.join("executions").join(id),
        workspace.into(),
        thread.to_owned(),
        v.get("started_unix").and_then(Value::as_u64).unwrap_or(0),
        true,
        state,
    );
    let pid = v.get("leader_pid").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok());
    let start = v.get("leader_start_time").and_then(Value::as_u64);
    if let (Some(pid), Some(start_time)) = (pid, start) {
        *lock(&e.leader) = Some(Leader {
            pid,
            start_time,
            own_group: v.get("own_group").and_then(Value::as_bool).unwrap_or(false),
            own_session: v.get("own_session").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    *lock(&e.leader_exited_unix) = v.get("leader_exited_unix").and_then(Value::as_u64);
    Some(e)
}

/// Adopts every execution of `D/executions` that this guardian does not
/// know and whose `status.json` is not resolved: it joins its session's
/// table as lingering, so releases of that thread are refused while any of
/// its processes runs. Returns how many were adopted.
pub fn adopt_unresolved(g: &Arc<Guardian>) -> usize {
    let Ok(dir) = std::fs::read_dir(g.data_dir.join("executions")) else { return 0 };
    let mut adopted = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().filter(|s| is_command_id(s)) else { continue };
        if g.knows(id) {
            continue;
        }
        let Some(v) = read_status(g, id) else { continue };
        if v.get("state").and_then(Value::as_str) == Some("resolved") {
            g.note_resolved(id);
            continue;
        }
        let code = v.get("leader_exit_code").and_then(Value::as_i64).and_then(|c| i32::try_from(c).ok());
        let Some(e) = execution_of(g, id, &v, ExecState::Lingering(code)) else { continue };
        let e = Arc::new(e);
        if !g.add_execution_if_absent(e.clone()) {
            continue;
        }
        match Layout::new(&e.workspace, &g.data_dir) {
            Ok(layout) => {
                let s = g.register(layout, &e.thread);
                lock(&s.state).all.push(e.clone());
            }
            Err(d) => tracing::warn!(command_id = %id, reason = %d, "adopted execution's workspace is not usable"),
        }
        tracing::info!(command_id = %id, thread = %e.thread, "adopted an unresolved execution");
        adopted.push(e);
    }
    for e in &adopted {
        liveness::settle(g, e);
    }
    adopted.len()
}

/// The execution `id`: known to this guardian, adopted now from
/// `D/executions`, or a resolved record there.
pub fn lookup(g: &Arc<Guardian>, id: &str) -> Option<Arc<Execution>> {
    if let Some(e) = g.execution(id) {
        return Some(e);
    }
    if !is_command_id(id) {
        return None;
    }
    adopt_unresolved(g);
    if let Some(e) = g.execution(id) {
        return Some(e);
    }
    let v = read_status(g, id)?;
    if v.get("state").and_then(Value::as_str) != Some("resolved") {
        return None;
    }
    let code = v.get("exit_code").and_then(Value::as_i64).and_then(|c| i32::try_from(c).ok());
    let state = if v.get("failed_to_start").and_then(Value::as_bool) == Some(true) {
        ExecState::FailedToStart
    } else {
        ExecState::Resolved(code)
    };
    execution_of(g, id, &v, state).map(Arc::new)
}
