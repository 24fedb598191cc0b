//! The runtime off Linux (built on Linux with `--cfg winx_foreign`, as CI
//! does: `.ci/foreign.sh`): a host's calls compile as on Linux, the
//! runtime starts, every start answers `unsupported_platform`, nothing
//! runs, and a release asked through its owner is `unsupported_platform`.
//! Without the cfg this file is empty.
#![cfg(winx_foreign)]

use std::io;
use std::sync::Arc;

use winx_release_engine::{
    release, Admission, Layout, Pin, Reason, ReleaseOptions, ReleaseRequest, RuntimeOwner, Status, Target,
};
use winx_release_runtime::shell::{ShellProgram, ShellSpawn, Terminal};
use winx_release_runtime::{monitor, LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey, Spawn};

fn is_unsupported_platform(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Unsupported
        && e.get_ref().and_then(|r| r.downcast_ref::<Reason>()) == Some(&Reason::UnsupportedPlatform)
}

fn key() -> SessionKey {
    SessionKey { dev: 1, ino: 2, born: 0 }
}

#[test]
fn every_start_answers_unsupported_platform() {
    monitor::enter();
    assert_eq!(monitor::program(), None);
    let tmp = tempfile::tempdir().unwrap();
    let opts = RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, ..Default::default() };
    let rt: Arc<Runtime> = Runtime::start(tmp.path(), &opts);
    assert_eq!(rt.data_dir(), tmp.path());
    let spawn = Spawn {
        thread: "t".into(),
        workspace: tmp.path().into(),
        cwd: None,
        session: key(),
        command: "echo hi".into(),
        background: false,
        env: vec![],
    };
    let e = rt.submit(spawn).unwrap_err();
    assert!(is_unsupported_platform(&e), "{e:?}");
    let barrier = Admission::new();
    let shell = ShellSpawn {
        thread: "t".into(),
        workspace: tmp.path().into(),
        cwd: tmp.path().into(),
        session: key(),
        env: vec![],
        background: false,
        terminal: Terminal::Open { rows: 24, cols: 80 },
    };
    let program = ShellProgram::bash().restricted().prompt_command("true");
    let e = rt.start_shell_with(&barrier.enter(), shell, &program, None).unwrap_err();
    assert!(is_unsupported_platform(&e), "{e:?}");
    // Nothing was created, nothing runs, nothing is known.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    assert_eq!(rt.liveness(&key()).running, 0);
    assert!(rt.executions().is_empty() && rt.shells_to_reattach().is_empty() && rt.lookup("x").is_none());
    rt.leave();
}

#[test]
fn a_session_directory_answers_unsupported_platform() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let layout = Layout::new(&ws, ws.join("data")).unwrap();
    let e = layout.create_session_dir("t").and_then(SessionKey::of_dir).unwrap_err();
    assert!(is_unsupported_platform(&e), "{e:?}");
    assert!(!layout.session_dir("t").exists());
    let e = SessionKey::of_path(tmp.path()).unwrap_err();
    assert!(is_unsupported_platform(&e), "{e:?}");
}

#[test]
fn the_owner_supports_no_release_and_a_release_is_unsupported_platform() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let layout = Layout::new(&ws, ws.join("data")).unwrap();
    let rt = Runtime::start(layout.data_dir(), &RuntimeOptions::default());
    let owner =
        OwnerAnswer { liveness: rt.thread_liveness(&key(), "t"), pending: 0, exempt: vec![], session: Some(key()) };
    assert!(!owner.supports_temporary_release());
    let h = layout.session_dir("t").join("h.py");
    let pin =
        Pin { dev: 1, ino: 2, size: 3, ctime_sec: 4, ctime_nsec: 5, sha256: [6; 32], btime: None, generation: None };
    let targets = [Target::new(&h, pin)];
    let req = ReleaseRequest { layout: &layout, thread_id: "t", targets: &targets };
    let barrier = Admission::new();
    let report = release(&req, &barrier.enter(), &owner, &ReleaseOptions::default());
    assert_eq!((report.status, report.error_code), (Status::Denied, Some(Reason::UnsupportedPlatform)));
}
