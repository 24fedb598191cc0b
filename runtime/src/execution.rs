//! One execution: its identity, its state, and what it printed.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::end::{EndSignal, EndSignals};
use super::members::Members;
use super::record::{Leader, NewRecord, Record, RecordState, OUTPUT_FILE};
use super::session::SessionKey;
use winx_release_kernel::sys::lock;

pub(crate) use crate::state::{ExecState, INLINE_OUTPUT_BYTES};

/// One execution of a session's command.
#[derive(Debug)]
pub struct Execution {
    /// The command id (also the value of its `WINX_EXECUTION_ID` marker).
    pub id: String,
    /// Whether it runs in the background.
    pub background: bool,
    /// Its directory `D/executions/<id>`.
    pub dir: PathBuf,
    /// The workspace it runs in.
    pub workspace: PathBuf,
    /// The thread it belongs to.
    pub thread: String,
    /// The identity of its session directory; `None` for a record whose
    /// session is unknown (it then counts for every session).
    pub session: Option<SessionKey>,
    /// When it was submitted (Unix seconds).
    pub started_unix: u64,
    /// Whether this runtime found it in `D/executions` rather than started it.
    pub adopted: bool,
    /// Its cgroup, in cgroup mode.
    pub cgroup: Option<PathBuf>,
    /// Why its record could not be read, for a record of unknown owner.
    pub unreadable: Option<String>,
    pub(crate) leader: Mutex<Option<Leader>>,
    /// Its monitor (`monitor/`), once spawned.
    pub(crate) monitor: Mutex<Option<Leader>>,
    /// Whether it is a shell on a terminal.
    pub(crate) terminal: std::sync::atomic::AtomicBool,
    pub(crate) leader_exited_unix: Mutex<Option<u64>>,
    pub(crate) quiet_probes: Mutex<u32>,
    /// Every process a look has seen as its member (`members.rs`).
    pub(crate) members: Members,
    state: Mutex<ExecState>,
    cv: Condvar,
    ends: EndSignals,
}

impl Execution {
    pub(crate) fn new(record: &Record, dir: PathBuf, adopted: bool, state: ExecState) -> Execution {
        Execution {
            id: record.command_id.clone(),
            background: record.background,
            dir,
            workspace: record.workspace.clone(),
            thread: record.thread_id.clone(),
            session: record.session,
            started_unix: record.started_unix,
            adopted,
            cgroup: record.cgroup.clone(),
            unreadable: None,
            leader: Mutex::new(record.leader),
            monitor: Mutex::new(record.monitor),
            terminal: std::sync::atomic::AtomicBool::new(record.terminal),
            leader_exited_unix: Mutex::new(record.leader_exited_unix),
            quiet_probes: Mutex::new(0),
            members: Members::default(),
            state: Mutex::new(state),
            cv: Condvar::new(),
            ends: EndSignals::default(),
        }
    }

    /// A record under `dir` that could not be read: unresolved, of no known
    /// session, so it counts for every session.
    pub(crate) fn unreadable(id: &str, dir: PathBuf, why: String) -> Execution {
        let mut e = Execution::new(
            &Record::new(NewRecord {
                command_id: id.to_owned(),
                thread_id: String::new(),
                workspace: PathBuf::new(),
                session: None,
                background: true,
                started_unix: 0,
                state: RecordState::Lingering,
            }),
            dir,
            true,
            ExecState::Lingering(None),
        );
        e.unreadable = Some(why);
        e
    }

    /// The current state.
    pub fn state(&self) -> ExecState {
        *lock(&self.state)
    }

    pub(crate) fn set(&self, s: ExecState) {
        *lock(&self.state) = s;
        self.cv.notify_all();
        self.ends.notify();
    }

    /// A descriptor that becomes readable whenever this execution's state
    /// changes, and at once when it is already final: an async host
    /// registers it with its reactor instead of blocking a thread in
    /// [`Execution::wait_until`] (see [`EndSignal`]).
    ///
    /// # Errors
    /// `eventfd(2)` failed (the descriptor table is full).
    pub fn end_signal(&self) -> std::io::Result<EndSignal> {
        let st = lock(&self.state);
        // Under the state lock: a change after this point pokes the new
        // signal, one before it is seen in `st`.
        self.ends.add(st.is_final())
    }

    /// Its leader process, once spawned.
    pub(crate) fn leader(&self) -> Option<Leader> {
        *lock(&self.leader)
    }

    /// Its monitor, once spawned.
    pub(crate) fn monitor(&self) -> Option<Leader> {
        *lock(&self.monitor)
    }

    /// The tick from which a look at it needs every process in its table:
    /// the start of its monitor or leader, whichever is older (each
    /// process it started began after both), 0 (the whole table) when it
    /// has no leader, a start time that could not be read, or a leader
    /// without a session of its own (no `setsid` was found to start it:
    /// its group can then be joined by any process of the session it
    /// shares, however old, `probe.rs`).
    pub(crate) fn processes_since(&self) -> u64 {
        let Some(leader) = self.leader() else { return 0 };
        if !leader.own_session {
            return 0;
        }
        let mut since = u64::MAX;
        for l in std::iter::once(leader).chain(self.monitor()) {
            if l.start_time == Leader::UNKNOWN_START {
                return 0;
            }
            since = since.min(l.start_time);
        }
        since
    }

    /// Whether its leader has exited (the shell is done; what it left
    /// behind may still run).
    pub fn leader_exited(&self) -> bool {
        lock(&self.leader_exited_unix).is_some()
    }

    /// Whether it belongs to the session `key` (a record of unknown session
    /// belongs to every session).
    pub(crate) fn is_of(&self, key: &SessionKey) -> bool {
        self.session.is_none_or(|s| s.same_directory(key))
    }

    /// Waits up to `timeout` until `done` holds for the state; returns the
    /// state then.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(ExecState) -> bool) -> ExecState {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            if done(*st) {
                return *st;
            }
            let now = Instant::now();
            if now >= deadline {
                return *st;
            }
            st = self.cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The last [`INLINE_OUTPUT_BYTES`] of its output (lossy UTF-8), and
    /// whether earlier output was cut.
    pub fn output_tail(&self) -> (String, bool) {
        read_tail(&self.dir.join(OUTPUT_FILE), INLINE_OUTPUT_BYTES)
    }

    /// Its record as it stands, in state `state`.
    pub(crate) fn record(&self, state: RecordState) -> Record {
        let (exit_code, failed_to_start) = match self.state() {
            ExecState::Resolved(c) | ExecState::Lingering(c) => (c, false),
            ExecState::FailedToStart => (Some(127), true),
            _ => (None, false),
        };
        Record {
            command_id: self.id.clone(),
            thread_id: self.thread.clone(),
            workspace: self.workspace.clone(),
            session: self.session,
            background: self.background,
            started_unix: self.started_unix,
            state,
            leader: self.leader(),
            cgroup: self.cgroup.clone(),
            monitor: self.monitor(),
            leader_exited_unix: *lock(&self.leader_exited_unix),
            exit_code,
            failed_to_start,
            ended_unix: None,
            shell: None,
            prompts_before: None,
            terminal: self.terminal.load(std::sync::atomic::Ordering::SeqCst),
        }
    }
}

/// The last `limit` bytes of the file at `path` (lossy UTF-8), and whether
/// earlier bytes were cut.
pub fn read_tail(path: &Path, limit: u64) -> (String, bool) {
    let Ok(mut f) = winx_release_kernel::sys::open_regular(path) else { return (String::new(), false) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(limit);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return (String::new(), false);
    }
    let mut buf = Vec::new();
    let _ = f.take(limit).read_to_end(&mut buf);
    (String::from_utf8_lossy(&buf).into_owned(), start > 0)
}

/// [`Execution::processes_since`] of the oldest of `execs` (0 for none).
pub(crate) fn oldest_since<'a>(execs: impl IntoIterator<Item = &'a Execution>) -> u64 {
    execs.into_iter().map(Execution::processes_since).min().unwrap_or(0)
}
