//! Execution liveness end to end (real guardian and MCP frontend
//! processes): a release waits for everything a session's commands started
//! — processes left behind, `setsid` daemons, commands of a guardian that
//! was SIGKILLed — and for any other process of the user that holds a
//! target open; a command that cannot start leaves its session usable.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::blocked::{call, completes_after, denied, helper};
use crate::support::{Env, Mcp};
use serde_json::{json, Value};

async fn world() -> (Env, Mcp) {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    (env, mcp)
}

/// The state letter and parent of `pid` (`/proc/<pid>/stat`), if it exists.
fn stat_of(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    Some((state, f.next()?.parse().ok()?))
}

async fn status_check(mcp: &Mcp, thread: &str, id: &str) -> Value {
    call(
        mcp,
        "BashCommand",
        json!({"thread_id": thread, "status_check": true, "command_id": id, "wait_for_seconds": 0}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_left_behind_process_blocks_release_until_it_exits() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "srv.py").await;
    let v = call(&mcp, "BashCommand", json!({"thread_id": "t1", "command": "sleep 3 & echo started"})).await;
    // Back at the shell's prompt, its output complete: completed, with the
    // job it left behind (which keeps releases refused).
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(v["still_running"].as_array().is_some_and(|p| !p.is_empty()), "{v}");
    assert!(v["output"].as_str().unwrap().contains("started"), "{v}");
    let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
    assert!(d["message"].as_str().is_some_and(|m| m.contains("left process")), "{d}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(15)).await;
    // Once nothing is left the command is completed, with the shell's code.
    let id = v["command_id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = status_check(&mcp, "t1", id).await;
        if s["status"] == "completed" {
            assert_eq!(s["exit_code"], 0, "{s}");
            break;
        }
        assert!(Instant::now() < deadline, "{s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status: Value =
        serde_json::from_slice(&std::fs::read(env.data.join("executions").join(id).join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["state"], "resolved", "{status}");
    assert!(status["ended_unix"].as_u64() >= status["leader_exited_unix"].as_u64(), "{status}");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_daemon_blocks_release() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "d.py").await;
    // Double fork: the subshell exits at once, the daemon is reparented and
    // leads its own session and process group; only its marker is left.
    let v = call(
        &mcp,
        "BashCommand",
        json!({"thread_id": "t1", "command": "( setsid sleep 3 >/dev/null 2>&1 </dev/null & ); echo forked"}),
    )
    .await;
    assert!(v["output"].as_str().unwrap().contains("forked"), "{v}");
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(15)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// Changed by issue 54: what a command leaves is reparented to its
/// execution's monitor, not to the guardian; a process becomes an orphan
/// of the guardian only when its monitor is killed (here by the command
/// itself, `kill -9 $PPID`: the shell's parent is its monitor). Such an
/// orphan lost its ancestry and counts for every session.
async fn an_orphan_nothing_accounts_for_blocks_every_session() {
    let mut env = Env::new();
    // The /proc fallback: in cgroup mode the orphan is in its execution's
    // cgroup and accounted for (tests/e2e/executions.rs).
    let guardian = env.start_guardian_with(&["env", "WINX_LIVENESS=proc"]) as i32;
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let h2 = helper(&env, &mcp, "t2", "other.py").await;
    // Scrubbed environment, own session: nothing attributes it to t1's
    // command, but it was reparented to the guardian.
    call(
        &mcp,
        "BashCommand",
        json!({"thread_id": "t1", "command": "( env -i setsid sleep 3 >/dev/null 2>&1 </dev/null & ); kill -9 $PPID; echo ok"}),
    )
    .await;
    let d = denied(&env, &mcp, "t2", &h2, "execution_active").await;
    let msg = d["message"].as_str().unwrap_or_default();
    assert!(msg.contains("reparented to the guardian") && msg.contains("process "), "{d}");
    // The message names the orphan, whose parent is now the guardian (a
    // child subreaper).
    let pid: i32 = msg.split("process ").nth(1).and_then(|r| r.split(' ').next()).and_then(|p| p.parse().ok()).unwrap();
    assert_eq!(stat_of(pid).map(|s| s.1), Some(guardian), "{d}");
    completes_after(&env, &mcp, "t2", &h2, "execution_active", Duration::from_secs(15)).await;
    // The guardian reaped it: no zombie child of the guardian is left.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stat_of(pid).is_some_and(|(state, ppid)| ppid == guardian && state == 'Z') {
        assert!(Instant::now() < deadline, "process {pid} stays a zombie of the guardian");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_guardian_finds_the_commands_of_a_killed_one() {
    let (mut env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "h.py").await;
    let v = call(
        &mcp,
        "BashCommand",
        // Made to outlive the hangup of its terminal when the guardian dies.
        json!({"thread_id": "t1", "command": "trap '' HUP; echo begun; sleep 6; echo finished", "is_background": true}),
    )
    .await;
    assert_eq!(v["status"], "running", "{v}");
    let id = v["command_id"].as_str().unwrap().to_owned();
    // The command has begun (its first line is in its output) before the
    // guardian is killed: on a loaded machine its shell may not have run
    // `echo` yet when `is_background` answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = status_check(&mcp, "t1", &id).await;
        if s["output"].as_str().is_some_and(|o| o.contains("begun")) {
            break;
        }
        assert!(Instant::now() < deadline, "the command never began: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.kill_guardian();
    env.start_guardian();
    mcp.init(&env.ws, "t1").await;
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    let s = status_check(&mcp, "t1", &id).await;
    assert_eq!(s["status"], "running", "{s}");
    assert!(s["output"].as_str().unwrap().contains("begun"), "{s}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(20)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = status_check(&mcp, "t1", &id).await;
        // Its terminal is gone with the old guardian: what it printed after
        // that reached no one; it is done once nothing of its shell runs.
        if s["status"] == "completed" {
            assert!(s["output"].as_str().unwrap().contains("begun"), "{s}");
            break;
        }
        assert!(Instant::now() < deadline, "{s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_background_answers_at_once() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let t = Instant::now();
    let v = call(&mcp, "BashCommand", json!({"thread_id": "t1", "command": "sleep 3", "is_background": true})).await;
    let took = t.elapsed();
    assert_eq!(v["status"], "running", "{v}");
    assert!(took < Duration::from_secs(1), "is_background took {took:?}");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_held_open_elsewhere_is_in_use() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "held.txt").await;
    // An unrelated process of the same user (this test's child, not a
    // command of the session) holds it open.
    let mut holder =
        std::process::Command::new("sleep").arg("30").stdin(std::fs::File::open(&h.0).unwrap()).spawn().unwrap();
    let d = denied(&env, &mcp, "t1", &h, "in_use").await;
    assert!(d["message"].as_str().is_some_and(|m| m.contains(&holder.id().to_string())), "{d}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The guardian itself opens and reads every target during the release:
    // that never counts.
    completes_after(&env, &mcp, "t1", &h, "in_use", Duration::from_secs(5)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_helper_is_in_use() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "mapped.bin").await;
    // Open, map, close the descriptor: only the mapping remains.
    let program = "import ctypes,os,sys,time\n\
libc=ctypes.CDLL(None,use_errno=True)\n\
libc.mmap.restype=ctypes.c_void_p\n\
libc.mmap.argtypes=[ctypes.c_void_p,ctypes.c_size_t,ctypes.c_int,ctypes.c_int,ctypes.c_int,ctypes.c_long]\n\
fd=os.open(sys.argv[1],os.O_RDONLY)\n\
p=libc.mmap(None,4096,1,1,fd,0)\n\
assert p not in (None,ctypes.c_void_p(-1).value)\n\
os.close(fd)\n\
print('mapped',flush=True)\n\
time.sleep(30)\n";
    let mut holder = std::process::Command::new("python3")
        .args(["-c", program, h.0.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let line = crate::support::read_line_timeout(holder.stdout.take().unwrap(), Duration::from_secs(10)).unwrap();
    assert_eq!(line.trim(), "mapped");
    let d = denied(&env, &mcp, "t1", &h, "in_use").await;
    assert!(d["message"].as_str().is_some_and(|m| m.contains("mapped")), "{d}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    completes_after(&env, &mcp, "t1", &h, "in_use", Duration::from_secs(5)).await;
    mcp.stop().await;
}

/// A `PATH` directory with links to the few programs these commands use
/// (`bash` left out until `with_bash`).
fn path_dir(root: &Path) -> PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["setsid", "sleep", "cat", "env"] {
        let target = ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists());
        if let Some(t) = target {
            std::os::unix::fs::symlink(t, bin.join(tool)).unwrap();
        }
    }
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_leaves_the_session_usable() {
    let mut env = Env::new();
    let bin = path_dir(&env.root);
    let path_var = format!("PATH={}", bin.display());
    env.start_guardian_with(&["env", &path_var]);
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    // No bash on the guardian's PATH: the spawn fails.
    let v = call(&mcp, "BashCommand", json!({"thread_id": "t1", "command": "echo hello"})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 127, "{v}");
    assert!(v["output"].as_str().unwrap().starts_with("failed to start:"), "{v}");
    // Then bash appears: the session was not wedged.
    let bash = ["/usr/bin/bash", "/bin/bash"].iter().map(Path::new).find(|p| p.exists()).expect("bash");
    std::os::unix::fs::symlink(bash, bin.join("bash")).unwrap();
    let v = call(&mcp, "BashCommand", json!({"thread_id": "t1", "command": "echo again"})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(v["output"].as_str().unwrap().contains("again"), "{v}");
    let h = helper(&env, &mcp, "t1", "after.txt").await;
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(5)).await;
    mcp.stop().await;
}
