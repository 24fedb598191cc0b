//! What the runtime's integration tests share: waiting for a condition
//! with a deadline, never a bare sleep that hopes it is long enough.
//!
//! A sleep stays only where a test checks that something does *not*
//! happen (it says so where it sleeps).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use winx_release_runtime::SessionKey;

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(10);

/// Waits until `cond` holds, looking every 10 ms; panics naming `what`
/// once `deadline` has passed without it (`cond` is looked at once more at
/// the deadline).
pub fn eventually(deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !cond() {
        assert!(Instant::now() < end, "timed out after {deadline:?}: {what}");
        std::thread::sleep(POLL);
    }
}

/// The pid a command wrote to `path`, once it is there (within 10 s).
pub fn read_pid(path: &Path) -> i32 {
    let mut pid = None;
    eventually(Duration::from_secs(10), &format!("a pid in {}", path.display()), || {
        pid = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap_or_default()
}

/// A test's directories: a temporary root (canonical; removed when `tmp`
/// is dropped), its workspace `ws` (made), its data directory `data` (not
/// made) and the workspace's session key.
pub struct Dirs {
    /// The root, kept alive.
    pub tmp: tempfile::TempDir,
    /// `tmp`'s canonical path.
    pub root: PathBuf,
    /// `root/ws`.
    pub ws: PathBuf,
    /// `root/data`.
    pub data: PathBuf,
    /// The session key of `ws`.
    pub key: SessionKey,
}

/// Makes a test's [`Dirs`].
pub fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let (ws, data) = (root.join("ws"), root.join("data"));
    std::fs::create_dir_all(&ws).unwrap();
    let key = SessionKey::of_path(&ws).unwrap();
    Dirs { tmp, root, ws, data, key }
}
