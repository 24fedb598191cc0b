//! Shared fixtures for engine tests.
#![allow(dead_code)]

pub mod ns;
pub mod trees;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use winx_release_engine::admission::Admission;
use winx_release_engine::layout::Layout;
use winx_release_engine::owner::{IdleOwner, RuntimeOwner};
use winx_release_engine::rehash::sha256_fd;
use winx_release_engine::release::{release, ReleaseOptions, ReleaseReport, ReleaseRequest, Target};
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

/// Starts `cmd` holding [`FORKS`] (until its `exec`: `spawn` returns once
/// the child has exec'd).
pub fn spawn(cmd: &mut Command) -> Child {
    let _forking = no_fork_now();
    cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Runs `cmd` to its end, started holding [`FORKS`]; its exit status.
pub fn status(cmd: &mut Command) -> std::io::Result<ExitStatus> {
    let child = {
        let _forking = no_fork_now();
        cmd.spawn()
    };
    child?.wait()
}

/// The environment variable naming the one test a process of its own runs
/// ([`isolated`]).
const ALONE: &str = "WINX_ENGINE_TEST_ALONE";

/// Runs the calling test in a process of its own, for a test that changes
/// a process-wide setting (keeping journals) or measures the process: call
/// it first as `if isolated(module_path!(), "test_name") { return; }`.
/// In that process it returns `false` (the test goes on); in this one it
/// starts this binary again running only that test, and returns `true`
/// once the test passed there (it panics with the child's output when the
/// test failed or was not found).
pub fn isolated(module: &str, test: &str) -> bool {
    // `suite::journal_reuse` names the test `journal_reuse::<test>`.
    let name = match module.split_once("::") {
        Some((_, m)) => format!("{m}::{test}"),
        None => test.to_owned(),
    };
    if std::env::var_os(ALONE).is_some_and(|v| v == *name) {
        return false;
    }
    let child = spawn(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(ALONE, &name)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} in a process of its own: {}\n{stdout}{stderr}",
        out.status
    );
    true
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

    /// Releases `targets` in this session as a guardian would with no
    /// runtime and no fault hook: a barrier of its own, the idle owner,
    /// default options; no process starts meanwhile ([`no_fork_now`]).
    pub fn release(&self, targets: &[Target]) -> ReleaseReport {
        self.release_with(targets, &IdleOwner, &ReleaseOptions::default())
    }

    /// [`Fixture::release`] with an owner and options (a fault hook). A
    /// hook that waits for the test's thread must not wait for it to start
    /// a process (the release holds [`FORKS`]).
    pub fn release_with(
        &self,
        targets: &[Target],
        owner: &dyn RuntimeOwner,
        opts: &ReleaseOptions<'_>,
    ) -> ReleaseReport {
        let req = ReleaseRequest { layout: &self.layout, thread_id: &self.thread, targets };
        let _no_fork = no_fork_now();
        release(&req, &Admission::new().enter(), owner, opts)
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
