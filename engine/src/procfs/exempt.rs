//! What the exempt processes (the guardian and its frontends) hold
//! themselves, for the release's `in_use` step when the kernel refused a
//! lease that no other process's table explains.
//!
//! # References
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
//! - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)

use std::collections::HashSet;

use super::views::{fds_of, mapped, threads_of};
use super::{open_proc, read_file};
use crate::identity::PhysicalId;

/// The targets that the processes `pids` themselves hold (every thread's
/// descriptor table and the memory map), not counting the descriptors
/// `skip` names (`(pid, descriptor)`: the caller's own descriptors, whose
/// open file descriptions a lease on them does not count). A process or
/// view that cannot be read explains nothing.
///
/// The release's `in_use` step asks this of the exempt processes (the
/// guardian and its frontends) when the kernel refused a lease on a
/// target and no other process's table showed a holder: a target they
/// hold is explained, any other is open somewhere no table shows.
///
/// # References
/// - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
/// - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
pub fn held_by(pids: &[i32], targets: &HashSet<PhysicalId>, skip: &[(i32, u32)]) -> HashSet<PhysicalId> {
    let mut found = HashSet::new();
    let Ok(proc) = open_proc() else { return found };
    let devs: HashSet<u64> = targets.iter().map(|t| t.dev).collect();
    let mut buf = Vec::new();
    for &pid in pids {
        let skip: Vec<u32> = skip.iter().filter(|(p, _)| *p == pid).map(|(_, n)| *n).collect();
        let mut views = vec![format!("{pid}")];
        views.extend(threads_of(&proc, pid).into_iter().filter(|t| *t != pid).map(|t| format!("{pid}/task/{t}")));
        for view in &views {
            // Every holding descriptor, not only the first.
            let _ = fds_of(&proc, pid, view, targets, &skip, &mut |h| {
                found.insert(h.target);
                false
            });
        }
        if let Ok(Some(n)) = read_file(&proc, &format!("{pid}/maps"), &mut buf) {
            found.extend(mapped(&buf[..n], &devs, targets));
        }
    }
    found
}
