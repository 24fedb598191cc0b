//! How the runtime tells who runs, and the answer a release asks of it:
//! the marker every process of an execution carries, the two modes, and
//! [`OwnerAnswer`], the engine's `RuntimeOwner` answered from a session's
//! liveness.

use serde::{Deserialize, Serialize};

use crate::session::SessionKey;

/// The environment variable that marks every process of an execution.
pub const MARKER: &str = "WINX_EXECUTION_ID";

/// How a runtime tells that a command still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LivenessMode {
    /// Every execution in a cgroup of its own.
    Cgroup,
    /// The `/proc` signals, failing closed.
    Proc,
}

impl LivenessMode {
    /// `"cgroup"` or `"proc"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LivenessMode::Cgroup => "cgroup",
            LivenessMode::Proc => "proc",
        }
    }
}

/// Who of a session still runs ([`Runtime::liveness`](crate::Runtime::liveness)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Liveness {
    /// How many things were found running (executions, processes, cgroups,
    /// doubts).
    pub running: usize,
    /// What was found, naming pids and cgroups, for the denial's message.
    pub detail: Option<String>,
}

/// The answers a release asks of a session's owner, taken under the
/// session's admission barrier: implements [`winx_release_engine::RuntimeOwner`].
#[derive(Clone, Debug, Default)]
pub struct OwnerAnswer {
    /// Who still runs.
    pub liveness: Liveness,
    /// Queued actions of the session.
    pub pending: usize,
    /// Processes whose descriptors never make a target `in_use` (the
    /// guardian and its frontends).
    pub exempt: Vec<i32>,
    /// The session directory these answers are about (the key whose
    /// barrier is held): a release whose session directory is another one
    /// when it opens it (a directory renamed into place meanwhile) is
    /// refused `other_session`. `None` checks nothing.
    pub session: Option<SessionKey>,
}

impl winx_release_engine::RuntimeOwner for OwnerAnswer {
    /// On Linux; off it no release is supported (`unsupported_platform`,
    /// as the engine answers, or `owner_unsupported` where asked).
    fn supports_temporary_release(&self) -> bool {
        cfg!(all(target_os = "linux", not(winx_foreign)))
    }

    fn running_executions(&self, _thread_id: &str) -> usize {
        self.liveness.running
    }

    fn pending_actions(&self, _thread_id: &str) -> usize {
        self.pending
    }

    fn running_detail(&self, _thread_id: &str) -> Option<String> {
        self.liveness.detail.clone()
    }

    fn in_use_exempt(&self) -> Vec<i32> {
        self.exempt.clone()
    }

    fn session_dir(&self) -> Option<(u64, u64)> {
        self.session.map(|k| (k.dev, k.ino))
    }
}
