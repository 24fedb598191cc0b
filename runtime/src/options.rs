//! How a [`Runtime`](crate::Runtime) starts and what it starts: the same
//! on every platform.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::session::SessionKey;

/// How a [`Runtime`](crate::Runtime) tells what still runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LivenessChoice {
    /// A cgroup per execution where a delegated subtree can be had, else
    /// the `/proc` signals.
    #[default]
    Auto,
    /// The `/proc` signals only.
    Proc,
}

/// How a [`Runtime`](crate::Runtime) starts.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Cgroup or `/proc` liveness.
    pub liveness: LivenessChoice,
    /// In cgroup mode, move this process into the subtree's `guardian/`
    /// leaf (a guardian does; a test that embeds the runtime need not).
    pub move_self: bool,
    /// Make this process a child subreaper, so that orphans of its commands
    /// are reparented to it (and reaped by the runtime) rather than to init.
    /// The runtime then reaps every exited child of this process that is not
    /// a leader once [`Runtime::sigchld_flag`](crate::Runtime::sigchld_flag) is set: a host with children
    /// of its own sets this false, or keeps that flag unset (docs/DESIGN.md,
    /// "Embedding").
    pub subreaper: bool,
    /// Adopt the unresolved executions of `D/executions` that this runtime
    /// did not start (a guardian does; a second runtime beside a guardian,
    /// such as an embedded frontend's, must not judge the guardian's).
    pub adopt: bool,
    /// Variables no command inherits (systemd's activation variables, say).
    pub env_remove: Vec<OsString>,
    /// The program every execution starts under as its monitor
    /// ([`crate::monitor`]); `None`: [`crate::monitor::program`] finds one.
    /// Where none is found, nothing starts (every start fails, saying why).
    pub monitor: Option<PathBuf>,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            liveness: LivenessChoice::Auto,
            move_self: true,
            subreaper: true,
            adopt: true,
            env_remove: Vec::new(),
            monitor: None,
        }
    }
}

/// What to start as an execution of a session.
#[derive(Clone, Debug)]
pub struct Spawn {
    /// The thread.
    pub thread: String,
    /// The workspace.
    pub workspace: PathBuf,
    /// The command's working directory; `None`: the workspace.
    pub cwd: Option<PathBuf>,
    /// The identity of the session directory.
    pub session: SessionKey,
    /// The command, run as `bash -c COMMAND`.
    pub command: String,
    /// Whether it runs in the background.
    pub background: bool,
    /// Variables set for it (besides `WINX_EXECUTION_ID`).
    pub env: Vec<(OsString, OsString)>,
}
