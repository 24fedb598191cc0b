//! End to end: who owns the session. A killed, older, embedded or foreign
//! guardian, running and queued commands (a busy shell refuses one; the
//! guardian's one-shot `exec` queues it), and a guardian the frontend
//! launches itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{assert_completed, helper, p, refused, release_req, snapshot, without_members, world, Env};
use serde_json::{json, Value};
use winx_release_protocol::client::fake::{FakeGuardian, Handler};

/// A killed guardian is `owner_unavailable`; a new guardian of the same
/// data directory (a restart) takes the thread over without a new
/// `Initialize`: what the old shell left running still refuses its
/// releases (`execution_active`, contract sections 3 and 4), and once it
/// ended the release goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_guardian_is_owner_unavailable_and_its_successor_takes_over() {
    let (mut env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "owned\n").await;
    let left = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "nohup sleep 4 >/dev/null 2>&1 &"})).await;
    assert_eq!(left["status"], "completed", "{left}");
    env.kill_guardian();
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "owner_unavailable").await;
    let bash = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "true"})).await;
    assert_eq!(bash["errorCode"], "owner_unavailable", "{bash}");

    env.start_guardian();
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "execution_active").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let v = mcp.edit(release_req("t1", &env.ws, &[(&h, &rev, &generation)])).await;
        if v["status"] == "completed" {
            assert_completed(&v, &[&h]);
            break;
        }
        assert_eq!(v["errorCode"], "execution_active", "{v}");
        assert!(std::time::Instant::now() < deadline, "still refused after the leftover ended: {v}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    mcp.stop().await;
}

/// A guardian of another data directory answering at the socket after the
/// one the thread was initialised with is gone never takes the thread
/// over: it could not know the commands the thread started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guardian_of_another_data_directory_does_not_take_over() {
    let (mut env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "owned\n").await;
    env.kill_guardian();
    let other = tempfile::tempdir().unwrap();
    env.start_guardian_in(other.path());
    let v = refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "owner_unavailable")
        .await;
    assert!(v["message"].as_str().is_some_and(|m| m.contains("another data directory")), "{v}");
    mcp.stop().await;
}

/// A guardian of an older kind (the protocol crate's scripted guardian):
/// answers `hello` with `caps`, `session_open`, and `unknown_op` to
/// everything else; records every op it receives.
fn old_guardian(sock: &Path, caps: &'static [&'static str]) -> FakeGuardian {
    let handler: Arc<Handler> = Arc::new(move |op: &str, _req: &Value| {
        Some(match op {
            "hello" => json!({"ok": true, "protocol": 1, "guardian": "old-guardian/0.0.1",
                "platform": "linux", "capabilities": caps, "instance": "0123456789abcdef", "pid": 1}),
            "session_open" => json!({"ok": true, "session_dir": "", "instance": "0123456789abcdef"}),
            other => json!({"ok": false, "error": {"code": "unknown_op", "message": format!("unknown op {other:?}")}}),
        })
    });
    FakeGuardian::start(sock.to_path_buf(), handler)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_guardian_is_owner_unsupported_and_never_sent_a_release() {
    for caps in [&["executions"][..], &["temporary_release", "executions"][..]] {
        // Without the capability the release is never sent; with it, an
        // `unknown_op` answer counts the same.
        let env = Env::new();
        let fake = old_guardian(&env.sock, caps);
        let mcp = env.mcp(&[]).await;
        let v = mcp.init(&env.ws, "t1").await;
        let expected = if caps.contains(&"temporary_release") {
            json!({"available": true, "reason": null})
        } else {
            json!({"available": false, "reason": "owner_unsupported"})
        };
        assert_eq!(v["temporary_release"], expected, "{v}");
        let h = env.session_dir("t1").join("h.py");
        std::fs::write(&h, "old\n").unwrap();
        let (rev, generation) = mcp.read_helper("t1", &h).await;
        refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "owner_unsupported")
            .await;
        assert_eq!(std::fs::read(&h).unwrap(), b"old\n");
        let ops = fake.ops();
        assert_eq!(ops.contains(&"release".to_owned()), caps.contains(&"temporary_release"), "{ops:?}");
        mcp.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_runtime_never_releases() {
    let env = Env::new();
    let mcp = env.mcp(&["--embedded"]).await;
    let v = mcp.init(&env.ws, "t1").await;
    assert_eq!(v["temporary_release"], json!({"available": false, "reason": "embedded_runtime"}), "{v}");
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "embedded\n").await;
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "embedded_runtime").await;
    assert!(h.exists());
    assert!(!env.sock.exists(), "no guardian is launched for an embedded frontend");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_commands_block_release_and_keep_running() {
    let (env, mcp) = world().await;
    let mut running = Vec::new();
    for (thread, background) in [("fg", false), ("bg", true)] {
        mcp.init(&env.ws, thread).await;
        let (h, rev, generation) = helper(&env, &mcp, thread, "h.py", "busy\n").await;
        let v = mcp
            .call(
                "BashCommand",
                json!({"thread_id": thread, "command": "sleep 30", "wait_for_seconds": 0, "is_background": background}),
            )
            .await;
        assert_eq!(v["status"], "running", "{v}");
        assert_eq!(v["exit_code"], Value::Null, "{v}");
        let id = v["command_id"].as_str().expect("command_id").to_owned();
        let req = release_req(thread, &env.ws, &[(&h, &rev, &generation)]);
        refused(&env, &mcp, req, "denied", "execution_active").await;
        running.push((thread, id, h));
    }
    // The inline wait returned and the release was refused: the commands
    // still run, untouched.
    for (thread, id, h) in &running {
        let v = mcp
            .call(
                "BashCommand",
                json!({"thread_id": thread, "status_check": true, "command_id": id, "wait_for_seconds": 0}),
            )
            .await;
        assert_eq!(v["status"], "running", "{v}");
        assert_eq!(v["command_id"], json!(id), "{v}");
        assert!(h.exists());
    }
    mcp.stop().await;
}

/// The thread's shell runs one command at a time: a command sent while it
/// is busy is refused (`execution_active`) and nothing is typed (it never
/// runs later either: there is no queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sent_to_a_busy_shell_is_refused_and_never_typed() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "queued\n").await;
    let first = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "sleep 30", "wait_for_seconds": 0})).await;
    assert_eq!(first["status"], "running", "{first}");
    let second = mcp
        .call("BashCommand", json!({"thread_id": "t1", "command": "rm -f $WINX_TEMP_DIR/h.py", "wait_for_seconds": 0}))
        .await;
    assert_eq!((second["status"].as_str(), second["errorCode"].as_str()), (Some("denied"), Some("execution_active")));
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "execution_active").await;
    // Ctrl-c reaches whatever runs in the terminal's foreground: sent
    // before the shell forked `sleep`, it is the shell's; sent again then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let v = loop {
        let v = mcp
            .call("BashCommand", json!({"thread_id": "t1", "send_specials": ["Ctrl-c"], "wait_for_seconds": 1}))
            .await;
        if v["status"] == "completed" || std::time::Instant::now() > deadline {
            break v;
        }
    };
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["command_id"], first["command_id"], "{v}");
    let v = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "ls $WINX_TEMP_DIR"})).await;
    assert!(v["output"].as_str().unwrap().contains("h.py"), "the refused command ran: {v}");
    assert!(h.exists());
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_launches_a_detached_guardian_when_none_answers() {
    let env = Env::new();
    let mcp = env.mcp(&[]).await;
    let v = mcp.init(&env.ws, "t1").await;
    assert_eq!(v["temporary_release"], json!({"available": true, "reason": null}), "{v}");
    assert!(env.sock.exists());
    assert!(env.sock.parent().unwrap().join("guardian.log").exists());

    // It listens, in a process group of its own, with stdin closed.
    let mut s = UnixStream::connect(&env.sock).unwrap();
    s.write_all(b"{\"id\":1,\"op\":\"hello\",\"protocol\":1,\"client\":\"test\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap()).read_line(&mut line).unwrap();
    let hello: Value = serde_json::from_str(&line).unwrap();
    let pid = hello["pid"].as_u64().expect("guardian pid");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    assert_eq!(fields[2], pid.to_string(), "process group = its own pid: {stat}");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap(), Path::new("/dev/null"));

    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "launched\n").await;
    assert_completed(&mcp.edit(release_req("t1", &env.ws, &[(&h, &rev, &generation)])).await, &[&h]);

    // It outlives the frontend.
    mcp.stop().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = UnixStream::connect(&env.sock).expect("the guardian still listens");
    again.write_all(b"{\"id\":1,\"op\":\"hello\",\"protocol\":1,\"client\":\"test\"}\n").unwrap();
    let mut buf = [0u8; 16];
    assert!(again.read(&mut buf).unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guardian_refuses_another_uid() {
    let root = rustix::process::getuid().is_root();
    let tools = Path::new("/usr/bin/setpriv").exists() && Path::new("/usr/bin/python3").exists();
    if !root || !tools {
        eprintln!("skipped: needs root, /usr/bin/setpriv and /usr/bin/python3");
        return;
    }
    let mut env = Env::new();
    env.start_guardian();
    // Let `nobody` reach the socket: the permission bits are not what is tested.
    for dir in [&env.root, &env.sock.parent().unwrap().to_path_buf()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    std::fs::set_permissions(&env.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect_failed", e.errno); sys.exit(0)
print("connected")
try:
    s.sendall(b'{"id":1,"op":"hello","protocol":1,"client":"nobody"}\n')
except OSError:
    pass
try:
    data = s.recv(65536)
    print("answered" if data else "closed", data)
except socket.timeout:
    print("timeout")
except OSError as e:
    print("closed_with_error", e.errno)
"#;
    let out = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, p(&env.sock)])
        .env_clear()
        .output()
        .expect("run the probe as nobody");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "probe failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("connected\n"), "{text}");
    assert!(text.contains("\nclosed"), "the connection is closed without an answer: {text}");
    assert!(!text.contains("answered"), "{text}");

    // The owner's own uid is still served.
    let mut s = UnixStream::connect(&env.sock).unwrap();
    s.write_all(b"{\"id\":1,\"op\":\"hello\",\"protocol\":1,\"client\":\"owner\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["ok"], true, "{line}");
}

/// A foreground command sent through the guardian's one-shot `exec` while
/// another runs is queued (a pending action): a release of the session is
/// `pending_actions` before anything is opened, and once the queue has run
/// the same request is judged on its target.
#[test]
fn a_queued_exec_makes_a_release_pending_actions() {
    let mut env = Env::new();
    env.start_guardian();
    let s = UnixStream::connect(&env.sock).unwrap();
    let mut lines = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut ask = |v: Value| -> Value {
        w.write_all(format!("{v}\n").as_bytes()).unwrap();
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(ask(json!({"id": 1, "op": "hello", "protocol": 1, "client": "test"}))["ok"], true);
    let ws = p(&env.ws);
    let open = ask(json!({"id": 2, "op": "session_open", "workspace": ws, "thread_id": "tq"}));
    let dir = open["session_dir"].as_str().unwrap_or_else(|| panic!("{open}")).to_owned();
    let fg = |id: u64, command: &str| {
        json!({"id": id, "op": "exec", "workspace": ws, "thread_id": "tq", "command": command,
               "wait_for_seconds": 0, "is_background": false})
    };
    let first = ask(fg(3, "sleep 5"));
    assert_eq!(first["status"], "running", "{first}");
    let queued = ask(fg(4, "true"));
    assert_eq!(queued["status"], "queued", "{queued}");
    let pin = json!({"dev": 1, "ino": 1, "size": 0, "ctime_sec": 0, "ctime_nsec": 0,
                     "sha256": "0".repeat(64), "btime": null, "generation": null});
    let release = json!({"id": 5, "op": "release", "workspace": ws, "thread_id": "tq",
                         "targets": [{"path": format!("{dir}/h.py"), "pin": pin}]});
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    let r = ask(release.clone());
    assert_eq!(before, without_members(snapshot(&[&env.ws, &env.data])), "a refusal changed the filesystem");
    assert_eq!(
        (&r["report"]["status"], &r["report"]["errorCode"]),
        (&json!("denied"), &json!("pending_actions")),
        "{r}"
    );
    // The queued command ran once the first ended: nothing is pending, and
    // the target (never written) is what the release is judged on.
    let done = ask(json!({"id": 6, "op": "exec_status", "thread_id": "tq", "command_id": queued["command_id"],
                          "wait_for_seconds": 20}));
    assert_eq!(done["status"], "completed", "{done}");
    let again = ask(release);
    assert_ne!(again["report"]["errorCode"], "pending_actions", "{again}");
    assert_ne!(again["report"]["errorCode"], "execution_active", "{again}");
}
