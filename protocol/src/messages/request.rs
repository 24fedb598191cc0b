//! Requests: what a frontend asks a guardian, one per line, and the parser
//! a guardian reads each line with.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use winx_release_engine::Target;

use super::ErrorCode;

/// One request: what the frontend asks the guardian.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Protocol version and capabilities; answered with [`Hello`](super::Hello).
    Hello {
        /// The protocol version the client speaks.
        protocol: u64,
        /// The client's name and version.
        #[serde(default)]
        client: String,
    },
    /// Registers a session and creates its directory; answered with
    /// [`SessionOpened`](super::SessionOpened).
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
    /// Runs `bash -c command`; answered with [`CommandReply`](super::CommandReply).
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
    /// Reports on a command; answered with [`CommandReply`](super::CommandReply).
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
    /// [`ReleaseReply`](super::ReleaseReply).
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
    /// The session's executions (diagnostics); answered with [`StatusReply`](super::StatusReply).
    Status {
        /// The exact workspace root.
        workspace: String,
        /// The thread.
        thread_id: String,
    },
    /// The guardian as a whole: pid, liveness, sessions, running
    /// executions; answered with [`GuardianStatus`](super::GuardianStatus).
    GuardianStatus {},
    /// Stop as on SIGTERM; answered with [`StopReply`](super::StopReply), or refused with
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

    /// The wire spelling: this request's `op`.
    pub fn as_str(&self) -> &'static str {
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
