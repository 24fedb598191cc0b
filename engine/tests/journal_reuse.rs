//! A process that keeps retired journals (as the guardian does,
//! `journal/idle.rs`) reuses one file per release in flight, and never a
//! kept file that recovery removed meanwhile. Its own test binary: keeping
//! is a process-wide setting.

mod common;

use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;

use common::{target, Fixture};
use winx_release_engine::admission::Admission;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::journal::{drop_idle_journals, keep_idle_journals};
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

/// Releases `name` and returns what `D/journal` held right after the
/// intent was written.
fn release_one(fx: &Fixture, name: &str) -> Vec<(PathBuf, u64)> {
    let p = fx.helper(name, name.as_bytes());
    let seen = Mutex::new(Vec::new());
    let hook = |f: &FaultPoint<'_>| {
        if let FaultPoint::AfterJournal { .. } = f {
            *seen.lock().unwrap() = journals(fx);
        }
        Ok(())
    };
    let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
    let targets = [target(&p)];
    let req = ReleaseRequest { layout: &fx.layout, thread_id: &fx.thread, targets: &targets };
    let r = release(&req, &Admission::new().enter(), &IdleOwner, &opts);
    assert!(r.to_string().starts_with("release completed"), "{r}");
    assert!(!p.exists());
    seen.into_inner().unwrap()
}

#[test]
fn kept_journals_are_reused_and_never_once_recovery_removed_them() {
    keep_idle_journals(4);
    let fx = Fixture::new();
    let first = release_one(&fx, "a.py");
    assert_eq!(first.len(), 1);
    assert!(first[0].1 > 0, "the intent is in the journal: {first:?}");
    // Retired: kept, empty, at the same name.
    assert_eq!(journals(&fx), vec![(first[0].0.clone(), 0)]);
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
