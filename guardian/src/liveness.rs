//! The guardian's liveness policy over the engine's `/proc` reads
//! ([`winx_release_engine::liveness`]).
//!
//! An execution is alive while any of these holds, and any doubt counts as
//! alive:
//! - its leader runs (pid and start time, so a reused pid is not it);
//! - a process is in its process group or its session (the leader is made
//!   the leader of both), unless the leader's pid now names another
//!   process (then the kernel had freed the group and session ids);
//! - a process of this user carries `WINX_EXECUTION_ID=<command_id>` in its
//!   environment.
//!
//! The guardian is a child subreaper: orphans of its commands are
//! reparented to it and reaped here (no zombies). A reparented process that
//! none of the signals above attributes to an execution blocks releases of
//! every session until it exits. Nothing is ever signalled.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use winx_release_engine::liveness::{self as proc, EnvLookup, ProcError, ProcTable};

use crate::exec::{self, ExecState, Execution, MARKER};
use crate::sessions::{lock, Guardian, Session};

/// Probes without anything found in a row before a lingering execution is
/// recorded resolved (two, so that a process forked just as a scan passed
/// its slot is seen by the next one).
const QUIET_PROBES: u32 = 2;

/// How often the watcher looks at lingering executions and orphans.
const WATCH_PERIOD: Duration = Duration::from_millis(150);

/// The leader process of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leader {
    /// Its pid.
    pub pid: i32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// Whether it leads its own process group (pgid = pid).
    pub own_group: bool,
    /// Whether it leads its own session (sid = pid).
    pub own_session: bool,
}

/// The start time of `pid`, if it runs.
pub fn start_time_of(pid: i32) -> Option<u64> {
    let p = proc::open_proc().ok()?;
    proc::read_stat(&p, pid).ok().flatten().map(|s| s.start_time)
}

/// One look at every process, with the markers read on demand.
pub struct Probe {
    table: ProcTable,
    own: i32,
    uid: u32,
    /// Markers of the processes started at or after `.0` (clock ticks).
    markers: Option<(u64, HashMap<i32, Vec<u8>>)>,
}

impl Probe {
    /// Takes a snapshot of the process table.
    pub fn take(own: i32) -> Result<Probe, ProcError> {
        Ok(Probe { table: proc::snapshot()?, own, uid: rustix::process::geteuid().as_raw(), markers: None })
    }

    /// The marker of `pid`, if it is a live process of this user that
    /// carries one. A process whose environment cannot be read
    /// (non-dumpable) is judged by the other signals alone.
    fn marker_of(&self, pid: i32, buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, ProcError> {
        let Some(e) = self.table.get(pid) else { return Ok(None) };
        if pid == self.own || e.uid != self.uid || e.stat.is_zombie() {
            return Ok(None);
        }
        match proc::env_var(&self.table.proc, pid, MARKER.as_bytes(), buf)? {
            EnvLookup::Found(v) => Ok(Some(v)),
            _ => Ok(None),
        }
    }

    /// The marker of every live process of this user started at or after
    /// `since` that carries one. A marker is inherited, so only processes
    /// started no earlier than an execution's leader can carry its marker:
    /// the environments of older processes are never read.
    fn markers(&mut self, since: u64) -> Result<&HashMap<i32, Vec<u8>>, ProcError> {
        if self.markers.as_ref().is_none_or(|(from, _)| *from > since) {
            let mut found = HashMap::new();
            let mut buf = Vec::new();
            let recent: Vec<i32> =
                self.table.iter().filter(|e| e.stat.start_time >= since).map(|e| e.stat.pid).collect();
            for pid in recent {
                if let Some(v) = self.marker_of(pid, &mut buf)? {
                    found.insert(pid, v);
                }
            }
            self.markers = Some((since, found));
        }
        Ok(&self.markers.get_or_insert_with(Default::default).1)
    }

    /// The live processes of execution `id` with `leader`.
    pub fn members(&mut self, id: &str, leader: Option<Leader>) -> Result<Vec<i32>, ProcError> {
        let own = self.own;
        let mut pids: HashSet<i32> = HashSet::new();
        if let Some(l) = leader {
            let reused = self.table.get(l.pid).is_some_and(|e| e.stat.start_time != l.start_time);
            if !reused {
                for e in self.table.iter() {
                    let s = e.stat;
                    if s.pid == own || s.is_zombie() {
                        continue;
                    }
                    if s.pid == l.pid || (l.own_group && s.pgid == l.pid) || (l.own_session && s.sid == l.pid) {
                        pids.insert(s.pid);
                    }
                }
            }
        }
        // Without a recorded leader (a guardian died before the spawn was
        // recorded), every process is looked at.
        let since = leader.map_or(0, |l| l.start_time);
        for (pid, v) in self.markers(since)? {
            if v.as_slice() == id.as_bytes() {
                pids.insert(*pid);
            }
        }
        let mut v: Vec<i32> = pids.into_iter().collect();
        v.sort_unstable();
        Ok(v)
    }

    /// Live processes reparented to this guardian that are not the leaders
    /// it waits for.
    pub fn orphans(&self, leaders: &HashSet<i32>) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .table
            .iter()
            .filter(|e| e.stat.ppid == self.own && !e.stat.is_zombie() && !leaders.contains(&e.stat.pid))
            .map(|e| e.stat.pid)
            .collect();
        v.sort_unstable();
        v
    }

    /// Reads `pid`'s `stat` again into the table: `false` when it is gone,
    /// a zombie, or another process than the one seen (its start time
    /// changed). A child seen between `fork` and `execve(2)` had neither its
    /// session nor its marker yet; read again, it has both, or is gone.
    pub fn refresh(&mut self, pid: i32) -> bool {
        let Some(seen) = self.table.entries.get(&pid).copied() else { return false };
        match proc::read_stat(&self.table.proc, pid) {
            Ok(Some(now)) if now.start_time == seen.stat.start_time && !now.is_zombie() => {
                self.table.entries.insert(pid, proc::ProcEntry { stat: now, uid: seen.uid });
                true
            }
            _ => false,
        }
    }

    /// The execution `pid` belongs to, by its marker or its group or
    /// session, among `executions`.
    pub fn attribute(&mut self, pid: i32, executions: &[Arc<Execution>]) -> Result<Option<Arc<Execution>>, ProcError> {
        let Some(entry) = self.table.get(pid).copied() else { return Ok(None) };
        if let Some(v) = self.marker_of(pid, &mut Vec::new())? {
            if let Some(e) = executions.iter().find(|e| e.id.as_bytes() == v.as_slice()) {
                return Ok(Some(e.clone()));
            }
        }
        for e in executions {
            let Some(l) = *lock(&e.leader) else { continue };
            if self.table.get(l.pid).is_some_and(|x| x.stat.start_time != l.start_time) {
                continue;
            }
            if (l.own_group && entry.stat.pgid == l.pid) || (l.own_session && entry.stat.sid == l.pid) {
                return Ok(Some(e.clone()));
            }
        }
        Ok(None)
    }

    /// Reaps every exited orphan of this guardian that no monitor thread
    /// waits for.
    pub fn reap(&self, g: &Guardian) {
        g.with_children(|leaders| {
            for e in self.table.iter() {
                let s = e.stat;
                if s.ppid == self.own && s.is_zombie() && !leaders.contains(&s.pid) {
                    if let Some(pid) = rustix::process::Pid::from_raw(s.pid) {
                        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
                    }
                }
            }
        });
    }
}

/// Why a release of `session` must wait: the number of things found alive
/// and a message naming them (pids included). `(0, None)` when nothing of
/// the session runs. Called under the session's admission barrier.
pub fn release_check(g: &Arc<Guardian>, session: &Session) -> (usize, Option<String>) {
    crate::adopt::adopt_unresolved(g);
    let mut found = Vec::new();
    if let Err(e) = check(g, session, &mut found) {
        found.push(format!("cannot tell what still runs: {e}"));
    }
    if found.is_empty() {
        (0, None)
    } else {
        (found.len(), Some(found.join("; ")))
    }
}

fn check(g: &Guardian, session: &Session, found: &mut Vec<String>) -> Result<(), ProcError> {
    let mut probe = Probe::take(g.pid)?;
    let mut named: HashSet<i32> = HashSet::new();
    let unresolved = lock(&session.state).unresolved();
    for e in &unresolved {
        let leader = *lock(&e.leader);
        if e.state() == ExecState::Running && !e.adopted {
            let pid = leader.map_or_else(|| "?".to_owned(), |l| l.pid.to_string());
            found.push(format!("command {} is running (pid {pid})", e.id));
            continue;
        }
        let members = probe.members(&e.id, leader)?;
        if !members.is_empty() {
            named.extend(members.iter().copied());
            found.push(format!("command {} left process(es) {members:?} running", e.id));
        }
    }
    let leaders = g.with_children(Clone::clone);
    let orphans = probe.orphans(&leaders);
    if !orphans.is_empty() {
        let all = g.executions();
        for pid in orphans.into_iter().filter(|p| !named.contains(p)) {
            // Seen before the table of leaders was read: it may have been a
            // leader just spawned (and even ended since), or not yet in its
            // own session. Look again.
            if !probe.refresh(pid) || leaders.contains(&pid) {
                continue;
            }
            match probe.attribute(pid, &all)? {
                Some(e) if e.thread == session.thread && e.workspace == session.layout.workspace() => {
                    found.push(format!("process {pid} of command {} still runs", e.id));
                }
                Some(_) => {}
                None => found.push(format!(
                    "process {pid} was reparented to the guardian and no execution accounts for it; \
                     releases wait until it exits"
                )),
            }
        }
    }
    Ok(())
}

/// Whether two probes in a row find nothing of `e` left (the second one
/// sees a process forked just as the first one passed its slot).
pub fn nothing_left(g: &Guardian, e: &Execution) -> bool {
    for _ in 0..QUIET_PROBES {
        let Ok(mut probe) = Probe::take(g.pid) else { return false };
        let leader = *lock(&e.leader);
        match probe.members(&e.id, leader) {
            Ok(m) if m.is_empty() => {}
            _ => return false,
        }
    }
    true
}

/// Records a lingering `e` resolved when [`nothing_left`] holds.
pub fn settle(g: &Guardian, e: &Execution) {
    if let ExecState::Lingering(code) = e.state() {
        if nothing_left(g, e) {
            exec::resolve(g, e, code);
        }
    }
}

/// Makes this process a child subreaper, so that orphans of its commands
/// are reparented to it rather than to init.
///
/// # References
/// - [`prctl(2)`](https://man7.org/linux/man-pages/man2/prctl.2.html) `PR_SET_CHILD_SUBREAPER`
pub fn become_subreaper() {
    if let Err(e) = rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(std::process::id() as i32)) {
        tracing::warn!(error = %e, "PR_SET_CHILD_SUBREAPER failed; orphans go to init and are found by marker only");
    }
}

/// Starts the watcher thread: reaps orphans after `SIGCHLD` and records
/// lingering executions resolved once nothing of them is left.
pub fn spawn_watcher(g: Arc<Guardian>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(WATCH_PERIOD);
        let chld = g.sigchld.swap(false, Ordering::SeqCst);
        let lingering: Vec<Arc<Execution>> =
            g.executions().into_iter().filter(|e| matches!(e.state(), ExecState::Lingering(_))).collect();
        if !chld && lingering.is_empty() {
            continue;
        }
        let Ok(mut probe) = Probe::take(g.pid) else { continue };
        probe.reap(&g);
        for e in lingering {
            let leader = *lock(&e.leader);
            let quiet = matches!(probe.members(&e.id, leader), Ok(m) if m.is_empty());
            let mut n = lock(&e.quiet_probes);
            *n = if quiet { *n + 1 } else { 0 };
            if *n >= QUIET_PROBES {
                drop(n);
                if let ExecState::Lingering(code) = e.state() {
                    exec::resolve(&g, &e, code);
                }
            }
        }
    });
}
