//! What a release's removals freed: the kernel's word, not a guess.
//!
//! A released target's blocks are freed when its inode is evicted, and that
//! waits for every reference to it: an open file or an `O_PATH` descriptor
//! in any table or in flight over `SCM_RIGHTS`, a mapping, a loop device, a
//! bind mount of it in any mount namespace. Each of those pins the file's
//! dentry (a `struct file` holds its path, a mount its root), which a write
//! lease does not see for `O_PATH` descriptors and mounts.
//!
//! With the inode's last link gone, the kernel emits inotify's
//! `IN_DELETE_SELF` on it when the last reference to its dentry is dropped
//! (`dentry_unlink_inode` → `fsnotify_inoderemove`), right before it lets
//! go of the inode. So, per target: a watch is placed on the release's own
//! descriptor of it (through `/proc/thread-self/fd/N`) before the unlink;
//! once every target is done and the release has closed every descriptor
//! it held of them, the watches are read without blocking. `IN_DELETE_SELF`
//! there: the removal freed its blocks (counted as allocated blocks ×
//! 512). Absent: another reference keeps the file (0), or the last one
//! was dropped a moment later elsewhere (0 as well: what is counted is
//! only what the kernel said was freed). A watch that cannot be placed
//! counts 0.
//!
//! The frontend's preflight closes its descriptors of the targets before
//! it sends the release, and the guardian holds none but the release's own
//! (checked on Linux 6.18: with nothing else holding the file, the event
//! is there once the release's descriptor is closed; with an `O_PATH`
//! descriptor in flight or a bind mount, it comes only when that goes).
//!
//! # References
//! - [`inotify(7)`](https://man7.org/linux/man-pages/man7/inotify.7.html) (`IN_DELETE_SELF`)
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::inotify;
use rustix::fs::AtFlags;

use super::{Outcome, TargetResult};
use winx_release_kernel::identity::{Identity, IDENTITY_MASK};

/// The watches of one release: target index → (watch, its allocated bytes).
pub(super) struct Freed {
    fd: Option<OwnedFd>,
    watches: RefCell<HashMap<usize, (i32, u64)>>,
}

impl Freed {
    /// One inotify instance for the release; without one every target
    /// counts 0.
    pub(super) fn new() -> Freed {
        let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
            .map_err(|e| tracing::warn!(error = %e, "no inotify instance: bytes reclaimed count 0"))
            .ok();
        Freed { fd, watches: RefCell::new(HashMap::new()) }
    }

    /// Watches target `index`, whose verified object `file` (identity `id`)
    /// is about to lose its last name. Call before the unlink.
    pub(super) fn watch(&self, index: usize, file: BorrowedFd<'_>, id: &Identity) {
        let Some(ino) = &self.fd else { return };
        let path = format!("/proc/thread-self/fd/{}", file.as_raw_fd());
        // The path must denote this very object.
        let same = rustix::fs::statx(rustix::fs::CWD, &path, AtFlags::empty(), IDENTITY_MASK)
            .is_ok_and(|s| Identity::from_statx(&s).physical() == id.physical());
        if !same {
            return;
        }
        match inotify::add_watch(ino, &path, inotify::WatchFlags::DELETE_SELF) {
            Ok(wd) => {
                self.watches.borrow_mut().insert(index, (wd, id.allocated_bytes()));
            }
            Err(e) => tracing::warn!(error = %e, "no inotify watch: its bytes reclaimed count 0"),
        }
    }

    /// Sets each released target's `bytes_reclaimed`: its allocated bytes
    /// when the kernel said its inode went, else 0. Call once the release
    /// holds no descriptor of any target.
    pub(super) fn settle(self, files: &mut [TargetResult]) {
        let Some(ino) = self.fd else { return };
        let mut gone: HashSet<i32> = HashSet::new();
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(ino.as_fd(), &mut buf);
        loop {
            match reader.next() {
                Ok(ev) if ev.events().contains(inotify::ReadFlags::DELETE_SELF) => {
                    gone.insert(ev.wd());
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                // AGAIN: nothing more now.
                Err(_) => break,
            }
        }
        for (i, (wd, bytes)) in self.watches.into_inner() {
            if let Some(f) = files.get_mut(i).filter(|f| f.outcome == Outcome::Released) {
                f.bytes_reclaimed = if gone.contains(&wd) { bytes } else { 0 };
            }
        }
        close_aside(ino);
    }
}

/// Closes an inotify instance off the release's path: the kernel tears its
/// group down waiting for an SRCU grace period (`fsnotify_destroy_group`),
/// which measured 13–22 ms in about one release of four. On a thread of
/// its own when one can be had, else here.
///
/// # References
/// - [`inotify(7)`](https://man7.org/linux/man-pages/man7/inotify.7.html)
fn close_aside(ino: OwnedFd) {
    let mut ino = Some(ino);
    let spawned = std::thread::Builder::new().name("winx-inotify-close".into()).stack_size(16 * 1024).spawn({
        let ino = ino.take();
        move || drop(ino)
    });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "closing the release's inotify instance in place");
    }
    drop(ino);
}
