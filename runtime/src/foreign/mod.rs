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
//! `execution.rs`); here each says only what it answers.

use std::convert::Infallible;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use winx_release_engine::Reason;

use crate::liveness::{Liveness, LivenessMode};
use crate::options::{RuntimeOptions, Spawn};
use crate::session::SessionKey;
use crate::state::ExecState;

pub mod monitor;
pub mod shell;

use shell::{OutputSink, Shell, ShellProgram, ShellSpawn};

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

/// One execution of a session's command. Off Linux none exists: no call
/// returns one, and its methods cannot be reached.
#[derive(Debug)]
pub struct Execution {
    /// The command id.
    pub id: String,
    /// Whether it runs in the background.
    pub background: bool,
    /// Its directory `D/executions/<id>`.
    pub dir: PathBuf,
    /// The workspace it runs in.
    pub workspace: PathBuf,
    /// The thread it belongs to.
    pub thread: String,
    /// The identity of its session directory.
    pub session: Option<SessionKey>,
    /// When it was submitted (Unix seconds).
    pub started_unix: u64,
    /// Whether this runtime found it in `D/executions` rather than started it.
    pub adopted: bool,
    /// Its cgroup, in cgroup mode.
    pub cgroup: Option<PathBuf>,
    /// Why its record could not be read, for a record of unknown owner.
    pub unreadable: Option<String>,
    never: Infallible,
}

impl Execution {
    /// Where it is.
    pub fn state(&self) -> ExecState {
        match self.never {}
    }

    /// Whether its leader exited.
    pub fn leader_exited(&self) -> bool {
        match self.never {}
    }

    /// Waits up to `timeout` for `done`; returns the state seen last.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(ExecState) -> bool) -> ExecState {
        let _ = (timeout, done);
        match self.never {}
    }

    /// The end of its output, and whether it was cut.
    pub fn output_tail(&self) -> (String, bool) {
        match self.never {}
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
