//! The descriptors the cache keeps of the directories it holds records of,
//! so that a warm scan `statx`es each directory through its descriptor
//! instead of walking its path from the root again.
//!
//! A record keeps the descriptor its directory was read through (opened
//! `O_DIRECTORY | O_CLOEXEC` beneath the root, without following links),
//! and the inotify watch on it, if any (`notify.rs`: with a watch that had
//! no event, no `statx` at all).
//! What a `statx` through it says about the directory *at the record's
//! path* is argued in `walk.rs` ([`super::walk::validate`]): the walk uses
//! a record only where the directory's parent names that same directory.
//!
//! At most [`budget`] descriptors are kept in the whole process: a quarter
//! of the soft `RLIMIT_NOFILE`, and never more than 16,384. A record read
//! when the budget is spent keeps none and is validated by its path, as
//! before. Each kept descriptor pins its directory (and keeps its
//! filesystem busy for `umount`) until the record is dropped: when the
//! directory is read again, leaves the tree, the cache is dropped (a mount
//! table change, any doubt), or its root has not been scanned for 10
//! minutes (`ROOT_IDLE` in `mod.rs`).
//!
//! # References
//! - [`getrlimit(2)`](https://man7.org/linux/man-pages/man2/getrlimit.2.html)

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::notify::Watch;

/// The most descriptors kept, whatever the limit.
const MAX_KEPT: usize = 16_384;

/// Descriptors kept now, in the whole process.
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// How many descriptors the cache may keep: a quarter of the soft
/// `RLIMIT_NOFILE` (read once; `sys::cache_share`), at most `MAX_KEPT`.
pub fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| winx_release_kernel::sys::cache_share(MAX_KEPT))
}

/// Descriptors the cache keeps now, in the whole process.
#[cfg(test)]
pub(crate) fn kept() -> usize {
    KEPT.load(Ordering::Relaxed)
}

/// A directory's descriptor, kept with its record, and the watch on it
/// added before the directory was read (`notify.rs`), if any.
#[derive(Debug)]
pub(crate) struct Handle {
    fd: OwnedFd,
    watch: OnceLock<Watch>,
}

impl Handle {
    /// Keeps `fd` (and `watch`) when the budget allows; `None` (and both
    /// let go) when it is spent.
    pub(crate) fn keep(fd: OwnedFd, watch: Option<Watch>) -> Option<Handle> {
        KEPT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < budget()).then_some(n + 1))
            .ok()
            .map(|_| Handle { fd, watch: watch.map_or_else(OnceLock::new, OnceLock::from) })
    }

    /// The watch on the directory, if it has one.
    pub(crate) fn watch(&self) -> Option<&Watch> {
        self.watch.get()
    }

    /// Gives the directory a watch, added after its record was read: the
    /// caller `statx`es it afterwards and keeps the record only if that
    /// `statx` says it still holds (`notify.rs`).
    pub(crate) fn attach(&self, watch: Watch) {
        let _ = self.watch.set(watch);
    }
}

impl AsFd for Handle {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        KEPT.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_the_cache_share_and_counts_what_is_kept() {
        assert_eq!(budget(), winx_release_kernel::sys::cache_share(MAX_KEPT));
        let dir = tempfile::tempdir().unwrap();
        let fd = rustix::fs::open(dir.path(), rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC, 0.into())
            .unwrap();
        let h = Handle::keep(fd, None).expect("a budget of at least one");
        // Other tests of this binary keep handles too: the count moves by
        // at least this one while it is held.
        assert!(kept() >= 1);
        drop(h);
    }
}
