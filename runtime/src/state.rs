//! Where an execution is: the states every platform names.

/// Most bytes of output returned inline ([`Execution::output_tail`](crate::Execution::output_tail)); a
/// longer output is dropped whole into `W/.winx/scratch/<id>.out` when the
/// execution resolves.
pub const INLINE_OUTPUT_BYTES: u64 = 64 * 1024;

/// Where an execution is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecState {
    /// Admitted, not started yet (a foreground command waiting behind the
    /// session's running one).
    Queued,
    /// Its leader runs.
    Running,
    /// Its leader exited (with this code, when known), but something it
    /// started may still run.
    Lingering(Option<i32>),
    /// Nothing it started runs any more; recorded.
    Resolved(Option<i32>),
    /// Could not be started: the command never ran.
    FailedToStart,
}

impl ExecState {
    /// The name used in replies.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecState::Queued => "queued",
            ExecState::Running => "running",
            ExecState::Lingering(_) => "lingering",
            ExecState::Resolved(_) => "resolved",
            ExecState::FailedToStart => "failed_to_start",
        }
    }

    /// Whether nothing of the execution can run any more.
    pub fn is_final(self) -> bool {
        matches!(self, ExecState::Resolved(_) | ExecState::FailedToStart)
    }

    /// Whether it may still run (started and not resolved).
    pub fn is_unresolved(self) -> bool {
        matches!(self, ExecState::Running | ExecState::Lingering(_))
    }

    /// The exit code a reply reports: the leader's once the execution is
    /// resolved (`None` when it is not known: a record an earlier runtime
    /// left without one), 127 for a command that could not start, `None`
    /// while anything of it may run. The one rule every reply uses.
    pub fn exit_code(self) -> Option<i64> {
        match self {
            ExecState::Resolved(code) => code.map(i64::from),
            ExecState::FailedToStart => Some(127),
            ExecState::Queued | ExecState::Running | ExecState::Lingering(_) => None,
        }
    }
}
