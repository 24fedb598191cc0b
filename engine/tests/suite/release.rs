//! The guarded release transaction: every reason code the engine produces,
//! the bytes a removal freed, a dry run, a hold no descriptor table shows
//! ([`crate::release_capture`]: replacements, restore collisions and late
//! failures).

use std::fs;
use std::io;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use crate::common::{pin, snapshot, target, unpinned, Fixture};
use winx_release_engine::fault::{FaultHook, FaultPoint};
use winx_release_engine::owner::{IdleOwner, RuntimeOwner};
use winx_release_engine::release::{Outcome, ReleaseOptions, Status, Target};
use winx_release_engine::scan::ScanLimits;
use winx_release_engine::Reason;

pub(crate) fn with_faults<F: FaultHook>(hook: &F) -> ReleaseOptions<'_> {
    ReleaseOptions { faults: Some(hook), ..ReleaseOptions::default() }
}

/// Asserts a denial with `reason`, and that nothing in the workspace or data
/// dir changed.
fn assert_denied(fx: &Fixture, targets: &[Target], reason: Reason) {
    assert_denied_with(fx, targets, reason, &IdleOwner, &ReleaseOptions::default())
}

fn assert_denied_with(
    fx: &Fixture,
    targets: &[Target],
    reason: Reason,
    owner: &dyn RuntimeOwner,
    opts: &ReleaseOptions<'_>,
) {
    let before_ws = snapshot(fx.ws());
    let before_data = snapshot(fx.layout.data_dir());
    let r = fx.release_with(targets, owner, opts);
    assert_eq!(r.error_code, Some(reason), "report: {r:?}");
    assert!(matches!(r.status, Status::Denied | Status::InvalidInput), "{r:?}");
    assert_eq!(r.status == Status::InvalidInput, reason.is_invalid_input());
    assert!(!r.touched);
    assert_eq!(r.bytes_reclaimed, 0);
    assert_eq!(r.files.len(), targets.len());
    assert!(r.files.iter().all(|f| f.outcome == Outcome::Denied && f.reason.is_some()));
    assert_eq!(snapshot(fx.ws()), before_ws, "workspace changed by a denial");
    assert_eq!(snapshot(fx.layout.data_dir()), before_data, "data dir changed by a denial");
}

#[test]
fn releases_a_pinned_helper_and_reports_allocated_bytes() {
    let fx = Fixture::new();
    let p = fx.helper("helper.py", &vec![b'x'; 10_000]);
    let blocks = fs::metadata(&p).unwrap().blocks();
    let r = fx.release(&[target(&p)]);
    assert_eq!(r.status, Status::Completed, "{r:?}");
    assert!(r.touched);
    assert_eq!(r.files[0].outcome, Outcome::Released);
    assert_eq!(r.files[0].reason, None);
    assert_eq!(r.files[0].bytes_reclaimed, blocks * 512);
    assert_eq!(r.bytes_reclaimed, blocks * 512);
    assert!(!p.exists());
    // The quarantine directory is gone and the journal retired.
    assert!(fx.session_entries().is_empty(), "{:?}", fx.session_entries());
    let journals = fs::read_dir(fx.layout.journal_dir()).map(|d| d.count()).unwrap_or(0);
    assert_eq!(journals, 0);
}

#[test]
fn releases_many_helpers_in_subdirectories_in_order() {
    let fx = Fixture::new();
    let paths: Vec<_> =
        (0..100).map(|i| fx.helper(&format!("d{}/h{i}.txt", i % 7), format!("{i}").as_bytes())).collect();
    let targets: Vec<_> = paths.iter().map(|p| target(p)).collect();
    let r = fx.release(&targets);
    assert_eq!(r.status, Status::Completed);
    for (f, p) in r.files.iter().zip(&paths) {
        assert_eq!(f.file_path, p.to_str().unwrap());
        assert_eq!(f.outcome, Outcome::Released);
        assert!(!p.exists());
    }
}

#[test]
fn request_shape_reasons() {
    let fx = Fixture::new();
    let a = fx.helper("a.txt", b"a");
    assert_denied(&fx, &[], Reason::FileCount);
    let many: Vec<_> = (0..101).map(|_| target(&a)).collect();
    assert_denied(&fx, &many, Reason::FileCount);
    assert_denied(&fx, &[target(&a), target(&a)], Reason::DuplicatePath);
    let s = fx.session.to_str().unwrap();
    for bad in [
        "relative/a.txt".to_owned(),
        format!("{s}/./a.txt"),
        format!("{s}/../a.txt"),
        format!("{s}//a.txt"),
        format!("{s}/a.txt/"),
        format!("{s}/a\0.txt"),
        format!("{s}/{}", "n".repeat(256)),
        format!("/{}", "d/".repeat(2100)),
    ] {
        assert_denied(&fx, &[unpinned(&bad)], Reason::PathNotExact);
    }
    for bad in ["*.txt", "a?.txt", "[ab].txt"] {
        assert_denied(&fx, &[unpinned(&format!("{s}/{bad}"))], Reason::GlobNotAllowed);
    }
    assert!(a.exists());
}

#[test]
fn placement_reasons() {
    let fx = Fixture::new();
    let source = fx.ws().join("main.rs");
    fs::write(&source, b"fn main() {}").unwrap();
    assert_denied(&fx, &[target(&source)], Reason::NotSessionHelper);
    // The session directory itself is not a helper.
    assert_denied(&fx, &[unpinned(fx.session.to_str().unwrap())], Reason::NotSessionHelper);
    let other = fx.layout.session_dir("another-thread");
    fs::create_dir_all(&other).unwrap();
    let theirs = other.join("theirs.py");
    fs::write(&theirs, b"x").unwrap();
    assert_denied(&fx, &[target(&theirs)], Reason::OtherSession);
    let q = fx.session.join(".winx-release-0123456789abcdef");
    fs::create_dir_all(&q).unwrap();
    let quarantined = q.join("t000");
    fs::write(&quarantined, b"x").unwrap();
    assert_denied(&fx, &[target(&quarantined)], Reason::ReservedNamespace);
    assert_denied(&fx, &[unpinned(&format!("{}/.winx-release-x", fx.session.display()))], Reason::ReservedNamespace);
    // A good target beside a bad one: the whole request is refused.
    let good = fx.helper("good.txt", b"good");
    let r = fx.release(&[target(&good), target(&source)]);
    assert_eq!(r.error_code, Some(Reason::NotSessionHelper));
    assert!(good.exists() && source.exists());
}

#[test]
fn symlinks_are_refused_final_and_parent() {
    let fx = Fixture::new();
    let real = fx.helper("real.txt", b"real");
    let link = fx.session.join("link.txt");
    symlink(&real, &link).unwrap();
    assert_denied(&fx, &[unpinned(link.to_str().unwrap())], Reason::Symlink);
    // A symlinked parent directory inside the session.
    let outside = fx.ws().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("victim.txt"), b"victim").unwrap();
    symlink(&outside, fx.session.join("sub")).unwrap();
    let through = fx.session.join("sub/victim.txt");
    assert_denied(&fx, &[unpinned(through.to_str().unwrap())], Reason::Symlink);
    let pinned_victim = Target::new(&through, pin(&outside.join("victim.txt")));
    assert_denied(&fx, &[pinned_victim], Reason::Symlink);
    assert!(outside.join("victim.txt").exists());
    assert!(real.exists());
}

#[test]
fn symlinked_workspace_component_is_refused() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"h");
    let t = target(&h);
    // Replace W/.winx with a symlink to a copy holding the same helper.
    let winx = fx.ws().join(".winx");
    let moved = fx.ws().join("elsewhere");
    fs::rename(&winx, &moved).unwrap();
    symlink(&moved, &winx).unwrap();
    assert_denied(&fx, &[t], Reason::Symlink);
    assert!(moved.join("tmp").join(fx.session.file_name().unwrap()).join("h.txt").exists());
}

#[test]
fn hardlinked_helper_is_refused() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"linked");
    fs::hard_link(&h, fx.session.join("h2.txt")).unwrap();
    assert_denied(&fx, &[target(&h)], Reason::Hardlink);
}

#[test]
fn non_regular_and_missing_are_refused() {
    let fx = Fixture::new();
    let d = fx.session.join("dir");
    fs::create_dir(&d).unwrap();
    assert_denied(&fx, &[unpinned(d.to_str().unwrap())], Reason::NotRegularFile);
    let fifo = fx.session.join("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
        .unwrap();
    assert_denied(&fx, &[unpinned(fifo.to_str().unwrap())], Reason::NotRegularFile);
    let missing = fx.session.join("missing.txt");
    assert_denied(&fx, &[unpinned(missing.to_str().unwrap())], Reason::NotFound);
    let under_file = fx.helper("plain", b"x").join("child");
    assert_denied(&fx, &[unpinned(under_file.to_str().unwrap())], Reason::NotFound);
}

#[test]
fn changed_or_replaced_since_read_requires_a_new_read() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"original");
    let t = target(&h);
    // Same size, other bytes.
    fs::write(&h, b"ORIGINAL").unwrap();
    assert_denied(&fx, std::slice::from_ref(&t), Reason::ReadRequired);
    // Identical text, new inode.
    let h2 = fx.helper("h2.txt", b"same text");
    let t2 = target(&h2);
    fs::remove_file(&h2).unwrap();
    fs::write(&h2, b"same text").unwrap();
    assert_denied(&fx, &[t2], Reason::ReadRequired);
    // A pin with the right identity but the wrong digest.
    let h3 = fx.helper("h3.txt", b"abc");
    let mut t3 = target(&h3);
    t3.pin.sha256[0] ^= 1;
    assert_denied(&fx, &[t3], Reason::ReadRequired);
}

struct Owner {
    supports: bool,
    running: usize,
    pending: usize,
}

impl RuntimeOwner for Owner {
    fn supports_temporary_release(&self) -> bool {
        self.supports
    }
    fn running_executions(&self, _: &str) -> usize {
        self.running
    }
    fn pending_actions(&self, _: &str) -> usize {
        self.pending
    }
}

#[test]
fn owner_reasons() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"h");
    let opts = ReleaseOptions::default();
    let t = [target(&h)];
    assert_denied_with(&fx, &t, Reason::OwnerUnsupported, &Owner { supports: false, running: 0, pending: 0 }, &opts);
    assert_denied_with(&fx, &t, Reason::ExecutionActive, &Owner { supports: true, running: 1, pending: 0 }, &opts);
    assert_denied_with(&fx, &t, Reason::PendingActions, &Owner { supports: true, running: 0, pending: 2 }, &opts);
    assert!(h.exists());
}

#[test]
fn backing_root_trouble_preserves_every_helper() {
    let fx = Fixture::new();
    let a = fx.helper("a.txt", b"a");
    let b = fx.helper("b.txt", b"b");
    let t = [target(&a), target(&b)];
    let scratch = fx.layout.scratch_root();
    fs::create_dir_all(&scratch).unwrap();
    // A symlink in dropped output.
    symlink("/etc/passwd", scratch.join("link")).unwrap();
    assert_denied(&fx, &t, Reason::BackingSymlink);
    fs::remove_file(scratch.join("link")).unwrap();
    // A fifo in retained execution payloads.
    let exec = fx.layout.executions_root().join("cmd-1");
    fs::create_dir_all(&exec).unwrap();
    let fifo = exec.join("pipe");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
        .unwrap();
    assert_denied(&fx, &t, Reason::BackingUnsupportedEntry);
    fs::remove_file(&fifo).unwrap();
    // The bound, lowered for the test.
    for i in 0..5 {
        fs::write(exec.join(format!("out{i}")), b"o").unwrap();
    }
    let opts =
        ReleaseOptions { scan_limits: ScanLimits { max_entries: 4, max_depth: 16 }, ..ReleaseOptions::default() };
    assert_denied_with(&fx, &t, Reason::BackingScanLimit, &IdleOwner, &opts);
    // A link placed into a backing root after the targets were checked.
    let receipts = fx.layout.receipts_root();
    fs::create_dir_all(&receipts).unwrap();
    let alias = receipts.join("alias");
    let hook = |p: &FaultPoint<'_>| {
        if matches!(p, FaultPoint::BeforeScan) {
            fs::hard_link(&b, &alias)?;
        }
        Ok(())
    };
    let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
    assert_eq!(r.error_code, Some(Reason::BackingAlias), "{r:?}");
    assert!(!r.touched);
    assert!(a.exists() && b.exists());
    assert_eq!(fs::read(&a).unwrap(), b"a");
}

#[test]
fn release_never_touches_outside_the_session() {
    let fx = Fixture::new();
    let src = fx.ws().join("src.rs");
    fs::write(&src, b"source").unwrap();
    let h = fx.helper("h.txt", b"h");
    let before = snapshot(fx.ws());
    let r = fx.release(&[target(&h)]);
    assert_eq!(r.status, Status::Completed);
    let after = snapshot(fx.ws());
    let removed: Vec<_> = before.iter().filter(|e| !after.contains(e)).map(|e| e.0.clone()).collect();
    assert_eq!(removed, vec![h.clone()]);
    assert!(Path::new(&src).exists());
}

/// A batch under `SMALL_BATCH_BYTES` is re-hashed and then scanned on the
/// calling thread; a larger one is scanned on a thread beside the
/// re-hash. Either way the scan starts after the targets were checked, so
/// an alias linked into a backing root just before the scan is found.
#[test]
fn the_scan_after_the_check_finds_a_new_alias_inline_and_beside_the_rehash() {
    use winx_release_engine::rehash::SMALL_BATCH_BYTES;
    for (size, inline) in [(1usize, true), (SMALL_BATCH_BYTES as usize, false)] {
        let fx = Fixture::new();
        let a = fx.helper("a.txt", &vec![b'a'; size]);
        let t = [target(&a)];
        let receipts = fx.layout.receipts_root();
        fs::create_dir_all(&receipts).unwrap();
        let alias = receipts.join("alias");
        let caller = std::thread::current().id();
        let scanned_on = std::sync::Mutex::new(None);
        let hook = |p: &FaultPoint<'_>| {
            if matches!(p, FaultPoint::BeforeScan) {
                *scanned_on.lock().unwrap() = Some(std::thread::current().id());
                fs::hard_link(&a, &alias)?;
            }
            Ok(())
        };
        let r = fx.release_with(&t, &IdleOwner, &with_faults(&hook));
        assert_eq!(r.error_code, Some(Reason::BackingAlias), "{size} bytes: {r:?}");
        assert!(!r.touched);
        assert_eq!(fs::read(&a).unwrap().len(), size);
        let on = scanned_on.lock().unwrap().expect("the scan ran");
        assert_eq!(on == caller, inline, "{size} bytes: scanned on the calling thread: {}", on == caller);
    }
}

/// The lines of this process's inotify instances (`/proc/self/fdinfo`) that
/// name a watch on inode `ino`.
fn inotify_watches_of(ino: u64) -> Vec<String> {
    let needle = format!(" ino:{ino:x} ");
    fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .filter_map(|e| fs::read_to_string(e.ok()?.path()).ok())
        .flat_map(|info| info.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.starts_with("inotify wd:") && l.contains(&needle))
        .collect()
}

/// A target that something else holds open when it is unlinked keeps its
/// blocks until that holder closes it: its removal freed nothing, and the
/// report says so (`bytes_reclaimed` 0), while one that nothing else held
/// reports its blocks.
#[test]
fn bytes_reclaimed_counts_only_what_the_removal_freed() {
    let fx = Fixture::new();
    let held = fx.helper("held.bin", &vec![b'h'; 20_000]);
    let free = fx.helper("free.bin", &vec![b'f'; 20_000]);
    let blocks = fs::metadata(&free).unwrap().blocks();
    let kept = std::sync::Mutex::new(None);
    // Opened after the `in_use` step, in quarantine, just before its unlink.
    let hook = |p: &FaultPoint<'_>| {
        if let FaultPoint::AfterRecheck { index: 0, quarantined, verified: true } = p {
            *kept.lock().unwrap() = Some(fs::File::open(quarantined)?);
        }
        Ok(())
    };
    let held_ino = fs::metadata(&held).unwrap().ino();
    let r = fx.release_with(&[target(&held), target(&free)], &IdleOwner, &with_faults(&hook));
    assert_eq!(r.status, Status::Completed, "{r:?}");
    assert_eq!(r.files[0].outcome, Outcome::Released);
    assert_eq!(r.files[0].bytes_reclaimed, 0, "blocks still held count as reclaimed: {r:?}");
    // The process's inotify instance (shared by every release) keeps no
    // watch of a settled release: the held file's watch was removed.
    let watching = inotify_watches_of(held_ino);
    assert!(watching.is_empty(), "a settled release left a watch: {watching:?}");
    assert_eq!(r.files[1].bytes_reclaimed, blocks * 512, "{r:?}");
    assert_eq!(r.bytes_reclaimed, blocks * 512);
    // The holder still reads the removed file's bytes.
    let mut f = kept.lock().unwrap().take().unwrap();
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut f, &mut bytes).unwrap();
    assert_eq!(bytes.len(), 20_000);
}

/// `dry_run`: every check runs (an active execution and a changed file are
/// still refused), a run that passes them touches nothing (no journal, no
/// quarantine, the helper in place) and says so; the same targets then
/// release for real.
#[test]
fn a_dry_run_runs_every_check_and_captures_nothing() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"dry");
    let changed = fx.helper("c.txt", b"before");
    let (t, c) = (target(&h), target(&changed));
    fs::write(&changed, b"after!").unwrap();
    let dry = ReleaseOptions { dry_run: true, ..ReleaseOptions::default() };
    let busy = Owner { supports: true, running: 1, pending: 0 };
    assert_denied_with(&fx, std::slice::from_ref(&t), Reason::ExecutionActive, &busy, &dry);
    assert_denied_with(&fx, &[t.clone(), c], Reason::ReadRequired, &IdleOwner, &dry);
    let (before_ws, before_data) = (snapshot(fx.ws()), snapshot(fx.layout.data_dir()));
    let r = fx.release_with(std::slice::from_ref(&t), &IdleOwner, &dry);
    assert_eq!(r.status, Status::Completed, "{r:?}");
    assert!(!r.touched && r.bytes_reclaimed == 0, "{r:?}");
    assert_eq!(r.files[0].outcome, Outcome::NotAttempted, "{r:?}");
    assert!(r.detail.as_deref().is_some_and(|d| d.contains("dry run")), "{r:?}");
    assert_eq!(snapshot(fx.ws()), before_ws, "a dry run changed the workspace");
    assert_eq!(snapshot(fx.layout.data_dir()), before_data, "a dry run changed the data dir");
    let r = fx.release(&[t]);
    assert_eq!(r.files[0].outcome, Outcome::Released, "{r:?}");
    assert!(!h.exists());
}

/// A Python child that sends a descriptor of `path` over a socket pair to
/// itself, closes its own, says `ready` and holds it in flight for `secs`.
fn in_flight_holder(path: &Path, secs: f64) -> Option<std::process::Child> {
    use std::io::BufRead;
    let program = "import os,socket,sys,time\n\
                   a,b=socket.socketpair()\n\
                   fd=os.open(sys.argv[1],os.O_RDONLY)\n\
                   socket.send_fds(a,[b'x'],[fd])\n\
                   os.close(fd)\n\
                   print('ready',flush=True)\n\
                   time.sleep(float(sys.argv[2]))\n\
                   os._exit(0)\n";
    let _forking = crate::common::no_fork_now();
    let mut child = std::process::Command::new("python3")
        .args(["-c", program])
        .arg(path)
        .arg(secs.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    io::BufReader::new(child.stdout.take()?).read_line(&mut line).ok()?;
    (line.trim() == "ready").then_some(child)
}

/// A hold no descriptor table shows that ends a moment later (as a child
/// forked between its parent's `open` and its own `exec` does) does not
/// refuse the release: the check runs again before the hold counts.
/// One that lasts is `in_use`, and nothing changes.
#[test]
fn a_hold_no_table_shows_refuses_only_while_it_lasts() {
    let fx = Fixture::new();
    let brief = fx.helper("brief.txt", b"brief");
    let Some(mut holder) = in_flight_holder(&brief, 0.05) else {
        eprintln!("skipped: python3 cannot send a descriptor over a socket here");
        return;
    };
    let r = fx.release(&[target(&brief)]);
    holder.wait().unwrap();
    assert_eq!(r.status, Status::Completed, "a hold that ended within the retries refused: {r:?}");
    assert!(!brief.exists());

    // The same for a hold a descriptor table shows (a child between its
    // parent's fork and its own exec looks like this).
    let opened = fx.helper("opened.txt", b"opened");
    let forking = crate::common::no_fork_now();
    let mut holder = std::process::Command::new("python3")
        .args(["-c", "import os,sys,time\nfd=os.open(sys.argv[1],os.O_RDONLY)\nprint('ready',flush=True)\ntime.sleep(0.05)\nos._exit(0)\n"])
        .arg(&opened)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    drop(forking);
    assert_eq!(line.trim(), "ready");
    let r = fx.release(&[target(&opened)]);
    holder.wait().unwrap();
    assert_eq!(r.status, Status::Completed, "a holder that ended within the retries refused: {r:?}");

    let lasting = fx.helper("lasting.txt", b"lasting");
    let mut holder = in_flight_holder(&lasting, 60.0).unwrap();
    assert_denied(&fx, &[target(&lasting)], Reason::InUse);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(fx.release(&[target(&lasting)]).status, Status::Completed);
}

/// An owner's answers are about one session directory: a release that
/// opens another directory at the session's path (one renamed into place
/// after the owner looked the session up) is refused `other_session`,
/// nothing touched; the right one goes through.
#[test]
fn answers_about_another_session_directory_refuse_the_release() {
    /// An owner with nothing running whose answers are about one session
    /// directory (the runtime's `OwnerAnswer` with its `session` set).
    struct About((u64, u64));
    impl RuntimeOwner for About {
        fn supports_temporary_release(&self) -> bool {
            true
        }
        fn running_executions(&self, _: &str) -> usize {
            0
        }
        fn pending_actions(&self, _: &str) -> usize {
            0
        }
        fn session_dir(&self) -> Option<(u64, u64)> {
            Some(self.0)
        }
    }
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"pinned");
    let t = [target(&h)];
    let other = tempfile::tempdir().unwrap();
    let key = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    };
    assert_denied_with(&fx, &t, Reason::OtherSession, &About(key(other.path())), &ReleaseOptions::default());
    let r = fx.release_with(&t, &About(key(&fx.session)), &ReleaseOptions::default());
    assert_eq!(r.status, Status::Completed, "{r:?}");
}
