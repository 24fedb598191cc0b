//! Shells off Linux: a host builds its [`ShellProgram`] and [`ShellSpawn`]
//! as on Linux, and [`Runtime::start_shell_with`](crate::Runtime::start_shell_with)
//! answers `unsupported_platform`; no [`Shell`] or [`CommandRecord`] ever
//! exists, so their methods cannot be reached.

use std::convert::Infallible;
use std::ffi::OsString;
use std::io;
#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use winx_release_engine::admission::AdmissionGuard;

use super::{Execution, Runtime};
use crate::session::SessionKey;

#[path = "../shell/program.rs"]
mod program;

pub use program::ShellProgram;

/// Rows of a terminal the engine opens.
pub const DEFAULT_ROWS: u16 = 40;
/// Columns of a terminal the engine opens.
pub const DEFAULT_COLS: u16 = 160;

/// The terminal a shell runs on.
#[derive(Debug)]
pub enum Terminal {
    /// The engine opens a pair of this size and keeps the controller.
    Open {
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// The follower of a terminal whose controller the host keeps.
    #[cfg(unix)]
    Follower(OwnedFd),
}

/// Called with every chunk the terminal prints.
pub type OutputSink = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// What to start as a shell of a session.
#[derive(Debug)]
pub struct ShellSpawn {
    /// The thread.
    pub thread: String,
    /// The workspace.
    pub workspace: PathBuf,
    /// The shell's working directory.
    pub cwd: PathBuf,
    /// The identity of the session directory.
    pub session: SessionKey,
    /// Variables set for it (besides `WINX_EXECUTION_ID`).
    pub env: Vec<(OsString, OsString)>,
    /// Whether it is a background shell (a command of its own).
    pub background: bool,
    /// Its terminal.
    pub terminal: Terminal,
}

/// What a host writes to a shell's terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// A command line for the shell at its prompt.
    Line,
    /// Input for the program running in the foreground.
    Input,
}

/// A running shell; none exists off Linux.
#[derive(Clone, Debug)]
pub struct Shell {
    never: Infallible,
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

    /// What of the shell runs, if anything.
    pub fn busy(&self, rt: &Runtime) -> Option<String> {
        let _ = rt;
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

    /// Records `text` as a command of this shell and types it.
    ///
    /// # Errors
    /// Unreachable: no shell exists off Linux.
    pub fn type_command(&self, rt: &Runtime, admitted: &AdmissionGuard<'_>, text: &str) -> io::Result<CommandRecord> {
        let _ = (rt, admitted, text);
        match self.never {}
    }

    /// Records `text` as a command of this shell.
    ///
    /// # Errors
    /// Unreachable: no shell exists off Linux.
    pub fn record_command(&self, rt: &Runtime, text: &str) -> io::Result<CommandRecord> {
        let _ = (rt, text);
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
