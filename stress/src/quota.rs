//! The stress tool's own account of the quotas (contract section 6),
//! written from the contract's numbers, not from the engine's code.
//!
//! A worker owns its session, so the session's files and bytes are known
//! exactly. The workspace total also moves with the other sessions of the
//! workspace while a write is in flight, so it is known as a range: at least
//! the committed usage minus what in-flight releases may free, at most the
//! committed usage plus what in-flight creations may add. An accepted write
//! that exceeds a quota even at the low end is a quota violation; a refusal
//! when the write fits even at the high end is a contract mismatch.

use std::sync::Mutex;

/// Most files in one session.
pub const MAX_SESSION_FILES: u64 = 128;
/// Most bytes in one session.
pub const MAX_SESSION_BYTES: u64 = 64 << 20;
/// Largest helper.
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// Most helper bytes in one workspace.
pub const MAX_WORKSPACE_BYTES: u64 = 256 << 20;

/// The usage a write is judged against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Files in the session.
    pub files: u64,
    /// Bytes in the session.
    pub bytes: u64,
    /// Bytes in the workspace, all sessions.
    pub workspace: u64,
}

/// Which quota a write of `new` bytes (replacing `old`, `None` for a new
/// file) would exceed, if any.
pub fn exceeded(u: Usage, old: Option<u64>, new: u64) -> Option<&'static str> {
    let old_bytes = old.unwrap_or(0);
    if new > MAX_FILE_BYTES {
        return Some("file_bytes");
    }
    if u.files + u64::from(old.is_none()) > MAX_SESSION_FILES {
        return Some("session_files");
    }
    if u.bytes.saturating_sub(old_bytes) + new > MAX_SESSION_BYTES {
        return Some("session_bytes");
    }
    if u.workspace.saturating_sub(old_bytes) + new > MAX_WORKSPACE_BYTES {
        return Some("workspace_bytes");
    }
    None
}

#[derive(Debug, Default)]
struct Slot {
    bytes: u64,
    freeing: u64,
    adding: u64,
}

/// Usage of one workspace by session slot.
#[derive(Debug, Default)]
pub struct WorkspaceBook {
    slots: Mutex<Vec<Slot>>,
}

impl WorkspaceBook {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new slot for a session of this workspace.
    pub fn add_slot(&self) -> usize {
        let mut s = self.slots();
        s.push(Slot::default());
        s.len() - 1
    }

    /// Sets the committed bytes of `slot` and clears its in-flight marks.
    pub fn commit(&self, slot: usize, bytes: u64) {
        let mut s = self.slots();
        s[slot] = Slot { bytes, freeing: 0, adding: 0 };
    }

    /// Marks `bytes` of `slot` as possibly freed by an in-flight release.
    pub fn freeing(&self, slot: usize, bytes: u64) {
        self.slots()[slot].freeing = bytes;
    }

    /// Marks `bytes` as possibly added to `slot` by an in-flight creation.
    pub fn adding(&self, slot: usize, bytes: u64) {
        self.slots()[slot].adding = bytes;
    }

    /// The workspace total as (low, high), with `own` standing for slot
    /// `slot` exactly.
    pub fn range(&self, slot: usize, own: u64) -> (u64, u64) {
        let s = self.slots();
        let (mut lo, mut hi) = (own, own);
        for (i, x) in s.iter().enumerate() {
            if i != slot {
                lo += x.bytes.saturating_sub(x.freeing);
                hi += x.bytes + x.adding;
            }
        }
        (lo, hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_inclusive() {
        let full = Usage { files: 128, bytes: MAX_SESSION_BYTES, workspace: MAX_WORKSPACE_BYTES };
        assert_eq!(exceeded(full, Some(10), 10), None);
        assert_eq!(exceeded(full, None, 0), Some("session_files"));
        assert_eq!(exceeded(Usage { files: 1, ..full }, None, 0), None);
        assert_eq!(exceeded(Usage { files: 1, ..full }, None, 1), Some("session_bytes"));
        let ws = Usage { files: 0, bytes: 0, workspace: MAX_WORKSPACE_BYTES };
        assert_eq!(exceeded(ws, None, 1), Some("workspace_bytes"));
        assert_eq!(exceeded(Usage::default(), None, MAX_FILE_BYTES), None);
        assert_eq!(exceeded(Usage::default(), None, MAX_FILE_BYTES + 1), Some("file_bytes"));
    }

    #[test]
    fn workspace_range_counts_in_flight_work() {
        let b = WorkspaceBook::default();
        let (a, c) = (b.add_slot(), b.add_slot());
        b.commit(a, 100);
        b.commit(c, 50);
        b.freeing(c, 20);
        b.adding(c, 5);
        assert_eq!(b.range(a, 10), (40, 65));
    }
}
