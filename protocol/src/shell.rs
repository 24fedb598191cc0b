//! The `shell` op: actions on a thread's persistent shell (or a background
//! shell), as the contract's `BashCommand` table has them, and their reply.
//!
//! On the wire: `{"id": n, "op": "shell", "workspace": W, "thread_id": T,
//! "action": {"type": "command", "command": "ls", "is_background": false},
//! "wait_for_seconds": 5}`, answered with the body of [`ShellReply`].

use serde::{Deserialize, Serialize};

use crate::command::CommandReport;

/// Longest `command` or `send_text` a shell action carries, in bytes, and
/// most `send_ascii` codes (128 KiB): with JSON's widest escape (`\u0001`,
/// six bytes for one) and the request's other members the request stays
/// within the guardian's line limit ([`crate::messages::MAX_REQUEST_BYTES`],
/// 1 MiB). The frontend refuses a longer one (`invalid_input`) before
/// anything is sent.
pub const MAX_INPUT_BYTES: usize = 128 * 1024;

/// Most key names one `send_specials` carries.
pub const MAX_SPECIAL_KEYS: usize = 4096;

/// One action on a shell (`type` names it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ShellAction {
    /// Types a command at the shell's prompt.
    Command {
        /// The command text, handed over whole.
        command: String,
        /// Run it in a shell on a PTY of its own.
        #[serde(default)]
        is_background: bool,
    },
    /// What is new, and the exit code once back at the prompt.
    StatusCheck {
        /// A background shell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bg_command_id: Option<String>,
        /// One command (its whole inline output).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command_id: Option<String>,
    },
    /// Text to the program running in the foreground.
    SendText {
        /// The text.
        send_text: String,
        /// Append Enter.
        #[serde(default)]
        submit: bool,
        /// A background shell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bg_command_id: Option<String>,
    },
    /// Keys to the program running in the foreground ([`SPECIAL_KEYS`]).
    SendSpecials {
        /// Key names.
        send_specials: Vec<String>,
        /// Append Enter.
        #[serde(default)]
        submit: bool,
        /// A background shell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bg_command_id: Option<String>,
    },
    /// Bytes to the program running in the foreground.
    SendAscii {
        /// Byte values.
        send_ascii: Vec<u8>,
        /// Append Enter.
        #[serde(default)]
        submit: bool,
        /// A background shell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bg_command_id: Option<String>,
    },
    /// The terminal as rendered now.
    Screen {
        /// Only the last `lines` rows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<usize>,
        /// A background shell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bg_command_id: Option<String>,
    },
}

impl ShellAction {
    /// The wire spelling: the action's `type`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ShellAction::Command { .. } => "command",
            ShellAction::StatusCheck { .. } => "status_check",
            ShellAction::SendText { .. } => "send_text",
            ShellAction::SendSpecials { .. } => "send_specials",
            ShellAction::SendAscii { .. } => "send_ascii",
            ShellAction::Screen { .. } => "screen",
        }
    }
}

/// The special keys `send_specials` takes, and the bytes each one sends.
pub const SPECIAL_KEYS: &[(&str, &[u8])] = &[
    ("Enter", b"\r"),
    ("Tab", b"\t"),
    ("Escape", b"\x1b"),
    ("Key-up", b"\x1b[A"),
    ("Key-down", b"\x1b[B"),
    ("Key-right", b"\x1b[C"),
    ("Key-left", b"\x1b[D"),
    ("Ctrl-c", b"\x03"),
    ("Ctrl-d", b"\x04"),
    ("Ctrl-z", b"\x1a"),
];

/// The bytes of `keys` (and Enter with `submit`), or the message naming
/// an unknown key and the valid ones.
pub fn special_bytes(keys: &[String], submit: bool) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for k in keys {
        match SPECIAL_KEYS.iter().find(|(name, _)| name == k) {
            Some((_, b)) => out.extend_from_slice(b),
            None => {
                let valid: Vec<&str> = SPECIAL_KEYS.iter().map(|(n, _)| *n).collect();
                return Err(format!("unknown special key {k:?}; valid keys: {}", valid.join(", ")));
            }
        }
    }
    if submit {
        out.push(b'\r');
    }
    Ok(out)
}

/// The `shell` reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShellReply {
    /// The command reported on (`command_id` empty when the shell never
    /// ran one): `completed` once back at the prompt, else `running`; its
    /// `output` is all it printed so far for `command`, what is new since
    /// the last look for the other actions, the whole inline tail for a
    /// `status_check` naming a `command_id`.
    #[serde(flatten)]
    pub command: CommandReport,
    /// Processes of the shell still running besides the shell itself.
    #[serde(default)]
    pub still_running: Vec<i32>,
    /// The background shell's id (its first command's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bg_command_id: Option<String>,
    /// The rendered terminal, for `screen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<String>,
    /// Where the whole output was dropped, beyond the inline limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_path: Option<String>,
    /// Why the shell, back at its prompt, still counts as busy by itself
    /// (releases refused): a trap or `TMOUT` of its own, an `exec`'d
    /// program, more than one thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_busy: Option<String>,
}

impl ShellReply {
    /// A reply about `command` alone: no processes left behind, no
    /// background shell, no screen, nothing dropped.
    pub fn new(command: CommandReport) -> ShellReply {
        ShellReply {
            command,
            still_running: vec![],
            bg_command_id: None,
            screen: None,
            output_path: None,
            shell_busy: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn winx_shaped_actions_parse() {
        let a: ShellAction = serde_json::from_str(r#"{"type":"send_specials","send_specials":["Ctrl-c"]}"#).unwrap();
        assert_eq!(
            a,
            ShellAction::SendSpecials { send_specials: vec!["Ctrl-c".into()], submit: false, bg_command_id: None }
        );
        assert!(serde_json::from_str::<ShellAction>(r#"{"type":"command","command":"ls","x":1}"#).is_err());
        assert!(serde_json::from_str::<ShellAction>(r#"{"type":"reboot"}"#).is_err());
    }

    #[test]
    fn unknown_keys_name_the_valid_ones() {
        assert_eq!(special_bytes(&["Ctrl-c".into(), "Enter".into()], true).unwrap(), b"\x03\r\r");
        let e = special_bytes(&["Ctrl-x".into()], false).unwrap_err();
        assert!(e.contains("Ctrl-x") && e.contains("Key-up") && e.contains("Ctrl-z"), "{e}");
    }
}
