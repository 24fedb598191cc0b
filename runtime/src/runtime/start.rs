//! How every execution's leader starts: under its monitor, which the
//! record names before anything of the execution runs.
//!
//! The order, each step durable before the next: the execution's cgroup
//! and record (`starting`); the monitor spawned and recorded (its pid and
//! start time); the runtime's word to the monitor, which only then starts
//! the leader (`monitor/run.rs`); the leader, as the monitor names it,
//! recorded (`running`). A runtime that dies anywhere in between leaves a
//! record the next one can account for: before the monitor is recorded,
//! nothing runs (the monitor, whose control socket closed, starts nothing
//! and exits); after, the monitor's descendants count for the execution,
//! and a shell's monitor hands the shell over even though its leader was
//! never recorded (`reattach.rs`).

use std::io;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;

use super::{Mode, Runtime};
use crate::execution::Execution;
use crate::monitor::Monitored;
use crate::probe;
use crate::record::{self, Leader, RecordState};
use winx_release_kernel::sys::lock;

impl Runtime {
    /// The monitor program, or why no execution can start.
    pub(super) fn monitor_program(&self) -> io::Result<&Path> {
        self.monitor.as_deref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no monitor program: {} is not beside this program, {} is not set, and this program does \
                     not call winx_release_runtime::monitor::enter (refusing to start a command without one)",
                    crate::monitor::BINARY,
                    crate::monitor::PROGRAM_VAR
                ),
            )
        })
    }

    /// Starts the leader of `e` with `start` (which spawns its monitor
    /// through [`Runtime::spawn_monitor`]), the one way every leader
    /// starts: its cgroup made and its record written durably first, so
    /// that a runtime that dies right after still leaves the cgroup for the
    /// next one; then its leader recorded running.
    pub(super) fn start_leader(
        &self,
        e: &Execution,
        start: impl FnOnce() -> io::Result<(Monitored, Leader)>,
    ) -> io::Result<Monitored> {
        if let (Mode::Cgroup(s), Some(_)) = (&self.mode, &e.cgroup) {
            s.create_execution_cgroup(&e.id)?;
        }
        record::write_record(&e.dir, &e.record(RecordState::Starting))?;
        let (started, leader) = start()?;
        if e.background && e.terminal.load(std::sync::atomic::Ordering::SeqCst) {
            crate::fault::stop_at(crate::fault::BACKGROUND_SHELL_STARTED);
        }
        *lock(&e.leader) = Some(leader);
        self.write(e, &e.record(RecordState::Running));
        Ok(started)
    }

    /// Spawns `cmd`, the monitor of `e`, through [`Runtime::spawn_child`]
    /// and records it durably (pid and start time) before it starts
    /// anything: the monitor waits for the runtime's word
    /// ([`crate::monitor::start_monitored`]). When the record cannot be
    /// written, the error is returned: the caller drops the control socket,
    /// and the monitor exits without starting anything.
    pub(super) fn spawn_monitor(&self, e: &Execution, cmd: &mut Command) -> io::Result<Child> {
        let child = self.spawn_child(cmd)?;
        let pid = child.id() as i32;
        *lock(&e.monitor) = Some(probe::spawned_leader(pid, true, true));
        if let Err(err) = record::write_record(&e.dir, &e.record(RecordState::Starting)) {
            // Left to the orphan reaper: no thread waits for it.
            lock(&self.children).remove(&pid);
            return Err(err);
        }
        Ok(child)
    }

    /// Spawns `cmd` under the table of leaders: the orphan reaper never
    /// reaps a leader before it is recorded.
    pub(super) fn spawn_child(&self, cmd: &mut Command) -> io::Result<Child> {
        let mut children = lock(&self.children);
        let child = cmd.spawn()?;
        children.insert(child.id() as i32);
        Ok(child)
    }

    /// Waits for the leader's exit, as its monitor reports it, then for
    /// the monitor's (which outlives everything the execution started).
    pub(super) fn watch_leader(self: Arc<Self>, e: Arc<Execution>, started: Monitored) {
        let Monitored { mut child, control, .. } = started;
        let code = control.leader_exit().unwrap_or_else(|| {
            // The monitor was killed: its leader (reparented to this
            // process or to init) may run on.
            super::wait_gone(e.leader());
            None
        });
        self.leader_ended(&e, code);
        let _ = child.wait();
        lock(&self.children).remove(&(child.id() as i32));
    }
}
