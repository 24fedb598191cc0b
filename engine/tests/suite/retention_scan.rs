//! Pruning never makes a concurrent backing-root scan fail closed.
//!
//! Every case runs on the synchronous backend and on the io_uring backend
//! (where the kernel has it). A directory removed while a scan holds it
//! open reads as empty (`getdents64` answers `ENOENT` for a removed
//! directory, and a removed directory was empty), entries that vanish are
//! not counted, and retention's passes, which move each execution whole out
//! of the root before removing it, never make a scan fail.

use std::collections::HashSet;
use std::fs;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use winx_release_engine::retention::{remove::remove_tree, Retention, RetentionPolicy};
use winx_release_engine::scan::{open_root, ScanBackend, ScanLimits, ScanMode, ScanRequest, SyncBackend, UringBackend};
use winx_release_kernel::uring::probe;

fn backends() -> Vec<Box<dyn ScanBackend>> {
    let mut v: Vec<Box<dyn ScanBackend>> = vec![Box::new(SyncBackend)];
    if probe().is_ok() {
        v.push(Box::new(UringBackend::default()));
    } else {
        eprintln!("io_uring unavailable here: only the synchronous backend runs");
    }
    v
}

fn exec(root: &Path, id: u64) {
    let dir = root.join(format!("e{id:08}"));
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("output"), b"out\n").unwrap();
    let status = format!("{{\"state\":\"resolved\",\"ended_unix\":{id}}}");
    fs::write(dir.join("status.json"), status).unwrap();
}

#[test]
fn a_root_removed_under_an_open_scan_is_empty_not_inaccessible() {
    for b in backends() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("executions");
        fs::create_dir(&root).unwrap();
        let opened = open_root(&root).unwrap();
        fs::remove_dir(&root).unwrap();
        let r = b.scan(&ScanRequest {
            roots: &[opened],
            limits: ScanLimits::default(),
            aliases: &HashSet::new(),
            mode: ScanMode::Sizes,
        });
        assert!(!r.failed_closed(), "{:?}: {r:?}", b.kind());
        assert_eq!(r.entries, 0);
    }
}

/// Scans `root` over and over while `prune` runs on another thread; no scan
/// may fail closed.
fn scans_while(root: &Path, backend: &dyn ScanBackend, mut prune: impl FnMut(u64) + Send) -> u64 {
    let stop = AtomicBool::new(false);
    let mut scans = 0u64;
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                prune(i);
                i += 1;
            }
        });
        let deadline = Instant::now() + Duration::from_millis(700);
        while Instant::now() < deadline || scans < 20 {
            let opened = open_root(root).unwrap();
            let r = backend.scan(&ScanRequest {
                roots: &[opened],
                limits: ScanLimits::default(),
                aliases: &HashSet::new(),
                mode: ScanMode::Sizes,
            });
            if r.failed_closed() {
                stop.store(true, Ordering::Relaxed);
                panic!("{:?}: a scan failed closed during pruning: {r:?}", backend.kind());
            }
            scans += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    scans
}

#[test]
fn retention_passes_during_scans_never_fail_a_scan() {
    for b in backends() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("executions");
        fs::create_dir(&root).unwrap();
        for i in 0..300 {
            exec(&root, i);
        }
        let mut r = Retention::new(d.path(), RetentionPolicy { keep_executions: 50, ..RetentionPolicy::default() });
        let mut next = 300;
        let scans = scans_while(&root, b.as_ref(), |_| {
            for _ in 0..40 {
                exec(&root, next);
                next += 1;
            }
            r.pass(SystemTime::now(), &mut |_| true).unwrap();
        });
        assert!(scans >= 20);
    }
}

#[test]
fn removal_in_place_during_scans_never_fails_a_scan() {
    // Without staging (an execution store on its own filesystem): entries and
    // whole directories vanish under the scan, half-removed directories
    // included.
    for b in backends() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("executions");
        fs::create_dir(&root).unwrap();
        for i in 0..400 {
            exec(&root, i);
        }
        let fd = open_root(&root).unwrap().dir.unwrap();
        let mut next = 400u64;
        scans_while(&root, b.as_ref(), |i| {
            exec(&root, next);
            next += 1;
            remove_tree(fd.as_fd(), &format!("e{i:08}"), 1).unwrap();
        });
    }
}
