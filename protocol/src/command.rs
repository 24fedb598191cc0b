//! What every reply about a command says of it (`exec`, `exec_status` and
//! `shell` alike): where it is, its exit code and its inline output.

use serde::{Deserialize, Serialize};

/// Where a command is, as `exec`, `exec_status` and `shell` report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    /// It ended (or could not start) and nothing it started still runs.
    Completed,
    /// It, or a process it left behind, still runs.
    Running,
    /// It waits behind the thread's running foreground command.
    Queued,
}

/// The fields every reply about a command has, flattened into it on the
/// wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandReport {
    /// Where it is.
    pub status: CommandStatus,
    /// The command's id.
    pub command_id: String,
    /// Its exit code, `null` while it runs.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Its inline output (at most 64 KiB: the tail of a longer one).
    #[serde(default)]
    pub output: String,
    /// Whether `output` is only the tail.
    #[serde(default)]
    pub output_truncated: bool,
}
