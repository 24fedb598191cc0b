//! Durable small files: temporary file, `fdatasync`, rename, directory
//! `fsync`; directory `fsync`s are group-committed.
//!
//! # Group commit
//!
//! A directory `fsync` makes durable every entry created, renamed or
//! removed in it *before the `fsync` started*. So concurrent callers that
//! each changed one directory need one `fsync` that starts after all their
//! changes, not one each: [`fsync_dir`] lets the first caller run it while
//! later callers wait; when it ends, callers whose change came before it
//! started return its result, and one of the others runs the next one for
//! all that are still waiting (a database's group commit). A caller never
//! returns before an `fsync` that started after its own call has ended
//! successfully, so the guarantee is the one a private `fsync` gives.
//!
//! # References
//! - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
//! - [`rename(2)`](https://man7.org/linux/man-pages/man2/rename.2.html)

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// Creates `dir` and its missing parents with mode 0700.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// One directory's group commit.
#[derive(Default)]
struct Group {
    /// Tickets handed out (one per call).
    issued: u64,
    /// Every ticket up to this one is covered by a finished `fsync`.
    covered: u64,
    /// The result of that `fsync` (an error kind and text).
    last: Option<(io::ErrorKind, String)>,
    /// An `fsync` is running.
    running: bool,
    /// Callers inside [`fsync_dir`] (the group is dropped when none is).
    inside: usize,
}

#[derive(Default)]
struct Groups {
    dirs: Mutex<HashMap<PathBuf, Group>>,
    done: Condvar,
}

fn groups() -> &'static Groups {
    static GROUPS: OnceLock<Groups> = OnceLock::new();
    GROUPS.get_or_init(Groups::default)
}

/// Directory `fsync`s run by this process (each shared by every caller it
/// covered).
static DIR_FSYNCS: AtomicU64 = AtomicU64::new(0);

/// How many directory `fsync`s this process has run ([`fsync_dir`]).
#[cfg(test)]
fn dir_fsyncs() -> u64 {
    DIR_FSYNCS.load(Ordering::Relaxed)
}

/// Fsyncs a directory so that entries created, renamed or removed in it
/// before this call are durable; concurrent calls for the same path share
/// one `fsync` (module docs). An error of the shared `fsync` is every
/// covered caller's error.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    let g = groups();
    let mut dirs = g.dirs.lock().unwrap_or_else(|e| e.into_inner());
    let ticket = {
        let group = dirs.entry(dir.to_path_buf()).or_default();
        group.issued += 1;
        group.inside += 1;
        group.issued
    };
    loop {
        let group = dirs.entry(dir.to_path_buf()).or_default();
        if group.covered >= ticket {
            let result = match &group.last {
                None => Ok(()),
                Some((kind, text)) => Err(io::Error::new(*kind, text.clone())),
            };
            group.inside -= 1;
            if group.inside == 0 {
                dirs.remove(dir);
            }
            return result;
        }
        if group.running {
            dirs = g.done.wait(dirs).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        group.running = true;
        let covers = group.issued;
        drop(dirs);
        let result = File::open(dir).and_then(|f| f.sync_all());
        DIR_FSYNCS.fetch_add(1, Ordering::Relaxed);
        dirs = g.dirs.lock().unwrap_or_else(|e| e.into_inner());
        let group = dirs.entry(dir.to_path_buf()).or_default();
        group.running = false;
        group.covered = covers;
        group.last = result.as_ref().err().map(|e| (e.kind(), e.to_string()));
        g.done.notify_all();
    }
}

/// Writes `bytes` to `path` durably: a temporary file in the same directory
/// (mode 0600), `fdatasync`, rename over `path`, then [`fsync_dir`] of the
/// directory (shared with concurrent writers into it).
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), crate::sys::random_hex(6)));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        // The data and the size that reaches it; the name is the
        // directory's, made durable below.
        f.sync_data()?;
        drop(f);
        fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Concurrent callers share `fsync`s: 16 threads, each after its own
    /// rename into one directory, run far fewer than 16 between them (the
    /// count is the process's, so other tests may add a few).
    #[test]
    fn concurrent_dir_fsyncs_are_shared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let before = dir_fsyncs();
        let barrier = std::sync::Barrier::new(16);
        std::thread::scope(|s| {
            for i in 0..16 {
                let (dir, barrier) = (&dir, &barrier);
                s.spawn(move || {
                    fs::write(dir.join(format!("f{i}")), b"x").unwrap();
                    barrier.wait();
                    fsync_dir(dir).unwrap();
                });
            }
        });
        let ran = dir_fsyncs() - before;
        assert!((1..16).contains(&ran), "{ran} fsyncs for 16 callers");
        // A missing directory is every caller's error.
        assert!(fsync_dir(&dir.join("missing")).is_err());
    }
}
