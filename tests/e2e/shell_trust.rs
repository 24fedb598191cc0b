//! The shell's idle rule checks what it trusted (issue 54), end to end
//! through the MCP frontend against a real guardian:
//! - a shell with an `EXIT` trap and a `TMOUT` is idle by every other rule
//!   (its hook reported, its terminal is quiet, bash waits on descriptor 0,
//!   nothing else lives), yet bash logs itself out after `TMOUT` seconds
//!   and its trap reads the helper: it is busy while it holds them, and
//!   `BashCommand` says why;
//! - an `exec`'d program that forges the hook's report and then waits in
//!   `select` on descriptor 0 while a second thread reads the helper later
//!   is not the shell: busy.

use std::time::Duration;

use crate::support::blocked::{call, completes_after, denied, helper};
use crate::support::{eventually, Env, Mcp};
use serde_json::{json, Value};

async fn world() -> (Env, Mcp) {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    (env, mcp)
}

async fn command(mcp: &Mcp, cmd: &str, wait: u64) -> Value {
    call(mcp, "BashCommand", json!({"thread_id": "t1", "command": cmd, "wait_for_seconds": wait})).await
}

/// `trap 'cat $H > out' EXIT; TMOUT=8`, then a release: refused, naming
/// the trap and the timer, and `status_check` says why. Once bash logged
/// itself out and its trap read the helper, the release completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_with_an_exit_trap_and_tmout_is_busy_and_says_why() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "t.py").await;
    let out = env.root.join("trap-out");
    let cmd = format!("H={}; trap 'cat \"$H\" > {}' EXIT; TMOUT=8", h.0.display(), out.display());
    let v = command(&mcp, &cmd, 5).await;
    assert_eq!(v["status"], "completed", "{v}");
    let why = v["shell_busy"].as_str().unwrap_or_default();
    assert!(why.contains("EXIT") && why.contains("TMOUT=8"), "{v}");
    let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
    let msg = d["message"].as_str().unwrap_or_default();
    assert!(msg.contains("EXIT") && msg.contains("TMOUT"), "{d}");
    let s = call(&mcp, "BashCommand", json!({"thread_id": "t1", "status_check": true, "wait_for_seconds": 0})).await;
    assert!(s["shell_busy"].as_str().is_some_and(|w| w.contains("TMOUT")), "{s}");
    // Bash logs itself out at its timeout and runs the trap, which finds
    // the helper still there.
    eventually(40, "the trap to read the helper", || std::fs::read_to_string(&out).is_ok_and(|s| s == "helper t.py\n"));
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(20)).await;
    mcp.stop().await;
}

/// A trap alone keeps the shell busy until it is removed; a trap that
/// ignores a signal runs nothing and does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_keeps_the_shell_busy_until_it_is_removed() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "u.py").await;
    let v = command(&mcp, "trap 'echo bye' EXIT; trap '' HUP", 5).await;
    assert!(v["shell_busy"].as_str().is_some_and(|w| w.contains("bye")), "{v}");
    let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
    assert!(d["message"].as_str().unwrap_or_default().contains("echo bye"), "{d}");
    let v = command(&mcp, "trap - EXIT", 5).await;
    assert!(v["shell_busy"].is_null(), "{v}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(10)).await;
    mcp.stop().await;
}

/// `exec python3 forger.py`: it writes the hook's report to descriptor 3,
/// reads the acknowledgement, and waits in `select` on descriptor 0 in its
/// main thread while a second thread reads the helper once told to. The
/// release is refused while it runs (it is not the shell bash was
/// started as, and runs two threads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execd_forger_of_the_prompt_report_is_busy() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "f.py").await;
    let (forger, out, go) = (env.root.join("forger.py"), env.root.join("forged-out"), env.root.join("go"));
    std::fs::write(
        &forger,
        r#"import os,select,sys,threading,time
h,out,go=sys.argv[1:4]
os.write(3,b'P 0\n')
ack=b''
while not ack.endswith(b'\n'):
    ack+=os.read(3,64)
def later():
    while not os.path.exists(go):
        time.sleep(0.05)
    try:
        data=open(h).read()
    except OSError as e:
        data='gone: %s\n'%e
    open(out,'w').write(data)
    os._exit(0)
threading.Thread(target=later,daemon=True).start()
select.select([0],[],[])
"#,
    )
    .unwrap();
    let cmd = format!("exec python3 {} {} {} {}", forger.display(), h.0.display(), out.display(), go.display());
    command(&mcp, &cmd, 3).await;
    // The forger waits in select with its second thread started.
    let pid = {
        let mut pid = 0;
        eventually(10, "the forger to run two threads", || {
            pid = env
                .own_processes()
                .into_iter()
                .find(|p| {
                    std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("forger.py"))
                })
                .unwrap_or(0);
            pid != 0
                && std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|s| s.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Threads:", "2"]))
        });
        pid
    };
    for _ in 0..3 {
        let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
        assert!(d["message"].as_str().unwrap_or_default().contains(&pid.to_string()), "{d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    std::fs::write(&go, "").unwrap();
    eventually(10, "the forger's thread to read the helper", || {
        std::fs::read_to_string(&out).is_ok_and(|s| s == "helper f.py\n")
    });
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(20)).await;
    mcp.stop().await;
}
