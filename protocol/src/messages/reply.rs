//! The bodies of successful replies, one per op (the `shell` op's is
//! [`crate::shell::ShellReply`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use winx_release_engine::ReleaseReport;

use super::{CAP_TEMPORARY_RELEASE, PROTOCOL_VERSION};
use crate::command::{CommandReport, CommandStatus};

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
    /// Its data directory `D` (canonical): a frontend that finds another
    /// instance than at `Initialize` re-attaches a thread to it only when
    /// it serves the same `D`, whose executions it adopts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    /// What keeps an execution's processes from leaving it:
    /// `"cgroupns"` (a cgroup namespace per execution on an `nsdelegate`
    /// mount: the kernel refuses moves out) or `"ancestry"` (each
    /// execution's processes descend from its monitor, a subreaper).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
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

/// The `exec` and `exec_status` reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandReply {
    /// The command.
    #[serde(flatten)]
    pub command: CommandReport,
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

impl From<winx_release_runtime::ExecState> for ExecutionState {
    fn from(s: winx_release_runtime::ExecState) -> ExecutionState {
        use winx_release_runtime::ExecState;
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
    pub fn status(self) -> CommandStatus {
        match self {
            ExecutionState::Resolved | ExecutionState::FailedToStart => CommandStatus::Completed,
            ExecutionState::Queued => CommandStatus::Queued,
            ExecutionState::Running | ExecutionState::Lingering => CommandStatus::Running,
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
    /// The containment in force (as in [`Hello::containment`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
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
