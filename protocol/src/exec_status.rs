//! Where a command is: the status every reply about a command carries
//! (`exec`, `exec_status` and `shell` alike).

use serde::{Deserialize, Serialize};

/// Where a command is, as `exec`, `exec_status` and `shell` report it.
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
