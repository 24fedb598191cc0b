//! End to end releases through the real guardian and MCP frontend: release
//! and replay (across restarts, with the path reused), token expiry, refused
//! targets, policy, backing-store trouble, bind-mounted aliases, concurrent
//! sessions.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{
    assert_completed, helper, is_fifo, mkfifo, p, read_then_release_req, refused, release_req, revision_of, snapshot,
    without_members, world, Env,
};
use serde_json::{json, Value};

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
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    check_replay(&mcp.edit(req.clone()).await);
    assert_eq!(before, without_members(snapshot(&[&env.ws, &env.data])));

    // After a restart of the frontend (a new secret), without Initialize.
    mcp.stop().await;
    let mcp = env.mcp(&[]).await;
    check_replay(&mcp.edit(req.clone()).await);
    assert_eq!(before, without_members(snapshot(&[&env.ws, &env.data])));

    // A new file at the released path survives the replay.
    mcp.init(&env.ws, "t1").await;
    mcp.bash("t1", "echo new > $WINX_TEMP_DIR/h.py").await;
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    check_replay(&mcp.edit(req.clone()).await);
    assert_eq!(before, without_members(snapshot(&[&env.ws, &env.data])));
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

    // No token: invalid_input, whose message says to read first (contract
    // section 4).
    let mut no_token = one(&h, &rev, &generation);
    no_token["files"][0].as_object_mut().unwrap().remove("artifact_generation");
    let v = refused(&env, &mcp, no_token, "invalid_input", "invalid_input").await;
    assert!(v["message"].as_str().unwrap().contains("ReadFiles"), "{v}");
    // read_required: a malformed token, another file's, a changed file.
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
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    let bash = mcp.call("BashCommand", json!({"thread_id": "t1", "command": "rm -f $WINX_TEMP_DIR/h.py"})).await;
    assert_eq!((bash["status"].as_str(), bash["errorCode"].as_str()), (Some("denied"), Some("policy_denied")));
    assert_eq!(before, without_members(snapshot(&[&env.ws, &env.data])));
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
        reqs.push(read_then_release_req(&env, &mcp, t, &paths).await);
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
