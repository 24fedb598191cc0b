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

impl Slot {
    /// The least this slot's session may hold now.
    fn low(&self) -> u64 {
        self.bytes.saturating_sub(self.freeing)
    }

    /// The most it may hold now.
    fn high(&self) -> u64 {
        self.bytes + self.adding
    }
}

/// A write in flight: for each slot, the least and the most it may have
/// held at any moment since the write was sent.
#[derive(Debug)]
struct Window {
    id: u64,
    low: Vec<u64>,
    high: Vec<u64>,
}

#[derive(Debug, Default)]
struct Book {
    slots: Vec<Slot>,
    windows: Vec<Window>,
    next: u64,
}

impl Book {
    /// Folds the current state of every slot into every open window.
    fn observe(&mut self) {
        for w in &mut self.windows {
            for (i, s) in self.slots.iter().enumerate() {
                w.low[i] = w.low[i].min(s.low());
                w.high[i] = w.high[i].max(s.high());
            }
        }
    }
}

/// A write's window, from [`WorkspaceBook::begin`] to
/// [`WorkspaceBook::end`].
#[derive(Debug)]
#[must_use]
pub struct WindowId(u64);

/// Usage of one workspace by session slot.
///
/// The frontend measures the workspace under its quota lock at some moment
/// between sending a write and its answer, so the other sessions' usage a
/// write is judged against is known only as the range it spanned over that
/// whole window ([`WorkspaceBook::begin`] .. [`WorkspaceBook::end`]): a
/// release of another session that starts and completes while the write is
/// in flight lowers it, though neither end of the window shows it.
#[derive(Debug, Default)]
pub struct WorkspaceBook {
    book: Mutex<Book>,
}

impl WorkspaceBook {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new slot for a session of this workspace.
    pub fn add_slot(&self) -> usize {
        let mut b = self.book();
        b.slots.push(Slot::default());
        for w in &mut b.windows {
            w.low.push(0);
            w.high.push(0);
        }
        b.slots.len() - 1
    }

    /// Sets the committed bytes of `slot` and clears its in-flight marks.
    pub fn commit(&self, slot: usize, bytes: u64) {
        let mut b = self.book();
        b.slots[slot] = Slot { bytes, freeing: 0, adding: 0 };
        b.observe();
    }

    /// Marks `bytes` of `slot` as possibly freed by an in-flight release
    /// (or replaced by an in-flight write).
    pub fn freeing(&self, slot: usize, bytes: u64) {
        let mut b = self.book();
        b.slots[slot].freeing = bytes;
        b.observe();
    }

    /// Marks `bytes` as possibly added to `slot` by an in-flight creation.
    pub fn adding(&self, slot: usize, bytes: u64) {
        let mut b = self.book();
        b.slots[slot].adding = bytes;
        b.observe();
    }

    /// The workspace total as (low, high) now, with `own` standing for
    /// slot `slot` exactly.
    pub fn range(&self, slot: usize, own: u64) -> (u64, u64) {
        let b = self.book();
        let others = b.slots.iter().enumerate().filter(|(i, _)| *i != slot).map(|(_, s)| s);
        others.fold((own, own), |(lo, hi), s| (lo + s.low(), hi + s.high()))
    }

    /// Opens a window for a write about to be sent.
    pub fn begin(&self) -> WindowId {
        let mut b = self.book();
        b.next += 1;
        let id = b.next;
        let low = b.slots.iter().map(Slot::low).collect();
        let high = b.slots.iter().map(Slot::high).collect();
        b.windows.push(Window { id, low, high });
        WindowId(id)
    }

    /// Closes a write's window once its answer is in: the workspace total
    /// as (low, high) over the whole window, with `own` standing for slot
    /// `slot` exactly.
    pub fn end(&self, window: WindowId, slot: usize, own: u64) -> (u64, u64) {
        let mut b = self.book();
        let Some(at) = b.windows.iter().position(|w| w.id == window.0) else { return (own, own) };
        let w = b.windows.swap_remove(at);
        let others = (0..w.low.len()).filter(|i| *i != slot);
        others.fold((own, own), |(lo, hi), i| (lo + w.low[i], hi + w.high[i]))
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

    /// The stress run of seed 1796086869426871882: a release of another
    /// session starts and completes while a write is in flight. Neither
    /// end of the window shows it, yet the frontend may have measured the
    /// workspace in between, with those bytes gone: the low end must be
    /// the least the other sessions held over the whole window.
    #[test]
    fn a_release_inside_a_write_window_lowers_the_low_end() {
        let b = WorkspaceBook::default();
        let (me, other) = (b.add_slot(), b.add_slot());
        b.commit(other, 100);
        let win = b.begin();
        // The other session releases 40 bytes and commits; then a creation
        // of 40 bytes starts and lands again, all before the answer.
        b.freeing(other, 40);
        b.commit(other, 60);
        b.adding(other, 40);
        b.commit(other, 100);
        assert_eq!(b.range(me, 10), (110, 110), "the ends agree");
        assert_eq!(b.end(win, me, 10), (70, 110));
        // A window with nothing in it is the snapshot.
        let win = b.begin();
        assert_eq!(b.end(win, me, 10), (110, 110));
    }
}
