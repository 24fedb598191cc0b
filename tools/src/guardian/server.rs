//! The socket server: bind, peer checks, JSON-lines dispatch, shutdown.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use winx_release_engine::layout::Layout;
use winx_release_engine::release::{release, ReleaseOptions, ReleaseReport, ReleaseRequest, Target};
use winx_release_engine::Reason;

use super::exec::{self, ExecState};
use super::sessions::{lock, Guardian, SessionOwner};
use super::{CAPABILITIES, PROTOCOL};

/// Longest request line accepted.
const MAX_LINE: u64 = 1024 * 1024;

struct Shared {
    guardian: Guardian,
    shutdown: Arc<AtomicBool>,
    in_flight: AtomicUsize,
}

/// Binds `socket`, prints the ready line, and serves until SIGTERM/SIGINT.
pub fn serve(socket: &Path, data_dir: &Path) -> anyhow::Result<()> {
    let dir = socket.parent().context("socket path has no parent")?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(|| format!("{}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    if socket.exists() {
        if UnixStream::connect(socket).is_ok() {
            anyhow::bail!("a guardian already listens on {}", socket.display());
        }
        std::fs::remove_file(socket).with_context(|| format!("stale socket {}", socket.display()))?;
    }
    let listener = UnixListener::bind(socket).with_context(|| format!("bind {}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;

    let shutdown = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, shutdown.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, shutdown.clone())?;
    let shared = Arc::new(Shared { guardian: Guardian::new(data_dir), shutdown, in_flight: AtomicUsize::new(0) });

    crate::recover_cmd::recover_at_start(data_dir);

    let ready = json!({"event": "ready", "socket": socket, "pid": std::process::id(), "capabilities": CAPABILITIES});
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{ready}")?;
        out.flush()?;
    }
    tracing::info!(socket = %socket.display(), instance = %shared.guardian.instance, "guardian ready");

    let my_uid = rustix::process::getuid().as_raw();
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                match rustix::net::sockopt::socket_peercred(&stream) {
                    Ok(cred) if cred.uid.as_raw() == my_uid => {}
                    Ok(cred) => {
                        tracing::warn!(uid = cred.uid.as_raw(), "refused a peer with another uid");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "no peer credentials; refused");
                        continue;
                    }
                }
                let shared = shared.clone();
                std::thread::spawn(move || connection(shared, stream));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(25));
            }
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(socket);
    while shared.in_flight.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::info!("guardian stopped");
    Ok(())
}

fn connection(shared: Arc<Shared>, stream: UnixStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        if shared.shutdown.load(Ordering::SeqCst) && line.is_empty() {
            return;
        }
        let before = line.len();
        let res = (&mut reader).take(MAX_LINE + 1 - before as u64).read_until(b'\n', &mut line);
        match res {
            Ok(0) if line.len() == before => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        if line.last() != Some(&b'\n') {
            if line.len() as u64 > MAX_LINE {
                let _ = write_line(&mut writer, &error(0, "invalid_input", "request line too long"));
                return;
            }
            continue; // partial line; keep reading
        }
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        let reply = handle_line(&shared.guardian, &line);
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        line.clear();
        let close = reply.get("error").and_then(|e| e.get("code")).and_then(Value::as_str) == Some("invalid_input")
            && reply.get("id") == Some(&json!(0));
        if write_line(&mut writer, &reply).is_err() || close {
            return;
        }
    }
}

fn write_line(w: &mut UnixStream, v: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    w.write_all(&bytes)
}

fn error(id: u64, code: &str, message: impl Into<String>) -> Value {
    json!({"id": id, "ok": false, "error": {"code": code, "message": message.into()}})
}

fn ok(id: u64, mut body: Value) -> Value {
    body["id"] = json!(id);
    body["ok"] = json!(true);
    body
}

/// Handles one request line and returns the response object.
pub fn handle_line(g: &Guardian, line: &[u8]) -> Value {
    let req: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return error(0, "invalid_input", format!("not JSON: {e}")),
    };
    let (Some(id), Some(op)) = (req.get("id").and_then(Value::as_u64), req.get("op").and_then(Value::as_str)) else {
        return error(0, "invalid_input", "a request needs a numeric id and a string op");
    };
    match op {
        "hello" => ok(
            id,
            json!({"protocol": PROTOCOL, "guardian": concat!("winx-release-guardian/", env!("CARGO_PKG_VERSION")),
                "platform": std::env::consts::OS, "capabilities": CAPABILITIES, "instance": g.instance,
                "pid": std::process::id()}),
        ),
        "session_open" => session_open(g, id, &req),
        "exec" => exec_op(g, id, &req),
        "exec_status" => exec_status(g, id, &req),
        "release" => release_op(g, id, &req),
        "status" => status_op(g, id, &req),
        other => error(id, "unknown_op", format!("unknown op {other:?}")),
    }
}

fn str_field<'a>(req: &'a Value, name: &str) -> Result<&'a str, String> {
    req.get(name).and_then(Value::as_str).ok_or_else(|| format!("missing string field {name:?}"))
}

fn layout_of(g: &Guardian, req: &Value) -> Result<(Layout, String), Value> {
    let id = req.get("id").and_then(Value::as_u64).unwrap_or(0);
    let ws = str_field(req, "workspace").map_err(|m| error(id, "invalid_input", m))?;
    let thread = str_field(req, "thread_id").map_err(|m| error(id, "invalid_input", m))?;
    if thread.is_empty() || thread.len() > 256 {
        return Err(error(id, "invalid_input", "thread_id must be 1-256 bytes"));
    }
    let layout = Layout::new(ws, &g.data_dir).map_err(|d| error(id, d.reason.code(), d.to_string()))?;
    Ok((layout, thread.to_owned()))
}

fn session_open(g: &Guardian, id: u64, req: &Value) -> Value {
    let (layout, thread) = match layout_of(g, req) {
        Ok(v) => v,
        Err(e) => return e,
    };
    if let Err(e) = ensure_session_dir(&layout, &thread) {
        return error(id, "session_unavailable", e);
    }
    let s = g.register(layout, &thread);
    ok(id, json!({"session_dir": s.session_dir, "instance": g.instance}))
}

/// Creates the session directory through the engine's one no-follow path.
fn ensure_session_dir(layout: &Layout, thread: &str) -> Result<(), String> {
    layout.create_session_dir(thread).map(drop).map_err(|e| format!("session directory: {e}"))
}

fn wait_secs(req: &Value, default: f64) -> Duration {
    let s = req.get("wait_for_seconds").and_then(Value::as_f64).unwrap_or(default);
    Duration::from_secs_f64(s.clamp(0.0, 3600.0))
}

fn exec_op(g: &Guardian, id: u64, req: &Value) -> Value {
    let (layout, thread) = match layout_of(g, req) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let Ok(command) = str_field(req, "command") else { return error(id, "invalid_input", "missing command") };
    let background = req.get("is_background").and_then(Value::as_bool).unwrap_or(false);
    if let Err(e) = ensure_session_dir(&layout, &thread) {
        return error(id, "session_unavailable", e);
    }
    let session = g.register(layout, &thread);
    let submitted = {
        let _admission = lock(&session.admission);
        exec::submit(g, &session, command, background)
    };
    let e = match submitted {
        Ok(e) => e,
        Err(err) => return error(id, "io_error", err.to_string()),
    };
    e.wait(wait_secs(req, 5.0));
    ok(id, e.reply())
}

fn exec_status(g: &Guardian, id: u64, req: &Value) -> Value {
    let Ok(cid) = str_field(req, "command_id") else { return error(id, "invalid_input", "missing command_id") };
    let Some(e) = g.execution(cid) else { return error(id, "not_found", format!("no command {cid}")) };
    e.wait(wait_secs(req, 0.0));
    ok(id, e.reply())
}

fn status_op(g: &Guardian, id: u64, req: &Value) -> Value {
    let (layout, thread) = match layout_of(g, req) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let Some(s) = g.session(layout.workspace(), &thread) else {
        return ok(id, json!({"known": false, "running": 0, "pending": 0, "executions": []}));
    };
    let st = lock(&s.state);
    let execs: Vec<Value> = st
        .all
        .iter()
        .map(|e| {
            let state = match e.state() {
                ExecState::Queued => "queued",
                ExecState::Running => "running",
                ExecState::Exited => "exited",
                ExecState::Resolved(_) => "resolved",
                ExecState::FailedToStart => "failed_to_start",
            };
            json!({"command_id": e.id, "state": state, "background": e.background})
        })
        .collect();
    ok(id, json!({"known": true, "running": st.live(), "pending": st.pending(), "executions": execs}))
}

fn release_op(g: &Guardian, id: u64, req: &Value) -> Value {
    let (layout, thread) = match layout_of(g, req) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let targets: Vec<Target> = match req.get("targets").cloned().map(serde_json::from_value) {
        Some(Ok(t)) => t,
        Some(Err(e)) => return error(id, "invalid_input", format!("targets: {e}")),
        None => return error(id, "invalid_input", "missing targets"),
    };
    let paths: Vec<String> = targets.iter().map(|t| t.path.clone()).collect();
    let Some(session) = g.session(layout.workspace(), &thread) else {
        let report =
            ReleaseReport::denied(&paths, Reason::OwnerUnavailable, &[], "session is not owned by this guardian");
        return ok(id, json!({"report": report}));
    };
    let report = {
        let _admission = lock(&session.admission);
        // Under the barrier these counts can only fall: nothing starts.
        let owner = {
            let st = lock(&session.state);
            SessionOwner { live: st.live(), pending: st.pending() }
        };
        let req = ReleaseRequest { layout: &session.layout, thread_id: &thread, targets: &targets };
        release(&req, &owner, &ReleaseOptions::default())
    };
    tracing::info!(thread = %thread, status = ?report.status, bytes = report.bytes_reclaimed, "release");
    ok(id, json!({"report": report}))
}
