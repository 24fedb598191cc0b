//! Starting a shell as an execution of the runtime (the shell module's
//! glue to the runtime's table, records, cgroups and leaders).

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Runtime;
use crate::execution::Execution;
use crate::options::Spawn;
use crate::shell::handle::{Core, State};
use crate::shell::spawn::{spawn_shell, ShellSpec};
use crate::shell::{pty, OutputSink, Shell, ShellProgram, ShellSpawn, Terminal, HOOK_FILE};
use winx_release_kernel::sys::lock;

/// How long a reader with nothing to read waits before it looks whether
/// the shell ended.
const OUTPUT_POLL: Duration = Duration::from_millis(500);

impl Runtime {
    /// Starts a shell on a terminal as a new execution of session
    /// `spawn.session` (see [`crate::shell`]). With
    /// [`Terminal::Open`], every chunk the terminal prints goes to `sink`.
    /// `admitted` proves the caller holds the session's admission barrier.
    ///
    /// The shell counts as running ([`Runtime::liveness`]) except while
    /// [`Shell::busy`] finds it idle. A shell that cannot be started is
    /// recorded as failed to start and the error returned.
    pub fn start_shell(
        self: &Arc<Self>,
        admitted: &winx_release_engine::admission::AdmissionGuard<'_>,
        spawn: ShellSpawn,
        sink: Option<OutputSink>,
    ) -> io::Result<Shell> {
        self.start_shell_with(admitted, spawn, &ShellProgram::bash(), sink)
    }

    /// Like [`Runtime::start_shell`], running the host's choice of shell
    /// ([`ShellProgram`]: the user's rc, `bash -r`, the host's own prompt
    /// command chained with the engine's hook).
    pub fn start_shell_with(
        self: &Arc<Self>,
        _admitted: &winx_release_engine::admission::AdmissionGuard<'_>,
        spawn: ShellSpawn,
        program: &ShellProgram,
        sink: Option<OutputSink>,
    ) -> io::Result<Shell> {
        let (controller, follower) = match spawn.terminal {
            Terminal::Open { rows, cols } => {
                let p = pty::open_pair(rows, cols)?;
                (Some(p.controller), p.follower)
            }
            Terminal::Follower(fd) => (None, fd),
        };
        let e = self.submit(Spawn {
            thread: spawn.thread,
            workspace: spawn.workspace,
            cwd: Some(spawn.cwd.clone()),
            session: spawn.session,
            command: program.describe(),
            background: spawn.background,
            env: spawn.env.clone(),
        })?;
        // Started here, not by `run`.
        lock(&self.specs).remove(&e.id);
        e.terminal.store(true, std::sync::atomic::Ordering::SeqCst);
        let hook = e.dir.join(HOOK_FILE);
        let (ours, theirs) = UnixStream::pair()?;
        let made = fs::write(&hook, program.rc_script());
        let argv = program.argv(&hook);
        let env_remove = self.env_remove.clone();
        let mut readers = None;
        self.run_with(&e, |e| {
            made?;
            let argv = argv?;
            // The threads that read the shell's reports and its terminal
            // are had before it starts: a shell nobody reads would never be
            // seen idle, and its terminal would fill.
            let no_thread = |err: io::Error| io::Error::new(err.kind(), format!("no thread to read the shell: {err}"));
            let reports = winx_release_kernel::sys::Reserved::thread().map_err(no_thread)?;
            let output = match (&controller, &sink) {
                (Some(_), Some(_)) => Some(winx_release_kernel::sys::Reserved::thread().map_err(no_thread)?),
                _ => None,
            };
            readers = Some((reports, output));
            let monitor = self.monitor_program()?;
            let spec = ShellSpec {
                dir: &e.dir,
                monitor,
                argv: &argv,
                cwd: &spawn.cwd,
                env: &spawn.env,
                env_remove: &env_remove,
                cgroup: e.cgroup.as_deref(),
            };
            let mut held = vec![ours.as_fd()];
            held.extend(controller.as_ref().map(|c| c.as_fd()));
            self.start_leader(e, || {
                spawn_shell(&spec, &follower, OwnedFd::from(theirs), &held, |cmd| self.spawn_monitor(e, cmd))
            })
        })?;
        let core = Arc::new(Core {
            execution: e.clone(),
            restricted: program.is_restricted(),
            controller,
            follower,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        {
            let mut shells = lock(&self.shells);
            shells.retain(|_, core| core.strong_count() > 0);
            shells.insert(e.id.clone(), Arc::downgrade(&core));
        }
        let Some((reports, output)) = readers else {
            return Err(io::Error::other("the shell started without its readers"));
        };
        {
            let core = core.clone();
            reports.run(move || crate::shell::read_reports(core, ours));
        }
        if let (Some(c), Some(sink), Some(output)) = (&core.controller, sink, output) {
            let reader = c.as_fd().try_clone_to_owned()?;
            let core = core.clone();
            output.run(move || read_output(&core.execution, reader, sink));
        }
        Ok(Shell { core })
    }

    /// The live shell of execution `e`, if it is one this runtime started
    /// and its process has not exited.
    pub(crate) fn live_shell(&self, e: &Execution) -> Option<Shell> {
        let core = lock(&self.shells).get(&e.id)?.upgrade()?;
        (!e.leader_exited()).then_some(Shell { core })
    }

    /// Whether `e` is a live shell of this runtime that is idle
    /// ([`Shell::busy`] finds nothing): its own process then counts as
    /// running for nobody (a guardian's `stop` asks it).
    pub fn is_idle_shell(&self, e: &Execution) -> bool {
        matches!(self.shell_answer(e), Some(None))
    }

    /// For [`Runtime::is_idle_shell`]: `None` when `e` is not a live
    /// shell; else why it is busy, or `Some(None)` when it is idle (its own
    /// process then does not count).
    fn shell_answer(&self, e: &Execution) -> Option<Option<String>> {
        let shell = self.live_shell(e)?;
        Some(shell.busy(self))
    }

    /// For [`Runtime::liveness`]: `None` when `e` is not a live shell;
    /// else why it is busy by the rules before the union, or its process's
    /// pid when only the union is left (`Shell::busy_before_union`).
    pub(crate) fn shell_before_union(&self, e: &Execution) -> Option<Result<i32, String>> {
        Some(self.live_shell(e)?.busy_before_union())
    }
}

/// Reads the controller until the shell's leader exited, handing every
/// chunk to `sink`.
pub(super) fn read_output(e: &Execution, controller: OwnedFd, sink: OutputSink) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut buf = vec![0u8; 16 * 1024];
    let timeout = Timespec { tv_sec: 0, tv_nsec: OUTPUT_POLL.as_nanos() as _ };
    loop {
        let mut fds = [PollFd::new(&controller, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => {
                if e.leader_exited() {
                    return;
                }
                continue;
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        match rustix::io::read(&controller, &mut buf) {
            Ok(0) => return,
            Ok(n) => sink(&buf[..n]),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            // EIO: every follower descriptor closed.
            Err(_) => return,
        }
    }
}
