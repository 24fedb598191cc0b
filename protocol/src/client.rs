//! A synchronous client of the guardian socket protocol (`docs/PROTOCOL.md`).
//!
//! JSON lines over a Unix stream socket: one request per line, one response
//! per line, ids checked. Errors map to the contract's codes:
//! a connection that cannot be made is `owner_unavailable`; a hello without
//! `temporary_release`, another protocol version, or any op answered with
//! `unknown_op` is `owner_unsupported`.
//!
//! [`GuardianClient::release`] refuses, without sending anything, unless this
//! connection's hello advertised `temporary_release`. A reply lost after a
//! request was written is reported as [`ClientError::Transport`]; the client
//! never re-sends a request on its own.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::trust;
use serde::de::DeserializeOwned;
use serde_json::Value;
use winx_release_engine::{Reason, ReleaseReport, Target};

use crate::messages::{ErrorCode, ReleaseReply, ReplyLine, Request, RequestLine, MAX_REPLY_BYTES, PROTOCOL_VERSION};
pub use crate::messages::{ExecReply, GuardianStatus, Hello, SessionOpened, StatusReply, StopReply};

/// This client's name in `hello`.
pub const CLIENT_NAME: &str = concat!("winx-release-mcp/", env!("CARGO_PKG_VERSION"));

/// The guardian socket when none is given on the command line:
/// `$WINX_GUARDIAN_SOCKET`, else `$XDG_RUNTIME_DIR/winx/guardian.sock`, else
/// `/run/user/<uid>/winx/guardian.sock` when that directory is the user's
/// and 0700, else `/tmp/winx-<uid>/guardian.sock` (contract section 1; the
/// rule is [`winx_release_engine::layout::default_socket_path`]). Empty and, for
/// `XDG_RUNTIME_DIR`, relative values are ignored.
pub fn default_socket_path() -> PathBuf {
    winx_release_engine::layout::default_socket_path()
}

/// `--socket PATH` when given, else [`default_socket_path`].
pub fn resolve_socket_path(explicit: Option<&Path>) -> PathBuf {
    explicit.map(Path::to_path_buf).unwrap_or_else(default_socket_path)
}

/// A note on the environment when it explains why `socket` cannot be used:
/// `XDG_RUNTIME_DIR` unset or empty while `socket` is `/winx/...` (what
/// `--socket "$XDG_RUNTIME_DIR/winx/guardian.sock"` becomes then), or an
/// `XDG_RUNTIME_DIR` that `socket` lies below and that is not a writable
/// directory. `None` when the environment is not the cause.
pub fn socket_advice(socket: &Path) -> Option<String> {
    let xdg = std::env::var_os("XDG_RUNTIME_DIR");
    let empty = xdg.as_ref().is_none_or(|v| v.is_empty());
    if empty && socket.starts_with("/winx") {
        return Some(format!(
            "XDG_RUNTIME_DIR is {}, so \"$XDG_RUNTIME_DIR/winx/...\" became {}; leave --socket out (the default here \
             is {})",
            if xdg.is_none() { "not set" } else { "empty" },
            socket.display(),
            default_socket_path().display()
        ));
    }
    let x = PathBuf::from(xdg.filter(|v| !v.is_empty())?);
    if !socket.starts_with(&x) {
        return None;
    }
    let why = match std::fs::metadata(&x) {
        Err(e) => e.to_string(),
        Ok(m) if !m.is_dir() => "is not a directory".to_owned(),
        Ok(_) => match rustix::fs::access(&x, rustix::fs::Access::WRITE_OK) {
            Ok(()) => return None,
            Err(e) => format!("is not writable ({e})"),
        },
    };
    Some(format!("XDG_RUNTIME_DIR={} is unusable: {why}", x.display()))
}

/// A socket path a guardian can listen on for this user: `tried` when its
/// directory is trusted, or missing below a directory that exists;
/// otherwise the default path ([`default_socket_path`]) or
/// `/tmp/winx-<uid>/guardian.sock`, whichever passes that test first
/// (`tried` when none does). What a "start one with" hint names.
pub fn usable_socket_path(tried: &Path) -> PathBuf {
    let usable = |sock: &Path| {
        let dir = trust::socket_dir(sock);
        match trust::trusted_socket_dir(dir, false) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                dir.parent().is_some_and(|p| rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok())
            }
            Err(_) => false,
        }
    };
    let uid = rustix::process::getuid().as_raw();
    let fallback = PathBuf::from(format!("/tmp/winx-{uid}/guardian.sock"));
    [tried.to_path_buf(), default_socket_path(), fallback].into_iter().find(|p| usable(p)).unwrap_or(tried.into())
}

/// Where a transport error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// While writing the request: the guardian may have received part of it.
    Write,
    /// While waiting for the reply: the guardian may have run the request.
    Read,
}

/// Why a guardian call failed.
#[non_exhaustive]
#[derive(Debug)]
pub enum ClientError {
    /// No connection could be made (`owner_unavailable`).
    Unavailable(io::Error),
    /// The socket's directory or its peer is not trusted (contract section
    /// 1): nothing was sent, and no guardian may be started there
    /// (`owner_unavailable`). The error names the failed check.
    Untrusted(io::Error),
    /// The guardian is too old for what was asked (`owner_unsupported`).
    Unsupported(String),
    /// The guardian answered with an error.
    Remote {
        /// Its error code: a code this build does not know (a newer
        /// guardian's) is [`ErrorCode::Other`], and maps to no contract
        /// reason.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The connection failed after it was made; a request may have been
    /// delivered and run, and its reply lost.
    Transport {
        /// Where it failed.
        phase: Phase,
        /// The error.
        error: io::Error,
    },
    /// A reply that does not follow the protocol.
    Protocol(String),
}

impl ClientError {
    /// The contract reason of this failure: `owner_unavailable` for
    /// connection trouble, `owner_unsupported` for an older guardian, the
    /// guardian's own code when it is a contract reason, else `None`.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            ClientError::Unavailable(_)
            | ClientError::Untrusted(_)
            | ClientError::Transport { .. }
            | ClientError::Protocol(_) => Some(Reason::OwnerUnavailable),
            ClientError::Unsupported(_) => Some(Reason::OwnerUnsupported),
            ClientError::Remote { code, .. } => code.reason(),
        }
    }

    /// Whether the request may have reached the guardian and run although no
    /// usable reply came back.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ClientError::Transport { .. } | ClientError::Protocol(_))
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Unavailable(e) => write!(f, "guardian unreachable: {e}"),
            ClientError::Untrusted(e) => write!(f, "guardian socket not trusted: {e}"),
            ClientError::Unsupported(m) => write!(f, "guardian unsupported: {m}"),
            ClientError::Remote { code, message } => write!(f, "guardian refused ({}): {message}", code.as_str()),
            ClientError::Transport { phase: Phase::Write, error } => {
                write!(f, "sending to the guardian failed: {error}")
            }
            ClientError::Transport { phase: Phase::Read, error } => write!(f, "guardian reply lost: {error}"),
            ClientError::Protocol(m) => write!(f, "guardian protocol error: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// What `exec` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecRequest {
    /// The workspace (cwd).
    pub workspace: String,
    /// The thread.
    pub thread_id: String,
    /// The command, run with `bash -c`.
    pub command: String,
    /// Seconds a foreground call waits for it.
    pub wait_for_seconds: f64,
    /// Whether it runs in the background.
    pub is_background: bool,
}

/// Timeouts of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Writing a request and reading a short reply.
    pub io: Duration,
    /// Reading the reply of a release (scans and hashes can be long).
    pub release: Duration,
    /// Extra time granted over an `exec` wait.
    pub exec_slack: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts { io: Duration::from_secs(10), release: Duration::from_secs(600), exec_slack: Duration::from_secs(30) }
    }
}

/// One connection to a guardian.
#[derive(Debug)]
pub struct GuardianClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    timeouts: Timeouts,
    hello: Option<Hello>,
}

impl GuardianClient {
    /// Connects to the guardian at `socket` (no request is sent).
    ///
    /// Before connecting, the socket's directory must pass
    /// [`trust::trusted_socket_dir`]; after connecting, the peer must
    /// pass [`trust::check_peer`]. A failed check is
    /// [`ClientError::Untrusted`] and nothing is sent. A directory or socket
    /// that does not exist is [`ClientError::Unavailable`].
    pub fn connect(socket: &Path, timeouts: Timeouts) -> Result<GuardianClient, ClientError> {
        let untrusted = |e: io::Error| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                ClientError::Untrusted(e)
            } else {
                ClientError::Unavailable(e)
            }
        };
        trust::trusted_socket_dir(trust::socket_dir(socket), false).map_err(untrusted)?;
        let stream = UnixStream::connect(socket)
            .map_err(|e| ClientError::Unavailable(io::Error::new(e.kind(), format!("{}: {e}", socket.display()))))?;
        trust::check_peer(&stream).map_err(ClientError::Untrusted)?;
        stream.set_write_timeout(Some(timeouts.io)).map_err(ClientError::Unavailable)?;
        let writer = stream.try_clone().map_err(ClientError::Unavailable)?;
        Ok(GuardianClient { reader: BufReader::new(stream), writer, next_id: 1, timeouts, hello: None })
    }

    /// Connects and says hello.
    pub fn connect_hello(socket: &Path, timeouts: Timeouts) -> Result<(GuardianClient, Hello), ClientError> {
        let mut c = GuardianClient::connect(socket, timeouts)?;
        let h = c.hello()?;
        Ok((c, h))
    }

    /// The hello of this connection, once [`GuardianClient::hello`] ran.
    pub fn hello_reply(&self) -> Option<&Hello> {
        self.hello.as_ref()
    }

    /// Sends one request and decodes the `ok` reply's body as `T`.
    ///
    /// An `unknown_op` error is [`ClientError::Unsupported`]; any other error
    /// reply is [`ClientError::Remote`]; a lost or torn reply is
    /// [`ClientError::Transport`] and is never re-sent.
    pub fn call<T: DeserializeOwned>(&mut self, request: Request, timeout: Duration) -> Result<T, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let op = request.op();
        let mut line =
            serde_json::to_vec(&RequestLine { id, request }).map_err(|e| ClientError::Protocol(e.to_string()))?;
        line.push(b'\n');
        self.writer
            .write_all(&line)
            .and_then(|()| self.writer.flush())
            .map_err(|error| ClientError::Transport { phase: Phase::Write, error })?;
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|error| ClientError::Transport { phase: Phase::Read, error })?;
        let mut buf = Vec::new();
        let n = Read::take(&mut self.reader, MAX_REPLY_BYTES + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|error| ClientError::Transport { phase: Phase::Read, error })?;
        if n == 0 {
            let error = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the reply");
            return Err(ClientError::Transport { phase: Phase::Read, error });
        }
        if buf.last() != Some(&b'\n') {
            if buf.len() as u64 > MAX_REPLY_BYTES {
                return Err(ClientError::Protocol("reply line too long".into()));
            }
            let error = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside the reply");
            return Err(ClientError::Transport { phase: Phase::Read, error });
        }
        let reply: ReplyLine =
            serde_json::from_slice(&buf).map_err(|e| ClientError::Protocol(format!("{op} reply: {e}")))?;
        if reply.id != id {
            return Err(ClientError::Protocol(format!("reply id {} is not {id}", reply.id)));
        }
        if !reply.ok {
            let err = reply.error.ok_or_else(|| ClientError::Protocol("error reply lacks \"error\"".into()))?;
            if err.code == ErrorCode::UnknownOp {
                return Err(ClientError::Unsupported(format!("op {op:?} unknown to the guardian: {}", err.message)));
            }
            return Err(ClientError::Remote { code: err.code, message: err.message });
        }
        serde_json::from_value(Value::Object(reply.body)).map_err(|e| ClientError::Protocol(format!("{op} reply: {e}")))
    }

    /// `hello`: protocol, capabilities, instance. Recorded for
    /// [`GuardianClient::release`].
    pub fn hello(&mut self) -> Result<Hello, ClientError> {
        let req = Request::Hello { protocol: PROTOCOL_VERSION, client: CLIENT_NAME.to_owned() };
        let h: Hello = self.call(req, self.timeouts.io)?;
        self.hello = Some(h.clone());
        Ok(h)
    }

    /// `session_open`: registers the session and creates its directory.
    pub fn session_open(&mut self, workspace: &str, thread_id: &str) -> Result<SessionOpened, ClientError> {
        self.session_open_with(workspace, thread_id, None, None)
    }

    /// `session_open` that also records the thread's shell mode and its
    /// `code_writer_config` (what an operator's release runs under).
    pub fn session_open_with(
        &mut self,
        workspace: &str,
        thread_id: &str,
        mode_name: Option<&str>,
        code_writer_config: Option<&Value>,
    ) -> Result<SessionOpened, ClientError> {
        let req = Request::SessionOpen {
            workspace: workspace.to_owned(),
            thread_id: thread_id.to_owned(),
            mode_name: mode_name.map(str::to_owned),
            code_writer_config: code_writer_config.cloned(),
        };
        self.call(req, self.timeouts.io)
    }

    fn exec_timeout(&self, wait: f64) -> Duration {
        Duration::from_secs_f64(wait.clamp(0.0, 86_400.0)) + self.timeouts.exec_slack
    }

    /// `exec`: runs a command; a foreground call waits up to
    /// `wait_for_seconds`, a background one answers at once.
    pub fn exec(&mut self, req: &ExecRequest) -> Result<ExecReply, ClientError> {
        let timeout = self.exec_timeout(if req.is_background { 0.0 } else { req.wait_for_seconds });
        let request = Request::Exec {
            workspace: req.workspace.clone(),
            thread_id: req.thread_id.clone(),
            command: req.command.clone(),
            wait_for_seconds: Some(req.wait_for_seconds),
            is_background: req.is_background,
        };
        self.call(request, timeout)
    }

    /// `exec_status`: reports on a command, waiting up to `wait_for_seconds`.
    pub fn exec_status(
        &mut self,
        thread_id: &str,
        command_id: &str,
        wait_for_seconds: f64,
    ) -> Result<ExecReply, ClientError> {
        let req = Request::ExecStatus {
            thread_id: Some(thread_id.to_owned()),
            command_id: command_id.to_owned(),
            wait_for_seconds: Some(wait_for_seconds),
        };
        let timeout = self.exec_timeout(wait_for_seconds);
        self.call(req, timeout)
    }

    /// `shell`: an action on the thread's shell, waiting up to
    /// `wait_for_seconds` for the command to be back at its prompt. A
    /// guardian without shells answers [`ClientError`] with `unknown_op`.
    pub fn shell(
        &mut self,
        workspace: &str,
        thread_id: &str,
        action: crate::shell::ShellAction,
        wait_for_seconds: f64,
    ) -> Result<crate::shell::ShellReply, ClientError> {
        let timeout = self.exec_timeout(wait_for_seconds);
        let req = Request::Shell {
            workspace: workspace.to_owned(),
            thread_id: thread_id.to_owned(),
            action,
            wait_for_seconds: Some(wait_for_seconds),
        };
        self.call(req, timeout)
    }

    /// `release`: runs a release under the guardian's admission barrier.
    ///
    /// Refuses with [`ClientError::Unsupported`], sending nothing, unless
    /// this connection's hello advertised `temporary_release`.
    pub fn release(
        &mut self,
        workspace: &str,
        thread_id: &str,
        targets: &[Target],
    ) -> Result<ReleaseReport, ClientError> {
        self.release_with(workspace, thread_id, targets, false)
    }

    /// [`GuardianClient::release`]; with `dry_run`, the guardian runs every
    /// check under the barrier and captures nothing.
    pub fn release_with(
        &mut self,
        workspace: &str,
        thread_id: &str,
        targets: &[Target],
        dry_run: bool,
    ) -> Result<ReleaseReport, ClientError> {
        match &self.hello {
            Some(h) if h.supports_temporary_release() => {}
            Some(_) => {
                return Err(ClientError::Unsupported("the guardian does not advertise temporary_release".into()))
            }
            None => return Err(ClientError::Unsupported("no hello on this connection".into())),
        }
        let req = Request::Release {
            workspace: workspace.to_owned(),
            thread_id: thread_id.to_owned(),
            targets: targets.to_vec(),
            dry_run,
        };
        let reply: ReleaseReply = self.call(req, self.timeouts.release)?;
        Ok(reply.report)
    }

    /// `status`: the thread's running and pending executions (diagnostics).
    pub fn status(&mut self, workspace: &str, thread_id: &str) -> Result<StatusReply, ClientError> {
        let req = Request::Status { workspace: workspace.to_owned(), thread_id: thread_id.to_owned() };
        self.call(req, self.timeouts.io)
    }

    /// `guardian_status`: pid, liveness, sessions and running executions.
    pub fn guardian_status(&mut self) -> Result<GuardianStatus, ClientError> {
        self.call(Request::GuardianStatus {}, self.timeouts.io)
    }

    /// `stop`: asks the guardian to stop as on SIGTERM. Refused
    /// ([`ClientError::Remote`] `execution_active`, naming them) while
    /// executions run, unless `force`.
    pub fn stop(&mut self, force: bool) -> Result<StopReply, ClientError> {
        self.call(Request::Stop { force }, self.timeouts.io)
    }
}

#[cfg(any(test, feature = "fake-guardian"))]
#[allow(missing_docs)]
pub mod fake {
    //! A minimal scripted guardian for unit tests (feature `fake-guardian`).

    use super::*;
    use serde_json::json;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;
    use std::sync::{Arc, Mutex};
    use std::thread::JoinHandle;

    /// A handler maps (op, request) to a reply line (without id), or `None`
    /// to drop the connection without answering.
    pub type Handler = dyn Fn(&str, &Value) -> Option<Value> + Send + Sync;

    /// A guardian listening at `path`, answering with `handler`, recording
    /// every op it receives.
    pub struct FakeGuardian {
        pub path: PathBuf,
        pub ops: Arc<Mutex<Vec<String>>>,
        _thread: JoinHandle<()>,
    }

    impl FakeGuardian {
        pub fn start(path: PathBuf, handler: Arc<Handler>) -> FakeGuardian {
            let listener = UnixListener::bind(&path).unwrap();
            let ops = Arc::new(Mutex::new(Vec::new()));
            let ops2 = ops.clone();
            let thread = std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { return };
                    let handler = handler.clone();
                    let ops = ops2.clone();
                    std::thread::spawn(move || {
                        let mut w = conn.try_clone().unwrap();
                        for line in BufReader::new(conn).lines() {
                            let Ok(line) = line else { return };
                            let req: Value = serde_json::from_str(&line).unwrap();
                            let op = req["op"].as_str().unwrap_or_default().to_owned();
                            ops.lock().unwrap().push(op.clone());
                            let Some(mut reply) = handler(&op, &req) else { return };
                            reply["id"] = req["id"].clone();
                            let mut out = serde_json::to_vec(&reply).unwrap();
                            out.push(b'\n');
                            if w.write_all(&out).is_err() {
                                return;
                            }
                        }
                    });
                }
            });
            FakeGuardian { path, ops, _thread: thread }
        }

        pub fn ops(&self) -> Vec<String> {
            self.ops.lock().unwrap().clone()
        }
    }

    /// A temporary directory of mode 0700 (one that may hold a socket).
    pub fn private_tempdir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    /// A hello reply with `caps`.
    pub fn hello_reply(caps: &[&str], instance: &str) -> Value {
        json!({"ok": true, "protocol": 1, "guardian": "fake/0", "platform": "linux",
            "capabilities": caps, "instance": instance, "pid": 1})
    }
}

#[cfg(test)]
#[path = "client_trust_tests.rs"]
mod trust_tests;

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn timeouts() -> Timeouts {
        Timeouts { io: Duration::from_secs(5), release: Duration::from_secs(5), exec_slack: Duration::from_secs(5) }
    }

    #[test]
    fn unavailable_when_nothing_listens() {
        let d = private_tempdir();
        let e = GuardianClient::connect(&d.path().join("none.sock"), timeouts()).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::OwnerUnavailable));
    }

    #[test]
    fn hello_without_capability_blocks_release_unsent() {
        let d = private_tempdir();
        let g = FakeGuardian::start(
            d.path().join("g.sock"),
            Arc::new(|op: &str, _: &Value| match op {
                "hello" => Some(hello_reply(&["executions"], "i1")),
                _ => Some(json!({"ok": true, "report": {}})),
            }),
        );
        let (mut c, h) = GuardianClient::connect_hello(&g.path, timeouts()).unwrap();
        assert!(!h.supports_temporary_release());
        assert_eq!(h.instance.as_deref(), Some("i1"));
        let e = c.release("/w", "t", &[]).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::OwnerUnsupported));
        assert_eq!(g.ops(), vec!["hello".to_owned()]);
    }

    #[test]
    fn unknown_op_is_unsupported_and_remote_codes_map() {
        let d = private_tempdir();
        let g = FakeGuardian::start(
            d.path().join("g.sock"),
            Arc::new(|op: &str, _: &Value| match op {
                "hello" => Some(hello_reply(&["temporary_release"], "i1")),
                "release" => Some(json!({"ok": false, "error": {"code": "unknown_op", "message": "no"}})),
                "status" => Some(json!({"ok": false, "error": {"code": "thread_mismatch", "message": "who"}})),
                _ => None,
            }),
        );
        let (mut c, _) = GuardianClient::connect_hello(&g.path, timeouts()).unwrap();
        assert_eq!(c.release("/w", "t", &[]).unwrap_err().reason(), Some(Reason::OwnerUnsupported));
        assert_eq!(c.status("/w", "t").unwrap_err().reason(), Some(Reason::ThreadMismatch));
        // A dropped connection is a lost reply.
        let e = c.session_open("/w", "t").unwrap_err();
        assert!(e.outcome_unknown(), "{e}");
        assert_eq!(e.reason(), Some(Reason::OwnerUnavailable));
    }

    /// A code from a newer guardian stays a typed [`ErrorCode::Other`]
    /// with its wire spelling, and maps to no contract reason.
    #[test]
    fn remote_codes_stay_typed() {
        let d = private_tempdir();
        let g = FakeGuardian::start(
            d.path().join("g.sock"),
            Arc::new(|op: &str, _: &Value| match op {
                "hello" => Some(hello_reply(&["temporary_release"], "i1")),
                "status" => Some(json!({"ok": false, "error": {"code": "thread_mismatch", "message": "who"}})),
                _ => Some(json!({"ok": false, "error": {"code": "brand_new", "message": "later"}})),
            }),
        );
        let (mut c, _) = GuardianClient::connect_hello(&g.path, timeouts()).unwrap();
        let e = c.status("/w", "t").unwrap_err();
        assert!(matches!(&e, ClientError::Remote { code: ErrorCode::Reason(Reason::ThreadMismatch), .. }), "{e:?}");
        let e = c.stop(false).unwrap_err();
        match &e {
            ClientError::Remote { code: ErrorCode::Other(s), message } => {
                assert_eq!((s.as_str(), message.as_str()), ("brand_new", "later"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(e.reason(), None);
        assert!(!e.outcome_unknown());
        assert_eq!(e.to_string(), "guardian refused (brand_new): later");
    }

    #[test]
    fn wrong_id_is_a_protocol_error() {
        let d = private_tempdir();
        let path = d.path().join("g.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut w = conn.try_clone().unwrap();
            let mut line = String::new();
            BufReader::new(conn).read_line(&mut line).unwrap();
            w.write_all(b"{\"id\":99,\"ok\":true}\n").unwrap();
        });
        let mut c = GuardianClient::connect(&path, timeouts()).unwrap();
        assert!(matches!(c.hello(), Err(ClientError::Protocol(_))));
    }

    #[test]
    fn socket_path_resolution() {
        assert_eq!(resolve_socket_path(Some(Path::new("/x/s.sock"))), PathBuf::from("/x/s.sock"));
        let p = default_socket_path();
        assert!(p.is_absolute() || std::env::var_os("WINX_GUARDIAN_SOCKET").is_some());
        assert!(p.ends_with("guardian.sock") || std::env::var_os("WINX_GUARDIAN_SOCKET").is_some());
    }
}
