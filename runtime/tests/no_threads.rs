//! Without a thread to be had (the user's task limit reached, as a fork
//! bomb among the agent's commands leaves it), the engine's parallel steps
//! do their work on the calling thread: a threaded scan, a parallel fill of
//! the directory cache, a re-hash on two workers, and a whole release
//! (its scan beside the re-hash, its quarantine and intent beside
//! `in_use`, the holder sweep's parts). Before, each `spawn` panicked. A
//! command is not started when no thread could wait for its leader.
//!
//! Its own test binary without the test harness: the child process is put
//! into a pids cgroup whose limit is the one task it has, before it starts
//! any thread. Needs root and a pids controller (cgroup v1 at
//! `/sys/fs/cgroup/pids`, or v2 with `pids` in the root's
//! `cgroup.subtree_control`); elsewhere it says why it skips.

// The engine tests' fixture (a workspace, a data directory, pinned helpers;
// its `ns` module calls `libc`, a dev-dependency here).
#[path = "../../engine/tests/common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{target, Fixture};
use winx_release_engine::admission::Admission;
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::rehash::{hash_fds, HashJob, RehashOptions};
use winx_release_engine::release::{release, ReleaseOptions, ReleaseRequest};
use winx_release_engine::scan::{scan_paths, DirCache, ScanLimits, ThreadsBackend};
use winx_release_runtime::{ExecState, LivenessChoice, Runtime, RuntimeOptions, SessionKey, Spawn};

const CHILD: &str = "WINX_TEST_NO_THREADS_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    if !rustix::process::geteuid().is_root() {
        println!("no_threads: skipped: needs root to make a pids cgroup");
        return;
    }
    let Some(group) = pids_cgroup() else {
        println!("no_threads: skipped: no pids cgroup controller can be used here");
        return;
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it has made what it needs threads for, into the group, whose
    // limit of one task forbids any new one, before it goes on.
    let mut ready = [0u8; 5];
    child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready");
    fs::write(group.join("pids.max"), "1").unwrap();
    fs::write(group.join("cgroup.procs"), child.id().to_string()).unwrap();
    child.stdin.take().unwrap().write_all(b"go").unwrap();
    let status = child.wait().unwrap();
    let _ = fs::remove_dir(&group);
    assert!(status.success(), "the child failed without threads: {status}");
    println!("no_threads: ok");
}

/// A new pids cgroup of this test, where one can be made.
fn pids_cgroup() -> Option<PathBuf> {
    let name = format!("winx-test-no-threads-{}", std::process::id());
    let v1 = PathBuf::from("/sys/fs/cgroup/pids");
    let v2 = PathBuf::from("/sys/fs/cgroup");
    let parent = if v1.join("cgroup.procs").exists() {
        v1
    } else if fs::read_to_string(v2.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.split_whitespace().any(|x| x == "pids"))
    {
        v2
    } else {
        return None;
    };
    let group = parent.join(name);
    fs::create_dir(&group).ok()?;
    Some(group)
}

fn child() {
    // An execution runtime, whose own threads start with it.
    let fx = Fixture::new();
    let rt = Runtime::start(
        &fx.layout.data_dir().join("rt"),
        &RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() },
    );
    // Enough processes of the user that the holder sweep splits its list
    // across threads (64 or more), started while forks still work.
    let mut sleepers: Vec<_> = (0..72)
        .map(|_| Command::new("sleep").arg("60").stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap())
        .collect();
    let mut out = std::io::stdout();
    out.write_all(b"ready").unwrap();
    out.flush().unwrap();
    let mut go = [0u8; 2];
    std::io::stdin().read_exact(&mut go).unwrap();
    if std::thread::Builder::new().spawn(|| {}).is_ok() {
        panic!("a thread could be started: the pids limit did not take");
    }
    // A command whose leader no thread could wait for is not started.
    let e = rt
        .submit(Spawn {
            thread: "t".into(),
            workspace: fx.ws().into(),
            cwd: None,
            session: SessionKey::of_path(fx.ws()).unwrap(),
            command: "true".into(),
            background: false,
            env: vec![],
        })
        .unwrap();
    let err = rt.run(&e).unwrap_err();
    assert!(err.to_string().contains("no thread to watch the command"), "{err}");
    assert_eq!(e.state(), ExecState::FailedToStart);
    // A tree of a few directories for the threaded scan and the fill.
    let root = fx.layout.data_dir().join("tree");
    for d in 0..8 {
        for f in 0..4 {
            let p = root.join(format!("d{d}/e/f{f}"));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, b"x").unwrap();
        }
    }
    let (none, roots) = (HashSet::new(), vec![root]);
    let threaded = scan_paths(&ThreadsBackend::new(2), &roots, ScanLimits::default(), &none);
    assert!(threaded.reason.is_none() && threaded.files == 32, "{threaded:?}");
    let cache = DirCache::new();
    cache.force_fill_threads(Some(2));
    let filled = cache.scan_paths(&roots, ScanLimits::default(), &none);
    assert!(filled.reason.is_none() && filled.files == 32, "{filled:?}");
    // Two workers asked for, 4 files of 300 KiB.
    let files: Vec<fs::File> = (0..4)
        .map(|i| {
            let p = fx.helper(&format!("big{i}"), &vec![i as u8; 300 * 1024]);
            fs::File::open(p).unwrap()
        })
        .collect();
    let jobs: Vec<HashJob<'_>> = files.iter().map(|f| HashJob::new(f.as_fd())).collect();
    let hashed = hash_fds(&jobs, &RehashOptions { threads: 2, ..RehashOptions::default() });
    assert!(hashed.iter().all(|r| r.as_ref().is_ok_and(|h| h.len == 300 * 1024)), "{hashed:?}");
    // A whole release: 1.2 MiB of helpers (the scan beside the re-hash),
    // alone in flight (the quarantine and intent beside `in_use`).
    let targets: Vec<_> = (0..4).map(|i| target(&fx.session.join(format!("big{i}")))).collect();
    drop(files);
    let req = ReleaseRequest { layout: &fx.layout, thread_id: &fx.thread, targets: &targets };
    let r = release(&req, &Admission::new().enter(), &IdleOwner, &ReleaseOptions::default());
    assert!(r.to_string().starts_with("release completed"), "{r}");
    assert!((0..4).all(|i| !fx.session.join(format!("big{i}")).exists()));
    for c in &mut sleepers {
        let _ = c.kill();
        let _ = c.wait();
    }
}
