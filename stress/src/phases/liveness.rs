//! Liveness under stress: a command leaves processes behind (one in its
//! process group, one `setsid` daemon), the guardian is SIGKILLed and a new
//! one started while they run. Every release of that thread must be refused
//! (`execution_active`) — by the first guardian, and by the second, which
//! learns of the processes only from `D/executions` and `/proc` — and
//! the command itself is `completed` once its shell is back at the
//! prompt, naming what it left in `still_running`. Once the processes end,
//! the same reads are released.

use std::collections::HashSet;

use serde_json::Value;

use crate::harness::guardian::GuardianProc;
use crate::workload::ops::{self, Expect};
use crate::workload::scenarios::read_some;
use crate::workload::world::{Pinned, TrackedSession, World};

fn gated(gate: &std::path::Path) -> String {
    format!("while [ ! -e \"{}\" ]; do sleep 0.05; done", gate.display())
}

/// Runs the scenario on `sessions[0]`, restarting `guardian`; every session
/// is initialised again afterwards (a new guardian is another instance).
pub fn left_behind_across_restart(
    w: &World,
    sessions: &mut [TrackedSession],
    guardian: &mut GuardianProc,
) -> anyhow::Result<()> {
    let Some(sess) = sessions.first_mut() else { return Ok(()) };
    let t = read_some(w, sess, sess.home, 3, 1 << 20)?;
    let gate = w.new_gate();
    let loop_ = gated(&gate);
    // The command ends at once; a subshell job and a daemon in its own
    // session stay until the gate opens (the guardian's death no longer
    // hangs up the shell's terminal: its monitor holds it, and the new
    // guardian takes the shell over).
    let cmd =
        format!("( {loop_} ) >/dev/null 2>&1 & ( setsid sh -c '{loop_}' >/dev/null 2>&1 </dev/null & ); echo left");
    let v = ops::bash(w, sess, &cmd, 5.0, false)?;
    let id = v["command_id"].as_str().unwrap_or_default().to_owned();
    let left = v["still_running"].as_array().is_some_and(|p| !p.is_empty());
    w.check(
        "a command that left processes behind: completed, still_running",
        v["status"] == "completed" && left,
        v.to_string(),
    );
    let denied = Expect::Denied { codes: &["execution_active"], kind: "released_while_left_behind" };
    if !t.is_empty() {
        let r = ops::release(w, sess, sess.home, &t, denied, &HashSet::new())?;
        w.check("left-behind processes: execution_active", r["errorCode"] == "execution_active", r.to_string());
    }

    guardian.kill();
    *guardian = w.private.start_guardian(&[])?;
    for s in sessions.iter() {
        let root = w.workspaces[s.ws].root.clone();
        ops::initialize(w, s.home, &root, &s.thread_id, None)?;
        if s.other != s.home {
            ops::initialize(w, s.other, &root, &s.thread_id, None)?;
        }
    }
    let sess = &mut sessions[0];
    let after = Expect::Denied { codes: &["execution_active"], kind: "released_after_guardian_restart" };
    if !t.is_empty() {
        let r = ops::release(w, sess, sess.home, &t, after, &HashSet::new())?;
        w.check(
            "after a guardian restart, the earlier command's processes: execution_active",
            r["errorCode"] == "execution_active",
            r.to_string(),
        );
    }
    let s = status(w, sess, &id)?;
    w.check(
        "a new guardian answers status_check of an earlier command: completed (back at its prompt)",
        s["status"] == "completed",
        s.to_string(),
    );

    w.open_gate(&gate);
    let done = ops::wait_command(w, sess, &id)?;
    w.check("the earlier command completes once its processes end", done["status"] == "completed", done.to_string());
    let still: Vec<Pinned> =
        t.into_iter().filter(|p| sess.ledger.get(&p.path).is_some_and(|g| g.id == p.gen)).collect();
    if !still.is_empty() {
        // The command was done long ago; what it left ends soon after the
        // gate opens, and only then may the release go through.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let r = loop {
            let r = ops::release(w, sess, sess.home, &still, Expect::Any, &HashSet::new())?;
            if r["status"] == "completed" || std::time::Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        w.check("then the same reads are released", r["status"] == "completed", r.to_string());
    }
    ops::verify(w, sess, "left behind across a guardian restart");
    Ok(())
}

fn status(w: &World, sess: &TrackedSession, id: &str) -> anyhow::Result<Value> {
    let args = serde_json::json!({"thread_id": sess.thread_id, "status_check": true, "command_id": id,
        "wait_for_seconds": 0});
    Ok(ops::call_ok(w, sess.home, "BashCommand", args)?.value)
}
