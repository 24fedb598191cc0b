//! What the runtime owner (the guardian) must answer under its admission
//! barrier.

/// The questions a release asks of the session's runtime owner.
///
/// A guardian implements this over its real execution table and calls
/// [`crate::release::release`] while it holds the session's admission
/// barrier, so that no command can start between these answers and the end
/// of the release.
pub trait RuntimeOwner {
    /// Whether this owner supports guarded release (`temporary_release`).
    fn supports_temporary_release(&self) -> bool;

    /// How many commands of `thread_id` are running, foreground or
    /// background. A command whose inline wait returned is still running
    /// until it has exited and been reaped.
    fn running_executions(&self, thread_id: &str) -> usize;

    /// How many actions of `thread_id` are queued or unresolved.
    fn pending_actions(&self, thread_id: &str) -> usize;
}

/// An owner with nothing running and nothing pending, for tools that act
/// outside any guardian (the stress tool's engine-level checks, tests).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdleOwner;

impl RuntimeOwner for IdleOwner {
    fn supports_temporary_release(&self) -> bool {
        true
    }

    fn running_executions(&self, _thread_id: &str) -> usize {
        0
    }

    fn pending_actions(&self, _thread_id: &str) -> usize {
        0
    }
}
