//! Sessions and their admission barriers, over the engine's execution
//! runtime.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use winx_release_engine::executions::{Execution, Runtime, SessionKey};
use winx_release_engine::layout::Layout;

pub(crate) use winx_release_engine::sys::lock;

/// The guardian's state.
pub struct Guardian {
    /// The data directory `D`.
    pub data_dir: PathBuf,
    /// This guardian process's random instance id.
    pub instance: String,
    /// This guardian's pid.
    pub pid: i32,
    /// The executions of `D` and their liveness.
    pub runtime: Arc<Runtime>,
    /// Sessions by the identity of their session directory: the same
    /// session whichever path reaches it.
    sessions: Mutex<HashMap<SessionKey, Arc<Session>>>,
    /// Wakes the retention worker.
    pub retention: crate::kick::Kick,
    /// Frontends that completed `hello`, by pid, with their start time.
    peers: Mutex<HashMap<i32, u64>>,
    /// The backing-root scans every release shares, and their directory
    /// cache (off when `WINX_RELEASE_NO_SCAN_CACHE` is set).
    pub scanner: winx_release_engine::scan::SharedScanner,
}

/// One session owned by the guardian.
pub struct Session {
    /// The identity of its session directory.
    pub key: SessionKey,
    /// Workspace and data directory, as the session was first opened.
    pub layout: Layout,
    /// The thread id.
    pub thread: String,
    /// The session directory.
    pub session_dir: PathBuf,
    /// The admission barrier: held by a release for its whole run, and
    /// briefly by anything that starts a command.
    pub admission: Mutex<()>,
    /// Its foreground queue.
    pub state: Mutex<SessionState>,
}

/// The foreground queue of one session (the runtime holds the executions).
#[derive(Default)]
pub struct SessionState {
    /// Foreground commands waiting for the running one to end.
    pub fg_queue: VecDeque<Arc<Execution>>,
    /// The foreground command running now.
    pub fg_running: Option<Arc<Execution>>,
}

impl SessionState {
    /// Queued actions.
    pub fn pending(&self) -> usize {
        self.fg_queue.len()
    }
}

impl Guardian {
    /// A guardian over `data_dir` and its execution runtime.
    pub fn new(data_dir: &Path, runtime: Arc<Runtime>) -> Guardian {
        Guardian {
            data_dir: data_dir.to_path_buf(),
            instance: winx_release_engine::sys::random_hex(16),
            pid: std::process::id() as i32,
            runtime,
            sessions: Mutex::new(HashMap::new()),
            retention: crate::kick::Kick::default(),
            peers: Mutex::new(HashMap::new()),
            scanner: {
                let s = winx_release_engine::scan::SharedScanner::new();
                s.cache().set_enabled(std::env::var_os("WINX_RELEASE_NO_SCAN_CACHE").is_none());
                s
            },
        }
    }

    /// Every session.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Records a frontend that completed `hello`.
    pub fn note_peer(&self, pid: i32) {
        if let Some(start) = Runtime::start_time_of(pid) {
            lock(&self.peers).insert(pid, start);
        }
    }

    /// The processes whose descriptors never make a target `in_use`: this
    /// guardian and the frontends that completed `hello` and still run (the
    /// same process: same pid and start time).
    pub fn in_use_exempt(&self) -> Vec<i32> {
        let mut peers = lock(&self.peers);
        peers.retain(|pid, start| Runtime::start_time_of(*pid) == Some(*start));
        let mut v: Vec<i32> = peers.keys().copied().collect();
        v.push(self.pid);
        v
    }

    /// The session of `key`, if registered.
    pub fn session_by_key(&self, key: &SessionKey) -> Option<Arc<Session>> {
        lock(&self.sessions).get(key).cloned()
    }

    /// Creates (through the engine's one no-follow path) the session
    /// directory of (`layout`, `thread`) and registers its session, or
    /// returns the one registered for that directory.
    pub fn register(&self, layout: Layout, thread: &str) -> std::io::Result<Arc<Session>> {
        let fd = layout.create_session_dir(thread)?;
        let key = SessionKey::of_dir(&fd)?;
        Ok(lock(&self.sessions)
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Session {
                    key,
                    session_dir: layout.session_dir(thread),
                    layout,
                    thread: thread.to_owned(),
                    admission: Mutex::new(()),
                    state: Mutex::new(SessionState::default()),
                })
            })
            .clone())
    }

    /// The registered session whose directory `layout` and `thread` name
    /// now, without creating anything.
    pub fn session(&self, layout: &Layout, thread: &str) -> Option<Arc<Session>> {
        let key = SessionKey::of_path(&layout.session_dir(thread)).ok()?;
        self.session_by_key(&key)
    }
}
