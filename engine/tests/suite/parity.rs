//! Parity of the scan backends (the rehash backends': [`crate::rehash_parity`]).
//!
//! Every scan here runs on the synchronous backend and on the io_uring
//! backend in several shapes (default, one thread, tiny rings and batches,
//! and with a simulated `EINVAL` refusal at various completions, which
//! switches the run to system calls mid-scan); all reports must be equal
//! (verdict, reason, offending path, counts, bytes, depth) but for the
//! elapsed time and the `backend` field, which must say `uring`, or `sync`
//! after a switch. Every case also runs leanly (`ScanMode::Lean`) on the
//! synchronous, io_uring and threaded backends, and with sizes on the
//! threaded one: same verdict, path and counts. The only home of the cases
//! every backend must agree on ([`crate::scan`] keeps the synchronous
//! backend's own), with trees where
//! phase 1 (parallel) and phase 2 (the in-order replay) must agree on where
//! a bound or an offending entry falls.

use crate::common::trees::*;
use std::collections::HashSet;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use winx_release_engine::scan::{
    open_root, open_root_beneath, scan_paths, scan_paths_with, BackendKind, DirCache, RootSpec, ScanBackend,
    ScanLimits, ScanMode, ScanReport, ScanRequest, SharedScanner, SyncBackend, ThreadsBackend, UringBackend,
    UringConfig, MAX_DEPTH, MAX_ENTRIES,
};
use winx_release_engine::{PhysicalId, Reason};
use winx_release_kernel::uring::{probe, RingConfig};

/// The io_uring shapes every scan runs on, with whether the run is
/// expected to end on system calls.
fn uring_shapes() -> Vec<(String, UringBackend, bool)> {
    let tiny = RingConfig { entries: 2, wait_divisor: 1, ..RingConfig::default() };
    let mut v = vec![
        ("uring default".to_owned(), UringBackend::default(), false),
        ("uring 1 thread".to_owned(), UringBackend::new(UringConfig { threads: 1, ..UringConfig::default() }), false),
        (
            "uring 3 threads, batch 1, 2 entries, async close".to_owned(),
            UringBackend::new(UringConfig {
                threads: 3,
                batch_dirs: 1,
                ring: RingConfig { async_close: true, ..tiny },
                ..UringConfig::default()
            }),
            false,
        ),
        (
            "uring plain flags".to_owned(),
            UringBackend::new(UringConfig {
                ring: RingConfig {
                    single_issuer: false,
                    defer_taskrun: false,
                    coop_taskrun: true,
                    iowq_max_workers: 1,
                    ..RingConfig::default()
                },
                ..UringConfig::default()
            }),
            false,
        ),
    ];
    for at in [1, 7] {
        v.push((
            format!("uring EINVAL at completion {at}"),
            UringBackend::new(UringConfig { simulate_einval_at: Some(at), ..UringConfig::default() }),
            true,
        ));
    }
    v
}

/// Scans `roots` on every backend, asserts they agree, returns the
/// synchronous report.
#[track_caller]
fn scan_with(roots: &[&Path], limits: ScanLimits, aliases: &HashSet<PhysicalId>) -> ScanReport {
    scan_on(roots, limits, aliases, uring_shapes())
}

/// [`scan`] on two shapes only (default, and a refusal mid-scan).
#[track_caller]
fn scan_big(roots: &[&Path]) -> ScanReport {
    let shapes = uring_shapes().into_iter().filter(|(n, _, _)| n == "uring default" || n.ends_with(" 7")).collect();
    scan_on(roots, ScanLimits::default(), &no_aliases(), shapes)
}

#[track_caller]
fn scan_on(
    roots: &[&Path],
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
    shapes: Vec<(String, UringBackend, bool)>,
) -> ScanReport {
    let roots: Vec<PathBuf> = roots.iter().map(|p| p.to_path_buf()).collect();
    let want = scan_paths(&SyncBackend, &roots, limits, aliases);
    assert_eq!(want.backend, BackendKind::Sync);
    let uring_ok = probe().is_ok();
    for (name, backend, switches) in shapes {
        let t0 = std::time::Instant::now();
        let mut got = scan_paths(&backend, &roots, limits, aliases);
        if std::env::var_os("PARITY_TIMES").is_some() {
            eprintln!("{name}: {:?}", t0.elapsed());
        }
        if !switches {
            let kind = if uring_ok { BackendKind::Uring } else { BackendKind::Sync };
            assert_eq!(got.backend, kind, "{name}: {got:?}");
        }
        got.elapsed_us = want.elapsed_us;
        got.backend = want.backend;
        assert_eq!(got, want, "{name} differs from sync");
    }
    // Both modes: a lean scan (types and inodes from getdents64 where they
    // can be trusted) gives the same verdict, path and counts on every
    // backend, without bytes; the threaded backend also with sizes.
    let threads = ThreadsBackend::new(3);
    let lean: [(&str, &dyn ScanBackend, ScanMode); 5] = [
        ("sync lean", &SyncBackend, ScanMode::Lean),
        ("uring lean", &UringBackend::default(), ScanMode::Lean),
        ("threads lean", &threads, ScanMode::Lean),
        ("threads 1 lean", &ThreadsBackend::new(1), ScanMode::Lean),
        ("threads sizes", &threads, ScanMode::Sizes),
    ];
    for (name, backend, mode) in lean {
        let mut got = scan_paths_with(backend, &roots, limits, aliases, mode);
        if mode == ScanMode::Lean {
            assert_eq!(got.bytes, None, "{name}");
        }
        got.bytes = want.bytes;
        got.elapsed_us = want.elapsed_us;
        got.backend = want.backend;
        assert_eq!(got, want, "{name} differs from sync with sizes");
    }
    // The directory cache (lean): cold, again once its records settled
    // (read afresh), and warm (served from the records); and through a
    // shared scanner.
    let cache = DirCache::new();
    let shared = SharedScanner::new();
    let specs: Vec<RootSpec> = roots.iter().cloned().map(RootSpec::Path).collect();
    for pass in ["cache cold", "cache settled", "cache warm"] {
        if pass == "cache settled" {
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let got = [
            cache.scan_paths(&roots, limits, aliases),
            shared.scan(&specs, limits, aliases, std::time::Instant::now()),
        ];
        for mut got in got {
            assert_eq!(got.bytes, None, "{pass}");
            got.bytes = want.bytes;
            got.elapsed_us = want.elapsed_us;
            assert_eq!(got, want, "{pass} differs from sync with sizes");
        }
    }
    want
}

fn scan(roots: &[&Path]) -> ScanReport {
    scan_with(roots, ScanLimits::default(), &no_aliases())
}

#[test]
fn uring_is_available_on_the_development_kernel() {
    // Not a requirement of the engine, but of this test suite's value: on
    // the development and CI kernels the io_uring shapes must really run.
    if std::env::var_os("WINX_ALLOW_NO_URING").is_none() {
        assert!(probe().is_ok(), "io_uring unavailable: {:?}", probe());
    }
}

#[test]
fn clean_tree_counts_exactly() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::create_dir(root.join("c")).unwrap();
    write(&root.join("a/f1"), 10);
    write(&root.join("a/f2"), 0);
    write(&root.join("a/b/f3"), 100);
    write(&root.join("top"), 5);
    let r = scan(&[root]);
    assert_clean(&r);
    // a, a/f1, a/f2, a/b, a/b/f3, c, top
    assert_eq!((r.entries, r.directories, r.files, r.bytes, r.max_depth), (7, 3, 4, Some(115), 3));
    assert_eq!(r.backend, BackendKind::Sync);
    assert_eq!(SyncBackend.kind(), BackendKind::Sync);
    assert_eq!(UringBackend::default().kind(), BackendKind::Uring);
}

#[test]
fn empty_and_missing_roots() {
    let t = tempfile::tempdir().unwrap();
    let r = scan(&[t.path()]);
    assert_clean(&r);
    assert_eq!((r.entries, r.max_depth), (0, 0));
    assert_eq!((r.directories, r.files, r.bytes), (0, 0, Some(0)));
    write(&t.path().join("f"), 3);
    let missing = t.path().join("nope");
    let root = open_root(&missing).unwrap();
    assert!(root.dir.is_none());
    assert_eq!(root.path, missing);
    let r = scan(&[&missing, &t.path().join("no/such/dir"), t.path()]);
    assert_clean(&r);
    assert_eq!((r.entries, r.files, r.bytes), (1, 1, Some(3)));
}

#[test]
fn root_failures() {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir(t.path().join("real")).unwrap();
    files(&t.path().join("real"), 3);
    let link = t.path().join("link");
    symlink(t.path().join("real"), &link).unwrap();
    assert_fail(&scan(&[&link]), Reason::BackingSymlink, &link);
    let r = scan(&[&t.path().join("real"), &link]);
    assert_fail(&r, Reason::BackingSymlink, &link);
    assert_eq!((r.entries, r.files, r.directories, r.bytes, r.max_depth), (0, 0, 0, Some(0), 0));
    let file = t.path().join("file");
    write(&file, 1);
    assert_fail(&scan(&[&file]), Reason::BackingUnsupportedEntry, &file);
    let below = file.join("x");
    assert_fail(&scan(&[&below]), Reason::BackingInaccessible, &below);
    fs::create_dir(t.path().join("real/sub")).unwrap();
    assert_clean(&scan(&[&link.join("sub")]));
}

/// The bound at its edge, on a tree of 5,000 entries with a bound of
/// 5,000 (the 50,000 default is the same code; [`crate::scan`] covers it on
/// the synchronous backend, and the benches scan 50,000-entry trees on
/// both).
#[test]
fn exactly_max_entries_is_clean_and_one_more_fails() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    for d in 0..100 {
        let dir = root.join(format!("d{d}"));
        fs::create_dir(&dir).unwrap();
        files(&dir, 49);
    }
    let limits = ScanLimits { max_entries: 5_000, max_depth: MAX_DEPTH };
    let r = scan_with(&[root], limits, &no_aliases());
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.files, r.max_depth), (5_000, 100, 4_900, 2));
    write(&root.join("one-more"), 1);
    let r = scan_with(&[root], limits, &no_aliases());
    assert_eq!((r.reason, r.entries), (Some(Reason::BackingScanLimit), 5_001), "{r:?}");
    scan_big(&[root]);
    assert_eq!(ScanLimits::default(), ScanLimits { max_entries: MAX_ENTRIES, max_depth: MAX_DEPTH });
}

#[test]
fn entry_limits_small_and_shared() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    files(root, 5);
    let five = ScanLimits { max_entries: 5, max_depth: MAX_DEPTH };
    assert_clean(&scan_with(&[root], five, &no_aliases()));
    fs::create_dir(root.join("sub")).unwrap();
    write(&root.join("sub/x"), 1);
    let r = scan_with(&[root], five, &no_aliases());
    assert_eq!((r.reason, r.entries), (Some(Reason::BackingScanLimit), 6));
    assert_eq!(r.path.as_ref().unwrap().parent(), Some(root));
    let r = scan_with(&[root], ScanLimits { max_entries: 7, max_depth: MAX_DEPTH }, &no_aliases());
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.files, r.bytes, r.max_depth), (7, 1, 6, Some(1), 2));
    let zero = ScanLimits { max_entries: 0, max_depth: MAX_DEPTH };
    assert_eq!(scan_with(&[root], zero, &no_aliases()).reason, Some(Reason::BackingScanLimit));
    let empty = tempfile::tempdir().unwrap();
    assert_clean(&scan_with(&[empty.path()], zero, &no_aliases()));

    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    files(a.path(), 6);
    files(b.path(), 6);
    let ten = ScanLimits { max_entries: 10, max_depth: MAX_DEPTH };
    let r = scan_with(&[a.path(), b.path()], ten, &no_aliases());
    assert_eq!((r.reason, r.entries), (Some(Reason::BackingScanLimit), 11));
    // The eleventh entry is the fifth of the second root.
    assert_eq!(r.path.as_ref().unwrap().parent(), Some(b.path()));
    // Each root alone fits; 12 fit in 12.
    assert_clean(&scan_with(&[a.path()], ten, &no_aliases()));
    assert_clean(&scan_with(&[b.path()], ten, &no_aliases()));
    let r = scan_with(&[a.path(), b.path()], ScanLimits { max_entries: 12, max_depth: MAX_DEPTH }, &no_aliases());
    assert_clean(&r);
    assert_eq!(r.entries, 12);
}

#[test]
fn depth_limits() {
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
    let d17 = deepest.join("d17");
    fs::create_dir(&d17).unwrap();
    let r = scan(&[root]);
    assert_fail(&r, Reason::BackingScanLimit, &d17);
    assert_eq!(r.max_depth, 17);
    fs::remove_dir(&d17).unwrap();
    let f17 = deepest.join("f17");
    write(&f17, 1);
    assert_fail(&scan(&[root]), Reason::BackingScanLimit, &f17);
    for depth in 0..=4 {
        let limits = ScanLimits { max_entries: MAX_ENTRIES, max_depth: depth };
        scan_with(&[root], limits, &no_aliases());
    }
}

#[test]
fn wide_and_deep_tree() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let mut dir = root.to_path_buf();
    for depth in 1..=16 {
        for s in 0..20 {
            fs::create_dir(dir.join(format!("s{s}"))).unwrap();
            if depth < 16 {
                write(&dir.join(format!("s{s}/f")), 2);
            }
        }
        dir.push("s0");
    }
    // Wide directories at every level of a 16-deep chain: the scan keeps
    // only the current chain's descriptors open and still sees everything.
    let r = scan(&[root]);
    assert_clean(&r);
    assert_eq!((r.entries, r.directories, r.files, r.bytes, r.max_depth), (620, 320, 300, Some(600), 16));
}

#[test]
fn offending_entries_fail_with_their_path() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("a/b")).unwrap();
    let outside = t.path().join("outside");
    write(&outside, 1);
    let to_file = root.join("a/b/to-file");
    symlink(&outside, &to_file).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingSymlink, &to_file);
    fs::remove_file(&to_file).unwrap();
    fs::create_dir(t.path().join("outdir")).unwrap();
    let to_dir = root.join("a/to-dir");
    symlink(t.path().join("outdir"), &to_dir).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingSymlink, &to_dir);
    fs::remove_file(&to_dir).unwrap();
    let dangling = root.join("a/dangling");
    symlink("nowhere", &dangling).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingSymlink, &dangling);
    fs::remove_file(&dangling).unwrap();
    let f = root.join("a/b/fifo");
    fifo(&f);
    assert_fail(&scan(&[&root]), Reason::BackingUnsupportedEntry, &f);
    fs::remove_file(&f).unwrap();
    let sock = root.join("a/sock");
    let listener = UnixListener::bind(&sock).unwrap();
    assert_fail(&scan(&[&root]), Reason::BackingUnsupportedEntry, &sock);
    drop(listener);
    fs::remove_file(&sock).unwrap();
    assert_clean(&scan(&[&root]));
}

#[test]
fn aliases_fail() {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("helper");
    write(&target, 9);
    let root = t.path().join("root");
    fs::create_dir_all(root.join("x/y")).unwrap();
    write(&root.join("x/other"), 1);
    let aliases: HashSet<PhysicalId> = [id_of(&target)].into_iter().collect();
    assert_clean(&scan_with(&[&root], ScanLimits::default(), &aliases));
    let link = root.join("x/y/retained");
    fs::hard_link(&target, &link).unwrap();
    assert_fail(&scan_with(&[&root], ScanLimits::default(), &aliases), Reason::BackingAlias, &link);
    // Without the alias set, the same tree is clean.
    assert_clean(&scan(&[&root]));
    let dir_alias: HashSet<PhysicalId> = [id_of(&root.join("x/y"))].into_iter().collect();
    assert_fail(&scan_with(&[&root], ScanLimits::default(), &dir_alias), Reason::BackingAlias, &root.join("x/y"));
}

#[test]
fn first_offence_in_sync_order_wins() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    fs::create_dir(root.join("sub")).unwrap();
    let deep_link = root.join("sub/link");
    symlink("x", &deep_link).unwrap();
    let f = root.join("fifo");
    fifo(&f);
    assert_fail(&scan(&[root]), Reason::BackingUnsupportedEntry, &f);
    fs::remove_file(&f).unwrap();
    let r = scan(&[root]);
    assert_fail(&r, Reason::BackingSymlink, &deep_link);
    assert_eq!((r.entries, r.directories, r.files), (2, 1, 0));
}

#[test]
fn open_root_beneath_then_scan() {
    let t = tempfile::tempdir().unwrap();
    let base_path = t.path();
    fs::create_dir_all(base_path.join("a/real/c")).unwrap();
    write(&base_path.join("a/real/c/f"), 2);
    let base = fs::File::open(base_path).unwrap();
    for (name, backend, _) in uring_shapes() {
        let ok = open_root_beneath(base.as_fd(), base_path, &["a", "real"]).unwrap();
        let mut r = backend.scan(&ScanRequest {
            roots: &[ok],
            limits: ScanLimits::default(),
            aliases: &no_aliases(),
            mode: ScanMode::Sizes,
        });
        let ok = open_root_beneath(base.as_fd(), base_path, &["a", "real"]).unwrap();
        let want = SyncBackend.scan(&ScanRequest {
            roots: &[ok],
            limits: ScanLimits::default(),
            aliases: &no_aliases(),
            mode: ScanMode::Sizes,
        });
        r.elapsed_us = want.elapsed_us;
        r.backend = want.backend;
        assert_eq!(r, want, "{name}");
    }
    assert!(open_root(&base_path.join("nope")).unwrap().dir.is_none());
}

/// A tree where every directory has several subdirectories and files, and
/// offences and bounds placed all over it: the parallel phase must find the
/// same first offence, and the same counts up to it, as the in-order scan.
#[test]
fn bounds_and_offences_anywhere_in_a_bushy_tree() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let mut dirs = vec![root.to_path_buf()];
    let mut all_dirs = Vec::new();
    for depth in 0..4 {
        let mut next = Vec::new();
        for d in &dirs {
            for f in 0..5 {
                write(&d.join(format!("f{f}")), depth * 10 + f);
            }
            for s in 0..3 {
                let sub = d.join(format!("s{s}"));
                fs::create_dir(&sub).unwrap();
                next.push(sub);
            }
        }
        all_dirs.extend(next.iter().cloned());
        dirs = next;
    }
    let clean = scan(&[root]);
    assert_clean(&clean);
    // 40 directories with 5 files and 3 subdirectories each; 81 empty leaves.
    assert_eq!((clean.entries, clean.files, clean.directories, clean.max_depth), (320, 200, 120, 4));
    let total = clean.entries;
    // Every entry bound around the whole range.
    for max in [0, 1, 5, 8, 9, 40, 150, total - 1, total, total + 1] {
        scan_with(&[root], ScanLimits { max_entries: max, max_depth: MAX_DEPTH }, &no_aliases());
    }
    for depth in 0..=5 {
        scan_with(&[root], ScanLimits { max_entries: MAX_ENTRIES, max_depth: depth }, &no_aliases());
    }
    // One offence at a time, in many places, then several at once.
    for (k, d) in all_dirs.iter().enumerate().step_by(11) {
        let link = d.join("zz-link");
        symlink("nowhere", &link).unwrap();
        let r = scan(&[root]);
        assert_eq!(r.reason, Some(Reason::BackingSymlink));
        if k % 2 == 0 {
            fs::remove_file(&link).unwrap();
        }
    }
    scan(&[root]);
    let aliases: HashSet<PhysicalId> = all_dirs[..39].iter().rev().step_by(5).map(|d| id_of(&d.join("f3"))).collect();
    scan_with(&[root], ScanLimits::default(), &aliases);
    scan_with(&[root, root], ScanLimits { max_entries: 100, max_depth: 3 }, &aliases);
}

#[test]
fn refusal_mid_scan_switches_to_system_calls_with_the_same_report() {
    if probe().is_err() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    for i in 0..30 {
        fs::create_dir_all(root.join(format!("d{i}/e"))).unwrap();
        files(&root.join(format!("d{i}")), 20);
        write(&root.join(format!("d{i}/e/data")), i);
    }
    let want = scan_paths(&SyncBackend, &[root.to_path_buf()], ScanLimits::default(), &no_aliases());
    for at in [1, 3, 100, 500] {
        let backend = UringBackend::new(UringConfig { simulate_einval_at: Some(at), ..UringConfig::default() });
        let mut got = scan_paths(&backend, &[root.to_path_buf()], ScanLimits::default(), &no_aliases());
        assert_eq!(got.backend, BackendKind::Sync, "refusal at {at} must switch");
        got.elapsed_us = want.elapsed_us;
        assert_eq!(got, want, "refusal at completion {at}");
    }
    // Simulated refusals do not disable io_uring for the process.
    assert!(probe().is_ok());
}

/// Scans of 600 directories leave no descriptor open. Counted in a process
/// of its own (this binary again, running only [`leak_child`]): the other
/// tests of this binary open files at the same time.
#[test]
fn many_directories_do_not_leak_descriptors() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..300 {
        fs::create_dir_all(t.path().join(format!("w{i}/x"))).unwrap();
    }
    let out = crate::common::spawn(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "parity::leak_child", "--nocapture", "--test-threads=1"])
            .env("WINX_LEAK_ROOT", t.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    )
    .wait_with_output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("leak_child: scanned"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child of [`many_directories_do_not_leak_descriptors`]; does nothing
/// unless that test started it (`WINX_LEAK_ROOT`).
#[test]
fn leak_child() {
    let Some(root) = std::env::var_os("WINX_LEAK_ROOT") else { return };
    let root = Path::new(&root);
    let open_fds = || fs::read_dir("/proc/self/fd").unwrap().count();
    // The first scan may set up what a process keeps (a ring, a probe).
    assert_eq!(scan(&[root]).directories, 600);
    let before = open_fds();
    for _ in 0..3 {
        let r = scan(&[root]);
        assert_clean(&r);
        assert_eq!(r.directories, 600);
    }
    let after = open_fds();
    assert_eq!(after, before, "descriptors before three scans {before}, after {after}");
    println!("leak_child: scanned, {before} descriptors before and after");
}
