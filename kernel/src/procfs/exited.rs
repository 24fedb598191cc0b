//! Whether a process the holder sweep found has exited as a whole, and
//! whether it is a fork of an exempt process that has not called `exec`
//! yet: the two answers that keep a process out of a sweep's holders
//! (split from `holders`).
//!
//! # References
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
//! - [`proc_pid_task(5)`](https://man7.org/linux/man-pages/man5/proc_pid_task.5.html)
//! - [`proc_pid_exe(5)`](https://man7.org/linux/man-pages/man5/proc_pid_exe.5.html)

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, StatxFlags};

use super::views::threads_of;

/// Whether process `pid` has exited as a whole: gone, or a zombie whose
/// every thread is a zombie or gone. Such a process holds no descriptor and
/// no mapping (`do_exit` drops both before `exit_notify` makes the thread
/// a zombie). A zombie leader with a live thread has not exited: that
/// thread still holds the table and the map.
///
/// # References
/// - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html) (`state`)
/// - [`proc_pid_task(5)`](https://man7.org/linux/man-pages/man5/proc_pid_task.5.html)
pub(super) fn has_exited(proc: &OwnedFd, pid: i32) -> bool {
    let mut buf = Vec::new();
    // `Some(true)`: gone; `Some(false)`: a zombie; `None`: neither, or
    // cannot tell.
    let mut state = |rel: String| match super::read_file(proc, &rel, &mut buf) {
        Ok(None) | Ok(Some(0)) => Some(true),
        Ok(Some(n)) => super::stat::ProcStat::parse(&buf[..n]).filter(|st| st.is_zombie()).map(|_| false),
        Err(_) => None,
    };
    match state(format!("{pid}/stat")) {
        Some(true) => return true,
        Some(false) => {}
        None => return false,
    }
    // Listed after the leader was a zombie: each thread listed is looked
    // at (a zombie's list still holds the leader; an empty one cannot tell).
    let threads = threads_of(proc, pid);
    !threads.is_empty() && threads.into_iter().all(|t| state(format!("{pid}/task/{t}/stat")).is_some())
}

/// Whether `pid` is a child of an exempt process that has not called
/// `execve(2)` yet (it runs the same program image as its parent): between
/// `fork` and `exec` a child holds copies of its parent's descriptors, the
/// close-on-exec ones included, which it never uses. Such a child of the
/// guardian spawning another session's command must not make a target
/// `in_use`.
pub(crate) fn unexeced_fork_of(proc: &OwnedFd, pid: i32, exempt: &[i32]) -> bool {
    let Ok(Some(st)) = super::stat::read_stat(proc, pid) else { return false };
    if !exempt.contains(&st.ppid) {
        return false;
    }
    let image = |p: i32| {
        rustix::fs::statx(proc, format!("{p}/exe").as_str(), AtFlags::STATX_DONT_SYNC, StatxFlags::INO)
            .ok()
            .map(|x| (x.stx_dev_major, x.stx_dev_minor, x.stx_ino))
    };
    matches!((image(pid), image(st.ppid)), (Some(a), Some(b)) if a == b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::open_proc;

    #[test]
    fn a_child_running_its_parents_image_is_a_fork_not_yet_execed() {
        let proc = open_proc().unwrap();
        let me = std::process::id() as i32;
        // This process is its own image; a child that exec'd `sleep` is not.
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!unexeced_fork_of(&proc, child.id() as i32, &[me]));
        assert!(!unexeced_fork_of(&proc, me, &[me]));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
