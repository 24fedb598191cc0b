//! The liveness answer a release asks for: who of a session still runs, by
//! the union of cgroups, `/proc` signals and remembered members
//! (`union.rs`), and what no execution accounts for.

use std::sync::Arc;

use super::{Mode, Runtime};
use crate::cgroup::{self, Subtree};
use crate::execution::{oldest_since, ExecState, Execution};
use crate::liveness::Liveness;
use crate::probe::{Probe, QUIET_PROBES};
use crate::session::SessionKey;
use winx_release_kernel::sys::lock;

impl Runtime {
    /// Who of session `key` still runs, for a release. Call it under the
    /// session's admission barrier (nothing of the session can start
    /// meanwhile, so what runs can only end).
    ///
    /// Counted: every unresolved execution of the session of which anything
    /// is left by the union of `union.rs` (its cgroup's processes, its
    /// leader, group, session, marked or unreadable processes and their
    /// descendants, its remembered members; two `/proc` snapshots in a row
    /// must find nothing), every record that cannot be read, and, for every
    /// session: in cgroup mode every process in the subtree's root or in
    /// `executions/` itself and every populated cgroup below `executions/`
    /// that no execution accounts for; when this process is a subreaper,
    /// every process reparented to it, unless a look saw it as kin of
    /// executions before (then for their threads alone; with nothing else
    /// to look at, this process's own children are read first, and the
    /// snapshots only when they show a child that is no leader). Any
    /// doubt is counted, `D/executions` that cannot be listed among it.
    /// Every member seen is recorded durably before this returns.
    ///
    /// Caveat: a session is its directory here. When a thread's session
    /// directory is removed or moved and made again (a new inode), the
    /// commands its earlier directory's session started are another
    /// session's to this answer; a host that can make a thread's directory
    /// again asks [`Runtime::thread_liveness`].
    pub fn liveness(&self, key: &SessionKey) -> Liveness {
        self.answer(&Asked { key, thread: None })
    }

    /// [`Runtime::liveness`] of the session `key` of thread `thread`,
    /// counting every execution of that thread as well, whichever
    /// directory its session had: the contract's `execution_active` is "a
    /// command of the thread", and a thread whose session directory was
    /// removed (`rm -rf "$WINX_TEMP_DIR"`) and made again still has the
    /// commands it started before.
    pub fn thread_liveness(&self, key: &SessionKey, thread: &str) -> Liveness {
        self.answer(&Asked { key, thread: Some(thread) })
    }

    fn answer(&self, asked: &Asked<'_>) -> Liveness {
        let mut found = Vec::new();
        // An execution an earlier runtime left could be among what cannot
        // be read: doubt, counted for every session.
        if let Err(why) = self.adopt() {
            found.push(format!("{why}: an execution an earlier guardian started could still run"));
        }
        let mut candidates: Vec<Arc<Execution>> = Vec::new();
        // Shells at their prompt, with their own process (never counted).
        let mut shells: Vec<(Arc<Execution>, i32)> = Vec::new();
        for e in self.executions() {
            if !e.state().is_unresolved() || !asked.owns(&e) {
                continue;
            }
            if let Some(why) = &e.unreadable {
                found.push(format!("execution {} has a record that cannot be read ({why})", e.id));
                continue;
            }
            // A live shell: busy counts, an idle one's own process not;
            // one at its prompt is asked the union below, with the rest.
            if let Some(state) = self.shell_before_union(&e) {
                match state {
                    Ok(pid) => shells.push((e, pid)),
                    Err(why) => found.push(why),
                }
                continue;
            }
            // A leader that has exited while its monitor's report is on its
            // way: what it left is looked for below, with the rest.
            let leader_runs =
                e.leader().is_none_or(|l| crate::probe::start_time_of(l.pid).is_some_and(|st| l.may_be(st)));
            if e.state() == ExecState::Running && !e.adopted && leader_runs {
                let pid = e.leader().map_or_else(|| "?".to_owned(), |l| l.pid.to_string());
                found.push(format!("command {} is running (pid {pid})", e.id));
                // Remembered now, should they leave the cgroup later.
                self.note_cgroup_members(&e);
                found.extend(self.persist_members(&e));
                continue;
            }
            candidates.push(e);
        }
        if let Mode::Cgroup(s) = &self.mode {
            self.unaccounted_cgroups(s, &mut found);
        }
        // The `/proc` part: needed for every candidate and shell, and in
        // both modes for orphans when this process is a subreaper (an
        // orphan may have moved itself into another execution's cgroup:
        // that adds it to the other, and it still counts here).
        // The executions are looked at in tables of the processes started
        // since the oldest of their monitors and leaders (`oldest_since`):
        // nothing older can be theirs, and the older processes an earlier
        // snapshot read are passed over (`Probe::take_since`).
        // The orphans are looked for after that, in the runtime's own
        // children (`no_orphans`, a few files); anything else they show,
        // or any doubt, is looked at in the whole table, with the
        // executions again. After, not before: a process that a monitor
        // killed meanwhile left is that monitor's descendant until its
        // death and this process's child from then on, so one of the two
        // looks sees it.
        let mut quiet = true;
        if !candidates.is_empty() || !shells.is_empty() {
            let since = oldest_since(candidates.iter().chain(shells.iter().map(|(e, _)| e)).map(|e| &**e));
            let checked = self.proc_check(asked, &candidates, &shells, &mut found, since, false);
            quiet = counted(checked, &mut found);
        }
        if quiet && self.subreaper && !self.no_orphans() {
            let checked = self.proc_check(asked, &candidates, &shells, &mut found, 0, true);
            quiet = counted(checked, &mut found);
        }
        if quiet {
            // Two snapshots in a row found nothing of them.
            for e in &candidates {
                if let ExecState::Lingering(code) = e.state() {
                    self.resolve(e, code);
                }
            }
        }
        for e in candidates.iter().chain(shells.iter().map(|(e, _)| e)) {
            found.extend(self.persist_members(e));
        }
        Liveness { running: found.len(), detail: if found.is_empty() { None } else { Some(found.join("; ")) } }
    }

    /// Reads the processes of `e`'s cgroup and remembers them as members.
    pub(super) fn note_cgroup_members(&self, e: &Execution) {
        let Some(cg) = &e.cgroup else { return };
        if let Ok(pids) = cgroup::procs(cg) {
            let seen = pids.into_iter().filter_map(|p| super::probe::start_time_of(p).map(|st| (p, st)));
            e.members.note(super::union::not_leader(e, seen));
        }
    }

    fn unaccounted_cgroups(&self, s: &Subtree, found: &mut Vec<String>) {
        match cgroup::unaccounted(s) {
            Ok(pids) if pids.is_empty() => {}
            Ok(pids) => found.push(format!(
                "process(es) {pids:?} are in {} or its executions/ cgroup, where no execution accounts for them; \
                 releases wait until they leave or exit",
                s.root().display()
            )),
            Err(err) => found.push(format!("cannot read the processes of {}: {err}", s.root().display())),
        }
        let cgroups = match s.execution_cgroups() {
            Ok(c) => c,
            Err(err) => {
                found.push(format!("cannot list {}: {err}", s.root().display()));
                return;
            }
        };
        for (name, path) in cgroups {
            let accounted = lock(&self.table).get(&name).is_some_and(|e| !e.state().is_final());
            if accounted {
                continue;
            }
            match cgroup::populated(&path) {
                Ok(false) => cgroup::remove_if_empty(&path),
                Ok(true) => found.push(format!(
                    "cgroup {} has processes that no unresolved execution accounts for; releases wait until it is empty",
                    path.display()
                )),
                Err(err) => found.push(format!("cannot read {}: {err}", path.display())),
            }
        }
    }

    /// The `/proc` part of [`Runtime::liveness`]: up to two snapshots in a
    /// row of the processes started since `since`, each looked at for
    /// every execution in `execs`, for every shell in `shells` (its own
    /// process excepted: rule 5 of `shell/idle.rs`, asked of all of them
    /// on the same snapshots instead of two snapshots per shell) and, with
    /// `orphans`, for orphans (which takes the whole table,
    /// `Probe::orphans`). `Ok(true)` when both found nothing.
    fn proc_check(
        &self,
        asked: &Asked<'_>,
        execs: &[Arc<Execution>],
        shells: &[(Arc<Execution>, i32)],
        found: &mut Vec<String>,
        since: u64,
        orphans: bool,
    ) -> Result<bool, winx_release_kernel::procfs::ProcError> {
        for _ in 0..QUIET_PROBES {
            let mut probe = Probe::take_since(self.pid, since)?;
            let mut here = Vec::new();
            for e in execs {
                here.extend(self.look(e, &[], &mut probe));
            }
            for (e, pid) in shells {
                here.extend(self.look(e, &[*pid], &mut probe).into_iter().map(|f| format!("shell {}: {f}", e.id)));
            }
            if orphans {
                self.orphans(asked, &mut probe, &mut here)?;
            }
            if !here.is_empty() {
                found.extend(here);
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether [`QUIET_PROBES`] looks in a row at this process's own
    /// children (`procfs::own_children`: its threads' `children` files,
    /// each look complete) showed no child but the leaders and monitors it
    /// spawned (`children`, read after the looks: one spawned meanwhile is
    /// in it, one reaped meanwhile is not and counts as a doubt). Then
    /// `orphans` would find nothing on two snapshots either: an
    /// orphan is a process whose parent is this one and is no leader, and
    /// every process that is this process's child for the whole of a look
    /// is in it. `false` when any other child was seen (an orphan, a
    /// zombie not reaped yet) or it cannot be told: the caller then looks
    /// at the whole table.
    fn no_orphans(&self) -> bool {
        let Some(seen) = winx_release_kernel::procfs::own_children(QUIET_PROBES as usize) else { return false };
        let leaders = lock(&self.children);
        seen.iter().all(|p| leaders.contains(p))
    }

    /// Processes reparented to this process (a subreaper) that are not
    /// leaders. An orphan lost its ancestry: whoever it says it is (its
    /// marker, its cgroup, whatever it claimed before) adds it to those
    /// executions and takes it from none, so it counts for every session
    /// until it ends, unless a look saw it as a kin member of executions
    /// before it was orphaned (`members.rs`, `Members::note_kin`):
    /// then it is certainly theirs, and counts for each of their threads
    /// and for whatever else claims it.
    fn orphans(
        &self,
        asked: &Asked<'_>,
        probe: &mut Probe,
        here: &mut Vec<String>,
    ) -> Result<(), winx_release_kernel::procfs::ProcError> {
        let leaders = lock(&self.children).clone();
        for pid in probe.orphans(self.pid, &leaders)? {
            if !probe.refresh(pid) || lock(&self.children).contains(&pid) {
                continue;
            }
            let start = probe.start_time(pid).unwrap_or(0);
            let cgroup_of = cgroup::dir_of(pid);
            let mut kin_of = Vec::new();
            let mut claimed_by = Vec::new();
            for e in self.executions().into_iter().filter(|e| e.state().is_unresolved()) {
                let in_cgroup = matches!((&e.cgroup, &cgroup_of), (Some(cg), Some(d)) if d.starts_with(cg));
                // A leader whose monitor was killed: the runtime recorded
                // it (pid and start time) when it spawned it.
                let its_leader = e.leader().is_some_and(|l| l.pid == pid && l.may_be(start));
                if its_leader || e.members.contains_kin(pid, start) {
                    kin_of.push(e);
                } else if e.members.contains(pid, start) || in_cgroup || probe.belongs(pid, &e.id, e.leader())? {
                    claimed_by.push(e);
                }
            }
            if kin_of.is_empty() {
                let claims: Vec<&str> = claimed_by.iter().map(|e| e.id.as_str()).collect();
                let claims = if claims.is_empty() {
                    "no execution accounts for it".to_owned()
                } else {
                    format!(
                        "it claims command(s) {claims:?} (a marker or cgroup a process can take from any execution)"
                    )
                };
                here.push(format!(
                    "process {pid} was reparented to the guardian and {claims}; it counts for every session: \
                     releases wait until it exits"
                ));
                continue;
            }
            let ours: Vec<&str> =
                kin_of.iter().chain(&claimed_by).filter(|e| asked.owns(e)).map(|e| e.id.as_str()).collect();
            if let Some(id) = ours.first() {
                here.push(format!("process {pid} of command {id} still runs"));
            }
        }
        Ok(())
    }
}

/// Whether a `/proc` check found nothing, its failure counted in `found`
/// ("cannot tell" is running).
fn counted(checked: Result<bool, winx_release_kernel::procfs::ProcError>, found: &mut Vec<String>) -> bool {
    checked.unwrap_or_else(|err| {
        found.push(format!("cannot tell what still runs: {err}"));
        false
    })
}

/// Whose liveness is asked: a session, and its thread when the host knows
/// it.
struct Asked<'a> {
    key: &'a SessionKey,
    thread: Option<&'a str>,
}

impl Asked<'_> {
    /// Whether `e` counts for this answer: it is of the session (or of
    /// unknown session), or of the thread.
    fn owns(&self, e: &Execution) -> bool {
        e.is_of(self.key) || self.thread.is_some_and(|t| e.thread == t)
    }
}
