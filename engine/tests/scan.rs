//! Integration tests of the backing-root scan (contract section 5) with the
//! synchronous backend. The cases that every backend must agree on (a clean
//! tree's exact counts, a wide and deep tree, bounds, offences, aliases)
//! are in `tests/parity.rs`, which runs each on every backend and mode.
//!
//! Not covered here: `backing_inaccessible` for an unreadable directory. The
//! tests run as root, whom permission bits do not stop, and the engine tests
//! cannot drop privileges; the CLI test (`tests/cli.rs`) covers it by running
//! `winx-release scan` under `setpriv`.

mod common;

use common::trees::*;
use std::collections::HashSet;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
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
fn empty_root_is_clean_with_nothing() {
    let t = tempfile::tempdir().unwrap();
    let r = scan(&[t.path()]);
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.files, r.bytes, r.max_depth), (0, 0, 0, Some(0), 0));
}

#[test]
fn missing_root_is_empty() {
    let t = tempfile::tempdir().unwrap();
    write(&t.path().join("f"), 3);
    let missing = t.path().join("nope");
    let missing_ancestor = t.path().join("no/such/dir");
    let root = open_root(&missing).unwrap();
    assert!(root.dir.is_none());
    assert_eq!(root.path, missing);
    let r = scan(&[&missing, &missing_ancestor, t.path()]);
    assert_clean(&r);
    assert_eq!((r.entries, r.files, r.bytes), (1, 1, Some(3)));
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
fn root_failure_stops_before_scanning() {
    let t = tempfile::tempdir().unwrap();
    let good = t.path().join("good");
    fs::create_dir(&good).unwrap();
    files(&good, 3);
    let link = t.path().join("link");
    symlink(&good, &link).unwrap();
    let r = scan(&[&good, &link]);
    assert_fail(&r, Reason::BackingSymlink, &link);
    assert_eq!((r.entries, r.files, r.directories, r.bytes, r.max_depth), (0, 0, 0, Some(0), 0));
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
fn small_entry_limit() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    files(root, 5);
    let limits = ScanLimits { max_entries: 5, max_depth: MAX_DEPTH };
    let r = scan_with(&[root], limits, &no_aliases());
    assert_clean(&r);
    assert_eq!(r.entries, 5);
    // The sixth entry, a subdirectory with a file below it.
    fs::create_dir(root.join("sub")).unwrap();
    write(&root.join("sub/x"), 1);
    let r = scan_with(&[root], limits, &no_aliases());
    assert_eq!(r.reason, Some(Reason::BackingScanLimit), "{r:?}");
    assert_eq!(r.entries, 6);
    assert_eq!(r.path.as_ref().unwrap().parent(), Some(root));
    let r = scan_with(&[root], ScanLimits { max_entries: 7, max_depth: MAX_DEPTH }, &no_aliases());
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.files, r.bytes, r.max_depth), (7, 1, 6, Some(1), 2));
    // Zero entries allowed: any entry fails, an empty root does not.
    let empty = tempfile::tempdir().unwrap();
    let zero = ScanLimits { max_entries: 0, max_depth: MAX_DEPTH };
    assert_clean(&scan_with(&[empty.path()], zero, &no_aliases()));
    assert_eq!(scan_with(&[root], zero, &no_aliases()).reason, Some(Reason::BackingScanLimit));
}

#[test]
fn entry_bound_is_shared_across_roots() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    files(a.path(), 6);
    files(b.path(), 6);
    let limits = ScanLimits { max_entries: 10, max_depth: MAX_DEPTH };
    let r = scan_with(&[a.path(), b.path()], limits, &no_aliases());
    assert_eq!(r.reason, Some(Reason::BackingScanLimit), "{r:?}");
    assert_eq!(r.entries, 11);
    // The eleventh entry is the fifth of the second root.
    assert_eq!(r.path.as_ref().unwrap().parent(), Some(b.path()));
    // Each root alone fits.
    assert_clean(&scan_with(&[a.path()], limits, &no_aliases()));
    assert_clean(&scan_with(&[b.path()], limits, &no_aliases()));
    // 12 fit in 12.
    let r = scan_with(&[a.path(), b.path()], ScanLimits { max_entries: 12, max_depth: MAX_DEPTH }, &no_aliases());
    assert_clean(&r);
    assert_eq!(r.entries, 12);
}

#[test]
fn depth_sixteen_is_clean_and_seventeen_fails() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let deepest = chain(root, 16);
    let r = scan(&[root]);
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.max_depth), (16, 16, 16));

    // A file at depth 16 (in d15) is fine too.
    let f16 = deepest.parent().unwrap().join("file");
    write(&f16, 4);
    let r = scan(&[root]);
    assert_clean(&r);
    assert_eq!((r.entries, r.files, r.bytes, r.max_depth), (17, 1, Some(4), 16));
    fs::remove_file(&f16).unwrap();

    // A 17th nested directory.
    let d17 = deepest.join("d17");
    fs::create_dir(&d17).unwrap();
    let r = scan(&[root]);
    assert_fail(&r, Reason::BackingScanLimit, &d17);
    assert_eq!(r.max_depth, 17);
    fs::remove_dir(&d17).unwrap();

    // A file at depth 17 (in d16) fails the same way.
    let f17 = deepest.join("f17");
    write(&f17, 1);
    assert_fail(&scan(&[root]), Reason::BackingScanLimit, &f17);
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
fn symlinks_fail_with_their_path() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("a/b")).unwrap();
    let outside = t.path().join("outside");
    write(&outside, 1);
    fs::create_dir(t.path().join("outdir")).unwrap();

    let to_file = root.join("a/b/to-file");
    symlink(&outside, &to_file).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingSymlink, &to_file);
    fs::remove_file(&to_file).unwrap();

    let to_dir = root.join("a/to-dir");
    symlink(t.path().join("outdir"), &to_dir).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingSymlink, &to_dir);
    fs::remove_file(&to_dir).unwrap();

    let dangling = root.join("a/b/dangling");
    symlink("does-not-exist", &dangling).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingSymlink, &dangling);
    fs::remove_file(&dangling).unwrap();

    assert_clean(&scan(&[&root]));
}

#[test]
fn fifo_and_socket_are_unsupported() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir(root.join("sub")).unwrap();
    let fifo = root.join("sub/fifo");
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    assert_fail(&scan(&[root]), Reason::BackingUnsupportedEntry, &fifo);
    fs::remove_file(&fifo).unwrap();

    let sock = root.join("sub/sock");
    let _listener = UnixListener::bind(&sock).unwrap();
    assert_fail(&scan(&[root]), Reason::BackingUnsupportedEntry, &sock);
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
fn hardlink_of_an_alias_fails() {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("helper");
    write(&target, 9);
    let root = t.path().join("root");
    fs::create_dir_all(root.join("x/y")).unwrap();
    write(&root.join("x/other"), 1);
    let aliases: HashSet<PhysicalId> = [id_of(&target)].into_iter().collect();
    // No link yet: clean.
    assert_clean(&scan_with(&[&root], ScanLimits::default(), &aliases));
    let link = root.join("x/y/retained");
    fs::hard_link(&target, &link).unwrap();
    let r = scan_with(&[&root], ScanLimits::default(), &aliases);
    assert_fail(&r, Reason::BackingAlias, &link);
    // Without the alias set, the same tree is clean.
    assert_clean(&scan(&[&root]));
}

#[test]
fn alias_that_is_a_directory_fails() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let dir = root.join("d/e");
    fs::create_dir_all(&dir).unwrap();
    let aliases: HashSet<PhysicalId> = [id_of(&dir)].into_iter().collect();
    assert_fail(&scan_with(&[root], ScanLimits::default(), &aliases), Reason::BackingAlias, &dir);
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

#[test]
fn first_offence_wins_and_counts_stop_there() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    // Root entries are all inspected before any subdirectory is entered.
    fs::create_dir(root.join("sub")).unwrap();
    let deep_link = root.join("sub/link");
    symlink("x", &deep_link).unwrap();
    let fifo = root.join("fifo");
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    assert_fail(&scan(&[root]), Reason::BackingUnsupportedEntry, &fifo);
    fs::remove_file(&fifo).unwrap();
    let r = scan(&[root]);
    assert_fail(&r, Reason::BackingSymlink, &deep_link);
    assert_eq!((r.entries, r.directories, r.files), (2, 1, 0));
}

/// Manual benchmark: `WINX_SCAN_ROOT=/path cargo test --release --test scan
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
