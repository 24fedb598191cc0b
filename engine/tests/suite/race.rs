//! Race tests in the style of Rust's `remove_dir_all` TOCTOU test and the
//! kernel's openat2 rename-attack selftest: attacker threads change the
//! session while releases run. Every try must end in one of a listed set of
//! allowed outcomes; no replacement is ever deleted; nothing outside the
//! session directory is ever touched.
//!
//! Each attack runs in two phases. First, deterministically, at every
//! fault point a release passes ([`FaultPoint`]: between its checks, its
//! journal, each rename, re-check, unlink and restore): the attack once at
//! the point, then the attack and its undo at that point and the next (an
//! A-B-A change). Every window between two steps is hit, on every run, in a
//! few dozen releases. Then the random tries: the attacker on a thread of
//! its own, looping while a release runs, for the windows inside a step.
//!
//! `WINX_RACE_TRIES` sets the random tries per attack (CI default 100:
//! each try costs a release whose in-use check sweeps every process's
//! descriptors, 40-150 ms on a loaded 2-core machine; 500 took over 60 s
//! per attack). The `#[ignore]`d long version runs 25,000 per attack,
//! 100,000 in all: `cargo test -p winx-release-engine --test suite
//! race::race_long -- --ignored`.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::common::{target, Fixture};
use crate::release::with_faults;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::release::{Outcome, ReleaseReport, Status};
use winx_release_engine::TargetCode;
use winx_release_kernel::identity::Identity;

fn tries(default: usize) -> usize {
    std::env::var("WINX_RACE_TRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whether the object behind `f` still has a name somewhere.
fn alive(f: &File) -> bool {
    Identity::of_fd(f).unwrap().nlink > 0
}

#[derive(Default, Debug)]
struct Tally {
    released: usize,
    restored: usize,
    preserved: usize,
    denied: usize,
    failed: usize,
}

/// One attack: `setup` builds the try's files and returns the helper path;
/// `attack` changes the session once (its `k`-th time: an attack that
/// alternates does on odd `k` what undoes an even `k`) and returns, in
/// `created`, files it created (which must all survive). The fault-point
/// phase runs first, then `n` random tries.
fn race<S, A>(name: &str, n: usize, allowed_denials: &[&str], setup: S, attack: A) -> Tally
where
    S: Fn(&Fixture, usize) -> PathBuf,
    A: Fn(&Fixture, &Path, usize, &Mutex<Vec<File>>) + Sync,
{
    // One attack at a time: each already keeps two threads busy (the
    // releases and the attacker); run together they only slowed each other.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let fx = Fixture::new();
    let outside = fx.ws().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("victim.txt"), b"victim").unwrap();
    let victim = File::open(outside.join("victim.txt")).unwrap();
    let mut tally = Tally::default();
    let mut i = 0;
    // The deterministic phase: the attack at fault point `at` (and, with
    // `undo`, its undo at the next one), for every point the release
    // reaches.
    let mut points = 0;
    for undo in [false, true] {
        for at in 0.. {
            let path = setup(&fx, i);
            let t = target(&path);
            let pinned = File::open(&path).unwrap();
            let created = Mutex::new(Vec::new());
            let seen = AtomicUsize::new(0);
            let hook = |_: &FaultPoint<'_>| -> io::Result<()> {
                let k = seen.fetch_add(1, Ordering::SeqCst);
                if k == at || (undo && k == at + 1) {
                    attack(&fx, &path, k - at, &created);
                }
                Ok(())
            };
            let report = fx.release_with(std::slice::from_ref(&t), &IdleOwner, &with_faults(&hook));
            let name = format!("{name} at fault point {at}{}", if undo { " with its undo" } else { "" });
            check_try(&name, i, &report, allowed_denials, &pinned, &created, &victim, &outside, &mut tally);
            cleanup(&fx);
            i += 1;
            if seen.load(Ordering::SeqCst) <= at {
                break;
            }
            points = points.max(at + 1);
        }
    }
    // A release passes at least the points before its checks' end and
    // before its rename: an attack that never ran proves nothing.
    assert!(points >= 2, "{name}: the releases passed {points} fault points");
    // The random phase.
    for _ in 0..n {
        let path = setup(&fx, i);
        let t = target(&path);
        let pinned = File::open(&path).unwrap();
        let created = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        let report = std::thread::scope(|s| {
            s.spawn(|| {
                let mut k = 0;
                while !stop.load(Ordering::Relaxed) {
                    attack(&fx, &path, k, &created);
                    k += 1;
                }
            });
            let r = fx.release(std::slice::from_ref(&t));
            stop.store(true, Ordering::Relaxed);
            r
        });
        check_try(name, i, &report, allowed_denials, &pinned, &created, &victim, &outside, &mut tally);
        cleanup(&fx);
        i += 1;
    }
    eprintln!("{name}: {points} fault points; {tally:?}");
    tally
}

/// Asserts that try `i` ended in an allowed outcome, that no replacement
/// and nothing outside the session was deleted, and counts the outcome.
#[allow(clippy::too_many_arguments)]
fn check_try(
    name: &str,
    i: usize,
    report: &ReleaseReport,
    allowed_denials: &[&str],
    pinned: &File,
    created: &Mutex<Vec<File>>,
    victim: &File,
    outside: &Path,
    tally: &mut Tally,
) {
    let f = &report.files[0];
    match f.outcome {
        Outcome::Released => {
            tally.released += 1;
            assert!(!alive(pinned), "{name} #{i}: released but the pinned inode lives");
        }
        Outcome::Restored => {
            tally.restored += 1;
            assert_eq!(f.reason.map(TargetCode::as_str), Some("replaced_during_release"), "{name} #{i}");
        }
        Outcome::Preserved => {
            tally.preserved += 1;
            let q = f.quarantine_path.as_ref().expect("preserved names its location");
            assert!(fs::symlink_metadata(q).is_ok(), "{name} #{i}: preserved path {} is empty", q.display());
        }
        Outcome::Denied => {
            tally.denied += 1;
            let code = report.error_code.unwrap().as_str();
            assert!(allowed_denials.contains(&code), "{name} #{i}: unexpected denial {code}");
        }
        Outcome::Failed => {
            tally.failed += 1;
            assert_eq!(f.reason.map(TargetCode::as_str), Some("io_error"), "{name} #{i}");
        }
        Outcome::NotAttempted => panic!("{name} #{i}: single target not attempted"),
    }
    if f.outcome != Outcome::Released {
        assert!(alive(pinned), "{name} #{i}: pinned inode gone without a release: {report:?}");
        assert_ne!(report.status, Status::Completed);
    }
    for c in created.lock().unwrap().iter() {
        if c.metadata().unwrap().ino() != pinned.metadata().unwrap().ino() {
            assert!(alive(c), "{name} #{i}: a replacement was deleted: {report:?}");
        }
    }
    assert!(alive(victim), "{name} #{i}: outside victim deleted");
    assert_eq!(fs::read(outside.join("victim.txt")).unwrap_or_default(), b"victim");
}

/// Clears the session directory (and stray links) between tries.
fn cleanup(fx: &Fixture) {
    for e in fs::read_dir(&fx.session).unwrap() {
        let p = e.unwrap().path();
        let m = fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            fs::remove_dir_all(&p).unwrap();
        } else {
            fs::remove_file(&p).unwrap();
        }
    }
    let _ = fs::remove_dir_all(fx.layout.scratch_root());
    let _ = fs::remove_dir_all(fx.layout.journal_dir());
}

fn swap_identical(n: usize) -> Tally {
    race(
        "swap_identical",
        n,
        &["read_required", "not_found"],
        |fx, i| fx.helper("h.txt", format!("same text {i}").as_bytes()),
        |_fx, path, k, created| {
            // Move the current object aside (it stays alive) and put an
            // identical copy at the name.
            let tmp = path.with_extension("swap");
            let aside = path.with_extension(format!("aside{k}"));
            let body = fs::read(path).unwrap_or_else(|_| b"x".to_vec());
            if fs::write(&tmp, &body).is_ok() {
                if let Ok(f) = File::open(&tmp) {
                    created.lock().unwrap().push(f);
                }
                if fs::rename(path, &aside).is_ok() {
                    let _ = rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &tmp,
                        rustix::fs::CWD,
                        path,
                        rustix::fs::RenameFlags::NOREPLACE,
                    );
                }
            }
        },
    )
}

fn parent_symlink(n: usize) -> Tally {
    race(
        "parent_symlink",
        n,
        &["read_required", "not_found", "symlink"],
        |fx, _| fx.helper("sub/victim.txt", b"victim"),
        |fx, _path, k, _created| {
            let sub = fx.session.join("sub");
            let real = fx.session.join("sub.real");
            if k % 2 == 0 {
                if fs::rename(&sub, &real).is_ok() {
                    let _ = symlink(fx.ws().join("outside"), &sub);
                }
            } else if fs::symlink_metadata(&sub).map(|m| m.file_type().is_symlink()).unwrap_or(false) {
                let _ = fs::remove_file(&sub);
                let _ = fs::rename(&real, &sub);
            }
        },
    )
}

fn exchange(n: usize) -> Tally {
    race(
        "exchange",
        n,
        &["read_required", "not_found"],
        |fx, _| {
            let d = fx.helper("decoy.txt", b"identical");
            let _ = d;
            fx.helper("h.txt", b"identical")
        },
        |fx, path, k, created| {
            let decoy = fx.session.join("decoy.txt");
            if k == 0 {
                if let Ok(f) = File::open(&decoy) {
                    created.lock().unwrap().push(f);
                }
            }
            let _ = rustix::fs::renameat_with(
                rustix::fs::CWD,
                path,
                rustix::fs::CWD,
                &decoy,
                rustix::fs::RenameFlags::EXCHANGE,
            );
        },
    )
}

fn hardlink_into_backing(n: usize) -> Tally {
    race(
        "hardlink_into_backing",
        n,
        &["read_required", "hardlink", "backing_alias", "not_found"],
        |fx, _| {
            fs::create_dir_all(fx.layout.scratch_root()).unwrap();
            fx.helper("h.txt", b"linked")
        },
        |fx, path, k, _created| {
            let alias = fx.layout.scratch_root().join("alias");
            if k % 2 == 0 {
                let _ = fs::hard_link(path, &alias);
            } else {
                let _ = fs::remove_file(&alias);
            }
        },
    )
}

#[test]
fn race_swap_identical_text() {
    swap_identical(tries(100));
}

#[test]
fn race_parent_replaced_by_symlink() {
    parent_symlink(tries(100));
}

#[test]
fn race_rename_exchange() {
    exchange(tries(100));
}

#[test]
fn race_hardlink_into_backing_root() {
    hardlink_into_backing(tries(100));
}

#[test]
#[ignore = "long: 25,000 tries per attack, 100,000 in all"]
fn race_long() {
    swap_identical(25_000);
    parent_symlink(25_000);
    exchange(25_000);
    hardlink_into_backing(25_000);
}
