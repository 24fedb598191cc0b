//! The capture step of a release when something changes or fails under
//! it: a replacement or an in-place write after the checks restored, not
//! deleted; a restore into an occupied name preserved and named; injected
//! failures at target k (prefix released, k `failed`, suffix untouched);
//! the journal durable before the first rename, and kept when a directory
//! sync fails.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{target, Fixture};
use crate::release::with_faults;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::release::{Outcome, Status};
use winx_release_engine::TargetCode;

#[test]
fn identical_replacement_after_checks_is_restored_not_deleted() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"same text");
    let t = [target(&h)];
    let original_ino = fs::metadata(&h).unwrap().ino();
    let hook = |p: &FaultPoint<'_>| {
        if matches!(p, FaultPoint::AfterChecks) {
            let tmp = h.with_extension("new");
            fs::write(&tmp, b"same text")?;
            fs::rename(&tmp, &h)?; // the pinned inode is gone; a replacement stands
        }
        Ok(())
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.status, Status::Partial, "{r:?}");
    assert_eq!(r.files[0].outcome, Outcome::Restored);
    assert_eq!(r.files[0].reason.map(TargetCode::as_str), Some("replaced_during_release"));
    assert_eq!(r.bytes_reclaimed, 0);
    assert_eq!(fs::read(&h).unwrap(), b"same text");
    assert_ne!(fs::metadata(&h).unwrap().ino(), original_ino);
    assert_eq!(fx.session_entries(), vec!["h.txt".to_owned()]);
}

#[test]
fn replacement_swapped_in_quarantine_is_restored() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"pinned");
    let t = [target(&h)];
    // After the rename, swap the captured object for an identical copy.
    let hook = |p: &FaultPoint<'_>| {
        if let FaultPoint::AfterRename { quarantined, .. } = p {
            fs::remove_file(quarantined)?;
            fs::write(quarantined, b"pinned")?;
        }
        Ok(())
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.files[0].outcome, Outcome::Restored, "{r:?}");
    assert_eq!(fs::read(&h).unwrap(), b"pinned");
}

/// The pinned inode itself rewritten (same inode, same size, other bytes)
/// after the checks, or in quarantine after the move: the recheck reads the
/// captured bytes again, so the object is put back, never unlinked.
#[test]
fn in_place_write_after_checks_is_restored_not_deleted() {
    use std::os::unix::fs::FileExt;
    for in_quarantine in [false, true] {
        let fx = Fixture::new();
        let h = fx.helper("h.txt", b"pinned bytes, one of many");
        let t = [target(&h)];
        let original_ino = fs::metadata(&h).unwrap().ino();
        let rewrite = |path: &Path| fs::OpenOptions::new().write(true).open(path)?.write_all_at(b"PINNED", 0);
        let hook = |p: &FaultPoint<'_>| match p {
            FaultPoint::AfterChecks if !in_quarantine => rewrite(&h),
            FaultPoint::AfterRename { quarantined, .. } if in_quarantine => rewrite(quarantined),
            _ => Ok(()),
        };
        let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
        assert_eq!(r.status, Status::Partial, "{in_quarantine}: {r:?}");
        assert_eq!(r.files[0].outcome, Outcome::Restored, "{in_quarantine}: {r:?}");
        assert_eq!(r.files[0].reason.map(TargetCode::as_str), Some("replaced_during_release"));
        assert_eq!(r.bytes_reclaimed, 0);
        assert_eq!(fs::read(&h).unwrap(), b"PINNED bytes, one of many");
        assert_eq!(fs::metadata(&h).unwrap().ino(), original_ino);
        assert_eq!(fx.session_entries(), vec!["h.txt".to_owned()]);
    }
}

#[test]
fn occupied_name_during_restore_is_preserved_and_named() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"pinned");
    let t = [target(&h)];
    let hook = |p: &FaultPoint<'_>| {
        match p {
            FaultPoint::AfterChecks => {
                let tmp = h.with_extension("new");
                fs::write(&tmp, b"replacement")?;
                fs::rename(&tmp, &h)?;
            }
            FaultPoint::AfterRecheck { verified: false, .. } => fs::write(&h, b"newcomer")?,
            _ => {}
        }
        Ok(())
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.status, Status::Partial);
    let f = &r.files[0];
    assert_eq!(f.outcome, Outcome::Preserved, "{r:?}");
    assert_eq!(f.reason.map(TargetCode::as_str), Some("restore_blocked"));
    let q = f.quarantine_path.as_ref().expect("quarantine path named");
    assert!(q.starts_with(&fx.session));
    assert_eq!(fs::read(q).unwrap(), b"replacement");
    assert_eq!(fs::read(&h).unwrap(), b"newcomer");
    // The quarantine is kept, and so is its journal.
    assert!(q.parent().unwrap().file_name().unwrap().to_str().unwrap().starts_with(".winx-release-"));
    assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 1);
}

fn injected_failure_at(point: &'static str, k: usize) {
    let fx = Fixture::new();
    let paths: Vec<_> = (0..5).map(|i| fx.helper(&format!("h{i}.txt"), format!("helper {i}").as_bytes())).collect();
    let targets: Vec<_> = paths.iter().map(|p| target(p)).collect();
    let hook = move |p: &FaultPoint<'_>| {
        if p.as_str() == point && p.index() == Some(k) {
            return Err(io::Error::other("injected"));
        }
        Ok(())
    };
    let r = fx.release_with(&targets, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.status, Status::Partial, "{r:?}");
    for (i, (f, p)) in r.files.iter().zip(&paths).enumerate() {
        match i.cmp(&k) {
            std::cmp::Ordering::Less => {
                assert_eq!(f.outcome, Outcome::Released, "{i}: {r:?}");
                assert!(!p.exists());
            }
            std::cmp::Ordering::Equal => {
                assert_eq!(f.outcome, Outcome::Failed, "{r:?}");
                assert_eq!(f.reason.map(TargetCode::as_str), Some("io_error"));
                assert_eq!(fs::read(p).unwrap(), format!("helper {i}").as_bytes());
            }
            std::cmp::Ordering::Greater => {
                assert_eq!(f.outcome, Outcome::NotAttempted);
                assert_eq!(f.reason.map(TargetCode::as_str), Some("stopped_after_failure"));
                assert_eq!(fs::read(p).unwrap(), format!("helper {i}").as_bytes());
            }
        }
    }
    assert_eq!(r.bytes_reclaimed, r.files[..k].iter().map(|f| f.bytes_reclaimed).sum::<u64>());
    // Nothing is left in quarantine.
    let names = fx.session_entries();
    assert!(names.iter().all(|n| !n.starts_with(".winx-release-")), "{names:?}");
}

#[test]
fn injected_failure_before_rename_leaves_prefix_released_and_suffix_untouched() {
    injected_failure_at("before_rename", 2);
}

#[test]
fn injected_failure_after_rename_restores_that_target() {
    injected_failure_at("after_rename", 3);
}

#[test]
fn injected_failure_at_recheck_restores_that_target() {
    injected_failure_at("after_recheck", 0);
}

#[test]
fn failure_before_anything_moved_touches_nothing() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"h");
    let hook = |p: &FaultPoint<'_>| {
        if matches!(p, FaultPoint::AfterJournal { .. }) {
            Err(io::Error::other("x"))
        } else {
            Ok(())
        }
    };
    let r = fx.release_with(&[target(&h)], &IdleOwner, &with_faults(&hook));
    assert_eq!(r.status, Status::Failed);
    assert!(!r.touched);
    assert!(h.exists());
    assert!(fx.session_entries() == vec!["h.txt".to_owned()]);
}

#[test]
fn no_rename_overwrites_an_occupied_name() {
    // The quarantine name is taken by the time the rename runs: the rename
    // must fail rather than replace it.
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"mine");
    let hook = |p: &FaultPoint<'_>| {
        if let FaultPoint::BeforeRename { .. } = p {
            let q = fs::read_dir(&fx.session)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(".winx-release-"))
                .unwrap();
            fs::write(q.join("t000"), b"squatter")?;
        }
        Ok(())
    };
    let r = fx.release_with(&[target(&h)], &IdleOwner, &with_faults(&hook));
    assert_eq!(r.files[0].outcome, Outcome::Failed, "{r:?}");
    assert_eq!(fs::read(&h).unwrap(), b"mine");
    let squatter = fs::read_dir(&fx.session)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(".winx-release-"))
        .unwrap()
        .join("t000");
    assert_eq!(fs::read(squatter).unwrap(), b"squatter");
}

#[test]
fn journal_is_durable_before_the_first_rename() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"h");
    let seen = AtomicBool::new(false);
    let journal_dir = fx.layout.journal_dir();
    let hook = |p: &FaultPoint<'_>| {
        if let FaultPoint::BeforeRename { index: 0, path } = p {
            let j = fs::read_dir(&journal_dir)?.next().expect("a journal")?.path();
            let text = fs::read_to_string(j)?;
            assert!(text.contains(path.to_str().unwrap()));
            seen.store(true, Ordering::SeqCst);
        }
        Ok(())
    };
    let r = fx.release_with(&[target(&h)], &IdleOwner, &with_faults(&hook));
    assert_eq!(r.status, Status::Completed);
    assert!(seen.load(Ordering::SeqCst));
}

/// A `fsync` of a directory whose entries a release changed that fails (an
/// I/O error of the workspace's filesystem) is said in the report, and the
/// release's journal stays (synced) for recovery: retiring it would leave a
/// crash that undid the unsynced moves with nothing that names them.
/// Recovery then retires it, the target accounted for.
#[test]
fn a_directory_sync_that_fails_keeps_the_journal() {
    use winx_release_engine::recovery::{recover_with, RecoveryOptions};
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"pinned");
    let t = [target(&h)];
    let hook = |p: &FaultPoint<'_>| match p {
        FaultPoint::DirSync { .. } => Err(io::Error::from_raw_os_error(libc::EIO)),
        _ => Ok(()),
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!((r.status, r.files[0].outcome), (Status::Completed, Outcome::Released), "{r:?}");
    assert!(r.detail.as_deref().is_some_and(|d| d.contains("could not be synced")), "{r:?}");
    assert!(!h.exists());
    assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 1, "the journal stays");
    let rep = recover_with(fx.layout.data_dir(), &[fx.ws().to_path_buf()], &RecoveryOptions::default()).unwrap();
    assert_eq!(rep.journals, 1, "{rep:?}");
    assert_eq!(rep.removed_before_crash.len(), 1, "{rep:?}");
    assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 0);
}

/// The same for a restore: a target put back under its name whose
/// directory cannot be synced is `restored`, and the journal stays.
#[test]
fn a_restore_whose_directory_sync_fails_keeps_the_journal() {
    let fx = Fixture::new();
    let h = fx.helper("sub/h.txt", b"pinned");
    let t = [target(&h)];
    let hook = |p: &FaultPoint<'_>| match p {
        // Not the pinned bytes any more: restored.
        FaultPoint::AfterRename { quarantined, .. } => fs::write(quarantined, b"changed"),
        FaultPoint::DirSync { dir } if dir.ends_with("sub/h.txt") => Err(io::Error::from_raw_os_error(libc::EIO)),
        _ => Ok(()),
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.files[0].outcome, Outcome::Restored, "{r:?}");
    assert!(r.detail.as_deref().is_some_and(|d| d.contains("sub/h.txt")), "{r:?}");
    assert_eq!(fs::read(&h).unwrap(), b"changed");
    assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 1, "the journal stays");
}

/// Recovery keeps a journal whose restore it could not make durable, and
/// retires it at the next recovery that can.
#[test]
fn recovery_keeps_a_journal_whose_restore_it_could_not_sync() {
    use winx_release_engine::recovery::{recover_with, RecoveryOptions};
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"pinned");
    let t = [target(&h)];
    // The release cannot put it back: it stays in quarantine, journaled.
    let hook = |p: &FaultPoint<'_>| match p {
        FaultPoint::AfterRename { quarantined, .. } => fs::write(quarantined, b"changed"),
        FaultPoint::BeforeRestore { .. } => Err(io::Error::other("injected")),
        _ => Ok(()),
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.files[0].outcome, Outcome::Preserved, "{r:?}");
    assert!(!h.exists());
    let failing = |p: &FaultPoint<'_>| match p {
        FaultPoint::DirSync { .. } => Err(io::Error::from_raw_os_error(libc::EIO)),
        _ => Ok(()),
    };
    let ws = [fx.ws().to_path_buf()];
    let opts = RecoveryOptions { faults: Some(&failing), ..RecoveryOptions::default() };
    let rep = recover_with(fx.layout.data_dir(), &ws, &opts).unwrap();
    assert_eq!(rep.restored.len(), 1, "{rep:?}");
    assert_eq!(rep.kept_journals.len(), 1, "{rep:?}");
    assert_eq!(fs::read(&h).unwrap(), b"changed");
    assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 1, "the journal stays");
    let rep = recover_with(fx.layout.data_dir(), &ws, &RecoveryOptions::default()).unwrap();
    assert!(rep.kept_journals.is_empty(), "{rep:?}");
    assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 0);
    assert_eq!(fs::read(&h).unwrap(), b"changed");
}
