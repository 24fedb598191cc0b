//! No process decides whom it belongs to (issue 54), end to end through
//! the MCP frontend against a real guardian, in both liveness modes where
//! they apply:
//! - a command of thread A starts a child that calls `setsid`, clears its
//!   environment and takes thread B's shell's marker (and, in cgroup mode,
//!   joins B's shell's cgroup): reparented to A's shell's monitor, it
//!   still keeps A's releases refused while it runs, and then reads A's
//!   helper;
//! - a job of thread A's shell, orphaned when the shell exits, stays A's
//!   alone: it descends from A's shell's monitor;
//! - a process of the user outside the guardian whose environment cannot
//!   be read (a zombie leader with a live thread) does not refuse a
//!   thread's releases: ancestry decides, and it descends from no process
//!   of the thread.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::blocked::{call, completes_after, denied, helper};
use crate::support::{eventually, read_line_timeout, Env, Mcp};
use serde_json::json;

/// A world whose guardian runs in `mode` (`"cgroup"`, which then must be
/// in force, else `None` (printed); `"proc"`, forced).
async fn world(mode: &str) -> Option<(Env, Mcp)> {
    let mut env = Env::new();
    if mode == "proc" {
        env.start_guardian_with(&["env", "WINX_LIVENESS=proc"]);
    } else {
        env.start_guardian();
    }
    let got = env.ready.as_ref().unwrap()["liveness"].as_str().unwrap_or_default().to_owned();
    if got != mode {
        assert_eq!(mode, "cgroup", "the guardian runs {got}, not {mode}");
        eprintln!("SKIPPED: cgroup mode is not available here (not root, or no cgroup v2 mount)");
        return None;
    }
    let mcp = env.mcp(&[]).await;
    Some((env, mcp))
}

/// The cgroup v2 directory of `pid`.
fn cgroup_of(pid: i32) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let line = info.lines().find(|l| l.split(" - ").nth(1).is_some_and(|r| r.starts_with("cgroup2 ")))?;
    let mount = PathBuf::from(line.split(' ').nth(4)?);
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(mount.join(rel.trim_start_matches('/')))
}

/// The value of `WINX_EXECUTION_ID` in `pid`'s environment.
fn marker_of(pid: i32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"WINX_EXECUTION_ID="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The parent of `pid`.
fn ppid_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// The monitor of `thread`'s shell (the shell's parent).
async fn monitor_of(mcp: &Mcp, thread: &str) -> i32 {
    let v = call(mcp, "BashCommand", json!({"thread_id": thread, "command": "echo \"ppid=$PPID.\""})).await;
    let out = v["output"].as_str().unwrap_or_default();
    out.split("ppid=")
        .nth(1)
        .and_then(|r| r.split('.').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{v}"))
}

/// The execution id of `thread`'s shell (its marker).
async fn shell_id(mcp: &Mcp, thread: &str) -> String {
    let v = call(mcp, "BashCommand", json!({"thread_id": thread, "command": "echo \"id=$WINX_EXECUTION_ID.\""})).await;
    let out = v["output"].as_str().unwrap_or_default();
    let id = out.split("id=").nth(1).and_then(|r| r.split('.').next()).unwrap_or_default().to_owned();
    assert!(id.len() == 16, "{v}");
    id
}

/// Thread A (`t1`) starts a process that leaves A's session, clears its
/// environment and wears thread B's (`t2`) shell's marker (with
/// `cgroup`, moves into B's shell's cgroup too), then waits for `go` and
/// reads A's helper. A's releases must be refused while it runs; once it
/// read the helper and ended, A's release completes.
async fn wearing_another_threads_execution(mode: &str, join_cgroup: bool) {
    let Some((env, mcp)) = world(mode).await else { return };
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let h = helper(&env, &mcp, "t1", "a.py").await;
    let b = shell_id(&mcp, "t2").await;
    let join = if join_cgroup {
        let guardian = env.ready.as_ref().unwrap()["pid"].as_i64().unwrap() as i32;
        let b_cgroup = cgroup_of(guardian).unwrap().parent().unwrap().join("executions").join(&b);
        assert!(b_cgroup.is_dir(), "{}", b_cgroup.display());
        format!("echo $$ > {}/cgroup.procs || exit 9; ", b_cgroup.display())
    } else {
        String::new()
    };
    let dir = env.root.join("wearer");
    std::fs::create_dir_all(&dir).unwrap();
    let (pidfile, go, out) = (dir.join("pid"), dir.join("go"), dir.join("out"));
    let script = format!(
        "{join}echo $$ > {pid}; while [ ! -e {go} ] && [ -d {dir} ]; do sleep 0.05; done; cat {h} > {out}",
        pid = pidfile.display(),
        go = go.display(),
        dir = dir.display(),
        h = h.0.display(),
        out = out.display()
    );
    std::fs::write(dir.join("wearer.sh"), script).unwrap();
    // `setsid -f`: forked, and its parent exits at once: reparented to A's
    // shell's monitor (before issue 54's monitor: to the guardian), in a
    // session of its own, with B's marker alone.
    let a_monitor = monitor_of(&mcp, "t1").await;
    let cmd = format!(
        "setsid -f env -i PATH=/usr/bin:/bin WINX_EXECUTION_ID={b} sh {} >/dev/null 2>&1 </dev/null; echo started",
        dir.join("wearer.sh").display()
    );
    let v = call(&mcp, "BashCommand", json!({"thread_id": "t1", "command": cmd})).await;
    assert!(v["output"].as_str().unwrap_or_default().contains("started"), "{v}");
    let mut pid = 0;
    eventually(10, "the wearer to write its pid", || {
        pid = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        pid != 0
    });
    let guardian = env.ready.as_ref().unwrap()["pid"].as_i64().unwrap() as i32;
    assert_eq!(ppid_of(a_monitor), Some(guardian));
    eventually(10, "the wearer to be an orphan of A's monitor", || ppid_of(pid) == Some(a_monitor));
    assert_eq!(marker_of(pid).as_deref(), Some(b.as_str()));
    if join_cgroup {
        assert!(cgroup_of(pid).is_some_and(|c| c.ends_with(&b)), "{:?}", cgroup_of(pid));
    }
    // Refused, naming it, on every try while it runs (B's claim takes
    // nothing away from A).
    for _ in 0..3 {
        let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
        assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "{d}");
    }
    // B's releases too: it wears B's marker (and cgroup).
    let hb = helper(&env, &mcp, "t2", "b.py").await;
    denied(&env, &mcp, "t2", &hb, "execution_active").await;
    std::fs::write(&go, "").unwrap();
    eventually(10, "the wearer to read A's helper", || {
        std::fs::read_to_string(&out).is_ok_and(|s| s == "helper a.py\n")
    });
    eventually(10, "the wearer to exit", || !Path::new(&format!("/proc/{pid}")).exists());
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(20)).await;
    completes_after(&env, &mcp, "t2", &hb, "execution_active", Duration::from_secs(20)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_a_process_wearing_another_threads_marker_still_blocks_its_own_thread() {
    wearing_another_threads_execution("proc", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_a_process_wearing_another_threads_marker_still_blocks_its_own_thread() {
    wearing_another_threads_execution("cgroup", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_a_process_in_another_threads_cgroup_with_its_marker_still_blocks_its_own_thread() {
    wearing_another_threads_execution("cgroup", true).await;
}

/// A process of the user beside the guardian, started after the thread's
/// shell, whose environment cannot be read (its main thread called
/// `pthread_exit` while another runs: a zombie leader, its memory map
/// gone): it descends from nothing of the thread, so the thread's
/// release completes while it runs.
async fn an_unreadable_stranger_does_not_refuse(mode: &str) {
    let Some((env, mcp)) = world(mode).await else { return };
    mcp.init(&env.ws, "t1").await;
    // The thread's shell runs before the stranger starts.
    shell_id(&mcp, "t1").await;
    let h = helper(&env, &mcp, "t1", "s.py").await;
    let program = "import ctypes,threading,time\n\
threading.Thread(target=lambda: time.sleep(60)).start()\n\
print('ready',flush=True)\n\
ctypes.CDLL(None).pthread_exit(None)\n";
    let mut stranger = std::process::Command::new("python3")
        .args(["-c", program])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let line = read_line_timeout(stranger.stdout.take().unwrap(), Duration::from_secs(10)).unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = stranger.id();
    eventually(10, "the stranger's main thread to exit", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
    });
    assert!(
        std::fs::read(format!("/proc/{pid}/environ")).map_or(true, |e| e.is_empty()),
        "its environment is readable"
    );
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(10)).await;
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_an_unreadable_process_outside_the_thread_does_not_refuse_its_release() {
    an_unreadable_stranger_does_not_refuse("proc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cgroup_an_unreadable_process_outside_the_thread_does_not_refuse_its_release() {
    an_unreadable_stranger_does_not_refuse("cgroup").await;
}

/// A job of thread A's shell (a child of the shell, whatever its marker)
/// that is orphaned when the shell exits stays A's alone: it is reparented
/// to A's shell's monitor (before issue 54's monitor, to the guardian,
/// where a look that had seen it as kin kept it A's). A's releases are
/// refused while it runs, B's are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_seen_as_kin_before_counts_for_its_thread_alone() {
    let Some((env, mcp)) = world("proc").await else { return };
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let h1 = helper(&env, &mcp, "t1", "k1.py").await;
    let h2 = helper(&env, &mcp, "t2", "k2.py").await;
    let dir = env.root.join("kin");
    std::fs::create_dir_all(&dir).unwrap();
    let job = format!("while [ -d {} ] && [ ! -e {}/stop ]; do sleep 0.05; done", dir.display(), dir.display());
    let v = call(
        &mcp,
        "BashCommand",
        json!({"thread_id": "t1", "command": format!("nohup sh -c '{job}' >/dev/null 2>&1 & disown; echo \"job=$!.\"")}),
    )
    .await;
    let out = v["output"].as_str().unwrap_or_default();
    let pid: i32 = out.split("job=").nth(1).and_then(|r| r.split('.').next()).and_then(|p| p.parse().ok()).unwrap();
    // A look sees it as a child of the shell: kin.
    let d = denied(&env, &mcp, "t1", &h1, "execution_active").await;
    assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "{d}");
    // The shell exits; the job is reparented to its monitor.
    let a_monitor = monitor_of(&mcp, "t1").await;
    call(&mcp, "BashCommand", json!({"thread_id": "t1", "command": "exit", "wait_for_seconds": 2})).await;
    eventually(10, "the job to be an orphan of A's monitor", || ppid_of(pid) == Some(a_monitor));
    let d = denied(&env, &mcp, "t1", &h1, "execution_active").await;
    assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "{d}");
    completes_after(&env, &mcp, "t2", &h2, "execution_active", Duration::from_secs(10)).await;
    std::fs::write(dir.join("stop"), "").unwrap();
    completes_after(&env, &mcp, "t1", &h1, "execution_active", Duration::from_secs(20)).await;
    mcp.stop().await;
}
