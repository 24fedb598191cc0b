//! No move escapes liveness (real guardian and MCP frontend processes, as
//! root in cgroup mode): a process a command started that moves itself into
//! another cgroup — as `systemd-run --user --scope` and a tmux built with
//! systemd support do — still blocks its session's releases, wherever it
//! moved, also after it then calls `setsid` and clears its environment, and
//! across a guardian SIGKILL and restart. And the `in_use` holders no
//! descriptor table shows: a descriptor in flight over `SCM_RIGHTS`, a
//! thread that unshared its descriptor table, a loop device's backing file;
//! and a peer that said hello and then exec'd another program.
//!
//! Tests that need root and cgroup mode say so and skip elsewhere. A mover
//! ends by itself once its test's directory is gone (a failed test leaves
//! no process behind).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::blocked::{call, completes_after, denied, helper};
use crate::support::{eventually, read_line_timeout, Env, Mcp};
use serde_json::json;

/// A world in cgroup mode, or `None` (printed) where it cannot be had.
async fn cgroup_world() -> Option<(Env, Mcp)> {
    let mut env = Env::new();
    env.start_guardian();
    if env.ready.as_ref().unwrap()["liveness"] != "cgroup" {
        eprintln!("SKIPPED: cgroup mode is not available here (not root, or no cgroup v2 mount)");
        return None;
    }
    let mcp = env.mcp(&[]).await;
    Some((env, mcp))
}

/// The cgroup2 mount point.
fn cgroup2_mount() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().find(|l| l.split(" - ").nth(1).is_some_and(|r| r.starts_with("cgroup2 "))).unwrap();
    PathBuf::from(line.split(' ').nth(4).unwrap())
}

/// The cgroup v2 directory of `pid`.
fn cgroup_of(pid: i32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(cgroup2_mount().join(rel.trim_start_matches('/')))
}

/// Whether `pid`'s environment has the execution marker.
fn has_marker(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|e| e.split(|b| *b == 0).any(|v| v.starts_with(b"WINX_EXECUTION_ID=")))
        .unwrap_or(false)
}

/// The session id of `pid`.
fn sid_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 2..].split(' ').nth(3)?.parse().ok()
}

/// A process a command of `thread` starts in the background: it moves itself
/// into `dest`, writes its pid, waits for `dir/go` (then, with `scrub`,
/// calls `setsid` and clears its environment), and runs until `dir/stop`
/// exists. Returns its pid once it is in `dest`.
async fn start_mover(env: &Env, mcp: &Mcp, thread: &str, dest: &Path, dir: &Path, scrub: bool) -> i32 {
    std::fs::create_dir_all(dir).unwrap();
    let (pidfile, go, stop) = (dir.join("pid"), dir.join("go"), dir.join("stop"));
    let after = if scrub {
        format!(
            "exec setsid env -i sh -c 'while [ ! -e {} ] && [ -d {} ]; do sleep 0.05; done'",
            stop.display(),
            dir.display()
        )
    } else {
        format!("while [ ! -e {} ] && [ -d {} ]; do sleep 0.05; done", stop.display(), dir.display())
    };
    let script = format!(
        "echo $$ > {}/cgroup.procs || exit 9; echo $$ > {}; while [ ! -e {} ] && [ -d {} ]; do sleep 0.05; done; {after}",
        dest.display(),
        pidfile.display(),
        go.display(),
        dir.display()
    );
    let file = dir.join("mover.sh");
    std::fs::write(&file, script).unwrap();
    // `nohup`: a job of the thread's shell outlives the hangup of the
    // shell's terminal when the guardian is killed only if it ignores it;
    // `set +m`: in the shell's process group (not a job of its own, which
    // would lead its group and make `setsid` fork), as under `bash -c`.
    let cmd = format!("set +m; nohup bash {} >/dev/null 2>&1 </dev/null & set -m; echo started", file.display());
    let v = call(mcp, "BashCommand", json!({"thread_id": thread, "command": cmd})).await;
    assert!(v["output"].as_str().unwrap_or_default().contains("started"), "{v}");
    let mut pid = 0;
    eventually(10, "the mover to write its pid", || {
        pid = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        pid != 0
    });
    eventually(10, "the mover to be in its destination", || cgroup_of(pid).as_deref() == Some(dest));
    let _ = env;
    pid
}

/// Item 1 of the issue: five destinations, each blocking its session (the
/// subtree root and `executions/` block every session), also after the
/// guardian is SIGKILLed and restarted; each session's release completes
/// once its process ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_a_process_that_moves_itself_out_still_blocks_also_across_a_restart() {
    let Some((mut env, mcp)) = cgroup_world().await else { return };
    let guardian = env.ready.as_ref().unwrap()["pid"].as_i64().unwrap() as i32;
    let leaf = cgroup_of(guardian).unwrap();
    assert!(leaf.ends_with("guardian"), "{}", leaf.display());
    let subtree = leaf.parent().unwrap().to_path_buf();
    let elsewhere = cgroup2_mount().join(format!("winx-e2e-elsewhere-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    let dests =
        [cgroup2_mount(), elsewhere.clone(), subtree.join("guardian"), subtree.clone(), subtree.join("executions")];
    let mut world = Vec::new();
    for (i, dest) in dests.iter().enumerate() {
        let thread = format!("t{i}");
        mcp.init(&env.ws, &thread).await;
        let h = helper(&env, &mcp, &thread, "used.py").await;
        let dir = env.root.join(format!("mover-{i}"));
        let pid = start_mover(&env, &mcp, &thread, dest, &dir, false).await;
        let d = denied(&env, &mcp, &thread, &h, "execution_active").await;
        assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "{}: {d}", dest.display());
        world.push((thread, h, dir, pid));
    }
    env.kill_guardian();
    env.start_guardian();
    for (thread, h, _, pid) in &world {
        mcp.init(&env.ws, thread).await;
        let d = denied(&env, &mcp, thread, h, "execution_active").await;
        assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "after a restart: {d}");
    }
    // The subtree root's and `executions/`'s movers block every session:
    // all stop, then every session's release completes.
    for (_, _, dir, pid) in &world {
        std::fs::write(dir.join("go"), "").unwrap();
        std::fs::write(dir.join("stop"), "").unwrap();
        eventually(10, "the mover to exit", || !Path::new(&format!("/proc/{pid}")).exists());
    }
    for (thread, h, _, _) in &world {
        completes_after(&env, &mcp, thread, h, "execution_active", Duration::from_secs(20)).await;
    }
    let _ = std::fs::remove_dir(&elsewhere);
    mcp.stop().await;
}

/// A process that moves out of its cgroup and then calls `setsid` and
/// clears its environment, after a look saw it: remembered, it still blocks,
/// also after the guardian is SIGKILLed (it is then nobody's child, in no
/// cgroup of the subtree, without marker, group or session of its command)
/// and a new guardian started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_a_process_that_moves_then_calls_setsid_stays_remembered() {
    let Some((mut env, mcp)) = cgroup_world().await else { return };
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "used.py").await;
    let elsewhere = cgroup2_mount().join(format!("winx-e2e-setsid-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).unwrap();
    let dir = env.root.join("mover");
    let pid = start_mover(&env, &mcp, "t1", &elsewhere, &dir, true).await;
    // A look sees it (marker, group, session): the release is refused.
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    std::fs::write(dir.join("go"), "").unwrap();
    eventually(10, "the mover to leave its session and environment", || sid_of(pid) == Some(pid) && !has_marker(pid));
    let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
    assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "{d}");
    env.kill_guardian();
    env.start_guardian();
    mcp.init(&env.ws, "t1").await;
    let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
    assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "after a restart: {d}");
    std::fs::write(dir.join("stop"), "").unwrap();
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(20)).await;
    let _ = std::fs::remove_dir(&elsewhere);
    mcp.stop().await;
}

async fn world() -> (Env, Mcp) {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    (env, mcp)
}

/// Runs `program` (Python) with `args`, waits for its first line `ready`.
fn python(program: &str, args: &[&str]) -> std::process::Child {
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(program)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let line = read_line_timeout(child.stdout.take().unwrap(), Duration::from_secs(10)).unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// A descriptor in flight over `SCM_RIGHTS` (sent, not yet received, the
/// sender's own closed): no descriptor table shows it, the kernel's lease
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_in_flight_is_in_use() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "sent.txt").await;
    let program = "import os,socket,sys,time\n\
a,b=socket.socketpair()\n\
fd=os.open(sys.argv[1],os.O_RDONLY)\n\
socket.send_fds(a,[b'x'],[fd])\n\
os.close(fd)\n\
print('ready',flush=True)\n\
time.sleep(60)\n";
    let mut holder = python(program, &[h.0.to_str().unwrap()]);
    let d = denied(&env, &mcp, "t1", &h, "in_use").await;
    assert!(d["message"].as_str().unwrap_or_default().contains("no descriptor table shows"), "{d}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    completes_after(&env, &mcp, "t1", &h, "in_use", Duration::from_secs(5)).await;
    mcp.stop().await;
}

/// A thread that unshared its descriptor table and holds the helper there:
/// `/proc/<pid>/fd` does not show it, `/proc/<pid>/task/<tid>/fd` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_with_its_own_descriptor_table_is_found() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "thread.txt").await;
    let program = r#"import ctypes,os,sys,threading,time
libc=ctypes.CDLL(None,use_errno=True)
def hold():
    assert libc.unshare(0x400)==0, ctypes.get_errno()
    os.open(sys.argv[1],os.O_RDONLY)
    print('ready',flush=True)
    time.sleep(60)
threading.Thread(target=hold,daemon=True).start()
time.sleep(60)
"#;
    let mut holder = python(program, &[h.0.to_str().unwrap()]);
    let d = denied(&env, &mcp, "t1", &h, "in_use").await;
    assert!(d["message"].as_str().unwrap_or_default().contains(&holder.id().to_string()), "{d}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    completes_after(&env, &mcp, "t1", &h, "in_use", Duration::from_secs(5)).await;
    mcp.stop().await;
}

/// A loop device backed by the helper (root): the kernel holds it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_device_backing_file_is_in_use() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: a loop device needs root");
        return;
    }
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let path = env.session_dir("t1").join("disk.img");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let (rev, generation) = mcp.read_helper("t1", &path).await;
    let h = (path.clone(), rev, generation);
    let out = std::process::Command::new("losetup").args(["--find", "--show"]).arg(&path).output();
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        other => {
            eprintln!("SKIPPED: no loop device can be set up here: {other:?}");
            mcp.stop().await;
            return;
        }
    };
    let d = denied(&env, &mcp, "t1", &h, "in_use").await;
    let detached = std::process::Command::new("losetup").args(["-d", &dev]).status().unwrap();
    assert!(detached.success());
    assert!(d["message"].as_str().unwrap_or_default().contains("no descriptor table shows"), "{d}");
    completes_after(&env, &mcp, "t1", &h, "in_use", Duration::from_secs(10)).await;
    mcp.stop().await;
}

/// A peer that said hello (with the frontend's client string) is exempt
/// only while its connection is open and it runs the guardian's own
/// executable: one that hung up and exec'd `sleep`, or that keeps its
/// connection open but runs another program, holds the helper like any
/// process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_proves_nothing_once_the_peer_hung_up_or_runs_another_program() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "peer.txt").await;
    let hello = r#"import json,os,socket,sys,time
s=socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(json.dumps({'id':1,'op':'hello','protocol':1,'client':'winx-release-mcp/0.1.0'}).encode()+b'\n')
assert b'"ok":true' in s.recv(65536)
fd=os.open(sys.argv[2],os.O_RDONLY)
os.set_inheritable(fd,True)
if sys.argv[3]=='exec':
    s.close()
    print('ready',flush=True)
    os.execvp('sleep',['sleep','60'])
print('ready',flush=True)
time.sleep(60)
"#;
    for how in ["exec", "stay"] {
        let mut peer = python(hello, &[env.sock.to_str().unwrap(), h.0.to_str().unwrap(), how]);
        if how == "exec" {
            eventually(10, "the peer to exec sleep", || {
                std::fs::read_to_string(format!("/proc/{}/comm", peer.id())).is_ok_and(|c| c.trim() == "sleep")
            });
        }
        let d = denied(&env, &mcp, "t1", &h, "in_use").await;
        assert!(d["message"].as_str().unwrap_or_default().contains(&peer.id().to_string()), "{how}: {d}");
        peer.kill().unwrap();
        peer.wait().unwrap();
    }
    completes_after(&env, &mcp, "t1", &h, "in_use", Duration::from_secs(5)).await;
    mcp.stop().await;
}
