//! What the exempt processes (the guardian and its frontends) hold
//! themselves, for the release's `in_use` step when the kernel refused a
//! lease that no other process's table explains.
//!
//! # References
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
//! - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)

use std::collections::HashSet;
use std::os::fd::OwnedFd;

use super::views::{fds_of, mapped, threads_of, HowHeld};
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
    match open_proc() {
        Ok(proc) => held_in(&proc, pids, targets, skip),
        Err(_) => HashSet::new(),
    }
}

/// [`held_by`] through the `/proc` handle `proc`.
fn held_in(proc: &OwnedFd, pids: &[i32], targets: &HashSet<PhysicalId>, skip: &[(i32, u32)]) -> HashSet<PhysicalId> {
    let mut found = HashSet::new();
    let devs: HashSet<u64> = targets.iter().map(|t| t.dev).collect();
    let mut buf = Vec::new();
    for &pid in pids {
        let skip: Vec<u32> = skip.iter().filter(|(p, _)| *p == pid).map(|(_, n)| *n).collect();
        let mut views = vec![format!("{pid}")];
        views.extend(threads_of(proc, pid).into_iter().filter(|t| *t != pid).map(|t| format!("{pid}/task/{t}")));
        for view in &views {
            // Every holding descriptor, not only the first; one whose file
            // cannot be identified explains no target.
            let _ = fds_of(proc, pid, view, targets, &skip, &mut |h| {
                if h.how != HowHeld::Uninspectable {
                    found.insert(h.target);
                }
                false
            });
        }
        if let Ok(Some(n)) = read_file(proc, &format!("{pid}/maps"), &mut buf) {
            found.extend(mapped(&buf[..n], &devs, targets));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};

    /// An exempt process's descriptor whose open file cannot be identified
    /// (a link that loops, in a `/proc` stand-in) explains no target: a
    /// target the lease saw open stays unexplained, so `in_use`.
    #[test]
    fn a_descriptor_that_cannot_be_identified_explains_no_target() {
        let tmp = tempfile::tempdir().unwrap();
        let fd_dir = tmp.path().join("42/fd");
        std::fs::create_dir_all(&fd_dir).unwrap();
        std::os::unix::fs::symlink("3", fd_dir.join("3")).unwrap();
        let proc =
            rustix::fs::open(tmp.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let targets: HashSet<_> = [PhysicalId { dev: 1, ino: 2 }].into();
        assert!(held_in(&proc, &[42], &targets, &[]).is_empty());
    }
}
