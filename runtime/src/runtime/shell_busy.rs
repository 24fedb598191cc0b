//! Whether a shell is busy, by the whole idle rule (`shell/idle.rs`): its
//! rules 1–4 on the shell itself, then rule 5, the runtime's union, two
//! looks in a row finding nothing of its execution but its own process.

use super::Runtime;
use crate::shell::Shell;

impl Shell {
    /// Why the shell is busy, or `None` when it is idle (the rule of
    /// `shell/idle.rs`).
    /// Call it under the session's admission barrier, so that nothing is
    /// written to the terminal meanwhile.
    pub fn busy(&self, rt: &Runtime) -> Option<String> {
        let pid = match self.busy_before_union() {
            Ok(pid) => pid,
            Err(why) => return Some(why),
        };
        let id = &self.core.execution.id;
        // The runtime's union, two looks in a row finding nothing.
        for _ in 0..crate::probe::QUIET_PROBES {
            let found = rt.still_running(&self.core.execution, &[pid]);
            if !found.is_empty() {
                return Some(format!("shell {id}: {}", found.join("; ")));
            }
        }
        None
    }
}
