//! A snapshot of every process's `stat` and owner.
//!
//! `/proc` is listed and every listed process is read. A process that
//! forks a successor and exits between the listing and its read would be
//! lost with its successor, so while a round read a process that was gone
//! or a zombie by then, `/proc` is listed again and the processes not read
//! yet are read: the successor, forked before its parent's read, shows up
//! in that next listing. A round whose every process was read alive ends
//! the snapshot: each of them is in it, alive, and whatever one of them
//! forks later descends from a process the snapshot shows running (a
//! caller looks again later). Processes that merely start meanwhile (the
//! churn of a busy machine) do not keep a snapshot from settling. A chain
//! of processes that keeps forking and exiting never lets it settle, and
//! the snapshot fails ("cannot tell") after [`SETTLE_ROUNDS`] such listings
//! in a row and a next one that still shows new processes.
//!
//! Kernel threads that an earlier snapshot or holder sweep found, and that
//! are still alive, are passed over unread (`kthreads.rs`: each is held by
//! a pidfd opened before the `stat` that showed `PF_KTHREAD`, and one
//! `poll(2)` tells which still live). A kernel thread runs only kernel
//! code: it is no execution's process, member, descendant or orphan, and
//! carries no marker, so no question the table answers needs it. On a
//! small machine they are most of `/proc`: 69 of 76 processes on the
//! development machine at rest.
//!
//! A snapshot asked for the processes started at or after a bound
//! ([`snapshot_since`]) passes over, the same way, the processes an earlier
//! snapshot found started before it (`older.rs`: each held by a pidfd
//! opened before the `stat` that showed its start time): no descendant,
//! group or session member of a process started since the bound can be
//! one of them. A liveness answer that looks at a session's shell asks
//! for the processes started since that shell's monitor, and so reads
//! what started since, not the whole machine.
//!
//! A process an earlier snapshot read is read through the descriptors of
//! `/proc/<pid>` and its `stat` that snapshot kept (`kept.rs`): a `statx`
//! and a `pread`, no lookup of its pid; what is read is the process as it
//! is now, and a reaped one's pid is read by name again.
//!
//! # References
//! - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, StatxFlags};

use super::stat::ProcStat;
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
/// started or ended meanwhile may be absent), but the kernel threads passed
/// over (see the module's docs), with the `/proc` handle used.
pub struct ProcTable {
    /// The `/proc` handle, for further reads of the same processes.
    pub proc: OwnedFd,
    /// Processes by pid.
    pub entries: HashMap<i32, ProcEntry>,
    /// Kernel threads passed over unread (not in `entries`).
    pub kernel_threads_passed: usize,
    /// Every process started at or after this many clock ticks after boot
    /// is in `entries` (0: every process); older ones may be absent
    /// ([`snapshot_since`]).
    pub since: u64,
    /// Processes started before `since` passed over unread (not in
    /// `entries`).
    pub older_passed: usize,
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
/// ran when the first listing of `/proc` was taken has been read, and so
/// has every successor of one that ended before its read (see the
/// module's docs), but the kernel threads an earlier snapshot or sweep
/// found, which are passed over.
///
/// A process that exits while it is read is left out. Fails when `/proc`
/// itself cannot be read, when a `stat` of an existing process cannot be
/// read, or when for [`SETTLE_ROUNDS`] listings in a row a process ended
/// before its read (callers treat all three as "cannot tell").
///
/// Caveat: a pid that is freed and reused by another process between two
/// listings is read once, as the first of the two (pids are reused only
/// after `pid_max` allocations).
///
/// # References
/// - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
/// - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
pub fn snapshot() -> Result<ProcTable, ProcError> {
    snapshot_since(0)
}

/// [`snapshot`] of the processes started at or after `since` (clock ticks
/// after boot, as `stat`'s field 22): each of them is in it, as in a
/// snapshot; a process started before `since` that an earlier snapshot
/// read may be passed over, unread and absent (module docs,
/// `older.rs`). `since` 0 is [`snapshot`].
///
/// # References
/// - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html) (`starttime`)
/// - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
pub fn snapshot_since(since: u64) -> Result<ProcTable, ProcError> {
    let proc = open_proc()?;
    // Only where this `/proc` numbers processes as this process's PID
    // namespace does (a pidfd is opened by such a pid).
    let ours = super::kthreads::proc_is_ours(&proc);
    let known = if ours { super::kthreads::alive() } else { HashSet::new() };
    let older = if ours { super::older::alive_before(since) } else { HashSet::new() };
    let mut passed = HashSet::new();
    let mut older_passed = HashSet::new();
    let mut buf = Vec::with_capacity(512);
    // Processes read through descriptors an earlier snapshot kept
    // (`kept.rs`); those of processes no listing shows are closed at the end.
    let dev = super::kept::proc_dev(&proc);
    let mut listed = HashSet::with_capacity(512);
    let entries = settle(
        || {
            let mut pids = list_pids(&proc)?;
            // Checked before the passed-over processes leave the list: they
            // can be all of it (the caller among them).
            if pids.is_empty() {
                return Err(ProcError::Unavailable(std::io::Error::other("/proc lists no process")));
            }
            pids.retain(|p| {
                let known = known.contains(p);
                if known {
                    passed.insert(*p);
                }
                let old = older.contains(p);
                if old {
                    older_passed.insert(*p);
                }
                !known && !old
            });
            listed.extend(pids.iter().copied());
            Ok(pids)
        },
        |pid| {
            let Some((uid, stat)) = super::kept::KEPT.read_entry(&proc, dev, pid, &mut buf)? else { return Ok(None) };
            if ours && stat.is_kernel_thread() {
                // Remembered for the next snapshots: a pidfd first, then
                // the `stat` read again (`kthreads::remember_if`).
                super::kthreads::remember_if(pid, || {
                    super::stat::read_stat(&proc, pid).ok().flatten().is_some_and(|st| st.is_kernel_thread())
                });
            } else if ours && stat.start_time < since && !stat.is_zombie() {
                // Remembered for the next snapshots: a pidfd first, then
                // the `stat` read again (`older::remember`).
                super::older::remember(pid, stat.start_time, || {
                    super::stat::read_stat(&proc, pid).ok().flatten().map(|st| st.start_time)
                });
            }
            Ok(Some(ProcEntry { stat, uid }))
        },
    )?;
    if let Some(dev) = dev {
        super::kept::KEPT.prune(dev, &listed);
    }
    Ok(ProcTable { proc, entries, kernel_threads_passed: passed.len(), since, older_passed: older_passed.len() })
}

/// The rounds of [`snapshot`] over `list` (the pids `/proc` lists now) and
/// `read` (a process's entry, `None` once it is gone).
fn settle(
    mut list: impl FnMut() -> Result<Vec<i32>, ProcError>,
    mut read: impl FnMut(i32) -> Result<Option<ProcEntry>, ProcError>,
) -> Result<HashMap<i32, ProcEntry>, ProcError> {
    let mut listed: HashSet<i32> = HashSet::with_capacity(512);
    let mut entries = HashMap::with_capacity(512);
    for round in 0..=SETTLE_ROUNDS {
        let pids = list()?;
        let fresh: Vec<i32> = pids.into_iter().filter(|p| listed.insert(*p)).collect();
        if fresh.is_empty() {
            return Ok(entries);
        }
        if round == SETTLE_ROUNDS {
            break;
        }
        // Whether a process of this round ended before its read (it may
        // have forked a successor that no listing showed yet).
        let mut ended = false;
        for pid in fresh {
            match read(pid)? {
                Some(e) => {
                    ended |= e.stat.is_zombie();
                    entries.insert(pid, e);
                }
                None => ended = true,
            }
        }
        if !ended {
            return Ok(entries);
        }
    }
    Err(ProcError::Unavailable(std::io::Error::other(format!(
        "processes kept ending before they were read in {SETTLE_ROUNDS} listings of /proc in a row, and the next one still showed new ones (a process forking successors?)"
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: i32, state: u8) -> ProcEntry {
        let stat = ProcStat { pid, state, ppid: 1, pgid: pid, sid: pid, flags: 0, start_time: 1 };
        ProcEntry { stat, uid: 0 }
    }

    /// Runs [`settle`] over scripted listings; `alive(pid, round)` says
    /// what a read of `pid` finds after listing `round`.
    fn scripted(
        listings: Vec<Vec<i32>>,
        alive: impl Fn(i32, usize) -> Option<u8>,
    ) -> (Result<HashMap<i32, ProcEntry>, ProcError>, usize) {
        let listings = std::cell::RefCell::new(listings.into_iter());
        let round = std::cell::Cell::new(0usize);
        let r = settle(
            || {
                round.set(round.get() + 1);
                Ok(listings.borrow_mut().next().unwrap_or_default())
            },
            |pid| Ok(alive(pid, round.get() - 1).map(|st| entry(pid, st))),
        );
        (r, round.get())
    }

    /// Processes that merely start while the snapshot is taken (a busy
    /// machine) do not keep it from settling: a round whose every process
    /// was read alive ends it. (With a fixed point of the listing alone,
    /// every listing here shows a new process, and the snapshot failed.)
    #[test]
    fn churn_of_new_processes_settles() {
        let listings: Vec<Vec<i32>> = (0..40).map(|r| (1..=r + 2).collect()).collect();
        let (r, rounds) = scripted(listings, |_, _| Some(b'S'));
        let entries = r.expect("settled");
        assert_eq!(rounds, 1);
        assert_eq!(entries.len(), 2);
    }

    /// A process gone (or a zombie) at its read may have forked a successor:
    /// the next listing is read, and the successor is in the snapshot.
    #[test]
    fn a_successor_of_a_process_that_ended_before_its_read_is_read() {
        for ended in [None, Some(b'Z')] {
            // 10 is listed, forks 11 and exits before its read.
            let listings = vec![vec![1, 10], vec![1, 11], vec![1, 11]];
            let (r, rounds) = scripted(listings, |pid, _| if pid == 10 { ended } else { Some(b'S') });
            let entries = r.expect("settled");
            assert!(entries.contains_key(&11), "the successor was not read ({ended:?})");
            assert_eq!(rounds, 2);
        }
    }

    /// A chain that keeps forking and exiting never settles: "cannot tell".
    #[test]
    fn a_chain_that_never_settles_fails() {
        let listings: Vec<Vec<i32>> = (0..40).map(|r| vec![1, 100 + r]).collect();
        let (r, _) = scripted(listings, |pid, _| if pid >= 100 { None } else { Some(b'S') });
        assert!(r.is_err());
    }

    #[test]
    fn sees_this_process_and_a_child() {
        let _settling = super::super::settling(false);
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

    /// A snapshot keeps the descriptors of a process it read, and the first
    /// snapshot after the process is reaped closes them.
    #[test]
    fn a_reaped_process_s_kept_pair_is_closed_by_the_next_snapshot() {
        let _settling = super::super::settling(false);
        let kept = &super::super::kept::KEPT;
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        // Another test's snapshot that listed `/proc` before the child
        // started may close its pair as it ends: a later one keeps it again.
        let held = (0..20).any(|_| {
            let t = snapshot().unwrap();
            assert!(t.get(pid).is_some());
            kept.holds(pid)
        });
        assert!(held, "no snapshot kept the child's pair");
        child.kill().unwrap();
        child.wait().unwrap();
        let t = snapshot().unwrap();
        assert!(t.get(pid).is_none(), "a reaped process is in the snapshot");
        assert!(!kept.holds(pid), "the reaped process's pair is still kept");
    }

    /// A kernel thread a snapshot read is passed over by the next one: not
    /// read again, not in it; this process still is.
    #[test]
    fn a_kernel_thread_is_passed_over_by_the_next_snapshot() {
        let _settling = super::super::settling(false);
        let first = snapshot().unwrap();
        let kthreadd = std::fs::read("/proc/2/stat")
            .ok()
            .and_then(|t| ProcStat::parse(&t))
            .is_some_and(|st| st.is_kernel_thread());
        if !kthreadd
            || !super::super::kthreads::proc_is_ours(&first.proc)
            || !super::super::kthreads::flag_is_for_life()
        {
            eprintln!("skipped: no kernel thread 2 in this PID namespace's /proc, or a kernel before 5.19");
            return;
        }
        let second = snapshot().unwrap();
        assert!(second.get(2).is_none(), "kthreadd was read again");
        assert!(second.kernel_threads_passed >= 1);
        assert!(second.get(std::process::id() as i32).is_some());
    }

    /// A snapshot since a bound passes over a process started before it
    /// once an earlier one read it, never a process started at or after
    /// it, and no process at all for a bound of 0; a passed-over process
    /// that exits is forgotten.
    #[test]
    fn a_snapshot_since_a_bound_passes_over_older_processes_it_read_before() {
        let _settling = super::super::settling(false);
        let proc = open_proc().unwrap();
        if !super::super::kthreads::proc_is_ours(&proc) || crate::sys::pidfd_of(std::process::id() as i32).is_none() {
            eprintln!("skipped: this /proc is of another PID namespace, or no pidfd can be opened here");
            return;
        }
        let mut old = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let old_pid = old.id() as i32;
        let start_of = |pid: i32| super::super::read_stat(&proc, pid).unwrap().unwrap().start_time;
        let old_start = start_of(old_pid);
        // A process started in a later clock tick than `old`.
        let mut new = loop {
            let c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
            if start_of(c.id() as i32) > old_start {
                break c;
            }
            let mut c = c;
            c.kill().unwrap();
            c.wait().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let new_pid = new.id() as i32;
        let since = start_of(new_pid);
        let first = snapshot_since(since).unwrap();
        assert_eq!(first.since, since);
        assert!(first.get(new_pid).is_some(), "a process started at the bound is missing");
        let later = snapshot_since(since).unwrap();
        assert!(later.get(new_pid).is_some(), "a process started at the bound is missing");
        assert!(later.get(old_pid).is_none(), "an older process read before was read again");
        assert!(later.older_passed >= 1);
        let whole = snapshot().unwrap();
        assert!(whole.get(old_pid).is_some() && whole.older_passed == 0, "a whole snapshot passed over a process");
        let below = snapshot_since(old_start).unwrap();
        assert!(below.get(old_pid).is_some(), "passed over by a bound at its start time");
        old.kill().unwrap();
        old.wait().unwrap();
        let after = snapshot_since(since).unwrap();
        assert!(after.get(old_pid).is_none());
        assert!(!super::super::older::alive_before(since).contains(&old_pid), "an exited process is still passed over");
        new.kill().unwrap();
        new.wait().unwrap();
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
        let _settling = super::super::settling(true);
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
