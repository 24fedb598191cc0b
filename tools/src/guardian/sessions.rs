//! Sessions, their admission barriers and execution tables.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use winx_release_engine::layout::Layout;
use winx_release_engine::owner::RuntimeOwner;

use super::exec::{ExecState, Execution};

pub(crate) use winx_release_engine::sync::lock;

/// The guardian's state.
pub struct Guardian {
    /// The data directory `D`.
    pub data_dir: PathBuf,
    /// This guardian process's random instance id.
    pub instance: String,
    sessions: Mutex<HashMap<(PathBuf, String), Arc<Session>>>,
    executions: Mutex<HashMap<String, Arc<Execution>>>,
    /// Wakes the retention worker.
    pub retention: super::retention::Kick,
}

/// One session owned by the guardian.
pub struct Session {
    /// Workspace and data directory.
    pub layout: Layout,
    /// The thread id.
    pub thread: String,
    /// The session directory.
    pub session_dir: PathBuf,
    /// The admission barrier: held by a release for its whole run, and
    /// briefly by anything that starts a command.
    pub admission: Mutex<()>,
    /// The execution table of this session.
    pub state: Mutex<SessionState>,
}

/// Executions of one session.
#[derive(Default)]
pub struct SessionState {
    /// Foreground commands waiting for the running one to end.
    pub fg_queue: VecDeque<Arc<Execution>>,
    /// The foreground command running now.
    pub fg_running: Option<Arc<Execution>>,
    /// Every execution of the session.
    pub all: Vec<Arc<Execution>>,
}

impl SessionState {
    /// Executions that are running or have exited without being resolved.
    pub fn live(&self) -> usize {
        self.all.iter().filter(|e| matches!(e.state(), ExecState::Running | ExecState::Exited)).count()
    }

    /// Queued actions.
    pub fn pending(&self) -> usize {
        self.fg_queue.len()
    }
}

/// The runtime owner a release consults, read under the admission barrier.
pub struct SessionOwner {
    /// Executions running or exited but unresolved.
    pub live: usize,
    /// Queued actions.
    pub pending: usize,
}

impl RuntimeOwner for SessionOwner {
    fn supports_temporary_release(&self) -> bool {
        true
    }

    fn running_executions(&self, _thread_id: &str) -> usize {
        self.live
    }

    fn pending_actions(&self, _thread_id: &str) -> usize {
        self.pending
    }
}

impl Guardian {
    /// A guardian over `data_dir` with a fresh instance id.
    pub fn new(data_dir: &Path) -> Guardian {
        Guardian {
            data_dir: data_dir.to_path_buf(),
            instance: winx_release_engine::random::random_hex(16),
            sessions: Mutex::new(HashMap::new()),
            executions: Mutex::new(HashMap::new()),
            retention: super::retention::Kick::default(),
        }
    }

    /// The registered session of (`workspace`, `thread`), if any.
    pub fn session(&self, workspace: &Path, thread: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(&(workspace.to_path_buf(), thread.to_owned())).cloned()
    }

    /// Registers (or returns) the session of (`workspace`, `thread`).
    pub fn register(&self, layout: Layout, thread: &str) -> Arc<Session> {
        let key = (layout.workspace().to_path_buf(), thread.to_owned());
        lock(&self.sessions)
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Session {
                    session_dir: layout.session_dir(thread),
                    layout,
                    thread: thread.to_owned(),
                    admission: Mutex::new(()),
                    state: Mutex::new(SessionState::default()),
                })
            })
            .clone()
    }

    /// Records an execution by id.
    pub fn add_execution(&self, e: Arc<Execution>) {
        lock(&self.executions).insert(e.id.clone(), e);
    }

    /// Looks an execution up by id.
    pub fn execution(&self, id: &str) -> Option<Arc<Execution>> {
        lock(&self.executions).get(id).cloned()
    }

    /// Whether retention may remove execution `id`'s payload: false while
    /// this guardian holds it as anything but final; otherwise true, and the
    /// execution is forgotten (a status check then answers `not_found`).
    /// Call [`Guardian::drop_from_sessions`] after a pass.
    pub fn claim_for_retention(&self, id: &str) -> bool {
        let mut ex = lock(&self.executions);
        match ex.get(id).map(|e| e.state()) {
            Some(ExecState::Resolved(_) | ExecState::FailedToStart) => {
                ex.remove(id);
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Drops the executions retention removed from every session's table.
    pub fn drop_from_sessions(&self, ids: &std::collections::HashSet<String>) {
        if ids.is_empty() {
            return;
        }
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for s in sessions {
            lock(&s.state).all.retain(|e| !ids.contains(&e.id));
        }
    }
}
