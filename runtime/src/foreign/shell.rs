//! Shells off Linux: a host builds its [`ShellProgram`] and [`ShellSpawn`]
//! as on Linux, and [`Runtime::start_shell_with`](crate::Runtime::start_shell_with)
//! answers `unsupported_platform`; no [`Shell`] or [`CommandRecord`] ever
//! exists, so their methods cannot be reached.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use winx_release_engine::admission::AdmissionGuard;

use super::execution::Execution;

#[path = "../shell/program.rs"]
mod program;
#[path = "../shell/terminal.rs"]
mod terminal;

pub use program::ShellProgram;
pub use terminal::{OutputSink, ShellSpawn, Terminal, Write, DEFAULT_COLS, DEFAULT_ROWS};

/// A running shell; none exists off Linux.
#[derive(Clone, Debug)]
pub struct Shell {
    pub(super) never: Infallible,
}

impl Shell {
    /// The shell's execution.
    pub fn execution(&self) -> &Arc<Execution> {
        match self.never {}
    }

    /// The shell's process id.
    pub fn pid(&self) -> Option<i32> {
        match self.never {}
    }

    /// Whether the hook reported the prompt after the last byte written.
    pub fn at_prompt(&self) -> bool {
        match self.never {}
    }

    /// How many prompts the hook reported so far.
    pub fn prompts(&self) -> u64 {
        match self.never {}
    }

    /// The exit code of the last report.
    pub fn last_exit(&self) -> Option<i32> {
        match self.never {}
    }

    /// Whether the shell's process has exited.
    pub fn ended(&self) -> bool {
        match self.never {}
    }

    /// Waits for a prompt after `after`.
    pub fn wait_prompt(&self, after: u64, timeout: Duration) -> bool {
        let _ = (after, timeout);
        match self.never {}
    }

    /// Writes `bytes` to the controller the engine keeps.
    ///
    /// # Errors
    /// Unreachable: no shell exists off Linux.
    pub fn write(&self, admitted: &AdmissionGuard<'_>, kind: Write, bytes: &[u8]) -> io::Result<()> {
        let _ = (admitted, kind, bytes);
        match self.never {}
    }

    /// Runs the host's `write` of `kind` under the shell's lock.
    ///
    /// # Errors
    /// Unreachable: no shell exists off Linux.
    pub fn input(
        &self,
        admitted: &AdmissionGuard<'_>,
        kind: Write,
        write: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let _ = (admitted, kind, write);
        match self.never {}
    }
}

/// A command typed into a shell; none exists off Linux.
#[derive(Debug)]
pub struct CommandRecord {
    never: Infallible,
}

impl CommandRecord {
    /// The line that runs it, as typed at the prompt.
    pub fn typed_line(&self) -> String {
        match self.never {}
    }

    /// Its exit code, once finished.
    pub fn exit_code(&self) -> Option<i32> {
        match self.never {}
    }

    /// Whether it finished.
    pub fn finished(&self) -> bool {
        match self.never {}
    }

    /// The end of its output, and whether it was cut.
    pub fn output_tail(&self) -> (String, bool) {
        match self.never {}
    }
}
