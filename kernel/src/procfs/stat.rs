//! One process's `/proc/<pid>/stat`.
//!
//! # References
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)

use std::os::fd::AsFd;

use super::{read_file, ProcError};

/// `PF_KTHREAD` of `include/linux/sched.h`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of `/proc/<pid>/stat` that liveness needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id (field 1).
    pub pid: i32,
    /// Its state letter (field 3): `R`, `S`, `D`, `Z` (zombie), `T`, …
    pub state: u8,
    /// The parent's process id (field 4).
    pub ppid: i32,
    /// The process group id (field 5).
    pub pgid: i32,
    /// The session id (field 6).
    pub sid: i32,
    /// The kernel's flags of the process (field 9, `PF_*`).
    pub flags: u64,
    /// When it started, in clock ticks after boot (field 22). Together with
    /// the pid it names one process: a reused pid has another start time.
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process has exited and waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == b'Z' || self.state == b'X'
    }

    /// Whether it is a kernel thread (`PF_KTHREAD` in its flags): it runs
    /// only kernel code, has no memory map and no descriptors of its own.
    /// Since Linux 5.19 the threads that become user processes (`init`,
    /// usermode helpers) are started without this flag, so a kernel thread
    /// never `execve`s into a program.
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// Parses the text of a `stat` file.
    ///
    /// The command name (field 2) is in parentheses and may itself contain
    /// spaces and parentheses, so the fields after it are found from the
    /// last `)`. Returns `None` for text that is not a `stat` line.
    pub fn parse(text: &[u8]) -> Option<ProcStat> {
        let open = text.iter().position(|&b| b == b'(')?;
        let close = text.iter().rposition(|&b| b == b')')?;
        if close < open {
            return None;
        }
        let pid = parse_i64(text[..open].trim_ascii())?;
        let mut rest = text.get(close + 1..)?.split(|&b| b == b' ').filter(|f| !f.is_empty());
        // Field 3 onwards; starttime is field 22, i.e. the 20th from here.
        let state = *rest.next()?.first()?;
        let ppid = parse_i64(rest.next()?)?;
        let pgid = parse_i64(rest.next()?)?;
        let sid = parse_i64(rest.next()?)?;
        // Fields 7 (tty) and 8 (tpgid), then 9 (flags).
        let flags = parse_i64(rest.nth(2)?)?;
        // starttime is field 22: 12 fields after flags.
        let start_time = parse_i64(rest.nth(12)?.trim_ascii())?;
        Some(ProcStat {
            pid: i32::try_from(pid).ok()?,
            state,
            ppid: i32::try_from(ppid).ok()?,
            pgid: i32::try_from(pgid).ok()?,
            sid: i32::try_from(sid).ok()?,
            flags: u64::try_from(flags).ok()?,
            start_time: u64::try_from(start_time).ok()?,
        })
    }
}

fn parse_i64(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Reads `/proc/<pid>/stat` beneath the `/proc` handle `proc`.
///
/// Returns `Ok(None)` when the process does not exist (or exited while it
/// was read).
///
/// # References
/// - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
pub fn read_stat(proc: impl AsFd, pid: i32) -> Result<Option<ProcStat>, ProcError> {
    let mut buf = Vec::new();
    read_stat_into(proc, pid, &mut buf)
}

/// [`read_stat`] with a caller-provided buffer.
pub(crate) fn read_stat_into(proc: impl AsFd, pid: i32, buf: &mut Vec<u8>) -> Result<Option<ProcStat>, ProcError> {
    let rel = format!("{pid}/stat");
    match read_file(proc, &rel, buf) {
        Ok(None) | Ok(Some(0)) => Ok(None),
        Ok(Some(n)) => ProcStat::parse(&buf[..n]).map(Some).ok_or_else(|| ProcError::Unreadable {
            pid,
            file: "stat",
            error: std::io::Error::new(std::io::ErrorKind::InvalidData, "not a stat line"),
        }),
        Err(e) => Err(ProcError::Unreadable { pid, file: "stat", error: e.into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_parentheses_and_spaces() {
        let line = b"4242 (a) b (c) S 1 4242 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n";
        let s = ProcStat::parse(line).unwrap();
        assert_eq!(
            s,
            ProcStat { pid: 4242, state: b'S', ppid: 1, pgid: 4242, sid: 4240, flags: 4194560, start_time: 987654 }
        );
        assert!(!s.is_kernel_thread());
        assert!(ProcStat::parse(b"garbage").is_none());
        assert!(ProcStat::parse(b"1 (x) S 1 1").is_none());
    }

    #[test]
    fn reads_this_process() {
        let proc = super::super::open_proc().unwrap();
        let me = std::process::id() as i32;
        let s = read_stat(&proc, me).unwrap().unwrap();
        assert_eq!(s.pid, me);
        assert_eq!(s.pgid, rustix::process::getpgrp().as_raw_nonzero().get());
        assert!(s.start_time > 0);
        // The same process read twice has the same start time.
        assert_eq!(read_stat(&proc, me).unwrap().unwrap().start_time, s.start_time);
        assert!(read_stat(&proc, i32::MAX).unwrap().is_none());
        assert!(!s.is_kernel_thread());
    }

    #[test]
    fn kthreadd_is_a_kernel_thread() {
        let proc = super::super::open_proc().unwrap();
        match read_stat(&proc, 2).unwrap() {
            Some(s) if s.ppid == 0 => assert!(s.is_kernel_thread(), "{s:?}"),
            // In a pid namespace pid 2 is an ordinary process, or absent.
            other => eprintln!("skipped: pid 2 is not kthreadd here ({other:?})"),
        }
    }
}
