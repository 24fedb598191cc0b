//! The children of the calling process, read from its threads' `children`
//! files (`/proc/<pid>/task/<tid>/children`) instead of every process's
//! `stat`: a few files, whatever the machine's process count.
//!
//! A process is on the `children` list of the thread that forked it. It
//! leaves that list only when it is reaped, or when that thread exits: the
//! kernel then moves the thread's children to the first thread of the
//! process that is not exiting (`find_alive_thread` in `kernel/exit.c`),
//! the leader while the leader is not exiting; and an orphan reparented to
//! this process (a child subreaper) goes to that same thread. New children
//! are added at the end of a list; an `execve` in a child keeps its place.
//!
//! The kernel walks a list for a reader one entry at a time, continuing
//! from the entry it listed last while that entry is still on the list,
//! else by position: a reader can miss an entry only when an entry it had
//! listed left the list before the walk ended (proc(5): "the listing is not
//! guaranteed to be consistent"; `get_children_pid` in
//! `fs/proc/array.c`). The threads of `/proc/<pid>/task` are listed the
//! same way. So [`own_children`] reads in passes, each listing the threads
//! and reading every thread's list, the leader's last, and believes a pass
//! only when the next one shows every thread it listed again, with every
//! child it listed on that thread's list: then nothing it listed left
//! meanwhile, and it missed nothing. Then every process that was this
//! process's child for the whole of a believed pass is in it: one on a
//! thread other than the leader was on that thread's list when it was read,
//! or had moved to the leader's, read after it. That needs the leader not
//! to be exiting during the passes; its `stat` is read after the last one
//! (`PF_EXITING`, once set, stays set).
//!
//! Caveat: as for [`snapshot`](super::snapshot), a pid that is reaped and
//! given to another child between two passes is taken for the first (pids
//! are reused only after `pid_max` allocations).
//!
//! # References
//! - [`proc_pid_task(5)`](https://man7.org/linux/man-pages/man5/proc_pid_task.5.html) (`children`)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html) (`flags`)
//! - [`PR_SET_CHILD_SUBREAPER`](https://man7.org/linux/man-pages/man2/PR_SET_CHILD_SUBREAPER.2const.html)

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

use super::stat::ProcStat;
use super::{is_gone, open_proc, read_file};

/// `PF_EXITING` of `include/linux/sched.h`: the task is in `do_exit`.
const PF_EXITING: u64 = 0x0000_0004;

/// One pass: each thread's children, the leader's last (`None`: its list
/// could not be read, the thread had gone).
type Pass = Vec<(i32, Option<Vec<i32>>)>;

/// The children of the calling process that `looks` believed passes in a
/// row showed (module docs), zombies included, or `None` when it cannot be
/// told: `/proc` is not of this process's PID namespace, has no
/// `children` files, the leader's list cannot be read, a pass is not
/// believed, or the leader is exiting. Reads `looks + 1` passes.
///
/// Every process that was a child of this process for the whole of one of
/// the `looks` passes is in the answer.
///
/// # References
/// - [`proc_pid_task(5)`](https://man7.org/linux/man-pages/man5/proc_pid_task.5.html)
pub fn own_children(looks: usize) -> Option<HashSet<i32>> {
    let proc = open_proc().ok()?;
    if !super::kthreads::proc_is_ours(&proc) {
        return None;
    }
    own_children_in(&proc, rustix::process::getpid().as_raw_nonzero().get(), looks)
}

/// [`own_children`] of process `pid` beneath the `/proc` handle `proc`.
fn own_children_in(proc: &OwnedFd, pid: i32, looks: usize) -> Option<HashSet<i32>> {
    let mut reader = Reader::open(proc, pid)?;
    let mut seen = HashSet::new();
    let mut prev = reader.pass()?;
    for _ in 0..looks {
        let next = reader.pass()?;
        if !believed(&prev, &next) {
            return None;
        }
        seen.extend(prev.iter().flat_map(|(_, c)| c.iter().flatten().copied()));
        prev = next;
    }
    seen.extend(prev.iter().flat_map(|(_, c)| c.iter().flatten().copied()));
    // After the last pass: a leader not exiting now was not exiting during
    // any pass.
    let n = read_file(proc, &format!("{pid}/task/{pid}/stat"), &mut reader.buf).ok()??;
    let st = ProcStat::parse(&reader.buf[..n])?;
    (!st.is_zombie() && st.flags & PF_EXITING == 0).then_some(seen)
}

/// Whether `next`, read after `pass`, shows every thread of `pass` again,
/// each with every child `pass` listed on it.
fn believed(pass: &Pass, next: &Pass) -> bool {
    pass.iter().all(|(tid, children)| {
        let Some((_, Some(now))) = next.iter().find(|(t, _)| t == tid) else { return false };
        children.iter().flatten().all(|c| now.contains(c))
    })
}

/// The passes of one [`own_children`]: `/proc/<pid>/task` and each
/// thread's `children` opened once and read again from the start by each
/// pass (a `seq_file` read at offset 0 starts over). A thread's file kept
/// open after the thread is gone reads empty rather than failing; a pass
/// reads only the threads its own listing shows, so that changes nothing
/// `believed` relies on (a thread listed by a pass was alive for the
/// whole of the passes before it, and one that leaves before the next
/// pass's listing fails that pass).
struct Reader<'a> {
    proc: &'a OwnedFd,
    pid: i32,
    task: rustix::fs::Dir,
    lists: HashMap<i32, OwnedFd>,
    buf: Vec<u8>,
}

impl<'a> Reader<'a> {
    /// Opens `/proc/<pid>/task`.
    fn open(proc: &'a OwnedFd, pid: i32) -> Option<Reader<'a>> {
        let fd = rustix::fs::openat(
            proc,
            format!("{pid}/task").as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let task = rustix::fs::Dir::new(fd).ok()?;
        Some(Reader { proc, pid, task, lists: HashMap::new(), buf: Vec::with_capacity(4096) })
    }

    /// Lists the threads, then reads each one's `children`, the leader's
    /// last. `None` when the threads cannot be listed or the leader's list
    /// cannot be read.
    fn pass(&mut self) -> Option<Pass> {
        let pid = self.pid;
        self.task.rewind();
        let mut tids = Vec::new();
        while let Some(entry) = self.task.read() {
            if let Some(t) = entry.ok()?.file_name().to_str().ok().and_then(|s| s.parse::<i32>().ok()) {
                tids.push(t);
            }
        }
        tids.retain(|t| *t != pid);
        tids.push(pid);
        let mut out = Vec::with_capacity(tids.len());
        for tid in tids {
            let list = match self.list(tid) {
                Ok(Some(n)) => Some(parse(&self.buf[..n])?),
                Ok(None) if tid == pid => return None,
                Ok(None) => None,
                Err(_) => return None,
            };
            out.push((tid, list));
        }
        Some(out)
    }

    /// Reads thread `tid`'s `children` into `buf` from its start: how many
    /// bytes, `None` when the thread is gone.
    fn list(&mut self, tid: i32) -> Result<Option<usize>, rustix::io::Errno> {
        if !self.lists.contains_key(&tid) {
            let rel = format!("{}/task/{tid}/children", self.pid);
            match rustix::fs::openat(self.proc, rel.as_str(), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
                Ok(fd) => self.lists.insert(tid, fd),
                Err(e) if is_gone(e) => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        let Some(fd) = self.lists.get(&tid) else { return Ok(None) };
        if self.buf.len() < 4096 {
            self.buf.resize(4096, 0);
        }
        let mut len = 0;
        loop {
            if len == self.buf.len() {
                let grown = self.buf.len() * 2;
                self.buf.resize(grown, 0);
            }
            match rustix::io::pread(fd, &mut self.buf[len..], len as u64) {
                Ok(0) => return Ok(Some(len)),
                Ok(n) => len += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) if is_gone(e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

/// The pids of a `children` file: decimal, each followed by a space.
fn parse(text: &[u8]) -> Option<Vec<i32>> {
    text.split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .map(|f| std::str::from_utf8(f).ok()?.parse::<i32>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The children a thread forked, and a child whose forking thread has
    /// exited (moved to the leader), are found; a reaped one is not.
    /// [`own_children`], asked again while other tests' children come
    /// and go (a reap makes a pass unbelieved).
    fn told(looks: usize) -> HashSet<i32> {
        for _ in 0..200 {
            if let Some(seen) = own_children(looks) {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("own children could not be told in 200 tries");
    }

    #[test]
    fn children_of_every_thread_are_found() {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let proc = open_proc().unwrap();
        if !super::super::kthreads::proc_is_ours(&proc)
            || !std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
        {
            eprintln!("skipped: no children files (CONFIG_PROC_CHILDREN), or another namespace's /proc");
            return;
        }
        let mut first = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        // Forked by a thread that then exits: moved to another thread.
        let mut moved =
            std::thread::spawn(|| std::process::Command::new("sleep").arg("30").spawn().unwrap()).join().unwrap();
        // Forked by a thread still alive while the children are read.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let c = std::process::Command::new("sleep").arg("30").spawn().unwrap();
            tx.send(c.id() as i32).unwrap();
            let _ = done_rx.recv_timeout(Duration::from_secs(30));
            c
        });
        let on_thread = rx.recv().unwrap();
        let seen = told(2);
        for p in [first.id() as i32, moved.id() as i32, on_thread] {
            assert!(seen.contains(&p), "child {p} not found in {seen:?}");
        }
        done_tx.send(()).unwrap();
        let mut c = holder.join().unwrap();
        for c in [&mut first, &mut moved, &mut c] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        let gone = first.id() as i32;
        let seen = told(1);
        assert!(!seen.contains(&gone), "a reaped child is still listed");
    }

    fn pass_of(v: &[(i32, Option<&[i32]>)]) -> Pass {
        v.iter().map(|(t, c)| (*t, c.map(<[i32]>::to_vec))).collect()
    }

    /// A pass is believed only when the next shows each of its threads
    /// again, with each child it listed there: a child that left a list (a
    /// reap, or its thread's exit) may have made the walk skip another.
    #[test]
    fn a_pass_is_believed_only_when_the_next_shows_all_it_listed() {
        let a = pass_of(&[(11, Some(&[100, 101])), (10, Some(&[200]))]);
        // New children and new threads are fine.
        assert!(believed(&a, &pass_of(&[(11, Some(&[100, 101, 102])), (12, Some(&[])), (10, Some(&[200, 201]))])));
        // A child gone from its list.
        assert!(!believed(&a, &pass_of(&[(11, Some(&[101])), (10, Some(&[200]))])));
        // Moved to the leader (its thread exiting): not believed either.
        assert!(!believed(&a, &pass_of(&[(11, Some(&[])), (10, Some(&[200, 100, 101]))])));
        // A thread gone, or whose list could not be read.
        assert!(!believed(&a, &pass_of(&[(10, Some(&[200]))])));
        assert!(!believed(&a, &pass_of(&[(11, None), (10, Some(&[200]))])));
        // A thread that had gone when the pass read it: its leaving may
        // have made the listing of the threads skip another.
        assert!(!believed(&pass_of(&[(11, None), (10, Some(&[]))]), &pass_of(&[(10, Some(&[]))])));
    }

    #[test]
    fn parses_children_files() {
        assert_eq!(parse(b"12 345 6 "), Some(vec![12, 345, 6]));
        assert_eq!(parse(b""), Some(vec![]));
        assert_eq!(parse(b"12 x"), None);
    }
}
