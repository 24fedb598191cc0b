//! Ending the background shells whose command is done.
//!
//! A background shell exists for its one command: no other command is
//! ever typed into it, and input reaches it only while a program runs in
//! its foreground. Once that command is back at its prompt and nothing
//! of the shell runs, the shell is a `bash` at a prompt that nothing can
//! type into; left alone, it would live until the guardian stops, and
//! every liveness answer of every session would read its process (a
//! 30-second mixed stress of 16 sessions left 160 of them).
//!
//! The retention worker ends such a shell, as its user would: under the
//! session's admission barrier it finds the shell idle by the whole rule
//! ([`Shell::busy`](winx_release_runtime::shell::Shell::busy):
//! at its prompt, no input waiting, its own foreground group, no other
//! member), stops showing what the terminal prints (the screen stays as
//! the command left it, and is frozen once the shell ended), types an end of file at the empty prompt line
//! (which `bash` reads as `exit`, and which no alias or function of the
//! command can redefine), and keeps the barrier until the shell's process
//! has exited and the runtime has resolved its execution, so that no
//! release of the session sees it half-ended. A
//! shell with a job left (`server &`) is busy and stays. Nothing is
//! signalled or killed. A shell that does not end (`set -o ignoreeof`)
//! prompts again (its hook reports it), is idle again, and is never typed
//! into twice; one that neither ends nor prompts within [`EXIT_WAIT`]
//! stays busy until it does either (fail closed).
//!
//! Its command's status, output and screen still answer by
//! `bg_command_id` while the guardian remembers the command, and its
//! status from `D/executions` after that.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use winx_release_engine::AdmissionGuard;
use winx_release_runtime::shell::Write;
use winx_release_runtime::{ExecState, Runtime};

use super::{Shells, Term};
use crate::sync::lock;

/// How long the barrier is kept for an ended shell's process to exit.
const EXIT_WAIT: Duration = Duration::from_secs(5);
/// What is typed: end of file (`VEOF`, Ctrl-d) at an empty line.
const END_OF_FILE: &[u8] = b"\x04";

impl Shells {
    /// The background shells whose command is done, never tried to end
    /// (see the module's docs): each is ended by [`Term::retire`] under its
    /// session's barrier (`retention.rs`).
    pub(crate) fn done_background(&self) -> Vec<Arc<Term>> {
        lock(&self.background)
            .values()
            .filter(|t| !t.shell.ended() && !t.retire_tried.load(Ordering::SeqCst) && t.at_prompt())
            .cloned()
            .collect()
    }
}

impl Term {
    /// Ends this idle background shell (the caller holds its session's
    /// barrier); whether it ended.
    pub(crate) fn retire(&self, rt: &Runtime, admitted: &AdmissionGuard<'_>) -> bool {
        if !self.at_prompt() || self.shell.ended() {
            return false;
        }
        if let Some(why) = self.shell.busy(rt) {
            tracing::debug!(shell = %self.shell.execution().id, why, "background shell kept: busy");
            return false;
        }
        if self.retire_tried.swap(true, Ordering::SeqCst) {
            return false;
        }
        lock(&self.view).closing = true;
        let prompts = self.shell.prompts();
        if let Err(e) = self.shell.write(admitted, Write::Line, END_OF_FILE) {
            lock(&self.view).closing = false;
            tracing::warn!(shell = %self.shell.execution().id, error = %e, "could not end a background shell");
            return false;
        }
        let deadline = Instant::now() + EXIT_WAIT;
        // Until the runtime has decided what its leader's exit left: before
        // that the execution is `Running` for every observer, and a release
        // of the session would be refused for it.
        while self.shell.execution().state() == ExecState::Running {
            // A shell that ignores end of file prompts again: idle again.
            if self.shell.prompts() > prompts || Instant::now() >= deadline {
                lock(&self.view).closing = false;
                tracing::info!(shell = %self.shell.execution().id, "a background shell did not end at end of file");
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // Nothing more will be drawn: its rows are all a look needs.
        lock(&self.view).screen.freeze();
        true
    }
}
