//! Crash safety: a release in a child process is killed with SIGKILL at each
//! fault point and at random instants; recovery must then account for every
//! helper byte for byte (invariant 4), and a second recovery must restore
//! nothing.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{target, Fixture};
use winx_release_engine::admission::Admission;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::layout::Layout;
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::recovery::recover;
use winx_release_engine::release::{release, ReleaseOptions, ReleaseRequest, Target};

const SPEC_ENV: &str = "WINX_RELEASE_CRASH_SPEC";

#[derive(serde::Serialize, serde::Deserialize)]
struct Spec {
    workspace: PathBuf,
    data_dir: PathBuf,
    thread: String,
    targets: Vec<Target>,
    /// Fault point name and index to die at; `None`: run to the end (the
    /// parent kills at a random instant).
    die_at: Option<(String, Option<usize>)>,
    /// Microseconds the child pauses at every fault point, so that a
    /// release stays in flight long enough for a kill at a random instant
    /// to land in it (a release of small helpers takes a few milliseconds,
    /// less than the jitter of the child's own start).
    pace_us: u64,
    /// Keep retired journals (as a guardian does) and release one helper of
    /// its own first, so that the release under test writes its intent
    /// into a reused journal file; the kept file's name goes to
    /// `D/warm-journal`.
    #[serde(default)]
    warm: bool,
}

/// The child side: runs the release described by the spec and dies at the
/// requested point. Without the environment variable it does nothing.
#[test]
fn crash_child() {
    let Ok(spec_path) = std::env::var(SPEC_ENV) else { return };
    let spec: Spec = serde_json::from_slice(&fs::read(spec_path).unwrap()).unwrap();
    let layout = Layout::new(&spec.workspace, &spec.data_dir).unwrap();
    let die_at = spec.die_at.clone();
    let pace = Duration::from_micros(spec.pace_us);
    let ledger = spec.data_dir.join("crash-ledger");
    let hook = move |p: &FaultPoint<'_>| {
        // The test's own ledger of verified removals, written after each
        // unlink (the journal's `verified` mark covers the instant before).
        if let FaultPoint::AfterUnlink { index } = p {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().create(true).append(true).open(&ledger).unwrap();
            writeln!(f, "{index}").unwrap();
        }
        if let Some((name, index)) = &die_at {
            if p.as_str() == name && (index.is_none() || p.index() == *index) {
                rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL).unwrap();
                std::thread::sleep(Duration::from_secs(10));
            }
        }
        std::thread::sleep(pace);
        Ok(())
    };
    if spec.warm {
        winx_release_engine::journal::keep_idle_journals(4);
        let session = layout.session_dir(&spec.thread);
        let warm = session.join("warm.bin");
        fs::write(&warm, b"warm").unwrap();
        let req = ReleaseRequest { layout: &layout, thread_id: &spec.thread, targets: &[target(&warm)] };
        let r = release(&req, &Admission::new().enter(), &IdleOwner, &ReleaseOptions::default());
        assert!(r.to_string().starts_with("release completed"), "{r}");
        let kept: Vec<_> = fs::read_dir(layout.journal_dir()).unwrap().map(|e| e.unwrap().path()).collect();
        assert!(kept.len() == 1 && fs::read(&kept[0]).unwrap().iter().all(|b| *b == 0), "{kept:?}");
        fs::write(spec.data_dir.join("warm-journal"), kept[0].file_name().unwrap().as_encoded_bytes()).unwrap();
    }
    let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
    let req = ReleaseRequest { layout: &layout, thread_id: &spec.thread, targets: &spec.targets };
    // What the release answered, for the parent's diagnostics (a release
    // killed before it answered leaves none).
    let report = release(&req, &Admission::new().enter(), &IdleOwner, &opts);
    let _ = fs::write(spec.data_dir.join("crash-report.json"), serde_json::to_vec(&report).unwrap_or_default());
}

/// What the last child of `c` answered, if it answered.
fn child_report(c: &Case) -> String {
    fs::read_to_string(c.fx.layout.data_dir().join("crash-report.json")).unwrap_or_else(|_| "(no answer)".into())
}

struct Case {
    fx: Fixture,
    contents: HashMap<PathBuf, Vec<u8>>,
    targets: Vec<Target>,
}

fn case(n: usize, size: usize) -> Case {
    let fx = Fixture::new();
    let mut contents = HashMap::new();
    let mut targets = Vec::new();
    for i in 0..n {
        let body: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
        let p = fx.helper(&format!("sub{}/h{i}.bin", i % 2), &body);
        targets.push(target(&p));
        contents.insert(p, body);
    }
    Case { fx, contents, targets }
}

fn spawn_child(c: &Case, die_at: Option<(String, Option<usize>)>) -> std::process::Child {
    spawn_child_with(c, die_at, false)
}

fn spawn_child_with(c: &Case, die_at: Option<(String, Option<usize>)>, warm: bool) -> std::process::Child {
    // A child killed at a random instant (no `die_at`) is paced.
    let pace_us = if die_at.is_none() { 1_000 } else { 0 };
    let spec = Spec {
        workspace: c.fx.layout.workspace().to_path_buf(),
        data_dir: c.fx.layout.data_dir().to_path_buf(),
        thread: c.fx.thread.clone(),
        targets: c.targets.clone(),
        die_at,
        pace_us,
        warm,
    };
    let spec_path = c.fx.layout.data_dir().join("crash-spec.json");
    fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    crate::common::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash::crash_child", "--nocapture", "--test-threads=1"])
            .env(SPEC_ENV, &spec_path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
}

/// Runs recovery and asserts every helper is accounted for byte for byte.
/// Returns (restored, removed_before_crash) counts.
fn account(c: &Case) -> (usize, usize, u64) {
    let ws = c.fx.layout.workspace().to_path_buf();
    let report = recover(c.fx.layout.data_dir(), std::slice::from_ref(&ws)).unwrap();
    let ledger: Vec<PathBuf> = fs::read_to_string(c.fx.layout.data_dir().join("crash-ledger"))
        .unwrap_or_default()
        .lines()
        .map(|l| PathBuf::from(&c.targets[l.parse::<usize>().unwrap()].path))
        .collect();
    assert!(report.corrupt_journals.is_empty(), "{report:?}");
    assert!(report.unaccounted.is_empty(), "unaccounted: {report:?}");
    for (path, body) in &c.contents {
        let at_path = fs::read(path).ok();
        let removed = report.removed_before_crash.iter().any(|r| &r.file_path == path) || ledger.contains(path);
        let preserved = report.preserved.iter().find(|p| p.file_path.as_deref() == Some(path.as_path()));
        match (at_path, removed, preserved) {
            (Some(bytes), false, None) => assert_eq!(&bytes, body, "{} changed", path.display()),
            (None, true, None) => {}
            (None, false, Some(p)) => assert_eq!(&fs::read(&p.quarantine_path).unwrap(), body),
            other => panic!("{} not accounted for: {other:?}\n{report:?}", path.display()),
        }
    }
    // No quarantine directory is left behind, and the journal is retired.
    assert!(no_quarantine_left(&c.fx.session), "quarantine left in {}", c.fx.session.display());
    let journals = fs::read_dir(c.fx.layout.journal_dir()).map(|d| d.count()).unwrap_or(0);
    assert_eq!(journals, 0);
    // Idempotent: a second run restores nothing.
    let again = recover(c.fx.layout.data_dir(), &[ws]).unwrap();
    assert!(again.restored.is_empty() && again.preserved.is_empty(), "{again:?}");
    (report.restored.len(), report.removed_before_crash.len().max(ledger.len()), report.journals)
}

fn no_quarantine_left(session: &Path) -> bool {
    fs::read_dir(session).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".winx-release-"))
}

#[test]
fn sigkill_at_every_fault_point_is_recoverable() {
    let n = 3;
    let mut points: Vec<(String, Option<usize>)> =
        ["before_scan", "after_checks", "after_journal"].iter().map(|p| (p.to_string(), None)).collect();
    for i in 0..n {
        for p in ["before_rename", "after_rename", "after_recheck", "after_unlink"] {
            points.push((p.to_string(), Some(i)));
        }
    }
    // Before the session directory's `fsync`, after every unlink.
    points.push(("dir_sync".to_string(), None));
    let mut restored_total = 0;
    let mut removed_total = 0;
    for point in points {
        let c = case(n, 4096 + 7);
        let status = spawn_child(&c, Some(point.clone())).wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "child did not die at {point:?}: {status:?}");
        let (r, d, _) = account(&c);
        // Dying right after rename k or recheck k leaves k in quarantine.
        if point.0 == "after_rename" || point.0 == "after_recheck" {
            assert_eq!(r, 1, "{point:?}");
        }
        if let ("after_unlink", Some(k)) = (point.0.as_str(), point.1) {
            assert_eq!(d, k + 1, "{point:?}");
        }
        restored_total += r;
        removed_total += d;
    }
    assert!(restored_total > 0 && removed_total > 0);
}

/// The same kills in a release whose intent went into a journal file a
/// guardian kept from an earlier release (overwritten with zero bytes, not
/// unlinked: `journal/idle.rs`): the reused file holds the new intent, and
/// recovery accounts for every helper as with a fresh file.
#[test]
fn sigkill_in_a_release_with_a_reused_journal_is_recoverable() {
    let n = 2;
    let mut points: Vec<(String, Option<usize>)> =
        ["after_checks", "after_journal"].iter().map(|p| (p.to_string(), None)).collect();
    for i in 0..n {
        for p in ["before_rename", "after_rename", "after_recheck", "after_unlink"] {
            points.push((p.to_string(), Some(i)));
        }
    }
    for point in points {
        let c = case(n, 4096 + 7);
        let status = spawn_child_with(&c, Some(point.clone()), true).wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "child did not die at {point:?}: {status:?}");
        let data = c.fx.layout.data_dir();
        let kept = fs::read_to_string(data.join("warm-journal")).expect("the warm-up release kept no journal");
        let now: Vec<_> = fs::read_dir(c.fx.layout.journal_dir()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(now, vec![c.fx.layout.journal_dir().join(&kept)], "{point:?}: a journal file was created");
        let read = winx_release_engine::journal::read_journal(&now[0]).unwrap();
        // Killed after its journal: the kept file holds this release's
        // intent; before it, zero bytes only.
        let holds_intent = matches!(read, winx_release_engine::journal::ReadJournal::Valid { .. });
        let idle = read == winx_release_engine::journal::ReadJournal::Idle;
        assert_eq!(point.0 != "after_checks", holds_intent, "{point:?}: {read:?}");
        assert_eq!(point.0 == "after_checks", idle, "{point:?}: {read:?}");
        account(&c);
    }
}

#[test]
fn sigkill_at_random_instants_is_recoverable() {
    let tries: u64 = std::env::var("WINX_CRASH_TRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut interrupted = 0;
    // How long one uninterrupted run takes here (process start included).
    let span_us = {
        let c = case(24, 64 * 1024);
        let t = std::time::Instant::now();
        spawn_child(&c, None).wait().unwrap();
        let (_, removed, _) = account(&c);
        // Without a release that completes, no kill could interrupt one.
        assert_eq!(removed, c.targets.len(), "an uninterrupted child did not release: {}", child_report(&c));
        t.elapsed().as_micros() as u64
    };
    // Kill at a random instant between `lo` and `hi`, and narrow that
    // bracket towards the window in which a release is in flight: a kill
    // that came before the release began raises `lo`, one that came after
    // it had finished lowers `hi`. The window is short next to the child's
    // start (a release's few milliseconds against its process start), so a
    // bracket finds it faster than a fixed jitter around a guess; one that
    // closes up is opened again, so a loaded machine that shifts the window
    // is followed: towards later instants, twice as wide each time, when the
    // last kills came before the release (the child starts slower than it
    // did when `span_us` was measured, as when the other tests of this
    // binary run beside it), towards earlier ones when they came after it.
    let (mut lo, mut hi) = (1_000u64, span_us * 2);
    let mut last_before = true;
    let mut log = Vec::new();
    for _ in 0..tries {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if hi <= lo + 500 {
            (lo, hi) = if last_before {
                (lo.saturating_sub(2_000).max(1_000), lo.max(hi).saturating_mul(2) + 2_000)
            } else {
                ((lo / 2).max(1_000), lo.max(hi) + 2_000)
            };
        }
        let delay = lo + seed % (hi - lo);
        let c = case(24, 64 * 1024);
        let mut child = spawn_child(&c, None);
        std::thread::sleep(Duration::from_micros(delay));
        let _ = child.kill();
        let _ = child.wait();
        let (_, removed, journals) = account(&c);
        interrupted += journals;
        log.push(format!("kill at {delay} µs: {journals} journal(s), {removed} removed"));
        if journals == 0 && removed == 0 && log.len() <= 3 {
            log.push(format!("  its answer: {}", child_report(&c)));
        }
        if journals == 0 {
            if removed == c.targets.len() {
                hi = delay;
                last_before = false;
            } else {
                lo = delay;
                last_before = true;
            }
        }
    }
    eprintln!("{interrupted} of {tries} tries interrupted a release");
    // The random instants must really hit releases in flight.
    assert!(
        interrupted * 4 >= tries,
        "only {interrupted} of {tries} tries interrupted a release (one uninterrupted run: {span_us} µs)\n{}",
        log.join("\n")
    );
}

#[test]
fn torn_and_corrupt_journals() {
    let c = case(2, 100);
    let jdir = c.fx.layout.journal_dir();
    fs::create_dir_all(&jdir).unwrap();
    // Torn: the intent line was cut before its end.
    fs::write(jdir.join("aaaa.jsonl"), b"{\"version\":1,\"id\":\"aaaa\",\"worksp").unwrap();
    // Empty: a retired journal a guardian kept for reuse.
    fs::write(jdir.join("cccc.jsonl"), b"").unwrap();
    // Corrupt: a complete line that is not an intent.
    fs::write(jdir.join("bbbb.jsonl"), b"{\"not\":\"an intent\"}\n").unwrap();
    let report = recover(c.fx.layout.data_dir(), &[]).unwrap();
    assert_eq!(report.torn_journals, vec![jdir.join("aaaa.jsonl")]);
    assert_eq!(report.corrupt_journals, vec![jdir.join("bbbb.jsonl")]);
    assert!(report.restored.is_empty() && report.preserved.is_empty());
    assert!(!jdir.join("aaaa.jsonl").exists(), "a torn journal is retired");
    assert!(jdir.join("bbbb.jsonl").exists(), "a corrupt journal is kept");
    assert!(!jdir.join("cccc.jsonl").exists(), "an empty journal is removed, and not reported");
    for (p, b) in &c.contents {
        assert_eq!(&fs::read(p).unwrap(), b);
    }
}
