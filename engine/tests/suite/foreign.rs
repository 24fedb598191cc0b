//! The engine off Linux (built on Linux with `--cfg winx_foreign`, as CI
//! does: `.ci/run`): every release is `unsupported_platform` and touches
//! nothing, every read says so. Without the cfg this file is empty.
#![cfg(winx_foreign)]

use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::{
    release, Admission, IdleOwner, Layout, Outcome, Pin, Reason, ReleaseOptions, ReleaseRequest, Status, Target,
};

fn pin() -> Pin {
    Pin { dev: 1, ino: 2, size: 3, ctime_sec: 4, ctime_nsec: 5, sha256: [6; 32], btime: None, generation: None }
}

#[test]
fn every_release_is_unsupported_platform_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let layout = Layout::new(&ws, ws.join("data")).unwrap();
    let dir = layout.session_dir("t");
    std::fs::create_dir_all(&dir).unwrap();
    let helpers: Vec<_> = (0..3).map(|i| dir.join(format!("h{i}.py"))).collect();
    for h in &helpers {
        std::fs::write(h, "x").unwrap();
    }
    let targets: Vec<Target> = helpers.iter().map(|h| Target::new(h, pin())).collect();
    let req = ReleaseRequest { layout: &layout, thread_id: "t", targets: &targets };
    let barrier = Admission::new();
    let report = release(&req, &barrier.enter(), &IdleOwner, &ReleaseOptions::default());
    assert_eq!(
        (report.status, report.error_code, report.touched),
        (Status::Denied, Some(Reason::UnsupportedPlatform), false)
    );
    assert_eq!(report.files.len(), 3);
    for (f, h) in report.files.iter().zip(&helpers) {
        assert_eq!((f.outcome, f.reason), (Outcome::Denied, Some(Reason::UnsupportedPlatform.into())));
        assert_eq!(f.file_path, h.to_str().unwrap());
        assert!(h.exists(), "{} was touched", h.display());
    }
    assert_eq!(report.request_code(), Some(Reason::UnsupportedPlatform.into()));
    // Not even a journal or a quarantine.
    assert!(!ws.join("data").exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3);
}

#[test]
fn reads_say_unsupported_platform() {
    let tmp = tempfile::tempdir().unwrap();
    let h = tmp.path().join("h.py");
    std::fs::write(&h, "x").unwrap();
    assert_eq!(read_pinned(tmp.path(), &h, Keep::Text(10)), Err(Reason::UnsupportedPlatform));
}

#[test]
fn a_write_reaches_no_session_and_the_reserved_namespace_by_name() {
    use winx_release_engine::preflight::route_write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".winx/tmp/session-0123456789abcdef/h.py");
    let route = route_write(&path).unwrap();
    assert_eq!((route.resolved.as_path(), route.session, route.reserved), (path.as_path(), None, false));
    assert!(route_write(&dir.path().join("a/.winx-release-00/t")).unwrap().reserved);
    assert_eq!(route_write(std::path::Path::new("rel")).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn the_barrier_is_async_on_every_platform() {
    let barrier = std::sync::Arc::new(Admission::new());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let guard = rt.block_on(barrier.enter_async());
    assert!(barrier.try_enter().is_none());
    std::thread::spawn(move || drop(guard)).join().unwrap();
    assert!(barrier.try_enter().is_some());
}
