//! The execution runtime: the table of a data directory's executions, their
//! starts, their ends, and the liveness answer a release asks for.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::cgroup::{self, Subtree};
use super::execution::{ExecState, Execution, INLINE_OUTPUT_BYTES};
use super::liveness::LivenessMode;
use super::monitor::Monitored;
use super::options::{LivenessChoice, RuntimeOptions, Spawn};
use super::probe::{self, Probe, QUIET_PROBES};
use super::record::{self, Leader, NewRecord, Record, RecordState, COMMAND_FILE, OUTPUT_FILE};
use super::session::SessionKey;
use super::shell::handle::Core;
use super::spawn::{spawn_leader, CommandSpec};

use winx_release_engine::scan::DirLook;
use winx_release_kernel::sys::create_private_dir_all;
use winx_release_kernel::sys::lock;

mod adopt;
mod answer;
pub(crate) mod reattach;
mod shell;
mod shell_busy;
mod shell_command;
mod shell_members;
mod start;
mod union;

/// How often the watcher looks at lingering executions and orphans.
const WATCH_PERIOD: Duration = Duration::from_millis(150);

/// Called with an execution whose leader exited (or never started), and
/// with one that resolved.
pub type Hook = Arc<dyn Fn(&Arc<Execution>) + Send + Sync>;

#[derive(Default)]
struct Hooks {
    leader_exited: Option<Hook>,
    resolved: Option<Hook>,
}

enum Mode {
    Cgroup(Subtree),
    Proc,
}

/// The executions of one data directory `D`, and who of them still runs.
///
/// One runtime per process and data directory. It spawns commands, records
/// each durably in `D/executions/<id>/`, learns of their ends (the leader's
/// exit; then an empty cgroup, or `/proc` showing nothing left), adopts the
/// unresolved executions an earlier runtime left, and answers
/// [`Runtime::liveness`] under the caller's admission barrier. It never
/// signals, kills or freezes anything.
pub struct Runtime {
    data_dir: PathBuf,
    mode: Mode,
    reason: String,
    pid: i32,
    adopt: bool,
    /// Whether this process is a child subreaper: only then are its
    /// children that are not leaders orphans of its executions.
    subreaper: bool,
    env_remove: Vec<OsString>,
    /// The monitor program, if one was found.
    monitor: Option<PathBuf>,
    table: Mutex<HashMap<String, Arc<Execution>>>,
    resolved: Mutex<HashSet<String>>,
    /// The last look at `D/executions` that left nothing to look at again
    /// (`adopt.rs`).
    adopt_look: Mutex<Option<DirLook>>,
    specs: Mutex<HashMap<String, Spawn>>,
    /// Pids of leaders a monitor thread waits on; never reaped elsewhere.
    children: Mutex<HashSet<i32>>,
    sigchld: Arc<AtomicBool>,
    hooks: Mutex<Hooks>,
    /// The live shells this runtime started, by execution id
    /// (`runtime/shell.rs`).
    shells: Mutex<HashMap<String, Weak<Core>>>,
}

/// Waits until `leader` has exited (by a pidfd; at once when it is gone
/// or is another process now).
///
/// # References
/// - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
pub(crate) fn wait_gone(leader: Option<Leader>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let Some(l) = leader else { return };
    let Some(fd) = winx_release_kernel::sys::pidfd_of(l.pid) else { return };
    // Opened before the check: the pidfd names the process checked.
    if probe::start_time_of(l.pid).is_none_or(|st| !l.may_be(st)) {
        return;
    }
    loop {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, None) {
            Err(rustix::io::Errno::INTR) => {}
            _ => return,
        }
    }
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Runtime {
    /// Starts the runtime of `data_dir`: picks the liveness mode (and says
    /// why in [`Runtime::liveness_reason`]), becomes a subreaper when asked,
    /// adopts what an earlier runtime left unresolved, and starts the
    /// watcher thread.
    pub fn start(data_dir: &Path, opts: &RuntimeOptions) -> Arc<Runtime> {
        let (mode, reason) = match opts.liveness {
            LivenessChoice::Proc => (Mode::Proc, "cgroup mode switched off (proc liveness asked for)".to_owned()),
            LivenessChoice::Auto => match Subtree::find(data_dir, opts.move_self) {
                Ok(s) => {
                    let why = format!("delegated cgroup v2 subtree {}", s.root().display());
                    (Mode::Cgroup(s), why)
                }
                Err(why) => {
                    (Mode::Proc, format!("no delegated cgroup v2 subtree ({why}); /proc signals, failing closed"))
                }
            },
        };
        // Only a subreaper that the kernel made one: ancestry decides for
        // its executions (`runtime/union.rs`).
        let subreaper = opts.subreaper
            && match rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(std::process::id() as i32)) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "PR_SET_CHILD_SUBREAPER failed; orphans go to init and are found by marker only");
                    false
                }
            };
        let rt = Arc::new(Runtime {
            data_dir: data_dir.to_path_buf(),
            mode,
            reason,
            pid: std::process::id() as i32,
            adopt: opts.adopt,
            subreaper,
            env_remove: opts.env_remove.clone(),
            monitor: opts.monitor.clone().or_else(crate::monitor::program),
            table: Mutex::new(HashMap::new()),
            resolved: Mutex::new(HashSet::new()),
            adopt_look: Mutex::new(None),
            specs: Mutex::new(HashMap::new()),
            children: Mutex::new(HashSet::new()),
            sigchld: Arc::new(AtomicBool::new(false)),
            hooks: Mutex::new(Hooks::default()),
            shells: Mutex::new(HashMap::new()),
        });
        tracing::info!(liveness = rt.liveness_mode().as_str(), reason = %rt.reason, "execution liveness");
        match &rt.monitor {
            Some(p) => tracing::info!(monitor = %p.display(), "every execution starts under a monitor"),
            None => tracing::error!(
                "no monitor program (winx-release-monitor, or {}): no command can start",
                crate::monitor::PROGRAM_VAR
            ),
        }
        match rt.adopt() {
            Ok(0) => {}
            Ok(adopted) => tracing::info!(adopted, "found unresolved executions of an earlier runtime"),
            Err(why) => tracing::warn!(%why, "the executions an earlier runtime left cannot be read: releases wait"),
        }
        let watcher = Arc::downgrade(&rt);
        std::thread::spawn(move || loop {
            std::thread::sleep(WATCH_PERIOD);
            let Some(rt) = watcher.upgrade() else { return };
            rt.watch_once();
        });
        rt
    }

    /// The liveness mode in force.
    pub fn liveness_mode(&self) -> LivenessMode {
        match self.mode {
            Mode::Cgroup(_) => LivenessMode::Cgroup,
            Mode::Proc => LivenessMode::Proc,
        }
    }

    /// Why that mode is in force, in one line.
    pub fn liveness_reason(&self) -> &str {
        &self.reason
    }

    /// What keeps an execution's processes from leaving it: `"ancestry"`
    /// (each execution's processes descend from its monitor, a child
    /// subreaper: `monitor/`). `"cgroupns"` (a cgroup namespace per
    /// execution on an `nsdelegate` mount, where the kernel refuses moves
    /// out of the execution's subtree) is the containment the contract
    /// names where the kernel offers it; this runtime does not make such
    /// namespaces yet ([`Runtime::containment_reason`] says why not here).
    pub fn containment(&self) -> &'static str {
        "ancestry"
    }

    /// Why [`Runtime::containment`] is what it is, in one line.
    pub fn containment_reason(&self) -> String {
        let nsdelegate = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
            m.lines()
                .any(|l| l.split(" - ").nth(1).is_some_and(|r| r.starts_with("cgroup2 ")) && l.contains("nsdelegate"))
        });
        match (&self.mode, nsdelegate) {
            (Mode::Proc, _) => {
                "no delegated cgroup subtree: ancestry (each execution's monitor) and the /proc signals".into()
            }
            (Mode::Cgroup(_), false) => {
                "the cgroup2 mount lacks nsdelegate: a cgroup namespace would not stop moves out of \
                                         an execution's cgroup; ancestry (each execution's monitor) and its cgroup"
                    .into()
            }
            (Mode::Cgroup(_), true) => "cgroup namespaces per execution are not made by this build; ancestry (each \
                                        execution's monitor) and its cgroup"
                .into(),
        }
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The flag a `SIGCHLD` handler should set (for instance with
    /// `signal_hook::flag::register`): orphans are then reaped promptly.
    pub fn sigchld_flag(&self) -> Arc<AtomicBool> {
        self.sigchld.clone()
    }

    /// Sets what is called when an execution's leader exits (or it fails
    /// to start), and when an execution resolves. Both run on the
    /// runtime's threads and must not block for long.
    pub fn set_hooks(&self, leader_exited: Option<Hook>, resolved: Option<Hook>) {
        *lock(&self.hooks) = Hooks { leader_exited, resolved };
    }

    fn hook(&self, which: fn(&Hooks) -> &Option<Hook>, e: &Arc<Execution>) {
        // Called without the lock held: a hook may start another execution.
        let h = which(&lock(&self.hooks)).clone();
        if let Some(h) = h {
            h(e);
        }
    }

    /// Admits a command: it is given an id and a directory
    /// `D/executions/<id>/` with the command text, and is
    /// [`ExecState::Queued`] until [`Runtime::run`] starts it.
    pub fn submit(&self, spawn: Spawn) -> io::Result<Arc<Execution>> {
        let id = winx_release_kernel::sys::random_hex(8);
        let dir = self.data_dir.join("executions").join(&id);
        let cgroup = match &self.mode {
            Mode::Cgroup(s) => Some(s.execution_cgroup(&id)),
            Mode::Proc => None,
        };
        let record = Record {
            cgroup,
            ..Record::new(NewRecord {
                command_id: id.clone(),
                thread_id: spawn.thread.clone(),
                workspace: spawn.workspace.clone(),
                session: Some(spawn.session),
                background: spawn.background,
                started_unix: now_unix(),
                state: RecordState::Starting,
            })
        };
        let e = Arc::new(Execution::new(&record, dir.clone(), false, ExecState::Queued));
        // Known before its directory exists, so that adoption never takes it
        // for another runtime's.
        lock(&self.table).insert(id.clone(), e.clone());
        let made = create_private_dir_all(&dir).and_then(|()| fs::write(dir.join(COMMAND_FILE), &spawn.command));
        if let Err(err) = made {
            lock(&self.table).remove(&id);
            return Err(err);
        }
        lock(&self.specs).insert(id, spawn);
        Ok(e)
    }

    /// Starts a queued execution: its cgroup (in cgroup mode), its durable
    /// record, its leader, and a thread that waits for the leader. The
    /// caller holds the session's admission barrier.
    ///
    /// An execution that cannot be started is recorded resolved as
    /// [`ExecState::FailedToStart`] (its output says why) and the error is
    /// returned; the leader-exit hook is not called for it (the caller
    /// knows).
    pub fn run(self: &Arc<Self>, e: &Arc<Execution>) -> io::Result<()> {
        let Some(spawn) = lock(&self.specs).remove(&e.id) else {
            return Err(io::Error::other(format!("execution {} was already started", e.id)));
        };
        self.run_with(e, |e| self.spawn(e, &spawn))
    }

    /// [`Runtime::run`] with `spawn` starting the leader (a shell's spawn
    /// is another).
    pub(crate) fn run_with(
        self: &Arc<Self>,
        e: &Arc<Execution>,
        spawn: impl FnOnce(&Arc<Execution>) -> io::Result<Monitored>,
    ) -> io::Result<()> {
        // The thread that will wait for the leader is had first: where none
        // can be had (the user's task limit reached), nothing is started,
        // rather than a leader that no thread would ever see end.
        let watcher = winx_release_kernel::sys::Reserved::thread()
            .map_err(|err| io::Error::new(err.kind(), format!("no thread to watch the command: {err}")));
        match watcher.and_then(|w| spawn(e).map(|child| (w, child))) {
            Ok((watcher, started)) => {
                e.set(ExecState::Running);
                let (rt, e) = (self.clone(), e.clone());
                watcher.run(move || rt.watch_leader(e, started));
                Ok(())
            }
            Err(err) => {
                tracing::warn!(command_id = %e.id, error = %err, "command failed to start");
                let _ = fs::write(e.dir.join(OUTPUT_FILE), format!("failed to start: {err}\n"));
                // Recorded before any observer can see the new state.
                let mut r = e.record(RecordState::Resolved);
                (r.exit_code, r.failed_to_start, r.ended_unix) = (Some(127), true, Some(now_unix()));
                self.write(e, &r);
                e.set(ExecState::FailedToStart);
                if let Some(cg) = &e.cgroup {
                    cgroup::remove_if_empty(cg);
                }
                lock(&self.resolved).insert(e.id.clone());
                self.hook(|h| &h.resolved, e);
                Err(err)
            }
        }
    }

    fn write(&self, e: &Execution, r: &Record) {
        if let Err(err) = record::write_record(&e.dir, r) {
            tracing::warn!(command_id = %e.id, error = %err, "could not record execution state");
        }
    }

    fn spawn(&self, e: &Arc<Execution>, spawn: &Spawn) -> io::Result<Monitored> {
        let spec = CommandSpec {
            command: spawn.command.clone(),
            cwd: spawn.cwd.clone().unwrap_or_else(|| spawn.workspace.clone()),
            env: spawn.env.clone(),
            env_remove: self.env_remove.clone(),
        };
        let monitor = self.monitor_program()?;
        self.start_leader(e, || {
            spawn_leader(&e.dir, &spec, e.cgroup.as_deref(), monitor, |cmd| self.spawn_monitor(e, cmd))
        })
    }

    fn leader_ended(&self, e: &Arc<Execution>, code: Option<i32>) {
        let e = e.clone();
        *lock(&e.leader_exited_unix) = Some(now_unix());
        // Still `Running` for every observer until this is decided.
        if self.nothing_left(&e) {
            self.resolve(&e, code);
        } else {
            let mut r = e.record(RecordState::Lingering);
            r.exit_code = code;
            self.write(&e, &r);
            e.set(ExecState::Lingering(code));
        }
        self.hook(|h| &h.leader_exited, &e);
    }

    /// Whether nothing of `e` runs, by the union (`union.rs`): two looks in
    /// a row, each on a fresh `/proc` snapshot, find nothing of it (no
    /// process in its cgroup, none of its `/proc` signals, no remembered
    /// member alive).
    fn nothing_left(&self, e: &Arc<Execution>) -> bool {
        if e.unreadable.is_some() {
            return false;
        }
        (0..QUIET_PROBES).all(|_| self.still_running(e, &[]).is_empty())
    }

    /// Records `e` resolved: nothing it started runs any more. Its output,
    /// when longer than the inline limit, is dropped whole into
    /// `W/.winx/scratch/<id>.out`; its empty cgroup is removed.
    fn resolve(&self, e: &Arc<Execution>, code: Option<i32>) {
        if e.state().is_final() {
            return;
        }
        let out = e.dir.join(OUTPUT_FILE);
        if fs::metadata(&out).map(|m| m.len()).unwrap_or(0) > INLINE_OUTPUT_BYTES {
            if let Err(err) = self.drop_to_scratch(e) {
                tracing::warn!(command_id = %e.id, error = %err, "could not drop output into scratch");
            }
        }
        // Recorded before any observer can see the new state.
        let mut r = e.record(RecordState::Resolved);
        (r.exit_code, r.ended_unix) = (code, Some(now_unix()));
        self.write(e, &r);
        e.set(ExecState::Resolved(code));
        if let Some(cg) = &e.cgroup {
            cgroup::remove_if_empty(cg);
        }
        lock(&self.resolved).insert(e.id.clone());
        self.hook(|h| &h.resolved, e);
    }

    fn drop_to_scratch(&self, e: &Execution) -> io::Result<()> {
        self.drop_output(&e.workspace, &e.id, &e.dir).map(drop)
    }

    /// Copies `dir/output` whole into `W/.winx/scratch/<id>.out` (never
    /// over an existing file, links not followed); returns that path.
    pub(crate) fn drop_output(&self, workspace: &Path, id: &str, dir: &Path) -> io::Result<PathBuf> {
        use rustix::fs::{Mode as FileMode, OFlags};
        use std::os::fd::AsFd;
        let layout = winx_release_engine::layout::Layout::new(workspace, &self.data_dir)
            .map_err(|d| io::Error::other(d.to_string()))?;
        let scratch = layout.create_scratch_dir()?;
        let name = format!("{id}.out");
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(scratch.as_fd(), name.as_str(), flags, FileMode::from_raw_mode(0o600))?;
        let mut dst = fs::File::from(fd);
        let mut src = winx_release_kernel::sys::open_regular(&dir.join(OUTPUT_FILE))?;
        io::copy(&mut src, &mut dst)?;
        dst.sync_all()?;
        Ok(workspace.join(".winx").join("scratch").join(name))
    }

    /// One pass of the watcher: reaps orphans after `SIGCHLD`, and resolves
    /// lingering executions of which nothing is left.
    fn watch_once(&self) {
        let chld = self.sigchld.swap(false, Ordering::SeqCst);
        let lingering: Vec<Arc<Execution>> =
            self.executions().into_iter().filter(|e| matches!(e.state(), ExecState::Lingering(_))).collect();
        if chld {
            // The children that may be exited orphans: this process's own
            // children (its threads' `children` files, a few files) that are
            // no leaders, else, when those cannot be told, the whole
            // table's exited ones. A child that has not exited is left as
            // it is (`WNOHANG`).
            let leaders = lock(&self.children).clone();
            let maybe: Vec<i32> = match winx_release_kernel::procfs::own_children(1) {
                Some(kids) => kids.into_iter().filter(|p| !leaders.contains(p)).collect(),
                None => Probe::take(self.pid).map(|probe| probe.exited_orphans(self.pid, &leaders)).unwrap_or_default(),
            };
            for pid in maybe {
                // Not a leader a monitor waits on (checked again under the
                // lock, as a leader may have been spawned since).
                let children = lock(&self.children);
                if children.contains(&pid) {
                    continue;
                }
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG);
                }
            }
        }
        // Members of running executions, remembered while they are in the
        // cgroup, should they leave it later.
        for e in self.executions().into_iter().filter(|e| e.state() == ExecState::Running) {
            self.note_cgroup_members(&e);
            self.persist_members(&e);
        }
        let lingering: Vec<Arc<Execution>> = lingering.into_iter().filter(|e| e.unreadable.is_none()).collect();
        if lingering.is_empty() {
            return;
        }
        // One snapshot for every lingering execution of this pass, of the
        // processes started since the oldest of them (`answer.rs`).
        let since = super::execution::oldest_since(lingering.iter().map(|e| &**e));
        let mut probe = Probe::take_since(self.pid, since).ok();
        for e in lingering {
            let quiet = match probe.as_mut() {
                Some(p) => self.look(&e, &[], p).is_empty(),
                None => false,
            };
            self.persist_members(&e);
            let mut n = lock(&e.quiet_probes);
            *n = if quiet { *n + 1 } else { 0 };
            if *n >= QUIET_PROBES {
                drop(n);
                if let ExecState::Lingering(code) = e.state() {
                    self.resolve(&e, code);
                }
            }
        }
    }

    /// Every execution this runtime knows.
    pub fn executions(&self) -> Vec<Arc<Execution>> {
        lock(&self.table).values().cloned().collect()
    }

    /// The executions of session `key` (and those of unknown session).
    pub fn executions_of(&self, key: &SessionKey) -> Vec<Arc<Execution>> {
        let mut v: Vec<Arc<Execution>> = self.executions().into_iter().filter(|e| e.is_of(key)).collect();
        v.sort_by(|a, b| a.started_unix.cmp(&b.started_unix).then_with(|| a.id.cmp(&b.id)));
        v
    }

    /// Whether retention may remove execution `id`'s directory: false while
    /// this runtime holds it as anything but final; otherwise true, and the
    /// execution is forgotten (a status check then finds nothing).
    pub fn claim_for_retention(&self, id: &str) -> bool {
        let mut table = lock(&self.table);
        let gone = match table.get(id).map(|e| e.state()) {
            Some(s) if s.is_final() => {
                table.remove(id);
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

    /// The start time of `pid` (for recording peers), if it runs.
    pub fn start_time_of(pid: i32) -> Option<u64> {
        probe::start_time_of(pid)
    }

    /// Moves this process out of its cgroup subtree and removes what of the
    /// subtree is empty (a guardian that stops cleanly); nothing in `/proc`
    /// mode.
    pub fn leave(&self) {
        if let Mode::Cgroup(s) = &self.mode {
            s.leave();
        }
    }
}
