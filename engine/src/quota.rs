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

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Most files in one session directory.
pub const MAX_SESSION_FILES: u64 = 128;
/// Most bytes in one session directory (64 MiB).
pub const MAX_SESSION_BYTES: u64 = 64 * 1024 * 1024;
/// Largest single helper (32 MiB).
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Most helper bytes in one workspace, all sessions together (256 MiB).
pub const MAX_WORKSPACE_BYTES: u64 = 256 * 1024 * 1024;
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
    let files = usage.session_files + u64::from(old_size.is_none());
    let session = usage.session_bytes.saturating_sub(old) + new_size;
    let workspace = usage.workspace_bytes.saturating_sub(old) + new_size;
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
    /// without following a link), blocking while another writer holds it.
    ///
    /// # References
    /// - [`flock(2)`](https://man7.org/linux/man-pages/man2/flock.2.html)
    pub fn workspace(workspace: &Path) -> io::Result<QuotaLock> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(rustix::fs::CWD, workspace, flags, Mode::empty())?;
        loop {
            match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
                Ok(()) => return Ok(QuotaLock { _dir: fd }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
