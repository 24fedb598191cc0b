//! An async guardian calling the engine: the release is blocking work (it
//! scans, hashes, renames and fsyncs), so it runs on tokio's blocking pool
//! with `spawn_blocking`, while the session's admission barrier — here a
//! `tokio::sync::Mutex` — stays held by the task until the report is back.
//!
//! Run: `cargo run -p winx-release-engine --example tokio_guardian`. It
//! works in a temporary directory and exits 0 when a helper was released.

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

use tokio::sync::Mutex;
use winx_release_engine::{
    recovery, release, Layout, Outcome, Pin, ReleaseOptions, ReleaseReport, ReleaseRequest, RuntimeOwner, Status,
    Target,
};

/// One session: its admission barrier and its execution table.
struct Session {
    layout: Layout,
    thread_id: String,
    /// Held by a release for its whole run, and by anything that starts a
    /// command; the table is read under it.
    admission: Arc<Mutex<HashMap<String, usize>>>,
}

/// The owner answers a release reads, copied out under the barrier.
struct Snapshot {
    running: usize,
}

impl RuntimeOwner for Snapshot {
    fn supports_temporary_release(&self) -> bool {
        true
    }
    fn running_executions(&self, _thread_id: &str) -> usize {
        self.running
    }
    fn pending_actions(&self, _thread_id: &str) -> usize {
        0
    }
}

/// Runs one release of `targets` under the session's barrier.
async fn release_in(session: Arc<Session>, targets: Vec<Target>) -> std::io::Result<ReleaseReport> {
    // The guard moves into the blocking task: no command of this session can
    // start until the release has returned.
    let table = session.admission.clone().lock_owned().await;
    let running = table.get(&session.thread_id).copied().unwrap_or(0);
    tokio::task::spawn_blocking(move || {
        let _admission = table;
        let request = ReleaseRequest { layout: &session.layout, thread_id: &session.thread_id, targets: &targets };
        release(&request, &Snapshot { running }, &ReleaseOptions::default())
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

    // At start, before serving: recovery is blocking work too.
    let (data, ws) = (layout.data_dir().to_path_buf(), layout.workspace().to_path_buf());
    let recovered = tokio::task::spawn_blocking(move || recovery::recover(&data, &[ws])).await??;
    println!("recovery: {} restored, {} preserved", recovered.restored.len(), recovered.preserved.len());

    layout.create_session_dir("thread-1")?;
    let helper = layout.session_dir("thread-1").join("helper.sh");
    std::fs::write(&helper, "echo hi\n")?;
    let pin = Pin::of_fd(File::open(&helper)?)?;
    let targets = vec![Target { path: helper.to_str().ok_or("path is not UTF-8")?.to_owned(), pin }];

    let session =
        Arc::new(Session { layout, thread_id: "thread-1".to_owned(), admission: Arc::new(Mutex::new(HashMap::new())) });
    let report = release_in(session, targets).await?;
    println!("status {:?}, {} bytes reclaimed", report.status, report.bytes_reclaimed);
    if report.status != Status::Completed || report.files[0].outcome != Outcome::Released || helper.exists() {
        return Err(format!("the helper was not released: {report:?}").into());
    }
    Ok(())
}
