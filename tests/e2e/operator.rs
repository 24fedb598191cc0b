//! The operator commands (contract section 2): `status`, `guardian --stop`,
//! `release` and `audit`, against a real guardian and frontend.

use std::fs;
use std::path::Path;
use std::process::Output;

use crate::support::*;
use serde_json::{json, Value};

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A background command of `thread` that runs until `gate` exists.
async fn blocker(mcp: &Mcp, thread: &str, gate: &Path) -> String {
    let cmd = format!("while [ ! -e '{}' ]; do sleep 0.05; done", p(gate));
    let v = mcp.call("BashCommand", json!({"thread_id": thread, "command": cmd, "is_background": true})).await;
    assert_eq!(v["status"], "running", "{v}");
    v["command_id"].as_str().expect("a command id").to_owned()
}

/// `status` names the guardian, its sessions (with their recorded mode)
/// and what runs; `guardian --stop` is refused, naming the command, while
/// it runs, and stops the guardian once it ended; `status` then says no
/// guardian answers (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_stop() {
    let mut env = Env::new();
    let pid = env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "op").await;
    let sock = p(&env.sock).to_owned();
    let out = env.command(&["status", "--json", "--socket", &sock]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!((v["running"].clone(), v["pid"].clone()), (json!(true), json!(pid)), "{v}");
    assert_eq!(v["liveness"], env.ready.as_ref().unwrap()["liveness"], "{v}");
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{v}");
    assert_eq!((sessions[0]["thread_id"].clone(), sessions[0]["mode_name"].clone()), (json!("op"), json!("wcgw")));
    assert_eq!(v["running_executions"], json!([]), "{v}");

    let gate = env.root.join("gate");
    let id = blocker(&mcp, "op", &gate).await;
    let v = stdout_json(&env.command(&["status", "--json", "--socket", &sock]).output().unwrap());
    assert_eq!(v["running_executions"][0]["command_id"], json!(id), "{v}");
    let human = env.command(&["status", "--socket", &sock]).output().unwrap();
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    assert!(human.contains(&format!("pid {pid}")) && human.contains(&id), "{human}");

    let out = env.command(&["guardian", "--stop", "--socket", &sock]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("execution_active") && err.contains(&id), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Still there.
    assert_eq!(env.command(&["status", "--socket", &sock]).output().unwrap().status.code(), Some(0));

    fs::write(&gate, b"").unwrap();
    eventually(20, "the command to end", || {
        let v = stdout_json(&env.command(&["status", "--json", "--socket", &sock]).output().unwrap());
        v["running_executions"] == json!([])
    });
    // The background shell, idle once its command ended, is then ended by
    // the retention worker (`guardian/src/shell/retire.rs`): while it exits
    // it is busy, and a stop in that moment is refused. Retried for up to
    // 10 s; it must end in exit 0 (it failed about every other run on
    // c4cb753 when the status above caught the shell idle before its end).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let out = loop {
        let out = env.command(&["guardian", "--stop", "--socket", &sock]).output().unwrap();
        if out.status.code() == Some(0) || std::time::Instant::now() > deadline {
            break out;
        }
        assert!(stderr(&out).contains("execution_active"), "{}", stderr(&out));
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stopped"), "{out:?}");
    let out = env.command(&["status", "--json", "--socket", &sock]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["running"], false);
    assert!(!env.sock.exists(), "the stopped guardian removed its socket");
    mcp.stop().await;
}

/// `guardian --stop --force` stops a guardian while a command runs (the
/// command is not signalled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_force_stops_while_a_command_runs() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "f").await;
    let gate = env.root.join("gate");
    blocker(&mcp, "f", &gate).await;
    let sock = p(&env.sock).to_owned();
    let out = env.command(&["guardian", "--stop", "--force", "--socket", &sock]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("keep running"), "{out:?}");
    assert_eq!(env.command(&["status", "--socket", &sock]).output().unwrap().status.code(), Some(1));
    fs::write(&gate, b"").unwrap();
    mcp.stop().await;
}

/// `winx-release release`: refused while a command of the thread runs
/// (every helper kept, nothing recorded), `--dry-run` changes nothing, then
/// every helper is released with a receipt; unregistered threads, an
/// `architect` thread and no targets are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_release_refused_while_a_command_runs_then_completes() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "rel").await;
    let dir = env.session_dir("rel");
    fs::create_dir_all(dir.join("sub")).unwrap();
    let helpers = [dir.join("a.py"), dir.join("b.txt"), dir.join("sub/c.sh")];
    for h in &helpers {
        fs::write(h, format!("content of {}", h.display())).unwrap();
    }
    let sock = p(&env.sock).to_owned();
    let ws = p(&env.ws).to_owned();
    let release = |extra: &[&str]| {
        let mut args = vec!["release", "--workspace", &ws, "--thread", "rel", "--socket", &sock];
        args.extend_from_slice(extra);
        env.command(&args).output().unwrap()
    };
    let gate = env.root.join("gate");
    blocker(&mcp, "rel", &gate).await;
    // What a release could touch (D/executions changes while the command
    // runs and resolves).
    let roots = [env.ws.clone(), env.data.join("receipts"), env.data.join("journal")];
    let watched = || snapshot(&roots.iter().map(|r| r.as_path()).collect::<Vec<_>>());
    let before = watched();
    for extra in [&["--all", "--json"][..], &["--all", "--json", "--dry-run"][..]] {
        let out = release(extra);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let v = stdout_json(&out);
        assert_eq!(v["status"], "denied", "{v}");
        let files = v["files"].as_array().unwrap();
        assert_eq!(files.len(), 3, "{v}");
        assert!(files.iter().all(|f| f["outcome"] == "denied" && f["reason"] == "execution_active"), "{v}");
    }
    assert_eq!(watched(), before, "a refused release changed something");

    fs::write(&gate, b"").unwrap();
    eventually(20, "the command to end", || {
        let v = stdout_json(&env.command(&["status", "--json", "--socket", &sock]).output().unwrap());
        v["running_executions"] == json!([])
    });
    let before = watched();
    let out = release(&["--all", "--json", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!((v["status"].clone(), v["dry_run"].clone()), (json!("completed"), json!(true)), "{v}");
    assert!(v["files"].as_array().unwrap().iter().all(|f| f["outcome"] == "not_attempted"), "{v}");
    assert_eq!(watched(), before, "a dry run changed something");
    let table = release(&["--all", "--dry-run"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("would_release"), "{table:?}");

    // Paths named one by one, then the rest with --all.
    let out = release(&[p(&helpers[0]), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["files"][0]["outcome"], "released", "{v}");
    assert!(v["batches"][0]["receipt_id"].is_string(), "{v}");
    let out = release(&["--all"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(table.matches("released").count(), 2, "{table}");
    assert!(helpers.iter().all(|h| !h.exists()), "{table}");

    // Nothing named is a usage error; an unknown thread and an architect
    // thread are refused.
    let out = env.command(&["release", "--workspace", &ws, "--thread", "rel", "--socket", &sock]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    fs::write(dir.join("d.txt"), b"d").unwrap();
    let out = env
        .command(&["release", "--workspace", &ws, "--thread", "nobody", "--socket", &sock, "--all", "--json"])
        .output()
        .unwrap();
    assert_eq!(stdout_json(&out)["errorCode"], "thread_mismatch", "{out:?}");
    mcp.init_with(json!({"any_workspace_path": env.ws, "thread_id": "arch", "mode_name": "architect"})).await;
    let arch = env.session_dir("arch").join("e.txt");
    fs::write(&arch, b"e").unwrap();
    let out = env
        .command(&["release", "--workspace", &ws, "--thread", "arch", "--socket", &sock, p(&arch), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!(v["files"][0]["reason"], "policy_denied", "{v}");
    assert!(arch.exists());
    mcp.stop().await;

    // Without a guardian nothing is released.
    env.kill_guardian();
    let out = env
        .command(&["release", "--workspace", &ws, "--thread", "rel", "--socket", &sock, "--all", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["errorCode"], "owner_unavailable", "{out:?}");
    assert!(dir.join("d.txt").exists());
}

/// `audit --json`: each listed session names its thread (from the guardian)
/// and its helpers with size and age; a session with nothing in it is
/// counted, not listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_names_threads_and_helpers_and_counts_empty_sessions() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "full").await;
    mcp.init(&env.ws, "empty").await;
    fs::write(env.session_dir("full").join("h.txt"), b"12345").unwrap();
    let sock = p(&env.sock).to_owned();
    let out = env.command(&["audit", "--workspace", p(&env.ws), "--socket", &sock, "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{v}");
    assert_eq!(sessions[0]["thread_id"], "full", "{v}");
    assert_eq!(sessions[0]["helpers"][0]["size"], 5, "{v}");
    assert!(sessions[0]["helpers"][0]["age_seconds"].is_u64(), "{v}");
    assert_eq!(v["empty_sessions"], 1, "{v}");
    mcp.stop().await;
}

/// A batch is one request: `release H_hardlinked H_plain` (and `--all`)
/// denies both with nothing touched, no receipt, and the table and `--json`
/// say `denied`; `H_plain` alone is then released. (On c4cb753 the tool sent
/// `H_plain` on its own, released it and still answered `denied`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_batch_with_one_refused_target_releases_nothing() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "mix").await;
    let dir = env.session_dir("mix");
    let (linked, plain) = (dir.join("a_linked.txt"), dir.join("b_plain.txt"));
    fs::write(&linked, b"linked helper").unwrap();
    fs::hard_link(&linked, env.root.join("elsewhere")).unwrap();
    fs::write(&plain, vec![b'p'; 4096]).unwrap();
    let (sock, ws) = (p(&env.sock).to_owned(), p(&env.ws).to_owned());
    let roots = [env.ws.clone(), env.data.join("receipts"), env.data.join("journal")];
    let watched = || snapshot(&roots.iter().map(|r| r.as_path()).collect::<Vec<_>>());
    let before = watched();
    let base = ["release", "--workspace", &ws, "--thread", "mix", "--socket", &sock];
    for extra in [&[p(&linked), p(&plain), "--json"][..], &["--all", "--json"][..]] {
        let out = env.command(&[&base[..], extra].concat()).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let v = stdout_json(&out);
        assert_eq!((v["status"].clone(), v["bytes_reclaimed"].clone()), (json!("denied"), json!(0)), "{v}");
        let files = v["files"].as_array().unwrap();
        assert_eq!(files.len(), 2, "{v}");
        assert!(files.iter().all(|f| f["outcome"] == "denied" && f["bytes_reclaimed"] == 0), "{v}");
        assert_eq!((files[0]["reason"].clone(), files[1]["reason"].clone()), (json!("hardlink"), json!("hardlink")));
        assert!(v["batches"].as_array().unwrap().iter().all(|b| b["receipt_id"].is_null()), "{v}");
        assert!(plain.exists() && linked.exists(), "{v}");
        assert_eq!(watched(), before, "a denied batch changed something: {v}");
    }
    let out = env.command(&[&base[..], &[p(&linked), p(&plain)][..]].concat()).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!table.contains("released") && table.contains("denied: 2 helper(s), 0 bytes"), "{table}");
    assert!(plain.exists(), "{table}");

    let out = env.command(&[&base[..], &[p(&plain), "--json"][..]].concat()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = stdout_json(&out);
    assert_eq!((v["status"].clone(), v["files"][0]["outcome"].clone()), (json!("completed"), json!("released")));
    assert!(!plain.exists() && linked.exists(), "{v}");
    mcp.stop().await;
}
