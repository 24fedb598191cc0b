//! The helper quotas (contract section 6).
//!
//! A quota check measures usage and then writes; two writers measuring at
//! once could each pass alone and together exceed it. Every check-and-write
//! into a workspace's sessions therefore runs under [`QuotaLock`], an
//! exclusive `flock(2)` on the workspace directory, shared by every
//! frontend process and thread.
//!
//! # References
//! - [`flock(2)`](https://man7.org/linux/man-pages/man2/flock.2.html)

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Most files in one session directory.
pub const MAX_SESSION_FILES: u64 = 128;
/// Most bytes in one session directory (64 MiB).
pub const MAX_SESSION_BYTES: u64 = 64 * 1024 * 1024;
/// Largest single helper (32 MiB).
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Most helper bytes in one workspace, all sessions together (256 MiB).
pub const MAX_WORKSPACE_BYTES: u64 = 256 * 1024 * 1024;
/// How long a write waits for its workspace's quota lock before it is
/// refused (10 s).
pub const QUOTA_LOCK_WAIT: Duration = Duration::from_secs(10);
/// Age after which a session is past its time to live (24 hours).
pub const SESSION_TTL_SECS: u64 = 24 * 60 * 60;

/// Usage that a write is checked against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Files in the session.
    pub session_files: u64,
    /// Bytes in the session.
    pub session_bytes: u64,
    /// Bytes in all sessions of the workspace.
    pub workspace_bytes: u64,
}

/// Whether writing `new_size` bytes to a helper that now holds `old_size`
/// bytes (`None`: a new file) keeps every quota.
pub fn write_allowed(usage: Usage, old_size: Option<u64>, new_size: u64) -> bool {
    let old = old_size.unwrap_or(0);
    // Saturating: sizes on disk are the agent's to choose (a sparse file
    // of 2^63 - 1 bytes), and a sum that wrapped would let a write through.
    let files = usage.session_files.saturating_add(u64::from(old_size.is_none()));
    let session = usage.session_bytes.saturating_sub(old).saturating_add(new_size);
    let workspace = usage.workspace_bytes.saturating_sub(old).saturating_add(new_size);
    new_size <= MAX_FILE_BYTES
        && files <= MAX_SESSION_FILES
        && session <= MAX_SESSION_BYTES
        && workspace <= MAX_WORKSPACE_BYTES
}

/// The per-workspace lock that serialises quota check and write, released
/// on drop.
#[derive(Debug)]
pub struct QuotaLock {
    _dir: OwnedFd,
}

impl QuotaLock {
    /// Takes the exclusive lock of `workspace` (its directory, opened
    /// without following a link), waiting at most [`QUOTA_LOCK_WAIT`].
    ///
    /// # References
    /// - [`flock(2)`](https://man7.org/linux/man-pages/man2/flock.2.html)
    pub fn workspace(workspace: &Path) -> io::Result<QuotaLock> {
        QuotaLock::workspace_within(workspace, QUOTA_LOCK_WAIT)
    }

    /// Takes the exclusive lock of `workspace`, waiting at most `wait`.
    ///
    /// The lock is the workspace directory's `flock(2)`, which a command
    /// may hold too (`flock "$PWD" make`): past `wait` this fails with
    /// [`io::ErrorKind::WouldBlock`] and a message saying so, rather than
    /// hang the write (and the tool call) for as long as the command runs.
    ///
    /// # References
    /// - [`flock(2)`](https://man7.org/linux/man-pages/man2/flock.2.html)
    pub fn workspace_within(workspace: &Path, wait: Duration) -> io::Result<QuotaLock> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(rustix::fs::CWD, workspace, flags, Mode::empty())?;
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(QuotaLock { _dir: fd }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::WOULDBLOCK) if Instant::now() < deadline => {
                    std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "the quota lock of {} (a flock on the workspace directory) has been held by another \
                             process for {} ms, perhaps a command running `flock` on the workspace; nothing was \
                             written, retry once it ends",
                            workspace.display(),
                            wait.as_millis()
                        ),
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another holder of the workspace's `flock` (a command's `flock
    /// "$PWD"`) makes the lock fail after the bound, never hang.
    #[test]
    fn a_held_workspace_lock_is_refused_after_the_bound() {
        let d = tempfile::tempdir().unwrap();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let other = rustix::fs::openat(rustix::fs::CWD, d.path(), flags, Mode::empty()).unwrap();
        rustix::fs::flock(&other, FlockOperation::LockExclusive).unwrap();
        let t = Instant::now();
        let e = QuotaLock::workspace_within(d.path(), Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(e.to_string().contains("flock"), "{e}");
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
        drop(other);
        QuotaLock::workspace_within(d.path(), Duration::from_millis(200)).unwrap();
    }

    /// Usage summed from sizes the agent chose (sparse files of 2^63 - 1
    /// bytes) is over every quota, and a sum near the top of `u64` neither
    /// panics nor wraps into a small number that lets a write through.
    #[test]
    fn a_sum_near_the_top_of_u64_is_over_quota_not_wrapped() {
        let huge = Usage { session_files: 2, session_bytes: u64::MAX - 1, workspace_bytes: u64::MAX - 1 };
        assert!(!write_allowed(huge, None, 2));
        assert!(!write_allowed(huge, Some(0), MAX_FILE_BYTES));
        let files = Usage { session_files: u64::MAX, ..Usage::default() };
        assert!(!write_allowed(files, None, 1));
        assert!(write_allowed(Usage::default(), None, MAX_FILE_BYTES));
    }
}
