//! The runtime on every platform but Linux (and on Linux with `--cfg
//! winx_foreign`, which CI builds: `.ci/foreign.sh`): the types and calls a
//! host writes, under the same paths and with Linux's signatures, so that
//! a host's code is the same everywhere. Nothing runs here: every call that
//! would start something answers an [`io::Error`] of kind
//! [`io::ErrorKind::Unsupported`] carrying
//! [`Reason::UnsupportedPlatform`] (the engine's releases answer the same),
//! [`monitor::enter`] returns at once, and [`crate::OwnerAnswer`] supports
//! no release.
//!
//! The documentation of each item is Linux's (`runtime.rs`, `shell/`,
//! `execution.rs`); here each says only what it answers, and a field only
//! that it is Linux's. What a host builds to start a shell and the program
//! it runs are Linux's own files (`shell/terminal.rs`, `shell/program.rs`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use winx_release_engine::admission::AdmissionGuard;
use winx_release_engine::Reason;

use crate::liveness::{Liveness, LivenessMode};
use crate::options::{RuntimeOptions, Spawn};
use crate::session::SessionKey;

mod execution;
pub mod monitor;
pub mod shell;

pub use execution::Execution;
use shell::{CommandRecord, OutputSink, Shell, ShellProgram, ShellSpawn};

/// The error of every operation off Linux: kind
/// [`io::ErrorKind::Unsupported`], its inner error
/// [`Reason::UnsupportedPlatform`] (`e.get_ref()` downcasts to it).
pub(crate) fn unsupported() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, Reason::UnsupportedPlatform)
}

impl SessionKey {
    /// Off Linux: `unsupported_platform` (no directory identity is read).
    ///
    /// # Errors
    /// Always [`io::ErrorKind::Unsupported`] ([`Reason::UnsupportedPlatform`]).
    pub fn of_dir<D>(dir: D) -> io::Result<SessionKey> {
        drop(dir);
        Err(unsupported())
    }
}

/// The executions of one data directory. Off Linux it starts nothing:
/// [`Runtime::start`] succeeds (so that a host starts the same way
/// everywhere), every start answers `unsupported_platform`, and it knows
/// of no execution.
#[derive(Debug)]
pub struct Runtime {
    data_dir: PathBuf,
    sigchld: Arc<AtomicBool>,
}

impl Runtime {
    /// A runtime of `data_dir` that starts nothing (nothing is created or
    /// adopted).
    pub fn start(data_dir: &Path, opts: &RuntimeOptions) -> Arc<Runtime> {
        let _ = opts;
        Arc::new(Runtime { data_dir: data_dir.to_path_buf(), sigchld: Arc::default() })
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// [`LivenessMode::Proc`]: nothing is contained (see
    /// [`Runtime::liveness_reason`]).
    pub fn liveness_mode(&self) -> LivenessMode {
        LivenessMode::Proc
    }

    /// Why: `unsupported_platform`.
    pub fn liveness_reason(&self) -> &str {
        "unsupported_platform: the runtime runs commands on Linux only"
    }

    /// How executions are contained: none is, off Linux.
    pub fn containment(&self) -> &'static str {
        "none"
    }

    /// Why: `unsupported_platform`.
    pub fn containment_reason(&self) -> String {
        self.liveness_reason().to_owned()
    }

    /// Nothing to claim: no execution exists.
    pub fn claim_for_retention(&self, id: &str) -> bool {
        let _ = id;
        false
    }

    /// Unknown off Linux.
    pub fn start_time_of(pid: i32) -> Option<u64> {
        let _ = pid;
        None
    }

    /// The flag a host's `SIGCHLD` handler sets; nothing reads it here.
    pub fn sigchld_flag(&self) -> Arc<AtomicBool> {
        self.sigchld.clone()
    }

    /// Admits nothing.
    ///
    /// # Errors
    /// Always [`io::ErrorKind::Unsupported`] ([`Reason::UnsupportedPlatform`]).
    pub fn submit(&self, spawn: Spawn) -> io::Result<Arc<Execution>> {
        drop(spawn);
        Err(unsupported())
    }

    /// Runs nothing (no [`Execution`] exists off Linux).
    ///
    /// # Errors
    /// Always [`io::ErrorKind::Unsupported`] ([`Reason::UnsupportedPlatform`]).
    pub fn run(self: &Arc<Self>, e: &Arc<Execution>) -> io::Result<()> {
        let _ = e;
        Err(unsupported())
    }

    /// Starts no shell.
    ///
    /// # Errors
    /// Always [`io::ErrorKind::Unsupported`] ([`Reason::UnsupportedPlatform`]).
    pub fn start_shell(
        self: &Arc<Self>,
        admitted: &winx_release_engine::admission::AdmissionGuard<'_>,
        spawn: ShellSpawn,
        sink: Option<OutputSink>,
    ) -> io::Result<Shell> {
        self.start_shell_with(admitted, spawn, &ShellProgram::bash(), sink)
    }

    /// Starts no shell.
    ///
    /// # Errors
    /// Always [`io::ErrorKind::Unsupported`] ([`Reason::UnsupportedPlatform`]).
    pub fn start_shell_with(
        self: &Arc<Self>,
        admitted: &winx_release_engine::admission::AdmissionGuard<'_>,
        spawn: ShellSpawn,
        program: &ShellProgram,
        sink: Option<OutputSink>,
    ) -> io::Result<Shell> {
        let _ = (admitted, program, sink);
        drop(spawn);
        Err(unsupported())
    }

    /// Nothing runs: no execution was started.
    pub fn liveness(&self, key: &SessionKey) -> Liveness {
        let _ = key;
        Liveness::default()
    }

    /// Nothing runs: no execution was started.
    pub fn thread_liveness(&self, key: &SessionKey, thread: &str) -> Liveness {
        let _ = (key, thread);
        Liveness::default()
    }

    /// None.
    pub fn executions(&self) -> Vec<Arc<Execution>> {
        Vec::new()
    }

    /// None.
    pub fn executions_of(&self, key: &SessionKey) -> Vec<Arc<Execution>> {
        let _ = key;
        Vec::new()
    }

    /// None.
    pub fn lookup(&self, id: &str) -> Option<Arc<Execution>> {
        let _ = id;
        None
    }

    /// None.
    pub fn shells_to_reattach(&self) -> Vec<Arc<Execution>> {
        Vec::new()
    }

    /// Whether `e` is an idle shell (no [`Execution`] exists off Linux).
    pub fn is_idle_shell(&self, e: &Execution) -> bool {
        match e.never {}
    }

    /// Nothing to leave.
    pub fn leave(&self) {}
}

/// The shell calls that take the runtime (on Linux, `runtime/shell_command.rs`
/// and `runtime/shell_busy.rs`).
impl Shell {
    /// What of the shell runs, if anything.
    pub fn busy(&self, rt: &Runtime) -> Option<String> {
        let _ = rt;
        match self.never {}
    }

    /// Records `text` as a command of this shell and types it.
    ///
    /// # Errors
    /// Unreachable: no shell exists off Linux.
    pub fn type_command(&self, rt: &Runtime, admitted: &AdmissionGuard<'_>, text: &str) -> io::Result<CommandRecord> {
        let _ = (rt, admitted, text);
        match self.never {}
    }

    /// Records `text` as a command of this shell.
    ///
    /// # Errors
    /// Unreachable: no shell exists off Linux.
    pub fn record_command(&self, rt: &Runtime, text: &str) -> io::Result<CommandRecord> {
        let _ = (rt, text);
        match self.never {}
    }
}
