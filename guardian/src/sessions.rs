//! Sessions and their admission barriers, over the engine's execution
//! runtime.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use winx_release_engine::admission::Admission;
use winx_release_engine::layout::Layout;
use winx_release_protocol::messages::ErrorCode;
use winx_release_runtime::{Execution, Runtime, SessionKey};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::os::fd::OwnedFd;

use crate::sync::lock;

/// The identity (device, inode) of the executable `/proc/<who>/exe` runs.
fn exe_of(who: &str) -> Option<(u64, u64)> {
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        format!("/proc/{who}/exe").as_str(),
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::INO,
    )
    .ok()?;
    Some((rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
}

/// A connection that said `hello`: its peer, while the connection is open.
struct Peer {
    /// The peer's pid (`SO_PEERCRED`).
    pid: i32,
    /// A pidfd of the peer: from the socket itself (`SO_PEERPIDFD`), else
    /// opened by pid at the connection's start.
    pidfd: Option<OwnedFd>,
    /// Its start time, where no pidfd could be had.
    start: Option<u64>,
}

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
    sessions: Mutex<HashMap<SessionKey, Arc<OwnedSession>>>,
    /// Wakes the retention worker.
    pub retention: crate::kick::Kick,
    /// Open connections that said `hello`, by connection number.
    peers: Mutex<HashMap<u64, Peer>>,
    /// The identity of this guardian's executable (`/proc/self/exe`): a
    /// peer is a frontend only while it runs the same one.
    exe: Option<(u64, u64)>,
    /// The backing-root scans every release shares, and their directory
    /// cache (off when `WINX_RELEASE_NO_SCAN_CACHE` is set).
    pub scanner: winx_release_engine::scan::SharedScanner,
    /// The workspaces whose backing roots were read into the cache once
    /// (`prewarm.rs`).
    pub prewarmed: Mutex<std::collections::HashSet<PathBuf>>,
    /// Set to stop the guardian as SIGTERM does (the `stop` op).
    pub shutdown: Arc<AtomicBool>,
    /// The shells this guardian owns (one per thread, one per background
    /// command).
    pub shells: crate::shell::Shells,
}

/// One session owned by the guardian.
pub struct OwnedSession {
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
    pub admission: Admission,
    /// Its foreground queue.
    pub state: Mutex<SessionState>,
    /// The shell mode and `code_writer_config` the frontend recorded at
    /// `session_open` (`None`: not recorded), which an operator's release
    /// runs under.
    pub policy: Mutex<Option<RecordedPolicy>>,
}

impl OwnedSession {
    /// What a shell of this session takes from it.
    pub(crate) fn for_shell(&self) -> crate::shell::ShellSession<'_> {
        crate::shell::ShellSession {
            key: self.key,
            thread: &self.thread,
            workspace: self.layout.workspace(),
            session_dir: &self.session_dir,
        }
    }
}

/// A thread's shell mode as its frontend's `Initialize` had it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedPolicy {
    /// `wcgw`, `architect` or `code_writer`.
    pub mode_name: String,
    /// The `code_writer_config`, if any.
    pub code_writer_config: Option<serde_json::Value>,
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
            instance: winx_release_kernel::sys::random_hex(16),
            pid: std::process::id() as i32,
            runtime,
            sessions: Mutex::new(HashMap::new()),
            retention: crate::kick::Kick::default(),
            peers: Mutex::new(HashMap::new()),
            exe: exe_of("self"),
            shells: crate::shell::Shells::default(),
            scanner: {
                let s = winx_release_engine::scan::SharedScanner::new();
                s.cache().set_enabled(std::env::var_os("WINX_RELEASE_NO_SCAN_CACHE").is_none());
                s
            },
            prewarmed: Mutex::new(Default::default()),
            shutdown: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The guardian with `flag` as its stop flag (the one its signal
    /// handlers set).
    pub fn with_shutdown(mut self, flag: Arc<AtomicBool>) -> Guardian {
        self.shutdown = flag;
        self
    }

    /// Every session.
    pub fn sessions(&self) -> Vec<Arc<OwnedSession>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Records that connection `conn`, whose peer is `pid` (with `pidfd`,
    /// see [`winx_release_kernel::sys::peer_pidfd`]), said `hello`: while
    /// that connection is open and the peer runs this guardian's own
    /// executable, its descriptors never make a target `in_use`.
    pub fn peer_said_hello(&self, conn: u64, pid: i32, pidfd: Option<OwnedFd>) {
        let start = if pidfd.is_none() { Runtime::start_time_of(pid) } else { None };
        lock(&self.peers).insert(conn, Peer { pid, pidfd, start });
    }

    /// Forgets connection `conn` (it closed): its peer is an ordinary
    /// process from now on.
    pub fn peer_gone(&self, conn: u64) {
        lock(&self.peers).remove(&conn);
    }

    /// The processes whose descriptors never make a target `in_use`: this
    /// guardian, and the peers of open connections that said `hello`, still
    /// run (their pidfd has not polled readable; without one, the same pid
    /// and start time) and run this guardian's own executable (a peer that
    /// `exec`'d another program is an ordinary holder).
    pub fn in_use_exempt(&self) -> Vec<i32> {
        let mut v = Vec::new();
        for p in lock(&self.peers).values() {
            // A frontend keeps several connections (`hello` each): its
            // process is looked at once, by the first of them that shows it
            // alive and running this executable.
            if v.contains(&p.pid) {
                continue;
            }
            let alive = match &p.pidfd {
                Some(fd) => {
                    let mut polled = [PollFd::new(fd, PollFlags::IN)];
                    poll(&mut polled, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).is_ok()
                        && polled[0].revents().is_empty()
                }
                None => p.start.is_some() && Runtime::start_time_of(p.pid) == p.start,
            };
            if alive && self.exe.is_some() && exe_of(&p.pid.to_string()) == self.exe {
                v.push(p.pid);
            }
        }
        if !v.contains(&self.pid) {
            v.push(self.pid);
        }
        v
    }

    /// The session of `key`, if registered.
    pub fn session_by_key(&self, key: &SessionKey) -> Option<Arc<OwnedSession>> {
        lock(&self.sessions).get(key).cloned()
    }

    /// Creates (through the engine's one no-follow path) the session
    /// directory of (`layout`, `thread`) and registers its session, or
    /// returns the one registered for that directory.
    pub fn register(&self, layout: Layout, thread: &str) -> std::io::Result<Arc<OwnedSession>> {
        let fd = layout.create_session_dir(thread)?;
        let key = SessionKey::of_dir(&fd)?;
        Ok(lock(&self.sessions)
            .entry(key)
            .or_insert_with(|| {
                Arc::new(OwnedSession {
                    key,
                    session_dir: layout.session_dir(thread),
                    layout,
                    thread: thread.to_owned(),
                    admission: Admission::new(),
                    state: Mutex::new(SessionState::default()),
                    policy: Mutex::new(None),
                })
            })
            .clone())
    }

    /// The registered session whose directory `layout` and `thread` name
    /// now, without creating anything.
    pub fn session(&self, layout: &Layout, thread: &str) -> Option<Arc<OwnedSession>> {
        let key = SessionKey::of_path(&layout.session_dir(thread)).ok()?;
        self.session_by_key(&key)
    }
}

/// An op's failure: the code and message of its error reply.
pub(crate) type OpError = (ErrorCode, String);

/// The layout of `workspace` over the guardian's data directory, for an op
/// of `thread` (whose id must be 1–256 bytes).
pub(crate) fn layout_of(g: &Guardian, workspace: &str, thread: &str) -> Result<Layout, OpError> {
    if thread.is_empty() || !winx_release_protocol::messages::thread_id_shape_ok(thread) {
        return Err((ErrorCode::InvalidInput, "thread_id must be 1-256 bytes without control characters".into()));
    }
    Layout::new(workspace, &g.data_dir).map_err(|d| (ErrorCode::Reason(d.reason), d.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::OnceLock;

    use winx_release_runtime::{monitor, LivenessChoice, RuntimeOptions};

    use super::*;

    /// A guardian over a new data directory, its runtime in `/proc` mode
    /// and touching nothing outside it (for the crate's unit tests).
    pub(crate) fn guardian() -> (tempfile::TempDir, Guardian) {
        let data = tempfile::tempdir().unwrap();
        let opts = RuntimeOptions {
            liveness: LivenessChoice::Proc,
            move_self: false,
            subreaper: false,
            adopt: false,
            monitor: monitor_program(),
            ..Default::default()
        };
        let g = Guardian::new(data.path(), Runtime::start(data.path(), &opts));
        (data, g)
    }

    /// The monitor program the tests' runtimes start commands under: the
    /// runtime's own search ([`monitor::program`]: `winx-release-monitor`
    /// beside the test binary, where `cargo test --workspace` builds it),
    /// else the runtime's `winx-release-monitor` as `cargo build` makes it
    /// (`cargo test -p winx-release-guardian` alone builds no binary of
    /// another package). Cargo holds the target directory's lock while it
    /// builds, not while tests run, so the build does not wait for the
    /// `cargo test` that started this binary. `None` when both fail: then
    /// no command starts and a test that needs one fails saying so.
    fn monitor_program() -> Option<PathBuf> {
        static PROGRAM: OnceLock<Option<PathBuf>> = OnceLock::new();
        PROGRAM.get_or_init(|| monitor::program().or_else(build_monitor)).clone()
    }

    /// Builds the runtime's monitor binary with the cargo that built this
    /// test and returns its path (from cargo's JSON messages).
    fn build_monitor() -> Option<PathBuf> {
        let out = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--message-format=json", "-p", "winx-release-runtime", "--bin", monitor::BINARY])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == monitor::BINARY)
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
    }

    /// A peer that said `hello` and runs another program than the
    /// guardian's is never exempt, its connection open or not (a process
    /// that said hello and then exec'd `sleep` is an ordinary holder).
    #[test]
    fn a_peer_running_another_program_is_not_exempt() {
        let (_data, g) = guardian();
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let o = other.id() as i32;
        g.peer_said_hello(3, o, winx_release_kernel::sys::pidfd_of(o));
        g.peer_said_hello(4, o, None);
        assert!(!g.in_use_exempt().contains(&o), "a peer running another program is exempt");
        other.kill().unwrap();
        other.wait().unwrap();
    }

    /// A peer running the guardian's executable (here: this process, the
    /// test binary) is exempt while its connection is open, and forgotten
    /// when it closes.
    #[test]
    fn a_peer_is_exempt_only_while_its_connection_is_open() {
        let (_data, g) = guardian();
        let me = std::process::id() as i32;
        let exempt_as_peer =
            |g: &Guardian| lock(&g.peers).values().any(|p| p.pid == me) && g.in_use_exempt().contains(&me);
        g.peer_said_hello(7, me, winx_release_kernel::sys::pidfd_of(me));
        g.peer_said_hello(8, me, None);
        assert!(exempt_as_peer(&g));
        assert_eq!(g.in_use_exempt().iter().filter(|p| **p == me).count(), 1, "one entry per process");
        g.peer_gone(7);
        assert!(exempt_as_peer(&g), "the other connection is still open");
        g.peer_gone(8);
        assert!(lock(&g.peers).is_empty());
    }

    /// A thread's session directory removed, then another thread's made:
    /// ext4 gives the new directory the freed inode number, and the new
    /// thread must get a session of its own (its own shell, barrier and
    /// policy), not the removed directory's. Where the filesystem did not
    /// reuse the number, the sessions differ anyway.
    #[test]
    fn a_directory_made_with_a_freed_inode_number_is_another_session() {
        let (data, g) = guardian();
        let ws = tempfile::tempdir().unwrap();
        let layout = Layout::new(ws.path().canonicalize().unwrap(), data.path()).unwrap();
        let first = g.register(layout.clone(), "t1").unwrap();
        std::fs::remove_dir(layout.session_dir("t1")).unwrap();
        // A moment later, so that a birth time with a coarse clock differs.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = g.register(layout.clone(), "t2").unwrap();
        if second.key.ino != first.key.ino {
            eprintln!("note: the filesystem of {} did not reuse the inode number", ws.path().display());
        }
        assert_eq!(second.thread, "t2");
        assert!(!Arc::ptr_eq(&first, &second), "thread t2 got thread t1's session");
        assert_ne!(first.key, second.key);
    }
}
