//! The lean scan (`ScanMode::Lean`) where getdents64 alone would be wrong:
//! a bind-mounted file inside a backing root, an overlayfs root, and a
//! directory the scan may read but not search; and a mount no scan enters
//! (FUSE below a backing root), in both modes.
//!
//! The mount tests run on a thread that has its own mount namespace
//! (`unshare(CLONE_NEWNS)`, mounts made private), so nothing leaks; they
//! are skipped where mount namespaces cannot be made.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use winx_release_engine::scan::{
    after_next_mount_table_read, scan_paths_with, trusts_d_ino, ScanBackend, ScanLimits, ScanMode, ScanReport,
    SyncBackend, ThreadsBackend, UringBackend,
};
use winx_release_engine::{PhysicalId, Reason};

use crate::common::ns::{in_mount_namespace, mount};

fn id_of(p: &Path) -> PhysicalId {
    let m = fs::metadata(p).unwrap();
    PhysicalId { dev: m.dev(), ino: m.ino() }
}

/// Every backend in both modes; all must give `want` (reason, path).
#[track_caller]
fn assert_everywhere(root: &Path, aliases: &HashSet<PhysicalId>, want: Option<(Reason, PathBuf)>) {
    let threads = ThreadsBackend::new(2);
    let uring = UringBackend::default();
    let backends: [(&str, &dyn ScanBackend); 3] = [("sync", &SyncBackend), ("uring", &uring), ("threads", &threads)];
    for (name, backend) in backends {
        for mode in [ScanMode::Lean, ScanMode::Sizes] {
            let r: ScanReport = scan_paths_with(backend, &[root.to_path_buf()], ScanLimits::default(), aliases, mode);
            let got = r.reason.map(|reason| (reason, r.path.clone().unwrap()));
            assert_eq!(got, want, "{name} {mode:?}: {r:?}");
        }
    }
}

/// A helper bind-mounted onto a file inside a backing root: getdents64
/// shows the covered file's inode there, so a scan trusting `d_ino` would
/// miss the alias. The mount table makes that directory a full one.
#[test]
fn a_bind_mounted_helper_in_a_backing_root_is_still_an_alias() {
    let t = tempfile::tempdir().unwrap();
    let t = fs::canonicalize(t.path()).unwrap();
    let helper = t.join("session/helper.py");
    fs::create_dir_all(helper.parent().unwrap()).unwrap();
    fs::write(&helper, b"print(1)\n").unwrap();
    let root = t.join("backing");
    fs::create_dir_all(root.join("sub")).unwrap();
    fs::write(root.join("sub/a"), b"a").unwrap();
    let covered = root.join("sub/mounted");
    fs::write(&covered, b"placeholder").unwrap();
    fs::write(root.join("sub/z"), b"z").unwrap();
    let aliases: HashSet<PhysicalId> = [id_of(&helper)].into();
    // Before the mount: clean, in both modes.
    assert_everywhere(&root, &aliases, None);
    let done = in_mount_namespace(move || {
        if mount(Some(&helper), &covered, None, libc::MS_BIND, None).is_err() {
            return false;
        }
        assert_everywhere(&root, &aliases, Some((Reason::BackingAlias, covered.clone())));
        true
    });
    if done != Some(true) {
        eprintln!("skipped: cannot make a private mount namespace with a bind mount here");
    }
}

/// A mount that appears after the lean scan read the mount table (a
/// helper bind-mounted into a backing root mid-scan): the table changed
/// while the scan ran, so the scan runs again with every entry `statx`ed
/// and finds the alias, on every backend.
#[test]
fn a_mount_that_appears_mid_scan_is_seen() {
    let t = tempfile::tempdir().unwrap();
    let t = fs::canonicalize(t.path()).unwrap();
    let helper = t.join("session/helper.py");
    fs::create_dir_all(helper.parent().unwrap()).unwrap();
    fs::write(&helper, b"print(1)\n").unwrap();
    let root = t.join("backing");
    fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..50 {
        fs::write(root.join(format!("sub/f{i}")), b"a").unwrap();
    }
    let covered = root.join("sub/mounted");
    fs::write(&covered, b"placeholder").unwrap();
    let aliases: HashSet<PhysicalId> = [id_of(&helper)].into();
    let done = in_mount_namespace(move || {
        let threads = ThreadsBackend::new(2);
        let uring = UringBackend::default();
        let backends: [(&str, &dyn ScanBackend); 3] =
            [("sync", &SyncBackend), ("uring", &uring), ("threads", &threads)];
        for (name, backend) in backends {
            let (h, c) = (helper.clone(), covered.clone());
            after_next_mount_table_read(move || mount(Some(&h), &c, None, libc::MS_BIND, None).unwrap());
            let r =
                scan_paths_with(backend, std::slice::from_ref(&root), ScanLimits::default(), &aliases, ScanMode::Lean);
            assert_eq!(
                (r.reason, r.path.clone()),
                (Some(Reason::BackingAlias), Some(covered.clone())),
                "{name}: {r:?}"
            );
            assert!(detach(&covered), "{name}: unmount");
            // Without a change mid-scan the lean scan stays clean.
            let r =
                scan_paths_with(backend, std::slice::from_ref(&root), ScanLimits::default(), &aliases, ScanMode::Lean);
            assert_eq!(r.reason, None, "{name}: {r:?}");
        }
        true
    });
    if done != Some(true) {
        eprintln!("skipped: cannot make a private mount namespace here");
    }
}

fn detach(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) == 0 }
}

/// An overlayfs backing root: its `f_type` is not on the trusted list, so
/// every entry is `statx`ed, and the results equal the full scan's.
#[test]
fn an_overlayfs_root_takes_the_full_path() {
    let t = tempfile::tempdir().unwrap();
    let t = fs::canonicalize(t.path()).unwrap();
    let (lower, upper, work, merged) = (t.join("l"), t.join("u"), t.join("w"), t.join("m"));
    for d in [&lower, &upper, &work, &merged] {
        fs::create_dir_all(d).unwrap();
    }
    fs::create_dir_all(lower.join("d/e")).unwrap();
    fs::write(lower.join("d/e/f"), b"lower").unwrap();
    fs::write(lower.join("g"), b"g").unwrap();
    std::os::unix::fs::symlink("g", lower.join("d/link")).unwrap();
    let done = in_mount_namespace(move || {
        let opts = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        if mount(Some(Path::new("overlay")), &merged, Some("overlay"), 0, Some(&opts)).is_err() {
            return false;
        }
        let st = rustix::fs::statfs(&merged).unwrap();
        #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs between architectures
        let f_type = st.f_type as i64;
        assert!(!trusts_d_ino(f_type), "overlayfs must not be trusted");
        fs::write(merged.join("new"), b"upper").unwrap();
        // The link fails closed, and after removing it, an alias in the
        // merged tree is found: both modes, every backend.
        assert_everywhere(&merged, &HashSet::new(), Some((Reason::BackingSymlink, merged.join("d/link"))));
        fs::remove_file(merged.join("d/link")).unwrap();
        assert_everywhere(&merged, &HashSet::new(), None);
        let aliases: HashSet<PhysicalId> = [id_of(&merged.join("d/e/f"))].into();
        assert_everywhere(&merged, &aliases, Some((Reason::BackingAlias, merged.join("d/e/f"))));
        true
    });
    if done != Some(true) {
        eprintln!("skipped: cannot mount overlayfs in a private mount namespace here");
    }
}

/// A directory the scan can read but not search: a full scan's `statx` of
/// its entries fails (`backing_inaccessible`), so the lean scan must not
/// take their types from getdents64 and pass. (As root the kernel grants
/// search anyway; the test then only checks both modes agree.)
#[test]
fn a_readable_unsearchable_directory_is_inaccessible_in_both_modes() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(t.path()).unwrap().join("r");
    fs::create_dir_all(root.join("d")).unwrap();
    fs::write(root.join("d/f"), b"f").unwrap();
    fs::set_permissions(root.join("d"), fs::Permissions::from_mode(0o444)).unwrap();
    let privileged = rustix::process::geteuid().is_root();
    let want = if privileged { None } else { Some((Reason::BackingInaccessible, root.join("d/f"))) };
    assert_everywhere(&root, &HashSet::new(), want);
    fs::set_permissions(root.join("d"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// The verdict of every scan of `r`: each backend in both modes, a new
/// directory cache and a new shared scanner.
fn every_scan(r: &Path) -> Vec<(String, Option<Reason>, Option<PathBuf>)> {
    use winx_release_engine::scan::{DirCache, RootSpec, SharedScanner};
    let threads = ThreadsBackend::new(2);
    let uring = UringBackend::default();
    let backends: [(&str, &dyn ScanBackend); 3] = [("sync", &SyncBackend), ("uring", &uring), ("threads", &threads)];
    let none = HashSet::new();
    let r = r.to_path_buf();
    let mut got = Vec::new();
    for (name, backend) in backends {
        for mode in [ScanMode::Lean, ScanMode::Sizes] {
            let s = scan_paths_with(backend, std::slice::from_ref(&r), ScanLimits::default(), &none, mode);
            got.push((format!("{name} {mode:?}"), s.reason, s.path));
        }
    }
    let cache = DirCache::new();
    let s = cache.scan_paths(std::slice::from_ref(&r), ScanLimits::default(), &none);
    got.push(("cache".into(), s.reason, s.path));
    let shared = SharedScanner::new();
    let s = shared.scan(&[RootSpec::Path(r.clone())], ScanLimits::default(), &none, std::time::Instant::now());
    got.push(("shared".into(), s.reason, s.path));
    got
}

/// Without a mount table to read (no `/proc` in this mount namespace),
/// whether a mount below a root could hang the walk cannot be told: every
/// scan is refused `backing_inaccessible`, the root named, nothing walked
/// (it had walked, and would have entered a hung mount).
#[test]
fn without_a_mount_table_every_scan_is_refused() {
    if !crate::common::ns::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(t.path()).unwrap().join("backing");
    fs::create_dir_all(root.join("sub")).unwrap();
    fs::write(root.join("sub/a"), b"a").unwrap();
    let r = root.clone();
    let got = in_mount_namespace(move || {
        if !detach(Path::new("/proc")) {
            return None;
        }
        Some(every_scan(&r))
    });
    let Some(Some(got)) = got else {
        eprintln!("skipped: cannot make a private mount namespace without /proc here");
        return;
    };
    for (name, reason, path) in got {
        assert_eq!((reason, path), (Some(Reason::BackingInaccessible), Some(root.clone())), "{name}");
    }
}

/// A FUSE mount whose daemon never answers, below a backing root: every
/// backend in both modes, the directory cache and the shared scanner refuse
/// it (`backing_inaccessible`, the mount point named) without entering it.
/// Entering it would wait for as long as the daemon does not answer: the
/// scans run on a thread of their own, and after 30 s the test ends the
/// FUSE connection (closing `/dev/fuse`) and fails.
#[test]
fn a_fuse_mount_below_a_backing_root_is_refused_not_entered() {
    use std::os::fd::AsRawFd;
    if !crate::common::ns::is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: needs root and /dev/fuse");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let t = fs::canonicalize(t.path()).unwrap();
    let root = t.join("backing");
    let remote = root.join("sub/remote");
    fs::create_dir_all(&remote).unwrap();
    fs::write(root.join("sub/a"), b"a").unwrap();
    let done = in_mount_namespace(move || {
        let Ok(fuse) = fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") else { return None };
        let data = format!("fd={},rootmode=40000,user_id=0,group_id=0", fuse.as_raw_fd());
        if mount(Some(Path::new("winx-test")), &remote, Some("fuse"), 0, Some(&data)).is_err() {
            return None;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (r, want) = (root.clone(), remote.clone());
        // Started from this thread: it shares the private mount namespace.
        let worker = std::thread::spawn(move || tx.send(every_scan(&r)).unwrap());
        let got = rx.recv_timeout(std::time::Duration::from_secs(30));
        // Ends the connection: anything still waiting on it fails now.
        drop(fuse);
        let _ = worker.join();
        assert!(detach(&remote), "unmount");
        let got = got.expect("a scan entered the FUSE mount and waited on its daemon");
        for (name, reason, path) in got {
            assert_eq!((reason, path), (Some(Reason::BackingInaccessible), Some(want.clone())), "{name}");
        }
        Some(())
    });
    if done.flatten().is_none() {
        eprintln!("skipped: cannot make a private mount namespace with a FUSE mount here");
    }
}
