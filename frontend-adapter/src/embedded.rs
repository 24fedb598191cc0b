//! Commands run inside the frontend process (`--embedded`): an embedded
//! runtime, with no guardian and therefore no releases.
//!
//! Each command runs `bash -c` in its own process group with cwd = the
//! workspace and `WINX_TEMP_DIR` = the session directory, stdin from
//! `/dev/null`, stdout and stderr merged into `D/executions/<command_id>/output`
//! (with `status.json` beside it), like the guardian does. A waiter thread
//! reaps each child. The inline reply carries the last 64 KiB of output; a
//! longer output is also copied whole to `W/.winx/scratch/<command_id>.out`.
//! A foreground command while another foreground command of the same thread
//! runs is refused with `execution_active` (the guardian queues it instead).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use winx_release_engine::durable::{create_private_dir_all, write_durable};
use winx_release_engine::layout::Layout;
use winx_release_engine::random::random_hex;
use winx_release_engine::sync::lock;
use winx_release_engine::Reason;

use crate::error::{Code, FrontendError};

/// Most bytes of output carried inline in a reply.
pub const INLINE_OUTPUT_BYTES: u64 = 64 * 1024;

/// Where and for whom a command runs.
pub(crate) struct ExecContext<'a> {
    pub(crate) layout: &'a Layout,
    pub(crate) session_dir: &'a Path,
    pub(crate) thread_id: &'a str,
}

struct Exec {
    command_id: String,
    thread_id: String,
    background: bool,
    command: String,
    dir: PathBuf,
    layout: Layout,
    started_unix: u64,
    /// `None` while running, then the exit code (128 + signal when killed).
    state: Mutex<Option<i64>>,
    done: Condvar,
}

/// The in-process execution table.
#[derive(Default)]
pub(crate) struct ExecTable {
    entries: Mutex<HashMap<String, Arc<Exec>>>,
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn io_err(what: &str, e: impl std::fmt::Display) -> FrontendError {
    FrontendError::new(Code::IoError, format!("{what}: {e}"))
}

impl Exec {
    fn exit_code(&self) -> Option<i64> {
        *lock(&self.state)
    }

    fn write_status(&self) {
        let code = self.exit_code();
        let status = json!({
            "command_id": self.command_id, "thread_id": self.thread_id, "command": self.command,
            "is_background": self.background, "started_unix": self.started_unix,
            "status": if code.is_some() { "completed" } else { "running" }, "exit_code": code,
        });
        let _ = write_durable(&self.dir.join("status.json"), status.to_string().as_bytes());
    }
}

impl ExecTable {
    /// Running commands of `thread_id` (foreground only when `foreground`).
    pub(crate) fn running(&self, thread_id: &str, foreground_only: bool) -> usize {
        lock(&self.entries)
            .values()
            .filter(|e| e.thread_id == thread_id && (!foreground_only || !e.background) && e.exit_code().is_none())
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
        let command_id = random_hex(16);
        let dir = ctx.layout.executions_root().join(&command_id);
        create_private_dir_all(&dir).map_err(|e| io_err("execution directory", e))?;
        let out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join("output"))
            .map_err(|e| io_err("output file", e))?;
        let err = out.try_clone().map_err(|e| io_err("output file", e))?;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(ctx.layout.workspace())
            .env("WINX_TEMP_DIR", ctx.session_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .map_err(|e| io_err("starting bash", e))?;
        let exec = Arc::new(Exec {
            command_id: command_id.clone(),
            thread_id: ctx.thread_id.to_owned(),
            background,
            command: command.to_owned(),
            dir,
            layout: ctx.layout.clone(),
            started_unix: now_unix(),
            state: Mutex::new(None),
            done: Condvar::new(),
        });
        exec.write_status();
        lock(&self.entries).insert(command_id, exec.clone());
        let waiter = exec.clone();
        std::thread::spawn(move || {
            let code = match child.wait() {
                Ok(st) => st.code().map(i64::from).or_else(|| st.signal().map(|s| 128 + i64::from(s))).unwrap_or(-1),
                Err(_) => -1,
            };
            *lock(&waiter.state) = Some(code);
            waiter.write_status();
            waiter.done.notify_all();
        });
        // A background command's call returns at once.
        Ok(reply(&exec, if background { 0.0 } else { wait }))
    }

    /// Reports on `command_id` of `thread_id`, waiting up to `wait` seconds.
    pub(crate) fn status(&self, thread_id: &str, command_id: &str, wait: f64) -> Result<Value, FrontendError> {
        let exec = lock(&self.entries).get(command_id).filter(|e| e.thread_id == thread_id).cloned();
        match exec {
            Some(e) => Ok(reply(&e, wait)),
            None => Err(FrontendError::invalid(format!("no command {command_id:?} in this thread"))),
        }
    }
}

fn reply(exec: &Exec, wait: f64) -> Value {
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let mut state = lock(&exec.state);
    while state.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        state = exec.done.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    let code = *state;
    drop(state);
    let (output, truncated, dropped) = match read_output(exec) {
        Ok(v) => v,
        Err(e) => (format!("<output unavailable: {e}>"), false, None),
    };
    let mut v = json!({
        "status": if code.is_some() { "completed" } else { "running" },
        "command_id": exec.command_id,
        "exit_code": code,
        "output": output,
        "output_truncated": truncated,
    });
    if let Some(p) = dropped {
        v["output_path"] = json!(p);
    }
    v
}

/// The last [`INLINE_OUTPUT_BYTES`] of output, whether it was cut, and where
/// the whole output was dropped when it was.
fn read_output(exec: &Exec) -> io::Result<(String, bool, Option<String>)> {
    let mut f = File::open(exec.dir.join("output"))?;
    let len = f.metadata()?.len();
    let truncated = len > INLINE_OUTPUT_BYTES;
    let start = len.saturating_sub(INLINE_OUTPUT_BYTES);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.by_ref().take(INLINE_OUTPUT_BYTES).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let dropped = if truncated { drop_to_scratch(exec, &mut f).ok() } else { None };
    Ok((text, truncated, dropped))
}

/// Copies the whole output to `W/.winx/scratch/<command_id>.out` through
/// no-follow directory handles.
fn drop_to_scratch(exec: &Exec, f: &mut File) -> io::Result<String> {
    let scratch = exec.layout.create_scratch_dir()?;
    let name = format!("{}.out", exec.command_id);
    let flags = rustix::fs::OFlags::WRONLY
        | rustix::fs::OFlags::CREATE
        | rustix::fs::OFlags::TRUNC
        | rustix::fs::OFlags::NOFOLLOW
        | rustix::fs::OFlags::CLOEXEC;
    let fd = rustix::fs::openat(scratch.as_fd(), name.as_str(), flags, rustix::fs::Mode::from_raw_mode(0o600))?;
    let mut out = File::from(fd);
    f.seek(SeekFrom::Start(0))?;
    io::copy(f, &mut out)?;
    Ok(exec.layout.scratch_root().join(name).display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
