//! The processes that earlier snapshots read and found started before the
//! bound a snapshot was asked for, each held by a pidfd with its start
//! time, so that a later snapshot with a bound above that start time can
//! pass over them with one `poll(2)` instead of reading each one's owner
//! and `stat` again ([`snapshot_since`](super::table::snapshot_since)).
//!
//! Why a passed-over process is one the caller does not need:
//! - A caller asks for every process started at or after a bound `since`
//!   (a liveness answer: the start of the oldest monitor or leader it looks
//!   at). A process's start time (field 22 of `stat`) is fixed for its
//!   life: `execve(2)` keeps it.
//! - The pidfd is opened *before* the `stat` that shows the start time (as
//!   for kernel threads, `kthreads.rs`): a pidfd that does not poll
//!   readable names a process that is alive now and had that pid when the
//!   `stat` was read, so the start time remembered is its own, and it is
//!   still below `since`. Its pid cannot have passed to another process
//!   meanwhile.
//! - A process started before `since` is no descendant, group or session
//!   member of a process started at or after `since`: those are joined by
//!   birth (a group from inside its session), and a process is born after
//!   its ancestors. It carries no marker that a caller asks about only
//!   among processes started at or after `since` (the runtime's marker
//!   rule: a marker is inherited, `runtime/src/probe.rs`). What a caller
//!   asks about older processes (a member it remembers, a process in a
//!   cgroup) it reads by pid, or it asks for a bound of 0.
//! - The pidfd, like the `stat` read, is of the caller's PID namespace: a
//!   `/proc` of another namespace remembers and passes over nothing
//!   ([`super::kthreads::proc_is_ours`]).
//! - Any doubt (the poll fails, a pidfd polls readable or in error)
//!   forgets that pid, or all of them, and the next snapshot reads it.
//!
//! They are held in the kernel threads' set (`kthreads.rs`), within its
//! share of the descriptors; those past its cap are read by every
//! snapshot, as before.
//!
//! # References
//! - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
//! - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html) (`starttime`)

use std::collections::HashSet;

use super::kthreads::{max_remembered, KERNEL_THREAD, KNOWN};
use crate::sys::pidfd_of;

/// The remembered processes that started before `since` and are still
/// alive: a snapshot since `since` may pass over these pids. Forgets those
/// that exited; forgets all of them when the poll fails.
pub(crate) fn alive_before(since: u64) -> HashSet<i32> {
    if since == 0 {
        return HashSet::new();
    }
    KNOWN.alive_where(|start| start < since && start != KERNEL_THREAD)
}

/// Opens a pidfd of `pid`, then calls `start_time` (which reads its `stat`
/// again); remembers the pidfd tagged with that start time when it is
/// `seen` (the start time the snapshot read). Returns whether it is
/// remembered.
pub(crate) fn remember(pid: i32, seen: u64, start_time: impl FnOnce() -> Option<u64>) -> bool {
    let Some(fd) = pidfd_of(pid) else { return false };
    if start_time() != Some(seen) {
        return false;
    }
    KNOWN.insert_tagged(pid, fd, seen, max_remembered())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered process is passed over only by bounds above its start
    /// time, and only while it lives; a start time that does not match
    /// the one read after the pidfd is not remembered.
    #[test]
    fn a_process_is_passed_over_below_bounds_above_its_start_and_while_it_lives() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        if pidfd_of(pid).is_none() {
            eprintln!("SKIPPED: no pidfd can be opened here");
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
        assert!(!remember(pid, 100, || Some(101)), "remembered with a start time the re-read did not show");
        assert!(!alive_before(u64::MAX).contains(&pid));
        assert!(remember(pid, 100, || Some(100)));
        assert!(alive_before(101).contains(&pid));
        assert!(!alive_before(100).contains(&pid), "passed over by a bound at its start time");
        assert!(!alive_before(0).contains(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive_before(101).contains(&pid), "an exited process is still passed over");
    }
}
