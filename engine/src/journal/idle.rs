//! Retired journal files a long-lived owner keeps, empty, for its next
//! releases.
//!
//! Creating a file costs an inode allocation, and on ext4 without a
//! journal (`mkfs.ext4 -O ^has_journal`, as on the development machine)
//! the allocator skips, one inode table read each, every inode of the group
//! deleted in the last few seconds (`recently_deleted` in
//! `fs/ext4/ialloc.c`): under a load that releases about a thousand
//! helpers a second that was 28 % of the guardian's CPU (benches/log,
//! stop 40). So a guardian keeps a retired journal instead of unlinking it
//! and writes its next intent into it: the file's name was made durable
//! (its directory fsynced) when it was created, so a reused file needs only
//! the `fdatasync` of its intent.
//!
//! A retired journal is overwritten with zero bytes, in place, and padded
//! with zeros to [`KEPT_LEN`], not truncated: truncating freed its block
//! and the next intent allocated one again (a block-bitmap update each
//! way, and the intent's `fdatasync` wrote the inode for the new size as
//! well as the data). Written over zeros in blocks it has, at an unchanged
//! size, the intent's `fdatasync` writes its data block alone. The marks
//! after an intent are never read from an earlier release: the reader
//! stops at the first zero byte, and everything an earlier release wrote
//! was zeroed before the file was kept.
//!
//! What makes a kept file safe to reuse: it holds zero bytes only (recovery
//! reads such a journal as [`super::ReadJournal::Idle`] and removes it),
//! and it is still the file at its name. Recovery may run while no release holds the
//! journal lock and remove it; so [`take`] is called with the shared lock
//! held (no recovery can run then) and checks the link count and the
//! identity at the name before handing the file out. Off (`0` files kept,
//! the default) a retired journal is unlinked as before: a process that
//! releases once and exits leaves nothing behind.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rustix::fs::{AtFlags, StatxFlags};

/// The size a kept file is padded to: one block of most filesystems, so
/// that an intent of up to 4 KiB (a release of a few helpers) is written
/// without changing the size.
pub(super) const KEPT_LEN: u64 = 4096;

/// One kept file: its directory, its path, the open file, and its size
/// when it was kept (every byte zero).
pub(super) struct Kept {
    pub dir: PathBuf,
    pub path: PathBuf,
    pub file: File,
    pub len: u64,
}

static KEEP: AtomicUsize = AtomicUsize::new(0);
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

fn kept() -> std::sync::MutexGuard<'static, Vec<Kept>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps up to `max` retired journal files of this process for reuse
/// (module docs); `0` (the default) keeps none.
pub fn keep_idle_journals(max: usize) {
    KEEP.store(max, Ordering::SeqCst);
}

/// Unlinks every kept file (a guardian that stops cleanly leaves no empty
/// journals behind) and returns how many it removed. Keeping stays as
/// set.
pub fn drop_idle_journals() -> usize {
    let all = std::mem::take(&mut *kept());
    let mut n = 0;
    for k in all {
        if std::fs::remove_file(&k.path).is_ok() {
            n += 1;
        }
    }
    n
}

/// Keeps `k` (already overwritten with zero bytes) if keeping is on and there is
/// room; else gives it back.
pub(super) fn put(k: Kept) -> Result<(), Kept> {
    let mut g = kept();
    if g.len() < KEEP.load(Ordering::SeqCst) {
        g.push(k);
        Ok(())
    } else {
        Err(k)
    }
}

/// Whether keeping is on.
pub(super) fn on() -> bool {
    KEEP.load(Ordering::SeqCst) > 0
}

/// A kept file of `dir` that is still the file at its name, at the size it
/// was kept at, if any.
/// Call with the shared lock of `dir` held. Files found unlinked or
/// replaced are dropped.
pub(super) fn take(dir: &Path) -> Option<Kept> {
    loop {
        let k = {
            let mut g = kept();
            let i = g.iter().position(|k| k.dir == dir)?;
            g.swap_remove(i)
        };
        if still_linked(&k).unwrap_or(false) {
            return Some(k);
        }
    }
}

fn still_linked(k: &Kept) -> io::Result<bool> {
    let mask = StatxFlags::INO | StatxFlags::NLINK | StatxFlags::SIZE;
    let open = rustix::fs::statx(&k.file, "", AtFlags::EMPTY_PATH, mask)?;
    let named = rustix::fs::statx(rustix::fs::CWD, &k.path, AtFlags::SYMLINK_NOFOLLOW, mask)?;
    Ok(open.stx_nlink > 0
        && open.stx_size == k.len
        && (open.stx_dev_major, open.stx_dev_minor, open.stx_ino)
            == (named.stx_dev_major, named.stx_dev_minor, named.stx_ino))
}
