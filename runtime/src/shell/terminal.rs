//! What a host hands the runtime to start a shell ([`ShellSpawn`], on its
//! [`Terminal`], printing to its [`OutputSink`]), and the kinds of writes to
//! it ([`Write`]). The same on every platform: off Linux (`foreign/`) this
//! file is the shell module's too.

use std::ffi::OsString;
#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::session::SessionKey;

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

/// Called with every chunk the terminal prints, on the engine's reader
/// thread ([`Terminal::Open`] only); it must not block for long.
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

/// What is written to a shell's terminal.
///
/// The kind decides what [`Shell::write`](super::Shell::write) and [`Shell::input`](super::Shell::input) refuse:
/// - [`Write::Line`] is never refused for the prompt's sake: it is what
///   starts a command, and the caller holds the admission barrier, so no
///   release runs between the owner's answer and the line reaching the
///   shell.
/// - [`Write::Input`] is refused (`InvalidInput`) while the shell is at its
///   idle prompt ([`Shell::at_prompt`](super::Shell::at_prompt)): there no program runs in the
///   foreground, and the line editor would run the bytes as a command that
///   no barrier admitted.
///
/// The race: a program in the foreground can end between a host's look at
/// [`Shell::at_prompt`](super::Shell::at_prompt) and its write. The refusal is therefore decided
/// again under the lock the hook's reports take, in the same critical
/// section as the write itself: input written is either received by a
/// program that was still running when the write started, or refused. A
/// host that keeps its own prompt detection must still write through
/// [`Shell::input`](super::Shell::input) to get this; its own detection decides nothing here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// A command line for the shell at its prompt.
    Line,
    /// Input for the program running in the foreground; refused at an idle
    /// prompt.
    Input,
}
