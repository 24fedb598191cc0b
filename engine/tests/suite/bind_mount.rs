//! Two request paths naming one physical file (a bind mount inside the
//! session) are refused up front with `hardlink` (one helper, two names), touching
//! nothing.

use std::fs;
use std::process::Command;

use crate::common::{snapshot, status, target, Fixture};
use winx_release_engine::release::{Outcome, Status};
use winx_release_engine::Reason;

#[test]
fn two_paths_to_one_file_through_a_bind_mount_are_refused() {
    if !rustix::process::geteuid().is_root() || !std::path::Path::new("/usr/bin/mount").exists() {
        eprintln!("skipped: needs root and mount(8)");
        return;
    }
    // A thread of its own in a private mount namespace: the bind mount is
    // seen by this thread (and the mount(8) it starts) only, and vanishes
    // with it.
    std::thread::spawn(|| {
        // SAFETY: only the mount namespace (and with it this thread's fs
        // context) is unshared, never the descriptor table, so no thread can
        // observe a descriptor from another table.
        if let Err(e) = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) } {
            eprintln!("skipped: unshare(CLONE_NEWNS): {e}");
            return;
        }
        let ok = status(Command::new("/usr/bin/mount").args(["--make-rprivate", "/"])).is_ok_and(|s| s.success());
        assert!(ok, "mount --make-rprivate /");
        let fx = Fixture::new();
        let h = fx.helper("h.txt", b"one file");
        let alias = fx.helper("alias.txt", b"");
        let ok = status(Command::new("/usr/bin/mount").arg("--bind").arg(&h).arg(&alias)).is_ok_and(|s| s.success());
        assert!(ok, "mount --bind");
        assert_eq!(fs::read(&alias).unwrap(), b"one file");
        let before = snapshot(fx.ws());
        let t = [target(&h), target(&alias)];
        let r = fx.release(&t);
        assert_eq!(r.status, Status::Denied, "{r:?}");
        assert_eq!(r.error_code, Some(Reason::Hardlink), "{r:?}");
        assert!(r.files.iter().all(|f| f.outcome == Outcome::Denied), "{r:?}");
        assert!(!r.touched);
        assert_eq!(snapshot(fx.ws()), before);
        let _ = status(Command::new("/usr/bin/umount").arg(&alias));
    })
    .join()
    .unwrap();
}
