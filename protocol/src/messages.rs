//! The guardian socket protocol as types, shared by the client
//! ([`crate::client`]) and the guardian server (`winx-release-guardian`).
//!
//! JSON lines over a Unix stream socket: one [`RequestLine`] per line, one
//! reply per line. A reply is `{"id": n, "ok": true, ...body}` with the body
//! of the op ([`Hello`], [`SessionOpened`], [`ExecReply`], [`ReleaseReply`],
//! [`StatusReply`]), or `{"id": n, "ok": false, "error": {"code", "message"}}`
//! ([`ErrorBody`]). `docs/PROTOCOL.md` shows each op on the wire.
//!
//! Unknown fields are ignored in both directions, so a newer peer can add
//! fields; an unknown op is answered with [`ErrorCode::UnknownOp`], which an
//! older client reads as "this guardian does not support that".

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use winx_release_engine::{Reason, ReleaseReport, Target};

/// The protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;
/// The capability a guardian must advertise for releases.
pub const CAP_TEMPORARY_RELEASE: &str = "temporary_release";
/// Longest request line a guardian accepts, in bytes.
pub const MAX_REQUEST_BYTES: u64 = 1024 * 1024;
/// Longest reply line a client accepts, in bytes.
pub const MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;

/// One request: what the frontend asks the guardian.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Protocol version and capabilities; answered with [`Hello`].
    Hello {
        /// The protocol version the client speaks.
        protocol: u64,
        /// The client's name and version.
        #[serde(default)]
        client: String,
    },
    /// Registers a session and creates its directory; answered with
    /// [`SessionOpened`].
    SessionOpen {
        /// The exact workspace root.
        workspace: String,
        /// The thread.
        thread_id: String,
        /// The thread's shell mode at `Initialize` (`wcgw`, `architect`,
        /// `code_writer`), recorded for an operator's release; absent from
        /// older frontends.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode_name: Option<String>,
        /// The `code_writer_config` given at `Initialize`, recorded with
        /// the mode.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code_writer_config: Option<Value>,
    },
    /// Runs `bash -c command`; answered with [`ExecReply`].
    Exec {
        /// The exact workspace root (the command's cwd).
        workspace: String,
        /// The thread.
        thread_id: String,
        /// The command.
        command: String,
        /// How long a foreground call waits for the command to end
        /// (default 5 s).
        #[serde(default)]
        wait_for_seconds: Option<f64>,
        /// Start it in the background and answer at once.
        #[serde(default)]
        is_background: bool,
    },
    /// Reports on a command; answered with [`ExecReply`].
    ExecStatus {
        /// The thread (informational).
        #[serde(default)]
        thread_id: Option<String>,
        /// The command.
        command_id: String,
        /// How long to wait for it to end (default 0).
        #[serde(default)]
        wait_for_seconds: Option<f64>,
    },
    /// Releases helpers under the session's admission barrier; answered with
    /// [`ReleaseReply`].
    Release {
        /// The exact workspace root.
        workspace: String,
        /// The thread.
        thread_id: String,
        /// The pinned targets.
        targets: Vec<Target>,
        /// Run every check under the barrier (through `in_use`) and stop
        /// there: nothing is captured (an operator's `--dry-run`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dry_run: bool,
    },
    /// An action on the thread's shell; answered with
    /// [`crate::shell::ShellReply`].
    Shell {
        /// The exact workspace root.
        workspace: String,
        /// The thread.
        thread_id: String,
        /// The action.
        action: crate::shell::ShellAction,
        /// How long to wait for the command to be back at the prompt
        /// (default 5 s).
        #[serde(default)]
        wait_for_seconds: Option<f64>,
    },
    /// The session's executions (diagnostics); answered with [`StatusReply`].
    Status {
        /// The exact workspace root.
        workspace: String,
        /// The thread.
        thread_id: String,
    },
    /// The guardian as a whole: pid, liveness, sessions, running
    /// executions; answered with [`GuardianStatus`].
    GuardianStatus {},
    /// Stop as on SIGTERM; answered with [`StopReply`], or refused with
    /// `execution_active` naming what runs, unless `force`.
    Stop {
        /// Stop even while executions run.
        #[serde(default)]
        force: bool,
    },
}

impl Request {
    /// Every op name this protocol version knows.
    pub const OPS: &'static [&'static str] =
        &["hello", "session_open", "exec", "exec_status", "release", "status", "guardian_status", "stop", "shell"];

    /// The wire name of this request's op.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::SessionOpen { .. } => "session_open",
            Request::Exec { .. } => "exec",
            Request::ExecStatus { .. } => "exec_status",
            Request::Release { .. } => "release",
            Request::Status { .. } => "status",
            Request::GuardianStatus {} => "guardian_status",
            Request::Stop { .. } => "stop",
            Request::Shell { .. } => "shell",
        }
    }
}

/// A request with its id, as one line carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestLine {
    /// The id the reply repeats.
    pub id: u64,
    /// The request.
    #[serde(flatten)]
    pub request: Request,
}

/// Why a request line was refused before any op ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// The line's id where one could be read, else 0.
    pub id: u64,
    /// `invalid_input` or `unknown_op`.
    pub code: ErrorCode,
    /// What was wrong.
    pub message: String,
}

/// Parses one request line (without its newline).
///
/// Errors: [`ErrorCode::InvalidInput`] for anything that is not a JSON object
/// with a numeric `id`, a string `op` and that op's fields;
/// [`ErrorCode::UnknownOp`] for an op not in [`Request::OPS`]. Never panics
/// (the fuzz target `guardian_request` holds it to that).
pub fn parse_request(line: &[u8]) -> Result<RequestLine, LineError> {
    let invalid = |id, message: String| LineError { id, code: ErrorCode::InvalidInput, message };
    let value: Value = serde_json::from_slice(line).map_err(|e| invalid(0, format!("not JSON: {e}")))?;
    let Value::Object(obj) = value else { return Err(invalid(0, "a request is a JSON object".into())) };
    let (Some(id), Some(op)) = (obj.get("id").and_then(Value::as_u64), obj.get("op").and_then(Value::as_str)) else {
        return Err(invalid(0, "a request needs a numeric id and a string op".into()));
    };
    if !Request::OPS.contains(&op) {
        return Err(LineError { id, code: ErrorCode::UnknownOp, message: format!("unknown op {op:?}") });
    }
    serde_json::from_value(Value::Object(obj)).map_err(|e| invalid(id, format!("{e}")))
}

/// The error codes a guardian answers with.
///
/// On the wire a code is a string. The guardian's own codes come first; a
/// contract reason code (for instance `path_not_exact` for a workspace that
/// is not exact) is carried as [`ErrorCode::Reason`]; anything else (a newer
/// guardian) is kept as [`ErrorCode::Other`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ErrorCode {
    /// The request line is malformed.
    InvalidInput,
    /// The op is not known to this guardian.
    UnknownOp,
    /// The session directory cannot be made or opened without following links.
    SessionUnavailable,
    /// The command id is not known (never started, or pruned by retention).
    NotFound,
    /// An I/O error on the guardian's side.
    IoError,
    /// A contract reason code.
    Reason(Reason),
    /// A code this client does not know.
    Other(String),
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::SessionUnavailable => "session_unavailable",
            ErrorCode::NotFound => "not_found",
            ErrorCode::IoError => "io_error",
            ErrorCode::Reason(r) => r.as_str(),
            ErrorCode::Other(s) => s,
        }
    }

    /// The contract reason this code is, if it is one.
    pub fn reason(&self) -> Option<Reason> {
        Reason::from_code(self.as_str())
    }
}

impl From<String> for ErrorCode {
    fn from(s: String) -> ErrorCode {
        match s.as_str() {
            "invalid_input" => ErrorCode::InvalidInput,
            "unknown_op" => ErrorCode::UnknownOp,
            "session_unavailable" => ErrorCode::SessionUnavailable,
            "not_found" => ErrorCode::NotFound,
            "io_error" => ErrorCode::IoError,
            other => Reason::from_code(other).map(ErrorCode::Reason).unwrap_or(ErrorCode::Other(s)),
        }
    }
}

impl From<ErrorCode> for String {
    fn from(c: ErrorCode) -> String {
        c.as_str().to_owned()
    }
}

/// The body of an error reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What kind of error.
    pub code: ErrorCode,
    /// A human-readable line.
    #[serde(default)]
    pub message: String,
}

/// The `hello` reply.
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
    /// How it tells that a command still runs: `"cgroup"` or `"proc"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<String>,
}

impl Hello {
    /// Whether it advertises `cap`.
    pub fn supports(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }

    /// Whether it advertises `temporary_release` (and speaks this protocol).
    pub fn supports_temporary_release(&self) -> bool {
        self.protocol == PROTOCOL_VERSION && self.supports(CAP_TEMPORARY_RELEASE)
    }
}

/// The `session_open` reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOpened {
    /// The session directory.
    pub session_dir: String,
    /// The guardian instance.
    #[serde(default)]
    pub instance: Option<String>,
}

/// Where a command is, as `exec` and `exec_status` report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// It ended (or could not start) and nothing it started still runs.
    Completed,
    /// It, or a process it left behind, still runs.
    Running,
    /// It waits behind the thread's running foreground command.
    Queued,
}

/// The `exec` and `exec_status` reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecReply {
    /// The command's id.
    pub command_id: String,
    /// Where it is.
    pub status: ExecStatus,
    /// Its exit code, `null` while running.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Its inline output (the tail, at most 64 KiB).
    #[serde(default)]
    pub output: String,
    /// Whether the inline output is cut.
    #[serde(default)]
    pub output_truncated: bool,
    /// The shell's exit code, when it exited while processes it started
    /// still run (`status` is then `running` and `exit_code` `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_exit_code: Option<i64>,
    /// Whether the shell exited while processes it started still run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leader_exited: bool,
    /// Whether this guardian found the command in `D/executions` (started
    /// by an earlier guardian) rather than started it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
}

/// The `release` reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseReply {
    /// The engine's report.
    pub report: ReleaseReport,
}

/// The state of one execution in a [`StatusReply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionState {
    /// Waiting behind the running foreground command.
    Queued,
    /// Its leader runs.
    Running,
    /// Its leader exited; processes it started may still run.
    Lingering,
    /// Ended and recorded.
    Resolved,
    /// Could not be started.
    FailedToStart,
}

impl From<winx_release_engine::executions::ExecState> for ExecutionState {
    fn from(s: winx_release_engine::executions::ExecState) -> ExecutionState {
        use winx_release_engine::executions::ExecState;
        match s {
            ExecState::Queued => ExecutionState::Queued,
            ExecState::Running => ExecutionState::Running,
            ExecState::Lingering(_) => ExecutionState::Lingering,
            ExecState::Resolved(_) => ExecutionState::Resolved,
            ExecState::FailedToStart => ExecutionState::FailedToStart,
        }
    }
}

impl ExecutionState {
    /// What a command's reply says of an execution in this state:
    /// `completed` once nothing of it can run, `queued` while it waits,
    /// else `running` (a command whose shell is done while what it left
    /// behind runs is still `running`). The one mapping every reply uses.
    pub fn status(self) -> ExecStatus {
        match self {
            ExecutionState::Resolved | ExecutionState::FailedToStart => ExecStatus::Completed,
            ExecutionState::Queued => ExecStatus::Queued,
            ExecutionState::Running | ExecutionState::Lingering => ExecStatus::Running,
        }
    }
}

/// One execution in a [`StatusReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionSummary {
    /// The command id.
    pub command_id: String,
    /// Where it is.
    pub state: ExecutionState,
    /// Whether it runs in the background.
    pub background: bool,
}

/// The `status` reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// Whether the guardian owns this session.
    pub known: bool,
    /// Executions running or unresolved.
    pub running: usize,
    /// Queued actions.
    pub pending: usize,
    /// Every execution of the session.
    #[serde(default)]
    pub executions: Vec<ExecutionSummary>,
    /// The shell mode recorded at `session_open` (`None`: not recorded,
    /// an older frontend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_name: Option<String>,
    /// The `code_writer_config` recorded with the mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_writer_config: Option<Value>,
}

/// One session in a [`GuardianStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The workspace, as the session was first opened.
    pub workspace: String,
    /// The thread.
    pub thread_id: String,
    /// The session directory.
    pub session_dir: String,
    /// The shell mode recorded at `session_open`, if any.
    #[serde(default)]
    pub mode_name: Option<String>,
    /// Its executions running or unresolved.
    pub running: usize,
}

/// One running or unresolved execution in a [`GuardianStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningExecution {
    /// The command id.
    pub command_id: String,
    /// Its thread.
    pub thread_id: String,
    /// Its workspace.
    pub workspace: String,
    /// Where it is (`queued`, `running`, `lingering`).
    pub state: ExecutionState,
    /// Whether it runs in the background.
    pub background: bool,
    /// Whether this guardian found it left by an earlier one.
    #[serde(default)]
    pub adopted: bool,
}

/// The `guardian_status` reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardianStatus {
    /// Name and version of the guardian.
    pub guardian: String,
    /// Its pid.
    pub pid: u64,
    /// Its random instance id.
    pub instance: String,
    /// `cgroup` or `proc`.
    pub liveness: String,
    /// Its data directory `D`.
    pub data_dir: String,
    /// The sessions it has registered.
    pub sessions: Vec<SessionSummary>,
    /// Its executions that run or are unresolved (what would block a stop).
    pub running: Vec<RunningExecution>,
}

/// The `stop` reply: the guardian stops once the reply is out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopReply {
    /// Always true.
    pub stopping: bool,
    /// What ran when `force` stopped it anyway (they keep running: nothing
    /// is signalled).
    #[serde(default)]
    pub running: Vec<RunningExecution>,
}

#[derive(Serialize)]
struct OkLine<'a, T> {
    id: u64,
    ok: bool,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Serialize)]
struct ErrLine<'a> {
    id: u64,
    ok: bool,
    error: &'a ErrorBody,
}

/// The line (with its newline) of a successful reply to request `id`.
pub fn ok_line<T: Serialize>(id: u64, body: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(&OkLine { id, ok: true, body })
        .unwrap_or_else(|e| error_line(id, ErrorCode::IoError, &format!("reply not serialisable: {e}")));
    if line.last() != Some(&b'\n') {
        line.push(b'\n');
    }
    line
}

/// The line (with its newline) of an error reply to request `id`.
pub fn error_line(id: u64, code: ErrorCode, message: &str) -> Vec<u8> {
    let body = ErrorBody { code, message: message.to_owned() };
    let mut line = serde_json::to_vec(&ErrLine { id, ok: false, error: &body }).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A reply line as the client first reads it: the envelope, and the body's
/// fields still to be decoded into the op's reply type.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ReplyLine {
    /// The request's id.
    pub id: u64,
    /// Whether the op succeeded.
    pub ok: bool,
    /// What went wrong, when `ok` is false.
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// The op's reply fields.
    #[serde(flatten)]
    pub body: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use winx_release_engine::{Outcome, ReleaseReport, Status, TargetResult};

    fn round_trip(r: Request) {
        let line = serde_json::to_vec(&RequestLine { id: 7, request: r.clone() }).unwrap();
        let back = parse_request(&line).unwrap();
        assert_eq!(back, RequestLine { id: 7, request: r });
    }

    #[test]
    fn every_request_round_trips() {
        round_trip(Request::Hello { protocol: 1, client: "c/1".into() });
        round_trip(Request::SessionOpen {
            workspace: "/w".into(),
            thread_id: "t".into(),
            mode_name: None,
            code_writer_config: None,
        });
        round_trip(Request::SessionOpen {
            workspace: "/w".into(),
            thread_id: "t".into(),
            mode_name: Some("architect".into()),
            code_writer_config: Some(serde_json::json!({"allowed_globs": ["*.py"]})),
        });
        round_trip(Request::Exec {
            workspace: "/w".into(),
            thread_id: "t".into(),
            command: "echo hi".into(),
            wait_for_seconds: Some(1.5),
            is_background: true,
        });
        round_trip(Request::ExecStatus {
            thread_id: Some("t".into()),
            command_id: "ab".into(),
            wait_for_seconds: None,
        });
        round_trip(Request::Release { workspace: "/w".into(), thread_id: "t".into(), targets: vec![], dry_run: false });
        round_trip(Request::Release { workspace: "/w".into(), thread_id: "t".into(), targets: vec![], dry_run: true });
        round_trip(Request::Status { workspace: "/w".into(), thread_id: "t".into() });
        round_trip(Request::Shell {
            workspace: "/w".into(),
            thread_id: "t".into(),
            action: crate::shell::ShellAction::SendText { send_text: "y".into(), submit: true, bg_command_id: None },
            wait_for_seconds: Some(1.0),
        });
        round_trip(Request::GuardianStatus {});
        round_trip(Request::Stop { force: true });
        assert_eq!(Request::OPS.len(), 9);
        // An older frontend's lines still parse: no mode, no dry_run.
        let old = parse_request(br#"{"id":1,"op":"release","workspace":"/w","thread_id":"t","targets":[]}"#).unwrap();
        assert!(matches!(old.request, Request::Release { dry_run: false, .. }));
        let stop = parse_request(br#"{"id":2,"op":"stop"}"#).unwrap();
        assert_eq!(stop.request, Request::Stop { force: false });
    }

    #[test]
    fn the_wire_spelling_is_the_documented_one() {
        let line = br#"{"id":3,"op":"exec","workspace":"/w","thread_id":"t","command":"ls","is_background":false,"future_field":1}"#;
        let r = parse_request(line).unwrap();
        assert_eq!(r.id, 3);
        assert_eq!(r.request.op(), "exec");
        let ok = ok_line(
            3,
            &ExecReply {
                command_id: "c".into(),
                status: ExecStatus::Running,
                exit_code: None,
                output: String::new(),
                output_truncated: false,
                leader_exit_code: None,
                leader_exited: false,
                adopted: false,
            },
        );
        let v: Value = serde_json::from_slice(&ok).unwrap();
        assert_eq!(v["id"], 3);
        assert_eq!(v["ok"], true);
        assert_eq!(v["status"], "running");
        let err: Value = serde_json::from_slice(&error_line(4, ErrorCode::NotFound, "no command c")).unwrap();
        assert_eq!(err, serde_json::json!({"id":4,"ok":false,"error":{"code":"not_found","message":"no command c"}}));
    }

    #[test]
    fn bad_lines_get_one_clear_code() {
        let code = |l: &[u8]| parse_request(l).unwrap_err();
        assert_eq!(code(b"not json").code, ErrorCode::InvalidInput);
        assert_eq!(code(b"[1]").code, ErrorCode::InvalidInput);
        assert_eq!(code(br#"{"op":"hello"}"#).code, ErrorCode::InvalidInput);
        let e = code(br#"{"id":9,"op":"reboot"}"#);
        assert_eq!((e.id, e.code), (9, ErrorCode::UnknownOp));
        let e = code(br#"{"id":5,"op":"exec","workspace":"/w"}"#);
        assert_eq!((e.id, e.code), (5, ErrorCode::InvalidInput));
    }

    #[test]
    fn replies_round_trip_through_the_envelope() {
        let report = ReleaseReport {
            status: Status::Completed,
            error_code: None,
            detail: None,
            touched: true,
            bytes_reclaimed: 4096,
            files: vec![TargetResult {
                file_path: "/w/.winx/tmp/session-0/h".into(),
                outcome: Outcome::Released,
                reason: None,
                bytes_reclaimed: 4096,
                quarantine_path: None,
            }],
        };
        let line = ok_line(2, &ReleaseReply { report: report.clone() });
        let env: ReplyLine = serde_json::from_slice(&line).unwrap();
        assert!(env.ok && env.error.is_none() && env.id == 2);
        let back: ReleaseReply = serde_json::from_value(Value::Object(env.body)).unwrap();
        assert_eq!(back.report, report);
        let unknown: ErrorBody = serde_json::from_str(r#"{"code":"brand_new","message":"m"}"#).unwrap();
        assert_eq!(unknown.code, ErrorCode::Other("brand_new".into()));
        let reason: ErrorBody = serde_json::from_str(r#"{"code":"path_not_exact"}"#).unwrap();
        assert_eq!(reason.code, ErrorCode::Reason(Reason::PathNotExact));
        assert_eq!(serde_json::to_value(&reason.code).unwrap(), "path_not_exact");
    }
}
