//! The processes a shell left running, by pid, for a caller's
//! `still_running` (the idle rule itself asks the runtime's union,
//! `union.rs`).

use super::Runtime;
use crate::cgroup;
use crate::probe::Probe;
use crate::shell::Shell;

impl Runtime {
    /// The pids `shell` left running (its own process excepted): its
    /// cgroup's processes, the `/proc` members of its execution and their
    /// descendants, its remembered members; an error when that cannot be
    /// told.
    pub fn shell_jobs(&self, shell: &Shell) -> Result<Vec<i32>, String> {
        let e = shell.execution();
        let own: Vec<i32> = shell.pid().into_iter().collect();
        let mut pids = std::collections::BTreeSet::new();
        if let Some(cg) = &e.cgroup {
            pids.extend(cgroup::procs(cg).map_err(|err| format!("{}: {err}", cg.display()))?);
        }
        // Of the processes started since its monitor and leader.
        let mut probe = Probe::take_since(self.pid, e.processes_since()).map_err(|err| err.to_string())?;
        let (sure, doubtful) = probe.members_split(&e.id, e.leader()).map_err(|err| err.to_string())?;
        let (remembered, _) = e.members.alive();
        let mut roots = sure.clone();
        roots.extend(&remembered);
        pids.extend(probe.descendants(&roots).map_err(|err| err.to_string())?);
        pids.extend(sure);
        if !self.ancestry_decides(e) {
            pids.extend(doubtful);
        }
        pids.extend(remembered);
        Ok(pids.into_iter().filter(|p| !own.contains(p)).collect())
    }
}
