//! `Execution::end_signal`: the descriptor an async host polls instead of
//! blocking a thread in `wait_until`. It is readable once the execution's
//! state has changed, stays unreadable while nothing changes, and is
//! readable at once for an execution already final.

use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::time::Timespec;
use winx_release_engine::Layout;
use winx_release_runtime::{EndSignal, ExecState, LivenessChoice, Runtime, RuntimeOptions, SessionKey, Spawn};

fn readable_within(s: &EndSignal, ms: i64) -> bool {
    let mut fds = [PollFd::new(s, PollFlags::IN)];
    let t = Timespec { tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000 };
    poll(&mut fds, Some(&t)).unwrap() == 1
}

#[test]
fn the_end_of_an_execution_is_a_readable_descriptor() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let layout = Layout::new(&ws, ws.join("data")).unwrap();
    let key = SessionKey::of_dir(layout.create_session_dir("t").unwrap()).unwrap();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = Runtime::start(layout.data_dir(), &opts);
    let fifo = ws.join("go");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0).unwrap();
    // The command waits until the test lets it go: its state cannot move
    // meanwhile.
    let e = rt
        .submit(Spawn {
            thread: "t".into(),
            workspace: ws.clone(),
            cwd: None,
            session: key,
            command: format!("read -r _ < {}", fifo.display()),
            background: true,
            env: vec![],
        })
        .unwrap();
    let signal = e.end_signal().unwrap();
    rt.run(&e).unwrap();
    assert!(e.wait_until(Duration::from_secs(10), |s| s == ExecState::Running) == ExecState::Running);
    // Running: it changed once (queued to running); clear that.
    while signal.clear().unwrap() {}
    assert!(!readable_within(&signal, 300), "readable while the command still waits: {:?}", e.state());
    std::fs::write(&fifo, "go\n").unwrap();
    // Readiness alone wakes the waiter (never wait_until), until the state
    // is final.
    let state = loop {
        assert!(readable_within(&signal, 10_000), "no readiness while the state is {:?}", e.state());
        signal.clear().unwrap();
        let state = e.state();
        if state.is_final() {
            break state;
        }
    };
    assert!(state.is_final(), "{state:?}");
    // A signal asked for now is readable at once.
    let late = e.end_signal().unwrap();
    assert!(readable_within(&late, 0));
}
