//! Sessions and their admission barriers, over the engine's execution
//! runtime.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use winx_release_engine::executions::{Execution, Runtime, SessionKey};
use winx_release_engine::layout::Layout;

pub(crate) use winx_release_engine::sys::lock;
use winx_release_engine::sys::{pidfd_of, Remembered};

/// Frontends remembered by pidfd at most (each holds a descriptor, within
/// the 1,024 spare slots `sys::reserve_descriptor_table` grows the table
/// by); more are remembered by pid and start time.
const MAX_PEERS: usize = 64;

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
    /// Frontends that completed `hello`, each by a pidfd opened then.
    peers: Remembered,
    /// The same, by pid and start time, where no pidfd could be opened.
    peer_starts: Mutex<HashMap<i32, u64>>,
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
            peers: Remembered::new(),
            peer_starts: Mutex::new(HashMap::new()),
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

    /// Records a frontend that completed `hello`: by a pidfd of its pid
    /// (nothing to do when one held says that process still runs), else by
    /// its pid and start time.
    pub fn note_peer(&self, pid: i32) {
        if self.peers.holds(pid) {
            return;
        }
        if let Some(fd) = pidfd_of(pid) {
            if self.peers.insert(pid, fd, MAX_PEERS) {
                return;
            }
        }
        if let Some(start) = Runtime::start_time_of(pid) {
            lock(&self.peer_starts).insert(pid, start);
        }
    }

    /// The processes whose descriptors never make a target `in_use`: this
    /// guardian and the frontends that completed `hello` and still run (the
    /// same process: its pidfd has not polled readable, one `poll` for all;
    /// or, without a pidfd, the same pid and start time).
    pub fn in_use_exempt(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.peers.alive().into_iter().collect();
        let mut starts = lock(&self.peer_starts);
        starts.retain(|pid, start| Runtime::start_time_of(*pid) == Some(*start));
        v.extend(starts.keys().copied());
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

#[cfg(test)]
mod tests {
    use winx_release_engine::executions::{LivenessChoice, RuntimeOptions};

    use super::*;

    /// A frontend that said `hello` is exempt while that same process runs,
    /// and no longer once it has exited (a zombie included).
    #[test]
    fn a_peer_is_exempt_while_it_runs() {
        let data = tempfile::tempdir().unwrap();
        let opts = RuntimeOptions {
            liveness: LivenessChoice::Proc,
            move_self: false,
            subreaper: false,
            adopt: false,
            ..Default::default()
        };
        let g = Guardian::new(data.path(), Runtime::start(data.path(), &opts));
        let mut peer = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = peer.id() as i32;
        g.note_peer(pid);
        g.note_peer(pid);
        let exempt = g.in_use_exempt();
        assert!(exempt.contains(&pid) && exempt.contains(&g.pid), "{exempt:?}");
        assert_eq!(exempt.iter().filter(|p| **p == pid).count(), 1, "{exempt:?}");
        peer.kill().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!g.in_use_exempt().contains(&pid), "a frontend that exited is still exempt");
        peer.wait().unwrap();
        assert!(!g.in_use_exempt().contains(&pid));
    }
}
