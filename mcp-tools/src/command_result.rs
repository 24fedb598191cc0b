//! The contract's `BashCommand` result, one type for the guardian's reply
//! passed through and the embedded runtime's answer.

use serde::Serialize;
use serde_json::{json, Value};
use winx_release_protocol::messages::CommandReport;

/// The contract's `BashCommand` result (section 3), from the guardian's
/// reply or the embedded runtime.
#[derive(Debug, Serialize)]
pub struct CommandResult {
    /// The command: `status` `completed` or `running` (a queued command is
    /// `running`, `queued`), `command_id`, `exit_code` (`None` while it
    /// runs), `output` (its tail when long), `output_truncated`.
    #[serde(flatten)]
    pub command: CommandReport,
    /// It waits behind the thread's running foreground command.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
    /// Its own process ended while something it started still runs.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub leader_exited: bool,
    /// The leader's exit code, with `leader_exited` (`null` when unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_exit_code: Option<Option<i64>>,
    /// A guardian adopted it after a restart.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
    /// Where the whole output was dropped, when it was too long to inline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_path: Option<std::path::PathBuf>,
    /// Processes the command left behind, by pid (they keep releases
    /// refused); empty while it runs.
    pub still_running: Vec<i32>,
    /// The background shell this command runs in (`is_background`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bg_command_id: Option<String>,
    /// The terminal as rendered, for `screen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screen: Option<String>,
    /// Why the thread's shell, back at its prompt, still keeps releases
    /// refused by itself (a trap or `TMOUT` of its own, an `exec`'d
    /// program).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell_busy: Option<String>,
}

impl CommandResult {
    /// The result as the JSON object a tool returns.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"status": "failed", "message": e.to_string()}))
    }
}
