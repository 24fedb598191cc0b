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

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use winx_release_engine::{Reason, ReleaseReport, Target};

/// This client's name in `hello`.
pub const CLIENT_NAME: &str = concat!("winx-release-mcp/", env!("CARGO_PKG_VERSION"));
/// The protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;
/// The capability a guardian must advertise for releases.
pub const CAP_TEMPORARY_RELEASE: &str = "temporary_release";
/// The error code of an op the guardian does not know.
pub const UNKNOWN_OP: &str = "unknown_op";
/// Longest reply line accepted.
pub const MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;

/// The guardian socket when none is given on the command line:
/// `$WINX_GUARDIAN_SOCKET`, else `$XDG_RUNTIME_DIR/winx/guardian.sock`, else
/// `/tmp/winx-<uid>/guardian.sock` (contract section 1). Empty and, for
/// `XDG_RUNTIME_DIR`, relative values are ignored.
pub fn default_socket_path() -> PathBuf {
    winx_release_engine::layout::default_socket_path()
}

/// `--socket PATH` when given, else [`default_socket_path`].
pub fn resolve_socket_path(explicit: Option<&Path>) -> PathBuf {
    explicit.map(Path::to_path_buf).unwrap_or_else(default_socket_path)
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
#[derive(Debug)]
pub enum ClientError {
    /// No connection could be made (`owner_unavailable`).
    Unavailable(io::Error),
    /// The guardian is too old for what was asked (`owner_unsupported`).
    Unsupported(String),
    /// The guardian answered with an error.
    Remote {
        /// Its error code.
        code: String,
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
            ClientError::Unavailable(_) | ClientError::Transport { .. } | ClientError::Protocol(_) => {
                Some(Reason::OwnerUnavailable)
            }
            ClientError::Unsupported(_) => Some(Reason::OwnerUnsupported),
            ClientError::Remote { code, .. } => Reason::from_code(code),
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
            ClientError::Unsupported(m) => write!(f, "guardian unsupported: {m}"),
            ClientError::Remote { code, message } => write!(f, "guardian refused ({code}): {message}"),
            ClientError::Transport { phase: Phase::Write, error } => {
                write!(f, "sending to the guardian failed: {error}")
            }
            ClientError::Transport { phase: Phase::Read, error } => write!(f, "guardian reply lost: {error}"),
            ClientError::Protocol(m) => write!(f, "guardian protocol error: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// The guardian's `hello` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol version.
    pub protocol: u64,
    /// Name and version of the guardian.
    #[serde(default)]
    pub guardian: String,
    /// Its platform (`linux`).
    #[serde(default)]
    pub platform: String,
    /// What it supports.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Random id made when it started.
    #[serde(default)]
    pub instance: Option<String>,
    /// Its process id.
    #[serde(default)]
    pub pid: Option<u64>,
}

impl Hello {
    /// Whether it advertises `cap`.
    pub fn supports(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }

    /// Whether it advertises `temporary_release` (and speaks protocol 1).
    pub fn supports_temporary_release(&self) -> bool {
        self.protocol == PROTOCOL_VERSION && self.supports(CAP_TEMPORARY_RELEASE)
    }
}

/// The `session_open` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOpened {
    /// The session directory.
    pub session_dir: String,
    /// The guardian instance.
    #[serde(default)]
    pub instance: Option<String>,
}

/// An `exec` request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExecRequest {
    /// The workspace (cwd).
    pub workspace: String,
    /// The thread.
    pub thread_id: String,
    /// The command, run with `bash -c`.
    pub command: String,
    /// Seconds to wait for it.
    pub wait_for_seconds: f64,
    /// Whether it runs in the background.
    pub is_background: bool,
}

/// An `exec` / `exec_status` answer (unknown fields kept in `extra`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecReply {
    /// The command's id.
    pub command_id: String,
    /// `completed`, `running` or `queued`.
    pub status: String,
    /// Its exit code, `null` while running.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Its inline output.
    #[serde(default)]
    pub output: String,
    /// Whether the inline output is cut.
    #[serde(default)]
    pub output_truncated: bool,
    /// Anything else the guardian said.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
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
    pub fn connect(socket: &Path, timeouts: Timeouts) -> Result<GuardianClient, ClientError> {
        let stream = UnixStream::connect(socket)
            .map_err(|e| ClientError::Unavailable(io::Error::new(e.kind(), format!("{}: {e}", socket.display()))))?;
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

    /// Sends `{"id", "op", ...fields}` and returns the fields of an `ok`
    /// reply. An `unknown_op` error is [`ClientError::Unsupported`].
    pub fn request(
        &mut self,
        op: &str,
        fields: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Map<String, Value>, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut req = Map::new();
        req.insert("id".into(), json!(id));
        req.insert("op".into(), json!(op));
        req.extend(fields);
        let mut line = serde_json::to_vec(&Value::Object(req)).map_err(|e| ClientError::Protocol(e.to_string()))?;
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
        let reply: Value = serde_json::from_slice(&buf).map_err(|e| ClientError::Protocol(format!("reply: {e}")))?;
        let Value::Object(mut reply) = reply else {
            return Err(ClientError::Protocol("reply is not an object".into()));
        };
        if reply.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(ClientError::Protocol(format!("reply id {:?} is not {id}", reply.get("id"))));
        }
        match reply.get("ok") {
            Some(Value::Bool(true)) => {
                reply.remove("id");
                reply.remove("ok");
                Ok(reply)
            }
            Some(Value::Bool(false)) => {
                let err = reply.get("error");
                let code = err.and_then(|e| e.get("code")).and_then(Value::as_str).unwrap_or("unknown").to_owned();
                let message = err.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("").to_owned();
                if code == UNKNOWN_OP {
                    return Err(ClientError::Unsupported(format!("op {op:?} unknown to the guardian: {message}")));
                }
                Err(ClientError::Remote { code, message })
            }
            _ => Err(ClientError::Protocol("reply lacks a boolean \"ok\"".into())),
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(op: &str, m: Map<String, Value>) -> Result<T, ClientError> {
        serde_json::from_value(Value::Object(m)).map_err(|e| ClientError::Protocol(format!("{op} reply: {e}")))
    }

    fn fields(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    /// `hello`: protocol, capabilities, instance. Recorded for
    /// [`GuardianClient::release`].
    pub fn hello(&mut self) -> Result<Hello, ClientError> {
        let fields = Self::fields(json!({"protocol": PROTOCOL_VERSION, "client": CLIENT_NAME}));
        let h: Hello = Self::decode("hello", self.request("hello", fields, self.timeouts.io)?)?;
        self.hello = Some(h.clone());
        Ok(h)
    }

    /// `session_open`: registers the session and creates its directory.
    pub fn session_open(&mut self, workspace: &str, thread_id: &str) -> Result<SessionOpened, ClientError> {
        let fields = Self::fields(json!({"workspace": workspace, "thread_id": thread_id}));
        Self::decode("session_open", self.request("session_open", fields, self.timeouts.io)?)
    }

    fn exec_timeout(&self, wait: f64) -> Duration {
        Duration::from_secs_f64(wait.clamp(0.0, 86_400.0)) + self.timeouts.exec_slack
    }

    /// `exec`: runs a command, waiting up to its `wait_for_seconds`.
    pub fn exec(&mut self, req: &ExecRequest) -> Result<ExecReply, ClientError> {
        let fields = Self::fields(serde_json::to_value(req).map_err(|e| ClientError::Protocol(e.to_string()))?);
        let timeout = self.exec_timeout(req.wait_for_seconds);
        Self::decode("exec", self.request("exec", fields, timeout)?)
    }

    /// `exec_status`: reports on a command, waiting up to `wait_for_seconds`.
    pub fn exec_status(
        &mut self,
        thread_id: &str,
        command_id: &str,
        wait_for_seconds: f64,
    ) -> Result<ExecReply, ClientError> {
        let fields = Self::fields(json!({"thread_id": thread_id, "command_id": command_id,
            "wait_for_seconds": wait_for_seconds}));
        let timeout = self.exec_timeout(wait_for_seconds);
        Self::decode("exec_status", self.request("exec_status", fields, timeout)?)
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
        match &self.hello {
            Some(h) if h.supports_temporary_release() => {}
            Some(_) => {
                return Err(ClientError::Unsupported("the guardian does not advertise temporary_release".into()))
            }
            None => return Err(ClientError::Unsupported("no hello on this connection".into())),
        }
        let fields = Self::fields(json!({"workspace": workspace, "thread_id": thread_id, "targets": targets}));
        let mut reply = self.request("release", fields, self.timeouts.release)?;
        let report =
            reply.remove("report").ok_or_else(|| ClientError::Protocol("release reply lacks report".into()))?;
        serde_json::from_value(report).map_err(|e| ClientError::Protocol(format!("release report: {e}")))
    }

    /// `status`: the thread's running and pending executions (diagnostics).
    pub fn status(&mut self, thread_id: &str) -> Result<Map<String, Value>, ClientError> {
        self.request("status", Self::fields(json!({"thread_id": thread_id})), self.timeouts.io)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A minimal scripted guardian for unit tests.

    use super::*;
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

    /// A hello reply with `caps`.
    pub fn hello_reply(caps: &[&str], instance: &str) -> Value {
        json!({"ok": true, "protocol": 1, "guardian": "fake/0", "platform": "linux",
            "capabilities": caps, "instance": instance, "pid": 1})
    }
}

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;
    use std::sync::Arc;

    fn timeouts() -> Timeouts {
        Timeouts { io: Duration::from_secs(5), release: Duration::from_secs(5), exec_slack: Duration::from_secs(5) }
    }

    #[test]
    fn unavailable_when_nothing_listens() {
        let d = tempfile::tempdir().unwrap();
        let e = GuardianClient::connect(&d.path().join("none.sock"), timeouts()).unwrap_err();
        assert_eq!(e.reason(), Some(Reason::OwnerUnavailable));
    }

    #[test]
    fn hello_without_capability_blocks_release_unsent() {
        let d = tempfile::tempdir().unwrap();
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
        let d = tempfile::tempdir().unwrap();
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
        assert_eq!(c.status("t").unwrap_err().reason(), Some(Reason::ThreadMismatch));
        // A dropped connection is a lost reply.
        let e = c.session_open("/w", "t").unwrap_err();
        assert!(e.outcome_unknown(), "{e}");
        assert_eq!(e.reason(), Some(Reason::OwnerUnavailable));
    }

    #[test]
    fn wrong_id_is_a_protocol_error() {
        let d = tempfile::tempdir().unwrap();
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
