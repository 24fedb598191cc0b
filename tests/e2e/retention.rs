//! Retention of the backing stores with a real guardian (contract section
//! 6b): `--keep-executions 5` holds `D/executions` at the newest five
//! resolved payloads plus the running ones after every pass (sampled all
//! along: at most one more, the command resolved since the last debounced
//! pass), a pruned execution's status
//! check is one clear error, the newest one's still answers, releases still
//! complete, and a replay whose receipt was pruned is judged afresh.

use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::blocked::completes_after;
use crate::support::{eventually, read_line_timeout, release_req, Env, Mcp};
use serde_json::{json, Value};

/// A guardian this test started: SIGTERM and reaped on drop.
struct Guardian(Child);

impl Drop for Guardian {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.0.wait();
    }
}

/// Starts `guardian --socket <sock> <extra>` and waits for its ready line.
fn start_guardian(env: &Env, extra: &[&str]) -> Guardian {
    start_guardian_logged(env, extra).1
}

/// [`start_guardian`], also returning the path of its log.
fn start_guardian_logged(env: &Env, extra: &[&str]) -> (std::path::PathBuf, Guardian) {
    let sock = env.sock.to_str().unwrap();
    let mut args = vec!["guardian", "--socket", sock];
    args.extend_from_slice(extra);
    let (path, log) = env.log_file("guardian");
    let mut child = env.command(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let line = read_line_timeout(child.stdout.take().unwrap(), Duration::from_secs(10)).expect("ready line");
    assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["event"], "ready", "{line}");
    // The keys in the contract's order.
    let at = |k: &str| line.find(&format!("\"{k}\":")).unwrap_or(usize::MAX);
    let keys = ["event", "socket", "pid", "capabilities", "liveness"].map(at);
    assert!(keys.windows(2).all(|w| w[0] < w[1]) && keys[4] != usize::MAX, "{line}");
    (path, Guardian(child))
}

/// (resolved, other) execution directories in `D/executions`.
fn executions(data: &Path) -> (Vec<String>, Vec<String>) {
    let (mut resolved, mut other) = (Vec::new(), Vec::new());
    let Ok(rd) = fs::read_dir(data.join("executions")) else { return (resolved, other) };
    for e in rd.flatten() {
        let name = e.file_name().into_string().unwrap();
        let status: Value = fs::read(e.path().join("status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null);
        if status["state"] == "resolved" {
            resolved.push(name);
        } else {
            other.push(name);
        }
    }
    (resolved, other)
}

async fn status_check(mcp: &Mcp, thread: &str, id: &str) -> Value {
    let r = mcp
        .try_call("BashCommand", json!({"thread_id": thread, "status_check": true, "command_id": id}))
        .await
        .expect("a status check is answered");
    r.structured_content.clone().unwrap_or_else(|| panic!("no structuredContent: {r:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_executions_5_bounds_the_store_and_releases_still_complete() {
    let env = Env::new();
    let _g = start_guardian(&env, &["--keep-executions", "5"]);
    let mcp = env.mcp(&[]).await;
    let thread = "retention-5";
    mcp.init(&env.ws, thread).await;

    // A background command that runs throughout: never pruned.
    let gate = env.root.join("gate");
    let cmd = format!("while [ ! -e '{}' ]; do sleep 0.05; done; echo bg-done", gate.display());
    let bg = mcp.call("BashCommand", json!({"thread_id": thread, "command": cmd, "is_background": true})).await;
    let bg_id = bg["command_id"].as_str().unwrap().to_owned();

    // Sampled all along: between a command resolving and the debounced pass
    // that follows it, one resolved payload more than the five may stand.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (sampling, data) = (sampling.clone(), env.data.clone());
        std::thread::spawn(move || {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(executions(&data).0.len());
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let mut ids = Vec::new();
    let mut peak = 0;
    for i in 0..16 {
        let v = mcp.bash(thread, &format!("echo out-{i}")).await;
        ids.push(v["command_id"].as_str().unwrap().to_owned());
        // The debounced pass follows each completed command.
        eventually(10, "the retention pass", || executions(&env.data).0.len() <= 5);
        let (resolved, other) = executions(&env.data);
        peak = peak.max(resolved.len());
        assert!(other.contains(&bg_id), "the running execution was removed: {other:?}");
        assert!(resolved.contains(ids.last().unwrap()), "the newest execution was removed");
    }
    assert_eq!(peak, 5);
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let sampled = sampler.join().unwrap();
    assert!(sampled <= 5 + 1, "{sampled} resolved payloads at once with --keep-executions 5");
    let (resolved, _) = executions(&env.data);
    let mut newest: Vec<String> = ids[ids.len() - 5..].to_vec();
    newest.sort();
    let mut kept = resolved.clone();
    kept.sort();
    assert_eq!(kept, newest, "the newest five are the ones kept");

    // The newest execution's status check answers; a pruned one's is one
    // clear error.
    let newest_id = ids.last().unwrap();
    let v = status_check(&mcp, thread, newest_id).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert!(v["output"].as_str().unwrap().contains("out-15"), "{v}");
    let v = status_check(&mcp, thread, &ids[0]).await;
    assert_eq!(v["status"], "denied", "{v}");
    assert_eq!(v["errorCode"], "not_found", "{v}");
    assert!(v.to_string().contains("unknown command_id"), "{v}");
    // The running one still reports running.
    let v = status_check(&mcp, thread, &bg_id).await;
    assert_eq!(v["status"], "running", "{v}");

    // A release still completes (the running background command blocks its
    // thread, so it is let go first).
    fs::write(&gate, b"").unwrap();
    // Back at its shell's prompt (the shells themselves stay: they are the
    // thread's, idle).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status_check(&mcp, thread, &bg_id).await["status"] != "completed" {
        assert!(std::time::Instant::now() < deadline, "the background command did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let helper = env.session_dir(thread).join("helper.txt");
    fs::write(&helper, b"temporary\n").unwrap();
    let (rev, generation) = mcp.read_helper(thread, &helper).await;
    // Completed, or refused only as `execution_active` until it completes:
    // under load a process of the user that is being started or ending
    // (its environment unreadable for a moment) is doubt, and doubt counts
    // as running (fail closed); what this test asks is that pruning never
    // makes a release fail.
    let h = (helper.clone(), rev, generation);
    completes_after(&env, &mcp, thread, &h, "execution_active", Duration::from_secs(10)).await;
    eventually(10, "the pass after the release", || executions(&env.data).0.len() <= 5);
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_receipt_was_pruned_is_judged_afresh() {
    let env = Env::new();
    let _g = start_guardian(&env, &["--keep-receipts-days", "0"]);
    let mcp = env.mcp(&[]).await;
    let thread = "retention-receipt";
    mcp.init(&env.ws, thread).await;
    let helper = env.session_dir(thread).join("once.txt");
    fs::write(&helper, b"once\n").unwrap();
    let (rev, generation) = mcp.read_helper(thread, &helper).await;
    let req = release_req(thread, &env.ws, &[(&helper, &rev, &generation)]);
    let first = mcp.edit(req.clone()).await;
    assert_eq!(first["status"], "completed", "{first}");
    let id = first["receipt_id"].as_str().unwrap();
    let receipt = env.data.join("receipts").join(&id[..2]).join(format!("{id}.json"));
    assert!(receipt.exists());
    // Replayed while the receipt stands.
    let again = mcp.edit(req.clone()).await;
    assert_eq!(again["replayed"], true, "{again}");
    // A window of 0 days prunes it once its second has passed; a command
    // kicks a pass.
    std::thread::sleep(Duration::from_millis(1100));
    mcp.bash(thread, "true").await;
    eventually(10, "the receipt pruned", || !receipt.exists());
    let fresh = mcp.edit(req).await;
    assert_eq!(fresh["replayed"], false, "{fresh}");
    assert_eq!(fresh["status"], "denied", "{fresh}");
    assert_eq!(fresh["files"][0]["reason"], "not_found", "{fresh}");
    mcp.stop().await;
}

#[test]
fn audit_counts_backing_entries_and_warns_past_80_percent() {
    let env = Env::new();
    let scratch = env.ws.join(".winx/scratch");
    fs::create_dir_all(&scratch).unwrap();
    for i in 0..10 {
        fs::write(scratch.join(format!("s{i}")), b"").unwrap();
    }
    fs::create_dir_all(env.data.join("executions/e1")).unwrap();
    fs::write(env.data.join("executions/e1/output"), b"").unwrap();
    let audit = |env: &Env| -> Value {
        let out = env.command(&["audit", "--workspace", env.ws.to_str().unwrap()]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = audit(&env);
    assert_eq!(v["backing_entries"], 12, "{v}");
    assert_eq!(v["backing_limit"], 50_000, "{v}");
    assert_eq!(v["backing_warning"], Value::Null, "{v}");
    assert_eq!(v["deletion_deferred"], "runtime_protection_unknown", "{v}");
    // 40,001 entries: over 80 % of the bound.
    let receipts = env.data.join("receipts");
    fs::create_dir_all(&receipts).unwrap();
    for i in 0..(40_001 - 12) {
        fs::write(receipts.join(format!("r{i}")), b"").unwrap();
    }
    let v = audit(&env);
    assert_eq!(v["backing_entries"], 40_001, "{v}");
    assert!(v["backing_warning"].as_str().is_some_and(|w| w.contains("80%")), "{v}");
    // The guardian logs the same warning after its first pass (the files
    // are not receipts by name, so retention leaves them). It has served no
    // workspace yet, so it counts D's two roots alone: 20 more there.
    for i in 0..20 {
        fs::write(receipts.join(format!("more{i}")), b"").unwrap();
    }
    let (log, _g) = start_guardian_logged(&env, &[]);
    eventually(20, "the guardian's 80% warning", || {
        fs::read_to_string(&log).is_ok_and(|t| t.contains("WARN") && t.contains("over 80% of the 50000-entry bound"))
    });
}
