//! One process's owner and `stat` for a snapshot, read through descriptors
//! kept open since an earlier snapshot read the same process.
//!
//! Reading a process by name (`statx` of `/proc/<pid>`, then `open`, `read`
//! and `close` of `/proc/<pid>/stat`) looks its pid up twice and makes a
//! new open file each time. A snapshot keeps, for each process it read, a
//! descriptor of `/proc/<pid>` and one of its `stat`, and the next snapshot
//! reads that process with a `statx` of the first (`AT_EMPTY_PATH`) and a
//! `pread` at offset 0 of the second: 0.41 of the by-name reads on the
//! development machine (benches/log/2026-12.md, stop 43).
//!
//! Why a kept descriptor answers what a read by name would:
//! - A `/proc/<pid>` descriptor is bound to the process that had the pid
//!   when it was opened (its `struct pid`), not to the number. A `stat`
//!   read through it describes that process or fails with `ESRCH` once it
//!   has been reaped; a pid passed to a new process is never read through
//!   an old descriptor. Such a failure drops the kept pair, and the pid is
//!   read by name, as the first time: the new process, or gone.
//! - Each `pread` at offset 0 of a `stat` file makes the kernel render it
//!   anew (a `seq_file` read from its start), and the owner of a
//!   `/proc/<pid>` directory is computed at each `statx` from the process's
//!   credentials (`pid_getattr`): nothing is remembered from the read that
//!   kept them. A zombie reads as one (state `Z`).
//! - The descriptors are kept for one `/proc` only (its device: one
//!   procfs instance, one PID namespace); a snapshot of another reads by
//!   name and keeps nothing.
//! - Pairs of processes that a snapshot did not list any more are closed
//!   at its end; at most [`MAX_KEPT`] pairs are kept, and no more
//!   descriptors than an eighth of the soft descriptor limit (two per
//!   process: 128 at a limit of 1,024).
//!
//! # References
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use super::stat::ProcStat;
use super::{is_gone, ProcError};
use crate::sys::lock;

/// At most this many processes' descriptor pairs are kept.
pub(crate) const MAX_KEPT: usize = 2048;

/// The kept descriptors of one process.
struct Pair {
    /// `/proc/<pid>`, for its owner.
    dir: OwnedFd,
    /// `/proc/<pid>/stat`.
    stat: OwnedFd,
}

/// The kept pairs, for the `/proc` of device `dev`.
struct Pairs {
    dev: u64,
    pairs: HashMap<i32, Pair>,
}

/// A set of kept pairs (one per process, for one `/proc`).
pub(crate) struct Kept(Mutex<Option<Pairs>>);

/// The pairs the snapshots keep.
pub(crate) static KEPT: Kept = Kept::new();

/// How many pairs may be kept: `MAX_KEPT`, and at most a sixteenth of
/// the soft descriptor limit (an eighth of the descriptors: the directory
/// cache, the kernel threads' and the members' pidfds have shares of their
/// own). Read once: each `getrlimit` was 2 % of a liveness answer.
pub fn cap() -> usize {
    static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| crate::sys::cache_share(4 * MAX_KEPT) / 4)
}

/// The device of the `/proc` behind `proc`, when kept descriptors may serve
/// it: `None` when it cannot be told (then nothing is kept).
pub(crate) fn proc_dev(proc: impl AsFd) -> Option<u64> {
    rustix::fs::fstat(proc).ok().map(|st| st.st_dev)
}

impl Kept {
    /// An empty set (usable in a `static`).
    pub(crate) const fn new() -> Kept {
        Kept(Mutex::new(None))
    }

    /// Takes the kept pair of `pid` out of the set (a caller puts it back
    /// with [`Kept::keep`]), if there is one for the `/proc` of device `dev`.
    fn take(&self, dev: u64, pid: i32) -> Option<Pair> {
        let mut g = lock(&self.0);
        let kept = g.as_mut().filter(|k| k.dev == dev)?;
        kept.pairs.remove(&pid)
    }

    /// Keeps `pair` for `pid` of the `/proc` of device `dev` (a set kept
    /// for another `/proc` is dropped first), unless the cap is reached.
    fn keep(&self, dev: u64, pid: i32, pair: Pair) {
        let mut g = lock(&self.0);
        if g.as_ref().is_some_and(|k| k.dev != dev) {
            *g = None;
        }
        let kept = g.get_or_insert_with(|| Pairs { dev, pairs: HashMap::new() });
        if kept.pairs.len() < cap() || kept.pairs.contains_key(&pid) {
            kept.pairs.insert(pid, pair);
        }
    }

    /// Closes the kept pairs of `/proc` device `dev` whose pids are not in
    /// `listed` (a snapshot's listings: those processes are gone).
    pub(crate) fn prune(&self, dev: u64, listed: &HashSet<i32>) {
        let mut g = lock(&self.0);
        if let Some(kept) = g.as_mut().filter(|k| k.dev == dev) {
            kept.pairs.retain(|pid, _| listed.contains(pid));
        }
    }

    /// Whether a pair is kept for `pid`.
    #[cfg(test)]
    pub(crate) fn holds(&self, pid: i32) -> bool {
        lock(&self.0).as_ref().is_some_and(|k| k.pairs.contains_key(&pid))
    }

    /// Reads the owner and `stat` of `pid` beneath `proc`, through the
    /// descriptors an earlier read kept when there are (`dev` is `proc`'s
    /// device, from [`proc_dev`]; `None` reads by name and keeps nothing).
    ///
    /// Returns `Ok(None)` when the process is gone (reaped, or its pid not in
    /// `/proc`). Fails when a file of a process that exists cannot be read or
    /// parsed.
    pub(crate) fn read_entry(
        &self,
        proc: impl AsFd,
        dev: Option<u64>,
        pid: i32,
        buf: &mut Vec<u8>,
    ) -> Result<Option<(u32, ProcStat)>, ProcError> {
        if let Some(dev) = dev {
            if let Some(pair) = self.take(dev, pid) {
                match read_pair(&pair, pid, buf)? {
                    // Reaped (or its pid is another process's now): by name.
                    None => {}
                    Some(found) => {
                        self.keep(dev, pid, pair);
                        return Ok(Some(found));
                    }
                }
            }
        }
        let dir = match rustix::fs::openat(
            proc,
            format!("{pid}").as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) if is_gone(e) => return Ok(None),
            Err(e) => return Err(ProcError::Unreadable { pid, file: "", error: e.into() }),
        };
        let stat =
            match rustix::fs::openat(&dir, "stat", OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY, Mode::empty()) {
                Ok(fd) => fd,
                Err(e) if is_gone(e) => return Ok(None),
                Err(e) => return Err(ProcError::Unreadable { pid, file: "stat", error: e.into() }),
            };
        let pair = Pair { dir, stat };
        let found = read_pair(&pair, pid, buf)?;
        if let (Some(dev), Some(_)) = (dev, found) {
            self.keep(dev, pid, pair);
        }
        Ok(found)
    }
}

/// The owner (of `/proc/<pid>`) and the `stat` of the process `pair` was
/// opened for, in that order; `None` once it has been reaped.
fn read_pair(pair: &Pair, pid: i32, buf: &mut Vec<u8>) -> Result<Option<(u32, ProcStat)>, ProcError> {
    let uid = match rustix::fs::statx(&pair.dir, "", AtFlags::EMPTY_PATH, StatxFlags::UID) {
        Ok(st) => st.stx_uid,
        Err(e) if is_gone(e) => return Ok(None),
        Err(e) => return Err(ProcError::Unreadable { pid, file: "", error: e.into() }),
    };
    let Some(n) =
        pread_whole(&pair.stat, buf).map_err(|e| ProcError::Unreadable { pid, file: "stat", error: e.into() })?
    else {
        return Ok(None);
    };
    if n == 0 {
        return Ok(None);
    }
    let stat = ProcStat::parse(&buf[..n]).ok_or_else(|| ProcError::Unreadable {
        pid,
        file: "stat",
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, "not a stat line"),
    })?;
    Ok(Some((uid, stat)))
}

/// Reads the whole of `fd` from offset 0 into `buf` (which only grows);
/// `None` when its process is gone (`ESRCH`).
fn pread_whole(fd: &OwnedFd, buf: &mut Vec<u8>) -> Result<Option<usize>, rustix::io::Errno> {
    if buf.len() < 4096 {
        buf.resize(4096, 0);
    }
    loop {
        // One read renders the file: a `stat` line is far below the
        // buffer, and a read that fills it is made again with a larger one
        // (a read at a later offset would render the file again anyway).
        match rustix::io::pread(fd, &mut buf[..], 0) {
            Ok(n) if n < buf.len() => return Ok(Some(n)),
            Ok(_) => {
                let grown = buf.len() * 2;
                buf.resize(grown, 0);
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) if is_gone(e) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept pair reads its process anew each time (a stopped process
    /// shows `T`, a killed one `Z`), and a reaped one is gone and its pair
    /// dropped.
    #[test]
    fn a_kept_pair_reads_the_process_as_it_is_now() {
        let kept = Kept::new();
        let proc = super::super::open_proc().unwrap();
        let dev = proc_dev(&proc);
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let mut buf = Vec::new();
        let (uid, first) = kept.read_entry(&proc, dev, pid, &mut buf).unwrap().unwrap();
        assert_eq!(uid, rustix::process::geteuid().as_raw());
        assert_ne!(first.state, b'T');
        assert!(kept.holds(pid), "nothing kept");
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::STOP)
            .unwrap();
        let stopped = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            kept.read_entry(&proc, dev, pid, &mut buf).unwrap().unwrap().1.state == b'T'
        });
        assert!(stopped, "the kept pair never showed the process stopped");
        child.kill().unwrap();
        let zombie = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            kept.read_entry(&proc, dev, pid, &mut buf).unwrap().unwrap().1.is_zombie()
        });
        assert!(zombie, "the kept pair never showed the zombie");
        assert!(kept.holds(pid));
        child.wait().unwrap();
        assert!(kept.read_entry(&proc, dev, pid, &mut buf).unwrap().is_none(), "a reaped process was read");
        assert!(!kept.holds(pid), "a reaped process's pair kept");
    }

    /// A pair kept for a process is never read for another one: put under
    /// the pid of a live process, the pair of a reaped one makes the live
    /// one be read by name (as a reused pid is).
    #[test]
    fn a_pair_of_a_reaped_process_never_answers_for_its_pid() {
        let kept = Kept::new();
        let proc = super::super::open_proc().unwrap();
        let dev = proc_dev(&proc).unwrap();
        let mut gone = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let gone_pid = gone.id() as i32;
        let mut buf = Vec::new();
        kept.read_entry(&proc, Some(dev), gone_pid, &mut buf).unwrap().unwrap();
        gone.kill().unwrap();
        gone.wait().unwrap();
        let stale = kept.take(dev, gone_pid).expect("kept");
        let mut live = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let live_pid = live.id() as i32;
        // The stale pair stands where a reused pid's would.
        kept.keep(dev, live_pid, stale);
        let (_, st) = kept.read_entry(&proc, Some(dev), live_pid, &mut buf).unwrap().unwrap();
        assert_eq!(st.pid, live_pid, "the stale pair answered");
        assert_ne!(st.start_time, 0);
        live.kill().unwrap();
        live.wait().unwrap();
    }

    /// Pairs of processes a snapshot no longer lists are closed; pairs of
    /// another `/proc` are not used; nothing is kept without a device.
    #[test]
    fn pairs_are_kept_for_listed_processes_of_one_proc() {
        let kept = Kept::new();
        let proc = super::super::open_proc().unwrap();
        let dev = proc_dev(&proc).unwrap();
        let me = std::process::id() as i32;
        let mut buf = Vec::new();
        kept.read_entry(&proc, None, me, &mut buf).unwrap().unwrap();
        assert!(!kept.holds(me), "kept without a device");
        kept.read_entry(&proc, Some(dev), me, &mut buf).unwrap().unwrap();
        assert!(kept.take(dev + 1, me).is_none(), "another /proc's pair served");
        kept.prune(dev, &HashSet::from([me]));
        assert!(kept.holds(me));
        kept.prune(dev, &HashSet::new());
        assert!(!kept.holds(me));
        assert!(cap() <= MAX_KEPT);
    }

    /// The owner a kept pair reads is the process's owner now: a process
    /// that changed its user after the pair was kept shows the new one.
    #[test]
    fn a_kept_pair_reads_the_owner_as_it_is_now() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: changing a process's user needs root");
            return;
        }
        let kept = Kept::new();
        let proc = super::super::open_proc().unwrap();
        let dev = proc_dev(&proc);
        let script = "import os,sys\nsys.stdin.readline()\nos.setresuid(65534,65534,65534)\nprint('ok',flush=True)\nsys.stdin.readline()\n";
        let Ok(mut child) = std::process::Command::new("/usr/bin/python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("skipped: /usr/bin/python3 cannot be run here");
            return;
        };
        let pid = child.id() as i32;
        let mut buf = Vec::new();
        let (before, _) = kept.read_entry(&proc, dev, pid, &mut buf).unwrap().unwrap();
        assert_eq!(before, 0);
        assert!(kept.holds(pid));
        use std::io::{BufRead, Write};
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ok");
        let (after, _) = kept.read_entry(&proc, dev, pid, &mut buf).unwrap().unwrap();
        assert!(kept.holds(pid));
        assert_eq!(after, 65534, "the kept pair read the owner it was kept with");
        drop(stdin);
        child.wait().unwrap();
    }
}
