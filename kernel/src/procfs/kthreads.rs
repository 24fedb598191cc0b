//! The kernel threads that earlier `/proc` sweeps found, each held by a
//! pidfd, so that a sweep can pass over them with one `poll(2)` instead of
//! reading each one's `/proc` views again.
//!
//! A kernel thread runs only kernel code: it has no memory map, and the
//! files it uses inside the kernel (a loop device's backing file, an nfsd
//! export) are in no descriptor table that a sweep could read. So a holder
//! sweep can never find one holding a target, yet reading a kernel thread's
//! views costs as much as any process's (an owner check, an empty
//! descriptor table, then its `stat` to tell it from a zombie leader). A
//! guardian running as root sees every kernel thread as its own user's:
//! on a small machine they are most of the processes it looks at.
//!
//! Why a remembered pid is still a kernel thread when it is passed over:
//! - The pidfd is opened *before* the `stat` that shows `PF_KTHREAD`. A
//!   pidfd refers to the process that had the pid when it was opened, and
//!   polls readable once that process has exited.
//! - So a pidfd that does not poll readable names a process that is alive
//!   now and was alive, with that pid, when the `stat` was read after the
//!   open: the `stat` described it, and it is a kernel thread.
//! - A kernel thread stays one: since Linux 5.19 the threads that become
//!   user processes (`init`, usermode helpers) are started without
//!   `PF_KTHREAD` (`user_mode_thread`), and nothing clears the flag. On an
//!   older kernel, or where that cannot be told, nothing is remembered.
//! - A pidfd is opened by a pid of the caller's PID namespace, a `stat` is
//!   read from the `/proc` the sweep lists: the two name one process only
//!   when that `/proc` is of the caller's namespace (its `self` names the
//!   caller's pid, [`proc_is_ours`]). Otherwise nothing is remembered or
//!   passed over.
//! - Any doubt (the poll fails, a pidfd polls readable or in error) forgets
//!   that pid, or all of them, and the sweep reads those processes in full.
//!
//! # References
//! - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
//! - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html) (`flags`, `PF_KTHREAD`)

use std::collections::HashSet;
use std::os::fd::AsFd;

use crate::sys::{pidfd_of, Remembered};

/// At most this many kernel threads and older processes (`older.rs`, in
/// the same set) are remembered (each costs a descriptor), and at most a
/// quarter of the process's descriptor limit ([`max_remembered`]): a
/// machine with hundreds of cores has thousands of kernel threads, and a
/// guardian must not run out of descriptors for them. The processes past
/// the cap are read in full, as before.
const MAX_REMEMBERED: usize = 8192;

/// `MAX_REMEMBERED`, or a quarter of the soft `RLIMIT_NOFILE` when that
/// is smaller (`sys::cache_share`).
pub fn max_remembered() -> usize {
    crate::sys::cache_share(MAX_REMEMBERED)
}

/// The remembered kernel threads, each by a pidfd opened before the `stat`
/// that showed `PF_KTHREAD` and tagged [`KERNEL_THREAD`], and the older
/// processes of `older.rs`, tagged with their start times
/// (`sys::Remembered`): one set, one share of the descriptors.
pub(super) static KNOWN: Remembered = Remembered::new();

/// The tag of a kernel thread in [`KNOWN`] (no start time is this high).
pub(super) const KERNEL_THREAD: u64 = u64::MAX;

/// Whether this kernel starts the threads that become user processes
/// without `PF_KTHREAD` (Linux 5.19 and later).
pub(crate) fn flag_is_for_life() -> bool {
    static FOR_LIFE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOR_LIFE.get_or_init(|| {
        let uname = rustix::system::uname();
        let release = uname.release().to_string_lossy();
        let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
        let major: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        (major, minor) >= (5, 19)
    })
}

/// Whether the `/proc` behind `proc` numbers processes as this process's
/// PID namespace does (`/proc/self` names this process's pid): a pidfd is
/// opened by a pid of the caller's namespace, so a `/proc` of another
/// namespace would pair a `stat` with another process's pidfd. Where it
/// does not, nothing is remembered or passed over.
pub(crate) fn proc_is_ours(proc: impl AsFd) -> bool {
    let Ok(link) = rustix::fs::readlinkat(proc, "self", Vec::new()) else { return false };
    link.to_str().ok().and_then(|s| s.parse::<i32>().ok()) == Some(rustix::process::getpid().as_raw_nonzero().get())
}

/// The remembered kernel threads that are still alive: a sweep may pass
/// over these pids. Forgets those that exited; forgets all of them when
/// the poll fails.
pub(crate) fn alive() -> HashSet<i32> {
    KNOWN.alive_where(|tag| tag == KERNEL_THREAD)
}

/// Opens a pidfd of `pid`, then calls `is_kernel_thread` (which reads its
/// `stat`); remembers the pidfd when that says it is a kernel thread.
/// Returns what `is_kernel_thread` said (`false` when no pidfd could be
/// opened: the process is gone).
pub(crate) fn remember_if(pid: i32, is_kernel_thread: impl FnOnce() -> bool) -> bool {
    if !flag_is_for_life() {
        return is_kernel_thread();
    }
    let Some(fd) = pidfd_of(pid) else { return is_kernel_thread() };
    if !is_kernel_thread() {
        return false;
    }
    KNOWN.insert_tagged(pid, fd, KERNEL_THREAD, max_remembered());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_s_proc_is_its_own() {
        let proc = rustix::fs::open(
            "/proc",
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        assert!(proc_is_ours(&proc));
        // A directory that is not a `/proc` has no `self` naming this process.
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("1", dir.path().join("self")).unwrap();
        let other = rustix::fs::open(
            dir.path(),
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        assert!(!proc_is_ours(&other));
    }

    #[test]
    fn an_exited_process_is_forgotten() {
        // Remembered as if it were a kernel thread (the closure says so):
        // once it exits and is reaped, its pidfd polls readable.
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        if !flag_is_for_life() {
            eprintln!("skipped: this kernel is older than 5.19, nothing is remembered");
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        }
        assert!(remember_if(pid, || true));
        assert!(alive().contains(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive().contains(&pid), "an exited process is still passed over");
        // Not a kernel thread: not remembered.
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!remember_if(other.id() as i32, || false));
        assert!(!alive().contains(&(other.id() as i32)));
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
