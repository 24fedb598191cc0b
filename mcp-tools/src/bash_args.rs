//! `BashCommand`'s arguments: the flat fields, or winx's `action_json`
//! (an object with a `type`, or that object as a JSON string), each action
//! with the fields winx sends (`status_check: true`, `screen: true`; a
//! flat call may name its action by `type` too).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::from_value::from_value;
use winx_release_host::error::FrontendError;
use winx_release_protocol::shell::{ShellAction, MAX_INPUT_BYTES, MAX_SPECIAL_KEYS};

/// Default `wait_for_seconds` of `BashCommand`.
pub const DEFAULT_WAIT_SECONDS: f64 = 5.0;
/// Longest accepted `wait_for_seconds`; longer waits are cut to it.
pub const MAX_WAIT_SECONDS: f64 = 600.0;

/// Arguments of `BashCommand`: flat, or winx's `action_json` object with
/// a `type` (`command`, `status_check`, `send_text`, `send_specials`,
/// `send_ascii`, `screen`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashCommandArgs {
    /// The thread, from `Initialize`.
    pub thread_id: String,
    /// winx's shape: the action as an object with a `type` (or that object
    /// as a JSON string).
    #[serde(default)]
    pub action_json: Option<Value>,
    /// The action's name, as winx's objects carry it (with the flat fields:
    /// it must agree with them, and alone names `status_check` or `screen`).
    #[serde(default, rename = "type")]
    pub action_type: Option<String>,
    /// The command to type into the thread's shell.
    #[serde(default)]
    pub command: Option<String>,
    /// How long to wait for it to be back at the prompt (default 5 s).
    #[serde(default)]
    pub wait_for_seconds: Option<f64>,
    /// Run it in a shell of its own (default false).
    #[serde(default)]
    pub is_background: Option<bool>,
    /// Report on the thread's shell, `command_id` or `bg_command_id`.
    #[serde(default)]
    pub status_check: Option<bool>,
    /// The command a status check is about.
    #[serde(default)]
    pub command_id: Option<String>,
    /// A background shell the action is for.
    #[serde(default)]
    pub bg_command_id: Option<String>,
    /// Text for the program running in the foreground.
    #[serde(default)]
    pub send_text: Option<String>,
    /// Special keys for it.
    #[serde(default)]
    pub send_specials: Option<Vec<String>>,
    /// Bytes for it.
    #[serde(default)]
    pub send_ascii: Option<Vec<u8>>,
    /// Append Enter to the input.
    #[serde(default)]
    pub submit: Option<bool>,
    /// Return the terminal as rendered now.
    #[serde(default)]
    pub screen: Option<bool>,
    /// With `screen`: only its last rows.
    #[serde(default)]
    pub lines: Option<usize>,
}

/// What a `BashCommand` asks for: the action, and how long to wait.
pub type BashAction = (ShellAction, f64);

/// `wait_for_seconds` of a winx `action_json` (it may carry one itself).
#[derive(Deserialize)]
struct Waited {
    #[serde(default)]
    wait_for_seconds: Option<f64>,
}

impl BashCommandArgs {
    /// Parses `BashCommand` arguments.
    pub fn parse(v: &Value) -> Result<BashCommandArgs, FrontendError> {
        from_value("BashCommand arguments", v)
    }

    /// What the arguments ask for, and the wait (default 5 s, at most 600).
    /// `action_json` alone, or the flat fields of exactly one action.
    pub fn action(&self) -> Result<BashAction, FrontendError> {
        let mut wait = self.wait_for_seconds;
        let action = match &self.action_json {
            Some(v) => {
                if self.command.is_some()
                    || self.status_check.is_some()
                    || self.send_text.is_some()
                    || self.send_specials.is_some()
                    || self.send_ascii.is_some()
                    || self.screen.is_some()
                {
                    return Err(FrontendError::invalid("give either action_json or the flat fields, not both"));
                }
                let mut v = match v {
                    Value::String(text) => serde_json::from_str(text).map_err(|e| {
                        FrontendError::invalid(format!("action_json is a string that is not JSON: {e}"))
                    })?,
                    v => v.clone(),
                };
                if let Some(obj) = v.as_object_mut() {
                    if let Some(w) = obj.remove("wait_for_seconds") {
                        let w: Waited = from_value("action_json", &serde_json::json!({"wait_for_seconds": w}))?;
                        wait = wait.or(w.wait_for_seconds);
                    }
                    winx_object(obj)?;
                }
                from_value::<ShellAction>("action_json", &v)?
            }
            None => self.flat()?,
        };
        check_bounds(&action)?;
        let wait = match wait {
            None => DEFAULT_WAIT_SECONDS,
            Some(w) if w.is_finite() && w >= 0.0 => w.min(MAX_WAIT_SECONDS),
            Some(_) => return Err(FrontendError::invalid("wait_for_seconds must be a number >= 0")),
        };
        Ok((action, wait))
    }

    fn flat(&self) -> Result<ShellAction, FrontendError> {
        let submit = self.submit.unwrap_or(false);
        let bg = self.bg_command_id.clone();
        let named = self.action_type.as_deref();
        let given = [
            self.command.is_some(),
            self.status_check.unwrap_or(false) || (named == Some("status_check") && self.status_check.is_none()),
            self.send_text.is_some(),
            self.send_specials.is_some(),
            self.send_ascii.is_some(),
            self.screen.unwrap_or(false) || (named == Some("screen") && self.screen.is_none()),
        ];
        if let Some(t) = named {
            let at = ACTION_TYPES.iter().position(|a| *a == t);
            if at.is_none_or(|i| !given[i]) {
                return Err(FrontendError::invalid(format!(
                    "type {t:?} does not name the action the flat fields give (one of {})",
                    ACTION_TYPES.join(", ")
                )));
            }
        }
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(FrontendError::invalid(
                "give exactly one of command, status_check: true, send_text, send_specials, send_ascii, screen: true \
                 (or winx's action_json)",
            ));
        }
        let only = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(FrontendError::invalid(what.to_owned()))
            }
        };
        if let Some(c) = &self.command {
            only(
                self.command_id.is_none() && bg.is_none() && self.submit.is_none() && self.lines.is_none(),
                "command takes is_background (and wait_for_seconds) only",
            )?;
            return Ok(ShellAction::Command { command: c.clone(), is_background: self.is_background.unwrap_or(false) });
        }
        only(self.is_background.is_none(), "is_background goes with command only")?;
        if given[1] {
            only(self.submit.is_none() && self.lines.is_none(), "status_check takes command_id or bg_command_id only")?;
            return Ok(ShellAction::StatusCheck { bg_command_id: bg, command_id: self.command_id.clone() });
        }
        only(self.command_id.is_none(), "command_id goes with status_check only")?;
        if let Some(t) = &self.send_text {
            only(self.lines.is_none(), "lines goes with screen only")?;
            return Ok(ShellAction::SendText { send_text: t.clone(), submit, bg_command_id: bg });
        }
        if let Some(k) = &self.send_specials {
            only(self.lines.is_none(), "lines goes with screen only")?;
            return Ok(ShellAction::SendSpecials { send_specials: k.clone(), submit, bg_command_id: bg });
        }
        if let Some(a) = &self.send_ascii {
            only(self.lines.is_none(), "lines goes with screen only")?;
            return Ok(ShellAction::SendAscii { send_ascii: a.clone(), submit, bg_command_id: bg });
        }
        only(self.submit.is_none(), "submit goes with send_text, send_specials or send_ascii")?;
        Ok(ShellAction::Screen { lines: self.lines, bg_command_id: bg })
    }
}

/// The actions' names, in the order of `flat`'s `given`.
/// Refuses an action the guardian's request line could not carry (over
/// [`MAX_INPUT_BYTES`] of text or codes, over [`MAX_SPECIAL_KEYS`] keys),
/// and `screen` with `lines: 0` (the schema's minimum is 1).
fn check_bounds(action: &ShellAction) -> Result<(), FrontendError> {
    let (what, n, max) = match action {
        ShellAction::Command { command, .. } => ("command", command.len(), MAX_INPUT_BYTES),
        ShellAction::SendText { send_text, .. } => ("send_text", send_text.len(), MAX_INPUT_BYTES),
        ShellAction::SendAscii { send_ascii, .. } => ("send_ascii", send_ascii.len(), MAX_INPUT_BYTES),
        ShellAction::SendSpecials { send_specials, .. } => ("send_specials", send_specials.len(), MAX_SPECIAL_KEYS),
        ShellAction::Screen { lines: Some(0), .. } => {
            return Err(FrontendError::invalid("lines must be at least 1 (the last rows of the screen to show)"));
        }
        ShellAction::StatusCheck { .. } | ShellAction::Screen { .. } => return Ok(()),
    };
    if n > max {
        let unit = if what == "command" || what == "send_text" { "bytes" } else { "items" };
        return Err(FrontendError::invalid(format!(
            "{what} is {n} {unit} long; the limit is {max} {unit} (the guardian's 1 MiB request line); nothing was sent"
        )));
    }
    Ok(())
}

const ACTION_TYPES: [&str; 6] = ["command", "status_check", "send_text", "send_specials", "send_ascii", "screen"];

/// Brings one of winx's action objects to the protocol's shape: a missing
/// `type` is inferred from the one action field present, and the
/// `status_check: true` and `screen: true` that winx's `StatusCheck` and
/// `Screen` carry are dropped (`false` there is no action at all).
fn winx_object(obj: &mut serde_json::Map<String, Value>) -> Result<(), FrontendError> {
    if !obj.contains_key("type") {
        let present: Vec<&str> = ACTION_TYPES.iter().copied().filter(|a| obj.contains_key(*a)).collect();
        match present.as_slice() {
            [one] => {
                obj.insert("type".into(), Value::String((*one).into()));
            }
            _ => {
                return Err(FrontendError::invalid(format!(
                    "action_json needs a type, or exactly one of {}",
                    ACTION_TYPES.join(", ")
                )))
            }
        }
    }
    for flag in ["status_check", "screen"] {
        if obj.get("type").and_then(Value::as_str) != Some(flag) {
            continue;
        }
        match obj.remove(flag) {
            None | Some(Value::Bool(true)) => {}
            Some(other) => {
                return Err(FrontendError::invalid(format!("action_json: {flag} must be true, not {other}")))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bash_args() {
        let act = |v: Value| BashCommandArgs::parse(&v).and_then(|a| a.action());
        assert_eq!(
            act(json!({"thread_id": "t", "command": "ls"})).unwrap(),
            (ShellAction::Command { command: "ls".into(), is_background: false }, 5.0)
        );
        assert_eq!(
            act(json!({"thread_id": "t", "status_check": true, "command_id": "c"})).unwrap(),
            (ShellAction::StatusCheck { bg_command_id: None, command_id: Some("c".into()) }, 5.0)
        );
        assert_eq!(
            act(json!({"thread_id": "t", "status_check": true})).unwrap(),
            (ShellAction::StatusCheck { bg_command_id: None, command_id: None }, 5.0)
        );
        assert_eq!(
            act(json!({"thread_id": "t", "send_text": "y", "submit": true, "wait_for_seconds": 1})).unwrap(),
            (ShellAction::SendText { send_text: "y".into(), submit: true, bg_command_id: None }, 1.0)
        );
        // winx's shape.
        assert_eq!(
            act(json!({"thread_id": "t", "action_json": {"type": "send_specials", "send_specials": ["Ctrl-c"]},
                "wait_for_seconds": 0.5}))
            .unwrap(),
            (
                ShellAction::SendSpecials { send_specials: vec!["Ctrl-c".into()], submit: false, bg_command_id: None },
                0.5
            )
        );
        assert_eq!(
            act(json!({"thread_id": "t", "action_json": {"type": "command", "command": "pwd"}})).unwrap(),
            (ShellAction::Command { command: "pwd".into(), is_background: false }, 5.0)
        );
        for bad in [
            json!({"thread_id": "t"}),
            json!({"thread_id": "t", "command": "ls", "status_check": true}),
            json!({"thread_id": "t", "command": "ls", "wait_for_seconds": -1}),
            json!({"thread_id": "t", "command": "ls", "submit": true}),
            json!({"thread_id": "t", "send_text": "x", "send_ascii": [3]}),
            json!({"thread_id": "t", "action_json": {"type": "reboot"}}),
            json!({"thread_id": "t", "action_json": {"type": "command"}}),
            json!({"thread_id": "t", "action_json": {"type": "command", "command": "ls"}, "command": "ls"}),
        ] {
            assert!(act(bad.clone()).is_err(), "{bad}");
        }
        assert!(BashCommandArgs::parse(&json!({"thread_id": "t", "command": "ls", "x": 1})).is_err());
    }

    /// The shapes winx (and wcgw) send: `type` beside the flat fields or
    /// alone, `status_check: true` and `screen: true` inside `action_json`,
    /// `action_json` without a `type`, or as a JSON string.
    #[test]
    fn winx_shapes() {
        let act = |v: Value| BashCommandArgs::parse(&v).and_then(|a| a.action()).map(|(a, _)| a);
        let check = ShellAction::StatusCheck { bg_command_id: None, command_id: None };
        for v in [
            json!({"thread_id": "t", "type": "status_check"}),
            json!({"thread_id": "t", "type": "status_check", "status_check": true}),
            json!({"thread_id": "t", "action_json": {"type": "status_check", "status_check": true}}),
            json!({"thread_id": "t", "action_json": {"status_check": true}}),
            json!({"thread_id": "t", "action_json": "{\"type\": \"status_check\", \"status_check\": true}"}),
        ] {
            assert_eq!(act(v.clone()).unwrap(), check, "{v}");
        }
        let bg = ShellAction::StatusCheck { bg_command_id: Some("b1".into()), command_id: None };
        assert_eq!(
            act(json!({"thread_id": "t", "action_json": {"status_check": true, "bg_command_id": "b1"}})).unwrap(),
            bg
        );
        let screen = ShellAction::Screen { lines: None, bg_command_id: None };
        assert_eq!(act(json!({"thread_id": "t", "action_json": {"type": "screen", "screen": true}})).unwrap(), screen);
        assert_eq!(act(json!({"thread_id": "t", "type": "screen"})).unwrap(), screen);
        let cmd = ShellAction::Command { command: "ls".into(), is_background: false };
        assert_eq!(act(json!({"thread_id": "t", "type": "command", "command": "ls"})).unwrap(), cmd);
        assert_eq!(act(json!({"thread_id": "t", "action_json": {"command": "ls"}})).unwrap(), cmd);
        assert_eq!(act(json!({"thread_id": "t", "action_json": "{\"command\": \"ls\"}"})).unwrap(), cmd);
        for bad in [
            json!({"thread_id": "t", "type": "send_text"}),
            json!({"thread_id": "t", "type": "status_check", "command": "ls"}),
            json!({"thread_id": "t", "type": "reboot"}),
            json!({"thread_id": "t", "type": "status_check", "status_check": false}),
            json!({"thread_id": "t", "action_json": {"type": "status_check", "status_check": false}}),
            json!({"thread_id": "t", "action_json": {"command": "ls", "send_text": "y"}}),
            json!({"thread_id": "t", "action_json": {}}),
            json!({"thread_id": "t", "action_json": "not json"}),
        ] {
            assert!(act(bad.clone()).is_err(), "{bad}");
        }
    }
}
