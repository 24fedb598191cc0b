//! Integration tests of the backing-root scan (contract section 5) with the
//! synchronous backend, for what only it or the root's opening shows: a
//! root that is a link or no directory, the 50,000-entry default bound, a
//! depth bound's path, a device, `open_root_beneath`. The cases that every
//! backend must agree on (a clean tree's exact counts, empty and missing
//! roots, a wide and deep tree, bounds, offences, aliases, the first
//! offence) are in [`crate::parity`] only, which runs each on every backend
//! and mode and asserts the synchronous report.
//!
//! Not covered here: `backing_inaccessible` for an unreadable directory. The
//! tests run as root, whom permission bits do not stop, and the engine tests
//! cannot drop privileges; the CLI test (`tests/cli.rs`) covers it by running
//! `winx-release scan` under `setpriv`.

use crate::common::trees::*;
use std::collections::HashSet;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, CWD};
use winx_release_engine::scan::{
    open_root, open_root_beneath, scan_paths, BackendKind, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRequest,
    SyncBackend, Verdict, MAX_DEPTH, MAX_ENTRIES,
};
use winx_release_engine::{PhysicalId, Reason};

fn scan(roots: &[&Path]) -> ScanReport {
    scan_with(roots, ScanLimits::default(), &no_aliases())
}

fn scan_with(roots: &[&Path], limits: ScanLimits, aliases: &HashSet<PhysicalId>) -> ScanReport {
    let roots: Vec<PathBuf> = roots.iter().map(|p| p.to_path_buf()).collect();
    scan_paths(&SyncBackend, &roots, limits, aliases)
}

#[test]
fn root_that_is_a_symlink_fails() {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir(t.path().join("real")).unwrap();
    let link = t.path().join("link");
    symlink(t.path().join("real"), &link).unwrap();
    let f = open_root(&link).unwrap_err();
    assert_eq!(f.reason, Reason::BackingSymlink);
    assert_eq!(f.path, link);
    let r = scan(&[&link]);
    assert_fail(&r, Reason::BackingSymlink, &link);
    assert_eq!((r.entries, r.backend), (0, BackendKind::Sync));
    // A trailing slash must not make the kernel follow it.
    let slashed = PathBuf::from(format!("{}/", link.display()));
    assert_eq!(open_root(&slashed).unwrap_err().reason, Reason::BackingSymlink);
    // Dangling too.
    let dangling = t.path().join("dangling");
    symlink(t.path().join("nowhere"), &dangling).unwrap();
    assert_fail(&scan(&[&dangling]), Reason::BackingSymlink, &dangling);
    // A link among the ancestors is operator-given and followed.
    fs::create_dir(t.path().join("real/sub")).unwrap();
    let through = link.join("sub");
    assert_clean(&scan(&[&through]));
}

#[test]
fn root_that_is_not_a_directory_fails() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("file");
    write(&file, 1);
    assert_fail(&scan(&[&file]), Reason::BackingUnsupportedEntry, &file);
    let fifo = t.path().join("fifo");
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    assert_fail(&scan(&[&fifo]), Reason::BackingUnsupportedEntry, &fifo);
    // An ancestor that is a regular file: the path cannot be resolved.
    let below = file.join("x");
    assert_fail(&scan(&[&below]), Reason::BackingInaccessible, &below);
}

#[test]
fn exactly_max_entries_is_clean_and_one_more_fails() {
    let t = big_tempdir();
    let root = t.path();
    // 100 directories of 499 files: 100 + 49,900 = 50,000 entries.
    for d in 0..100 {
        let dir = root.join(format!("d{d}"));
        fs::create_dir(&dir).unwrap();
        files(&dir, 499);
    }
    assert_eq!(ScanLimits::default(), ScanLimits { max_entries: MAX_ENTRIES, max_depth: MAX_DEPTH });
    let r = scan(&[root]);
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.files, r.max_depth), (50_000, 100, 49_900, 2));

    write(&root.join("one-more"), 1);
    let r = scan(&[root]);
    assert_eq!(r.reason, Some(Reason::BackingScanLimit), "{r:?}");
    assert_eq!(r.verdict, Verdict::FailClosed);
    assert_eq!(r.entries, 50_001);
    let p = r.path.unwrap();
    assert!(p.starts_with(root) && p != root, "{}", p.display());
}

#[test]
fn custom_depth_limit() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let deepest = chain(root, 3);
    let two = ScanLimits { max_entries: MAX_ENTRIES, max_depth: 2 };
    assert_fail(&scan_with(&[root], two, &no_aliases()), Reason::BackingScanLimit, &deepest);
    let three = ScanLimits { max_entries: MAX_ENTRIES, max_depth: 3 };
    let r = scan_with(&[root], three, &no_aliases());
    assert_clean(&r);
    assert_eq!(r.max_depth, 3);
    // Depth 0: only an empty root passes.
    let zero = ScanLimits { max_entries: MAX_ENTRIES, max_depth: 0 };
    assert_fail(&scan_with(&[root], zero, &no_aliases()), Reason::BackingScanLimit, &root.join("d1"));
}

#[test]
fn device_is_unsupported() {
    let t = tempfile::tempdir().unwrap();
    let dev = t.path().join("null");
    // Creating a device node needs CAP_MKNOD; skip quietly without it.
    let made = rustix::fs::mknodat(
        CWD,
        &dev,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    );
    if made.is_err() {
        eprintln!("skipping: cannot mknod a character device here");
        return;
    }
    assert_fail(&scan(&[t.path()]), Reason::BackingUnsupportedEntry, &dev);
}

#[test]
fn open_root_beneath_never_follows_links() {
    let t = tempfile::tempdir().unwrap();
    let base_path = t.path();
    fs::create_dir_all(base_path.join("a/real/c")).unwrap();
    write(&base_path.join("a/real/c/f"), 2);
    symlink("real", base_path.join("a/link")).unwrap();
    write(&base_path.join("a/file"), 1);
    let base = fs::File::open(base_path).unwrap();

    let ok = open_root_beneath(base.as_fd(), base_path, &["a", "real", "c"]).unwrap();
    assert_eq!(ok.path, base_path.join("a/real/c"));
    assert!(ok.dir.is_some());
    let r = SyncBackend.scan(&ScanRequest {
        roots: &[ok],
        limits: ScanLimits::default(),
        aliases: &no_aliases(),
        mode: ScanMode::Sizes,
    });
    assert_clean(&r);
    assert_eq!((r.entries, r.files, r.bytes), (1, 1, Some(2)));

    let f = open_root_beneath(base.as_fd(), base_path, &["a", "link", "c"]).unwrap_err();
    assert_eq!(f.reason, Reason::BackingSymlink);
    assert_eq!(f.path, base_path.join("a/link"));

    let f = open_root_beneath(base.as_fd(), base_path, &["a", "link"]).unwrap_err();
    assert_eq!(f.reason, Reason::BackingSymlink);
    assert_eq!(f.path, base_path.join("a/link"));

    let f = open_root_beneath(base.as_fd(), base_path, &["a", "file", "c"]).unwrap_err();
    assert_eq!(f.reason, Reason::BackingUnsupportedEntry);
    assert_eq!(f.path, base_path.join("a/file"));

    let missing = open_root_beneath(base.as_fd(), base_path, &["a", "nope", "c"]).unwrap();
    assert!(missing.dir.is_none());
    assert_eq!(missing.path, base_path.join("a/nope/c"));

    let f = open_root_beneath(base.as_fd(), base_path, &["a", "..", "a"]).unwrap_err();
    assert_eq!(f.reason, Reason::BackingInaccessible);
}

/// Manual benchmark: `WINX_SCAN_ROOT=/path cargo test --release -p winx-release-engine --test suite
/// -- --ignored --nocapture bench_scan_env_root`. See
/// `notes/scan-vs-find.md`.
#[test]
#[ignore = "manual benchmark; needs WINX_SCAN_ROOT"]
fn bench_scan_env_root() {
    let Some(root) = std::env::var_os("WINX_SCAN_ROOT") else {
        eprintln!("WINX_SCAN_ROOT not set");
        return;
    };
    let iterations: usize = std::env::var("WINX_SCAN_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let roots = [PathBuf::from(root)];
    let mut times = Vec::with_capacity(iterations);
    let mut last = None;
    for _ in 0..iterations {
        let start = std::time::Instant::now();
        let r = scan_paths(&SyncBackend, &roots, ScanLimits::default(), &no_aliases());
        times.push(start.elapsed().as_micros());
        last = Some(r);
    }
    times.sort_unstable();
    let r = last.unwrap();
    eprintln!(
        "entries={} dirs={} files={} bytes={:?} max_depth={} verdict={:?} reason={:?}",
        r.entries, r.directories, r.files, r.bytes, r.max_depth, r.verdict, r.reason
    );
    eprintln!(
        "iterations={} min_us={} median_us={} max_us={}",
        iterations,
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
}
