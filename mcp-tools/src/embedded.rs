//! Commands run inside the frontend process (`--embedded`): an embedded
//! runtime, with no guardian and therefore no releases.
//!
//! Each command is an execution of the engine's runtime
//! ([`winx_release_runtime::Runtime`], `/proc` liveness, no
//! subreaping, no adoption of a guardian's executions): the same record,
//! output file and output tail as the guardian's. `bash -c` runs in its own
//! session and process group with cwd = the workspace and `WINX_TEMP_DIR` =
//! the session directory; stdout and stderr go to
//! `D/executions/<command_id>/output`. The inline reply carries the last
//! 64 KiB of output; a longer output is also copied whole to
//! `W/.winx/scratch/<command_id>.out` (`output_path`). A foreground command
//! while another foreground command of the same thread runs is refused with
//! `execution_active` (the guardian queues it instead).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use winx_release_protocol::messages::{CommandReport, ExecutionState};

use crate::command_result::CommandResult;
use winx_release_engine::layout::Layout;
use winx_release_engine::Reason;
use winx_release_runtime::{ExecState, Execution, LivenessChoice, Runtime, RuntimeOptions, SessionKey, Spawn};

use winx_release_host::error::{Code, FrontendError};

/// Where and for whom a command runs.
pub(crate) struct ExecContext<'a> {
    pub(crate) layout: &'a Layout,
    pub(crate) session_dir: &'a Path,
    pub(crate) thread_id: &'a str,
}

/// The in-process execution runtime, started at the first command.
#[derive(Default)]
pub(crate) struct ExecTable {
    runtime: OnceLock<Arc<Runtime>>,
}

fn io_err(what: &str, e: impl std::fmt::Display) -> FrontendError {
    FrontendError::new(Code::IoError, format!("{what}: {e}"))
}

impl ExecTable {
    fn runtime(&self, data_dir: &Path) -> &Arc<Runtime> {
        self.runtime.get_or_init(|| {
            let opts = RuntimeOptions {
                liveness: LivenessChoice::Proc,
                move_self: false,
                subreaper: false,
                adopt: false,
                env_remove: Vec::new(),
                monitor: None,
            };
            Runtime::start(data_dir, &opts)
        })
    }

    fn of_thread(&self, thread_id: &str) -> Vec<Arc<Execution>> {
        let Some(rt) = self.runtime.get() else { return Vec::new() };
        rt.executions().into_iter().filter(|e| e.thread == thread_id).collect()
    }

    /// Running commands of `thread_id` (foreground only when `foreground`).
    pub(crate) fn running(&self, thread_id: &str, foreground_only: bool) -> usize {
        self.of_thread(thread_id)
            .iter()
            .filter(|e| (!foreground_only || !e.background) && !e.state().is_final())
            .count()
    }

    /// Starts `command` and waits up to `wait` seconds for it.
    pub(crate) fn run(
        &self,
        ctx: &ExecContext<'_>,
        command: &str,
        wait: f64,
        background: bool,
    ) -> Result<Value, FrontendError> {
        if !background && self.running(ctx.thread_id, true) > 0 {
            return Err(FrontendError::new(
                Reason::ExecutionActive,
                "a foreground command of this thread is still running; check it with status_check",
            ));
        }
        let rt = self.runtime(ctx.layout.data_dir());
        let session = SessionKey::of_path(ctx.session_dir).map_err(|e| io_err("session directory", e))?;
        let e = rt
            .submit(Spawn {
                thread: ctx.thread_id.to_owned(),
                workspace: ctx.layout.workspace().to_path_buf(),
                cwd: None,
                session,
                command: command.to_owned(),
                background,
                env: vec![("WINX_TEMP_DIR".into(), ctx.session_dir.as_os_str().into())],
            })
            .map_err(|err| io_err("execution directory", err))?;
        // A command that cannot start is answered as completed, exit 127,
        // its output saying why.
        let _ = rt.run(&e);
        // A background command's call returns at once.
        Ok(reply(ctx.layout, &e, if background { 0.0 } else { wait }))
    }

    /// Reports on `command_id` of `thread_id`, waiting up to `wait` seconds.
    pub(crate) fn status(&self, thread_id: &str, command_id: &str, wait: f64) -> Result<Value, FrontendError> {
        let e = self.of_thread(thread_id).into_iter().find(|e| e.id == command_id);
        match e {
            Some(e) => {
                let layout = Layout::new(&e.workspace, self.runtime.get().map_or(Path::new(""), |r| r.data_dir()))
                    .map_err(|d| FrontendError::new(d.reason, d.to_string()))?;
                Ok(reply(&layout, &e, wait))
            }
            None => Err(FrontendError::invalid(format!("no command {command_id:?} in this thread"))),
        }
    }
}

fn reply(layout: &Layout, e: &Execution, wait: f64) -> Value {
    let state = e.wait_until(Duration::from_secs_f64(wait.max(0.0)), ExecState::is_final);
    let code = state.exit_code();
    let (output, truncated) = e.output_tail();
    // The runtime dropped a long output whole into scratch when it resolved.
    let dropped = layout.scratch_root().join(format!("{}.out", e.id));
    CommandResult {
        command: CommandReport {
            status: ExecutionState::from(state).status(),
            command_id: e.id.clone(),
            exit_code: code,
            output,
            output_truncated: truncated,
        },
        queued: false,
        leader_exited: false,
        leader_exit_code: None,
        adopted: false,
        output_path: (truncated && code.is_some() && dropped.is_file()).then_some(dropped),
        still_running: vec![],
        bg_command_id: None,
        screen: None,
        shell_busy: None,
    }
    .to_value()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Instant;
    use winx_release_runtime::INLINE_OUTPUT_BYTES;

    #[test]
    fn run_wait_background_and_truncation() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap().join("ws");
        let data = d.path().canonicalize().unwrap().join("data");
        let session = ws.join(".winx/tmp/session-0000000000000000");
        std::fs::create_dir_all(&session).unwrap();
        let table = ExecTable::default();
        let layout = Layout::new(ws.clone(), data.clone()).unwrap();
        let ctx = ExecContext { layout: &layout, session_dir: &session, thread_id: "t" };
        let v = table.run(&ctx, "echo hi; echo \"$WINX_TEMP_DIR\"; pwd; exit 3", 10.0, false).unwrap();
        assert_eq!(v["status"], "completed");
        assert_eq!(v["exit_code"], 3);
        let out = v["output"].as_str().unwrap();
        assert!(out.starts_with("hi\n"), "{out}");
        assert!(out.contains(session.to_str().unwrap()) && out.contains(ws.to_str().unwrap()), "{out}");
        let id = v["command_id"].as_str().unwrap();
        assert!(data.join("executions").join(id).join("output").is_file());
        assert!(data.join("executions").join(id).join("status.json").is_file());

        // A running foreground command blocks another; a background one does not.
        let slow = table.run(&ctx, "sleep 0.4", 0.0, false).unwrap();
        assert_eq!(slow["status"], "running");
        assert_eq!(slow["exit_code"], Value::Null);
        let e = table.run(&ctx, "true", 0.0, false).unwrap_err();
        assert_eq!(e.code, Code::Reason(Reason::ExecutionActive));
        // A background call returns at once, whatever its wait.
        let t = Instant::now();
        let bg = table.run(&ctx, "sleep 0.3", 5.0, true).unwrap();
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(bg["status"], "running");
        let bg_done = table.status("t", bg["command_id"].as_str().unwrap(), 10.0).unwrap();
        assert_eq!(bg_done["status"], "completed");
        let id = slow["command_id"].as_str().unwrap();
        assert!(table.status("other", id, 0.0).is_err());
        let done = table.status("t", id, 10.0).unwrap();
        assert_eq!(done["status"], "completed");
        assert_eq!(done["exit_code"], 0);
        assert_eq!(table.running("t", false), 0);

        let big = table.run(&ctx, "head -c 70000 /dev/zero | tr '\\0' x", 10.0, false).unwrap();
        assert_eq!(big["output_truncated"], true);
        assert_eq!(big["output"].as_str().unwrap().len() as u64, INLINE_OUTPUT_BYTES);
        let dropped = PathBuf::from(big["output_path"].as_str().unwrap());
        assert_eq!(std::fs::metadata(dropped).unwrap().len(), 70000);
    }
}
