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
use std::sync::{Mutex, OnceLock};

use rustix::fs::inotify;
use rustix::fs::AtFlags;

use super::{Outcome, TargetResult};
use winx_release_kernel::identity::{Identity, IDENTITY_MASK};

/// The process's one inotify instance, shared by every release, and the
/// watches whose `IN_DELETE_SELF` it has read but whose release has not
/// settled yet (another release's read may drain them).
///
/// One instance for the process, not one per release: the kernel tears an
/// instance down waiting for an SRCU grace period (`fsnotify_destroy_group`,
/// 13–22 ms in about one release of four when each release closed its
/// own), an instance counts against `fs.inotify.max_user_instances` (128 by
/// default: 16 sessions releasing at once would come near it), and making
/// and closing one cost a warm release about 0.1–0.2 ms (the closing
/// thread). Watch descriptors are not reused while the instance lives (the
/// kernel allocates them cyclically), so a watch names one target of one
/// release.
struct Shared {
    fd: OwnedFd,
    gone: HashSet<i32>,
}

/// The shared instance, made at the first release that asks for it; `None`
/// when none could be made (every target then counts 0).
fn shared() -> Option<&'static Mutex<Shared>> {
    static SHARED: OnceLock<Option<Mutex<Shared>>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
                .map_err(|e| tracing::warn!(error = %e, "no inotify instance: bytes reclaimed count 0"))
                .ok()
                .map(|fd| Mutex::new(Shared { fd, gone: HashSet::new() }))
        })
        .as_ref()
}

impl Shared {
    /// Reads every event queued now (without blocking) and keeps the
    /// watches that saw their inode go. An overflow loses events: those
    /// targets count 0, never more than was freed.
    fn drain(&mut self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
        loop {
            match reader.next() {
                Ok(ev) if ev.events().contains(inotify::ReadFlags::DELETE_SELF) => {
                    self.gone.insert(ev.wd());
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                // AGAIN: nothing more now.
                Err(_) => break,
            }
        }
    }
}

/// The watches of one release: target index → (watch, its allocated bytes).
pub(super) struct Freed {
    shared: Option<&'static Mutex<Shared>>,
    watches: RefCell<HashMap<usize, (i32, u64)>>,
}

/// The shared state, even if a release panicked while holding it (its
/// fields stay consistent: a set of watch descriptors and the instance).
fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Freed {
    /// The watches of a new release, on the process's inotify instance;
    /// without one every target counts 0.
    pub(super) fn new() -> Freed {
        Freed { shared: shared(), watches: RefCell::new(HashMap::new()) }
    }

    /// Watches target `index`, whose verified object `file` (identity `id`)
    /// is about to lose its last name. Call before the unlink.
    pub(super) fn watch(&self, index: usize, file: BorrowedFd<'_>, id: &Identity) {
        let Some(shared) = self.shared else { return };
        let path = format!("/proc/thread-self/fd/{}", file.as_raw_fd());
        // The path must denote this very object.
        let same = rustix::fs::statx(rustix::fs::CWD, &path, AtFlags::empty(), IDENTITY_MASK)
            .is_ok_and(|s| Identity::from_statx(&s).physical() == id.physical());
        if !same {
            return;
        }
        match inotify::add_watch(&lock(shared).fd, &path, inotify::WatchFlags::DELETE_SELF) {
            Ok(wd) => {
                self.watches.borrow_mut().insert(index, (wd, id.allocated_bytes()));
            }
            Err(e) => tracing::warn!(error = %e, "no inotify watch: its bytes reclaimed count 0"),
        }
    }

    /// Sets each released target's `bytes_reclaimed`: its allocated bytes
    /// when the kernel said its inode went, else 0. Call once the release
    /// holds no descriptor of any target.
    ///
    /// A watch whose inode did not go (another reference keeps it) is
    /// removed, and whatever it reported meanwhile is forgotten: the
    /// instance keeps no watch and no event of a settled release.
    pub(super) fn settle(self, files: &mut [TargetResult]) {
        let Some(shared) = self.shared else { return };
        let watches = self.watches.take();
        if watches.is_empty() {
            return;
        }
        let mut st = lock(shared);
        st.drain();
        let gone: HashSet<i32> = watches.values().map(|(wd, _)| *wd).filter(|wd| st.gone.contains(wd)).collect();
        for (wd, _) in watches.values() {
            if !gone.contains(wd) {
                // It may have gone since the read: EINVAL then (the kernel
                // dropped the watch with its inode). Either way it counts 0.
                let _ = inotify::remove_watch(&st.fd, *wd);
            }
        }
        // What the removals (`IN_IGNORED`) and any late `IN_DELETE_SELF`
        // queued, read now so that no event of this release is left behind.
        st.drain();
        for (wd, _) in watches.values() {
            st.gone.remove(wd);
        }
        drop(st);
        for (i, (wd, bytes)) in watches {
            if let Some(f) = files.get_mut(i).filter(|f| f.outcome == Outcome::Released) {
                f.bytes_reclaimed = if gone.contains(&wd) { bytes } else { 0 };
            }
        }
    }
}

impl Drop for Freed {
    /// Removes the watches of a release that never settled (a panic on its
    /// way), so that the shared instance keeps nothing of it.
    fn drop(&mut self) {
        let (Some(shared), watches) = (self.shared, self.watches.get_mut()) else { return };
        if watches.is_empty() {
            return;
        }
        let mut st = lock(shared);
        for (wd, _) in watches.values() {
            let _ = inotify::remove_watch(&st.fd, *wd);
        }
        st.drain();
        for (wd, _) in watches.values() {
            st.gone.remove(wd);
        }
    }
}
