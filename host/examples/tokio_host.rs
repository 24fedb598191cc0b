//! A tokio MCP server that is frontend and runtime in one process and keeps
//! its own terminal, as winx does: its own PTY (it opens the pair, keeps
//! the controller, reads and renders what the shell prints), its own
//! prompt detection (a marker its prompt command prints, chained with the
//! engine's hook), the user's shell (their rc and prompt; a second thread
//! runs `bash -r`), and async file tools that write under the session's
//! barrier. Nothing here blocks a worker: the barrier is awaited
//! (`Admission::enter_async`) and held across `.await`; every call that
//! blocks runs on the blocking pool with the guard moved there.
//!
//! (The scenario at the bottom plays the agent and the client: its few
//! direct filesystem calls stand for the agent's own.)
//!
//! It holds no HMAC, hash, lock or path check of its own: tokens, receipts,
//! the request's checks, read-and-pin, which session a write reaches, the
//! barrier, the shell's idleness and the release are library calls.
//!
//! Run: `cargo run -p winx-release-host --example tokio_host` (it works in
//! a temporary directory and exits 0 when every step answered as the
//! contract says).
//!
//! The code is the same on every platform (`.ci/foreign.sh` runs it built
//! as off Linux): there the first `Initialize` answers
//! `unsupported_platform` (no session directory is made, no shell starts),
//! and `main` says so. Only the two calls at the bottom that Linux alone
//! has (the host's own PTY, crash recovery) are per platform.

mod host {
    use std::collections::HashMap;
    use std::fs::File;
    use std::io::{Read, Write as _};
    use std::os::fd::OwnedFd;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};
    use tokio::sync::watch;
    use tokio::task::spawn_blocking;
    use winx_release_engine::preflight::route_write;
    use winx_release_engine::read::{read_pinned, Keep};
    use winx_release_engine::{release, Admission, Layout, ReleaseOptions, ReleaseRequest, RuntimeOwner};
    use winx_release_host::request::{self, Binding};
    use winx_release_host::{Code, FrontendError, ReceiptStore, ReleaseResult, TokenKey, TokenSubject};
    use winx_release_runtime::shell::{Shell, ShellProgram, ShellSpawn, Terminal, Write};
    use winx_release_runtime::{LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey};

    pub type Error = Box<dyn std::error::Error + Send + Sync>;

    /// The host's prompt marker (its own prompt detection), printed by its
    /// prompt command with the last status.
    const MARK: &[u8] = b"\x1b]133;D;";

    /// One thread's session; `shell` is `None` for a thread whose shell
    /// the host runs without the engine (releases there are unsupported).
    struct Session {
        thread_id: String,
        workspace_root: String,
        layout: Layout,
        key: SessionKey,
        admission: Arc<Admission>,
        shell: Option<(Shell, Arc<File>, watch::Receiver<u64>)>,
    }

    /// The server's state.
    pub struct Host {
        tokens: Arc<TokenKey>,
        receipts: Arc<ReceiptStore>,
        runtime: Arc<Runtime>,
        data_dir: PathBuf,
        sessions: HashMap<String, Arc<Session>>,
    }

    /// Runs blocking work on the blocking pool.
    async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Error> {
        Ok(spawn_blocking(f).await?)
    }

    impl Host {
        /// Process start: crash recovery, the secret, the runtime.
        pub async fn start(data_dir: PathBuf, workspaces: Vec<PathBuf>) -> Result<Host, Error> {
            blocking(move || {
                recover(&data_dir, &workspaces)?;
                let opts = RuntimeOptions {
                    liveness: LivenessChoice::Proc,
                    move_self: false,
                    subreaper: false,
                    ..Default::default()
                };
                Ok(Host {
                    tokens: Arc::new(TokenKey::generate()?),
                    receipts: Arc::new(ReceiptStore::new(&data_dir)),
                    runtime: Runtime::start(&data_dir, &opts),
                    data_dir,
                    sessions: HashMap::new(),
                })
            })
            .await?
        }

        /// `Initialize`: the session, and the thread's shell on the host's
        /// own PTY (`program`), or no shell through the engine (`None`).
        pub async fn initialize(
            &mut self,
            ws: &Path,
            thread: &str,
            program: Option<ShellProgram>,
        ) -> Result<Value, Error> {
            let (ws, data, rt, t) = (ws.to_owned(), self.data_dir.clone(), self.runtime.clone(), thread.to_owned());
            let session = blocking(move || -> Result<Session, Error> {
                let layout = Layout::new(&ws, &data)?;
                let key = SessionKey::of_dir(layout.create_session_dir(&t)?)?;
                let admission = Arc::new(Admission::new());
                let shell = match program {
                    None => None,
                    Some(program) => {
                        let (controller, follower) = open_pty()?;
                        let prompts = detect_prompts(controller.try_clone()?);
                        let spawn = ShellSpawn {
                            thread: t.clone(),
                            workspace: ws.clone(),
                            cwd: ws.clone(),
                            session: key,
                            env: vec![("WINX_TEMP_DIR".into(), layout.session_dir(&t).into())],
                            background: false,
                            terminal: Terminal::Follower(follower),
                        };
                        let shell = rt.start_shell_with(&admission.enter(), spawn, &program, None)?;
                        Some((shell, Arc::new(File::from(controller)), prompts))
                    }
                };
                let workspace_root = ws.to_str().ok_or("workspace not UTF-8")?.to_owned();
                Ok(Session { thread_id: t, workspace_root, layout, key, admission, shell })
            })
            .await??;
            let dir = session.layout.session_dir(thread);
            let answer = json!({"status": "completed", "thread_id": thread, "workspace_root": session.workspace_root,
                "temporary_artifact_dir": dir, "temporary_release": {"available": session.shell.is_some()}});
            if let Some((_, _, prompts)) = &session.shell {
                // The first prompt, by the host's own detection.
                prompts.clone().wait_for(|n| *n > 0).await?;
            }
            self.sessions.insert(thread.into(), Arc::new(session));
            Ok(answer)
        }

        /// `ReadFiles`: the bytes shown are the bytes the token binds.
        pub async fn read(&self, thread: &str, path: &str) -> Result<Value, Error> {
            let s = self.sessions.get(thread).ok_or("unknown thread")?.clone();
            let (tokens, p) = (self.tokens.clone(), path.to_owned());
            blocking(move || {
                match read_pinned(&s.layout.session_dir(&s.thread_id), Path::new(&p), Keep::Bytes(1 << 20)) {
                    Err(reason) => json!({"status": "failed", "failed_files": [{"file_path": p, "errorCode": reason}]}),
                    Ok(read) => {
                        let (pin, revision) = (read.pin, read.revision());
                        let subject =
                            TokenSubject { thread_id: &s.thread_id, workspace_root: &s.workspace_root, path: &p, pin };
                        let content = read.into_whole().map(|b| String::from_utf8_lossy(&b).into_owned());
                        json!({"status": "completed", "files": [{"file_path": p, "revision": revision,
                        "content": content, "temporary_artifact": {"artifact_generation": tokens.mint(&subject)}}]})
                    }
                }
            })
            .await
        }

        /// `WriteFile`: under the barrier of the session the write reaches,
        /// held across the async write; the reserved namespace refused.
        pub async fn write(&self, path: &str, content: &str) -> Result<Value, Error> {
            let p = PathBuf::from(path);
            let route = blocking(move || route_write(&p)).await??;
            let session = match &route.session {
                None => None,
                Some(d) => match self.sessions.values().find(|s| (s.key.dev, s.key.ino) == (d.dev, d.ino)) {
                    Some(s) => Some(s.clone()),
                    None => return Ok(json!({"status": "denied", "errorCode": "other_session"})),
                },
            };
            if route.reserved {
                return Ok(json!({"status": "denied", "errorCode": "reserved_namespace"}));
            }
            let _guard = match &session {
                Some(s) => Some(s.admission.enter_async().await),
                None => None,
            };
            // Asked again under the barrier: a link changed meanwhile is refused.
            let p = PathBuf::from(path);
            if blocking(move || route_write(&p)).await?? != route {
                return Ok(json!({"status": "denied", "errorCode": "read_required"}));
            }
            tokio::fs::write(&route.resolved, content).await?;
            Ok(json!({"status": "completed", "file_path": route.resolved}))
        }

        /// `BashCommand`: typed into the host's terminal under the barrier;
        /// answers once the host's own detection saw its prompt.
        pub async fn bash(&self, thread: &str, command: &str, wait: bool) -> Result<Value, Error> {
            let s = self.sessions.get(thread).ok_or("unknown thread")?.clone();
            let (shell, controller, mut prompts) = s.shell.clone().ok_or("no shell")?;
            let guard = s.admission.enter_async().await;
            let (rt, text) = (self.runtime.clone(), command.to_owned());
            let before = *prompts.borrow();
            blocking(move || -> Result<(), Error> {
                let c = shell.record_command(&rt, &text)?;
                let line = c.typed_line();
                Ok(shell.input(&guard, Write::Line, || (&*controller).write_all(line.as_bytes()))?)
            })
            .await??;
            if wait {
                prompts.wait_for(|n| *n > before).await?;
            }
            Ok(json!({"status": "completed"}))
        }

        /// `EditFiles` with a release: the library's steps, under the
        /// session's barrier taken without blocking, run on the blocking pool.
        pub async fn edit_files(&self, args: Value) -> Result<Value, Error> {
            let req = match request::parse(&args) {
                Ok(req) => req,
                Err(e) => return Ok(ReleaseResult::denied(&request::paths_of(&args), &e).to_value()),
            };
            let session = self.sessions.get(&req.thread_id).cloned();
            let barrier = session.as_ref().map_or_else(|| Arc::new(Admission::new()), |s| s.admission.clone());
            let guard = barrier.enter_async().await;
            let (tokens, receipts, rt) = (self.tokens.clone(), self.receipts.clone(), self.runtime.clone());
            blocking(move || {
                let paths = req.paths();
                match receipts.find(&req) {
                    Ok(Some(replay)) => return replay.to_value(),
                    Ok(None) => {}
                    Err(e) => {
                        let e = FrontendError::new(Code::IoError, format!("receipt: {e}"));
                        return ReleaseResult::denied(&paths, &e).failed().to_value();
                    }
                }
                let binding =
                    session.as_ref().map(|s| Binding { thread_id: &s.thread_id, workspace_root: &s.workspace_root });
                let checked = req.check_shape().and_then(|()| req.check_binding(binding));
                let (b, s) = match (checked, &session) {
                    (Ok(b), Some(s)) => (b, s),
                    (Err(e), _) => return ReleaseResult::denied(&paths, &e).to_value(),
                    (Ok(_), None) => unreachable!("a binding checks against a known session"),
                };
                let targets = match req.targets(&tokens, b, &s.layout) {
                    Ok(targets) => targets,
                    Err(e) => return ReleaseResult::denied(&paths, &e).to_value(),
                };
                let owner: Box<dyn RuntimeOwner> = match s.shell {
                    Some(_) => Box::new(OwnerAnswer {
                        liveness: rt.thread_liveness(&s.key, &s.thread_id),
                        pending: 0,
                        exempt: vec![std::process::id() as i32],
                        session: Some(s.key),
                    }),
                    None => Box::new(winx_release_engine::Unsupported),
                };
                let rr = ReleaseRequest { layout: &s.layout, thread_id: &s.thread_id, targets: &targets };
                let report = release(&rr, &guard, &*owner, &ReleaseOptions::default());
                receipts.answer(&req, &report).to_value()
            })
            .await
        }
    }

    /// Crash recovery: put back what a crash left in quarantine.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    fn recover(data_dir: &Path, workspaces: &[PathBuf]) -> std::io::Result<()> {
        winx_release_engine::recovery::recover(data_dir, workspaces).map(drop)
    }

    /// Off Linux no release ever ran: nothing to recover.
    #[cfg(not(all(target_os = "linux", not(winx_foreign))))]
    fn recover(_data_dir: &Path, _workspaces: &[PathBuf]) -> std::io::Result<()> {
        Ok(())
    }

    /// Off Linux: unreached (the session directory is refused first).
    #[cfg(not(all(target_os = "linux", not(winx_foreign))))]
    fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, winx_release_engine::Reason::UnsupportedPlatform))
    }

    /// The host's own PTY code: it keeps the controller.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
        use rustix::fs::{Mode, OFlags, CWD};
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        grantpt(&controller)?;
        unlockpt(&controller)?;
        let name = ptsname(&controller, Vec::new())?;
        let follower = rustix::fs::openat(CWD, name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY, Mode::empty())?;
        Ok((controller, follower))
    }

    /// The host's own prompt detection: a reader of its terminal (its
    /// renderer, in a real host) counting its prompt marker.
    fn detect_prompts(controller: OwnedFd) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0);
        std::thread::spawn(move || {
            let (mut reader, mut seen, mut tail) = (std::fs::File::from(controller), 0u64, Vec::new());
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                tail.extend_from_slice(&buf[..n]);
                while let Some(i) = tail.windows(MARK.len()).position(|w| w == MARK) {
                    tail.drain(..i + MARK.len());
                    seen += 1;
                    tx.send_replace(seen);
                }
                let keep = tail.len().saturating_sub(MARK.len());
                tail.drain(..keep);
            }
        });
        rx
    }

    fn expect(v: &Value, status: &str, code: Option<&str>) -> Result<(), Error> {
        let ok = v["status"] == status && v.get("errorCode").and_then(Value::as_str) == code;
        ok.then_some(()).ok_or_else(|| format!("expected {status} {code:?}, got {v}").into())
    }

    /// The release arguments for a helper read by `read`.
    fn release_args(thread: &str, ws: &str, read: &Value) -> Value {
        let f = &read["files"][0];
        json!({"thread_id": thread, "workspace_root": ws, "operation": "release_temporary",
            "files": [{"file_path": f["file_path"], "mode": "release_temporary", "expected_revision": f["revision"],
            "artifact_generation": f["temporary_artifact"]["artifact_generation"]}]})
    }

    /// Releases, retrying while the shell settles at its prompt.
    async fn release_when_idle(host: &Host, args: &Value) -> Result<Value, Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = host.edit_files(args.clone()).await?;
            if v["status"] == "completed" || Instant::now() > deadline {
                return Ok(v);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The agent's session, end to end.
    pub async fn run() -> Result<(), Error> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path().canonicalize()?;
        let ws = root.join("ws");
        std::fs::create_dir(&ws)?;
        let ws_s = ws.to_str().ok_or("not UTF-8")?;
        let mut host = Host::start(root.join("data"), vec![ws.clone()]).await?;

        // The user's own shell: their rc and prompt, the host's marker.
        let rc = root.join("bashrc");
        std::fs::write(&rc, "PS1='user$ '\n")?;
        let program = ShellProgram::bash().rc(&rc).prompt_command(r"printf '\033]133;D;%s\007' $?");
        let init = host.initialize(&ws, "t1", Some(program)).await?;
        let dir = PathBuf::from(init["temporary_artifact_dir"].as_str().ok_or("no dir")?);

        // Writes: through a link into the session (its barrier), `..` out
        // of it (no barrier), into the reserved namespace (refused).
        std::os::unix::fs::symlink(&dir, ws.join("scratch"))?;
        let helper = dir.join("helper.sh");
        let w = host.write(&format!("{ws_s}/scratch/helper.sh"), "sleep 2\n").await?;
        if w["file_path"] != json!(helper) {
            return Err(format!("a write through a link landed elsewhere: {w}").into());
        }
        let out = host.write(&format!("{}/../../../notes.txt", dir.display()), "n\n").await?;
        expect(&out, "completed", None)?;
        let q = dir.join(".winx-release-00");
        expect(&host.write(&format!("{}/x", q.display()), "x").await?, "denied", Some("reserved_namespace"))?;

        let read = host.read("t1", helper.to_str().ok_or("not UTF-8")?).await?;
        println!("read: {read}");
        if read["files"][0]["content"] != "sleep 2\n" {
            return Err(format!("the read showed other bytes: {read}").into());
        }
        let args = release_args("t1", ws_s, &read);
        host.bash("t1", &format!("bash {}", helper.display()), false).await?;
        let refused = host.edit_files(args.clone()).await?;
        println!("while the command runs: {refused}");
        expect(&refused, "denied", Some("execution_active"))?;
        // The host's own detection sees the prompt; then the release runs.
        let (_, _, mut prompts) = host.sessions["t1"].shell.clone().ok_or("no shell")?;
        prompts.wait_for(|n| *n >= 2).await?;
        let released = release_when_idle(&host, &args).await?;
        println!("release: {released}");
        expect(&released, "completed", None)?;
        if helper.exists() {
            return Err("the helper was not released".into());
        }
        expect(&host.edit_files(args).await?, "completed", None)?;

        // A second thread on `bash -r`, counted the same way.
        let program = ShellProgram::bash().restricted().prompt_command(r"printf '\033]133;D;%s\007' $?");
        let init = host.initialize(&ws, "t2", Some(program)).await?;
        let h2 = PathBuf::from(init["temporary_artifact_dir"].as_str().ok_or("no dir")?).join("h.sh");
        host.write(h2.to_str().ok_or("not UTF-8")?, "true\n").await?;
        host.bash("t2", "cd / || echo refused", true).await?;
        let args = release_args("t2", ws_s, &host.read("t2", h2.to_str().ok_or("not UTF-8")?).await?);
        expect(&release_when_idle(&host, &args).await?, "completed", None)?;

        // A thread whose shell the host runs itself: unsupported.
        let init = host.initialize(&ws, "t3", None).await?;
        let h3 = PathBuf::from(init["temporary_artifact_dir"].as_str().ok_or("no dir")?).join("h.sh");
        std::fs::write(&h3, "true\n")?;
        let args = release_args("t3", ws_s, &host.read("t3", h3.to_str().ok_or("not UTF-8")?).await?);
        expect(&host.edit_files(args).await?, "denied", Some("owner_unsupported"))?;
        Ok(())
    }
}

fn main() -> Result<(), host::Error> {
    // First: started as an execution's monitor, this program is that
    // (before any thread or runtime exists; off Linux it returns).
    winx_release_runtime::monitor::enter();
    // One worker: a call that blocked it would stall the whole server.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    match runtime.block_on(host::run()) {
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
