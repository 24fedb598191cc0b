//! An async guardian calling the engine: commands run as executions of the
//! engine's runtime, and a release is blocking work (it scans, hashes,
//! renames and fsyncs), so it runs on tokio's blocking pool with
//! `spawn_blocking`, while the session's admission barrier — here a
//! `tokio::sync::Mutex` — stays held by the task until the report is back.
//! The runtime's liveness answer is read under that barrier.
//!
//! Run: `cargo run -p winx-release-engine --example tokio_guardian`. It
//! works in a temporary directory and exits 0 when a helper was released
//! after the command that used it had ended.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use winx_release_engine::executions::{
    ExecState, LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey, Spawn,
};
use winx_release_engine::{
    recovery, release, Layout, Outcome, Pin, Reason, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target,
};

/// One session: its directory's identity and its admission barrier.
struct Session {
    layout: Layout,
    thread_id: String,
    key: SessionKey,
    /// Held by a release for its whole run, and by anything that starts a
    /// command.
    admission: Arc<Mutex<()>>,
}

/// Runs one release of `targets` under the session's barrier.
async fn release_in(rt: Arc<Runtime>, session: Arc<Session>, targets: Vec<Target>) -> std::io::Result<ReleaseReport> {
    // The guard moves into the blocking task: no command of this session can
    // start until the release has returned.
    let admission = session.admission.clone().lock_owned().await;
    tokio::task::spawn_blocking(move || {
        let _admission = admission;
        let owner =
            OwnerAnswer { liveness: rt.liveness(&session.key), pending: 0, exempt: vec![std::process::id() as i32] };
        let request = ReleaseRequest { layout: &session.layout, thread_id: &session.thread_id, targets: &targets };
        release(&request, &owner, &ReleaseOptions::default())
    })
    .await
    .map_err(std::io::Error::other)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let workspace = tmp.path().canonicalize()?.join("ws");
    std::fs::create_dir(&workspace)?;
    let layout = Layout::new(workspace, tmp.path().canonicalize()?.join("data"))?;

    // At start, before serving: recovery and the runtime (which adopts what
    // an earlier guardian left running) are blocking work too. A guardian
    // process runs `RuntimeOptions::default()`; this example shares its
    // process with nothing, but stays out of cgroups and subreaping.
    let (data, ws) = (layout.data_dir().to_path_buf(), layout.workspace().to_path_buf());
    let recovered = tokio::task::spawn_blocking(move || recovery::recover(&data, &[ws])).await??;
    println!("recovery: {} restored, {} preserved", recovered.restored.len(), recovered.preserved.len());
    let data = layout.data_dir().to_path_buf();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = tokio::task::spawn_blocking(move || Runtime::start(&data, &opts)).await?;
    println!("liveness: {} ({})", rt.liveness_mode().name(), rt.liveness_reason());

    let key = SessionKey::of_dir(layout.create_session_dir("thread-1")?)?;
    let helper = layout.session_dir("thread-1").join("helper.sh");
    std::fs::write(&helper, "sleep 1\n")?;
    let pin = Pin::of_fd(File::open(&helper)?)?;
    let targets = vec![Target::new(&helper, pin)];
    let session =
        Arc::new(Session { layout, thread_id: "thread-1".to_owned(), key, admission: Arc::new(Mutex::new(())) });

    // The agent runs its helper in the background, under the barrier.
    let command = {
        let _admission = session.admission.lock().await;
        let e = rt.submit(Spawn {
            thread: session.thread_id.clone(),
            workspace: session.layout.workspace().into(),
            session: key,
            command: format!("bash {}", helper.display()),
            background: true,
            env: vec![],
        })?;
        rt.run(&e)?;
        e
    };
    let report = release_in(rt.clone(), session.clone(), targets.clone()).await?;
    println!("{report}");
    if report.error_code != Some(Reason::ExecutionActive) || !helper.exists() {
        return Err(format!("a helper in use was not protected: {report}").into());
    }

    // Once the command has ended, the helper is released.
    let waited = command.clone();
    let state =
        tokio::task::spawn_blocking(move || waited.wait_until(Duration::from_secs(20), ExecState::is_final)).await?;
    println!("command {}: {}", command.id, state.name());
    let report = release_in(rt, session, targets).await?;
    println!("{report}");
    if report.status != Status::Completed || report.files[0].outcome != Outcome::Released || helper.exists() {
        return Err(format!("the helper was not released: {report}").into());
    }
    Ok(())
}
