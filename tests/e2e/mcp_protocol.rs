//! End to end at the MCP wire: the real `winx-release guardian` and
//! `winx-release mcp` processes, driven by rmcp's client and by raw stdio
//! lines (tool listing, protocol errors, malformed and hostile requests).
//! Every refused request leaves the workspace and the data directory
//! byte-identical.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::{assert_completed, helper, p, refused, snapshot, without_members, world, Env, RawMcp};
use serde_json::{json, Value};

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
    let mut raw = RawMcp::start(&env, "mcp-raw");
    let t = Duration::from_secs(10);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}));
    let r = raw.recv(t);
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18", "{r}");
    assert_eq!(r["result"]["serverInfo"]["name"], "winx-release", "{r}");
    assert!(r["result"]["capabilities"]["tools"].is_object(), "{r}");
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let r = raw.recv(t);
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(4), "{r}");
    raw.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "Initialize",
        "arguments": {"any_workspace_path": env.ws, "thread_id": "raw"}}}));
    let r = raw.recv(t);
    assert_eq!(r["id"], 3, "{r}");
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["thread_id"], "raw", "{r}");
    assert_eq!(r["result"]["content"][0]["type"], "text", "{r}");
    raw.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "EditFiles",
        "arguments": {"thread_id": "raw", "workspace_root": env.ws, "operation": "release_temporary", "files": []}}}));
    let r = raw.recv(t);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["structuredContent"]["errorCode"], "file_count", "{r}");
    raw.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "Nope", "arguments": {}}}));
    let r = raw.recv(t);
    assert_eq!(r["id"], 5, "{r}");
    assert!(r["error"]["code"].is_i64(), "{r}");

    // EOF on stdin ends the server cleanly.
    raw.close_stdin();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = raw.child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "the server did not exit after EOF");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
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

/// Hostile input over raw stdio: a 10,000-entry request, deeply nested JSON,
/// over-long paths, a lone surrogate and bytes that are not UTF-8. Each gets
/// one clear answer, the server stays up, and nothing on disk changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_gets_clear_answers_and_touches_nothing() {
    let mut env = Env::new();
    env.start_guardian();
    let mut raw = RawMcp::start(&env, "mcp-hostile");
    let t = Duration::from_secs(20);
    raw.send_raw(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "hostile", "version": "0"}}})
        .to_string()
        .as_bytes(),
    );
    raw.recv(t);
    raw.send_raw(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string().as_bytes());
    raw.send_raw(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Initialize",
        "arguments": {"any_workspace_path": env.ws, "thread_id": "h"}}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(raw.recv(t)["result"]["isError"], false);
    let session = env.session_dir("h");
    std::fs::write(session.join("keep.py"), b"keep").unwrap();
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    let call = |id: u64, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "EditFiles", "arguments": args}});
    let entry = |path: String| {
        json!({"file_path": path, "mode": "release_temporary",
            "expected_revision": format!("sha256:{}", "0".repeat(64)), "artifact_generation": "g1.00"})
    };
    // 10,000 entries.
    let many: Vec<Value> = (0..10_000).map(|i| entry(format!("{}/h{i}.py", session.display()))).collect();
    let args = json!({"thread_id": "h", "workspace_root": env.ws, "operation": "release_temporary", "files": many});
    raw.send_raw(call(3, args).to_string().as_bytes());
    let r = raw.recv(t);
    assert_eq!(r["result"]["structuredContent"]["errorCode"], "file_count", "{}", &r.to_string()[..200]);
    // Over-long path and over-long name.
    let long = entry(format!("{}/{}", session.display(), "d/".repeat(2100) + "x"));
    let args = json!({"thread_id": "h", "workspace_root": env.ws, "operation": "release_temporary", "files": [long]});
    raw.send_raw(call(4, args).to_string().as_bytes());
    assert_eq!(raw.recv(t)["result"]["structuredContent"]["errorCode"], "path_not_exact");
    let name = entry(format!("{}/{}", session.display(), "n".repeat(300)));
    let args = json!({"thread_id": "h", "workspace_root": env.ws, "operation": "release_temporary", "files": [name]});
    raw.send_raw(call(5, args).to_string().as_bytes());
    assert_eq!(raw.recv(t)["result"]["structuredContent"]["errorCode"], "path_not_exact");
    // Deeply nested arguments: a JSON-RPC error or an invalid_input result.
    let nested = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"EditFiles","arguments":{{"thread_id":"h","files":{}{}}}}}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    raw.send_raw(nested.as_bytes());
    // A lone surrogate in a path, then bytes that are not UTF-8 at all.
    let surrogate = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"EditFiles","arguments":{{"thread_id":"h","workspace_root":"{}","operation":"release_temporary","files":[{{"file_path":"{}/\udc80.py","mode":"release_temporary","expected_revision":"sha256:{}","artifact_generation":"g1.00"}}]}}}}}}"#,
        env.ws.display(),
        session.display(),
        "0".repeat(64)
    );
    raw.send_raw(surrogate.as_bytes());
    raw.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"ReadFiles\",\"arguments\":{\"thread_id\":\"h\",\"file_paths\":[\"/tmp/\xff\xfe\"]}}}");
    // The transport may answer a line it cannot decode with an error or
    // drop it; whatever it answers is a refusal, and it still serves the
    // next request.
    raw.send_raw(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string().as_bytes());
    loop {
        let r = raw.recv(t);
        if r["id"] == 9 {
            assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(4), "{r}");
            break;
        }
        assert!(r["error"].is_object() || crate::support::is_failure(&r["result"]["structuredContent"]), "{r}");
    }
    assert_eq!(without_members(snapshot(&[&env.ws, &env.data])), before, "hostile input changed the filesystem");
    assert_eq!(std::fs::read(session.join("keep.py")).unwrap(), b"keep");
}
