//! The admission barrier from an async host: a guard held across `.await`
//! on a multi-thread runtime keeps a release out until it is dropped, and a
//! release waiting for it from a task does not block the runtime's worker.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::{release, Admission, IdleOwner, Layout, Outcome, ReleaseOptions, ReleaseRequest, Target};

/// How long the test waits to see that a release does *not* run.
const QUIET: Duration = Duration::from_millis(150);

struct Session {
    _tmp: tempfile::TempDir,
    layout: Layout,
    helper: std::path::PathBuf,
    target: Target,
}

fn session() -> Session {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("ws")).unwrap();
    let layout = Layout::new(root.join("ws"), root.join("data")).unwrap();
    layout.create_session_dir("t1").unwrap();
    let dir = layout.session_dir("t1");
    let helper = dir.join("helper.sh");
    std::fs::write(&helper, "echo hi\n").unwrap();
    let read = read_pinned(&dir, &helper, Keep::Nothing).unwrap();
    let target = Target::new(&helper, read.pin);
    Session { _tmp: tmp, layout, helper, target }
}

fn release_under(s: &Session, admission: &winx_release_engine::AdmissionGuard<'_>) -> Outcome {
    let targets = [s.target.clone()];
    let rr = ReleaseRequest { layout: &s.layout, thread_id: "t1", targets: &targets };
    let _no_fork = crate::common::no_fork_now();
    release(&rr, admission, &IdleOwner, &ReleaseOptions::default()).files[0].outcome
}

#[test]
fn a_guard_held_across_await_blocks_a_release_until_dropped() {
    let s = Arc::new(session());
    let barrier = Arc::new(Admission::new());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel();
    // The host's async file write: the guard is held across awaits (its
    // task may resume on the other worker).
    let writer = rt.spawn({
        let barrier = barrier.clone();
        async move {
            let guard = barrier.enter_async().await;
            held_tx.send(()).unwrap();
            go_rx.await.unwrap();
            tokio::task::yield_now().await;
            drop(guard);
        }
    });
    held_rx.recv().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let releaser = std::thread::spawn({
        let (s, barrier) = (s.clone(), barrier.clone());
        move || {
            let admission = barrier.enter();
            done_tx.send(release_under(&s, &admission)).unwrap();
        }
    });
    assert!(done_rx.recv_timeout(QUIET).is_err(), "a release ran while an async holder held the barrier");
    assert!(s.helper.exists());
    go.send(()).unwrap();
    assert_eq!(done_rx.recv().unwrap(), Outcome::Released);
    releaser.join().unwrap();
    rt.block_on(writer).unwrap();
    assert!(!s.helper.exists());
}

#[test]
fn a_release_awaiting_the_barrier_does_not_block_the_worker() {
    let s = Arc::new(session());
    let barrier = Arc::new(Admission::new());
    // A release holds the barrier (another thread's, synchronous).
    let held = barrier.enter_owned();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let releasing = tokio::spawn({
            let (s, barrier) = (s.clone(), barrier.clone());
            async move {
                let admission = barrier.enter_async().await;
                // The release itself blocks: it runs on a blocking thread,
                // the guard moved there with it.
                tokio::task::spawn_blocking(move || release_under(&s, &admission)).await.unwrap()
            }
        });
        // The only worker still runs other tasks.
        let other = tokio::spawn(async { "ran" });
        assert_eq!(other.await.unwrap(), "ran");
        assert!(!releasing.is_finished());
        std::thread::spawn(move || drop(held)).join().unwrap();
        assert_eq!(releasing.await.unwrap(), Outcome::Released);
    });
    assert!(!s.helper.exists());
}
