//! Executions: `bash -c` in its own session and process group (through
//! `setsid` when it is on `PATH`), marked with `WINX_EXECUTION_ID` in its
//! environment, output retained under `D/executions/<command_id>/`,
//! overflow dropped into `W/.winx/scratch/`.
//!
//! An execution is *running* while its leader runs, then *lingering* while
//! anything it started is still alive (see [`crate::liveness`]), and
//! *resolved* only when nothing is left; its `status.json` says so durably.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use winx_release_engine::durable::{create_private_dir_all, write_durable};
use winx_release_engine::random::random_hex;
use winx_release_protocol::messages::{ExecReply, ExecStatus};

use crate::liveness::{self, Leader};
use crate::sessions::{lock, Guardian, Session};

/// Most output bytes returned inline; the rest is dropped into scratch.
pub const INLINE_LIMIT: u64 = 64 * 1024;

/// The environment variable that marks every process of an execution.
pub const MARKER: &str = "WINX_EXECUTION_ID";

/// Where an execution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecState {
    /// Waiting behind the session's running foreground command.
    Queued,
    /// Its leader runs.
    Running,
    /// Its leader exited (with this code, when known), but something it
    /// started may still run.
    Lingering(Option<i32>),
    /// Nothing it started runs any more; recorded.
    Resolved(Option<i32>),
    /// Could not be started.
    FailedToStart,
}

impl ExecState {
    /// The name used in `status` replies and `status.json`.
    pub fn name(self) -> &'static str {
        match self {
            ExecState::Queued => "queued",
            ExecState::Running => "running",
            ExecState::Lingering(_) => "lingering",
            ExecState::Resolved(_) => "resolved",
            ExecState::FailedToStart => "failed_to_start",
        }
    }

    /// Whether nothing of the execution can run any more.
    pub fn is_final(self) -> bool {
        matches!(self, ExecState::Resolved(_) | ExecState::FailedToStart)
    }
}

/// One execution.
pub struct Execution {
    /// The command id (also the marker's value).
    pub id: String,
    /// The command text.
    pub command: String,
    /// Whether it runs in the background.
    pub background: bool,
    /// Its retained directory `D/executions/<id>`.
    pub dir: PathBuf,
    /// The workspace it ran in.
    pub workspace: PathBuf,
    /// The thread it belongs to.
    pub thread: String,
    /// When it was submitted (Unix seconds).
    pub started_unix: u64,
    /// Whether this guardian found it in `D/executions` rather than started it.
    pub adopted: bool,
    /// Its leader process, once spawned (or as recorded by its guardian).
    pub leader: Mutex<Option<Leader>>,
    /// When its leader exited (Unix seconds), if known.
    pub leader_exited_unix: Mutex<Option<u64>>,
    /// Consecutive liveness probes that found nothing left.
    pub quiet_probes: Mutex<u32>,
    state: Mutex<ExecState>,
    cv: Condvar,
}

impl Execution {
    /// A new execution record (not yet started).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: String,
        command: String,
        background: bool,
        dir: PathBuf,
        workspace: PathBuf,
        thread: String,
        started_unix: u64,
        adopted: bool,
        state: ExecState,
    ) -> Execution {
        Execution {
            id,
            command,
            background,
            dir,
            workspace,
            thread,
            started_unix,
            adopted,
            leader: Mutex::new(None),
            leader_exited_unix: Mutex::new(None),
            quiet_probes: Mutex::new(0),
            state: Mutex::new(state),
            cv: Condvar::new(),
        }
    }

    /// The current state.
    pub fn state(&self) -> ExecState {
        *lock(&self.state)
    }

    /// Sets the state and wakes waiters.
    pub fn set(&self, s: ExecState) {
        *lock(&self.state) = s;
        self.cv.notify_all();
    }

    /// Waits up to `timeout` until `done` holds for the state.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(ExecState) -> bool) -> ExecState {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            if done(*st) {
                return *st;
            }
            let now = Instant::now();
            if now >= deadline {
                return *st;
            }
            st = self.cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The `exec` / `exec_status` reply. `status` is `running` while
    /// anything it started runs, `completed` only once it is resolved.
    pub fn reply(&self) -> ExecReply {
        let st = self.state();
        let (status, exit_code) = match st {
            ExecState::Resolved(code) => (ExecStatus::Completed, code.map(i64::from)),
            ExecState::FailedToStart => (ExecStatus::Completed, Some(127)),
            ExecState::Queued => (ExecStatus::Queued, None),
            ExecState::Running | ExecState::Lingering(_) => (ExecStatus::Running, None),
        };
        let (output, output_truncated) = read_tail(&self.dir.join("output"));
        let (leader_exited, leader_exit_code) = match st {
            // The shell is done; processes it left behind still run.
            ExecState::Lingering(code) => (lock(&self.leader_exited_unix).is_some(), code.map(i64::from)),
            _ => (false, None),
        };
        ExecReply {
            command_id: self.id.clone(),
            status,
            exit_code,
            output,
            output_truncated,
            leader_exit_code,
            leader_exited,
            adopted: self.adopted,
        }
    }

    /// The `status.json` record of this execution in state `state`.
    pub fn record(&self, state: &str, extra: Value) -> Value {
        let leader = *lock(&self.leader);
        let mut v = json!({"command_id": self.id, "thread_id": self.thread, "workspace": self.workspace,
            "command": self.command, "background": self.background, "started_unix": self.started_unix,
            "state": state, "marker": format!("{MARKER}={}", self.id),
            "leader_exited_unix": *lock(&self.leader_exited_unix)});
        if let Some(l) = leader {
            v["leader_pid"] = json!(l.pid);
            v["leader_start_time"] = json!(l.start_time);
            v["own_group"] = json!(l.own_group);
            v["own_session"] = json!(l.own_session);
        }
        if let (Value::Object(m), Value::Object(x)) = (&mut v, extra) {
            m.extend(x);
        }
        v
    }

    /// Writes `status.json` durably.
    pub fn write_status(&self, state: &str, extra: Value) {
        let bytes = serde_json::to_vec(&self.record(state, extra)).unwrap_or_default();
        if let Err(err) = write_durable(&self.dir.join("status.json"), &bytes) {
            tracing::warn!(command_id = %self.id, error = %err, "could not record execution status");
        }
    }
}

fn read_tail(path: &Path) -> (String, bool) {
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

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Submits a command. The caller must hold the session's admission barrier.
pub fn submit(
    g: &Arc<Guardian>,
    session: &Arc<Session>,
    command: &str,
    background: bool,
) -> std::io::Result<Arc<Execution>> {
    let id = random_hex(8);
    let dir = g.data_dir.join("executions").join(&id);
    let e = Arc::new(Execution::new(
        id,
        command.to_owned(),
        background,
        dir,
        session.layout.workspace().to_path_buf(),
        session.thread.clone(),
        now_unix(),
        false,
        ExecState::Queued,
    ));
    // Known before its directory exists, so that adoption never takes it
    // for another guardian's.
    g.add_execution(e.clone());
    if let Err(err) = create_private_dir_all(&e.dir) {
        g.forget_execution(&e.id);
        return Err(err);
    }
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
    start_locked(g, session, e.clone());
    Ok(e)
}

/// Starts an admitted execution and a thread that waits for its leader.
/// The caller holds the session's admission barrier.
fn start_locked(g: &Arc<Guardian>, session: &Arc<Session>, e: Arc<Execution>) {
    match spawn_child(g, session, &e) {
        Ok(child) => {
            e.set(ExecState::Running);
            let (g, session) = (g.clone(), session.clone());
            std::thread::spawn(move || monitor(g, session, e, child));
        }
        Err(err) => {
            tracing::warn!(command_id = %e.id, error = %err, "command failed to start");
            let _ = fs::write(e.dir.join("output"), format!("failed to start: {err}\n"));
            e.write_status("resolved", json!({"failed_to_start": true, "exit_code": 127, "ended_unix": now_unix()}));
            e.set(ExecState::FailedToStart);
            finish_foreground_locked(g, session, &e);
        }
    }
}

/// Finds `name` on the guardian's `PATH`, as an executable regular file.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

fn spawn_child(g: &Guardian, session: &Session, e: &Execution) -> std::io::Result<Child> {
    let out = OpenOptions::new().create(true).append(true).mode(0o600).open(e.dir.join("output"))?;
    let err = out.try_clone()?;
    // Recorded before the spawn: a guardian that dies right after it still
    // leaves the marker for the next one to find.
    e.write_status("starting", json!({}));
    let bash = on_path("bash").ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "bash not found on the guardian's PATH (ENOENT)")
    })?;
    let setsid = on_path("setsid");
    let mut cmd = match &setsid {
        // `setsid` in a child that is not a process-group leader calls
        // setsid(2) and execs in place: same pid, new session and group.
        Some(s) => {
            let mut c = Command::new(s);
            c.arg("--").arg(&bash);
            c
        }
        None => {
            let mut c = Command::new(&bash);
            c.process_group(0);
            c
        }
    };
    cmd.arg("-c")
        .arg(&e.command)
        .current_dir(session.layout.workspace())
        .env("WINX_TEMP_DIR", &session.session_dir)
        .env(MARKER, &e.id)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // systemd's activation and notification variables are the guardian's.
    for var in crate::activation::SYSTEMD_VARS {
        cmd.env_remove(var);
    }
    let child = g.spawn_tracked(&mut cmd)?;
    let pid = child.id() as i32;
    let start_time = liveness::start_time_of(pid).unwrap_or(0);
    *lock(&e.leader) = Some(Leader { pid, start_time, own_group: true, own_session: setsid.is_some() });
    e.write_status("running", json!({}));
    Ok(child)
}

fn monitor(g: Arc<Guardian>, session: Arc<Session>, e: Arc<Execution>, mut child: Child) {
    let status = child.wait();
    g.untrack_child(child.id() as i32);
    let code = status.as_ref().ok().and_then(|s| s.code());
    *lock(&e.leader_exited_unix) = Some(now_unix());
    // Still `Running` for every observer until this is decided: resolved at
    // once when nothing is left, else lingering until the watcher finds the
    // last process gone.
    if liveness::nothing_left(&g, &e) {
        resolve(&g, &e, code);
    } else {
        e.write_status("lingering", json!({"leader_exit_code": code}));
        e.set(ExecState::Lingering(code));
    }
    finish_foreground(&g, &session, &e);
}

/// Records `e` resolved: nothing it started runs any more.
/// `code` is the leader's exit code, when known.
pub fn resolve(g: &Guardian, e: &Execution, code: Option<i32>) {
    if e.state().is_final() {
        return;
    }
    let out_path = e.dir.join("output");
    let bytes = fs::metadata(&out_path).map(|m| m.len()).unwrap_or(0);
    if bytes > INLINE_LIMIT {
        if let Err(err) = drop_to_scratch(g, e) {
            tracing::warn!(command_id = %e.id, error = %err, "could not drop output into scratch");
        }
    }
    e.write_status("resolved", json!({"exit_code": code, "ended_unix": now_unix(), "bytes": bytes}));
    g.note_resolved(&e.id);
    e.set(ExecState::Resolved(code));
    // Retention catches up (debounced), also for a background command.
    g.retention.kick(e.workspace.to_str());
}

/// Frees the foreground slot and starts the next queued command, under the
/// admission barrier (so nothing starts while a release runs).
fn finish_foreground(g: &Arc<Guardian>, session: &Arc<Session>, e: &Arc<Execution>) {
    if e.background {
        return;
    }
    let _admission = lock(&session.admission);
    finish_foreground_locked(g, session, e);
}

/// [`finish_foreground`] for a caller that already holds the barrier.
fn finish_foreground_locked(g: &Arc<Guardian>, session: &Arc<Session>, e: &Arc<Execution>) {
    if e.background {
        return;
    }
    let mut st = lock(&session.state);
    if st.fg_running.as_ref().is_some_and(|r| Arc::ptr_eq(r, e)) {
        st.fg_running = None;
    }
    if st.fg_running.is_none() {
        if let Some(next) = st.fg_queue.pop_front() {
            st.fg_running = Some(next.clone());
            drop(st);
            start_locked(g, session, next);
        }
    }
}

fn drop_to_scratch(g: &Guardian, e: &Execution) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    let layout = winx_release_engine::layout::Layout::new(&e.workspace, &g.data_dir)
        .map_err(|d| std::io::Error::other(d.to_string()))?;
    let dir = layout.create_scratch_dir()?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir.as_fd(), format!("{}.out", e.id).as_str(), flags, Mode::from_raw_mode(0o600))?;
    let mut dst = File::from(fd);
    let mut src = File::open(e.dir.join("output"))?;
    std::io::copy(&mut src, &mut dst)?;
    dst.sync_all()
}
