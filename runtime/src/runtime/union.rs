//! Who of one execution still runs: the union of what the kernel keeps.
//!
//! An execution runs while **any** of these finds a process of it:
//! - its cgroup (cgroup mode): a process in it or below it
//!   (`cgroup.procs`);
//! - the `/proc` signals: its leader, its process group and session, the
//!   `WINX_EXECUTION_ID` marker, processes whose marker cannot be read, and
//!   the descendants of all of these and of its remembered members;
//! - its remembered members: every process a look here has seen as a member,
//!   held by pidfd until it exits and recorded durably
//!   (`executions/members.rs`).
//!
//! No one signal resolves an execution: a process moves out of its cgroup in
//! ordinary use (`systemd-run --user --scope`, a tmux built with systemd
//! support), and a daemon drops its group, session and environment. Every
//! process seen is remembered, so that a later move, `setsid`, cleared
//! environment or guardian restart does not lose it.
//!
//! A process's marker and cgroup are its own to set, so they only add it to
//! an execution: a look splits what it finds into kin (the leader, its own
//! group and session, their descendants and remembered kin) and claims
//! (the marker, the cgroup, and what descends from those), and remembers
//! each as such (`members.rs`). Where ancestry decides (this runtime is a
//! subreaper and started the execution), a process whose environment
//! cannot be read is not counted for it: what the execution started
//! descends from its members or was reparented to this process, where it
//! counts for every session (`answer.rs`). What still escapes is in
//! docs/DESIGN.md, "What still escapes".

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Runtime;
use crate::cgroup;
use crate::execution::Execution;
use crate::probe::Probe;

impl Runtime {
    /// What of `e` still runs, by the union of the module's docs, not
    /// counting the processes `except` (a shell's own process): one line
    /// per finding, empty when nothing runs. Takes one `/proc` snapshot;
    /// callers that need "nothing is left" ask twice in a row.
    ///
    /// Every process seen is remembered as a member of `e` (recorded on
    /// disk before this returns).
    pub(crate) fn still_running(&self, e: &Arc<Execution>, except: &[i32]) -> Vec<String> {
        // Of the processes started since its monitor and leader.
        let found: Vec<String> = match Probe::take_since(self.pid, e.processes_since()) {
            Ok(mut probe) => self.look(e, except, &mut probe),
            Err(err) => vec![format!("cannot tell whether command {} runs: {err}", e.id)],
        };
        found.into_iter().chain(self.persist_members(e)).collect()
    }

    /// [`Runtime::still_running`] over a snapshot the caller took (one
    /// snapshot serves every execution of one answer). Does not persist.
    pub(super) fn look(&self, e: &Execution, except: &[i32], probe: &mut Probe) -> Vec<String> {
        let mut found = Vec::new();
        if let Some(why) = &e.unreadable {
            found.push(format!("execution {} has a record that cannot be read ({why})", e.id));
            return found;
        }
        let mut reported: BTreeSet<i32> = except.iter().copied().collect();
        // Its monitor is no member (it carries no marker; a look never
        // names it).
        reported.extend(e.monitor().map(|m| m.pid));
        if let Some(cg) = &e.cgroup {
            match cgroup::procs(cg) {
                Ok(pids) => {
                    e.members.note(not_leader(e, pids.iter().filter_map(|&p| probe.start_time(p).map(|st| (p, st)))));
                    let left: Vec<i32> = pids.into_iter().filter(|p| reported.insert(*p)).collect();
                    if !left.is_empty() {
                        found.push(format!(
                            "command {} left process(es) {left:?} running in cgroup {}",
                            e.id,
                            cg.display()
                        ));
                    }
                }
                Err(err) => found.push(format!("cannot tell whether command {} runs: {}: {err}", e.id, cg.display())),
            }
        }
        self.look_monitor(e, &mut reported, probe, &mut found);
        match probe.members_parts(&e.id, e.leader()) {
            Ok(parts) => {
                let (remembered, _) = e.members.alive();
                let kin_remembered = e.members.kin();
                // Kin: what the kernel keeps (the leader, its own group and
                // session) and their descendants. The rest is a process's
                // own claim (a marker, a remembered claim) and what
                // descends from it: it adds to this execution, and says
                // nothing about whose else a process is.
                let mut kin_roots = parts.kin.clone();
                kin_roots.extend(&kin_remembered);
                let mut kin = parts.kin.clone();
                match probe.descendants(&kin_roots) {
                    Ok(below) => kin.extend(below),
                    Err(err) => {
                        found.push(format!("cannot tell whether command {} runs: {err}", e.id));
                        return found;
                    }
                }
                let mut other_roots = parts.marked.clone();
                other_roots.extend(remembered.iter().filter(|p| !kin_remembered.contains(p)));
                other_roots.extend(e.leader().map(|l| l.pid).filter(|p| !kin.contains(p)));
                let mut marked = parts.marked.clone();
                match probe.descendants(&other_roots) {
                    Ok(below) => marked.extend(below),
                    Err(err) => {
                        found.push(format!("cannot tell whether command {} runs: {err}", e.id));
                        return found;
                    }
                }
                marked.retain(|p| !kin.contains(p));
                e.members.note_kin(not_leader(e, kin.iter().filter_map(|&p| probe.start_time(p).map(|st| (p, st)))));
                e.members.note(not_leader(e, marked.iter().filter_map(|&p| probe.start_time(p).map(|st| (p, st)))));
                let mut sure = kin;
                sure.extend(marked);
                sure.sort_unstable();
                sure.dedup();
                let left: Vec<i32> = sure.into_iter().filter(|p| reported.insert(*p)).collect();
                if !left.is_empty() {
                    found.push(format!("command {} left process(es) {left:?} running", e.id));
                }
                // Where ancestry decides, a process whose environment cannot
                // be read is not made this execution's: what it started
                // descends from its members above, or was reparented to
                // this process (an orphan, counted for every session).
                let doubtful = if self.ancestry_decides(e) { Vec::new() } else { parts.doubtful };
                let unsure: Vec<i32> = doubtful.into_iter().filter(|p| reported.insert(*p)).collect();
                if !unsure.is_empty() {
                    found.push(format!(
                        "process(es) {unsure:?} started after command {} and their environment cannot be read: \
                         they could carry its marker",
                        e.id
                    ));
                }
            }
            Err(err) => found.push(format!("cannot tell whether command {} runs: {err}", e.id)),
        }
        let (alive, doubt) = e.members.alive();
        let left: Vec<i32> = alive.into_iter().filter(|p| reported.insert(*p)).collect();
        if !left.is_empty() {
            found.push(format!(
                "command {} left process(es) {left:?} running that were seen as its members and have since left \
                 its cgroup, group or session",
                e.id
            ));
        }
        if doubt {
            found.push(format!("cannot tell whether every process of command {} has ended", e.id));
        }
        found
    }

    /// The ancestry part of [`Runtime::look`]: while `e`'s monitor runs,
    /// every descendant of it not in `reported` (the shell's own process,
    /// say) runs, and a monitor without one is still recording its exit
    /// (counted, except where `reported` excepts its one child). A monitor
    /// gone without its exit record was killed: what it left was
    /// reparented to the nearest subreaper (this process's orphans) or to
    /// init, where the rest of the union finds it.
    fn look_monitor(&self, e: &Execution, reported: &mut BTreeSet<i32>, probe: &mut Probe, found: &mut Vec<String>) {
        let Some(m) = e.monitor() else { return };
        if !probe.is_alive(m.pid, m.start_time) {
            return;
        }
        let below = match probe.descendants(&[m.pid]) {
            Ok(below) => below,
            Err(err) => {
                found.push(format!(
                    "cannot tell what the monitor of command {} (pid {}) has below it: {err}",
                    e.id, m.pid
                ));
                return;
            }
        };
        e.members.note_kin(not_leader(e, below.iter().filter_map(|&p| probe.start_time(p).map(|st| (p, st)))));
        let excepted = below.iter().any(|p| reported.contains(p));
        let left: Vec<i32> = below.into_iter().filter(|p| reported.insert(*p)).collect();
        if !left.is_empty() {
            found.push(format!(
                "command {} left process(es) {left:?} running (descendants of its monitor, pid {})",
                e.id, m.pid
            ));
        } else if !excepted {
            found.push(format!("the monitor of command {} (pid {}) has not recorded its exit yet", e.id, m.pid));
        }
    }

    /// Whether the kernel's ancestry decides what of `e` runs: this process
    /// is a child subreaper and started `e` itself, so that everything `e`
    /// started descends from `e`'s leader or members, or was reparented
    /// to this process. An execution an earlier runtime started (adopted)
    /// lost that: its orphans went elsewhere.
    pub(super) fn ancestry_decides(&self, e: &Execution) -> bool {
        self.subreaper && !e.adopted
    }

    /// Records the members of `e` seen so far durably (a release proceeds
    /// only after this); says why when that failed.
    pub(super) fn persist_members(&self, e: &Execution) -> Option<String> {
        let err = e.members.persist(&e.dir).err()?;
        tracing::warn!(command_id = %e.id, error = %err, "could not record an execution's members");
        Some(format!("cannot record the processes of command {} durably: {err}", e.id))
    }
}

/// The processes of `seen` other than `e`'s leader, which its record names
/// already (pid and start time): members are the processes it started.
pub(super) fn not_leader<'a>(
    e: &'a Execution,
    seen: impl IntoIterator<Item = (i32, u64)> + 'a,
) -> impl Iterator<Item = (i32, u64)> + 'a {
    let leader = e.leader().map(|l| (l.pid, l.start_time));
    let monitor = e.monitor().map(|l| l.pid);
    seen.into_iter().filter(move |m| Some(*m) != leader && Some(m.0) != monitor)
}
