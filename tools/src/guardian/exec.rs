//! Executions: `bash -c` in its own process group, output retained under
//! `D/executions/<command_id>/`, overflow dropped into `W/.winx/scratch/`.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use winx_release_engine::durable::{create_private_dir_all, write_durable};
use winx_release_engine::random::random_hex;
use winx_release_frontend_adapter::protocol::{ExecReply, ExecStatus};

use super::sessions::{lock, Guardian, Session};

/// Most output bytes returned inline; the rest is dropped into scratch.
pub const INLINE_LIMIT: u64 = 64 * 1024;

/// Where an execution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecState {
    /// Waiting behind the session's running foreground command.
    Queued,
    /// Its process runs.
    Running,
    /// Its process exited; its result is being made durable.
    Exited,
    /// Exited and recorded.
    Resolved(Option<i32>),
    /// Could not be started.
    FailedToStart,
}

/// One execution.
pub struct Execution {
    /// The command id.
    pub id: String,
    /// The command text.
    pub command: String,
    /// Whether it runs in the background.
    pub background: bool,
    /// Its retained directory `D/executions/<id>`.
    pub dir: PathBuf,
    state: Mutex<ExecState>,
    cv: Condvar,
}

impl Execution {
    /// The current state.
    pub fn state(&self) -> ExecState {
        *lock(&self.state)
    }

    fn set(&self, s: ExecState) {
        *lock(&self.state) = s;
        self.cv.notify_all();
    }

    /// Waits up to `timeout` for the execution to be resolved.
    pub fn wait(&self, timeout: Duration) -> ExecState {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            if matches!(*st, ExecState::Resolved(_) | ExecState::FailedToStart) {
                return *st;
            }
            let now = Instant::now();
            if now >= deadline {
                return *st;
            }
            st = self.cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The `exec` / `exec_status` reply for this execution.
    pub fn reply(&self) -> ExecReply {
        let (status, exit_code) = match self.state() {
            ExecState::Resolved(code) => (ExecStatus::Completed, code.map(i64::from)),
            ExecState::FailedToStart => (ExecStatus::Completed, Some(127)),
            ExecState::Queued => (ExecStatus::Queued, None),
            ExecState::Running | ExecState::Exited => (ExecStatus::Running, None),
        };
        let (output, output_truncated) = read_tail(&self.dir.join("output"));
        ExecReply { command_id: self.id.clone(), status, exit_code, output, output_truncated }
    }
}

fn read_tail(path: &std::path::Path) -> (String, bool) {
    let Ok(mut f) = File::open(path) else { return (String::new(), false) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(INLINE_LIMIT);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return (String::new(), false);
    }
    let mut buf = Vec::new();
    let _ = f.take(INLINE_LIMIT).read_to_end(&mut buf);
    (String::from_utf8_lossy(&buf).into_owned(), start > 0)
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Submits a command. The caller must hold the session's admission barrier.
pub fn submit(
    g: &Guardian,
    session: &Arc<Session>,
    command: &str,
    background: bool,
) -> std::io::Result<Arc<Execution>> {
    let id = random_hex(8);
    let dir = g.data_dir.join("executions").join(&id);
    create_private_dir_all(&dir)?;
    let e = Arc::new(Execution {
        id,
        command: command.to_owned(),
        background,
        dir,
        state: Mutex::new(ExecState::Queued),
        cv: Condvar::new(),
    });
    g.add_execution(e.clone());
    let mut st = lock(&session.state);
    st.all.push(e.clone());
    if !background && (st.fg_running.is_some() || !st.fg_queue.is_empty()) {
        st.fg_queue.push_back(e.clone());
        return Ok(e);
    }
    if !background {
        st.fg_running = Some(e.clone());
    }
    drop(st);
    start(session.clone(), e.clone());
    Ok(e)
}

/// Starts an admitted execution and a thread that reaps it.
fn start(session: Arc<Session>, e: Arc<Execution>) {
    let spawned = spawn_child(&session, &e);
    match spawned {
        Ok(child) => {
            e.set(ExecState::Running);
            std::thread::spawn(move || monitor(session, e, child));
        }
        Err(err) => {
            tracing::warn!(command_id = %e.id, error = %err, "command failed to start");
            let _ = fs::write(e.dir.join("output"), format!("failed to start: {err}\n"));
            e.set(ExecState::FailedToStart);
            finish_foreground(&session, &e);
        }
    }
}

fn spawn_child(session: &Session, e: &Execution) -> std::io::Result<Child> {
    let out = OpenOptions::new().create(true).append(true).mode(0o600).open(e.dir.join("output"))?;
    let err = out.try_clone()?;
    let meta = json!({"command_id": e.id, "thread_id": session.thread, "workspace": session.layout.workspace(),
        "command": e.command, "background": e.background, "started_unix": now_unix(), "state": "running"});
    fs::write(e.dir.join("status.json"), serde_json::to_vec(&meta).unwrap_or_default())?;
    Command::new("bash")
        .arg("-c")
        .arg(&e.command)
        .current_dir(session.layout.workspace())
        .env("WINX_TEMP_DIR", &session.session_dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
}

fn monitor(session: Arc<Session>, e: Arc<Execution>, mut child: Child) {
    let status = child.wait();
    e.set(ExecState::Exited);
    let code = status.as_ref().ok().and_then(|s| s.code());
    let out_path = e.dir.join("output");
    let bytes = fs::metadata(&out_path).map(|m| m.len()).unwrap_or(0);
    if bytes > INLINE_LIMIT {
        if let Err(err) = drop_to_scratch(&session, &e) {
            tracing::warn!(command_id = %e.id, error = %err, "could not drop output into scratch");
        }
    }
    let meta = json!({"command_id": e.id, "thread_id": session.thread, "workspace": session.layout.workspace(),
        "command": e.command, "background": e.background, "ended_unix": now_unix(), "state": "resolved",
        "exit_code": code, "bytes": bytes});
    if let Err(err) = write_durable(&e.dir.join("status.json"), &serde_json::to_vec(&meta).unwrap_or_default()) {
        tracing::warn!(command_id = %e.id, error = %err, "could not record execution status");
    }
    e.set(ExecState::Resolved(code));
    finish_foreground(&session, &e);
}

/// Frees the foreground slot and starts the next queued command, under the
/// admission barrier (so nothing starts while a release runs).
fn finish_foreground(session: &Arc<Session>, e: &Arc<Execution>) {
    if e.background {
        return;
    }
    let _admission = lock(&session.admission);
    let mut st = lock(&session.state);
    if st.fg_running.as_ref().is_some_and(|r| Arc::ptr_eq(r, e)) {
        st.fg_running = None;
    }
    if st.fg_running.is_none() {
        if let Some(next) = st.fg_queue.pop_front() {
            st.fg_running = Some(next.clone());
            drop(st);
            start(session.clone(), next);
        }
    }
}

fn drop_to_scratch(session: &Session, e: &Execution) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    let dir = session.layout.create_scratch_dir()?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir.as_fd(), format!("{}.out", e.id).as_str(), flags, Mode::from_raw_mode(0o600))?;
    let mut dst = File::from(fd);
    let mut src = File::open(e.dir.join("output"))?;
    std::io::copy(&mut src, &mut dst)?;
    dst.sync_all()
}
