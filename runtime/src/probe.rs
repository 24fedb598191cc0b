//! The `/proc` fallback: who still runs when no cgroup subtree can be had.
//!
//! An execution is alive while any of these holds, and every doubt counts
//! as alive:
//! - its leader runs (pid and start time, so a reused pid is not it; a
//!   start time that could not be read at the spawn keeps whatever runs at
//!   the pid counted, [`Leader::may_be`]), also
//!   as a zombie whose other threads still run (`Threads:` above 1 in
//!   `/proc/<pid>/status`: the main thread called `pthread_exit`);
//! - a process is in its process group or its session (the leader is made
//!   the leader of both), unless the leader's pid now names another
//!   process (then the kernel had freed the group and session ids);
//! - a process of this user (by the real uid of `Status: Uid`, so a process
//!   that made itself non-dumpable is still the user's) carries
//!   `WINX_EXECUTION_ID=<command_id>` in its environment;
//! - a process of this user started after the leader whose environment
//!   cannot be read: it could carry the marker (the runtime asks this only
//!   where ancestry cannot decide, `runtime/union.rs`).
//!
//! The marker is the process's own to set: it adds a process to an
//! execution and takes it from none ([`Parts`]).
//!
//! `/proc` is read as snapshots: a process can fork a successor and exit
//! between the listing and the reads. Callers therefore ask twice in a row
//! ([`QUIET_PROBES`]) before they believe that nothing is left.
//!
//! A probe may be taken of the processes started since a bound
//! ([`Probe::take_since`]: the oldest monitor or leader the caller looks
//! at), which passes over the older processes an earlier snapshot read:
//! none of them can be the leader, a group or session member, a
//! descendant or a marker carrier of an execution that started since. A
//! question the table could answer only with older processes (the
//! descendants of a remembered member older than the bound, an execution
//! with no leader or with an unknown start time, the guardian's orphans)
//! makes the probe take the whole table first ([`Probe::complete_from`]).
//!
//! # References
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
//! - [`proc_pid_status(5)`](https://man7.org/linux/man-pages/man5/proc_pid_status.5.html)
//! - [`proc_pid_environ(5)`](https://man7.org/linux/man-pages/man5/proc_pid_environ.5.html)

use std::collections::{HashMap, HashSet};

use winx_release_kernel::procfs::{self as proc, EnvLookup, ProcError, ProcTable};

use super::liveness::MARKER;
use super::record::Leader;

/// Probes in a row that must find nothing before an execution is believed
/// ended (a process forked just as one probe passed its slot is seen by
/// the next).
pub const QUIET_PROBES: u32 = 2;

thread_local! {
    static TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many `/proc` snapshots this thread has taken for the union (what a
/// liveness answer costs grows with them: each reads every process but
/// those it passes over, [`older_passed_here`]).
pub fn snapshots_taken_here() -> u64 {
    TAKEN.with(|t| t.get())
}

thread_local! {
    static PASSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many processes the `/proc` snapshots this thread took for the union
/// passed over unread because they started before what the look needed
/// (the oldest monitor or leader it looked at), summed over the snapshots.
pub fn older_passed_here() -> u64 {
    PASSED.with(|t| t.get())
}

/// What a process's marker is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Marker {
    /// It carries this marker value.
    Value(Vec<u8>),
    /// Its environment cannot be read: it could carry any marker.
    Unknown,
}

/// Pauses before each further read of a marker that could not be read.
const MARKER_RETRIES: [u64; 2] = [1, 8];

/// The marker of `pid` (`None`: it carries none, is gone, or is another
/// principal's). A read that fails (a process in the middle of `execve(2)`
/// or of its exit can have no readable environment for an instant) is tried
/// again after 1 and 8 ms before it counts as [`Marker::Unknown`]: under
/// load one retry after 1 ms still left the default stress run a doubt
/// about a short-lived process now and then (a release refused
/// `execution_active` where the contract's code was expected). A process
/// whose environment stays unreadable costs a look 9 ms more, and still
/// counts as running.
fn read_marker(table: &ProcTable, pid: i32, buf: &mut Vec<u8>) -> Option<Marker> {
    for attempt in 0..=MARKER_RETRIES.len() {
        match proc::env_var(&table.proc, pid, MARKER.as_bytes(), buf) {
            Ok(EnvLookup::Found(v)) => return Some(Marker::Value(v)),
            Ok(EnvLookup::Denied) if proc::more_privileged(&table.proc, pid) => return None,
            Ok(EnvLookup::Absent) | Ok(EnvLookup::Gone) => return None,
            Ok(EnvLookup::Denied) | Err(_) => match MARKER_RETRIES.get(attempt) {
                Some(ms) => std::thread::sleep(std::time::Duration::from_millis(*ms)),
                None => return Some(Marker::Unknown),
            },
        }
    }
    Some(Marker::Unknown)
}

/// The processes of one execution in a snapshot, by how they were found
/// ([`Probe::members_parts`]); each list sorted, no pid in two.
#[derive(Debug, Default)]
pub struct Parts {
    /// Its leader, and in the leader's own session its group and session:
    /// what the kernel keeps and no process chooses.
    pub kin: Vec<i32>,
    /// Processes that carry its marker, and in a session the leader
    /// shares, its group: signals a process can take from another
    /// execution. They add a process to the execution, never take it away
    /// from another.
    pub marked: Vec<i32>,
    /// Processes started after its leader whose marker cannot be read.
    pub doubtful: Vec<i32>,
}

/// One look at every process, with the markers read on demand.
pub struct Probe {
    table: ProcTable,
    own: i32,
    uid: u32,
    /// Markers of the processes started at or after `.0` (clock ticks).
    markers: Option<(u64, HashMap<i32, Marker>)>,
    /// Zombies found to have live threads.
    live_zombies: HashSet<i32>,
}

/// The leader spawned as `pid` (a child of this process, not reaped yet,
/// so the pid names it), with its start time read now
/// ([`Leader::UNKNOWN_START`] when it cannot be).
pub(crate) fn spawned_leader(pid: i32, own_group: bool, own_session: bool) -> Leader {
    let start_time = start_time_of(pid).unwrap_or(Leader::UNKNOWN_START);
    Leader { pid, start_time, own_group, own_session }
}

/// The start time of `pid`, if it runs.
pub fn start_time_of(pid: i32) -> Option<u64> {
    let p = proc::open_proc().ok()?;
    proc::read_stat(&p, pid).ok().flatten().map(|s| s.start_time)
}

/// `Uid:` (real) and `Threads:` of `/proc/<pid>/status`; `None` when the
/// process is gone.
fn status_of(table: &ProcTable, pid: i32) -> Result<Option<(u32, u32)>, ProcError> {
    let mut buf = Vec::new();
    let n = match proc::read_file(&table.proc, &format!("{pid}/status"), &mut buf) {
        Ok(None) => return Ok(None),
        Ok(Some(n)) => n,
        Err(e) => return Err(ProcError::Unreadable { pid, file: "status", error: e.into() }),
    };
    let text = String::from_utf8_lossy(&buf[..n]);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok())
    };
    match (field("Uid:"), field("Threads:")) {
        (Some(uid), Some(threads)) => Ok(Some((uid, threads))),
        _ => Err(ProcError::Unreadable { pid, file: "status", error: std::io::Error::other("no Uid or Threads") }),
    }
}

impl Probe {
    /// Takes a snapshot of the process table; `own` (the caller) is never
    /// counted.
    pub fn take(own: i32) -> Result<Probe, ProcError> {
        Probe::take_since(own, 0)
    }

    /// [`Probe::take`] of the processes started at or after `since` (clock
    /// ticks after boot): older processes that an earlier snapshot read
    /// are passed over (module docs). Every question asked of the probe is
    /// still answered as by a whole table: one that needs older processes
    /// takes the whole table first.
    pub fn take_since(own: i32, since: u64) -> Result<Probe, ProcError> {
        TAKEN.with(|t| t.set(t.get() + 1));
        // Shared with the answers asking at once, never older than this
        // call (`procfs/shared_table.rs`).
        let table = proc::snapshot_shared_since(since)?;
        PASSED.with(|t| t.set(t.get() + table.older_passed as u64));
        Ok(Probe { table, own, uid: rustix::process::getuid().as_raw(), markers: None, live_zombies: HashSet::new() })
    }

    /// Makes sure every process started at or after `start` is in the
    /// table: when the table passed over older ones than that, the whole
    /// table is taken now (a snapshot that started after this call; what
    /// was read of markers and zombies is read again from it).
    pub fn complete_from(&mut self, start: u64) -> Result<(), ProcError> {
        if start >= self.table.since {
            return Ok(());
        }
        TAKEN.with(|t| t.set(t.get() + 1));
        self.table = proc::snapshot_shared()?;
        self.markers = None;
        self.live_zombies.clear();
        Ok(())
    }

    /// Makes sure the table holds whatever descends from `pid`: when `pid`
    /// runs and started before the table's bound, the whole table is taken
    /// ([`Probe::complete_from`]). A `pid` that is gone has no descendants
    /// of its own any more (they were reparented).
    fn complete_below(&mut self, pid: i32) -> Result<(), ProcError> {
        if self.table.since == 0 {
            return Ok(());
        }
        let start = match self.table.get(pid) {
            Some(e) => Some(e.stat.start_time),
            None => start_time_of(pid),
        };
        match start {
            Some(st) => self.complete_from(st),
            None => Ok(()),
        }
    }

    /// Whether `pid` is alive: not a zombie, or a zombie leader whose other
    /// threads still run.
    fn alive(&mut self, pid: i32) -> Result<bool, ProcError> {
        let Some(e) = self.table.get(pid).copied() else { return Ok(false) };
        if !e.stat.is_zombie() {
            return Ok(true);
        }
        if self.live_zombies.contains(&pid) {
            return Ok(true);
        }
        let live = matches!(status_of(&self.table, pid)?, Some((_, threads)) if threads > 1);
        if live {
            self.live_zombies.insert(pid);
        }
        Ok(live)
    }

    /// Whether `pid` runs as this user: by the owner of `/proc/<pid>`, or,
    /// when that is another user (a non-dumpable process shows root), by
    /// the real uid of its `status`.
    fn is_users(&self, pid: i32, owner: u32) -> Result<bool, ProcError> {
        if owner == self.uid {
            return Ok(true);
        }
        Ok(matches!(status_of(&self.table, pid)?, Some((uid, _)) if uid == self.uid))
    }

    /// The marker of every live process of this user started at or after
    /// `since`. A marker is inherited, so only processes started no earlier
    /// than an execution's leader can carry its marker.
    fn markers(&mut self, since: u64) -> Result<&HashMap<i32, Marker>, ProcError> {
        self.complete_from(since)?;
        if self.markers.as_ref().is_none_or(|(from, _)| *from > since) {
            let mut found = HashMap::new();
            let mut buf = Vec::new();
            let recent: Vec<(i32, u32)> = self
                .table
                .iter()
                .filter(|e| e.stat.start_time >= since && e.stat.pid != self.own)
                .map(|e| (e.stat.pid, e.uid))
                .collect();
            for (pid, owner) in recent {
                if !self.alive(pid)? || !self.is_users(pid, owner)? {
                    continue;
                }
                let zombie = self.table.get(pid).is_some_and(|e| e.stat.is_zombie());
                let marker = if zombie {
                    // A zombie leader with live threads: its environment is
                    // gone with its memory map; it could carry any marker.
                    Some(Marker::Unknown)
                } else {
                    read_marker(&self.table, pid, &mut buf)
                };
                if let Some(m) = marker {
                    found.insert(pid, m);
                }
            }
            self.markers = Some((since, found));
        }
        Ok(&self.markers.get_or_insert_with(Default::default).1)
    }

    /// The live processes of execution `id` with `leader` (every process
    /// whose marker cannot be read and that started after the leader is
    /// counted).
    pub fn members(&mut self, id: &str, leader: Option<Leader>) -> Result<Vec<i32>, ProcError> {
        let (mut v, doubtful) = self.members_split(id, leader)?;
        v.extend(doubtful);
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    /// [`Probe::members`] in two parts: the processes that are members
    /// (the leader, its group and session, the marker), and those that
    /// only could be (their marker cannot be read). Only the first are
    /// remembered as members; both count as running.
    pub fn members_split(&mut self, id: &str, leader: Option<Leader>) -> Result<(Vec<i32>, Vec<i32>), ProcError> {
        let parts = self.members_parts(id, leader)?;
        let mut v = parts.kin;
        v.extend(parts.marked);
        v.sort_unstable();
        v.dedup();
        Ok((v, parts.doubtful))
    }

    /// [`Probe::members_split`] with the members in two parts by how they
    /// were found: [`Parts::kin`] by what the kernel keeps, which no
    /// process chooses, and [`Parts::marked`] by the marker alone, which a
    /// process can set to any execution's.
    pub fn members_parts(&mut self, id: &str, leader: Option<Leader>) -> Result<Parts, ProcError> {
        // Every process that could be one of them started at or after the
        // leader (its marker is inherited; a group or session is joined by
        // birth): without a leader, or a start time, the whole table.
        // A group in a session the leader shares can be joined by any
        // process of that session, however old: the whole table too.
        self.complete_from(leader.map_or(0, |l| {
            if l.start_time == Leader::UNKNOWN_START || !l.own_session {
                0
            } else {
                l.start_time
            }
        }))?;
        let own = self.own;
        let mut kin: HashSet<i32> = HashSet::new();
        let mut marked: HashSet<i32> = HashSet::new();
        let mut doubtful: HashSet<i32> = HashSet::new();
        if let Some(l) = leader {
            let reused = self.table.get(l.pid).is_some_and(|e| !l.may_be(e.stat.start_time));
            if !reused {
                // A session is joined only by birth, and a group only from
                // inside its session: in the leader's own session both are
                // its kin. A group in a session the leader shares with
                // others (no `setsid`) can be joined by those others.
                let candidates: Vec<(i32, bool)> = self
                    .table
                    .iter()
                    .map(|e| e.stat)
                    .filter(|s| s.pid != own)
                    .filter(|s| s.pid == l.pid || (l.own_group && s.pgid == l.pid) || (l.own_session && s.sid == l.pid))
                    .map(|s| (s.pid, s.pid == l.pid || l.own_session))
                    .collect();
                for (pid, is_kin) in candidates {
                    if self.alive(pid)? {
                        if is_kin {
                            kin.insert(pid);
                        } else {
                            marked.insert(pid);
                        }
                    }
                }
            }
        }
        // Without a recorded leader (a guardian died before the spawn was
        // recorded), every process is looked at.
        let since = leader.map_or(0, |l| l.start_time);
        for (pid, m) in self.markers(since)? {
            match m {
                Marker::Value(v) if v.as_slice() == id.as_bytes() => {
                    marked.insert(*pid);
                }
                Marker::Unknown => {
                    doubtful.insert(*pid);
                }
                Marker::Value(_) => {}
            }
        }
        let mut kin: Vec<i32> = kin.into_iter().collect();
        kin.sort_unstable();
        let mut marked: Vec<i32> = marked.into_iter().filter(|p| !kin.contains(p)).collect();
        marked.sort_unstable();
        let mut d: Vec<i32> = doubtful.into_iter().filter(|p| !kin.contains(p) && !marked.contains(p)).collect();
        d.retain(|&p| !self.descends_from_another(p, id));
        d.sort_unstable();
        Ok(Parts { kin, marked, doubtful: d })
    }

    /// Whether `pid`'s nearest ancestor (by parent, in this snapshot) that
    /// carries a readable marker carries another execution's than `id`:
    /// then `pid` was started inside that execution, and cannot be one of
    /// `id`'s (a process is forked by its parent, and an orphan is
    /// reparented only to an ancestor), so a marker of its own that cannot
    /// be read is no doubt about `id`. (A process that `id`'s members
    /// started is counted by descent before this is asked.)
    fn descends_from_another(&mut self, pid: i32, id: &str) -> bool {
        let mut buf = Vec::new();
        let mut at = self.table.get(pid).map(|e| e.stat.ppid);
        let mut hops = 0;
        while let Some(p) = at.filter(|p| *p > 1 && *p != self.own) {
            hops += 1;
            if hops > 4096 {
                return false;
            }
            if self.table.get(p).is_none() && self.complete_below(p).is_err() {
                return false;
            }
            let Some(e) = self.table.get(p).copied() else { return false };
            let known = self.markers.as_ref().and_then(|(_, m)| m.get(&p).cloned());
            let marker = match known {
                Some(m) => Some(m),
                None if self.is_users(p, e.uid).unwrap_or(true) => read_marker(&self.table, p, &mut buf),
                None => None,
            };
            match marker {
                Some(Marker::Value(v)) => return v.as_slice() != id.as_bytes(),
                Some(Marker::Unknown) => return false,
                None => at = Some(e.stat.ppid),
            }
        }
        false
    }

    /// Whether the process `pid` that started at `start_time` (any, for
    /// [`Leader::UNKNOWN_START`]) is alive in this snapshot.
    pub(crate) fn is_alive(&mut self, pid: i32, start_time: u64) -> bool {
        let from = if start_time == Leader::UNKNOWN_START { 0 } else { start_time };
        if self.complete_from(from).is_err() {
            // Cannot be told: alive.
            return true;
        }
        let same =
            self.table.get(pid).is_some_and(|e| start_time == Leader::UNKNOWN_START || e.stat.start_time == start_time);
        // A `status` that cannot be read is a doubt: alive.
        same && self.alive(pid).unwrap_or(true)
    }

    /// The live descendants of `roots` in this snapshot (children, their
    /// children, ...), `roots` themselves left out. A process an execution's
    /// member started is a member too, whatever it did to its environment,
    /// group or session.
    ///
    /// A root older than the table's bound makes the probe take the whole
    /// table first ([`Probe::complete_from`]); that can fail.
    pub fn descendants(&mut self, roots: &[i32]) -> Result<Vec<i32>, ProcError> {
        for &r in roots {
            self.complete_below(r)?;
        }
        let mut children: std::collections::HashMap<i32, Vec<i32>> = std::collections::HashMap::new();
        for e in self.table.iter().filter(|e| !e.stat.is_zombie() && e.stat.pid != self.own) {
            children.entry(e.stat.ppid).or_default().push(e.stat.pid);
        }
        let mut seen: HashSet<i32> = roots.iter().copied().collect();
        let mut todo: Vec<i32> = roots.to_vec();
        let mut out = Vec::new();
        while let Some(p) = todo.pop() {
            for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
                if seen.insert(c) {
                    out.push(c);
                    todo.push(c);
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The start time of `pid` in this snapshot, else read now.
    pub fn start_time(&self, pid: i32) -> Option<u64> {
        match self.table.get(pid) {
            Some(e) => Some(e.stat.start_time),
            None => start_time_of(pid),
        }
    }

    /// Live processes reparented to `parent` (a subreaper) that are not in
    /// `leaders` (an orphan can be older than any bound: the whole table
    /// is taken first, [`Probe::complete_from`]).
    pub fn orphans(&mut self, parent: i32, leaders: &HashSet<i32>) -> Result<Vec<i32>, ProcError> {
        self.complete_from(0)?;
        let mut v: Vec<i32> = self
            .table
            .iter()
            .filter(|e| e.stat.ppid == parent && !e.stat.is_zombie() && !leaders.contains(&e.stat.pid))
            .map(|e| e.stat.pid)
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// Exited children of `parent` that are not in `leaders` (to be reaped;
    /// ask it of a whole table, [`Probe::take`]: a bounded one may lack
    /// them).
    pub fn exited_orphans(&self, parent: i32, leaders: &HashSet<i32>) -> Vec<i32> {
        self.table
            .iter()
            .filter(|e| e.stat.ppid == parent && e.stat.is_zombie() && !leaders.contains(&e.stat.pid))
            .map(|e| e.stat.pid)
            .collect()
    }

    /// Reads `pid`'s `stat` again into the table: `false` when it is gone,
    /// a zombie, or another process than the one seen (its start time
    /// changed). A child seen between `fork` and `execve(2)` had neither its
    /// session nor its marker yet; read again, it has both, or is gone. A
    /// `stat` that cannot be read now is no sign of an end: the process is
    /// kept as it was seen (`true`), a doubt counted as running.
    pub fn refresh(&mut self, pid: i32) -> bool {
        let Some(seen) = self.table.entries.get(&pid).copied() else { return false };
        match proc::read_stat(&self.table.proc, pid) {
            Ok(Some(now)) if now.start_time == seen.stat.start_time && !now.is_zombie() => {
                self.table.entries.insert(pid, proc::ProcEntry { stat: now, uid: seen.uid });
                true
            }
            Ok(_) => false,
            Err(_) => true,
        }
    }

    /// Whether `pid` belongs to the execution `id` with `leader`: by its
    /// marker (or a marker that cannot be read), its group or its session.
    pub fn belongs(&mut self, pid: i32, id: &str, leader: Option<Leader>) -> Result<bool, ProcError> {
        Ok(self.members(id, leader)?.contains(&pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use winx_release_kernel::procfs::{ProcEntry, ProcStat};

    /// A probe over a `/proc` stand-in at `dir` that saw one process, 4242.
    fn probe_of(dir: &std::path::Path) -> Probe {
        let proc = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let stat = ProcStat { pid: 4242, state: b'S', ppid: 1, pgid: 4242, sid: 4242, flags: 0, start_time: 5 };
        let entries = [(4242, ProcEntry { stat, uid: 0 })].into();
        let table = ProcTable { proc, entries, kernel_threads_passed: 0, since: 0, older_passed: 0 };
        Probe { table, own: 1, uid: 0, markers: None, live_zombies: HashSet::new() }
    }

    /// A probe whose table passed over the processes older than its bound
    /// takes the whole table before it answers a question that older
    /// processes could change: the members of a leader started before the
    /// bound, of one with an unknown start time, or of one without a
    /// session of its own (its group can be joined from the session it
    /// shares); a leader started since, in its own session, needs no more.
    #[test]
    fn a_question_older_processes_could_change_takes_the_whole_table() {
        let tmp = tempfile::tempdir().unwrap();
        let bounded = || {
            let mut p = probe_of(tmp.path());
            p.table.since = 100;
            p
        };
        let leader = |start_time, own_session| Leader { pid: 4242, start_time, own_group: true, own_session };
        let mut p = bounded();
        p.members_parts("x", Some(leader(200, true))).unwrap();
        assert_eq!(p.table.since, 100, "a leader started since the bound took the whole table");
        for (l, why) in [
            (Some(leader(50, true)), "a leader older than the bound"),
            (Some(leader(Leader::UNKNOWN_START, true)), "an unknown start time"),
            (Some(leader(200, false)), "a leader without a session of its own"),
            (None, "no leader"),
        ] {
            let mut p = bounded();
            p.members_parts("x", l).unwrap();
            assert_eq!(p.table.since, 0, "{why}: the bounded table answered");
        }
    }

    /// An orphan whose `stat` cannot be read again is kept (it could still
    /// run, and the answer counts it); only one that is gone, a zombie, or
    /// another process at the same pid is dropped.
    #[test]
    fn a_process_whose_stat_cannot_be_read_again_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("4242");
        std::fs::create_dir(&dir).unwrap();
        let line = |state: char, start: u64| {
            format!("4242 (x) {state} 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 10 0\n")
        };
        let mut probe = probe_of(tmp.path());
        std::fs::write(dir.join("stat"), b"not a stat line").unwrap();
        assert!(probe.refresh(4242), "an unreadable stat is a doubt, kept");
        std::fs::write(dir.join("stat"), line('S', 5)).unwrap();
        assert!(probe.refresh(4242));
        std::fs::write(dir.join("stat"), line('Z', 5)).unwrap();
        assert!(!probe.refresh(4242), "a zombie has ended");
        std::fs::write(dir.join("stat"), line('S', 6)).unwrap();
        assert!(!probe.refresh(4242), "another process at the pid");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!probe.refresh(4242), "gone");
    }
}
