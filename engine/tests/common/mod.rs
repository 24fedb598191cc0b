//! Shared fixtures for engine tests.
#![allow(dead_code)]

pub mod ns;
pub mod trees;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use winx_release_engine::layout::Layout;
use winx_release_engine::rehash::sha256_fd;
use winx_release_engine::release::Target;
use winx_release_kernel::identity::{Identity, Pin};

/// Held while a test starts a process, and while a test releases when its
/// assertions count reclaimed bytes: a child between its `fork` and its
/// `exec` holds a copy of every descriptor of the test process, a
/// release's own descriptor of its target included, and the release then
/// counts no reclaimed bytes for that target (something else held it at
/// its unlink). The tests of one binary run on threads of one process.
static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`FORKS`].
pub fn no_fork_now() -> std::sync::MutexGuard<'static, ()> {
    FORKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A workspace, data dir and one session.
pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub layout: Layout,
    pub thread: String,
    pub session: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        Self::with_thread("thread-under-test")
    }

    pub fn with_thread(thread: &str) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        let ws = root.join("ws");
        let data = root.join("data");
        fs::create_dir_all(&ws).unwrap();
        fs::create_dir_all(&data).unwrap();
        let layout = Layout::new(&ws, &data).unwrap();
        let session = layout.session_dir(thread);
        fs::create_dir_all(&session).unwrap();
        fs::set_permissions(&session, fs::Permissions::from_mode(0o700)).unwrap();
        Fixture { _tmp: tmp, layout, thread: thread.to_owned(), session }
    }

    /// Writes a helper below the session directory.
    pub fn helper(&self, rel: &str, content: &[u8]) -> PathBuf {
        let p = self.session.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        p
    }

    pub fn ws(&self) -> &Path {
        self.layout.workspace()
    }

    /// Lists the entries of the session directory (names).
    pub fn session_entries(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.session)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// Pins a file as a read would.
pub fn pin(path: &Path) -> Pin {
    let f = fs::File::open(path).unwrap();
    let id = Identity::of_fd(&f).unwrap();
    let (digest, _) = sha256_fd(&f).unwrap();
    Pin::new(&id, digest)
}

pub fn target(path: &Path) -> Target {
    Target::new(path, pin(path))
}

/// A target with an arbitrary pin, for paths that cannot be pinned.
pub fn unpinned(path: &str) -> Target {
    Target {
        path: path.into(),
        pin: Pin {
            dev: 0,
            ino: 0,
            size: 0,
            ctime_sec: 0,
            ctime_nsec: 0,
            sha256: [0; 32],
            btime: None,
            generation: None,
        },
    }
}

/// Snapshot of a tree: every path with its bytes (files) or a marker.
pub fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    fn walk(p: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        let mut entries: Vec<_> = fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for e in entries {
            let m = fs::symlink_metadata(&e).unwrap();
            if m.file_type().is_symlink() {
                out.push((e.clone(), fs::read_link(&e).unwrap().into_os_string().into_encoded_bytes()));
            } else if m.is_dir() {
                out.push((e.clone(), b"<dir>".to_vec()));
                walk(&e, out);
            } else if m.is_file() {
                out.push((e.clone(), fs::read(&e).unwrap()));
            } else {
                out.push((e.clone(), b"<other>".to_vec()));
            }
        }
    }
    walk(root, &mut out);
    out
}
