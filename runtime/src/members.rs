//! Members remembered: every process a probe or `cgroup.procs` has shown
//! as a member of an execution, held by pidfd until it exits, and recorded
//! durably (pid and start time) in `D/executions/<id>/members` before a
//! release proceeds.
//!
//! A process can leave its execution's cgroup (`systemd-run --user
//! --scope`, a tmux built with systemd support do it in ordinary use),
//! call `setsid` and clear its environment; once any look has seen it as a
//! member, it stays one until it exits, whatever it does afterwards and
//! across a guardian restart (a new runtime reads the file and holds each
//! member whose pid still has the recorded start time).
//!
//! The pidfds come from one budget for the whole runtime
//! ([`members_held_at_most`]); a member beyond it is held by pid and start
//! time alone (its `/proc/<pid>/stat` read at each look), which is the
//! identity recorded on disk anyway. A member whose state cannot be read
//! counts as alive: doubt is "running".
//!
//! # References
//! - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
//! - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use winx_release_kernel::sys::lock;

/// The file, in an execution's directory, that lists its members.
pub const MEMBERS_FILE: &str = "members";

/// Most members recorded per execution; a look that finds more counts the
/// execution as running (doubt) without recording them.
pub const MAX_MEMBERS: usize = 4096;

/// Pidfds of members held by all executions of this process together.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The most pidfds of members this process holds at once: a share of the
/// descriptor table ([`winx_release_kernel::sys::cache_share`]), at most 1,024.
pub(crate) fn members_held_at_most() -> usize {
    winx_release_kernel::sys::cache_share(1024)
}

/// One remembered member.
#[derive(Debug)]
struct Member {
    start_time: u64,
    /// Its pidfd, when the budget had one.
    fd: Option<OwnedFd>,
    /// Seen as a member by what the kernel keeps and no process chooses
    /// (the leader's group or session, descent from the leader or from
    /// another such member), not only by its marker or its cgroup, which a
    /// process can take from another execution ([`Members::note_kin`]).
    kin: bool,
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.fd.is_some() {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The remembered members of one execution.
#[derive(Debug, Default)]
pub(crate) struct Members {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Alive as far as the last look knows, by pid.
    live: BTreeMap<i32, Member>,
    /// Every member ever recorded (pid, start time): what the file holds.
    recorded: BTreeMap<i32, u64>,
    /// Members seen but not yet written to the file.
    unwritten: bool,
    /// More members than [`MAX_MEMBERS`] were seen: doubt.
    overflow: bool,
}

/// Whether `pid` runs now with start time `start_time` (not a zombie):
/// `None` when that cannot be told.
fn runs(pid: i32, start_time: u64) -> Option<bool> {
    let proc = winx_release_kernel::procfs::open_proc().ok()?;
    match winx_release_kernel::procfs::read_stat(&proc, pid) {
        Ok(Some(st)) => Some(st.start_time == start_time && !st.is_zombie()),
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

/// Opens a pidfd of `pid` and checks, after opening it, that the process
/// it names has `start_time`: the pidfd then names that very process.
fn hold(pid: i32, start_time: u64) -> Option<OwnedFd> {
    if HELD.load(Ordering::Relaxed) >= members_held_at_most() {
        return None;
    }
    let fd = winx_release_kernel::sys::pidfd_of(pid)?;
    if runs(pid, start_time) != Some(true) {
        return None;
    }
    HELD.fetch_add(1, Ordering::Relaxed);
    Some(fd)
}

impl Members {
    /// Members that cannot be known (their file cannot be read): doubt
    /// until the execution is otherwise resolved, which it then never is.
    pub(crate) fn doubtful() -> Members {
        let m = Members::default();
        lock(&m.inner).overflow = true;
        m
    }

    /// Remembers the processes `seen` (pid, start time) as members, found
    /// by a signal a process can choose (its marker, its cgroup). Returns
    /// how many were new.
    pub(crate) fn note(&self, seen: impl IntoIterator<Item = (i32, u64)>) -> usize {
        self.note_as(seen, false)
    }

    /// [`Members::note`] for processes found by what the kernel keeps and
    /// no process chooses: the leader's group or session (a process can
    /// leave them, never join them from outside), descent from the leader
    /// or from another kin member. Only kin membership says that an orphan
    /// is certainly this execution's (`runtime/answer.rs`).
    pub(crate) fn note_kin(&self, seen: impl IntoIterator<Item = (i32, u64)>) -> usize {
        self.note_as(seen, true)
    }

    fn note_as(&self, seen: impl IntoIterator<Item = (i32, u64)>, kin: bool) -> usize {
        let mut g = lock(&self.inner);
        let mut new = 0;
        for (pid, start_time) in seen {
            if g.recorded.get(&pid) == Some(&start_time) {
                if let Some(m) = g.live.get_mut(&pid).filter(|m| m.start_time == start_time) {
                    m.kin |= kin;
                    continue;
                }
            }
            if g.recorded.len() >= MAX_MEMBERS && !g.recorded.contains_key(&pid) {
                g.overflow = true;
                continue;
            }
            let fd = hold(pid, start_time);
            g.live.insert(pid, Member { start_time, fd, kin });
            if g.recorded.insert(pid, start_time) != Some(start_time) {
                g.unwritten = true;
                new += 1;
            }
        }
        new
    }

    /// The members still alive (pids), and whether there is doubt (more
    /// members than can be recorded, or one whose state cannot be read).
    /// Forgets the members that exited.
    pub(crate) fn alive(&self) -> (Vec<i32>, bool) {
        let mut g = lock(&self.inner);
        let mut gone = Vec::new();
        let mut doubt = g.overflow;
        {
            let held: Vec<(i32, &OwnedFd)> =
                g.live.iter().filter_map(|(p, m)| m.fd.as_ref().map(|f| (*p, f))).collect();
            let mut polled: Vec<PollFd<'_>> = held.iter().map(|(_, f)| PollFd::new(*f, PollFlags::IN)).collect();
            match poll(&mut polled, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
                Ok(_) => {
                    gone.extend(held.iter().zip(&polled).filter(|(_, p)| !p.revents().is_empty()).map(|(h, _)| h.0))
                }
                // Cannot tell: every held member is doubt.
                Err(_) => doubt |= !held.is_empty(),
            }
            for (pid, m) in g.live.iter().filter(|(_, m)| m.fd.is_none()) {
                match runs(*pid, m.start_time) {
                    Some(true) => {}
                    Some(false) => gone.push(*pid),
                    None => doubt = true,
                }
            }
        }
        for pid in gone {
            g.live.remove(&pid);
        }
        (g.live.keys().copied().collect(), doubt)
    }

    /// Whether `pid` (with `start_time`) is a member known alive.
    pub(crate) fn contains(&self, pid: i32, start_time: u64) -> bool {
        lock(&self.inner).live.get(&pid).is_some_and(|m| m.start_time == start_time)
    }

    /// Whether `pid` (with `start_time`) is a kin member known alive
    /// ([`Members::note_kin`]).
    pub(crate) fn contains_kin(&self, pid: i32, start_time: u64) -> bool {
        lock(&self.inner).live.get(&pid).is_some_and(|m| m.start_time == start_time && m.kin)
    }

    /// The kin members known alive (pids) as of the last
    /// [`Members::alive`].
    pub(crate) fn kin(&self) -> Vec<i32> {
        lock(&self.inner).live.iter().filter(|(_, m)| m.kin).map(|(p, _)| *p).collect()
    }

    /// Writes the members seen since the last write durably into
    /// `dir/members` (nothing when none is new).
    ///
    /// # References
    /// - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
    pub(crate) fn persist(&self, dir: &Path) -> io::Result<()> {
        let text = {
            let g = lock(&self.inner);
            if !g.unwritten {
                return Ok(());
            }
            g.recorded.iter().map(|(pid, st)| format!("{pid} {st}\n")).collect::<String>()
        };
        winx_release_kernel::sys::write_durable(&dir.join(MEMBERS_FILE), text.as_bytes())?;
        lock(&self.inner).unwritten = false;
        Ok(())
    }

    /// Reads `dir/members` (written by this or an earlier runtime) and holds
    /// every member whose pid still runs with the recorded start time. A
    /// file that cannot be read or parsed is doubt (`Err`); a missing one
    /// is no member.
    pub(crate) fn load(dir: &Path) -> Result<Members, String> {
        let text = match winx_release_kernel::sys::open_regular(&dir.join(MEMBERS_FILE)).and_then(io::read_to_string) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Members::default()),
            Err(e) => return Err(format!("{}: {e}", dir.join(MEMBERS_FILE).display())),
        };
        let mut seen = Vec::new();
        for line in text.lines() {
            let mut f = line.split(' ');
            match (f.next().and_then(|p| p.parse().ok()), f.next().and_then(|s| s.parse().ok()), f.next()) {
                (Some(pid), Some(st), None) => seen.push((pid, st)),
                _ => return Err(format!("{} cannot be parsed", dir.join(MEMBERS_FILE).display())),
            }
        }
        let m = Members::default();
        {
            let mut g = lock(&m.inner);
            for (pid, start_time) in seen {
                g.recorded.insert(pid, start_time);
                if runs(pid, start_time) != Some(false) {
                    // Read back, a member is no longer known to be kin: an
                    // orphan of a runtime that restarted is not this one's
                    // anyway (`runtime/answer.rs`).
                    g.live.insert(pid, Member { start_time, fd: hold(pid, start_time), kin: false });
                }
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start_time(pid: i32) -> u64 {
        crate::probe::start_time_of(pid).unwrap()
    }

    #[test]
    fn a_member_is_held_until_it_exits_and_survives_a_reload() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let m = Members::default();
        assert_eq!(m.note([(pid, start_time(pid))]), 1);
        assert_eq!(m.note([(pid, start_time(pid))]), 0, "a member is noted once");
        assert_eq!(m.alive(), (vec![pid], false));
        m.persist(tmp.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(MEMBERS_FILE)).unwrap(),
            format!("{pid} {}\n", start_time(pid))
        );
        // Another runtime reads the file: the member is alive there too.
        let again = Members::load(tmp.path()).unwrap();
        assert_eq!(again.alive(), (vec![pid], false));
        child.kill().unwrap();
        // Exited (a zombie until reaped) is gone, for both.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !m.alive().0.is_empty() {
            assert!(std::time::Instant::now() < deadline, "an exited member stays alive");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(again.alive().0.is_empty());
        child.wait().unwrap();
        // A reload after the exit holds nothing; a pid with another start
        // time is another process.
        assert!(Members::load(tmp.path()).unwrap().alive().0.is_empty());
        let me = std::process::id() as i32;
        let other = Members::default();
        other.note([(me, start_time(me) + 1)]);
        assert!(other.alive().0.is_empty(), "a reused pid is not the member");
    }

    /// Kin membership (found by what the kernel keeps) is what says that
    /// an orphan is certainly an execution's; a claim (marker, cgroup)
    /// never makes a member kin, a later kin look does, and a reload from
    /// the file knows no kin.
    #[test]
    fn only_a_kin_look_makes_a_member_kin() {
        let tmp = tempfile::tempdir().unwrap();
        let me = std::process::id() as i32;
        let st = start_time(me);
        let m = Members::default();
        assert_eq!(m.note([(me, st)]), 1);
        assert!(m.contains(me, st) && !m.contains_kin(me, st));
        assert!(m.kin().is_empty());
        assert_eq!(m.note_kin([(me, st)]), 0, "known already: not new");
        assert!(m.contains_kin(me, st));
        assert_eq!(m.kin(), vec![me]);
        m.note([(me, st)]);
        assert!(m.contains_kin(me, st), "a later claim takes nothing away");
        m.persist(tmp.path()).unwrap();
        let again = Members::load(tmp.path()).unwrap();
        assert!(again.contains(me, st) && !again.contains_kin(me, st));
    }

    #[test]
    fn an_unreadable_file_is_doubt_and_too_many_members_are_doubt() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(MEMBERS_FILE), "12 x\n").unwrap();
        assert!(Members::load(tmp.path()).is_err());
        std::fs::write(tmp.path().join(MEMBERS_FILE), "").unwrap();
        assert!(Members::load(tmp.path()).unwrap().alive().0.is_empty());
        let m = Members::default();
        // Pids that do not run: recorded (up to the bound), not alive.
        m.note((0..MAX_MEMBERS as i32).map(|i| (i32::MAX - i, 1)));
        assert_eq!(m.alive(), (vec![], false));
        m.note([(1, 1)]);
        assert!(m.alive().1, "a member beyond the bound is doubt");
    }
}
