//! Processes remembered by pidfd, so that "is it still the same process?"
//! is one `poll(2)` for all of them instead of a `/proc/<pid>/stat` read
//! each.
//!
//! A pidfd refers to the process that had the pid when it was opened, and
//! polls readable once that process has exited (a zombie included). So a
//! remembered pidfd that does not poll readable names a process that is
//! alive now and had that pid when the pidfd was opened; its pid cannot
//! have passed to another process meanwhile. What the caller checked about
//! the process *after* opening the pidfd (and before remembering it) is
//! therefore about that same process. Any doubt (the poll fails, a pidfd
//! polls readable or in error) forgets the pid, or all of them.
//!
//! A pidfd is opened by a pid of the caller's PID namespace.
//!
//! # References
//! - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
//! - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

/// Opens a pidfd of `pid` (of this process's PID namespace); `None` when
/// the process is gone or pidfds are not available (Linux before 5.3, a
/// seccomp filter).
pub fn pidfd_of(pid: i32) -> Option<OwnedFd> {
    pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()
}

/// A set of processes, each held by a pidfd (module docs).
#[derive(Debug, Default)]
pub struct Remembered {
    /// Each pid's pidfd and the caller's tag of it (0 from [`Remembered::insert`]).
    map: Mutex<Option<HashMap<i32, (OwnedFd, u64)>>>,
}

impl Remembered {
    /// An empty set (usable in a `static`).
    pub const fn new() -> Remembered {
        Remembered { map: Mutex::new(None) }
    }

    /// Remembers `pid` by `fd`, a pidfd of it opened *before* whatever the
    /// caller checked about it, unless `cap` pids are remembered already;
    /// replaces an earlier pidfd of the same pid. Returns whether it is
    /// remembered.
    pub fn insert(&self, pid: i32, fd: OwnedFd, cap: usize) -> bool {
        self.insert_tagged(pid, fd, 0, cap)
    }

    /// [`Remembered::insert`] with `tag`, a fact about the process that
    /// never changes while it lives (its start time, say), which
    /// [`Remembered::alive_where`] filters by.
    pub fn insert_tagged(&self, pid: i32, fd: OwnedFd, tag: u64, cap: usize) -> bool {
        let mut g = super::lock(&self.map);
        let map = g.get_or_insert_with(HashMap::new);
        if map.len() >= cap && !map.contains_key(&pid) {
            return false;
        }
        map.insert(pid, (fd, tag));
        true
    }

    /// Whether `pid` is remembered and its process has not exited (one
    /// `poll`); forgets it when it has, or when that cannot be told.
    #[cfg(test)]
    pub fn holds(&self, pid: i32) -> bool {
        let mut g = super::lock(&self.map);
        let Some(map) = g.as_mut() else { return false };
        let Some((fd, _)) = map.get(&pid) else { return false };
        let mut polled = [PollFd::new(fd, PollFlags::IN)];
        let alive =
            poll(&mut polled, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).is_ok() && polled[0].revents().is_empty();
        if !alive {
            map.remove(&pid);
        }
        alive
    }

    /// The remembered pids whose processes have not exited (one `poll` for
    /// all); forgets the others, and every pid when the poll fails.
    pub fn alive(&self) -> HashSet<i32> {
        self.alive_where(|_| true)
    }

    /// [`Remembered::alive`], of the pids whose tag `keep` accepts (one
    /// `poll` for all of them; the others are not polled).
    pub fn alive_where(&self, keep: impl Fn(u64) -> bool) -> HashSet<i32> {
        let mut g = super::lock(&self.map);
        let Some(map) = g.as_mut() else { return HashSet::new() };
        let pids: Vec<i32> = map.iter().filter(|(_, (_, tag))| keep(*tag)).map(|(pid, _)| *pid).collect();
        let gone: HashSet<i32> = {
            let fds: Vec<_> = pids.iter().map(|p| map[p].0.as_fd()).collect();
            let mut polled: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::new(fd, PollFlags::IN)).collect();
            match poll(&mut polled, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
                Ok(_) => {
                    pids.iter().zip(&polled).filter(|(_, p)| !p.revents().is_empty()).map(|(pid, _)| *pid).collect()
                }
                Err(_) => pids.iter().copied().collect(),
            }
        };
        for pid in &gone {
            map.remove(pid);
        }
        pids.into_iter().filter(|p| !gone.contains(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_process_is_forgotten_and_the_cap_holds() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let Some(fd) = pidfd_of(pid) else {
            eprintln!("SKIPPED: no pidfd can be opened here");
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        };
        let set = Remembered::new();
        assert!(set.insert(pid, fd, 1));
        assert!(set.holds(pid) && set.alive().contains(&pid));
        // Full: another pid is not remembered, the same one is replaced.
        assert!(!set.insert(1, pidfd_of(1).unwrap(), 1));
        assert!(set.insert(pid, pidfd_of(pid).unwrap(), 1));
        child.kill().unwrap();
        // A zombie has exited: not alive, before it is reaped too.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!set.holds(pid), "a process that exited is still held");
        child.wait().unwrap();
        assert!(!set.alive().contains(&pid));
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let o = other.id() as i32;
        assert!(set.insert(o, pidfd_of(o).unwrap(), 1));
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(set.alive().is_empty());
    }
}
