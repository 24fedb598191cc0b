//! `BashCommand`.
//!
//! With a guardian: every action goes to the thread's shell through the
//! guardian's `shell` op (`command`, `status_check`, `send_text`,
//! `send_specials`, `send_ascii`, `screen`; the reply passed through:
//! `status`, `command_id`, `exit_code`, `output`, `still_running`, and
//! `bg_command_id`, `screen`, `output_path` where they apply). A guardian
//! without shells (`unknown_op`) gets today's one-shot `exec` /
//! `exec_status` for `command` and a `status_check` naming a `command_id`.
//! No guardian is launched here; that happens only at `Initialize`.
//!
//! Embedded: commands run in-process as one-shot `bash -c`
//! ([`crate::embedded`]); the terminal actions are `invalid_input` there.
//!
//! Policy: `architect` refuses every new command (`policy_denied`);
//! `code_writer` types only `allowed_commands` (checked for every
//! `command`; input reaches only a program already running in the
//! foreground, never the shell's prompt). Status checks and screens are
//! always allowed.

use serde_json::Value;
use winx_release_engine::Reason;

use super::{unreachable_detail, Frontend, InitializedThread};
use crate::command_result::CommandResult;
use crate::embedded::ExecContext;
use crate::wire::{BashCommandArgs, ShellAction};
use winx_release_host::error::FrontendError;
use winx_release_protocol::client::{ClientError, CommandRequest};
use winx_release_protocol::messages::{CommandReply, CommandStatus};
use winx_release_protocol::shell::{special_bytes, ShellReply};

fn pass_through(r: CommandReply) -> Value {
    let mut command = r.command;
    let queued = command.status == CommandStatus::Queued;
    if queued {
        command.status = CommandStatus::Running;
    }
    CommandResult {
        command,
        queued,
        leader_exited: r.leader_exited,
        leader_exit_code: r.leader_exited.then_some(r.leader_exit_code),
        adopted: r.adopted,
        output_path: None,
        still_running: vec![],
        bg_command_id: None,
        screen: None,
        shell_busy: None,
    }
    .to_value()
}

fn shell_result(r: ShellReply) -> Value {
    CommandResult {
        command: r.command,
        queued: false,
        leader_exited: false,
        leader_exit_code: None,
        adopted: false,
        output_path: r.output_path.map(Into::into),
        still_running: r.still_running,
        bg_command_id: r.bg_command_id,
        screen: r.screen,
        shell_busy: r.shell_busy,
    }
    .to_value()
}

impl Frontend {
    pub(super) fn try_bash(&self, args: &Value) -> Result<Value, FrontendError> {
        let a = BashCommandArgs::parse(args)?;
        let (action, wait) = a.action()?;
        // An unknown key is refused before anything is sent anywhere.
        if let ShellAction::SendSpecials { send_specials, submit, .. } = &action {
            special_bytes(send_specials, *submit).map_err(FrontendError::invalid)?;
        }
        let session = self.session(&a.thread_id)?;
        if let ShellAction::Command { command, .. } = &action {
            if !session.policy.command_allowed(command) {
                let msg = format!("mode {} does not allow this command", session.mode().as_str());
                return Err(FrontendError::new(Reason::PolicyDenied, msg));
            }
        }
        if self.config.embedded {
            return self.embedded_bash(&session, action, wait);
        }
        let (mut client, hello) = self.guardian(false).map_err(|e| self.guardian_refusal(e))?;
        match client.shell(&session.workspace, &session.thread_id, action.clone(), wait) {
            Ok(r) => {
                self.keep(client, hello);
                Ok(shell_result(r))
            }
            // `unknown_op`: an older guardian, without shells.
            Err(ClientError::Unsupported(_)) => self.one_shot(&session, action, wait),
            Err(e) => Err(self.guardian_refusal(e)),
        }
    }

    /// An embedded frontend's `BashCommand`: one-shot `bash -c` commands.
    fn embedded_bash(
        &self,
        session: &InitializedThread,
        action: ShellAction,
        wait: f64,
    ) -> Result<Value, FrontendError> {
        match action {
            ShellAction::Command { command, is_background } => {
                let ctx = ExecContext {
                    layout: &session.layout,
                    session_dir: &session.session_dir,
                    thread_id: &session.thread_id,
                };
                self.exec.run(&ctx, &command, wait, is_background)
            }
            ShellAction::StatusCheck { command_id: Some(id), bg_command_id: None } => {
                self.exec.status(&session.thread_id, &id, wait)
            }
            other => Err(FrontendError::invalid(format!(
                "{} needs the guardian's shell: an embedded frontend runs one-shot commands without a terminal \
                 (status_check takes a command_id)",
                other.as_str()
            ))),
        }
    }

    /// An older guardian without shells: one-shot `exec` / `exec_status`.
    fn one_shot(&self, session: &InitializedThread, action: ShellAction, wait: f64) -> Result<Value, FrontendError> {
        let (mut client, _) = self.guardian(false).map_err(|e| self.guardian_refusal(e))?;
        match action {
            ShellAction::Command { command, is_background } => {
                let req = CommandRequest {
                    workspace: session.workspace.clone(),
                    thread_id: session.thread_id.clone(),
                    command,
                    wait_for_seconds: wait,
                    is_background,
                };
                client.exec(&req).map(pass_through).map_err(|e| self.guardian_refusal(e))
            }
            ShellAction::StatusCheck { command_id: Some(id), bg_command_id: None } => client
                .exec_status(&session.thread_id, &id, wait)
                .map(pass_through)
                .map_err(|e| self.guardian_refusal(e)),
            other => Err(FrontendError::new(
                Reason::OwnerUnsupported,
                format!("{}: this guardian has no shells (an older guardian); nothing was sent", other.as_str()),
            )),
        }
    }

    /// Runs `command` for `session` after the policy check: an
    /// `EditFiles` verification command, run one-shot (`bash -c`, an
    /// execution of its own) beside the thread's shell, whose state it
    /// neither needs nor changes.
    pub(super) fn run_command(
        &self,
        session: &InitializedThread,
        command: &str,
        wait: f64,
        background: bool,
    ) -> Result<Value, FrontendError> {
        if !session.policy.command_allowed(command) {
            let msg = format!("mode {} does not allow this command", session.mode().as_str());
            return Err(FrontendError::new(Reason::PolicyDenied, msg));
        }
        let action = ShellAction::Command { command: command.to_owned(), is_background: background };
        if self.config.embedded {
            return self.embedded_bash(session, action, wait);
        }
        self.one_shot(session, action, wait)
    }

    /// A guardian failure as a refusal: its contract reason when it has one
    /// (`owner_unavailable` for a lost connection; the message then says
    /// the command may have started), else the guardian's code as
    /// `invalid_input`. No guardian to talk to at all is the same line as
    /// `Initialize`'s `temporary_release.detail`.
    fn guardian_refusal(&self, e: ClientError) -> FrontendError {
        let mut msg = e.to_string();
        if e.outcome_unknown() {
            msg.push_str("; the command may have started: check with status_check");
        } else if e.reason() == Some(Reason::OwnerUnavailable) {
            msg = unreachable_detail(&self.config.socket_path, &e);
            tracing::warn!("{msg}");
        }
        match e.reason() {
            Some(r) => FrontendError::new(r, msg),
            None => FrontendError::invalid(msg),
        }
    }
}
