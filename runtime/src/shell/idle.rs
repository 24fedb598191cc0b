//! The one rule that says whether a shell is idle (its own process then
//! never counts as running) or busy (releases of its thread are refused).
//!
//! Idle only when every one of these holds, each checked where the kernel
//! keeps it:
//! 0. the shell's process still runs the program it ran at its first
//!    prompt (the same device and inode of `/proc/<pid>/exe`), with one
//!    thread: an `exec`'d program can write the hook's report itself and
//!    then wait like the line editor while another thread of it works;
//! 0b. at its last report the shell held no trap with an action and no
//!    `TMOUT` (the hook writes them before each report, `hook.rs`): bash
//!    logs itself out after `TMOUT` seconds at the prompt and runs its
//!    `EXIT` trap, with nobody typing;
//! 1. the hook reported the prompt after the last byte written to the
//!    terminal (the engine's state: every write goes through
//!    [`super::Shell::write`] or [`super::Shell::input`], each taking the
//!    session's admission guard, and a report is acknowledged under the
//!    same lock);
//! 2. the terminal's input queue is empty (`FIONREAD` on the follower);
//! 3. the terminal's foreground process group is the shell's (`tpgid`,
//!    field 8 of `/proc/<pid>/stat`);
//! 4. the shell sleeps waiting for terminal input with no timeout: state
//!    `S`, and where the architecture is known, `/proc/<pid>/syscall` shows
//!    `pselect6`/`select` on descriptor 0 alone with no timeout (the line
//!    editor's wait; the hook turns line editing back on before every
//!    prompt, so the prompt is always read that way). A report written by a
//!    command that then loops or sleeps in the shell itself is caught here,
//!    and so is one followed by the `read` builtin (`read(0, …)`), which a
//!    shell without line editing would also wait in at its prompt (one
//!    followed by `read -e`, which waits in the line editor like the
//!    prompt, is not: it can go on only on input, which is refused);
//! 5. no other member of its execution lives: the runtime's union of
//!    cgroup, `/proc` signals and remembered members, the shell's own
//!    process excepted, two looks in a row.
//!
//! Anything that cannot be read counts as busy.
//!
//! # References
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html),
//!   [`proc_pid_syscall(5)`](https://man7.org/linux/man-pages/man5/proc_pid_syscall.5.html)
//! - [`FIONREAD`](https://man7.org/linux/man-pages/man2/TIOCINQ.2const.html)

use super::handle::Shell;
use winx_release_kernel::sys::lock;

impl Shell {
    /// Rules 1–4 of the module's docs: why the shell is busy, or its
    /// process's pid when only rule 5 (the runtime's union, that process
    /// excepted) is left to ask. `Runtime::liveness` asks rule 5 of every
    /// shell of a session on the same two `/proc` snapshots.
    pub(crate) fn busy_before_union(&self) -> Result<i32, String> {
        let id = &self.core.execution.id;
        let Some(leader) = self.core.execution.leader() else {
            return Err(format!("shell {id} has not started"));
        };
        if self.core.execution.leader_exited() {
            return Err(format!("shell {id} has exited; what it left may run"));
        }
        if !lock(&self.core.state).at_prompt {
            return Err(format!("shell {id} is not back at its prompt (a command or program runs in it)"));
        }
        if let Some(why) = self.holds() {
            return Err(format!("shell {id} {why}"));
        }
        match rustix::io::ioctl_fionread(&self.core.follower) {
            Ok(0) => {}
            Ok(n) => return Err(format!("shell {id}: {n} bytes of input wait in its terminal")),
            Err(e) => return Err(format!("shell {id}: cannot read its terminal's input queue: {e}")),
        }
        let pid = leader.pid;
        // The hook is acknowledged before the line editor waits: the shell
        // may need a moment to get there (nothing is written meanwhile).
        let settle = std::time::Instant::now() + SETTLE;
        loop {
            match waits_for_input(id, pid) {
                None => return Ok(pid),
                Some(_) if std::time::Instant::now() < settle => std::thread::sleep(SETTLE_STEP),
                Some(why) => return Err(why),
            }
        }
    }
}

impl Shell {
    /// Why the shell's own process is not the idle shell it was started
    /// as, however back at its prompt it says it is (rules 0 and 0b of the
    /// module's docs): it holds a trap with an action or a `TMOUT` (the
    /// hook's last report named them), it no longer runs the program it
    /// ran at its first prompt (same device and inode of
    /// `/proc/<pid>/exe`: an `exec`'d program can forge the hook's report),
    /// or it runs more than one thread. `None` when none of these holds.
    /// Cheap (a `stat` and a read of `status`): a caller that says why a
    /// shell back at its prompt keeps releases refused asks it.
    pub fn holds(&self) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let (held, binary) = {
            let st = lock(&self.core.state);
            (st.held.clone(), st.binary)
        };
        if !held.is_empty() {
            return Some(format!(
                "holds an action of its own that can run at any time: {}; releases wait until it is removed \
                 (`trap - SIGNAL`, `unset TMOUT`)",
                held.join("; ")
            ));
        }
        let Some(pid) = self.pid() else { return Some("has not started".to_owned()) };
        let Some(binary) = binary else {
            return Some("has not reported the program it runs".to_owned());
        };
        match std::fs::metadata(format!("/proc/{pid}/exe")) {
            Ok(m) if (m.dev(), m.ino()) == binary => {}
            Ok(_) => {
                let now = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string());
                return Some(format!(
                    "(pid {pid}) no longer runs the shell it was started as (it runs {}): an `exec`'d program",
                    now.unwrap_or_else(|e| format!("a program that cannot be named: {e}"))
                ));
            }
            Err(e) => return Some(format!("(pid {pid}): cannot tell which program it runs (/proc/{pid}/exe: {e})")),
        }
        match threads_of(pid) {
            Ok(1) => None,
            Ok(n) => Some(format!("(pid {pid}) runs {n} threads; the shell runs one")),
            Err(e) => Some(format!("(pid {pid}): cannot count its threads (/proc/{pid}/status: {e})")),
        }
    }
}

/// `Threads:` of `/proc/<pid>/status`.
fn threads_of(pid: i32) -> std::io::Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no Threads line"))
}

/// How long the kernel's checks may take to hold after the hook's report.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(250);
const SETTLE_STEP: std::time::Duration = std::time::Duration::from_millis(5);

/// `None` when shell `pid` leads its terminal's foreground and sleeps
/// waiting for its input; else why not.
fn waits_for_input(id: &str, pid: i32) -> Option<String> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) => return Some(format!("shell {id}: cannot read /proc/{pid}/stat: {e}")),
    };
    let Some((state, pgrp, tpgid)) = parse_stat(&stat) else {
        return Some(format!("shell {id}: cannot parse /proc/{pid}/stat"));
    };
    if tpgid != pgrp {
        return Some(format!("shell {id}: process group {tpgid} runs in the foreground of its terminal"));
    }
    if state != 'S' {
        return Some(format!("shell {id} (pid {pid}) is not waiting (state {state})"));
    }
    not_waiting_for_input(pid).map(|why| format!("shell {id} (pid {pid}) {why}"))
}

/// (state, pgrp, tpgid) of a `/proc/<pid>/stat` line (the command name
/// may hold spaces and parentheses: fields are counted after the last `)`).
fn parse_stat(stat: &str) -> Option<(char, i32, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state ppid pgrp session tty_nr tpgid.
    let state = f.first()?.chars().next()?;
    Some((state, f.get(2)?.parse().ok()?, f.get(5)?.parse().ok()?))
}

/// `None` when `/proc/<pid>/syscall` shows a wait for terminal input with no
/// timeout; else why not.
fn not_waiting_for_input(pid: i32) -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    const WAITS: Waits = Waits { select: &[23, 270] };
    #[cfg(target_arch = "aarch64")]
    const WAITS: Waits = Waits { select: &[72] };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // The state check above stands alone here (docs/DESIGN.md).
        let _ = pid;
        return None;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/syscall")) {
            Ok(t) => t,
            Err(e) => return Some(format!("cannot be looked at (/proc/{pid}/syscall: {e})")),
        };
        if WAITS.accepts(&text) {
            None
        } else {
            Some(format!("is not waiting for terminal input (syscall {})", text.trim()))
        }
    }
}

#[allow(dead_code)]
struct Waits {
    /// The numbers of `select` and `pselect6`.
    select: &'static [u64],
}

#[allow(dead_code)]
impl Waits {
    fn accepts(&self, syscall: &str) -> bool {
        let mut f = syscall.split_whitespace();
        let num = |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
        let Some(nr) = f.next().and_then(|s| s.parse::<u64>().ok()) else { return false };
        let args: Vec<Option<u64>> = f.take(6).map(|s| num(Some(s))).collect();
        let arg = |i: usize| args.get(i).copied().flatten();
        // select(nfds = 1: descriptor 0 alone, …, timeout = NULL).
        self.select.contains(&nr) && arg(0) == Some(1) && arg(4) == Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_name() {
        let s = "4242 (ba sh) (x) S 1 4242 4242 34816 4242 4194560 0 0";
        assert_eq!(parse_stat(s), Some(('S', 4242, 4242)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn only_an_untimed_wait_on_descriptor_0_is_a_wait_for_input() {
        let w = Waits { select: &[23, 270] };
        assert!(w.accepts("270 0x1 0x7ffd 0x0 0x0 0x0 0x7ffd 0x7ffd 0x7f00"));
        assert!(!w.accepts("0 0x0 0x5593 0x1000 0x0 0x7fff 0x0 0x7fff 0x7fb4"), "the read builtin");
        assert!(!w.accepts("270 0x1 0x7ffd 0x0 0x0 0x7ffd 0x7ffd 0x7ffd 0x7f00"), "a timeout");
        assert!(!w.accepts("0 0x3 0x5593 0x1000 0x0 0x7fff 0x0 0x7fff 0x7fb4"), "another descriptor");
        assert!(!w.accepts("61 0xffffffff 0x7ffd 0xa 0x0 0x0 0x0 0x7ffd 0x7f00"), "wait4");
        assert!(!w.accepts("running"));
    }
}
