use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::receipts::is_receipt_name;
use super::*;

fn exec(d: &Path, id: &str, state: &str, ended: u64) {
    let dir = d.join("executions").join(id);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("output"), b"out").unwrap();
    let status = serde_json::json!({"command_id": id, "state": state, "ended_unix": ended});
    fs::write(dir.join(STATUS_FILE), serde_json::to_vec(&status).unwrap()).unwrap();
    // Resolution order is the status file's modification time.
    let f = fs::OpenOptions::new().write(true).open(dir.join(STATUS_FILE)).unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(ended)).unwrap();
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

fn policy(keep: usize) -> RetentionPolicy {
    RetentionPolicy { keep_executions: keep, keep_receipts: Duration::from_secs(86_400) }
}

#[test]
fn keeps_the_newest_resolved_and_every_unresolved() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..8u64 {
        exec(d.path(), &format!("r{i}"), "resolved", 1000 + i);
    }
    exec(d.path(), "run0", "running", 0);
    exec(d.path(), "run1", "running", 0);
    // No status at all (a command that never got one): not resolved.
    fs::create_dir_all(d.path().join("executions/bare")).unwrap();
    // A link and a plain file in the root: not ours, left alone.
    std::os::unix::fs::symlink("/", d.path().join("executions/link")).unwrap();
    fs::write(d.path().join("executions/file"), b"").unwrap();
    let mut r = Retention::new(d.path(), policy(3));
    let mut asked = Vec::new();
    let rep = r
        .pass(SystemTime::now(), &mut |id| {
            asked.push(id.to_owned());
            true
        })
        .unwrap();
    assert_eq!(rep.executions.removed, 5, "{rep:?}");
    assert_eq!(rep.executions.entries_removed, 15);
    assert_eq!(names(&d.path().join("executions")), ["bare", "file", "link", "r5", "r6", "r7", "run0", "run1"]);
    asked.sort();
    assert_eq!(asked, ["r0", "r1", "r2", "r3", "r4"]);
    // The staging directory is empty, and outside the backing roots.
    assert!(names(&d.path().join(STAGING_DIR)).is_empty());
    // A second pass removes nothing more.
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!(rep.executions.removed, 0);
    assert_eq!(rep.executions.resolved, 3);
}

#[test]
fn a_refused_claim_keeps_the_execution() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..4u64 {
        exec(d.path(), &format!("r{i}"), "resolved", 1000 + i);
    }
    let mut r = Retention::new(d.path(), policy(1));
    let rep = r.pass(SystemTime::now(), &mut |id| id != "r0").unwrap();
    assert_eq!((rep.executions.removed, rep.executions.refused), (2, 1));
    assert_eq!(names(&d.path().join("executions")), ["r0", "r3"]);
}

#[test]
fn receipts_older_than_the_window_go() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("receipts");
    fs::create_dir_all(&root).unwrap();
    let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
    let mk = |name: &str, t: SystemTime| {
        let f = fs::File::create(root.join(name)).unwrap();
        f.set_modified(t).unwrap();
    };
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    mk(&format!("{a}.json"), old);
    mk(&format!("{b}.json"), SystemTime::now());
    mk(&format!(".{a}.json.tmp-0123"), old);
    mk("notes.txt", old); // not a receipt name: left alone
    std::os::unix::fs::symlink("/", root.join(format!("{}.json", "c".repeat(64)))).unwrap();
    let mut r = Retention::new(d.path(), policy(10));
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!(rep.receipts.removed, 2, "{rep:?}");
    assert_eq!(names(&root), [format!("{b}.json"), format!("{}.json", "c".repeat(64)), "notes.txt".to_owned()]);
}

/// Receipts in shard directories (`D/receipts/<hh>/`) age out as flat
/// ones do; what is not a receipt, or not in a shard, stays; a link named
/// like a shard is not followed.
#[test]
fn sharded_receipts_older_than_the_window_go() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("receipts");
    let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
    let mk = |path: PathBuf, t: SystemTime| {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let f = fs::File::create(path).unwrap();
        f.set_modified(t).unwrap();
    };
    let (a, b, e) = ("a".repeat(64), "b".repeat(64), "e".repeat(64));
    mk(root.join("aa").join(format!("{a}.json")), old);
    mk(root.join("bb").join(format!("{b}.json")), SystemTime::now());
    mk(root.join("aa").join(format!(".{a}.json.tmp-0123")), old);
    mk(root.join("aa").join("notes.txt"), old); // not a receipt name
    mk(root.join("not-a-shard").join(format!("{e}.json")), old); // not a shard
    let elsewhere = d.path().join("elsewhere");
    mk(elsewhere.join(format!("{e}.json")), old);
    std::os::unix::fs::symlink(&elsewhere, root.join("ee")).unwrap();
    let mut r = Retention::new(d.path(), policy(10));
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!((rep.receipts.removed, rep.receipts.seen), (2, 3), "{rep:?}");
    assert_eq!(names(&root.join("aa")), ["notes.txt"]);
    assert_eq!(names(&root.join("bb")), [format!("{b}.json")]);
    assert_eq!(names(&root.join("not-a-shard")), [format!("{e}.json")]);
    assert_eq!(names(&elsewhere), [format!("{e}.json")]);
    assert!(super::receipts::is_shard_name("0f") && !super::receipts::is_shard_name("0F"));
}

#[test]
fn staging_leftovers_are_cleared_and_missing_stores_are_empty() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir_all(d.path().join(STAGING_DIR).join("x-abc/deeper")).unwrap();
    fs::write(d.path().join(STAGING_DIR).join("x-abc/output"), b"1").unwrap();
    let mut r = Retention::new(d.path(), policy(1));
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!(rep.staging_cleared, 3);
    assert_eq!(rep.executions, ExecutionPrune::default());
    // No data directory at all: nothing to do, no error.
    let mut r = Retention::new(&d.path().join("absent"), policy(1));
    assert_eq!(r.pass(SystemTime::now(), &mut |_| true).unwrap(), PruneReport::default());
}

#[test]
fn receipt_names() {
    let h = "0123456789abcdef".repeat(4);
    assert!(is_receipt_name(&format!("{h}.json")));
    assert!(is_receipt_name(&format!(".{h}.json.tmp-a1b2")));
    assert!(!is_receipt_name(&format!("{h}.jsonx")));
    assert!(!is_receipt_name("x.json"));
    assert!(!is_receipt_name(&format!("{h}.json/..")));
}

#[test]
fn usage_counts_and_warns_past_eighty_percent() {
    assert_eq!(usage::warning(40_000), None);
    assert!(usage::warning(40_001).is_some());
    let d = tempfile::tempdir().unwrap();
    exec(d.path(), "r0", "resolved", 1);
    let u = data_usage(d.path());
    assert_eq!((u.backing_entries, u.backing_limit, u.backing_warning.as_deref()), (3, 50_000, None));
    std::os::unix::fs::symlink("/", d.path().join("executions/l")).unwrap();
    let u = data_usage(d.path());
    assert_eq!(u.backing_scan_reason, Some(crate::Reason::BackingSymlink));
}

/// A count through a directory cache (as the guardian's periodic check
/// makes it) equals a fresh count: cold, warm, after a change, and when a
/// link makes counting stop early.
#[test]
fn a_cached_count_equals_a_fresh_one() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..5u64 {
        exec(d.path(), &format!("r{i}"), "resolved", i);
    }
    let cache = crate::scan::DirCache::new();
    let same = |cache: &crate::scan::DirCache| {
        let fresh = data_usage(d.path());
        let cached = usage::data_usage_in(d.path(), Some(cache));
        assert_eq!(cached, fresh);
        fresh
    };
    assert_eq!(same(&cache).backing_entries, 5 * 3);
    std::thread::sleep(std::time::Duration::from_millis(30));
    same(&cache);
    let hits = cache.stats().hits;
    assert_eq!(same(&cache).backing_entries, 15);
    assert!(cache.stats().hits > hits, "the warm count read from the cache: {:?}", cache.stats());
    exec(d.path(), "r9", "resolved", 9);
    assert_eq!(same(&cache).backing_entries, 18);
    std::os::unix::fs::symlink("/", d.path().join("executions/r2/l")).unwrap();
    assert_eq!(same(&cache).backing_scan_reason, Some(crate::Reason::BackingSymlink));
}

/// A symlinked data directory (`~/.local/share/winx` pointing at a data
/// disk, say) owned by the user: passes run there.
#[test]
fn a_symlinked_data_directory_is_pruned() {
    let d = tempfile::tempdir().unwrap();
    let real = d.path().join("disk/winx");
    fs::create_dir_all(&real).unwrap();
    let link = d.path().join("winx");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for i in 0..4u64 {
        exec(&real, &format!("r{i}"), "resolved", 1000 + i);
    }
    let mut r = Retention::new(&link, policy(1));
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!(rep.executions.removed, 3, "{rep:?}");
    assert_eq!(names(&real.join("executions")), ["r3"]);
}

/// A tree deeper than the removal bound: its pass removes everything else,
/// the tree stays in staging, later passes still run (and still prune),
/// and the operator sees it (the pass report, the audit's field).
#[test]
fn a_tree_that_cannot_be_removed_does_not_stop_later_passes() {
    let d = tempfile::tempdir().unwrap();
    exec(d.path(), "deep", "resolved", 900);
    let mut deep = d.path().join("executions/deep");
    for i in 0..20 {
        deep.push(format!("l{i}"));
    }
    fs::create_dir_all(&deep).unwrap();
    for i in 0..4u64 {
        exec(d.path(), &format!("r{i}"), "resolved", 1000 + i);
    }
    let mut r = Retention::new(d.path(), policy(1));
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!((rep.executions.removed, rep.executions.failed), (3, 1), "{rep:?}");
    assert_eq!(names(&d.path().join("executions")), ["r3"]);
    assert_eq!(names(&d.path().join(STAGING_DIR)).len(), 1);

    // Later passes: the stuck tree is counted, not fatal; new surplus goes.
    for i in 4..6u64 {
        exec(d.path(), &format!("r{i}"), "resolved", 1000 + i);
    }
    let rep = r.pass(SystemTime::now(), &mut |_| true).unwrap();
    assert_eq!((rep.staging_stuck, rep.executions.removed), (1, 2), "{rep:?}");
    assert!(rep.behind() > 0);
    assert_eq!(names(&d.path().join("executions")), ["r5"]);
    let u = data_usage(d.path());
    assert_eq!(u.retention_staged, 1, "{u:?}");
    assert!(u.retention_warning.as_deref().is_some_and(|w| w.contains("behind")), "{u:?}");
}

/// A pass looks at the receipts again only once [`receipts_every`] has
/// gone by (a minute for a window of days), and at every pass for a window
/// of 0; a clock that went back makes it look.
#[test]
fn receipts_are_looked_at_once_per_interval() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("receipts");
    fs::create_dir_all(&root).unwrap();
    let t0 = SystemTime::now();
    let mk = |name: String, age: Duration| {
        let f = fs::File::create(root.join(name)).unwrap();
        f.set_modified(t0 - age).unwrap();
    };
    assert_eq!(receipts_every(Duration::from_secs(30 * 86_400)), RECEIPTS_EVERY_MAX);
    assert_eq!(receipts_every(Duration::from_secs(14_400)), Duration::from_secs(10));
    assert_eq!(receipts_every(Duration::ZERO), Duration::ZERO);
    let day = Duration::from_secs(86_400);
    mk(format!("{}.json", "a".repeat(64)), 2 * day);
    let mut r = Retention::new(d.path(), policy(10));
    let rep = r.pass(t0, &mut |_| true).unwrap();
    assert_eq!((rep.receipts.seen, rep.receipts.removed), (1, 1), "{rep:?}");
    // Old enough now, but the last look was 59 s ago: left for the next.
    mk(format!("{}.json", "b".repeat(64)), 2 * day);
    let rep = r.pass(t0 + Duration::from_secs(59), &mut |_| true).unwrap();
    assert_eq!((rep.receipts.seen, rep.receipts.removed), (0, 0), "{rep:?}");
    let rep = r.pass(t0 + RECEIPTS_EVERY_MAX, &mut |_| true).unwrap();
    assert_eq!((rep.receipts.seen, rep.receipts.removed), (1, 1), "{rep:?}");
    // The clock went back: look.
    mk(format!("{}.json", "c".repeat(64)), 2 * day);
    let rep = r.pass(t0, &mut |_| true).unwrap();
    assert_eq!(rep.receipts.removed, 1, "{rep:?}");
    // A window of 0: every pass looks (the long-run mode's setting).
    let mut r = Retention::new(d.path(), RetentionPolicy { keep_executions: 10, keep_receipts: Duration::ZERO });
    mk(format!("{}.json", "d".repeat(64)), Duration::from_secs(5));
    assert_eq!(r.pass(t0, &mut |_| true).unwrap().receipts.removed, 1);
    mk(format!("{}.json", "e".repeat(64)), Duration::from_secs(5));
    assert_eq!(r.pass(t0, &mut |_| true).unwrap().receipts.removed, 1);
}
