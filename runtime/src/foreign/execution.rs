//! Executions off Linux: the type a host names, of which none exists.

use std::convert::Infallible;
use std::path::PathBuf;
use std::time::Duration;

use crate::session::SessionKey;
use crate::state::ExecState;

/// One execution of a session's command, with Linux's public fields
/// (`execution.rs`). Off Linux none exists: no call returns one, and its
/// methods cannot be reached.
#[derive(Debug)]
pub struct Execution {
    /// As on Linux.
    pub id: String,
    /// As on Linux.
    pub background: bool,
    /// As on Linux.
    pub dir: PathBuf,
    /// As on Linux.
    pub workspace: PathBuf,
    /// As on Linux.
    pub thread: String,
    /// As on Linux.
    pub session: Option<SessionKey>,
    /// As on Linux.
    pub started_unix: u64,
    /// As on Linux.
    pub adopted: bool,
    /// As on Linux.
    pub cgroup: Option<PathBuf>,
    /// As on Linux.
    pub unreadable: Option<String>,
    pub(super) never: Infallible,
}

impl Execution {
    /// Where it is.
    pub fn state(&self) -> ExecState {
        match self.never {}
    }

    /// Whether its leader exited.
    pub fn leader_exited(&self) -> bool {
        match self.never {}
    }

    /// Waits up to `timeout` for `done`; returns the state seen last.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(ExecState) -> bool) -> ExecState {
        let _ = (timeout, done);
        match self.never {}
    }

    /// The end of its output, and whether it was cut.
    pub fn output_tail(&self) -> (String, bool) {
        match self.never {}
    }
}
