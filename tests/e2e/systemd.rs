//! Socket activation and readiness the way systemd does them: a listening
//! socket bound before the guardian starts, handed over as descriptor 3
//! with `LISTEN_FDS=1` and `LISTEN_PID` set to the guardian's own pid, and
//! `READY=1` expected on `NOTIFY_SOCKET`; then a release driven through that
//! socket by a real frontend.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{read_line_timeout, release_req, Env, BIN};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_passed_by_systemd_is_served_and_readiness_notified() {
    let env = Env::new();
    // What the .socket unit does: a 0700 directory, a 0600 listening socket.
    let dir = env.root.join("sd");
    fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    let sock = dir.join("guardian.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600)).unwrap();
    let notify_path = env.root.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();

    // The service: descriptor 3 is the socket, LISTEN_PID the process's own
    // pid (the shell's `$$`, which `exec` keeps). No --socket argument. The
    // socket comes in as the shell's standard input (the shell's
    // redirections take one-digit descriptors only; this test process has
    // many open).
    let script = "exec 3<&0 0</dev/null; export LISTEN_PID=$$ LISTEN_FDS=1; exec \"$0\" \"$@\"";
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg(BIN).args(["guardian", "--keep-executions", "5"]).envs(env.vars());
    for v in Env::REMOVED {
        cmd.env_remove(v);
    }
    let (_, log) = env.log_file("guardian");
    let mut guardian = cmd
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(listener)))
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let line = read_line_timeout(guardian.stdout.take().unwrap(), Duration::from_secs(20)).expect("ready line");
    let ready: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ready["event"], "ready", "{line}");
    assert_eq!(ready["socket"], json!(sock), "the ready line names the passed socket: {line}");
    assert_eq!(ready["pid"], json!(guardian.id()), "{line}");
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("a notification");
    assert_eq!(&buf[..n], b"READY=1\n");

    // A release through the passed socket.
    let mcp = env.mcp_at(&sock, &[]).await;
    let thread = "systemd";
    mcp.init(&env.ws, thread).await;
    let out = mcp.bash(thread, "env").await;
    let out = out["output"].as_str().unwrap();
    assert!(out.contains("WINX_EXECUTION_ID="), "{out}");
    for var in ["LISTEN_FDS=", "LISTEN_PID=", "NOTIFY_SOCKET="] {
        assert!(!out.contains(var), "a command inherited {var}: {out}");
    }
    let helper = env.session_dir(thread).join("h.txt");
    fs::write(&helper, b"x\n").unwrap();
    let (rev, generation) = mcp.read_helper(thread, &helper).await;
    let r = mcp.edit(release_req(thread, &env.ws, &[(&helper, &rev, &generation)])).await;
    assert_eq!(r["status"], "completed", "{r}");
    assert!(!helper.exists());
    mcp.stop().await;

    // SIGTERM: STOPPING=1, exit 0, and systemd's socket file stays.
    let pid = rustix::process::Pid::from_raw(guardian.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let n = notify.recv(&mut buf).expect("a stopping notification");
    assert_eq!(&buf[..n], b"STOPPING=1\n");
    assert_eq!(guardian.wait().unwrap().code(), Some(0));
    assert!(sock.exists(), "the guardian removed the socket systemd owns");
}
