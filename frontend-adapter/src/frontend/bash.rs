//! `BashCommand`.
//!
//! Embedded: commands run in-process ([`crate::embedded`]). Otherwise the
//! request is forwarded to the guardian's `exec` / `exec_status` (no guardian
//! is launched here; that happens only at `Initialize`) and the reply passed
//! through: `status`, `command_id`, `exit_code`, `output`,
//! `output_truncated`, and whatever else the guardian adds. A guardian
//! `queued` status is reported as `status: "running"` with `queued: true`
//! (the contract knows `completed` and `running` only).
//!
//! Policy: `architect` refuses every new command (`policy_denied`);
//! `code_writer` runs only `allowed_commands`. Status checks are always
//! allowed.

use serde_json::Value;
use winx_release_engine::Reason;

use super::{unreachable_detail, Frontend, Session};
use crate::command_result::CommandResult;
use crate::embedded::ExecContext;
use crate::error::FrontendError;
use crate::wire::{BashAction, BashCommandArgs};
use winx_release_protocol::client::{ClientError, ExecRequest};
use winx_release_protocol::messages::{ExecReply, ExecStatus};

fn pass_through(r: ExecReply) -> Value {
    let queued = r.status == ExecStatus::Queued;
    CommandResult {
        status: if queued { ExecStatus::Running } else { r.status },
        command_id: r.command_id,
        exit_code: r.exit_code,
        output: r.output,
        output_truncated: r.output_truncated,
        queued,
        leader_exited: r.leader_exited,
        leader_exit_code: r.leader_exited.then_some(r.leader_exit_code),
        adopted: r.adopted,
        output_path: None,
    }
    .to_value()
}

impl Frontend {
    pub(super) fn try_bash(&self, args: &Value) -> Result<Value, FrontendError> {
        let a = BashCommandArgs::parse(args)?;
        let action = a.action()?;
        let session = self.session(&a.thread_id)?;
        match action {
            BashAction::Run { command, wait_for_seconds, is_background } => {
                self.run_command(&session, &command, wait_for_seconds, is_background)
            }
            BashAction::Status { command_id, wait_for_seconds } => {
                if self.config.embedded {
                    return self.exec.status(&session.thread_id, &command_id, wait_for_seconds);
                }
                let (mut client, _) = self.guardian(false).map_err(|e| self.guardian_refusal(e))?;
                client
                    .exec_status(&session.thread_id, &command_id, wait_for_seconds)
                    .map(pass_through)
                    .map_err(|e| self.guardian_refusal(e))
            }
        }
    }

    /// Runs `command` for `session` after the policy check.
    pub(super) fn run_command(
        &self,
        session: &Session,
        command: &str,
        wait: f64,
        background: bool,
    ) -> Result<Value, FrontendError> {
        if !session.policy.command_allowed(command) {
            let msg = format!("mode {} does not allow this command", session.mode().as_str());
            return Err(FrontendError::new(Reason::PolicyDenied, msg));
        }
        if self.config.embedded {
            let ctx = ExecContext {
                layout: &session.layout,
                session_dir: &session.session_dir,
                thread_id: &session.thread_id,
            };
            return self.exec.run(&ctx, command, wait, background);
        }
        let (mut client, _) = self.guardian(false).map_err(|e| self.guardian_refusal(e))?;
        let req = ExecRequest {
            workspace: session.workspace.clone(),
            thread_id: session.thread_id.clone(),
            command: command.to_owned(),
            wait_for_seconds: wait,
            is_background: background,
        };
        client.exec(&req).map(pass_through).map_err(|e| self.guardian_refusal(e))
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
