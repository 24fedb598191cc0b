//! Support for the end-to-end tests: real guardian and MCP frontend
//! processes in a private temporary directory, an MCP client driving them,
//! filesystem snapshots, and a guard that ends every process a test started.
#![allow(dead_code)]

pub mod blocked;
mod release;

pub use release::*;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use winx_release_stress::harness::dirs::PrivateDirs;
use winx_release_stress::harness::guardian::GuardianProc;
use winx_release_stress::harness::raw::RawClient;

pub use winx_release_stress::harness::read_line::read_line_timeout;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_winx-release");

/// How long a guardian may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// One test's private world: workspace `W`, data home, home, socket path
/// (the harness's [`PrivateDirs`], whose fields it derefs to), and the
/// processes started in it.
pub struct Env {
    dirs: PrivateDirs,
    guardian: Option<GuardianProc>,
    logs: AtomicUsize,
    /// The last guardian's ready line.
    pub ready: Option<Value>,
    /// This world's turn (dropped last, after its processes).
    _turn: Turn,
}

/// Worlds share the machine, but for one that disturbs every other
/// (a chain of processes forking successors makes every `/proc` snapshot
/// of the machine fail, and so every other world's liveness answer):
/// that one runs alone ([`Env::alone`]).
static TURNS: Turns = Turns { state: std::sync::Mutex::new((0, false, 0)), changed: std::sync::Condvar::new() };

/// Worlds running (shared), whether one runs alone, and how many wait to
/// run alone (they go first: a world that waits to run alone is not
/// starved by shared ones starting after it).
struct Turns {
    state: std::sync::Mutex<(usize, bool, usize)>,
    changed: std::sync::Condvar,
}

/// A world's turn: shared (`false`) or alone (`true`), given back when
/// dropped (from any thread).
struct Turn(bool);

impl Turn {
    fn take(alone: bool) -> Turn {
        let mut st = TURNS.state.lock().unwrap_or_else(|e| e.into_inner());
        if alone {
            st.2 += 1;
            while st.0 > 0 || st.1 {
                st = TURNS.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.2 -= 1;
            st.1 = true;
        } else {
            while st.1 || st.2 > 0 {
                st = TURNS.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.0 += 1;
        }
        Turn(alone)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut st = TURNS.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.0 {
            st.1 = false;
        } else {
            st.0 -= 1;
        }
        TURNS.changed.notify_all();
    }
}

impl std::ops::Deref for Env {
    type Target = PrivateDirs;
    fn deref(&self) -> &PrivateDirs {
        &self.dirs
    }
}

impl std::ops::DerefMut for Env {
    fn deref_mut(&mut self) -> &mut PrivateDirs {
        &mut self.dirs
    }
}

impl Env {
    /// A fresh world (nothing started).
    pub fn new() -> Env {
        Env::with_turn(Turn::take(false))
    }

    /// A fresh world that runs while no other world of this binary does
    /// (it waits for those running to end; new ones wait for it).
    pub fn alone() -> Env {
        Env::with_turn(Turn::take(true))
    }

    /// A fresh world below `base` instead of the system's temporary
    /// directory (for a test that hides `/tmp` from its processes).
    pub fn new_in(base: &Path) -> Env {
        Env::with_turn_in(Turn::take(false), Some(base))
    }

    fn with_turn(turn: Turn) -> Env {
        Env::with_turn_in(turn, None)
    }

    fn with_turn_in(turn: Turn, base: Option<&Path>) -> Env {
        let dirs = PrivateDirs::create("winx-e2e-", base).expect("private tempdir");
        Env { dirs, guardian: None, logs: AtomicUsize::new(0), ready: None, _turn: turn }
    }

    /// The environment every process of this world gets.
    pub fn vars(&self) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(OsString, OsString)> =
            self.dirs.vars().iter().map(|(k, v)| (OsString::from(k), v.as_os_str().to_owned())).collect();
        vars.push(("RUST_LOG".into(), "info".into()));
        vars
    }

    /// Variables removed so that nothing outside this world is found.
    pub const REMOVED: [&'static str; 2] = PrivateDirs::REMOVED;

    /// A new log file for a child's stderr.
    pub fn log_file(&self, what: &str) -> (PathBuf, fs::File) {
        let n = self.logs.fetch_add(1, Ordering::SeqCst);
        let path = self.root.join(format!("{what}-{n}.log"));
        let f = fs::File::create(&path).expect("log file");
        (path, f)
    }

    /// A `std` command of the binary in this world, through `wrapper` when
    /// it is not empty.
    fn command_via<S: AsRef<OsStr>>(&self, wrapper: &[&str], args: &[S]) -> Command {
        let mut c = self.dirs.command(wrapper, Path::new(BIN), args);
        c.env("RUST_LOG", "info");
        c
    }

    /// A `std` command of the binary in this world.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_via(&[], args)
    }

    /// Starts `winx-release guardian --socket <sock>` and waits for its
    /// ready line. Returns its pid.
    pub fn start_guardian(&mut self) -> u32 {
        self.start_guardian_with(&[])
    }

    /// Like [`Env::start_guardian`], run through `wrapper` (a command that
    /// execs its arguments, such as `unshare -m --`).
    pub fn start_guardian_with(&mut self, wrapper: &[&str]) -> u32 {
        assert!(self.guardian.is_none(), "a guardian already runs");
        let (_, log) = self.log_file("guardian");
        let mut cmd = self.command_via(wrapper, &["guardian", "--socket", p(&self.sock)]);
        cmd.stdin(Stdio::null()).stderr(log);
        let guardian = GuardianProc::spawn(cmd, READY_TIMEOUT).expect("guardian ready line");
        let pid = guardian.pid();
        let ready = guardian.ready.clone();
        self.guardian = Some(guardian);
        let line = ready.to_string();
        assert_eq!(ready["event"], "ready", "{line}");
        assert_eq!(ready["socket"], json!(self.sock), "{line}");
        assert_eq!(ready["pid"], json!(pid), "{line}");
        assert!(ready["capabilities"].as_array().is_some_and(|c| c.contains(&json!("temporary_release"))), "{line}");
        assert!(ready["liveness"] == "cgroup" || ready["liveness"] == "proc", "{line}");
        self.ready = Some(ready);
        pid
    }

    /// Starts a guardian at the world's socket whose data directory is
    /// below `data_home` (`XDG_DATA_HOME`), not the world's.
    pub fn start_guardian_in(&mut self, data_home: &Path) -> u32 {
        assert!(self.guardian.is_none(), "a guardian already runs");
        let (_, log) = self.log_file("guardian");
        let mut cmd = self.command_via(&[], &["guardian", "--socket", p(&self.sock)]);
        cmd.env("XDG_DATA_HOME", data_home).stdin(Stdio::null()).stderr(log);
        let guardian = GuardianProc::spawn(cmd, READY_TIMEOUT).expect("guardian ready line");
        let pid = guardian.pid();
        self.guardian = Some(guardian);
        pid
    }

    /// Kills the guardian with SIGKILL and reaps it.
    pub fn kill_guardian(&mut self) {
        if let Some(mut g) = self.guardian.take() {
            g.kill();
        }
    }

    /// Starts `winx-release mcp --socket <sock> <extra>` and connects an
    /// MCP client to it over its stdio.
    pub async fn mcp(&self, extra: &[&str]) -> Mcp {
        self.mcp_at(&self.sock, extra).await
    }

    /// Like [`Env::mcp`] with another socket path.
    pub async fn mcp_at(&self, sock: &Path, extra: &[&str]) -> Mcp {
        self.mcp_wrapped(&[], sock, extra).await
    }

    /// Like [`Env::mcp_at`], run through `wrapper` (a command that execs its
    /// arguments, such as `setpriv --reuid=N --`).
    pub async fn mcp_wrapped(&self, wrapper: &[&str], sock: &Path, extra: &[&str]) -> Mcp {
        self.mcp_full(wrapper, Some(sock), extra, &[]).await
    }

    /// Starts `winx-release mcp [--socket <sock>] <extra>` in this world's
    /// environment less the variables `remove`, and connects an MCP client.
    pub async fn mcp_with(&self, sock: Option<&Path>, extra: &[&str], remove: &[&str]) -> Mcp {
        self.mcp_full(&[], sock, extra, remove).await
    }

    /// `winx-release mcp [--socket <sock>] <extra>` through `wrapper`, in
    /// this world's environment less `remove`, with an MCP client.
    pub async fn mcp_full(&self, wrapper: &[&str], sock: Option<&Path>, extra: &[&str], remove: &[&str]) -> Mcp {
        let mut args = vec![OsStr::new("mcp")];
        if let Some(sock) = sock {
            args.extend([OsStr::new("--socket"), sock.as_os_str()]);
        }
        args.extend(extra.iter().map(OsStr::new));
        let mut cmd = self.command_via(wrapper, &args);
        for v in remove {
            cmd.env_remove(v);
        }
        let cmd = tokio::process::Command::from(cmd);
        let (log_path, log) = self.log_file("mcp");
        let (transport, _) =
            TokioChildProcess::builder(cmd).stderr(Stdio::from(log)).spawn().expect("spawn the MCP server");
        let pid = transport.id().expect("MCP server pid");
        let service = ().serve(transport).await.expect("MCP initialisation");
        Mcp { service: Some(service), pid, log: log_path }
    }

    /// Every process whose environment is this world's (the MCP servers,
    /// guardians, and the commands they run), except this test process.
    pub fn own_processes(&self) -> Vec<i32> {
        let marker = format!("XDG_DATA_HOME={}", self.data_home.display()).into_bytes();
        let me = std::process::id() as i32;
        let mut pids = Vec::new();
        let Ok(dir) = fs::read_dir("/proc") else { return pids };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if pid == me {
                continue;
            }
            if let Ok(environ) = fs::read(e.path().join("environ")) {
                if environ.split(|b| *b == 0).any(|v| v == marker.as_slice()) {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// The session directory of `thread` in this workspace.
    pub fn session_dir(&self, thread: &str) -> PathBuf {
        use sha2::Digest;
        let d = sha2::Sha256::digest(thread.as_bytes());
        self.ws.join(".winx/tmp").join(format!("session-{}", hex::encode(&d[..8])))
    }

    /// Prints every log of this world to stderr (for a failing test).
    pub fn dump_logs(&self) {
        let Ok(dir) = fs::read_dir(&self.root) else { return };
        for e in dir.flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                let text = fs::read_to_string(e.path()).unwrap_or_default();
                eprintln!("----- {} -----\n{text}", e.path().display());
            }
        }
    }
}

impl Default for Env {
    fn default() -> Env {
        Env::new()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs();
        }
        self.kill_guardian();
        // Then everything else this world started: MCP servers, guardians a
        // frontend launched, and the commands they run (own process groups).
        for _ in 0..3 {
            let pids = self.own_processes();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An MCP client connected to one `winx-release mcp` process.
pub struct Mcp {
    service: Option<RunningService<RoleClient, ()>>,
    /// The server's pid.
    pub pid: u32,
    /// Its stderr log.
    pub log: PathBuf,
}

impl Mcp {
    fn service(&self) -> &RunningService<RoleClient, ()> {
        self.service.as_ref().expect("MCP client is running")
    }

    /// `tools/list`.
    pub async fn tools(&self) -> Vec<Tool> {
        self.service().list_all_tools().await.expect("tools/list")
    }

    /// `tools/call` returning the raw result or the protocol error.
    pub async fn try_call(&self, tool: &str, args: Value) -> Result<CallToolResult, rmcp::ServiceError> {
        let Value::Object(m) = args else { panic!("tool arguments must be an object") };
        self.service().call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(m)).await
    }

    /// `tools/call`; returns `structuredContent` after checking the result's
    /// shape: one text block, the rendering for a model (its status line
    /// says the status, and for `ReadFiles` the revisions and tokens parsed
    /// back from it are `structuredContent`'s), `isError` exactly when the
    /// status is `denied`, `invalid_input` or `failed`.
    pub async fn call(&self, tool: &str, args: Value) -> Value {
        let r = self.try_call(tool, args.clone()).await.unwrap_or_else(|e| panic!("{tool} {args}: {e}"));
        let v = r.structured_content.clone().unwrap_or_else(|| panic!("{tool}: no structuredContent: {r:?}"));
        assert!(v.is_object(), "{tool}: structuredContent is not an object: {v}");
        let status = v["status"].as_str().unwrap_or_else(|| panic!("{tool}: no status: {v}"));
        let failed = matches!(status, "denied" | "invalid_input" | "failed");
        assert_eq!(r.is_error, Some(failed), "{tool}: isError for status {status}: {v}");
        assert_eq!(r.content.len(), 1, "{tool}: one text block: {r:?}");
        let text = &r.content[0].as_text().unwrap_or_else(|| panic!("{tool}: no text block: {r:?}")).text;
        let line = match v["errorCode"].as_str() {
            Some(code) => format!("{tool}: {status} ({code})"),
            None => format!("{tool}: {status}"),
        };
        assert!(text.lines().any(|l| l == line), "{tool}: no status line {line:?} in the text: {text}");
        if tool == "ReadFiles" {
            let want: Vec<TextFile> =
                v["files"].as_array().map(|a| a.iter().map(TextFile::of_structured).collect()).unwrap_or_default();
            assert_eq!(text_files(text), want, "ReadFiles: the text block's files are structuredContent's: {text}");
        }
        v
    }

    /// `Initialize` of `thread` in `ws` (wcgw); returns the result.
    pub async fn init(&self, ws: &Path, thread: &str) -> Value {
        self.init_with(json!({"any_workspace_path": ws, "thread_id": thread})).await
    }

    /// `Initialize` with explicit arguments; asserts it succeeded.
    pub async fn init_with(&self, args: Value) -> Value {
        let v = self.call("Initialize", args.clone()).await;
        assert!(!is_failure(&v), "Initialize {args}: {v}");
        assert!(v["thread_id"].is_string(), "{v}");
        assert!(v["temporary_artifact_dir"].is_string(), "{v}");
        v
    }

    /// `BashCommand` running `command` with the default wait.
    pub async fn bash(&self, thread: &str, command: &str) -> Value {
        let v = self.call("BashCommand", json!({"thread_id": thread, "command": command})).await;
        assert_eq!(v["status"], "completed", "{command}: {v}");
        assert_eq!(v["exit_code"], 0, "{command}: {v}");
        v
    }

    /// `ReadFiles` of one helper; returns `(revision, artifact_generation)`.
    pub async fn read_helper(&self, thread: &str, path: &Path) -> (String, String) {
        let v = self.call("ReadFiles", json!({"thread_id": thread, "file_paths": [path]})).await;
        let f = &v["files"][0];
        assert_eq!(f["file_path"], json!(path), "{v}");
        let rev = f["revision"].as_str().unwrap_or_else(|| panic!("no revision: {v}")).to_owned();
        let generation = f["temporary_artifact"]["artifact_generation"]
            .as_str()
            .unwrap_or_else(|| panic!("no artifact_generation: {v}"))
            .to_owned();
        assert_eq!(f["temporary_artifact"]["in_use"], Value::Null, "{v}");
        assert_eq!(f["temporary_artifact"]["releasable"], Value::Null, "{v}");
        (rev, generation)
    }

    /// `EditFiles`.
    pub async fn edit(&self, args: Value) -> Value {
        self.call("EditFiles", args).await
    }

    /// Closes the client; the server sees EOF on stdin and exits.
    pub async fn stop(mut self) {
        if let Some(s) = self.service.take() {
            let _ = s.cancel().await;
        }
    }
}

/// The first text block of a tool result, parsed as the JSON object it must
/// hold.
pub fn text_object(r: &CallToolResult) -> Value {
    let text = r.content.first().and_then(|c| c.as_text()).unwrap_or_else(|| panic!("no text block first: {r:?}"));
    let v: Value = serde_json::from_str(&text.text)
        .unwrap_or_else(|e| panic!("the first text block is not JSON ({e}): {:?}", text.text));
    assert!(v.is_object(), "the first text block is not a JSON object: {v}");
    v
}

/// What a model copies from one file of a `ReadFiles` text rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextFile {
    /// `file_path:`.
    pub path: String,
    /// `revision:`.
    pub revision: Option<String>,
    /// `artifact_generation:`.
    pub generation: Option<String>,
}

impl TextFile {
    fn of_structured(f: &Value) -> TextFile {
        let s = |v: &Value| v.as_str().map(str::to_owned);
        TextFile {
            path: f["file_path"].as_str().unwrap_or_default().to_owned(),
            revision: s(&f["revision"]),
            generation: s(&f["temporary_artifact"]["artifact_generation"]),
        }
    }
}

/// The files of a `ReadFiles` text rendering, parsed back as a test client
/// (or a model) reads it: a block per file starting at `file_path:`, its
/// `revision:` and `artifact_generation:` lines, and the fenced content
/// passed over (a line inside it is never taken for a label).
pub fn text_files(text: &str) -> Vec<TextFile> {
    let mut files: Vec<TextFile> = Vec::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        if let Some(f) = &fence {
            if line == f {
                fence = None;
            }
            continue;
        }
        if line.starts_with("```") && line.bytes().all(|b| b == b'`') {
            fence = Some(line.to_owned());
        } else if let Some(p) = line.strip_prefix("file_path: ") {
            files.push(TextFile { path: p.to_owned(), revision: None, generation: None });
        } else if let (Some(r), Some(f)) = (line.strip_prefix("revision: "), files.last_mut()) {
            f.revision = Some(r.to_owned());
        } else if let (Some(g), Some(f)) = (line.strip_prefix("artifact_generation: "), files.last_mut()) {
            f.generation = Some(g.to_owned());
        }
    }
    files
}

/// Whether a result's status is a failure.
pub fn is_failure(v: &Value) -> bool {
    matches!(v["status"].as_str(), Some("denied" | "invalid_input" | "failed"))
}

/// Waits until `cond` holds (or panics after `secs`, naming `what`).
pub fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes a fifo at `path`.
pub fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().expect("mkfifo").success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Whether `path` is a fifo.
pub fn is_fifo(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// The contract's revision string of `bytes`.
pub fn revision_of(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A path as the UTF-8 string the tools take.
pub fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// A world with a guardian and one MCP frontend connected to it.
pub async fn world() -> (Env, Mcp) {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    (env, mcp)
}

/// An MCP frontend driven over raw stdio lines (the harness's
/// [`RawClient`], whose methods and `child` it derefs to), for what a client
/// library would not send: malformed frames, hostile sizes, bytes that are
/// not UTF-8. Its methods panic where the client's return an error.
pub struct RawMcp(RawClient);

impl std::ops::Deref for RawMcp {
    type Target = RawClient;
    fn deref(&self) -> &RawClient {
        &self.0
    }
}

impl std::ops::DerefMut for RawMcp {
    fn deref_mut(&mut self) -> &mut RawClient {
        &mut self.0
    }
}

impl RawMcp {
    /// Starts `winx-release mcp` against the env's socket, logging to `log`.
    pub fn start(env: &Env, log: &str) -> RawMcp {
        let (_, log) = env.log_file(log);
        let child = env
            .command(&["mcp", "--socket", p(&env.sock)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn mcp");
        RawMcp(RawClient::new(child).expect("piped stdio"))
    }

    /// Writes `bytes` and a newline.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.0.send_raw(bytes).expect("stdin still open");
    }

    /// Writes one JSON-RPC message.
    pub fn send(&mut self, v: Value) {
        self.0.send(&v).expect("stdin still open");
    }

    /// The next line of stdout, which must be JSON.
    pub fn recv(&self, timeout: Duration) -> Value {
        self.0.recv(timeout).unwrap_or_else(|e| panic!("a response line: {e}"))
    }
}
