//! A liveness answer with no execution of the session to look at: the
//! orphan check alone, answered from this process's own children (it is a
//! child subreaper here) without a `/proc` snapshot while it has none, and
//! on the whole table as soon as it has one.

mod common;

use common::{dirs, eventually, Dirs};
use std::process::{Command, Stdio};
use std::time::Duration;

use winx_release_runtime::{LivenessChoice, Runtime, RuntimeOptions, SessionKey};

#[test]
fn an_answer_with_only_orphans_to_look_for_reads_no_snapshot_and_finds_one() {
    let Dirs { tmp: _tmp, data, key, .. } = dirs();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: true, ..Default::default() };
    let rt = Runtime::start(&data, &opts);
    let me = std::process::id() as i32;
    let told = std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists();

    // Nothing runs: no snapshot where this process's children can be read
    // (two before).
    let before = winx_release_runtime::snapshots_taken_here();
    let l = rt.liveness(&key);
    let taken = winx_release_runtime::snapshots_taken_here() - before;
    assert_eq!(l.running, 0, "{l:?}");
    if told {
        // Another test of this binary reaping a child meanwhile makes a
        // look unbelieved (then the whole table is read): asked again.
        let mut least = taken;
        for _ in 0..50 {
            if least == 0 {
                break;
            }
            let before = winx_release_runtime::snapshots_taken_here();
            assert_eq!(rt.liveness(&key).running, 0);
            least = least.min(winx_release_runtime::snapshots_taken_here() - before);
        }
        assert_eq!(least, 0, "an answer with nothing to look at took {least} snapshots");
    } else {
        eprintln!("no children files here (CONFIG_PROC_CHILDREN): the whole table is read, {taken} snapshots");
    }

    // An orphan: its parent exits at once, it is reparented to this
    // process (a subreaper). It counts for every session.
    let out = Command::new("sh")
        .args(["-c", "sleep 30 >/dev/null 2>&1 </dev/null & echo $!"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let pid: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let l = rt.liveness(&key);
    assert!(l.running > 0, "the orphan {pid} was not counted: {l:?}");
    assert!(l.detail.as_deref().unwrap_or("").contains(&format!("process {pid} was reparented")), "{l:?}");
    let other = SessionKey { dev: key.dev, ino: key.ino + 1, born: 0 };
    assert!(rt.liveness(&other).running > 0, "another session's answer did not count the orphan");

    // Once it exits (the runtime reaps it), nothing runs again.
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    eventually(Duration::from_secs(10), "the orphan's end to be seen", || rt.liveness(&key).running == 0);
    // The exited orphan is reaped once a `SIGCHLD` is told (the flag a
    // host's handler sets), by the runtime's watcher.
    let flag = rt.sigchld_flag();
    eventually(Duration::from_secs(10), "the exited orphan to be reaped", || {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    });
}
