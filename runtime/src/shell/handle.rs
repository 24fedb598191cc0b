//! A shell's handle ([`Shell`]), what it shares with the reader of its
//! hook's reports (`Core`, `State`), and the writes to its terminal
//! ([`Shell::write`], [`Shell::input`]).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::terminal::Write;
use crate::execution::Execution;
use winx_release_engine::admission::AdmissionGuard;
use winx_release_kernel::sys::lock;

/// A running shell: a handle that can be cloned.
#[derive(Clone)]
pub struct Shell {
    pub(crate) core: Arc<Core>,
}

impl std::fmt::Debug for Shell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shell").field("execution", &self.core.execution.id).finish()
    }
}

pub(crate) struct Core {
    pub(crate) execution: Arc<Execution>,
    /// A restricted shell (`bash -r`): commands are typed as `eval` of the
    /// command file (its `.` refuses a path with a slash).
    pub(crate) restricted: bool,
    pub(crate) controller: Option<OwnedFd>,
    pub(crate) follower: OwnedFd,
    pub(crate) state: Mutex<State>,
    pub(crate) cv: Condvar,
}

#[derive(Default)]
pub(crate) struct State {
    /// The hook reported the prompt (acknowledged) and nothing was written
    /// since.
    pub(crate) at_prompt: bool,
    /// Prompts reported so far.
    pub(crate) prompts: u64,
    /// The exit code the last report carried.
    pub(crate) last_exit: Option<i32>,
    /// Input (not a command line) was written since the last command line.
    pub(crate) input_since_line: bool,
    /// The report reader ended (the shell exited).
    pub(crate) hook_gone: bool,
    /// What the shell held at its last report besides the hook: its traps
    /// with an action and a `TMOUT` (`hook.rs`); each is an action of its
    /// own that can run at any time, so the shell is busy.
    pub(crate) held: Vec<String>,
    /// The device and inode of the program the shell's process ran at its
    /// first report (bash itself: nothing was typed before the first
    /// prompt); `None` until then or when it could not be read.
    pub(crate) binary: Option<(u64, u64)>,
}

impl Shell {
    /// The shell's execution.
    pub fn execution(&self) -> &Arc<Execution> {
        &self.core.execution
    }

    /// The shell's process id (its execution's leader), once spawned.
    ///
    /// For a host's teardown and its own liveness display: the pid may be
    /// reused once [`Shell::ended`] is true. The runtime never signals it;
    /// a host that ends a shell does so itself (closing its terminal is the
    /// polite way: the shell gets `SIGHUP`).
    pub fn pid(&self) -> Option<i32> {
        self.core.execution.leader().map(|l| l.pid)
    }

    /// Whether the hook reported the prompt after the last byte written
    /// (the first condition of [`Shell::busy`]; jobs may still run).
    pub fn at_prompt(&self) -> bool {
        let st = lock(&self.core.state);
        st.at_prompt && !self.core.execution.leader_exited()
    }

    /// How many prompts the hook reported so far.
    pub fn prompts(&self) -> u64 {
        lock(&self.core.state).prompts
    }

    /// The exit code of the last report (the last command's `$?`).
    pub fn last_exit(&self) -> Option<i32> {
        lock(&self.core.state).last_exit
    }

    /// Whether the shell's process has exited (or its hook channel closed).
    pub fn ended(&self) -> bool {
        self.core.execution.leader_exited() || lock(&self.core.state).hook_gone
    }

    /// Waits up to `timeout` until more than `after` prompts were reported
    /// or the shell ended; returns whether a prompt came.
    pub fn wait_prompt(&self, after: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.core.state);
        loop {
            if st.prompts > after {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || st.hook_gone || self.core.execution.leader_exited() {
                return false;
            }
            let step = (deadline - now).min(Duration::from_millis(200));
            st = self.core.cv.wait_timeout(st, step).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Writes `bytes` to the controller the engine keeps
    /// ([`Terminal::Open`](super::Terminal::Open)); with a host's terminal,
    /// an error (the host writes in [`Shell::input`]). `admitted` proves the caller holds the
    /// session's admission barrier (the compiler checks that one is held).
    ///
    /// # References
    /// - [`write(2)`](https://man7.org/linux/man-pages/man2/write.2.html)
    ///
    /// The controller is non-blocking: a write the terminal cannot take now
    /// (a program that does not read its input, ~20 KB of lines queued)
    /// waits for room at most [`WRITE_WAIT`], then fails naming how much
    /// was sent. The wait holds the shell's lock (so that no report can
    /// hand the prompt to the line editor mid-write), and the hook's
    /// report of a program that ended needs that lock to be acknowledged
    /// while the shell reads nothing until it is: the bound is what ends
    /// such a wait, and the unread rest is discarded at the report.
    pub fn write(&self, admitted: &AdmissionGuard<'_>, kind: Write, bytes: &[u8]) -> io::Result<()> {
        let Some(controller) = &self.core.controller else {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "the host keeps this terminal's controller"));
        };
        self.input(admitted, kind, || write_within(controller, bytes, WRITE_WAIT))
    }

    /// Runs `write`, the host's write of `kind` to the terminal, under the
    /// shell's lock, and records it: from now on the shell is not at its
    /// prompt until the hook reports one. `admitted` proves the caller
    /// holds the session's admission barrier.
    pub fn input(
        &self,
        _admitted: &AdmissionGuard<'_>,
        kind: Write,
        write: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let mut st = lock(&self.core.state);
        // Checked again under the lock the hook's reports take: a program
        // that ended since the caller looked left the prompt to the line
        // editor, which would run input as a command.
        if kind == Write::Input && st.at_prompt && !self.core.execution.leader_exited() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the shell is at its prompt: no program runs in the foreground to receive input",
            ));
        }
        st.at_prompt = false;
        match kind {
            Write::Line => st.input_since_line = false,
            Write::Input => st.input_since_line = true,
        }
        write()
    }
}

/// How long a write to a shell's terminal waits for room.
pub const WRITE_WAIT: Duration = Duration::from_secs(5);

/// Writes `bytes` to the non-blocking `controller`, waiting for room
/// (`POLLOUT`) at most `wait` in all.
///
/// # References
/// - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
fn write_within(controller: &OwnedFd, bytes: &[u8], wait: Duration) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = Instant::now() + wait;
    let mut rest = bytes;
    while !rest.is_empty() {
        match rustix::io::write(controller, rest) {
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the terminal took {} of {} bytes in {} s: the program in the foreground does not \
                             read its input",
                            bytes.len() - rest.len(),
                            bytes.len(),
                            wait.as_secs()
                        ),
                    ));
                }
                let t = Timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
                let mut fds = [PollFd::new(controller, PollFlags::OUT)];
                match poll(&mut fds, Some(&t)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
