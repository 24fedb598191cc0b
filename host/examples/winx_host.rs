//! A third-party MCP server that is frontend and runtime in one process, as
//! winx is today, shaped as winx's tools would call it: `Initialize` →
//! `ReadFiles` → a refusal while a command runs → `EditFiles` release →
//! the same request again (a replay). It has no safety code of its own: the
//! generation token, the receipts and their keys, every request check, the
//! admission barrier, the rules on paths and the release itself are library
//! calls (`winx-release-host` and `winx-release-engine`); what is here
//! is glue: holding the state, building JSON, calling the steps in order.
//!
//! Run: `cargo run -p winx-release-host --example winx_host` (it works in
//! a temporary directory and exits 0 when every step answered as the
//! contract says). The code is the same on every platform: off Linux the
//! first `Initialize` answers `unsupported_platform`, and `main` says so;
//! only crash recovery (Linux's alone) is per platform.

mod host {
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{json, Value};
    use winx_release_engine::read::{read_pinned, Keep};
    use winx_release_engine::{release, Admission, Layout, ReleaseOptions, ReleaseRequest};
    use winx_release_host::request::{self, Binding};
    use winx_release_host::{Code, FrontendError, ReceiptStore, ReleaseResult, TokenKey, TokenSubject};
    use winx_release_runtime::{
        ExecState, Execution, LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey, Spawn,
    };

    /// What `Initialize` made: one thread's session.
    pub struct HostSession {
        thread_id: String,
        workspace_root: String,
        layout: Layout,
        key: SessionKey,
        admission: Admission,
    }

    /// The server's state: its token secret, receipts, runtime, sessions.
    pub struct Host {
        tokens: TokenKey,
        receipts: ReceiptStore,
        runtime: Arc<Runtime>,
        data_dir: std::path::PathBuf,
        sessions: HashMap<String, HostSession>,
    }

    impl Host {
        /// Process start: the secret, crash recovery, the runtime.
        pub fn start(data_dir: &Path, workspaces: &[std::path::PathBuf]) -> Result<Host, Box<dyn std::error::Error>> {
            recover(data_dir, workspaces)?;
            // A process with children of its own: no subreaper, no cgroup move.
            let opts = RuntimeOptions {
                liveness: LivenessChoice::Proc,
                move_self: false,
                subreaper: false,
                ..Default::default()
            };
            Ok(Host {
                tokens: TokenKey::generate()?,
                receipts: ReceiptStore::new(data_dir),
                runtime: Runtime::start(data_dir, &opts),
                data_dir: data_dir.to_owned(),
                sessions: HashMap::new(),
            })
        }

        /// `Initialize`.
        pub fn initialize(&mut self, workspace: &Path, thread_id: &str) -> Result<Value, Box<dyn std::error::Error>> {
            let layout = Layout::new(workspace, &self.data_dir)?;
            let key = SessionKey::of_dir(layout.create_session_dir(thread_id)?)?;
            let dir = layout.session_dir(thread_id);
            let workspace_root = workspace.to_str().ok_or("workspace not UTF-8")?.to_owned();
            let s =
                HostSession { thread_id: thread_id.into(), workspace_root, layout, key, admission: Admission::new() };
            let answer = json!({"status": "completed", "thread_id": thread_id, "workspace_root": s.workspace_root,
                "temporary_artifact_dir": dir, "temporary_release": {"available": true, "reason": null}});
            self.sessions.insert(thread_id.into(), s);
            Ok(answer)
        }

        /// `ReadFiles` of one helper of the thread's session.
        pub fn read(&self, thread_id: &str, path: &str) -> Value {
            let Some(s) = self.sessions.get(thread_id) else {
                return json!({"status": "denied", "errorCode": "thread_mismatch"});
            };
            match read_pinned(&s.layout.session_dir(thread_id), Path::new(path), Keep::Text(64 * 1024)) {
                Err(reason) => json!({"status": "failed", "failed_files": [{"file_path": path, "errorCode": reason}]}),
                Ok(read) => {
                    let subject = TokenSubject { thread_id, workspace_root: &s.workspace_root, path, pin: read.pin };
                    json!({"status": "completed", "files": [{"file_path": path, "revision": read.revision(),
                        "size": read.pin.size, "content": read.head.into_text(false),
                        "temporary_artifact": {"artifact_generation": self.tokens.mint(&subject),
                            "in_use": null, "releasable": null}}]})
                }
            }
        }

        /// `BashCommand` in the background, started under the barrier.
        pub fn bash(&self, thread_id: &str, command: &str) -> Result<Arc<Execution>, Box<dyn std::error::Error>> {
            let s = self.sessions.get(thread_id).ok_or("unknown thread")?;
            let _admission = s.admission.enter();
            let e = self.runtime.submit(Spawn {
                thread: thread_id.into(),
                workspace: s.layout.workspace().into(),
                cwd: None,
                session: s.key,
                command: command.into(),
                background: true,
                env: vec![("WINX_TEMP_DIR".into(), s.layout.session_dir(thread_id).into())],
            })?;
            self.runtime.run(&e)?;
            Ok(e)
        }

        /// `EditFiles` with a release: the library's steps, in order.
        pub fn edit_files(&self, args: &Value) -> Value {
            let req = match request::parse(args) {
                Ok(req) => req,
                Err(e) => return ReleaseResult::denied(&request::paths_of(args), &e).to_value(),
            };
            let paths = req.paths();
            let session = self.sessions.get(&req.thread_id);
            let binding = session.map(|s| Binding { thread_id: &s.thread_id, workspace_root: &s.workspace_root });
            // A request of no known thread can still replay its receipt.
            let barrier = Admission::new();
            let admission = session.map_or(&barrier, |s| &s.admission).enter();
            match self.receipts.find(&req) {
                Ok(Some(replay)) => return replay.to_value(),
                Ok(None) => {}
                Err(e) => {
                    let e = FrontendError::new(Code::IoError, format!("receipt: {e}"));
                    return ReleaseResult::denied(&paths, &e).failed().to_value();
                }
            }
            let b = match req.check_shape().and_then(|()| req.check_binding(binding)) {
                Ok(b) => b,
                Err(e) => return ReleaseResult::denied(&paths, &e).to_value(),
            };
            let s = &self.sessions[b.thread_id];
            let targets = match req.targets(&self.tokens, b, &s.layout) {
                Ok(targets) => targets,
                Err(e) => return ReleaseResult::denied(&paths, &e).to_value(),
            };
            let owner = OwnerAnswer {
                liveness: self.runtime.thread_liveness(&s.key, &s.thread_id),
                pending: 0,
                exempt: vec![std::process::id() as i32],
                session: Some(s.key),
            };
            let rr = ReleaseRequest { layout: &s.layout, thread_id: &s.thread_id, targets: &targets };
            let report = release(&rr, &admission, &owner, &ReleaseOptions::default());
            // The receipt (when the run touched anything), then the answer.
            self.receipts.answer(&req, &report).to_value()
        }
    }

    /// The agent's session, end to end.
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let ws = tmp.path().canonicalize()?.join("ws");
        std::fs::create_dir(&ws)?;
        let data = tmp.path().canonicalize()?.join("data");
        let mut host = Host::start(&data, std::slice::from_ref(&ws))?;

        let init = host.initialize(&ws, "thread-1")?;
        let dir = init["temporary_artifact_dir"].as_str().ok_or("no session dir")?.to_owned();
        let helper = format!("{dir}/helper.sh");
        std::fs::write(&helper, "sleep 2\n")?;
        let read = host.read("thread-1", &helper);
        println!("read: {read}");
        let f = &read["files"][0];
        let args = json!({"thread_id": "thread-1", "workspace_root": init["workspace_root"],
            "operation": "release_temporary", "files": [{"file_path": helper, "mode": "release_temporary",
            "expected_revision": f["revision"], "artifact_generation": f["temporary_artifact"]["artifact_generation"]}]});

        let command = host.bash("thread-1", &format!("bash {helper}"))?;
        let refused = host.edit_files(&args);
        println!("while the command runs: {refused}");
        expect(&refused, "denied", Some("execution_active"), false)?;
        if !Path::new(&helper).exists() {
            return Err("a helper in use was removed".into());
        }

        let state = command.wait_until(Duration::from_secs(20), ExecState::is_final);
        println!("command {}: {}", command.id, state.as_str());
        let released = host.edit_files(&args);
        println!("release: {released}");
        expect(&released, "completed", None, false)?;
        if Path::new(&helper).exists() || released["files"][0]["outcome"] != "released" {
            return Err("the helper was not released".into());
        }

        // The same request again, and from a new process (a new secret):
        // a replay of the receipt; a new file at the path survives it.
        std::fs::write(&helper, "new\n")?;
        let replay = host.edit_files(&args);
        println!("replay: {replay}");
        expect(&replay, "completed", None, true)?;
        let restarted = Host::start(&data, std::slice::from_ref(&ws))?;
        expect(&restarted.edit_files(&args), "completed", None, true)?;
        if std::fs::read_to_string(&helper)? != "new\n" || replay["receipt_id"] != released["receipt_id"] {
            return Err("a replay touched the new file or named another receipt".into());
        }
        Ok(())
    }

    /// Crash recovery: put back what a crash left in quarantine.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    fn recover(data_dir: &Path, workspaces: &[std::path::PathBuf]) -> std::io::Result<()> {
        winx_release_engine::recovery::recover(data_dir, workspaces).map(drop)
    }

    /// Off Linux no release ever ran: nothing to recover.
    #[cfg(not(all(target_os = "linux", not(winx_foreign))))]
    fn recover(_data_dir: &Path, _workspaces: &[std::path::PathBuf]) -> std::io::Result<()> {
        Ok(())
    }

    fn expect(v: &Value, status: &str, code: Option<&str>, replayed: bool) -> Result<(), String> {
        let ok =
            v["status"] == status && v.get("errorCode").and_then(Value::as_str) == code && v["replayed"] == replayed;
        ok.then_some(()).ok_or_else(|| format!("expected {status} {code:?} replayed={replayed}, got {v}"))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First: started as an execution's monitor, this program is that (off
    // Linux it returns).
    winx_release_runtime::monitor::enter();
    match host::run() {
        // The answer off Linux, and only there.
        Err(e) if !cfg!(all(target_os = "linux", not(winx_foreign))) && unsupported_platform(&*e) => {
            println!("{e}: release is supported on Linux only, every release here is unsupported_platform");
            Ok(())
        }
        other => other,
    }
}

/// Whether `e` is the engine's `unsupported_platform` (an I/O error of
/// kind `Unsupported` carrying [`winx_release_engine::Reason`]).
fn unsupported_platform(e: &(dyn std::error::Error + 'static)) -> bool {
    let reason = e.downcast_ref::<std::io::Error>().and_then(|e| e.get_ref()).and_then(|r| r.downcast_ref());
    reason == Some(&winx_release_engine::Reason::UnsupportedPlatform)
}
