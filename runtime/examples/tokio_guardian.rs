//! An async guardian calling the engine: commands run as executions of the
//! engine's runtime, and everything that blocks — recovery, starting the
//! runtime, a read, submitting a command, a release (it scans, hashes,
//! renames and fsyncs) — runs on tokio's blocking pool with
//! `spawn_blocking`, under the session's [`Admission`] barrier where it
//! starts something or releases. The barrier is awaited on the worker
//! ([`Admission::enter_async`]: it waits without blocking it) and the
//! owned guard moves into the blocking work it guards; a guard can also
//! be held across an `.await` (the agent's async write below). The end of a command is awaited through
//! its [`EndSignal`] registered with tokio's reactor (`AsyncFd`): no thread
//! waits for it.
//!
//! Run: `cargo run -p winx-release-engine --example tokio_guardian`. It
//! works in a temporary directory and exits 0 when a helper was released
//! after the command that used it had ended.

use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::task::spawn_blocking;
use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::{
    recovery, release, Admission, Layout, Outcome, Reason, ReleaseOptions, ReleaseReport, ReleaseRequest, Status,
    Target,
};
use winx_release_runtime::{
    EndSignal, ExecState, Execution, LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey, Spawn,
};

/// One session: its directory's identity and its admission barrier.
struct Session {
    layout: Layout,
    thread_id: String,
    key: SessionKey,
    /// Held by a release for its whole run, and by anything that starts a
    /// command or writes into the session directory.
    admission: Arc<Admission>,
}

/// Runs one release of `targets` under the session's barrier: awaited
/// without blocking the worker, then moved with the release to the
/// blocking pool.
async fn release_in(rt: Arc<Runtime>, session: Arc<Session>, targets: Vec<Target>) -> std::io::Result<ReleaseReport> {
    let admission = session.admission.enter_async().await;
    spawn_blocking(move || {
        let owner = OwnerAnswer {
            liveness: rt.thread_liveness(&session.key, &session.thread_id),
            pending: 0,
            exempt: vec![std::process::id() as i32],
            session: Some(session.key),
        };
        let request = ReleaseRequest { layout: &session.layout, thread_id: &session.thread_id, targets: &targets };
        release(&request, &admission, &owner, &ReleaseOptions::default())
    })
    .await
    .map_err(std::io::Error::other)
}

/// Awaits `e`'s final state on the reactor: readiness of its end signal,
/// then a look at its state (a lock, not a wait).
async fn ended(e: &Execution) -> std::io::Result<ExecState> {
    // SAFETY: an `EndSignal` owns its descriptor (shared only with the
    // execution, which never closes it) and `as_raw_fd` returns that same
    // open descriptor for the signal's whole life, as `register` requires.
    #[allow(unsafe_code)]
    let signal = unsafe { AsyncFd::register(e.end_signal()?) }?;
    loop {
        let mut ready = signal.readable().await?;
        let signal: &EndSignal = ready.get_inner();
        signal.clear()?;
        ready.clear_ready();
        let state = e.state();
        if state.is_final() {
            return Ok(state);
        }
    }
}

/// Whether `path` exists, asked on the blocking pool.
async fn exists(path: &std::path::Path) -> std::io::Result<bool> {
    let path = path.to_owned();
    spawn_blocking(move || path.try_exists()).await?
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First: started as an execution's monitor, this program is that (a
    // host with a synchronous `main` calls it before its reactor starts).
    winx_release_runtime::monitor::enter();
    // Setup (a temporary workspace, the session directory, a helper) is
    // blocking filesystem work too.
    let (tmp, layout, key, helper) = spawn_blocking(|| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
        let tmp = tempfile::tempdir()?;
        let workspace = tmp.path().canonicalize()?.join("ws");
        std::fs::create_dir(&workspace)?;
        let layout = Layout::new(workspace, tmp.path().canonicalize()?.join("data"))?;
        let key = SessionKey::of_dir(layout.create_session_dir("thread-1")?)?;
        let helper = layout.session_dir("thread-1").join("helper.sh");
        std::fs::write(&helper, "sleep 1\n")?;
        Ok((tmp, layout, key, helper))
    })
    .await?
    .map_err(|e| e.to_string())?;

    // At start, before serving: recovery and the runtime (which adopts what
    // an earlier guardian left running). A guardian process runs
    // `RuntimeOptions::default()`; this example is a process with children
    // of its own (tokio's blocking pool), so it stays out of cgroups and
    // subreaping (docs/DESIGN.md, "Embedding").
    let (data, ws) = (layout.data_dir().to_path_buf(), layout.workspace().to_path_buf());
    let recovered = spawn_blocking(move || recovery::recover(&data, &[ws])).await??;
    println!("recovery: {} restored, {} preserved", recovered.restored.len(), recovered.preserved.len());
    let data = layout.data_dir().to_path_buf();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = spawn_blocking(move || Runtime::start(&data, &opts)).await?;
    println!("liveness: {} ({})", rt.liveness_mode().as_str(), rt.liveness_reason());

    // The read pins what it opened (no-follow, through directory handles).
    let read = {
        let (dir, path) = (layout.session_dir("thread-1"), helper.clone());
        spawn_blocking(move || read_pinned(&dir, &path, Keep::Nothing)).await??
    };
    let targets = vec![Target::new(&helper, read.pin)];
    let session =
        Arc::new(Session { layout, thread_id: "thread-1".to_owned(), key, admission: Arc::new(Admission::new()) });

    // An async write into the session directory holds its barrier across
    // the `.await` (no release can run meanwhile).
    {
        let guard = session.admission.enter_async().await;
        tokio::fs::write(session.layout.session_dir("thread-1").join("notes.txt"), "async\n").await?;
        drop(guard);
    }

    // The agent runs its helper in the background, under the barrier.
    let command = {
        let (rt, session, helper) = (rt.clone(), session.clone(), helper.clone());
        let admission = session.admission.enter_async().await;
        spawn_blocking(move || -> std::io::Result<Arc<Execution>> {
            let _admission = admission;
            let e = rt.submit(Spawn {
                thread: session.thread_id.clone(),
                workspace: session.layout.workspace().into(),
                cwd: None,
                session: session.key,
                command: format!("bash {}", helper.display()),
                background: true,
                env: vec![],
            })?;
            rt.run(&e)?;
            Ok(e)
        })
        .await??
    };
    let report = release_in(rt.clone(), session.clone(), targets.clone()).await?;
    println!("{report}");
    if report.error_code != Some(Reason::ExecutionActive) || !exists(&helper).await? {
        return Err(format!("a helper in use was not protected: {report}").into());
    }

    // Once the command has ended (awaited on the reactor), the helper is
    // released.
    let state = tokio::time::timeout(std::time::Duration::from_secs(20), ended(&command)).await??;
    println!("command {}: {}", command.id, state.as_str());
    let report = release_in(rt, session, targets).await?;
    println!("{report}");
    if report.status != Status::Completed || report.files[0].outcome != Outcome::Released || exists(&helper).await? {
        return Err(format!("the helper was not released: {report}").into());
    }
    spawn_blocking(move || drop(tmp)).await?;
    Ok(())
}
