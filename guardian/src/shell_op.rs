//! The `shell` op: each action of the contract's `BashCommand` table on
//! the thread's shell or a background shell.
//!
//! Every write to a terminal is made under the session's admission
//! barrier, after the check that allows it: a command only at an idle
//! prompt (else `execution_active`, nothing typed), input only while a
//! program runs in the foreground (else `invalid_input`, nothing sent). The
//! wait for the command to be back at its prompt happens after the barrier
//! is let go.

use std::sync::Arc;
use std::time::Duration;

use winx_release_engine::Reason;
use winx_release_protocol::messages::{ok_line, CommandReport, CommandStatus, ErrorCode};
use winx_release_protocol::shell::{special_bytes, ShellAction, ShellReply};
use winx_release_runtime::shell::command::read_command;
use winx_release_runtime::shell::Write;

use crate::sessions::{Guardian, OpError, OwnedSession};
use crate::shell::{Cmd, Term};
use crate::sync::lock;

/// How long a command waits for the previous one's output to be read
/// after its prompt was reported.
const SETTLE: Duration = Duration::from_secs(2);
/// How long input waits for the shell to have read the command's line.
const STARTED: Duration = Duration::from_secs(2);

fn invalid(msg: impl Into<String>) -> OpError {
    (ErrorCode::InvalidInput, msg.into())
}

/// How much of the output a reply carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Everything so far (its inline tail).
    All,
    /// What is new since the last reply.
    New,
}

/// Runs one `shell` action for `session`.
pub fn shell_op(
    g: &Arc<Guardian>,
    id: u64,
    session: &Arc<OwnedSession>,
    action: ShellAction,
    wait: Duration,
) -> Result<Vec<u8>, OpError> {
    let reply = match action {
        ShellAction::Command { command, is_background } => command_op(g, session, &command, is_background, wait)?,
        ShellAction::StatusCheck { bg_command_id, command_id } => {
            status_op(g, session, bg_command_id.as_deref(), command_id.as_deref(), wait)?
        }
        ShellAction::SendText { send_text, submit, bg_command_id } => {
            let mut b = send_text.into_bytes();
            if submit {
                b.push(b'\r');
            }
            input_op(g, session, bg_command_id.as_deref(), &b, wait)?
        }
        ShellAction::SendSpecials { send_specials, submit, bg_command_id } => {
            let b = special_bytes(&send_specials, submit).map_err(invalid)?;
            input_op(g, session, bg_command_id.as_deref(), &b, wait)?
        }
        ShellAction::SendAscii { send_ascii, submit, bg_command_id } => {
            let mut b = send_ascii;
            if submit {
                b.push(b'\r');
            }
            input_op(g, session, bg_command_id.as_deref(), &b, wait)?
        }
        ShellAction::Screen { lines, bg_command_id } => {
            let term = target(g, session, bg_command_id.as_deref())?
                .ok_or_else(|| invalid("the thread has no shell yet: run a command first"))?;
            let mut r = reply(g, &term, term.last().as_deref(), Part::New);
            r.screen = Some(term.screen(lines));
            r
        }
    };
    Ok(ok_line(id, &reply))
}

/// The shell an action is for: the background shell `bg` (of this thread,
/// else `thread_mismatch`), or the thread's own (`None` when it has none).
fn target(g: &Guardian, session: &OwnedSession, bg: Option<&str>) -> Result<Option<Arc<Term>>, OpError> {
    match bg {
        None => Ok(g.shells.thread_term(&session.key)),
        Some(id) => match g.shells.background_term(id) {
            Some(t) if t.session == session.key && t.thread == session.thread => Ok(Some(t)),
            Some(_) => Err((
                ErrorCode::Reason(Reason::ThreadMismatch),
                format!("bg_command_id {id} belongs to another thread"),
            )),
            None => Err(invalid(format!("unknown bg_command_id {id}: no background shell of this guardian has it"))),
        },
    }
}

fn command_op(
    g: &Arc<Guardian>,
    session: &Arc<OwnedSession>,
    command: &str,
    background: bool,
    wait: Duration,
) -> Result<ShellReply, OpError> {
    let io = |e: std::io::Error| (ErrorCode::IoError, format!("shell: {e}"));
    let (term, cmd) = {
        let admitted = session.admission.enter();
        let started = if background {
            // Its command back at the prompt: the retention worker may end
            // the shell (`retire.rs`).
            let weak = Arc::downgrade(g);
            let on_done = Box::new(move || {
                if let Some(g) = weak.upgrade() {
                    g.retention.kick(None);
                }
            });
            g.shells.start_background(&g.runtime, &admitted, session.for_shell(), on_done)
        } else {
            g.shells.thread_term_or_start(&g.runtime, &admitted, session.for_shell())
        };
        let term = match started {
            Ok(t) => t,
            // The command never ran (as a one-shot command that cannot be
            // started): the next command tries a new shell.
            Err(e) => return Ok(failed_to_start(&e)),
        };
        let term = if background {
            term
        } else {
            // Back at the prompt with the end of its output still on its
            // way: a moment for it; anything else is busy at once.
            let ready = term.at_prompt() || (term.shell.at_prompt() && term.settle(SETTLE));
            if !ready {
                let why = term.shell.busy(&g.runtime).unwrap_or_else(|| "its last command is not done".into());
                return Err((
                    ErrorCode::Reason(Reason::ExecutionActive),
                    format!("the thread's shell is busy ({why}); nothing was typed: check with status_check, or answer it with send_text"),
                ));
            }
            term
        };
        let cmd = term.type_command(&g.shells, &g.runtime, &admitted, command).map_err(io)?;
        if background {
            g.shells.register_background(&cmd.rec.id, &term);
        }
        (term, cmd)
    };
    // A background command answers at once (as winx's does): its shell is
    // its own, nothing waits behind it.
    if !background {
        term.wait(&g.runtime, &cmd, wait);
    }
    let mut r = reply(g, &term, Some(&cmd), Part::All);
    if background {
        r.bg_command_id = Some(cmd.rec.id.clone());
    }
    Ok(r)
}

fn status_op(
    g: &Arc<Guardian>,
    session: &Arc<OwnedSession>,
    bg: Option<&str>,
    command_id: Option<&str>,
    wait: Duration,
) -> Result<ShellReply, OpError> {
    if let Some(id) = command_id {
        // A command whose payload retention removed is answered from disk
        // (not found), as one no guardian remembers.
        if let Some((term, cmd)) = g.shells.command(id).filter(|(_, c)| c.rec.dir.exists()) {
            if term.session != session.key {
                return Err((ErrorCode::Reason(Reason::ThreadMismatch), format!("command {id} is another thread's")));
            }
            term.wait(&g.runtime, &cmd, wait);
            return Ok(reply(g, &term, Some(&cmd), Part::All));
        }
        return on_disk(g, session, id);
    }
    if let Some(id) = bg.filter(|id| g.shells.background_term(id).is_none()) {
        // A background shell that ended and whose command this guardian
        // no longer holds in memory: its command's record answers (an id
        // with no record is refused below, as it always was).
        match on_disk(g, session, id) {
            Ok(mut r) => {
                r.bg_command_id = Some(id.to_owned());
                return Ok(r);
            }
            Err((ErrorCode::NotFound, _)) => {}
            Err(e) => return Err(e),
        }
    }
    let Some(term) = target(g, session, bg)? else {
        // No shell: nothing runs; nothing was ever typed.
        return Ok(no_command(CommandStatus::Completed, None));
    };
    let last = term.last();
    if let Some(c) = &last {
        term.wait(&g.runtime, c, wait);
    }
    let mut r = reply(g, &term, last.as_deref(), Part::New);
    r.bg_command_id = bg.map(str::to_owned);
    Ok(r)
}

/// A reply that names no command: where the shell is, and nothing it
/// printed.
fn no_command(status: CommandStatus, exit_code: Option<i64>) -> ShellReply {
    ShellReply::new(CommandReport {
        status,
        command_id: String::new(),
        exit_code,
        output: String::new(),
        output_truncated: false,
    })
}

fn failed_to_start(e: &std::io::Error) -> ShellReply {
    let mut r = no_command(CommandStatus::Completed, Some(127));
    r.command.output = format!("failed to start: {e}\n");
    r
}

/// A command this guardian does not hold in memory: its record in
/// `D/executions` (a finished one, or one an earlier guardian typed).
fn on_disk(g: &Guardian, session: &OwnedSession, id: &str) -> Result<ShellReply, OpError> {
    let Some((r, (output, truncated))) = read_command(&g.data_dir, id) else {
        return Err((
            ErrorCode::NotFound,
            format!("unknown command_id {id}: not typed into a shell of this guardian's data directory, or removed by retention"),
        ));
    };
    if r.session.is_some_and(|s| !s.same_directory(&session.key)) || r.thread_id != session.thread {
        return Err((ErrorCode::Reason(Reason::ThreadMismatch), format!("command {id} is another thread's")));
    }
    // A command whose shell ended before its prompt came back (a guardian
    // restart hung it up) is done once its shell's execution is resolved.
    let shell_done = || r.shell.as_deref().and_then(|s| g.runtime.lookup(s)).is_some_and(|e| e.state().is_final());
    let done = r.state == winx_release_runtime::RecordState::Resolved || shell_done();
    Ok(ShellReply::new(CommandReport {
        status: if done { CommandStatus::Completed } else { CommandStatus::Running },
        command_id: id.to_owned(),
        exit_code: if done { r.exit_code.map(i64::from) } else { None },
        output,
        output_truncated: truncated,
    }))
}

fn input_op(
    g: &Arc<Guardian>,
    session: &Arc<OwnedSession>,
    bg: Option<&str>,
    bytes: &[u8],
    wait: Duration,
) -> Result<ShellReply, OpError> {
    let term = {
        let admitted = session.admission.enter();
        let term = target(g, session, bg)?
            .ok_or_else(|| invalid("no program waits for input: the thread has no shell yet; nothing was sent"))?;
        if term.shell.ended() {
            return Err(invalid("the shell has exited; nothing was sent"));
        }
        // The hook's report decides (the end of the output may still be on
        // its way): input at a prompt would be read as a command.
        if term.shell.at_prompt() {
            return Err(invalid(
                "the shell is at its prompt: no program runs in the foreground to receive input; nothing was sent (run a command instead)",
            ));
        }
        // The line editor may not have read the command's line yet: input
        // now would be its (a Ctrl-c would discard the line itself).
        if !term.wait_started(STARTED) {
            return Err(invalid("the command's line has not been read by the shell yet; nothing was sent: try again"));
        }
        term.shell.write(&admitted, Write::Input, bytes).map_err(|e| match e.kind() {
            // The program ended since the look above: nothing was sent.
            std::io::ErrorKind::InvalidInput => invalid(format!("{e}; nothing was sent (run a command instead)")),
            _ => (ErrorCode::IoError, format!("terminal write: {e}")),
        })?;
        term
    };
    let last = term.last();
    if let Some(c) = &last {
        term.wait(&g.runtime, c, wait);
    }
    Ok(reply(g, &term, last.as_deref(), Part::New))
}

/// The reply about `cmd` of `term`.
fn reply(g: &Guardian, term: &Term, cmd: Option<&Cmd>, part: Part) -> ShellReply {
    let Some(c) = cmd else {
        let status = if term.at_prompt() { CommandStatus::Completed } else { CommandStatus::Running };
        return no_command(status, term.shell.last_exit().map(i64::from));
    };
    let done = c.rec.finished();
    let (output, truncated) = match part {
        Part::All => {
            *lock(&c.delivered) = c.rec.output_len();
            c.rec.output_tail()
        }
        Part::New => new_output(c),
    };
    let still_running = if done { g.runtime.shell_jobs(&term.shell).unwrap_or_default() } else { vec![] };
    // Back at its prompt, the shell may still count as busy by itself: say
    // why (a trap or `TMOUT` of its own, an `exec`'d program).
    let shell_busy = if done && term.shell.at_prompt() { term.shell.holds() } else { None };
    ShellReply {
        command: CommandReport {
            status: if done { CommandStatus::Completed } else { CommandStatus::Running },
            command_id: c.rec.id.clone(),
            exit_code: if done { c.rec.exit_code().map(i64::from) } else { None },
            output,
            output_truncated: truncated,
        },
        still_running,
        bg_command_id: lock(&term.bg_id).clone(),
        screen: None,
        output_path: lock(&c.dropped).as_ref().map(|p| p.display().to_string()),
        shell_busy,
    }
}

/// The output of `c` since the last reply (at most the inline limit: its
/// tail), and whether it was cut.
fn new_output(c: &Cmd) -> (String, bool) {
    use std::io::{Read, Seek, SeekFrom};
    let limit = winx_release_runtime::INLINE_OUTPUT_BYTES;
    let mut delivered = lock(&c.delivered);
    let len = c.rec.output_len();
    let from = (*delivered).max(len.saturating_sub(limit)).min(len);
    let cut = from > *delivered;
    let mut buf = Vec::new();
    if let Ok(mut f) = std::fs::File::open(c.rec.dir.join(winx_release_runtime::OUTPUT_FILE)) {
        if f.seek(SeekFrom::Start(from)).is_ok() {
            let _ = f.take(len - from).read_to_end(&mut buf);
        }
    }
    *delivered = from + buf.len() as u64;
    (String::from_utf8_lossy(&buf).into_owned(), cut)
}
