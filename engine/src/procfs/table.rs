//! A snapshot of every process's `stat` and owner.
//!
//! `/proc` is listed, every listed process is read, and `/proc` is listed
//! again, until a listing shows no process that was not read (a fixed
//! point). A process that forks a successor and exits between the listing
//! and its read is then not lost: the successor shows up in the next
//! listing. A chain of processes that keeps doing so never lets the
//! snapshot settle, and the snapshot fails ("cannot tell") after
//! [`SETTLE_ROUNDS`] listings.
//!
//! # References
//! - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)

use std::collections::{HashMap, HashSet};
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
    // A new open file description each time: a `dup` would share the
    // directory offset, and a second listing would start at the end.
    let fresh = rustix::fs::openat(
        proc,
        ".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| ProcError::Unavailable(e.into()))?;
    let mut dir = rustix::fs::Dir::new(fresh).map_err(|e| ProcError::Unavailable(e.into()))?;
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

/// Listings of `/proc` a snapshot may take before it gives up settling.
pub const SETTLE_ROUNDS: usize = 16;

/// Takes a snapshot of every process's `stat` and owner: every process that
/// ran when the last listing of `/proc` was taken has been read (see the
/// module's docs).
///
/// A process that exits while it is read is left out. Fails when `/proc`
/// itself cannot be read, when a `stat` of an existing process cannot be
/// read, or when new processes keep appearing for [`SETTLE_ROUNDS`]
/// listings (callers treat all three as "cannot tell").
///
/// Caveat: a pid that is freed and reused by another process between two
/// listings is read once, as the first of the two (pids are reused only
/// after `pid_max` allocations).
///
/// # References
/// - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
/// - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
pub fn snapshot() -> Result<ProcTable, ProcError> {
    let proc = open_proc()?;
    let mut listed: HashSet<i32> = HashSet::with_capacity(512);
    let mut entries = HashMap::with_capacity(512);
    let mut buf = Vec::with_capacity(512);
    for round in 0..=SETTLE_ROUNDS {
        let pids = list_pids(&proc)?;
        if round == 0 && pids.is_empty() {
            return Err(ProcError::Unavailable(std::io::Error::other("/proc lists no process")));
        }
        let fresh: Vec<i32> = pids.into_iter().filter(|p| listed.insert(*p)).collect();
        if fresh.is_empty() {
            return Ok(ProcTable { proc, entries });
        }
        if round == SETTLE_ROUNDS {
            break;
        }
        for pid in fresh {
            let Some(uid) = owner_of(&proc, pid)? else { continue };
            let Some(stat) = read_stat_into(&proc, pid, &mut buf)? else { continue };
            entries.insert(pid, ProcEntry { stat, uid });
        }
    }
    Err(ProcError::Unavailable(std::io::Error::other(format!(
        "new processes kept appearing over {SETTLE_ROUNDS} listings of /proc (a process forking successors?)"
    ))))
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

    /// Stops a chain of processes: the file it looks for, then its group killed.
    struct Stop(std::path::PathBuf, i32);

    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, b"");
            std::thread::sleep(std::time::Duration::from_millis(200));
            let _ = rustix::process::kill_process_group(
                rustix::process::Pid::from_raw(self.1).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
    }

    /// A chain of processes, each forking the next and exiting at once: every
    /// snapshot either shows a live member of the chain or fails. (Listed
    /// once and read later, most snapshots showed none.)
    #[test]
    fn a_chain_that_forks_successors_and_exits_is_never_missed() {
        let dir = tempfile::tempdir().unwrap();
        let stop = dir.path().join("stop");
        // Each process forks its successor and exits at once.
        let script = "import os,sys\n\
            while not os.path.exists(sys.argv[1]):\n    \
                if os.fork():\n        os._exit(0)\n";
        let mut cmd = std::process::Command::new("/usr/bin/python3");
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let Ok(mut chain) = cmd.args(["-c", script]).arg(&stop).spawn() else {
            eprintln!("skipped: /usr/bin/python3 cannot be run here");
            return;
        };
        let pgid = chain.id() as i32;
        chain.wait().unwrap();
        let stop_guard = Stop(stop.clone(), pgid);
        let (mut seen, mut failed) = (0, 0);
        for _ in 0..30 {
            match snapshot() {
                Ok(t) => {
                    assert!(
                        t.iter().any(|e| e.stat.pgid == pgid && !e.stat.is_zombie()),
                        "a snapshot showed no live member of the chain (after {seen} that did)"
                    );
                    seen += 1;
                }
                Err(_) => failed += 1,
            }
        }
        drop(stop_guard);
        eprintln!("chain: {seen} snapshots saw it, {failed} could not settle");
    }
}
