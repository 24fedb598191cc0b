//! A full filesystem is `no_space`, never `io_error`: at target level, and
//! as the `errorCode` of a request that fails before anything moved
//! (`failed`, `touched: false`), with a detail naming the filesystem that
//! is full. The full filesystem is a real, tiny tmpfs mounted in a private
//! mount namespace (root only; skipped with a reason otherwise).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;

use crate::common::ns::{fill, in_mount_namespace, is_root, mount};
use crate::common::{target, Fixture};
use winx_release_engine::admission::Admission;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::layout::Layout;
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::release::{release, Outcome, ReleaseOptions, ReleaseRequest, Status};
use winx_release_engine::{TargetCode, TargetReason};

const NO_SPACE: Option<TargetCode> = Some(TargetCode::Target(TargetReason::NoSpace));

/// The workspace and the data directory on one full 256 KiB tmpfs: the
/// release fails before anything moved, `no_space`, naming the tmpfs.
#[test]
fn a_full_filesystem_fails_the_request_with_no_space_naming_it() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let mnt = fs::canonicalize(t.path()).unwrap().join("full");
    fs::create_dir(&mnt).unwrap();
    let ran = in_mount_namespace(move || {
        if let Err(e) = mount(Some("tmpfs".as_ref()), &mnt, Some("tmpfs"), 0, Some("size=256k,mode=0700")) {
            return Err(format!("tmpfs: {e}"));
        }
        let (ws, data) = (mnt.join("ws"), mnt.join("data"));
        fs::create_dir_all(&ws).unwrap();
        fs::create_dir_all(&data).unwrap();
        let layout = Layout::new(&ws, &data).unwrap();
        let thread = "full-disk";
        let session = layout.session_dir(thread);
        fs::create_dir_all(&session).unwrap();
        fs::set_permissions(&session, fs::Permissions::from_mode(0o700)).unwrap();
        let helper = session.join("h.txt");
        fs::write(&helper, b"helper bytes").unwrap();
        let targets = [target(&helper)];
        fill(&mnt);
        let req = ReleaseRequest { layout: &layout, thread_id: thread, targets: &targets };
        let r = release(&req, &Admission::new().enter(), &IdleOwner, &ReleaseOptions::default());
        assert_eq!((r.status, r.touched), (Status::Failed, false), "{r:?}");
        assert_eq!(r.request_code(), NO_SPACE, "{r:?}");
        assert_eq!(r.files[0].outcome, Outcome::Failed);
        assert_eq!(r.files[0].reason, NO_SPACE);
        let detail = r.detail.clone().unwrap();
        assert!(!detail.contains('\n'), "one line: {detail}");
        assert!(detail.contains("tmpfs") && detail.contains(&mnt.display().to_string()), "{detail}");
        // Nothing lost, nothing left behind.
        assert_eq!(fs::read(&helper).unwrap(), b"helper bytes");
        let left: Vec<_> = fs::read_dir(&session).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["h.txt"], "a quarantine was left behind");
        Ok(())
    });
    match ran {
        None => eprintln!("skipped: cannot make a private mount namespace here"),
        Some(Err(why)) => eprintln!("skipped: {why}"),
        Some(Ok(())) => {}
    }
}

/// `ENOSPC` at a target after an earlier one was released: that target is
/// `failed` with `no_space`, the rest `not_attempted`.
#[test]
fn no_space_at_a_target_is_its_reason() {
    let fx = Fixture::new();
    let a = fx.helper("a.txt", b"a");
    let b = fx.helper("b.txt", b"b");
    let c = fx.helper("c.txt", b"c");
    let targets = [target(&a), target(&b), target(&c)];
    let hook = |p: &FaultPoint<'_>| match p {
        FaultPoint::BeforeRename { index: 1, .. } => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
        _ => Ok(()),
    };
    let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
    let r = fx.release_with(&targets, &IdleOwner, &opts);
    assert_eq!(r.status, Status::Partial, "{r:?}");
    let got: Vec<_> = r.files.iter().map(|f| (f.outcome, f.reason.map(|c| c.as_str()))).collect();
    assert_eq!(
        got,
        [
            (Outcome::Released, None),
            (Outcome::Failed, Some("no_space")),
            (Outcome::NotAttempted, Some("stopped_after_failure"))
        ]
    );
    assert!(b.exists() && c.exists());
}
