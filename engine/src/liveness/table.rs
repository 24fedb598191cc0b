//! A snapshot of every process's `stat` and owner.
//!
//! # References
//! - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, StatxFlags};

use super::stat::{read_stat_into, ProcStat};
use super::{is_gone, open_proc, ProcError};

/// One process of a [`ProcTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcEntry {
    /// Its `stat` fields.
    pub stat: ProcStat,
    /// The owner of `/proc/<pid>`: the effective uid of a dumpable process,
    /// root for one that made itself non-dumpable.
    pub uid: u32,
}

/// Every process that existed while the snapshot was taken (a process that
/// started or ended meanwhile may be absent), with the `/proc` handle used.
pub struct ProcTable {
    /// The `/proc` handle, for further reads of the same processes.
    pub proc: OwnedFd,
    /// Processes by pid.
    pub entries: HashMap<i32, ProcEntry>,
}

impl ProcTable {
    /// The entry of `pid`, if it was seen.
    pub fn get(&self, pid: i32) -> Option<&ProcEntry> {
        self.entries.get(&pid)
    }

    /// Whether `pid` was seen with exactly `start_time` and had not exited.
    pub fn is_alive(&self, pid: i32, start_time: u64) -> bool {
        self.entries.get(&pid).is_some_and(|e| e.stat.start_time == start_time && !e.stat.is_zombie())
    }

    /// Iterates over the entries.
    pub fn iter(&self) -> impl Iterator<Item = &ProcEntry> {
        self.entries.values()
    }
}

/// Lists the numeric entries of `/proc`.
pub(crate) fn list_pids(proc: impl AsFd) -> Result<Vec<i32>, ProcError> {
    let dup = rustix::io::dup(proc).map_err(|e| ProcError::Unavailable(e.into()))?;
    let mut dir = rustix::fs::Dir::new(dup).map_err(|e| ProcError::Unavailable(e.into()))?;
    let mut pids = Vec::with_capacity(512);
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(|e| ProcError::Unavailable(e.into()))?;
        if let Some(pid) = entry.file_name().to_str().ok().and_then(|s| s.parse::<i32>().ok()) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The owner uid of `/proc/<pid>`, or `None` when the process is gone.
pub(crate) fn owner_of(proc: impl AsFd, pid: i32) -> Result<Option<u32>, ProcError> {
    match rustix::fs::statx(proc, format!("{pid}").as_str(), AtFlags::SYMLINK_NOFOLLOW, StatxFlags::UID) {
        Ok(st) => Ok(Some(st.stx_uid)),
        Err(e) if is_gone(e) => Ok(None),
        Err(e) => Err(ProcError::Unreadable { pid, file: "", error: e.into() }),
    }
}

/// Takes a snapshot of every process's `stat` and owner.
///
/// A process that exits while it is read is left out. Fails only when
/// `/proc` itself cannot be read, or when a `stat` of an existing process
/// cannot be read (callers treat both as "cannot tell").
///
/// # References
/// - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
/// - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
pub fn snapshot() -> Result<ProcTable, ProcError> {
    let proc = open_proc()?;
    let pids = list_pids(&proc)?;
    if pids.is_empty() {
        return Err(ProcError::Unavailable(std::io::Error::other("/proc lists no process")));
    }
    let mut entries = HashMap::with_capacity(pids.len());
    let mut buf = Vec::with_capacity(512);
    for pid in pids {
        let Some(uid) = owner_of(&proc, pid)? else { continue };
        let Some(stat) = read_stat_into(&proc, pid, &mut buf)? else { continue };
        entries.insert(pid, ProcEntry { stat, uid });
    }
    Ok(ProcTable { proc, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sees_this_process_and_a_child() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let t = snapshot().unwrap();
        let me = std::process::id() as i32;
        let mine = t.get(me).unwrap();
        assert_eq!(mine.uid, rustix::process::geteuid().as_raw());
        let c = t.get(child.id() as i32).unwrap();
        assert_eq!(c.stat.ppid, me);
        assert!(t.is_alive(c.stat.pid, c.stat.start_time));
        assert!(!t.is_alive(c.stat.pid, c.stat.start_time + 1));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
