//! The helper quotas (contract section 6).

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
