//! The frontend: everything the MCP server does, without the transport.
//!
//! [`Frontend`] holds the process secret of generation tokens, the thread
//! registry, the receipt store and (embedded) the in-process execution
//! table. Each tool method takes the tool's arguments as a JSON value and
//! returns the contract's `structuredContent` object; [`is_error`] gives
//! the MCP `isError` flag and [`summary`] the one-line text of
//! `--text-result summary`.
//!
//! Refusals use the result shape of their tool: `status` (`denied` or
//! `invalid_input`), `errorCode`, and a human-readable `message`.

mod bash;
mod edit;
mod kept;
mod read;
mod summary;
mod write;

pub use crate::command_result::CommandResult;

pub use read::{read_files_result, read_status, FailedFile, ReadEntry, ReadFile, TemporaryArtifact};
pub use summary::{is_error, summary};
pub use winx_release_host::{ReleaseCode, ReleaseResult};

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use winx_release_engine::audit::{audit, DELETION_DEFERRED};
use winx_release_engine::layout::{default_data_dir, Layout};
use winx_release_engine::preflight::{check_kernel_shape, open_session_dir};
use winx_release_engine::quota;
use winx_release_engine::Reason;

use crate::embedded::ExecTable;
use crate::policy::Policy;
use crate::tool::Tool;
use crate::wire::{InitializeArgs, ModeName};
use winx_release_host::error::{Code, FrontendError};
use winx_release_host::receipt::ReceiptStore;
use winx_release_host::token::TokenKey;
use winx_release_kernel::sys::lock;
use winx_release_kernel::sys::random_hex;
use winx_release_protocol::client::{ClientError, GuardianClient, Hello, Timeouts};
use winx_release_protocol::socket_path::default_socket_path;

/// The contract's `Initialize` result (section 3).
#[derive(Debug, Serialize)]
pub struct InitializeResult {
    /// `completed`.
    pub status: &'static str,
    /// The thread.
    pub thread_id: String,
    /// The canonical workspace.
    pub workspace_root: String,
    /// `wcgw`, `architect` or `code_writer`.
    pub mode_name: &'static str,
    /// The session directory.
    pub temporary_artifact_dir: PathBuf,
    /// Whether releases can be made, and why not.
    pub temporary_release: TemporaryRelease,
    /// Files per session (128).
    pub temporary_artifact_max_files: u64,
    /// Bytes per session.
    pub temporary_artifact_max_session_bytes: u64,
    /// Bytes per file.
    pub temporary_artifact_max_file_bytes: u64,
    /// Bytes per workspace.
    pub temporary_artifact_max_bytes: u64,
    /// Always 0: the stale prune deletes nothing.
    pub temporary_artifact_stale_pruned_files: u64,
    /// `runtime_protection_unknown`.
    pub deletion_deferred: &'static str,
    /// The audit of the workspace's sessions (deletes nothing).
    pub stale_audit: Value,
    /// Whether the thread was already known to this frontend.
    pub reattached: bool,
    /// The guardian's socket, name, instance and capabilities, or `null`.
    pub guardian: Value,
    /// `cgroup`, `proc`, or `null` without a guardian.
    pub liveness: Value,
    /// The request's `type`, echoed.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub init_type: Option<String>,
    /// Notes (a guardian that could not be used, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `temporary_release` of an `Initialize` result.
#[derive(Debug, Serialize)]
pub struct TemporaryRelease {
    /// Whether a release can be made.
    pub available: bool,
    /// Why not.
    pub reason: Option<&'static str>,
    /// When no guardian is reachable: the socket tried, why, what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl InitializeResult {
    /// The result as the JSON object a tool returns.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"status": "failed", "message": e.to_string()}))
    }
}

/// Starts a guardian listening at the given socket; used only by
/// `Initialize` when no guardian answers, never during a release.
pub type GuardianLauncher = Box<dyn Fn(&Path) -> io::Result<()> + Send + Sync>;

/// How a [`Frontend`] runs.
pub struct FrontendConfig {
    /// The guardian socket (see [`winx_release_protocol::socket_path::resolve_socket_path`]).
    pub socket_path: PathBuf,
    /// Run commands in-process, with no guardian (releases are then denied
    /// with `embedded_runtime`).
    pub embedded: bool,
    /// The data directory `D` (absolute).
    pub data_dir: PathBuf,
    /// Starts a guardian at `socket_path` when none answers at `Initialize`.
    pub launcher: Option<GuardianLauncher>,
    /// Guardian connection timeouts.
    pub timeouts: Timeouts,
    /// How long `Initialize` waits for a launched guardian to answer.
    pub launch_wait: Duration,
    /// How long a helper write waits for its workspace's quota lock (a
    /// command may hold `flock "$PWD"`) before it is refused.
    pub quota_lock_wait: Duration,
    /// Send every release as a dry run: the guardian runs every check under
    /// the barrier and captures nothing (`winx-release release --dry-run`).
    pub dry_run: bool,
}

impl FrontendConfig {
    /// A configuration with the given socket, data directory and mode, no
    /// launcher and default timeouts.
    pub fn new(socket_path: impl Into<PathBuf>, data_dir: impl Into<PathBuf>, embedded: bool) -> FrontendConfig {
        FrontendConfig {
            socket_path: socket_path.into(),
            embedded,
            data_dir: data_dir.into(),
            launcher: None,
            timeouts: Timeouts::default(),
            launch_wait: Duration::from_secs(10),
            quota_lock_wait: winx_release_engine::quota::QUOTA_LOCK_WAIT,
            dry_run: false,
        }
    }

    /// The socket from `--socket` or the environment, the data directory
    /// from the environment (contract section 1).
    pub fn from_env(socket: Option<&Path>, embedded: bool) -> FrontendConfig {
        FrontendConfig::new(
            winx_release_protocol::socket_path::resolve_socket_path(socket),
            default_data_dir(),
            embedded,
        )
    }

    /// Sets the guardian launcher.
    pub fn with_launcher(mut self, launcher: GuardianLauncher) -> FrontendConfig {
        self.launcher = Some(launcher);
        self
    }
}

impl Default for FrontendConfig {
    fn default() -> FrontendConfig {
        FrontendConfig::new(default_socket_path(), default_data_dir(), false)
    }
}

impl fmt::Debug for FrontendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrontendConfig")
            .field("socket_path", &self.socket_path)
            .field("embedded", &self.embedded)
            .field("data_dir", &self.data_dir)
            .field("launcher", &self.launcher.as_ref().map(|_| "<fn>"))
            .field("timeouts", &self.timeouts)
            .field("launch_wait", &self.launch_wait)
            .field("quota_lock_wait", &self.quota_lock_wait)
            .field("dry_run", &self.dry_run)
            .finish()
    }
}

/// Whether releases can run for a session, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Availability {
    pub(crate) available: bool,
    pub(crate) reason: Option<Reason>,
}

impl Availability {
    fn yes() -> Availability {
        Availability { available: true, reason: None }
    }

    fn no(reason: Reason) -> Availability {
        Availability { available: false, reason: Some(reason) }
    }
}

/// One initialised thread.
#[derive(Clone, Debug)]
pub(crate) struct InitializedThread {
    pub(crate) thread_id: String,
    /// The canonical workspace, exactly as `Initialize` returned it.
    pub(crate) workspace: String,
    pub(crate) layout: Layout,
    pub(crate) session_dir: PathBuf,
    pub(crate) policy: Arc<Policy>,
    /// The guardian instance seen at `Initialize` (`None`: no guardian), or
    /// the one the thread re-attached to since.
    pub(crate) guardian_instance: Option<String>,
    /// `code_writer_config` as `Initialize` got it, for a re-attach.
    pub(crate) policy_config: Option<Value>,
}

/// The MCP frontend, transport aside. `Send + Sync`: tools may be called
/// from several threads at once.
pub struct Frontend {
    config: FrontendConfig,
    key: TokenKey,
    receipts: ReceiptStore,
    threads: Mutex<HashMap<String, InitializedThread>>,
    inflight: Mutex<HashMap<[u8; 32], Arc<Mutex<()>>>>,
    exec: ExecTable,
    kept: kept::Kept,
}

impl fmt::Debug for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frontend").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The refusal object of a tool: `status`, `errorCode`, `message`.
pub(crate) fn refusal(e: &FrontendError) -> Value {
    json!({"status": e.status(), "errorCode": e.code.as_str(), "message": e.message})
}

impl Frontend {
    /// A frontend with a fresh token secret. Fails only when the OS gives no
    /// random bytes.
    pub fn new(config: FrontendConfig) -> io::Result<Frontend> {
        Ok(Frontend {
            receipts: ReceiptStore::new(&config.data_dir),
            key: TokenKey::generate()?,
            config,
            threads: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            exec: ExecTable::default(),
            kept: kept::Kept::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FrontendConfig {
        &self.config
    }

    /// Calls tool `name` (a [`Tool`]'s name: `Initialize`, `ReadFiles`,
    /// `EditFiles`, `BashCommand`); `None` for an unknown tool.
    pub fn call(&self, name: &str, args: Value) -> Option<Value> {
        Some(match Tool::from_name(name)? {
            Tool::Initialize => self.initialize(args),
            Tool::ReadFiles => self.read_files(args),
            Tool::EditFiles => self.edit_files(args),
            Tool::BashCommand => self.bash_command(args),
        })
    }

    pub(crate) fn session(&self, thread_id: &str) -> Result<InitializedThread, FrontendError> {
        lock(&self.threads).get(thread_id).cloned().ok_or_else(|| {
            FrontendError::new(
                Reason::ThreadMismatch,
                format!(
                    "thread {thread_id:?} is not initialised in this server process: call Initialize with \
                     {{\"any_workspace_path\": \"<absolute workspace directory>\", \"thread_id\": {thread_id:?}}} \
                     first, in this same connection (threads live as long as the server process: a client \
                     that starts a server per call, as the Inspector's CLI does, needs a long-lived bridge; \
                     docs/MCP.md, \"Clients that start a process per call\")"
                ),
            )
        })
    }

    /// A connection to the guardian that said hello: one kept from an
    /// earlier call ([`kept`]) or a new one; at `Initialize` (`may_launch`),
    /// starts a guardian through the launcher when none answers. Give it
    /// back with [`Frontend::keep`] once its reply was read whole.
    pub(crate) fn guardian(&self, may_launch: bool) -> Result<(GuardianClient, Hello), ClientError> {
        match self.kept.take() {
            Some(kept) => Ok(kept),
            None => self.guardian_launched(may_launch).0,
        }
    }

    /// Keeps a connection from [`Frontend::guardian`] whose last call
    /// answered (its reply read whole) for the next call.
    pub(crate) fn keep(&self, client: GuardianClient, hello: Hello) {
        self.kept.put(client, hello);
    }

    /// [`Frontend::guardian`], and whether this call started the guardian.
    fn guardian_launched(&self, may_launch: bool) -> (Result<(GuardianClient, Hello), ClientError>, bool) {
        let socket = &self.config.socket_path;
        match GuardianClient::connect_hello(socket, self.config.timeouts) {
            Err(ClientError::Unavailable(first)) if may_launch => {
                let Some(launch) = &self.config.launcher else { return (Err(ClientError::Unavailable(first)), false) };
                if let Err(e) = launch(socket) {
                    return (Err(ClientError::Unavailable(io::Error::new(e.kind(), format!("launch: {e}")))), false);
                }
                let deadline = Instant::now() + self.config.launch_wait;
                loop {
                    match GuardianClient::connect_hello(socket, self.config.timeouts) {
                        Err(ClientError::Unavailable(e)) if Instant::now() < deadline => {
                            let _ = e;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        other => return (other, true),
                    }
                }
            }
            other => (other, false),
        }
    }

    /// `Initialize`: see the contract's section 3. Returns the session's
    /// keys, `temporary_release`, the quotas, and the stale-prune audit
    /// (`stale_audit`, which deletes nothing).
    pub fn initialize(&self, args: Value) -> Value {
        match self.try_initialize(&args) {
            Ok(v) => v,
            Err(e) => refusal(&e),
        }
    }

    fn try_initialize(&self, args: &Value) -> Result<Value, FrontendError> {
        let a = InitializeArgs::parse(args)?;
        let workspace = canonical_workspace(&a.any_workspace_path)?;
        let layout =
            Layout::new(&workspace, &self.config.data_dir).map_err(|d| FrontendError::new(d.reason, d.to_string()))?;
        let thread_id = match a.thread_id.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => t.to_owned(),
            None => random_hex(16),
        };
        let mode = a.mode_name.unwrap_or_default();
        let policy = Arc::new(Policy::new(mode, a.code_writer_config.as_ref())?);

        let mut guardian_info = Value::Null;
        let mut liveness = Value::Null;
        let mut instance = None;
        let mut notes: Vec<String> = Vec::new();
        let mut detail = None;
        let availability = if self.config.embedded {
            Availability::no(Reason::EmbeddedRuntime)
        } else if !cfg!(target_os = "linux") {
            Availability::no(Reason::UnsupportedPlatform)
        } else {
            let (reached, launched) = self.guardian_launched(true);
            match reached {
                Ok((mut client, hello)) => {
                    if launched {
                        // Said where the user meets it: the guardian stays.
                        notes.push(format!(
                            "started a guardian (pid {}) at {}; it outlives this frontend: `winx-release status` \
                             shows it, `winx-release guardian --stop` stops it",
                            hello.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
                            self.config.socket_path.display()
                        ));
                    }
                    instance = hello.instance.clone();
                    liveness = json!(hello.liveness);
                    guardian_info = json!({"socket": self.config.socket_path, "guardian": hello.guardian,
                        "instance": hello.instance, "capabilities": hello.capabilities});
                    // The mode is recorded with the guardian: an operator's
                    // `winx-release release` runs under it.
                    let config = a.code_writer_config.as_ref().and_then(|c| serde_json::to_value(c).ok());
                    if let Err(e) =
                        client.session_open_with(&workspace, &thread_id, Some(mode.as_str()), config.as_ref())
                    {
                        notes.push(format!("session_open: {e}; session directory created by the frontend"));
                    }
                    if hello.supports_temporary_release() {
                        Availability::yes()
                    } else {
                        Availability::no(Reason::OwnerUnsupported)
                    }
                }
                Err(e) => {
                    let reason = e.reason().unwrap_or(Reason::OwnerUnavailable);
                    if reason == Reason::OwnerUnavailable {
                        let line = unreachable_detail(&self.config.socket_path, &e);
                        tracing::warn!("{line}");
                        notes.push(line.clone());
                        detail = Some(line);
                    } else {
                        notes.push(e.to_string());
                    }
                    Availability::no(reason)
                }
            }
        };
        // A read-only mode refuses every release (`policy_denied`): it says
        // so here, where a client first looks.
        let availability = if availability.available && mode == ModeName::Architect {
            Availability::no(Reason::PolicyDenied)
        } else {
            availability
        };
        let session_dir = ensure_session_dir(&layout, &thread_id)?;
        let stale_audit = match audit(Path::new(&workspace)) {
            Ok(r) => serde_json::to_value(&r).unwrap_or(Value::Null),
            Err(e) => json!({"error": e.to_string(), "deletion_deferred": DELETION_DEFERRED}),
        };
        let session = InitializedThread {
            thread_id: thread_id.clone(),
            workspace: workspace.clone(),
            layout,
            session_dir: session_dir.clone(),
            policy,
            guardian_instance: instance,
            policy_config: a.code_writer_config.as_ref().and_then(|c| serde_json::to_value(c).ok()),
        };
        let reattached = lock(&self.threads).insert(thread_id.clone(), session).is_some();
        Ok(InitializeResult {
            status: "completed",
            thread_id,
            workspace_root: workspace,
            mode_name: mode.as_str(),
            temporary_artifact_dir: session_dir,
            temporary_release: TemporaryRelease {
                available: availability.available,
                reason: availability.reason.map(Reason::as_str),
                detail,
            },
            temporary_artifact_max_files: quota::MAX_SESSION_FILES,
            temporary_artifact_max_session_bytes: quota::MAX_SESSION_BYTES,
            temporary_artifact_max_file_bytes: quota::MAX_FILE_BYTES,
            temporary_artifact_max_bytes: quota::MAX_WORKSPACE_BYTES,
            temporary_artifact_stale_pruned_files: 0,
            deletion_deferred: DELETION_DEFERRED,
            stale_audit,
            reattached,
            guardian: guardian_info,
            liveness,
            init_type: a.init_type,
            message: (!notes.is_empty()).then(|| notes.join("; ")),
        }
        .to_value())
    }

    /// `EditFiles`: a release (`operation: "release_temporary"` or release
    /// entries) or whole-file writes (`mode: "replace"`).
    pub fn edit_files(&self, args: Value) -> Value {
        self.edit(&args)
    }

    /// `BashCommand`: run a command or check on one.
    pub fn bash_command(&self, args: Value) -> Value {
        match self.try_bash(&args) {
            Ok(v) => v,
            Err(e) => refusal(&e),
        }
    }
}

/// The canonical workspace of `any_workspace_path`: absolute
/// (`path_not_exact` otherwise), existing (`not_found`), a directory
/// (`invalid_input`), UTF-8.
fn canonical_workspace(p: &str) -> Result<String, FrontendError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(FrontendError::new(Reason::PathNotExact, format!("{p:?} is not an absolute path")));
    }
    // Before any system call: a path the kernel cannot take.
    check_kernel_shape(p).map_err(|r| {
        FrontendError::new(r, "the path holds a NUL, is over 4,095 bytes or has a component over 255 bytes")
    })?;
    let canon = path.canonicalize().map_err(|e| {
        let code = if e.kind() == io::ErrorKind::NotFound { Code::Reason(Reason::NotFound) } else { Code::IoError };
        FrontendError::new(code, format!("{p}: {e}"))
    })?;
    if !canon.is_dir() {
        return Err(FrontendError::invalid(format!("{} is not a directory", canon.display())));
    }
    canon.into_os_string().into_string().map_err(|_| FrontendError::invalid("the workspace path is not UTF-8"))
}

/// Creates `W/.winx/tmp/session-<..>` (0700) through no-follow directory
/// handles when missing, and checks that it opens as a directory.
fn ensure_session_dir(layout: &Layout, thread_id: &str) -> Result<PathBuf, FrontendError> {
    let fail = |e: io::Error| FrontendError::new(Code::IoError, format!("session directory: {e}"));
    layout.create_session_dir(thread_id).map_err(fail)?;
    open_session_dir(layout, thread_id)
        .map_err(|r| FrontendError::new(r, "the session directory cannot be opened without following links"))?;
    Ok(layout.session_dir(thread_id))
}

/// The one line a user is shown when no guardian can be used at `socket`
/// (contract section 3, `temporary_release.detail`; also logged, and the
/// message of a refused `BashCommand`): the socket tried, why it failed,
/// and what to do.
pub(crate) fn unreachable_detail(socket: &Path, e: &ClientError) -> String {
    let s = socket.display();
    let advice =
        winx_release_protocol::socket_path::socket_advice(socket).map(|a| format!(" ({a})")).unwrap_or_default();
    // A command that works for this user here: a socket whose directory
    // is (or can be made) private.
    let usable = winx_release_protocol::socket_path::usable_socket_path(socket);
    let u = usable.display();
    let fix = if usable == socket {
        format!("start one with `winx-release guardian --socket {u}`")
    } else {
        format!(
            "{s} cannot hold a guardian socket: start one with `winx-release guardian --socket {u}` and pass \
             `--socket {u}` to `winx-release mcp`"
        )
    };
    format!(
        "no usable guardian at {s}: {e}{advice}; {fix}, pass `--socket PATH` of a running guardian to \
         `winx-release mcp`, or set WINX_GUARDIAN_SOCKET"
    )
}

impl InitializedThread {
    /// The session's shell mode.
    pub(crate) fn mode(&self) -> ModeName {
        self.policy.mode()
    }
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod quota_tests;
