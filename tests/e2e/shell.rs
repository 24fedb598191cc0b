//! The thread's persistent shell (issue 31), end to end through the MCP
//! frontend and a real guardian: state persists, programs get input, and a
//! shell blocks releases exactly while it is busy.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::blocked::{call, completes_after, denied, helper};
use crate::support::{eventually, world, Env, Mcp};

async fn bash(mcp: &Mcp, args: Value) -> Value {
    call(mcp, "BashCommand", args).await
}

/// A command that must be back at the prompt with exit code 0.
async fn ok(mcp: &Mcp, thread: &str, command: &str) -> Value {
    let v = bash(mcp, json!({"thread_id": thread, "command": command})).await;
    assert_eq!(v["status"], "completed", "{command}: {v}");
    assert_eq!(v["exit_code"], 0, "{command}: {v}");
    v
}

/// Whether a process of this world named `comm` leads its terminal's
/// foreground process group.
fn foreground_is(env: &Env, comm: &str) -> bool {
    env.own_processes().into_iter().any(|pid| {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let name = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')).map(|(n, _)| n);
        name == Some(comm) && f.get(5).is_some_and(|tpgid| *tpgid == pid.to_string())
    })
}

fn out(v: &Value) -> &str {
    v["output"].as_str().unwrap_or_else(|| panic!("no output: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cd_and_export_persist_across_calls_and_output_is_only_what_was_printed() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    ok(&mcp, "t1", "mkdir -p sub && cd sub && export WINX_T=persisted && f() { echo from-f; }").await;
    let v = ok(&mcp, "t1", "pwd; echo \"$WINX_T\"; f").await;
    // No echoed command line, no prompt, no escape sequences.
    assert_eq!(out(&v), format!("{}\npersisted\nfrom-f\n", env.ws.join("sub").display()), "{v}");
    assert_eq!(v["still_running"], json!([]), "{v}");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_prompt_is_answered_with_send_text() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let v = bash(
        &mcp,
        json!({"thread_id": "t1", "command": "read -r -p 'name? ' x; echo \"hi $x\"",
        "wait_for_seconds": 0.5}),
    )
    .await;
    assert_eq!(v["status"], "running", "{v}");
    assert_eq!(v["exit_code"], Value::Null, "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "send_text": "bob", "submit": true})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(out(&v).contains("hi bob"), "{v}");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_through_send_specials_ends_sleep_100() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "c.py").await;
    let v = bash(&mcp, json!({"thread_id": "t1", "command": "sleep 100", "wait_for_seconds": 0.3})).await;
    assert_eq!(v["status"], "running", "{v}");
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    // `sleep` runs in the foreground once it shows in the terminal's
    // foreground group; Ctrl-c sent before that would be the shell's.
    eventually(10, "sleep in the foreground", || foreground_is(&env, "sleep"));
    let v = bash(&mcp, json!({"thread_id": "t1", "send_specials": ["Ctrl-c"]})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 130, "{v}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(5)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_left_behind_completes_the_command_and_blocks_releases_until_it_ends() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "j.py").await;
    let v = ok(&mcp, "t1", "sleep 3 & echo started").await;
    assert!(out(&v).contains("started"), "{v}");
    assert!(v["still_running"].as_array().is_some_and(|p| !p.is_empty()), "the job by pid: {v}");
    let d = denied(&env, &mcp, "t1", &h, "execution_active").await;
    assert!(d["message"].as_str().is_some_and(|m| m.contains("left process")), "{d}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(15)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nohup_and_disown_blocks() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "n.py").await;
    let v = ok(&mcp, "t1", "nohup sleep 3 >/dev/null 2>&1 & disown; echo gone").await;
    assert!(out(&v).contains("gone"), "{v}");
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(15)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_at_an_idle_prompt_is_refused_and_runs_nothing() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let marker = env.ws.join("typed-at-the-prompt");
    let text = format!("touch {}", marker.display());
    // A thread without a shell: nothing to send to, nothing to show.
    let v = bash(&mcp, json!({"thread_id": "t2", "send_text": text, "submit": true})).await;
    assert_eq!(v["status"], "invalid_input", "{v}");
    let v = bash(&mcp, json!({"thread_id": "t2", "screen": true})).await;
    assert_eq!(v["status"], "invalid_input", "{v}");
    ok(&mcp, "t1", "true").await;
    for args in [
        json!({"thread_id": "t1", "send_text": text, "submit": true}),
        json!({"thread_id": "t1", "send_ascii": text.bytes().chain([13]).collect::<Vec<u8>>()}),
        json!({"thread_id": "t1", "send_specials": ["Enter"]}),
    ] {
        let v = bash(&mcp, args.clone()).await;
        assert_eq!(v["status"], "invalid_input", "{args}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| m.contains("prompt")), "{v}");
    }
    let v = bash(&mcp, json!({"thread_id": "t1", "send_specials": ["Ctrl-x"]})).await;
    assert_eq!(v["status"], "invalid_input", "{v}");
    let m = v["message"].as_str().unwrap_or_default();
    assert!(m.contains("Ctrl-x") && m.contains("Ctrl-c") && m.contains("Key-up"), "names the valid keys: {v}");
    // Nothing was typed: the next command is the next one the shell runs.
    let v = ok(&mcp, "t1", "echo next").await;
    assert_eq!(out(&v), "next\n", "{v}");
    assert!(!marker.exists(), "input sent at an idle prompt ran");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_command_still_running_after_the_wait_blocks_and_refuses_another() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "f.py").await;
    let v = bash(&mcp, json!({"thread_id": "t1", "command": "sleep 2; echo slept", "wait_for_seconds": 0.2})).await;
    assert_eq!(v["status"], "running", "{v}");
    let id = v["command_id"].as_str().unwrap().to_owned();
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    let marker = env.ws.join("second");
    let v = bash(&mcp, json!({"thread_id": "t1", "command": format!("touch {}", marker.display())})).await;
    assert_eq!((v["status"].as_str(), v["errorCode"].as_str()), (Some("denied"), Some("execution_active")), "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "status_check": true, "wait_for_seconds": 10})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["command_id"], json!(id), "{v}");
    assert!(out(&v).contains("slept"), "what is new since the last look: {v}");
    assert!(!marker.exists(), "the refused command was typed");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(5)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_shell_does_not_block() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "i.py").await;
    ok(&mcp, "t1", "cd / && echo idle").await;
    // Right after its prompt the shell may need a moment to reach the line
    // editor's wait (on a loaded machine longer than the idle rule's
    // 250 ms settle): a refusal then is `execution_active`, and the release
    // goes through within a few seconds; a shell that stayed busy fails.
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(5)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repl_waiting_for_input_blocks() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "r.py").await;
    let v = bash(&mcp, json!({"thread_id": "t1", "command": "cat", "wait_for_seconds": 0.3})).await;
    assert_eq!(v["status"], "running", "{v}");
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    let v = bash(&mcp, json!({"thread_id": "t1", "send_text": "echoed back", "submit": true, "wait_for_seconds": 0.3}))
        .await;
    assert_eq!(v["status"], "running", "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "screen": true})).await;
    assert!(v["screen"].as_str().is_some_and(|s| s.contains("echoed back")), "{v}");
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    let v = bash(&mcp, json!({"thread_id": "t1", "send_specials": ["Ctrl-d"]})).await;
    assert_eq!(v["status"], "completed", "{v}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(5)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_restart_keeps_the_cwd() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    ok(&mcp, "t1", "mkdir -p kept && cd kept").await;
    mcp.stop().await;
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    let v = ok(&mcp, "t1", "pwd").await;
    assert_eq!(out(&v), format!("{}\n", env.ws.join("kept").display()), "{v}");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// Changed by issue 54: the shell outlives the guardian (its monitor holds
/// its terminal), so the same shell answers after the restart, in the
/// directory its last command left it in (before, a restart hung it up and
/// a new shell answered in the workspace).
async fn after_a_guardian_sigkill_a_nohup_daemon_blocks_and_the_same_shell_answers() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    let h = helper(&env, &mcp, "t1", "g.py").await;
    let gate = env.root.join("daemon-ran");
    ok(&mcp, "t1", &format!("cd /; nohup sh -c 'touch {}; sleep 4' >/dev/null 2>&1 & disown", gate.display())).await;
    eventually(5, "the daemon to run", || gate.exists());
    env.kill_guardian();
    env.start_guardian();
    mcp.init(&env.ws, "t1").await;
    denied(&env, &mcp, "t1", &h, "execution_active").await;
    // The same shell, where its last command left it.
    let v = ok(&mcp, "t1", "pwd").await;
    assert_eq!(out(&v), "/\n", "{v}");
    completes_after(&env, &mcp, "t1", &h, "execution_active", Duration::from_secs(20)).await;
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_winx_shaped_action_json_request_works() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let v = bash(&mcp, json!({"thread_id": "t1", "action_json": {"type": "command", "command": "echo winx"}})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(out(&v), "winx\n", "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "action_json": {"type": "status_check"}})).await;
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("completed"), Some(0)), "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "action_json": {"type": "screen", "lines": 5}})).await;
    assert!(v["screen"].as_str().is_some_and(|s| s.contains("winx")), "{v}");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_command_has_a_shell_of_its_own_and_its_id_is_the_threads() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let v = bash(
        &mcp,
        json!({"thread_id": "t1", "command": "read -r x; echo \"bg got $x\"", "is_background": true,
        "wait_for_seconds": 0.3}),
    )
    .await;
    assert_eq!(v["status"], "running", "{v}");
    let bg = v["bg_command_id"].as_str().unwrap().to_owned();
    assert_eq!(v["command_id"], json!(bg), "{v}");
    // The thread's own shell is free meanwhile.
    ok(&mcp, "t1", "true").await;
    let v = bash(&mcp, json!({"thread_id": "t2", "send_text": "x", "submit": true, "bg_command_id": bg})).await;
    assert_eq!(v["errorCode"], "thread_mismatch", "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "send_text": "y", "submit": true, "bg_command_id": bg})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert!(out(&v).contains("bg got y"), "{v}");
    mcp.stop().await;
}

/// The `bash` processes of this world.
fn shells_alive(env: &Env) -> usize {
    let comm = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    env.own_processes().into_iter().filter(|pid| comm(*pid).trim_end() == "bash").count()
}

/// A background shell ends once its command is done and nothing of it
/// runs (`guardian/src/shell/retire.rs`); its status, output and screen
/// still answer, and it holds no release of its thread. One whose command
/// left a job keeps running. (Before, every background shell lived until
/// the guardian stopped: a 30-second stress left 160.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_shell_ends_once_its_command_is_done_and_nothing_of_it_runs() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let h = helper(&env, &mcp, "t1", "h.py").await;
    ok(&mcp, "t1", "true").await;
    ok(&mcp, "t2", "true").await;
    let args = json!({"thread_id": "t2", "command": "sleep 30 & echo left", "is_background": true});
    let kept = bash(&mcp, args).await["bg_command_id"].as_str().unwrap().to_owned();
    let args = json!({"thread_id": "t1", "command": "echo bg-done", "is_background": true});
    let bg = bash(&mcp, args).await["bg_command_id"].as_str().unwrap().to_owned();
    for (thread, id) in [("t2", &kept), ("t1", &bg)] {
        let args = json!({"thread_id": thread, "action_json": {"type": "status_check", "bg_command_id": id}, "wait_for_seconds": 10});
        let v = bash(&mcp, args).await;
        assert_eq!(v["status"], "completed", "{v}");
    }
    // Two threads' shells, and the background shell whose job runs.
    eventually(20, "the finished background shell to end", || shells_alive(&env) == 3);
    // Nothing of it holds a release of its thread, right after its end.
    let v = call(&mcp, "EditFiles", crate::support::release_req("t1", &env.ws, &[(&h.0, &h.1, &h.2)])).await;
    assert_eq!(v["status"], "completed", "{v}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(shells_alive(&env), 3, "a background shell with a job left ended");
    let args = json!({"thread_id": "t2", "action_json": {"type": "status_check", "bg_command_id": kept}});
    let v = bash(&mcp, args).await;
    assert_ne!(v["still_running"], json!([]), "{v}");
    // The ended one still answers: status, whole output, screen.
    let v = bash(&mcp, json!({"thread_id": "t1", "action_json": {"type": "status_check", "command_id": bg}})).await;
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("completed"), Some(0)), "{v}");
    assert_eq!(out(&v), "bg-done\n", "{v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "action_json": {"type": "screen", "bg_command_id": bg}})).await;
    let screen = v["screen"].as_str().unwrap_or_else(|| panic!("no screen: {v}"));
    assert!(screen.contains("bg-done"), "{v}");
    assert!(!screen.lines().any(|l| l.trim_end().ends_with("exit")), "the end of the shell is shown: {v}");
    let v = bash(&mcp, json!({"thread_id": "t1", "send_text": "x", "bg_command_id": bg})).await;
    assert_eq!(v["errorCode"], "invalid_input", "{v}");
    mcp.stop().await;
}
