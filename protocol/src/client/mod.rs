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

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::trust;
use serde::de::DeserializeOwned;
use serde_json::Value;
use winx_release_engine::{ReleaseReport, Target};

pub use crate::messages::{CommandReply, GuardianStatus, Hello, SessionOpened, StatusReply, StopReply};
use crate::messages::{ErrorCode, ReleaseReply, ReplyLine, Request, RequestLine, MAX_REPLY_BYTES, PROTOCOL_VERSION};

mod error;
#[cfg(any(test, feature = "fake-guardian"))]
#[allow(missing_docs)]
pub mod fake;

pub use error::{ClientError, Phase};

/// This client's name in `hello`.
pub const CLIENT_NAME: &str = concat!("winx-release-mcp/", env!("CARGO_PKG_VERSION"));

/// What `exec` runs.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandRequest {
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

    /// Whether this connection, between requests, can carry another: no
    /// byte of a reply is left unread, and `poll(2)` reports no input, no
    /// hang-up and no error on it now.
    ///
    /// A guardian closes a connection only when it stops or when a line
    /// could not be read as a request: a connection kept after its last
    /// reply was read whole is still served, and the same guardian serves
    /// it (a connection cannot change processes). It cannot tell a close
    /// that comes after it answered; the request sent then is lost as any
    /// request a stopping guardian does not read ([`ClientError::Transport`],
    /// never re-sent).
    ///
    /// # References
    /// - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
    pub fn is_reusable(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        if !self.reader.buffer().is_empty() {
            return false;
        }
        let wanted = PollFlags::IN | PollFlags::RDHUP;
        let mut fds = [PollFd::new(self.reader.get_ref(), wanted)];
        matches!(poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(0))
    }

    /// Sends one request and decodes the `ok` reply's body as `T`.
    ///
    /// An `unknown_op` error is [`ClientError::Unsupported`]; any other error
    /// reply is [`ClientError::Remote`]; a lost or torn reply is
    /// [`ClientError::Transport`] and is never re-sent.
    pub fn call<T: DeserializeOwned>(&mut self, request: Request, timeout: Duration) -> Result<T, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let op = request.as_str();
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
    pub fn exec(&mut self, req: &CommandRequest) -> Result<CommandReply, ClientError> {
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
    ) -> Result<CommandReply, ClientError> {
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
    /// guardian without shells answers `unknown_op`:
    /// [`ClientError::Unsupported`].
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

#[cfg(test)]
mod trust_tests;

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;
    use serde_json::json;
    use std::sync::Arc;
    use winx_release_engine::Reason;

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

    /// A socket in a private directory whose one connection is read up to
    /// its first line and then handed to `answer`.
    fn one_connection(
        answer: impl FnOnce(&mut UnixStream) + Send + 'static,
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let d = private_tempdir();
        let path = d.path().join("g.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut w = conn.try_clone().unwrap();
            let mut line = String::new();
            BufReader::new(conn).read_line(&mut line).unwrap();
            answer(&mut w);
        });
        (d, path)
    }

    #[test]
    fn wrong_id_is_a_protocol_error() {
        let (_d, path) = one_connection(|w| w.write_all(b"{\"id\":99,\"ok\":true}\n").unwrap());
        let mut c = GuardianClient::connect(&path, timeouts()).unwrap();
        assert!(matches!(c.hello(), Err(ClientError::Protocol(_))));
    }

    /// A guardian that answers `hello`, then does what `after` says with
    /// the connection.
    fn hello_then(after: fn(&mut UnixStream)) -> (tempfile::TempDir, GuardianClient) {
        let (d, path) = one_connection(move |w| {
            let mut reply = hello_reply(&["temporary_release"], "i1");
            reply["id"] = json!(1);
            w.write_all(format!("{reply}\n").as_bytes()).unwrap();
            after(w);
            std::thread::sleep(Duration::from_secs(2));
        });
        let (c, _) = GuardianClient::connect_hello(&path, timeouts()).unwrap();
        (d, c)
    }

    #[test]
    fn a_connection_is_reusable_only_while_the_guardian_keeps_it_quiet_and_open() {
        let (_d, c) = hello_then(|_| {});
        assert!(c.is_reusable(), "served, open, nothing unread");
        let (_d, c) = hello_then(|w| w.shutdown(std::net::Shutdown::Both).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert!(!c.is_reusable(), "the guardian closed it");
        let (_d, c) = hello_then(|w| w.write_all(b"{\"id\":7,\"ok\":true}\n").unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert!(!c.is_reusable(), "a line nobody asked for waits on it");
    }
}
