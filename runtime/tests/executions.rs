//! The execution runtime without a guardian: spawn, output, resolution,
//! liveness, and adoption by a second runtime of the same data directory,
//! in `/proc` mode everywhere and in cgroup mode where this process may
//! make cgroups (root on a cgroup2 machine; skipped with a reason elsewhere).

mod common;

use common::{dirs, eventually, Dirs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use winx_release_runtime::{ExecState, LivenessChoice, LivenessMode, Runtime, RuntimeOptions, SessionKey, Spawn};

fn runtime(data: &Path, liveness: LivenessChoice) -> Arc<Runtime> {
    Runtime::start(data, &RuntimeOptions { liveness, move_self: false, subreaper: false, ..Default::default() })
}

fn spawn(
    rt: &Arc<Runtime>,
    ws: &Path,
    key: SessionKey,
    command: &str,
    background: bool,
) -> Arc<winx_release_runtime::Execution> {
    let e = rt
        .submit(Spawn {
            thread: "t1".into(),
            workspace: ws.into(),
            cwd: None,
            session: key,
            command: command.into(),
            background,
            env: vec![("WINX_TEMP_DIR".into(), ws.as_os_str().into())],
        })
        .unwrap();
    rt.run(&e).unwrap();
    e
}

fn check(liveness: LivenessChoice) {
    let Dirs { tmp: _tmp, ws, data, key, .. } = dirs();
    let rt = runtime(&data, liveness);
    if liveness == LivenessChoice::Auto && rt.liveness_mode() != LivenessMode::Cgroup {
        eprintln!("SKIPPED: cgroup mode is not available here: {}", rt.liveness_reason());
        return;
    }
    // A foreground command: output, exit code, resolved.
    let e = spawn(&rt, &ws, key, "echo \"$WINX_EXECUTION_ID\"; pwd; exit 3", false);
    assert_eq!(e.wait_until(Duration::from_secs(10), ExecState::is_final), ExecState::Resolved(Some(3)));
    let (out, cut) = e.output_tail();
    assert_eq!(out, format!("{}\n{}\n", e.id, ws.display()));
    assert!(!cut);
    assert_eq!(rt.liveness(&key).running, 0);

    // A daemon that leaves the group and session and scrubs its environment.
    let tag = format!("winx-rt-{}-{}", std::process::id(), rt.liveness_mode().as_str());
    let cmd = format!("( setsid env -i bash -c 'exec -a {tag} sleep 3' >/dev/null 2>&1 </dev/null & ); echo forked");
    let d = spawn(&rt, &ws, key, &cmd, true);
    eventually(Duration::from_secs(5), "the shell to exit", || d.leader_exited());
    let live = rt.liveness(&key);
    if rt.liveness_mode() == LivenessMode::Cgroup {
        // Only the cgroup still knows it.
        assert_eq!(live.running, 1, "{live:?}");
        assert!(live.detail.as_deref().is_some_and(|m| m.contains(&d.id)), "{live:?}");
        // A second runtime of the same data directory (a restarted guardian)
        // adopts it and sees it running too.
        let rt2 = runtime(&data, LivenessChoice::Auto);
        assert_eq!(rt2.liveness(&key).running, 1);
        assert!(rt2.lookup(&d.id).is_some_and(|x| x.adopted));
        // Another session is not blocked by it.
        let other = SessionKey { dev: key.dev, ino: key.ino + 1, born: 0 };
        assert_eq!(rt2.liveness(&other).running, 0);
    }
    eventually(Duration::from_secs(15), "nothing of the session running", || rt.liveness(&key).running == 0);
    eventually(Duration::from_secs(5), "the execution resolved", || d.state().is_final());

    // A record that cannot be parsed counts for every session.
    let bad = data.join("executions").join("00000000000000ff");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("status.json"), b"{not json").unwrap();
    let live = rt.liveness(&SessionKey { dev: 1, ino: 1, born: 0 });
    assert_eq!(live.running, 1, "{live:?}");
    assert!(live.detail.unwrap().contains("00000000000000ff"));
}

#[test]
fn proc_mode_runs_tracks_and_resolves() {
    check(LivenessChoice::Proc);
}

#[test]
fn cgroup_mode_runs_tracks_adopts_and_resolves() {
    check(LivenessChoice::Auto);
}

/// Every liveness answer adopts what another runtime of the data directory
/// recorded since the last, though `D/executions` is read again only when
/// it may have changed: a new execution directory changes it; a record
/// written inside a directory seen without one does not, so such a
/// directory is looked at again at every answer until its record is there.
#[test]
fn a_record_written_after_its_directory_was_seen_is_adopted() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let rt = runtime(&data, LivenessChoice::Proc);
    let key = SessionKey { dev: 1, ino: 1, born: 0 };
    let execs = data.join("executions");
    std::fs::create_dir_all(&execs).unwrap();
    // Past the racy window (two coarse ticks at most 2 × 4 ms on HZ=250,
    // one second and a tick where the filesystem keeps whole seconds), so
    // that a look at `D/executions` settles.
    // Time that must pass, not an event to wait for: a sleep.
    let settle = || std::thread::sleep(Duration::from_millis(1100));
    settle();
    assert_eq!(rt.liveness(&key).running, 0);
    // A directory without its record yet: nothing to adopt.
    let first = execs.join("00000000000000a1");
    std::fs::create_dir(&first).unwrap();
    settle();
    assert_eq!(rt.liveness(&key).running, 0);
    settle();
    assert_eq!(rt.liveness(&key).running, 0);
    // Its record lands (one that cannot be parsed counts for every
    // session); `D/executions` itself did not change.
    std::fs::write(first.join("status.json"), b"{not json").unwrap();
    let live = rt.liveness(&key);
    assert_eq!(live.running, 1, "{live:?}");
    assert!(live.detail.unwrap().contains("00000000000000a1"));
    // A settled look, then a new directory with its record: adopted.
    settle();
    assert_eq!(rt.liveness(&key).running, 1);
    let second = execs.join("00000000000000a2");
    std::fs::create_dir(&second).unwrap();
    std::fs::write(second.join("status.json"), b"{not json").unwrap();
    assert_eq!(rt.liveness(&key).running, 2);
}

/// `D/executions` that cannot be listed is doubt: an execution an earlier
/// guardian recorded there could still run, so every session's answer
/// counts it until it can be read again. Where there is none yet, nothing
/// runs.
#[test]
fn executions_that_cannot_be_listed_count_as_running() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let rt = runtime(&data, LivenessChoice::Proc);
    let key = SessionKey { dev: 1, ino: 1, born: 0 };
    assert!(!data.join("executions").exists());
    assert_eq!(rt.liveness(&key).running, 0);
    // Something that is not a directory in its place: it cannot be listed.
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("executions"), b"").unwrap();
    let live = rt.liveness(&key);
    assert_eq!(live.running, 1, "{live:?}");
    assert!(live.detail.as_deref().is_some_and(|d| d.contains("cannot list")), "{live:?}");
    // A second runtime started on it says the same.
    let rt2 = runtime(&data, LivenessChoice::Proc);
    assert_eq!(rt2.liveness(&SessionKey { dev: 2, ino: 2, born: 0 }).running, 1);
    // Readable again: nothing runs.
    std::fs::remove_file(data.join("executions")).unwrap();
    std::fs::create_dir(data.join("executions")).unwrap();
    assert_eq!(rt.liveness(&key).running, 0);
}

/// A leader whose start time could not be read at its spawn is recorded
/// with [`Leader::UNKNOWN_START`]: the process at its pid, and its group,
/// still count as the execution's (a restarted guardian adopting the record
/// must not take the unknown start time for a reused pid and let a release
/// through while the command runs). Once the process is gone, it resolves.
#[test]
fn a_leader_recorded_without_its_start_time_still_counts() {
    use std::os::unix::process::CommandExt;
    use winx_release_runtime::{Leader, Record, RecordState};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let key = SessionKey { dev: 7, ino: 7, born: 0 };
    // The "leader": its own group, no marker in its environment.
    let mut child = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
    let pid = child.id() as i32;
    let id = "00000000000000b1";
    let record = Record {
        command_id: id.into(),
        thread_id: "t1".into(),
        workspace: tmp.path().into(),
        session: Some(key),
        background: true,
        started_unix: 1,
        state: RecordState::Running,
        leader: Some(Leader { pid, start_time: Leader::UNKNOWN_START, own_group: true, own_session: false }),
        cgroup: None,
        monitor: None,
        leader_exited_unix: None,
        exit_code: None,
        failed_to_start: false,
        ended_unix: None,
        shell: None,
        prompts_before: None,
        terminal: false,
    };
    let dir = data.join("executions").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("status.json"), serde_json::to_vec(&record).unwrap()).unwrap();
    let rt = runtime(&data, LivenessChoice::Proc);
    let live = rt.liveness(&key);
    assert_eq!(live.running, 1, "{live:?}");
    assert!(live.detail.as_deref().is_some_and(|d| d.contains(&pid.to_string())), "{live:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    eventually(Duration::from_secs(5), "nothing of the session running", || rt.liveness(&key).running == 0);
}

/// A command of a thread counts for every session of that thread: asked
/// for another session directory of the same thread (its first one was
/// removed and made again), [`Runtime::thread_liveness`] counts it, and a
/// restarted runtime that adopted it does too; another thread's session is
/// not blocked by it.
#[test]
fn a_threads_command_counts_for_its_threads_next_session() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let (ws, data) = (root.join("ws"), root.join("data"));
    std::fs::create_dir_all(&ws).unwrap();
    let first = SessionKey { dev: 9, ino: 1, born: 0 };
    let next = SessionKey { dev: 9, ino: 2, born: 0 };
    let rt = runtime(&data, LivenessChoice::Proc);
    let stop = root.join("stop");
    let cmd = format!("while [ ! -e '{}' ] && [ -d '{}' ]; do sleep 0.05; done", stop.display(), root.display());
    let e = spawn(&rt, &ws, first, &cmd, true);
    assert_eq!(rt.liveness(&next).running, 0, "by directory alone it is another session's");
    let live = rt.thread_liveness(&next, "t1");
    assert_eq!(live.running, 1, "{live:?}");
    assert_eq!(rt.thread_liveness(&next, "t2").running, 0);
    let rt2 = runtime(&data, LivenessChoice::Proc);
    assert_eq!(rt2.thread_liveness(&next, "t1").running, 1);
    std::fs::write(&stop, b"").unwrap();
    eventually(Duration::from_secs(10), "nothing of the thread running", || {
        rt.thread_liveness(&next, "t1").running == 0
    });
    eventually(Duration::from_secs(5), "the execution resolved", || e.state().is_final());
}

/// A process older than every execution that is moved into an
/// execution's cgroup is remembered as its member, and so is what
/// descends from it, however old: a look whose snapshots pass over the
/// processes older than the execution reads the whole table for the
/// descendants of such a member (cgroup mode only: elsewhere no older
/// process can become a member).
#[test]
fn an_older_process_moved_into_a_cgroup_counts_with_its_older_children() {
    let Dirs { tmp: _tmp, root, ws, data, key } = dirs();
    let rt = runtime(&data, LivenessChoice::Auto);
    if rt.liveness_mode() != LivenessMode::Cgroup {
        eprintln!("SKIPPED: cgroup mode is not available here: {}", rt.liveness_reason());
        return;
    }
    // An older parent and child, started before the execution.
    let out = std::process::Command::new("sh")
        .args(["-c", "sh -c 'sleep 60 & echo $!; wait' >\"$1\" 2>/dev/null </dev/null & echo $!", "sh"])
        .arg(root.join("child"))
        .output()
        .unwrap();
    let parent: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let child = common::read_pid(&root.join("child"));
    std::thread::sleep(Duration::from_millis(30));
    // A command that leaves a job: its answers look at it in snapshots
    // since its start, which read the older processes once and then pass
    // over them.
    let d = spawn(&rt, &ws, key, "sleep 20 >/dev/null 2>&1 & exit 0", true);
    eventually(Duration::from_secs(10), "the command's end", || d.leader_exited());
    for _ in 0..3 {
        let l = rt.liveness(&key);
        assert!(l.running > 0, "{l:?}");
        assert!(!l.detail.unwrap_or_default().contains(&child.to_string()), "the older child counted before the move");
    }
    let cg = d.cgroup.clone().expect("a cgroup");
    std::fs::write(cg.join("cgroup.procs"), parent.to_string()).unwrap();
    for i in 0..3 {
        let l = rt.liveness(&key);
        let detail = l.detail.clone().unwrap_or_default();
        assert!(l.running > 0 && detail.contains(&child.to_string()), "answer {i} missed child {child}: {l:?}");
    }
    // The job, the parent (both in the cgroup) and the child.
    let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()).chain([child, parent]) {
        let _ =
            rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL);
    }
    eventually(Duration::from_secs(15), "nothing of the session running", || rt.liveness(&key).running == 0);
}
