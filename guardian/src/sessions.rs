//! Sessions, their admission barriers and execution tables.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use winx_release_engine::layout::Layout;
use winx_release_engine::owner::RuntimeOwner;

use crate::exec::{ExecState, Execution};

pub(crate) use winx_release_engine::sync::lock;

/// The guardian's state.
pub struct Guardian {
    /// The data directory `D`.
    pub data_dir: PathBuf,
    /// This guardian process's random instance id.
    pub instance: String,
    /// This guardian's pid.
    pub pid: i32,
    /// Set by `SIGCHLD`: a child (a leader or a reparented orphan) changed
    /// state.
    pub sigchld: Arc<AtomicBool>,
    sessions: Mutex<HashMap<(PathBuf, String), Arc<Session>>>,
    executions: Mutex<HashMap<String, Arc<Execution>>>,
    /// Wakes the retention worker.
    pub retention: crate::retention::Kick,
    /// Pids of leaders whose `Child` handle a monitor thread waits on; the
    /// orphan reaper never reaps these. Held across every spawn.
    children: Mutex<HashSet<i32>>,
    /// Executions of `D/executions` known to be resolved.
    resolved: Mutex<HashSet<String>>,
    /// Peers that connected to the socket (the frontends), by pid, with
    /// their start time.
    peers: Mutex<HashMap<i32, u64>>,
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
    /// Executions that are not resolved: their leader runs, or it exited and
    /// something it started may still run.
    pub fn unresolved(&self) -> Vec<Arc<Execution>> {
        self.all.iter().filter(|e| matches!(e.state(), ExecState::Running | ExecState::Lingering(_))).cloned().collect()
    }

    /// Queued actions.
    pub fn pending(&self) -> usize {
        self.fg_queue.len()
    }
}

/// The runtime owner a release consults, read under the admission barrier.
pub struct SessionOwner {
    /// Executions (or unattributed processes) found alive.
    pub live: usize,
    /// What was found alive, for the denial's message.
    pub detail: Option<String>,
    /// Queued actions.
    pub pending: usize,
    /// The guardian and its frontends.
    pub exempt: Vec<i32>,
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

    fn running_detail(&self, _thread_id: &str) -> Option<String> {
        self.detail.clone()
    }

    fn in_use_exempt(&self) -> Vec<i32> {
        self.exempt.clone()
    }
}

impl Guardian {
    /// A guardian over `data_dir` with a fresh instance id.
    pub fn new(data_dir: &Path) -> Guardian {
        Guardian {
            data_dir: data_dir.to_path_buf(),
            instance: winx_release_engine::random::random_hex(16),
            pid: std::process::id() as i32,
            sigchld: Arc::new(AtomicBool::new(false)),
            sessions: Mutex::new(HashMap::new()),
            executions: Mutex::new(HashMap::new()),
            retention: crate::retention::Kick::default(),
            children: Mutex::new(HashSet::new()),
            resolved: Mutex::new(HashSet::new()),
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// Every session.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Every execution this guardian knows.
    pub fn executions(&self) -> Vec<Arc<Execution>> {
        lock(&self.executions).values().cloned().collect()
    }

    /// Forgets an execution that was never started.
    pub fn forget_execution(&self, id: &str) {
        lock(&self.executions).remove(id);
    }

    /// Records that `id` is resolved in `D/executions`.
    pub fn note_resolved(&self, id: &str) {
        lock(&self.resolved).insert(id.to_owned());
    }

    /// Whether `id` is known (running here, or known resolved).
    pub fn knows(&self, id: &str) -> bool {
        lock(&self.executions).contains_key(id) || lock(&self.resolved).contains(id)
    }

    /// Spawns `cmd` while holding the child table, so that the orphan
    /// reaper never reaps a leader (or a child `std` itself waits for when
    /// its exec fails) in the window before it is recorded.
    pub fn spawn_tracked(&self, cmd: &mut Command) -> std::io::Result<Child> {
        let mut children = lock(&self.children);
        let child = cmd.spawn()?;
        children.insert(child.id() as i32);
        Ok(child)
    }

    /// Forgets a leader once its `Child` has been waited for.
    pub fn untrack_child(&self, pid: i32) {
        lock(&self.children).remove(&pid);
    }

    /// Runs `f` with the table of leaders held.
    pub fn with_children<R>(&self, f: impl FnOnce(&HashSet<i32>) -> R) -> R {
        f(&lock(&self.children))
    }

    /// Records a peer that connected to the socket.
    pub fn note_peer(&self, pid: i32) {
        if let Some(start) = crate::liveness::start_time_of(pid) {
            lock(&self.peers).insert(pid, start);
        }
    }

    /// The processes whose descriptors never make a target `in_use`: this
    /// guardian and the peers (frontends) that connected and still run.
    pub fn in_use_exempt(&self) -> Vec<i32> {
        let mut peers = lock(&self.peers);
        peers.retain(|pid, start| crate::liveness::start_time_of(*pid) == Some(*start));
        let mut v: Vec<i32> = peers.keys().copied().collect();
        v.push(self.pid);
        v
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

    /// Records an execution by id unless one is recorded already; returns
    /// whether it was added.
    pub fn add_execution_if_absent(&self, e: Arc<Execution>) -> bool {
        let mut m = lock(&self.executions);
        if m.contains_key(&e.id) {
            return false;
        }
        m.insert(e.id.clone(), e);
        true
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
        let gone = match ex.get(id).map(|e| e.state()) {
            Some(s) if s.is_final() => {
                ex.remove(id);
                true
            }
            Some(_) => false,
            None => true,
        };
        if gone {
            lock(&self.resolved).remove(id);
        }
        gone
    }

    /// Drops the executions retention removed from every session's table.
    pub fn drop_from_sessions(&self, ids: &std::collections::HashSet<String>) {
        if ids.is_empty() {
            return;
        }
        lock(&self.resolved).retain(|id| !ids.contains(id));
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for s in sessions {
            lock(&s.state).all.retain(|e| !ids.contains(&e.id));
        }
    }
}
