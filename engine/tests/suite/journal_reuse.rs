//! A process that keeps retired journals (as the guardian does,
//! `journal/idle.rs`) reuses one file per release in flight, and never a
//! kept file that recovery removed meanwhile. Each test runs in a process
//! of its own ([`isolated`]): keeping is a process-wide setting, and
//! [`drop_idle_journals`] drops every kept file.

use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::common::{isolated, target, Fixture};
use winx_release_engine::admission::Admission;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::journal::{drop_idle_journals, keep_idle_journals, read_journal, ReadJournal};
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::recovery::recover;
use winx_release_engine::release::{release, ReleaseOptions, ReleaseRequest};

fn journals(fx: &Fixture) -> Vec<(PathBuf, u64)> {
    let mut v: Vec<_> = fs::read_dir(fx.layout.journal_dir())
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let len = fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect();
    v.sort();
    v
}

/// Whether every byte of the file at `p` is zero.
fn all_zero(p: &PathBuf) -> bool {
    fs::read(p).unwrap().iter().all(|b| *b == 0)
}

/// Releases `name` and returns what `D/journal` held right after the
/// intent was written.
fn release_one(fx: &Fixture, name: &str) -> Vec<(PathBuf, u64)> {
    release_read(fx, name).0
}

/// [`release_one`], and each journal as recovery would have read it right
/// after the intent was written.
fn release_read(fx: &Fixture, name: &str) -> (Vec<(PathBuf, u64)>, Vec<ReadJournal>) {
    let p = fx.helper(name, name.as_bytes());
    let seen = Mutex::new((Vec::new(), Vec::new()));
    let hook = |f: &FaultPoint<'_>| {
        if let FaultPoint::AfterJournal { .. } = f {
            let now = journals(fx);
            let read = now.iter().map(|(p, _)| read_journal(p).unwrap()).collect();
            *seen.lock().unwrap() = (now, read);
        }
        Ok(())
    };
    let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
    let targets = [target(&p)];
    let r = fx.release_with(&targets, &IdleOwner, &opts);
    assert!(r.to_string().starts_with("release completed"), "{r}");
    assert!(!p.exists());
    seen.into_inner().unwrap()
}

#[test]
fn kept_journals_are_reused_and_never_once_recovery_removed_them() {
    if isolated(module_path!(), "kept_journals_are_reused_and_never_once_recovery_removed_them") {
        return;
    }
    keep_idle_journals(4);
    let fx = Fixture::new();
    let first = release_one(&fx, "a.py");
    assert_eq!(first.len(), 1);
    assert!(first[0].1 > 0, "the intent is in the journal: {first:?}");
    // Retired: kept at the same name, every byte zero, one block long (its
    // block kept for the next intent).
    assert_eq!(journals(&fx), vec![(first[0].0.clone(), 4096)]);
    assert!(all_zero(&first[0].0));
    let second = release_one(&fx, "b.py");
    assert_eq!(second.len(), 1, "a second file was created: {second:?}");
    assert_eq!(second[0].0, first[0].0, "the kept file was not reused");
    assert!(second[0].1 > 0);

    // Recovery (no release in flight) removes the empty kept file, without
    // reporting it; the next release must not write its intent into the
    // unlinked file, where no recovery would find it.
    let report = recover(fx.layout.data_dir(), &[]).unwrap();
    assert!(report.torn_journals.is_empty() && report.journals == 0, "{report:?}");
    assert!(journals(&fx).is_empty());
    let third = release_one(&fx, "c.py");
    assert_eq!(third.len(), 1, "the intent is at no name: {third:?}");
    assert!(third[0].1 > 0);

    assert_eq!(drop_idle_journals(), 1);
    assert!(journals(&fx).is_empty(), "a clean stop leaves no kept journal");
}

/// An intent written over a kept file shows recovery nothing of the
/// release before it: that release's longer intent and its `verified`
/// mark were zeroed, so a shorter intent in the same bytes reads with no
/// mark of its own yet.
#[test]
fn a_reused_journal_shows_none_of_the_earlier_releases_marks() {
    if isolated(module_path!(), "a_reused_journal_shows_none_of_the_earlier_releases_marks") {
        return;
    }
    keep_idle_journals(4);
    let fx = Fixture::new();
    let long = format!("{}.py", "a-long-helper-name-".repeat(8));
    let (first, read) = release_read(&fx, &long);
    assert_eq!(first.len(), 1);
    let ReadJournal::Valid { intent, verified } = &read[0] else { panic!("{read:?}") };
    assert!(verified.is_empty() && intent.targets[0].file_path.ends_with(&long), "{read:?}");
    assert!(all_zero(&first[0].0), "retired in place: zero bytes only");

    let (second, read) = release_read(&fx, "b.py");
    assert_eq!(second[0].0, first[0].0, "the kept file was not reused");
    assert_eq!(second[0].1, 4096, "the intent fit: the size did not change");
    let ReadJournal::Valid { intent, verified } = &read[0] else { panic!("{read:?}") };
    assert!(intent.targets[0].file_path.ends_with("b.py"), "{intent:?}");
    assert!(verified.is_empty(), "a mark of the earlier release was read as this one's: {verified:?}");
    assert_eq!(drop_idle_journals(), 1);
}

/// A process holding `path` open (fd 3 of a `sleep`), once it holds it.
fn holder(path: &std::path::Path) -> std::process::Child {
    use std::io::BufRead;
    let _forking = crate::common::no_fork_now();
    let mut child = std::process::Command::new("sh")
        .args(["-c", "exec 3<\"$0\"; echo ready; exec sleep 60"])
        .arg(path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// The quarantine and the intent are made while `in_use` runs (the start
/// of step `capture` beside it): a release refused as `in_use` undoes both,
/// so the workspace and `D/journal` are as they were, the kept journal it
/// wrote its intent into zeroed and kept again.
#[test]
fn an_in_use_denial_undoes_the_quarantine_and_intent_made_beside_the_check() {
    if isolated(module_path!(), "an_in_use_denial_undoes_the_quarantine_and_intent_made_beside_the_check") {
        return;
    }
    keep_idle_journals(4);
    let fx = Fixture::new();
    release_one(&fx, "a.py");
    let p = fx.helper("held.py", b"held");
    let before_ws = crate::common::snapshot(fx.ws());
    let before_data = crate::common::snapshot(fx.layout.data_dir());
    let mut held = holder(&p);
    let began = Mutex::new(Vec::new());
    let hook = |f: &FaultPoint<'_>| {
        if let FaultPoint::AfterJournal { quarantine } = f {
            let now = journals(&fx);
            let written = now.iter().any(|(p, _)| !all_zero(p));
            began.lock().unwrap().push((quarantine.to_path_buf(), quarantine.is_dir(), now, written));
        }
        Ok(())
    };
    let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
    let targets = [target(&p)];
    let r = fx.release_with(&targets, &IdleOwner, &opts);
    held.kill().unwrap();
    held.wait().unwrap();
    assert_eq!(r.error_code, Some(winx_release_engine::Reason::InUse), "{r}");
    assert!(!r.touched);
    let began = began.into_inner().unwrap();
    assert_eq!(began.len(), 1, "the intent was not written beside the check");
    let (quarantine, existed, during, written) = &began[0];
    assert!(*existed && !quarantine.exists(), "the quarantine was not removed: {quarantine:?}");
    assert!(during.len() == 1 && *written, "the intent was not in the kept file: {during:?}");
    assert_eq!(crate::common::snapshot(fx.ws()), before_ws, "workspace changed by a denial");
    assert_eq!(crate::common::snapshot(fx.layout.data_dir()), before_data, "data dir changed by a denial");
    assert_eq!(drop_idle_journals(), 1);
}

/// With another release of the process in flight, the quarantine and the
/// intent are not made beside `in_use` (the cores are busy with the other
/// release): `in_use` runs first, and a release it refuses makes neither.
/// The test above pins the other path (a lone release makes both beside
/// the check, and undoes them).
#[test]
fn with_another_release_in_flight_an_in_use_denial_makes_no_quarantine_or_intent() {
    use std::sync::Barrier;
    if isolated(module_path!(), "with_another_release_in_flight_an_in_use_denial_makes_no_quarantine_or_intent") {
        return;
    }
    keep_idle_journals(4);
    let fx = Fixture::new();
    release_one(&fx, "a.py");
    let other = Fixture::new();
    let other_helper = other.helper("other.py", b"other");
    let p = fx.helper("held.py", b"held");
    let before_ws = crate::common::snapshot(fx.ws());
    let before_data = crate::common::snapshot(fx.layout.data_dir());
    let mut held = holder(&p);
    // The other release stops before its scan (it is in flight) until this
    // one has its answer.
    let (paused, go) = (Barrier::new(2), Barrier::new(2));
    let pause = |f: &FaultPoint<'_>| {
        if let FaultPoint::BeforeScan = f {
            paused.wait();
            go.wait();
        }
        Ok(())
    };
    let began = Mutex::new(0);
    let hook = |f: &FaultPoint<'_>| {
        if let FaultPoint::AfterJournal { .. } = f {
            *began.lock().unwrap() += 1;
        }
        Ok(())
    };
    let (r, r_other) = std::thread::scope(|s| {
        let other_run = s.spawn(|| {
            let opts = ReleaseOptions { faults: Some(&pause), ..ReleaseOptions::default() };
            let targets = [target(&other_helper)];
            let req = ReleaseRequest { layout: &other.layout, thread_id: &other.thread, targets: &targets };
            release(&req, &Admission::new().enter(), &IdleOwner, &opts)
        });
        paused.wait();
        let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
        let targets = [target(&p)];
        let req = ReleaseRequest { layout: &fx.layout, thread_id: &fx.thread, targets: &targets };
        let r = release(&req, &Admission::new().enter(), &IdleOwner, &opts);
        go.wait();
        (r, other_run.join().unwrap())
    });
    held.kill().unwrap();
    held.wait().unwrap();
    assert_eq!(r.error_code, Some(winx_release_engine::Reason::InUse), "{r}");
    assert!(!r.touched);
    assert_eq!(*began.lock().unwrap(), 0, "a quarantine and an intent were made beside the check");
    assert_eq!(crate::common::snapshot(fx.ws()), before_ws, "workspace changed by a denial");
    assert_eq!(crate::common::snapshot(fx.layout.data_dir()), before_data, "data dir changed by a denial");
    assert!(r_other.to_string().starts_with("release completed"), "{r_other}");
    assert!(!other_helper.exists());
    // One kept journal in each workspace's data directory.
    assert_eq!(drop_idle_journals(), 2);
}
