//! Whole-file writes (quotas, the reserved namespace) and `BashCommand`
//! (embedded, policy, and the one-shot fallback of a guardian without
//! shells).

use super::*;

#[test]
fn replace_writes_quotas_and_reserved_namespace() {
    let env = Env::new();
    let ws = env.ws();
    let fe = env.embedded();
    init(&fe, ws, "t1");
    let write = |thread: &str, path: &str, content: &str| {
        fe.edit_files(json!({"thread_id": thread, "workspace_root": ws,
            "files": [{"file_path": path, "mode": "replace", "content": content}]}))
    };
    let target = format!("{ws}/src/new/a.txt");
    let v = write("t1", &target, "hello");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["files"][0]["outcome"], "written");
    assert_eq!(v["files"][0]["revision"], format!("sha256:{}", hex::encode(Sha256::digest(b"hello"))));
    assert_eq!(std::fs::read(&target).unwrap(), b"hello");
    // Overwrite keeps the permission bits; no temporary left.
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(write("t1", &target, "bye")["status"], "completed");
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_dir(env.ws.join("src/new")).unwrap().count(), 1);

    // Reserved namespace: directly, and through a symlinked parent.
    let sd = env.session_dir("t1");
    let q = sd.join(".winx-release-00000000000000");
    std::fs::create_dir(&q).unwrap();
    let v = write("t1", q.join("x").to_str().unwrap(), "x");
    assert_eq!(code(&v), "reserved_namespace");
    std::os::unix::fs::symlink(&q, env.ws.join("innocent")).unwrap();
    let v = write("t1", &format!("{ws}/innocent/x"), "x");
    assert_eq!((v["status"].as_str(), code(&v)), (Some("denied"), "reserved_namespace"));
    let v = write("t1", &format!("{ws}/innocent/deeper/x"), "x");
    assert_eq!(code(&v), "reserved_namespace");
    assert_eq!(std::fs::read_dir(&q).unwrap().count(), 0);
    // A link whose target is in the namespace.
    std::fs::write(q.join("captured"), b"keep").unwrap();
    std::os::unix::fs::symlink(q.join("captured"), env.ws.join("alias")).unwrap();
    assert_eq!(code(&write("t1", &format!("{ws}/alias"), "x")), "reserved_namespace");
    assert_eq!(std::fs::read(q.join("captured")).unwrap(), b"keep");
    // A hard link of a captured object (the engine's one alias rule).
    std::fs::hard_link(q.join("captured"), env.ws.join("hardalias")).unwrap();
    assert_eq!(code(&write("t1", &format!("{ws}/hardalias"), "x")), "reserved_namespace");
    assert_eq!(std::fs::read(env.ws.join("hardalias")).unwrap(), b"keep");
    std::fs::remove_file(env.ws.join("hardalias")).unwrap();
    std::fs::remove_file(q.join("captured")).unwrap();

    // Quotas: 128 files per session, counted across one request.
    for i in 0..127 {
        std::fs::write(sd.join(format!("f{i}")), b"").unwrap();
    }
    let two = fe.edit_files(json!({"thread_id": "t1", "workspace_root": ws, "files": [
        {"file_path": sd.join("n1"), "mode": "replace", "content": "1"},
        {"file_path": sd.join("n2"), "mode": "replace", "content": "2"}]}));
    assert_eq!((two["status"].as_str(), code(&two)), (Some("denied"), "quota_exceeded"));
    assert_eq!(two["files"][0]["reason"], "quota_exceeded");
    assert!(!sd.join("n1").exists());
    assert_eq!(write("t1", sd.join("n1").to_str().unwrap(), "1")["status"], "completed");
    // Overwriting an existing helper adds no file.
    assert_eq!(write("t1", sd.join("f0").to_str().unwrap(), "z")["status"], "completed");
    assert_eq!(code(&write("t1", sd.join("n3").to_str().unwrap(), "3")), "quota_exceeded");
    // Through a symlinked parent, the quota still applies.
    std::os::unix::fs::symlink(&sd, env.ws.join("sess")).unwrap();
    assert_eq!(code(&write("t1", &format!("{ws}/sess/n4"), "4")), "quota_exceeded");

    // Policy and validation of writes.
    fe.initialize(json!({"any_workspace_path": ws, "thread_id": "ta", "mode_name": "architect"}));
    assert_eq!(code(&write("ta", &format!("{ws}/x"), "x")), "policy_denied");
    fe.initialize(json!({"any_workspace_path": ws, "thread_id": "tc", "mode_name": "code_writer",
        "code_writer_config": {"allowed_globs": ["src/**"], "allowed_commands": []}}));
    assert_eq!(write("tc", &format!("{ws}/src/ok.txt"), "x")["status"], "completed");
    assert_eq!(code(&write("tc", &format!("{ws}/other.txt"), "x")), "policy_denied");
    std::os::unix::fs::symlink(env.ws.join("elsewhere"), env.ws.join("src/escape")).unwrap();
    std::fs::create_dir(env.ws.join("elsewhere")).unwrap();
    assert_eq!(code(&write("tc", &format!("{ws}/src/escape/x"), "x")), "policy_denied");
    let verify = fe.edit_files(json!({"thread_id": "tc", "workspace_root": ws, "verify_command": "make",
        "files": [{"file_path": format!("{ws}/src/ok.txt"), "mode": "replace", "content": "y"}]}));
    assert_eq!(code(&verify), "policy_denied");
    assert_eq!(code(&write("nobody", &format!("{ws}/x"), "x")), "thread_mismatch");
    assert_eq!(code(&write("t1", "relative", "x")), "path_not_exact");
    let wm = fe.edit_files(json!({"thread_id": "t1", "workspace_root": "/", "files": [
        {"file_path": format!("{ws}/x"), "mode": "replace", "content": "x"}]}));
    assert_eq!(code(&wm), "workspace_mismatch");
    // verify_command runs after a completed write.
    let v = fe.edit_files(json!({"thread_id": "t1", "workspace_root": ws, "verify_command": "cat src/new/a.txt",
        "files": [{"file_path": target, "mode": "replace", "content": "checked"}]}));
    assert_eq!(v["verification"]["output"], "checked", "{v}");
}

#[test]
fn bash_embedded_and_policy() {
    let env = Env::new();
    let ws = env.ws();
    let fe = env.embedded();
    init(&fe, ws, "t1");
    let v = fe.bash_command(json!({"thread_id": "t1", "command": "echo $WINX_TEMP_DIR"}));
    assert_eq!(v["status"], "completed");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["output"].as_str().unwrap().trim(), env.session_dir("t1").to_str().unwrap());
    assert!(summary("BashCommand", &v).contains("exit code 0"));
    let id = v["command_id"].as_str().unwrap();
    let s = fe.bash_command(json!({"thread_id": "t1", "status_check": true, "command_id": id}));
    assert_eq!(s["status"], "completed");
    assert_eq!(code(&fe.bash_command(json!({"thread_id": "zz", "command": "true"}))), "thread_mismatch");
    assert_eq!(code(&fe.bash_command(json!({"thread_id": "t1"}))), "invalid_input");
    fe.initialize(json!({"any_workspace_path": ws, "thread_id": "ta", "mode_name": "architect"}));
    assert_eq!(code(&fe.bash_command(json!({"thread_id": "ta", "command": "true"}))), "policy_denied");
    fe.initialize(json!({"any_workspace_path": ws, "thread_id": "tc", "mode_name": "code_writer",
        "code_writer_config": {"allowed_globs": "all", "allowed_commands": ["echo ok"]}}));
    assert_eq!(fe.bash_command(json!({"thread_id": "tc", "command": "echo ok"}))["output"], "ok\n");
    assert_eq!(code(&fe.bash_command(json!({"thread_id": "tc", "command": "echo no"}))), "policy_denied");
    // Without a guardian, commands are refused (no launch outside Initialize).
    let fg = env.guarded();
    init(&fg, ws, "t1");
    assert_eq!(code(&fg.bash_command(json!({"thread_id": "t1", "command": "true"}))), "owner_unavailable");
    assert!(fe.call("Nope", json!({})).is_none());
    assert_eq!(fe.call("BashCommand", json!({"thread_id": "t1", "command": "true"})).unwrap()["status"], "completed");
}

/// A guardian without shells (it answers `shell` with `unknown_op`): a
/// command and a `status_check` of a command id run one-shot through
/// `exec` / `exec_status`; input, which needs a terminal, is
/// `owner_unsupported` and nothing is sent.
#[test]
fn bash_falls_back_to_exec_on_a_guardian_without_shells() {
    let env = Env::new();
    let ws = env.ws();
    let handler: Arc<Handler> = Arc::new(|op: &str, _: &Value| match op {
        "hello" => Some(hello_reply(&["temporary_release", "executions"], "old-1")),
        "session_open" => Some(json!({"ok": true, "session_dir": "", "instance": "old-1"})),
        "exec" | "exec_status" => Some(json!({"ok": true, "command_id": "c1", "status": "completed",
            "exit_code": 0, "output": "hi\n", "output_truncated": false})),
        _ => Some(json!({"ok": false, "error": {"code": "unknown_op", "message": op}})),
    });
    let g = FakeGuardian::start(env.sock.clone(), handler);
    let fe = env.guarded();
    init(&fe, ws, "t1");
    let v = fe.bash_command(json!({"thread_id": "t1", "command": "echo hi"}));
    assert_eq!((&v["status"], &v["exit_code"], &v["output"]), (&json!("completed"), &json!(0), &json!("hi\n")), "{v}");
    let s = fe.bash_command(json!({"thread_id": "t1", "status_check": true, "command_id": "c1"}));
    assert_eq!(s["status"], "completed", "{s}");
    let t = fe.bash_command(json!({"thread_id": "t1", "send_text": "y"}));
    assert_eq!(code(&t), "owner_unsupported", "{t}");
    let ops = g.ops();
    assert_eq!(ops.iter().filter(|o| *o == "shell").count(), 3, "{ops:?}");
    assert!(ops.contains(&"exec".to_owned()) && ops.contains(&"exec_status".to_owned()), "{ops:?}");
}
