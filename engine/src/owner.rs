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

    /// What is running, for the denial's message (the processes found, for
    /// instance). Only asked when [`RuntimeOwner::running_executions`] is
    /// not 0.
    fn running_detail(&self, thread_id: &str) -> Option<String> {
        let _ = thread_id;
        None
    }

    /// The processes whose open descriptors and mappings never make a
    /// target `in_use`: the owner itself and its frontends. The default is
    /// this process alone.
    fn in_use_exempt(&self) -> Vec<i32> {
        vec![std::process::id() as i32]
    }

    /// The session directory (device, inode) whose executions and actions
    /// these answers are about, when the owner knows it: a release that
    /// opens another directory at the session's path (one renamed into
    /// place after the owner looked the session up by its path) is refused
    /// [`crate::Reason::OtherSession`]. The default knows none.
    fn session_dir(&self) -> Option<(u64, u64)> {
        None
    }
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

/// An owner that does not run the thread's commands through the engine: a
/// thread whose shell the host runs itself and does not count (a zsh, a
/// user's shell the runtime does not start). Every release of it answers
/// [`crate::Reason::OwnerUnsupported`], before anything is opened.
///
/// A host answers with this rather than an owner with nothing running: a
/// helper its uncounted shell still uses must not be released.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unsupported;

impl RuntimeOwner for Unsupported {
    fn supports_temporary_release(&self) -> bool {
        false
    }

    fn running_executions(&self, _thread_id: &str) -> usize {
        0
    }

    fn pending_actions(&self, _thread_id: &str) -> usize {
        0
    }
}
