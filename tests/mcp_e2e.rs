//! End to end: the real `winx-release guardian` and `winx-release mcp`
//! processes, driven by an MCP client (rmcp's) over the server's stdio.
//!
//! Every test has its own temporary world (workspace, `XDG_DATA_HOME`,
//! `HOME`, socket) and ends every process it started. Every refused request
//! is checked to leave every file of the workspace and the data directory
//! byte-identical (same bytes, same inodes).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::Digest;
use support::{is_fifo, mkfifo, release_req, snapshot, Env, Mcp};

fn revision_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// A world with a guardian and one MCP frontend connected to it.
async fn world() -> (Env, Mcp) {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    (env, mcp)
}

/// Initializes `thread`, writes `$WINX_TEMP_DIR/<name>` with `content`
/// through `BashCommand`, reads it; returns (path, revision, generation).
async fn helper(env: &Env, mcp: &Mcp, thread: &str, name: &str, content: &str) -> (PathBuf, String, String) {
    let path = env.session_dir(thread).join(name);
    mcp.bash(thread, &format!("printf '%s' '{content}' > \"$WINX_TEMP_DIR/{name}\"")).await;
    assert_eq!(std::fs::read(&path).expect("helper written"), content.as_bytes());
    let (rev, generation) = mcp.read_helper(thread, &path).await;
    assert_eq!(rev, revision_of(content.as_bytes()));
    (path, rev, generation)
}

/// Sends `req`, expects a refusal with `status` and `errorCode` `code`, every
/// file `denied`, nothing reclaimed, no receipt, and no change anywhere in
/// the workspace or the data directory.
async fn refused(env: &Env, mcp: &Mcp, req: Value, status: &str, code: &str) -> Value {
    let before = snapshot(&[&env.ws, &env.data]);
    let v = mcp.edit(req.clone()).await;
    assert_eq!(v["status"], status, "request {req}\nresult {v}");
    assert_eq!(v["errorCode"], code, "request {req}\nresult {v}");
    // A request whose top-level shape cannot be parsed may be answered in
    // the shape of a write refusal: no `replayed`, no `bytes_reclaimed`.
    assert!(matches!(v.get("replayed"), None | Some(Value::Bool(false))), "{v}");
    assert!(v.get("bytes_reclaimed").is_none() || v["bytes_reclaimed"] == 0, "{v}");
    assert!(matches!(v.get("receipt_id"), None | Some(Value::Null)), "a refusal has no receipt: {v}");
    for f in v["files"].as_array().expect("files list") {
        assert_eq!(f["outcome"], "denied", "{v}");
        assert!(f.get("bytes_reclaimed").is_none() || f["bytes_reclaimed"] == 0, "{v}");
    }
    if let Some(n) = req["files"].as_array().map(Vec::len) {
        assert_eq!(v["files"].as_array().map(Vec::len), Some(n), "one entry per requested file: {v}");
    }
    let after = snapshot(&[&env.ws, &env.data]);
    assert_eq!(before, after, "a refused request changed the filesystem: {req}");
    v
}

/// Expects a completed release of exactly `paths`.
fn assert_completed(v: &Value, paths: &[&Path]) {
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["operation"], "release_temporary", "{v}");
    assert_eq!(v["replayed"], false, "{v}");
    assert!(v["receipt_id"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    let files = v["files"].as_array().expect("files");
    assert_eq!(files.len(), paths.len(), "{v}");
    let mut total = 0;
    for (f, path) in files.iter().zip(paths) {
        assert_eq!(f["file_path"], json!(path), "order of the request: {v}");
        assert_eq!(f["outcome"], "released", "{v}");
        assert_eq!(f["reason"], Value::Null, "{v}");
        let b = f["bytes_reclaimed"].as_u64().expect("bytes_reclaimed");
        assert!(b > 0, "{v}");
        total += b;
        assert!(std::fs::symlink_metadata(path).is_err(), "{} still exists", path.display());
    }
    assert_eq!(v["bytes_reclaimed"].as_u64(), Some(total), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_four_tools_and_keeps_protocol_errors_for_unknown_tools() {
    let (env, mcp) = world().await;
    let tools = mcp.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["Initialize", "ReadFiles", "EditFiles", "BashCommand"]);
    for t in &tools {
        assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", t.name);
        assert_eq!(t.input_schema.get("additionalProperties"), Some(&json!(false)), "{}", t.name);
    }
    let init = tools.iter().find(|t| t.name == "Initialize").unwrap();
    assert_eq!(init.input_schema["required"], json!(["any_workspace_path"]));
    assert_eq!(init.input_schema["properties"]["mode_name"]["enum"], json!(["wcgw", "architect", "code_writer"]));

    // An unknown tool is a protocol error; a malformed shape is a tool result.
    assert!(mcp.try_call("Nope", json!({})).await.is_err());
    let bad = mcp.call("Initialize", json!({"any_workspace_path": env.ws, "bogus": 1})).await;
    assert_eq!((bad["status"].as_str(), bad["errorCode"].as_str()), (Some("invalid_input"), Some("invalid_input")));
    let bad = mcp.call("ReadFiles", json!({})).await;
    assert_eq!(bad["status"], "invalid_input", "{bad}");
    let bad = mcp.call("BashCommand", json!({"thread_id": 7, "command": "true"})).await;
    assert_eq!(bad["status"], "invalid_input", "{bad}");

    let v = mcp.init(&env.ws, "t1").await;
    assert_eq!(v["status"], "completed");
    assert_eq!(v["thread_id"], "t1");
    assert_eq!(v["workspace_root"], json!(env.ws));
    assert_eq!(v["temporary_artifact_dir"], json!(env.session_dir("t1")));
    assert_eq!(v["temporary_release"], json!({"available": true, "reason": null}));
    assert_eq!(v["temporary_artifact_max_files"], 128);
    assert_eq!(v["temporary_artifact_max_session_bytes"], 67_108_864);
    assert_eq!(v["temporary_artifact_max_file_bytes"], 33_554_432);
    assert_eq!(v["temporary_artifact_max_bytes"], 268_435_456);
    assert_eq!(v["temporary_artifact_stale_pruned_files"], 0);
    assert_eq!(v["deletion_deferred"], "runtime_protection_unknown");
    let mode = std::fs::metadata(env.session_dir("t1")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_json_rpc_over_stdio() {
    let mut env = Env::new();
    env.start_guardian();
    let (_, log) = env.log_file("mcp-raw");
    let mut child = env
        .command(&["mcp", "--socket", p(&env.sock)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn mcp");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut send = move |v: Value| {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        stdin.write_all(&line).unwrap();
        stdin.flush().unwrap();
    };
    let recv = || -> Value {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("a response line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {line:?}: {e}"))
    };

    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}));
    let r = recv();
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18", "{r}");
    assert_eq!(r["result"]["serverInfo"]["name"], "winx-release", "{r}");
    assert!(r["result"]["capabilities"]["tools"].is_object(), "{r}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let r = recv();
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(4), "{r}");
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "Initialize",
        "arguments": {"any_workspace_path": env.ws, "thread_id": "raw"}}}));
    let r = recv();
    assert_eq!(r["id"], 3, "{r}");
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["thread_id"], "raw", "{r}");
    assert_eq!(r["result"]["content"][0]["type"], "text", "{r}");
    send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "EditFiles",
        "arguments": {"thread_id": "raw", "workspace_root": env.ws, "operation": "release_temporary", "files": []}}}));
    let r = recv();
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["structuredContent"]["errorCode"], "file_count", "{r}");
    send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "Nope", "arguments": {}}}));
    let r = recv();
    assert_eq!(r["id"], 5, "{r}");
    assert!(r["error"]["code"].is_i64(), "{r}");

    // EOF on stdin ends the server cleanly.
    drop(send); // closes stdin
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "the server did not exit after EOF");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_then_replay_across_restart_and_reuse_of_the_path() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    mcp.bash("t1", "echo hi > $WINX_TEMP_DIR/h.py").await;
    let h = env.session_dir("t1").join("h.py");
    let (rev, generation) = mcp.read_helper("t1", &h).await;
    assert_eq!(rev, revision_of(b"hi\n"));
    let req = release_req("t1", &env.ws, &[(&h, &rev, &generation)]);

    let first = mcp.edit(req.clone()).await;
    assert_completed(&first, &[&h]);

    // The same request replays its receipt and touches nothing.
    let check_replay = |v: &Value| {
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["replayed"], true, "{v}");
        assert_eq!(v["receipt_id"], first["receipt_id"], "{v}");
        assert_eq!(v["files"], first["files"], "{v}");
        assert_eq!(v["bytes_reclaimed"], first["bytes_reclaimed"], "{v}");
    };
    let before = snapshot(&[&env.ws, &env.data]);
    check_replay(&mcp.edit(req.clone()).await);
    assert_eq!(before, snapshot(&[&env.ws, &env.data]));

    // After a restart of the frontend (a new secret), without Initialize.
    mcp.stop().await;
    let mcp = env.mcp(&[]).await;
    check_replay(&mcp.edit(req.clone()).await);
    assert_eq!(before, snapshot(&[&env.ws, &env.data]));

    // A new file at the released path survives the replay.
    mcp.init(&env.ws, "t1").await;
    mcp.bash("t1", "echo new > $WINX_TEMP_DIR/h.py").await;
    let before = snapshot(&[&env.ws, &env.data]);
    check_replay(&mcp.edit(req.clone()).await);
    assert_eq!(before, snapshot(&[&env.ws, &env.data]));
    assert_eq!(std::fs::read(&h).unwrap(), b"new\n");

    // It is another generation: releasing it takes a new read.
    let (rev2, gen2) = mcp.read_helper("t1", &h).await;
    assert_ne!(gen2, generation);
    let second = mcp.edit(release_req("t1", &env.ws, &[(&h, &rev2, &gen2)])).await;
    assert_completed(&second, &[&h]);
    assert_ne!(second["receipt_id"], first["receipt_id"]);
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_restart_expires_read_tokens() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "print(1)\n").await;
    mcp.stop().await;

    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    let v =
        refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "read_required").await;
    assert_eq!(v["files"][0]["reason"], "read_required", "{v}");

    // A new read with the new frontend releases it.
    let (rev2, gen2) = mcp.read_helper("t1", &h).await;
    assert_eq!(rev2, rev);
    assert_ne!(gen2, generation);
    assert_completed(&mcp.edit(release_req("t1", &env.ws, &[(&h, &rev2, &gen2)])).await, &[&h]);
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_untouched() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "x = 1\n").await;
    let sd = env.session_dir("t1");
    let entry = json!({"file_path": h, "mode": "release_temporary", "expected_revision": rev,
        "artifact_generation": generation});
    let with_files = |files: Value| json!({"thread_id": "t1", "workspace_root": env.ws, "operation": "release_temporary", "files": files});
    let with_path = |path: &str| {
        with_files(json!([{"file_path": path, "mode": "release_temporary", "expected_revision": rev,
            "artifact_generation": generation}]))
    };

    // invalid_input: unknown field, missing field, wrong types, bad revision.
    let mut extra = entry.clone();
    extra["bogus"] = json!(true);
    refused(&env, &mcp, with_files(json!([extra])), "invalid_input", "invalid_input").await;
    let mut no_ws = with_files(json!([entry]));
    no_ws.as_object_mut().unwrap().remove("workspace_root");
    refused(&env, &mcp, no_ws, "invalid_input", "invalid_input").await;
    let mut top_extra = with_files(json!([entry]));
    top_extra["force"] = json!(true);
    refused(&env, &mcp, top_extra, "invalid_input", "invalid_input").await;
    let mut bad_rev = entry.clone();
    bad_rev["expected_revision"] = json!("sha256:XYZ");
    refused(&env, &mcp, with_files(json!([bad_rev])), "invalid_input", "invalid_input").await;
    let mut no_rev = entry.clone();
    no_rev.as_object_mut().unwrap().remove("expected_revision");
    refused(&env, &mcp, with_files(json!([no_rev])), "invalid_input", "invalid_input").await;
    refused(&env, &mcp, with_files(json!("h.py")), "invalid_input", "invalid_input").await;

    // file_count: none, or more than 100.
    refused(&env, &mcp, with_files(json!([])), "invalid_input", "file_count").await;
    let many: Vec<Value> = (0..101)
        .map(|i| {
            json!({"file_path": sd.join(format!("h{i}.py")), "mode": "release_temporary", "expected_revision": rev,
                "artifact_generation": generation})
        })
        .collect();
    refused(&env, &mcp, with_files(json!(many)), "invalid_input", "file_count").await;

    // duplicate_path.
    let v = refused(&env, &mcp, with_files(json!([entry, entry])), "invalid_input", "duplicate_path").await;
    assert_eq!(v["files"][1]["reason"], "duplicate_path", "{v}");

    // path_not_exact.
    for path in [
        format!("{}/./h.py", p(&sd)),
        format!("{}//h.py", p(&sd)),
        format!("{}/../{}/h.py", p(&sd), sd.file_name().unwrap().to_str().unwrap()),
        format!("{}/h.py/", p(&sd)),
        "h.py".to_owned(),
        format!("{}/h\0.py", p(&sd)),
        format!("{}/{}", p(&sd), "a".repeat(300)),
    ] {
        refused(&env, &mcp, with_path(&path), "invalid_input", "path_not_exact").await;
    }

    // glob_not_allowed.
    for path in ["*.py", "h?.py", "[h].py"] {
        refused(&env, &mcp, with_path(&format!("{}/{path}", p(&sd))), "invalid_input", "glob_not_allowed").await;
    }

    // mixed_modes: a write in a release, a release under another operation.
    let replace = json!({"file_path": sd.join("w.py"), "mode": "replace", "content": "x"});
    refused(&env, &mcp, with_files(json!([entry, replace])), "invalid_input", "mixed_modes").await;
    let mut edit_op = with_files(json!([entry]));
    edit_op["operation"] = json!("edit");
    refused(&env, &mcp, edit_op, "invalid_input", "mixed_modes").await;

    // verification_not_allowed.
    let mut verify = with_files(json!([entry]));
    verify["verify_command"] = json!("true");
    refused(&env, &mcp, verify, "invalid_input", "verification_not_allowed").await;

    // thread_mismatch, workspace_mismatch.
    let mut other_thread = with_files(json!([entry]));
    other_thread["thread_id"] = json!("never-initialised");
    refused(&env, &mcp, other_thread, "denied", "thread_mismatch").await;
    for ws in [format!("{}/", p(&env.ws)), p(&env.root).to_owned(), format!("{}/.", p(&env.ws))] {
        let mut other_ws = with_files(json!([entry]));
        other_ws["workspace_root"] = json!(ws);
        refused(&env, &mcp, other_ws, "denied", "workspace_mismatch").await;
    }

    // After all that, the helper is intact and releases.
    assert_completed(&mcp.edit(with_files(json!([entry]))).await, &[&h]);
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_that_are_not_this_sessions_unchanged_helpers_are_refused() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    mcp.init(&env.ws, "t2").await;
    let sd = env.session_dir("t1");
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "hello\n").await;
    let one = |path: &Path, rev: &str, generation: &str| release_req("t1", &env.ws, &[(path, rev, generation)]);

    // not_session_helper: a source file, a file beside the session directories.
    let src = env.ws.join("src.py");
    std::fs::write(&src, "print('source')\n").unwrap();
    let read = mcp.call("ReadFiles", json!({"thread_id": "t1", "file_paths": [src]})).await;
    assert_eq!(read["files"][0]["revision"], revision_of(b"print('source')\n"), "{read}");
    assert!(read["files"][0].get("temporary_artifact").is_none(), "a source file has no token: {read}");
    let src_rev = read["files"][0]["revision"].as_str().unwrap().to_owned();
    refused(&env, &mcp, one(&src, &src_rev, &generation), "denied", "not_session_helper").await;
    let beside = env.ws.join(".winx/tmp/loose.py");
    std::fs::write(&beside, "loose").unwrap();
    refused(&env, &mcp, one(&beside, &rev, &generation), "denied", "not_session_helper").await;

    // other_session: t2's helper, with t2's own token.
    let (h2, rev2, gen2) = helper(&env, &mcp, "t2", "other.py", "t2\n").await;
    refused(&env, &mcp, one(&h2, &rev2, &gen2), "denied", "other_session").await;
    // A token of t1's session does not make t1's file t2's either.
    let v =
        refused(&env, &mcp, release_req("t2", &env.ws, &[(&h, &rev, &generation)]), "denied", "other_session").await;
    assert_eq!(v["files"][0]["reason"], "other_session");

    // reserved_namespace.
    let reserved = sd.join(".winx-release-0123456789abcdef").join("t000");
    refused(&env, &mcp, one(&reserved, &rev, &generation), "denied", "reserved_namespace").await;

    // symlink: the final component, or a directory component.
    mcp.bash("t1", "ln -s h.py $WINX_TEMP_DIR/link.py && ln -s . $WINX_TEMP_DIR/sub").await;
    refused(&env, &mcp, one(&sd.join("link.py"), &rev, &generation), "denied", "symlink").await;
    refused(&env, &mcp, one(&sd.join("sub/h.py"), &rev, &generation), "denied", "symlink").await;

    // hardlink: a second link made after the read.
    let (hl, hl_rev, hl_gen) = helper(&env, &mcp, "t1", "hl.py", "linked\n").await;
    mcp.bash("t1", "ln $WINX_TEMP_DIR/hl.py $WINX_TEMP_DIR/hl2.py").await;
    refused(&env, &mcp, one(&hl, &hl_rev, &hl_gen), "denied", "hardlink").await;

    // not_regular_file: a fifo, a directory.
    mcp.bash("t1", "mkfifo $WINX_TEMP_DIR/fifo && mkdir $WINX_TEMP_DIR/dir").await;
    refused(&env, &mcp, one(&sd.join("fifo"), &rev, &generation), "denied", "not_regular_file").await;
    refused(&env, &mcp, one(&sd.join("dir"), &rev, &generation), "denied", "not_regular_file").await;
    assert!(is_fifo(&sd.join("fifo")));

    // not_found, also next to a good target (which is then denied too).
    refused(&env, &mcp, one(&sd.join("missing.py"), &rev, &generation), "denied", "not_found").await;
    let pair = release_req("t1", &env.ws, &[(&h, &rev, &generation), (&sd.join("missing.py"), &rev, &generation)]);
    let v = refused(&env, &mcp, pair, "denied", "not_found").await;
    assert_eq!(v["files"][1]["reason"], "not_found", "{v}");

    // read_required: no token, a malformed one, another file's, a changed file.
    let mut no_token = one(&h, &rev, &generation);
    no_token["files"][0].as_object_mut().unwrap().remove("artifact_generation");
    refused(&env, &mcp, no_token, "denied", "read_required").await;
    refused(&env, &mcp, one(&h, &rev, "not-a-token"), "denied", "read_required").await;
    let (g, g_rev, _) = helper(&env, &mcp, "t1", "g.py", "hello\n").await;
    assert_eq!(g_rev, rev, "same bytes, same revision");
    refused(&env, &mcp, one(&g, &g_rev, &generation), "denied", "read_required").await;
    // An identical replacement (same bytes, another inode) needs a new read.
    mcp.bash("t1", "cp $WINX_TEMP_DIR/h.py $WINX_TEMP_DIR/h.tmp && mv $WINX_TEMP_DIR/h.tmp $WINX_TEMP_DIR/h.py").await;
    refused(&env, &mcp, one(&h, &rev, &generation), "denied", "read_required").await;
    let (rev, generation) = mcp.read_helper("t1", &h).await;
    // Changed bytes.
    mcp.bash("t1", "echo more >> $WINX_TEMP_DIR/h.py").await;
    refused(&env, &mcp, one(&h, &rev, &generation), "denied", "read_required").await;
    let (rev, generation) = mcp.read_helper("t1", &h).await;

    // revision_mismatch: a valid token with another revision.
    refused(&env, &mcp, one(&h, &revision_of(b"something else"), &generation), "denied", "revision_mismatch").await;

    // Everything survived; the real thing still works.
    assert_completed(&mcp.edit(one(&h, &rev, &generation)).await, &[&h]);
    assert!(h2.exists() && src.exists() && beside.exists() && hl.exists() && g.exists());
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn architect_mode_denies_release() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "plan\n").await;
    let v = mcp.init_with(json!({"any_workspace_path": env.ws, "thread_id": "t1", "mode_name": "architect"})).await;
    assert_eq!(v["mode_name"], "architect", "{v}");
    let v =
        refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "policy_denied").await;
    assert_eq!(v["files"][0]["reason"], "policy_denied");
    let before = snapshot(&[&env.ws, &env.data]);
    let bash = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "rm -f $WINX_TEMP_DIR/h.py"})).await;
    assert_eq!((bash["status"].as_str(), bash["errorCode"].as_str()), (Some("denied"), Some("policy_denied")));
    assert_eq!(before, snapshot(&[&env.ws, &env.data]));
    assert!(h.exists());
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_guardian_is_owner_unavailable() {
    let (mut env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "owned\n").await;
    env.kill_guardian();
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "owner_unavailable").await;
    let bash = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "true"})).await;
    assert_eq!(bash["errorCode"], "owner_unavailable", "{bash}");

    // A new guardian does not silently adopt the session: still refused
    // until the thread is initialised again.
    env.start_guardian();
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "owner_unavailable").await;
    mcp.init(&env.ws, "t1").await;
    assert_completed(&mcp.edit(release_req("t1", &env.ws, &[(&h, &rev, &generation)])).await, &[&h]);
    mcp.stop().await;
}

/// A guardian of an older kind: answers `hello` with `caps`, `session_open`,
/// and `unknown_op` to everything else; records every op it receives.
struct FakeGuardian {
    ops: Arc<Mutex<Vec<String>>>,
}

impl FakeGuardian {
    fn start(sock: &Path, caps: &'static [&'static str]) -> FakeGuardian {
        let listener = UnixListener::bind(sock).expect("bind fake guardian");
        let ops = Arc::new(Mutex::new(Vec::new()));
        let seen = ops.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut w = conn.try_clone().unwrap();
                    for line in BufReader::new(conn).lines() {
                        let Ok(line) = line else { return };
                        let req: Value = serde_json::from_str(&line).unwrap();
                        let op = req["op"].as_str().unwrap_or_default().to_owned();
                        seen.lock().unwrap().push(op.clone());
                        let mut reply = match op.as_str() {
                            "hello" => json!({"ok": true, "protocol": 1, "guardian": "old-guardian/0.0.1",
                                "platform": "linux", "capabilities": caps, "instance": "0123456789abcdef",
                                "pid": 1}),
                            "session_open" => json!({"ok": true, "session_dir": "", "instance": "0123456789abcdef"}),
                            other => json!({"ok": false, "error": {"code": "unknown_op",
                                "message": format!("unknown op {other:?}")}}),
                        };
                        reply["id"] = req["id"].clone();
                        let mut out = serde_json::to_vec(&reply).unwrap();
                        out.push(b'\n');
                        if w.write_all(&out).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeGuardian { ops }
    }

    fn ops(&self) -> Vec<String> {
        self.ops.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_guardian_is_owner_unsupported_and_never_sent_a_release() {
    for caps in [&["executions"][..], &["temporary_release", "executions"][..]] {
        // Without the capability the release is never sent; with it, an
        // `unknown_op` answer counts the same.
        let env = Env::new();
        let fake = FakeGuardian::start(&env.sock, caps);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_command_is_pending_actions() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "queued\n").await;
    let first = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "sleep 30", "wait_for_seconds": 0})).await;
    assert_eq!(first["status"], "running", "{first}");
    let second = mcp
        .call("BashCommand", json!({"thread_id": "t1", "command": "rm -f $WINX_TEMP_DIR/h.py", "wait_for_seconds": 0}))
        .await;
    assert_eq!(second["status"], "running", "{second}");
    assert_eq!(second["queued"], true, "the guardian reports it queued: {second}");
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "pending_actions").await;
    let id = second["command_id"].as_str().unwrap();
    let v = mcp
        .call("BashCommand", json!({"thread_id": "t1", "status_check": true, "command_id": id, "wait_for_seconds": 0}))
        .await;
    assert_eq!(v["queued"], true, "{v}");
    assert!(h.exists());
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backing_store_links_and_special_files_fail_closed() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "backed\n").await;
    let req = release_req("t1", &env.ws, &[(&h, &rev, &generation)]);

    // A symbolic link in W/.winx/scratch.
    let scratch = env.ws.join(".winx/scratch");
    std::fs::create_dir_all(scratch.join("deep/er")).unwrap();
    let link = scratch.join("deep/er/link");
    std::os::unix::fs::symlink(&h, &link).unwrap();
    refused(&env, &mcp, req.clone(), "denied", "backing_symlink").await;
    std::fs::remove_file(&link).unwrap();

    // A fifo in D/executions.
    let fifo = env.data.join("executions/a-fifo");
    mkfifo(&fifo);
    refused(&env, &mcp, req.clone(), "denied", "backing_unsupported_entry").await;
    std::fs::remove_file(&fifo).unwrap();

    // A tree deeper than 16 levels below a backing root.
    let deep = (1..=17).fold(env.data.join("executions"), |d, i| d.join(i.to_string()));
    std::fs::create_dir_all(&deep).unwrap();
    refused(&env, &mcp, req.clone(), "denied", "backing_scan_limit").await;
    std::fs::remove_dir_all(env.data.join("executions/1")).unwrap();

    // A hard link in a backing root: the helper now has two links, which is
    // refused as `hardlink` before any scan (so `backing_alias` needs a bind
    // mount: see the next test).
    let alias = env.data.join("receipts/alias");
    std::fs::create_dir_all(alias.parent().unwrap()).unwrap();
    std::fs::hard_link(&h, &alias).unwrap();
    refused(&env, &mcp, req.clone(), "denied", "hardlink").await;
    std::fs::remove_file(&alias).unwrap();

    // Clean again: the helper releases.
    let (rev, generation) = mcp.read_helper("t1", &h).await;
    assert_completed(&mcp.edit(release_req("t1", &env.ws, &[(&h, &rev, &generation)])).await, &[&h]);
    mcp.stop().await;
}

/// `backing_alias` needs a backing-store entry that is the helper's physical
/// file with one link only: a bind mount of the helper inside `D`. The
/// guardian runs in a private mount namespace so the mount never leaks; the
/// test is skipped where mount namespaces cannot be made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_mounted_alias_in_a_backing_root_is_backing_alias() {
    let probe = Command::new("unshare").args(["-m", "--propagation", "private", "true"]).status();
    let nsenter = Command::new("nsenter").arg("--version").stdout(Stdio::null()).status();
    if !probe.is_ok_and(|s| s.success()) || !nsenter.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot make a mount namespace here (unshare -m, nsenter)");
        return;
    }
    let mut env = Env::new();
    let pid = env.start_guardian_with(&["unshare", "-m", "--propagation", "private", "--"]);
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    let (h, rev, generation) = helper(&env, &mcp, "t1", "h.py", "aliased\n").await;
    let alias = env.data.join("executions/alias");
    std::fs::write(&alias, "").unwrap();
    let mounted = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-m", "--", "mount", "--bind", p(&h), p(&alias)])
        .status()
        .expect("nsenter");
    assert!(mounted.success(), "bind mount in the guardian's namespace");
    refused(&env, &mcp, release_req("t1", &env.ws, &[(&h, &rev, &generation)]), "denied", "backing_alias").await;
    assert_eq!(std::fs::read(&h).unwrap(), b"aliased\n");
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_sessions_release_concurrently() {
    let (env, mcp) = world().await;
    let threads = ["c0", "c1", "c2", "c3"];
    let mut reqs = Vec::new();
    let mut all_paths = Vec::new();
    for t in threads {
        mcp.init(&env.ws, t).await;
        mcp.bash(t, "for i in 1 2 3 4 5; do echo \"$i $RANDOM\" > $WINX_TEMP_DIR/h$i.py; done").await;
        let paths: Vec<PathBuf> = (1..=5).map(|i| env.session_dir(t).join(format!("h{i}.py"))).collect();
        let read = mcp.call("ReadFiles", json!({"thread_id": t, "file_paths": paths})).await;
        assert_eq!(read["status"], "completed", "{read}");
        let entries: Vec<(String, String)> = read["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let rev = f["revision"].as_str().unwrap().to_owned();
                (rev, f["temporary_artifact"]["artifact_generation"].as_str().unwrap().to_owned())
            })
            .collect();
        let triples: Vec<(&Path, &str, &str)> =
            paths.iter().zip(&entries).map(|(p, (r, g))| (p.as_path(), r.as_str(), g.as_str())).collect();
        reqs.push(release_req(t, &env.ws, &triples));
        all_paths.push(paths);
    }
    let (a, b, c, d) = tokio::join!(
        mcp.edit(reqs[0].clone()),
        mcp.edit(reqs[1].clone()),
        mcp.edit(reqs[2].clone()),
        mcp.edit(reqs[3].clone())
    );
    for (v, paths) in [a, b, c, d].iter().zip(&all_paths) {
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        assert_completed(v, &refs);
    }
    for t in threads {
        let left: Vec<_> = std::fs::read_dir(env.session_dir(t)).unwrap().collect();
        assert!(left.is_empty(), "session {t} is empty afterwards: {left:?}");
    }
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

/// Hostile input over raw stdio: a 10,000-entry request, deeply nested JSON,
/// over-long paths, a lone surrogate and bytes that are not UTF-8. Each gets
/// one clear answer, the server stays up, and nothing on disk changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_clear_answers_and_touches_nothing() {
    let mut env = Env::new();
    env.start_guardian();
    let (_, log) = env.log_file("mcp-hostile");
    let mut child = env
        .command(&["mcp", "--socket", p(&env.sock)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("spawn mcp");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut send_raw = |bytes: &[u8]| {
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let recv = || -> Value {
        let line = rx.recv_timeout(Duration::from_secs(20)).expect("a response line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {line:?}: {e}"))
    };
    send_raw(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "hostile", "version": "0"}}})
        .to_string()
        .as_bytes(),
    );
    recv();
    send_raw(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string().as_bytes());
    send_raw(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Initialize",
        "arguments": {"any_workspace_path": env.ws, "thread_id": "h"}}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(recv()["result"]["isError"], false);
    let session = env.session_dir("h");
    std::fs::write(session.join("keep.py"), b"keep").unwrap();
    let before = snapshot(&[&env.ws, &env.data]);
    let call = |id: u64, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "EditFiles", "arguments": args}});
    let entry = |path: String| {
        json!({"file_path": path, "mode": "release_temporary",
            "expected_revision": format!("sha256:{}", "0".repeat(64)), "artifact_generation": "g1.00"})
    };
    // 10,000 entries.
    let many: Vec<Value> = (0..10_000).map(|i| entry(format!("{}/h{i}.py", session.display()))).collect();
    let args = json!({"thread_id": "h", "workspace_root": env.ws, "operation": "release_temporary", "files": many});
    send_raw(call(3, args).to_string().as_bytes());
    let r = recv();
    assert_eq!(r["result"]["structuredContent"]["errorCode"], "file_count", "{}", &r.to_string()[..200]);
    // Over-long path and over-long name.
    let long = entry(format!("{}/{}", session.display(), "d/".repeat(2100) + "x"));
    let args = json!({"thread_id": "h", "workspace_root": env.ws, "operation": "release_temporary", "files": [long]});
    send_raw(call(4, args).to_string().as_bytes());
    assert_eq!(recv()["result"]["structuredContent"]["errorCode"], "path_not_exact");
    let name = entry(format!("{}/{}", session.display(), "n".repeat(300)));
    let args = json!({"thread_id": "h", "workspace_root": env.ws, "operation": "release_temporary", "files": [name]});
    send_raw(call(5, args).to_string().as_bytes());
    assert_eq!(recv()["result"]["structuredContent"]["errorCode"], "path_not_exact");
    // Deeply nested arguments: a JSON-RPC error or an invalid_input result.
    let nested = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"EditFiles","arguments":{{"thread_id":"h","files":{}{}}}}}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    send_raw(nested.as_bytes());
    // A lone surrogate in a path, then bytes that are not UTF-8 at all.
    let surrogate = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"EditFiles","arguments":{{"thread_id":"h","workspace_root":"{}","operation":"release_temporary","files":[{{"file_path":"{}/\udc80.py","mode":"release_temporary","expected_revision":"sha256:{}","artifact_generation":"g1.00"}}]}}}}}}"#,
        env.ws.display(),
        session.display(),
        "0".repeat(64)
    );
    send_raw(surrogate.as_bytes());
    send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"ReadFiles\",\"arguments\":{\"thread_id\":\"h\",\"file_paths\":[\"/tmp/\xff\xfe\"]}}}");
    // The transport may answer a line it cannot decode with an error or
    // drop it; whatever it answers is a refusal, and it still serves the
    // next request.
    send_raw(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string().as_bytes());
    loop {
        let r = recv();
        if r["id"] == 9 {
            assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(4), "{r}");
            break;
        }
        assert!(r["error"].is_object() || support::is_failure(&r["result"]["structuredContent"]), "{r}");
    }
    assert_eq!(snapshot(&[&env.ws, &env.data]), before, "hostile input changed the filesystem");
    assert_eq!(std::fs::read(session.join("keep.py")).unwrap(), b"keep");
    let _ = child.kill();
    let _ = child.wait();
}
