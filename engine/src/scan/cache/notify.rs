//! Change notification for kept records: an inotify watch on each
//! directory whose descriptor a record keeps, so that a warm scan takes
//! such a record as it is when no event came for its directory since it was
//! read, without a `statx`.
//!
//! # Why a record without an event is exact
//!
//! - The watch is added **before** the directory's `statx` and entries are
//!   read, through the descriptor the record then keeps
//!   (`/proc/self/fd/N`, `IN_ONLYDIR`): it is on that inode, which the
//!   descriptor pins for the record's life, and every change to the
//!   directory's entries after the watch was added queues an event on it
//!   (`IN_CREATE`, `IN_DELETE`, `IN_MOVED_FROM`, `IN_MOVED_TO`; also
//!   `IN_ATTRIB` for a change of its own mode, owner or times,
//!   `IN_DELETE_SELF`, `IN_MOVE_SELF`, `IN_UNMOUNT`, `IN_IGNORED`; an
//!   entry's own attributes do not change the record: [`State::note`]).
//!   The kernel queues it inside the system call that made the change,
//!   before that call returns (fsnotify hooks of the VFS).
//! - Every scan first reads the whole queue (it is non-blocking) and notes,
//!   per watch, the number of the last read ("generation") that brought an
//!   event for it. A record read in generation `g` stands only when no read
//!   after `g` brought an event for its watch. So a change that returned
//!   before a scan started, at any time after the record's watch was added,
//!   makes the record be read again; a change during a scan is seen as a
//!   fresh scan would or would not see it.
//! - A full queue loses events and says so (`IN_Q_OVERFLOW`): every record
//!   read before that read is then validated by `statx` instead, as a record
//!   without a watch always is (the racy rule of `record.rs`).
//! - Several records of one directory share its watch (the kernel gives one
//!   watch descriptor per inode and instance); it is removed when the last
//!   of them goes. Adding and removing happen under one lock with the
//!   count, so a watch handed back for an inode already watched is never
//!   removed by another record's drop in between (records are dropped
//!   outside the cache's lock, by shared scans' snapshots).
//!
//! What this trusts beyond the `statx` rule: that the filesystems the lean
//! scan trusts (ext4, xfs, btrfs, tmpfs: local, their changes made through
//! the VFS) report every entry change to fsnotify. No process can withhold
//! an event of a change it makes; a same-user process can at most cause
//! events, which only make records be read again. A mount appearing
//! anywhere drops the whole cache, as before (`mod.rs`).
//!
//! Watches count against the user's `fs.inotify.max_user_watches`: only
//! records that keep a descriptor get one, so at most the descriptor budget
//! (`handle.rs`). When no instance or watch can be had, records are
//! validated by `statx`.
//!
//! # References
//! - [`inotify(7)`](https://man7.org/linux/man-pages/man7/inotify.7.html)
//! - [`inotify_add_watch(2)`](https://man7.org/linux/man-pages/man2/inotify_add_watch.2.html)
//! - Documentation/filesystems/inotify.rst and fs/notify/ in the kernel tree

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

/// What a watch asks for: every change of the directory's entries or
/// attributes, none of the reads or content writes of its files.
const WATCHED: WatchFlags = WatchFlags::ATTRIB
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ONLYDIR);

/// Bytes read from the queue at a time.
const READ_BUF: usize = 64 * 1024;

#[derive(Debug, Default)]
struct State {
    /// Reads of the queue so far.
    generation: u64,
    /// The last read that found the queue overflowed.
    overflowed: u64,
    /// Per watch: records holding it, and the last read that brought an
    /// event for it.
    watches: HashMap<i32, (usize, u64)>,
}

/// One inotify instance of a cache.
#[derive(Debug)]
pub(crate) struct Notify {
    fd: OwnedFd,
    state: Mutex<State>,
}

/// A record's watch on its directory; removed with the last record that
/// holds it.
#[derive(Debug)]
pub(crate) struct Watch {
    notify: Arc<Notify>,
    wd: i32,
    /// The generation the record was read in.
    since: u64,
}

impl Notify {
    /// A non-blocking instance; `None` when none can be had (the user's
    /// `max_user_instances`).
    pub(crate) fn new() -> Option<Arc<Notify>> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        Some(Arc::new(Notify { fd, state: Mutex::default() }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches the directory open as `dir`, before it is read; `None` when
    /// no watch can be added (then its record is validated by `statx`).
    pub(crate) fn watch(self: &Arc<Notify>, dir: BorrowedFd<'_>) -> Option<Watch> {
        let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        // Under the lock, as the removal in `Watch::drop` is: a watch the
        // kernel handed back for an inode already watched must not be
        // removed by the drop of its last other holder in between.
        let mut s = self.lock();
        let wd = inotify::add_watch(&self.fd, path.as_str(), WATCHED).ok()?;
        let since = s.generation;
        s.watches.entry(wd).or_insert((0, 0)).0 += 1;
        Some(Watch { notify: Arc::clone(self), wd, since })
    }

    /// Reads every event queued (a new generation). An error other than an
    /// empty queue counts as an overflow: events may have been lost.
    pub(crate) fn drain(&self) {
        let mut buf = vec![MaybeUninit::uninit(); READ_BUF];
        let mut s = self.lock();
        s.generation += 1;
        let generation = s.generation;
        let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
        loop {
            match reader.next() {
                Ok(event) => {
                    let named = event.file_name().is_some_and(|n| !n.is_empty());
                    s.note(event.wd(), event.events(), named, generation);
                }
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Err(_) => {
                    s.overflowed = generation;
                    break;
                }
            }
        }
    }
}

impl State {
    /// Notes one event read in `generation`; `named`: it is about an entry
    /// of the watched directory, not the directory itself.
    ///
    /// A change of an entry's attributes (`IN_ATTRIB` with a name: its
    /// mode, owner, times, link count) leaves the directory's record as it
    /// is: an entry's kind and identity do not depend on them, and whether
    /// it can be `statx`ed depends on the directory's own mode (an event
    /// without a name). A subdirectory's own mode is its own record's
    /// business, through its own watch or its `statx`.
    fn note(&mut self, wd: i32, flags: ReadFlags, named: bool, generation: u64) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.overflowed = generation;
        }
        if named && (flags - (ReadFlags::ATTRIB | ReadFlags::ISDIR)).is_empty() {
            return;
        }
        if let Some((_, last)) = self.watches.get_mut(&wd) {
            *last = generation;
        }
    }

    /// Whether a record read in generation `since` with watch `wd` has had
    /// no event since, and no overflow may have hidden one.
    fn quiet(&self, wd: i32, since: u64) -> bool {
        self.overflowed <= since && self.watches.get(&wd).is_some_and(|&(_, last)| last <= since)
    }
}

impl Watch {
    /// Whether no event came for this directory since its record was read
    /// (as of the last [`Notify::drain`]): the record then still holds.
    pub(crate) fn quiet(&self) -> bool {
        self.notify.lock().quiet(self.wd, self.since)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut s = self.notify.lock();
        if let Some((refs, _)) = s.watches.get_mut(&self.wd) {
            *refs -= 1;
            if *refs == 0 {
                s.watches.remove(&self.wd);
                // Gone already (`IN_IGNORED`: the directory was removed):
                // nothing to do.
                let _ = inotify::remove_watch(&self.notify.fd, self.wd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_or_an_overflow_after_the_read_makes_a_record_stale() {
        let mut s = State::default();
        s.watches.insert(7, (1, 0));
        s.generation = 3;
        // Read in generation 3; the drain of generation 4 brings nothing.
        assert!(s.quiet(7, 3));
        // An event drained in generation 3 came before the read.
        s.note(7, ReadFlags::CREATE, true, 3);
        assert!(s.quiet(7, 3));
        // An entry's attributes changed: the record holds.
        s.note(7, ReadFlags::ATTRIB | ReadFlags::ISDIR, true, 4);
        assert!(s.quiet(7, 3));
        // Its own attributes changed: it does not.
        s.note(7, ReadFlags::ATTRIB, false, 4);
        assert!(!s.quiet(7, 3));
        assert!(s.quiet(7, 4), "a record read after that event holds");
        // An overflow hides events of every watch read before it.
        s.watches.insert(8, (1, 0));
        s.note(-1, ReadFlags::QUEUE_OVERFLOW, false, 5);
        assert!(!s.quiet(8, 4));
        assert!(s.quiet(8, 5));
        // A watch this instance does not know never holds.
        assert!(!s.quiet(9, 5));
    }

    /// A queue that overflowed stales every watched record read before it.
    #[test]
    fn an_overflowed_queue_stales_every_record() {
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(usize::MAX);
        let Some(n) = Notify::new().filter(|_| max <= 65_536) else {
            eprintln!("SKIPPED: no inotify instance, or a queue of {max} events is too long to fill in a test");
            return;
        };
        let (t, quiet_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let open = |p: &std::path::Path| {
            rustix::fs::open(p, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC, 0.into()).unwrap()
        };
        let (busy, calm) = (open(t.path()), open(quiet_dir.path()));
        let (_w, other) = (n.watch(busy.as_fd()).unwrap(), n.watch(calm.as_fd()).unwrap());
        n.drain();
        assert!(other.quiet());
        for i in 0..=max {
            std::fs::File::create(t.path().join(i.to_string())).unwrap();
        }
        n.drain();
        assert!(!other.quiet(), "an overflow may have hidden an event of the other directory");
    }

    #[test]
    fn a_change_in_a_watched_directory_is_an_event_and_the_watch_goes_with_its_last_record() {
        let Some(n) = Notify::new() else {
            eprintln!("SKIPPED: no inotify instance can be had here");
            return;
        };
        let t = tempfile::tempdir().unwrap();
        let dir =
            rustix::fs::open(t.path(), rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC, 0.into()).unwrap();
        let (a, b) = (n.watch(dir.as_fd()).unwrap(), n.watch(dir.as_fd()).unwrap());
        assert_eq!(a.wd, b.wd, "one watch per inode");
        n.drain();
        assert!(a.quiet() && b.quiet());
        std::fs::write(t.path().join("f"), b"").unwrap();
        assert!(a.quiet(), "not drained yet");
        n.drain();
        assert!(!a.quiet() && !b.quiet());
        drop(a);
        assert_eq!(n.lock().watches[&b.wd].0, 1);
        let wd = b.wd;
        drop(b);
        assert!(!n.lock().watches.contains_key(&wd));
        // Removed from the kernel too: nothing comes for it any more.
        std::fs::write(t.path().join("g"), b"").unwrap();
        let mut buf = vec![MaybeUninit::uninit(); READ_BUF];
        let mut r = inotify::Reader::new(n.fd.as_fd(), &mut buf);
        let mut flags = Vec::new();
        while let Ok(e) = r.next() {
            flags.push(e.events());
        }
        assert!(flags.iter().all(|f| f.contains(ReadFlags::IGNORED)), "{flags:?}");
    }
}
