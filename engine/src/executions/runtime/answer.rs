//! The liveness answer a release asks for: who of a session still runs,
//! from cgroups and, in `/proc` mode or for executions without a cgroup,
//! from `/proc` probes.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Mode, Runtime};
use crate::executions::cgroup::{self, Subtree};
use crate::executions::execution::{ExecState, Execution};
use crate::executions::procfs::{Probe, QUIET_PROBES};
use crate::executions::{Liveness, SessionKey};
use crate::sys::lock;

impl Runtime {
    /// Who of session `key` still runs, for a release. Call it under the
    /// session's admission barrier (nothing of the session can start
    /// meanwhile, so what runs can only end).
    ///
    /// Counted: every unresolved execution of the session with anything
    /// left (its leader, its populated cgroup, or in `/proc` mode its
    /// group, session, marked or unreadable processes, two probes in a
    /// row); every record that cannot be read; in cgroup mode every
    /// populated cgroup below `executions/` that no execution accounts
    /// for; in `/proc` mode, when this process is a subreaper, every process
    /// reparented to it that no execution accounts for. Any doubt is
    /// counted.
    pub fn liveness(&self, key: &SessionKey) -> Liveness {
        self.adopt();
        let mut found = Vec::new();
        let mut proc_execs = Vec::new();
        for e in self.executions() {
            if !e.state().is_unresolved() || !e.is_of(key) {
                continue;
            }
            if let Some(why) = &e.unreadable {
                found.push(format!("execution {} has a record that cannot be read ({why})", e.id));
                continue;
            }
            if e.state() == ExecState::Running && !e.adopted {
                let pid = e.leader().map_or_else(|| "?".to_owned(), |l| l.pid.to_string());
                found.push(format!("command {} is running (pid {pid})", e.id));
                continue;
            }
            match &e.cgroup {
                Some(cg) => match cgroup::populated(cg) {
                    Ok(false) => {
                        if let ExecState::Lingering(code) = e.state() {
                            self.resolve(&e, code);
                        }
                    }
                    Ok(true) => {
                        found.push(format!("command {} left process(es) running in cgroup {}", e.id, cg.display()))
                    }
                    Err(err) => {
                        found.push(format!("cannot tell whether command {} runs: {}: {err}", e.id, cg.display()))
                    }
                },
                None => proc_execs.push(e),
            }
        }
        match &self.mode {
            Mode::Cgroup(s) => self.unaccounted_cgroups(s, &mut found),
            Mode::Proc => {}
        }
        if let Err(err) = self.proc_check(key, &proc_execs, &mut found) {
            found.push(format!("cannot tell what still runs: {err}"));
        }
        Liveness { running: found.len(), detail: if found.is_empty() { None } else { Some(found.join("; ")) } }
    }

    fn unaccounted_cgroups(&self, s: &Subtree, found: &mut Vec<String>) {
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

    /// The `/proc` part of [`Runtime::liveness`]: two probes in a row.
    fn proc_check(
        &self,
        key: &SessionKey,
        execs: &[Arc<Execution>],
        found: &mut Vec<String>,
    ) -> Result<(), crate::liveness::ProcError> {
        let cgroup_mode = matches!(self.mode, Mode::Cgroup(_));
        if cgroup_mode && execs.is_empty() {
            return Ok(());
        }
        for round in 0..QUIET_PROBES {
            let mut probe = Probe::take(self.pid)?;
            let mut named: HashSet<i32> = HashSet::new();
            let mut here = Vec::new();
            for e in execs {
                let members = probe.members(&e.id, e.leader())?;
                if !members.is_empty() {
                    named.extend(members.iter().copied());
                    here.push(format!("command {} left process(es) {members:?} running", e.id));
                }
            }
            if !cgroup_mode && self.subreaper {
                let leaders = lock(&self.children).clone();
                for pid in probe.orphans(self.pid, &leaders) {
                    if named.contains(&pid) || !probe.refresh(pid) || lock(&self.children).contains(&pid) {
                        continue;
                    }
                    let mut owner = None;
                    for e in self.executions().into_iter().filter(|e| e.state().is_unresolved()) {
                        if probe.belongs(pid, &e.id, e.leader())? {
                            owner = Some(e);
                            break;
                        }
                    }
                    match owner {
                        Some(e) if e.is_of(key) => here.push(format!("process {pid} of command {} still runs", e.id)),
                        Some(_) => {}
                        None => here.push(format!(
                            "process {pid} was reparented to the guardian and no execution accounts for it; \
                             releases wait until it exits"
                        )),
                    }
                }
            }
            if !here.is_empty() {
                found.extend(here);
                return Ok(());
            }
            let _ = round;
        }
        Ok(())
    }
}
