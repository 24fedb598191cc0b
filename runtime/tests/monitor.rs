//! The monitor of each execution (`winx_release_runtime::monitor`): the
//! leader's parent, a subreaper that keeps whatever the execution started
//! among its descendants, and the durable record of the leader's exit.
//!
//! The runtime here is no subreaper (an embedding host's choice): before
//! the monitor, a process that left its execution's group, session and
//! marker and whose parent exited was reparented to init and escaped.

mod common;

use common::{dirs, read_pid, Dirs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use winx_release_runtime::monitor::EXIT_FILE;
use winx_release_runtime::{ExecState, Execution, LivenessChoice, Runtime, RuntimeOptions, SessionKey, Spawn};

fn runtime(data: &Path) -> Arc<Runtime> {
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    Runtime::start(data, &opts)
}

fn run(rt: &Arc<Runtime>, ws: &Path, key: SessionKey, command: &str) -> Arc<Execution> {
    let e = rt
        .submit(Spawn {
            thread: "t1".into(),
            workspace: ws.into(),
            cwd: None,
            session: key,
            command: command.into(),
            background: true,
            env: vec![],
        })
        .unwrap();
    rt.run(&e).unwrap();
    e
}

/// The parent pid of `pid` (`/proc/<pid>/stat` field 4).
fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// A process that leaves its execution every way a process can (`setsid`,
/// `env -i`, its parent exits at once) is reparented to the execution's
/// monitor, not to init: the execution lingers, and the session's
/// liveness counts it, until it exits; then the execution resolves and the
/// monitor has recorded the leader's exit durably.
#[test]
fn a_process_that_leaves_everything_still_descends_from_the_monitor() {
    let Dirs { tmp: _tmp, root, ws, data, key } = dirs();
    let rt = runtime(&data);
    let pidfile = root.join("escaped.pid");
    let stop = root.join("stop");
    // The escaped process waits for the test's stop file (never for a
    // time): it ends when the test says.
    let cmd = format!(
        "setsid env -i /bin/sh -c 'sh -c \"while [ ! -e {stop} ]; do sleep 0.05; done\" >/dev/null 2>&1 & echo $! > {pidfile}'; exit 3",
        stop = stop.display(),
        pidfile = pidfile.display()
    );
    let e = run(&rt, &ws, key, &cmd);
    let escaped = read_pid(&pidfile);
    let state = e.wait_until(Duration::from_secs(10), |s| s != ExecState::Running);
    assert_eq!(state, ExecState::Lingering(Some(3)), "the leader exited, the escaped process runs");
    let monitor = ppid(escaped).expect("the escaped process runs");
    assert_ne!(monitor, 1, "reparented to init: the monitor is no subreaper");
    assert_ne!(monitor, std::process::id() as i32, "the runtime is no subreaper here");
    assert_eq!(ppid(monitor), Some(std::process::id() as i32), "the monitor is the runtime's child");
    let live = rt.liveness(&key);
    assert!(live.running > 0, "{live:?}");
    assert!(live.detail.as_deref().unwrap_or("").contains(&escaped.to_string()), "{live:?}");
    assert!(!e.dir.join(EXIT_FILE).exists(), "the monitor records its exit last");
    std::fs::write(&stop, b"").unwrap();
    let state = e.wait_until(Duration::from_secs(20), ExecState::is_final);
    assert_eq!(state, ExecState::Resolved(Some(3)));
    assert_eq!(std::fs::read_to_string(e.dir.join(EXIT_FILE)).unwrap(), "3\n");
    assert_eq!(rt.liveness(&key).running, 0);
}

/// The leader is the monitor's child, not the runtime's, and a runtime
/// whose monitor program cannot be run starts nothing: the command never
/// runs and the start fails, saying why.
#[test]
fn the_leader_is_the_monitors_child_and_no_monitor_starts_nothing() {
    let Dirs { tmp: _tmp, root, ws, data, key } = dirs();
    let rt = runtime(&data);
    let pidfile = root.join("leader.pid");
    let stop = root.join("stop");
    let e = run(
        &rt,
        &ws,
        key,
        &format!("echo $$ > {}; while [ ! -e {} ]; do sleep 0.05; done", pidfile.display(), stop.display()),
    );
    let leader = read_pid(&pidfile);
    let monitor = ppid(leader).unwrap();
    assert_ne!(monitor, std::process::id() as i32);
    assert_eq!(ppid(monitor), Some(std::process::id() as i32));
    std::fs::write(&stop, b"").unwrap();
    assert_eq!(e.wait_until(Duration::from_secs(10), ExecState::is_final), ExecState::Resolved(Some(0)));

    let opts = RuntimeOptions {
        liveness: LivenessChoice::Proc,
        move_self: false,
        subreaper: false,
        monitor: Some("/bin/true".into()),
        ..Default::default()
    };
    let rt = Runtime::start(&root.join("data2"), &opts);
    let marker = root.join("ran");
    let e = rt
        .submit(Spawn {
            thread: "t1".into(),
            workspace: ws.clone(),
            cwd: None,
            session: key,
            command: format!("touch {}", marker.display()),
            background: false,
            env: vec![],
        })
        .unwrap();
    let err = rt.run(&e).unwrap_err();
    assert!(err.to_string().contains("monitor"), "{err}");
    assert_eq!(e.state(), ExecState::FailedToStart);
    assert!(!marker.exists(), "the command ran without a monitor");
}

/// Writes the record of a shell an earlier runtime left: `leader` its
/// process, `monitor` the process its record names as the monitor.
fn left_shell(data: &Path, id: &str, key: SessionKey, leader: i32, monitor: i32) {
    use winx_release_runtime::{Leader, Record, RecordState};
    let at =
        |pid: i32| Leader { pid, start_time: Runtime::start_time_of(pid).unwrap(), own_group: true, own_session: true };
    let record = Record {
        command_id: id.into(),
        thread_id: "t1".into(),
        workspace: data.into(),
        session: Some(key),
        background: false,
        started_unix: 1,
        state: RecordState::Running,
        leader: Some(at(leader)),
        cgroup: None,
        monitor: Some(at(monitor)),
        leader_exited_unix: None,
        exit_code: None,
        failed_to_start: false,
        ended_unix: None,
        shell: None,
        prompts_before: None,
        terminal: true,
    };
    let dir = data.join("executions").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("status.json"), serde_json::to_vec(&record).unwrap()).unwrap();
}

/// Binds the monitor socket of `id` here and answers every peer with
/// `line` (and nothing else), until the process ends.
fn fake_monitor(id: &str, line: String) {
    use std::io::Write;
    use std::os::linux::net::SocketAddrExt;
    let name = winx_release_runtime::monitor::socket_name(id);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for mut c in listener.incoming().flatten() {
            let _ = c.write_all(line.as_bytes());
            kept.push(c);
        }
    });
}

/// A shell an earlier runtime left whose monitor speaks another version of
/// the monitor socket's protocol is reported and left running, never
/// killed, and counts as running; a socket held by another process than
/// the recorded monitor (a squatter on the abstract name) is refused.
#[test]
fn a_monitor_of_another_version_or_a_squatter_is_refused_and_the_shell_left_running() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let data = root.join("data");
    let key = SessionKey { dev: 5, ino: 5, born: 0 };
    let mut shell = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let pid = shell.id() as i32;
    let me = std::process::id() as i32;
    // This process holds both sockets: it is the recorded monitor of the
    // first shell only.
    let (newer, squatted) = ("00000000000000c1", "00000000000000c2");
    left_shell(&data, newer, key, pid, me);
    left_shell(&data, squatted, key, pid, pid);
    fake_monitor(newer, format!("W 2 {pid}\n"));
    fake_monitor(squatted, format!("W 1 {pid}\n"));
    let rt = runtime(&data);
    let left = rt.shells_to_reattach();
    assert_eq!(left.len(), 2, "{left:?}");
    for e in left {
        let err = rt.reattach_shell(&e, None).unwrap_err();
        if e.id == newer {
            assert_eq!(err.kind(), std::io::ErrorKind::Unsupported, "{err}");
            assert!(err.to_string().contains("version 2") && err.to_string().contains("left running"), "{err}");
        } else {
            assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
        }
    }
    assert!(shell.try_wait().unwrap().is_none(), "the shell was ended");
    let live = rt.liveness(&key);
    assert!(live.running > 0 && live.detail.as_deref().unwrap_or("").contains(&pid.to_string()), "{live:?}");
    shell.kill().unwrap();
    shell.wait().unwrap();
}
