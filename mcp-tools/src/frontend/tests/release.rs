//! The frontend's releases against a scripted guardian: its connection,
//! the owner's answers, receipts and replays, a lost reply, an unwritable
//! receipt store.

use super::*;

/// A guardian whose `release` completes without touching anything, and
/// closes the connection after answering when `close` says so.
fn answering_guardian(env: &Env, close: bool) -> FakeGuardian {
    let handler: Arc<Handler> = Arc::new(move |op: &str, _: &Value| match op {
        "hello" => Some(hello_reply(&["temporary_release"], "one")),
        "session_open" => Some(json!({"ok": true, "session_dir": "", "instance": "one"})),
        "release" => {
            let report = ReleaseReport::denied(&[], Reason::PolicyDenied, &[], "scripted");
            Some(json!({"ok": true, "report": report, "_close": close}))
        }
        _ => Some(json!({"ok": false, "error": {"code": "unknown_op", "message": op}})),
    });
    FakeGuardian::start(env.sock.clone(), handler)
}

#[test]
fn a_guardian_connection_is_kept_between_calls_until_the_guardian_closes_it() {
    for close in [false, true] {
        let env = Env::new();
        let ws = env.ws();
        let fe = env.guarded();
        let g = answering_guardian(&env, close);
        init(&fe, ws, "t1");
        for (i, name) in ["a.py", "b.py", "c.py"].into_iter().enumerate() {
            let h = env.helper("t1", name, b"x");
            let v = fe.edit_files(release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]));
            assert_eq!(code(&v), "policy_denied", "{v}");
            if close {
                // The close comes after the answer: the next call must see it.
                g.wait_closes(i + 1);
            }
        }
        let hellos_after_init = g.ops().iter().skip(2).filter(|o| *o == "hello").count();
        // Kept: one hello for the three releases; closed after each answer:
        // a new connection, and its hello, for each.
        assert_eq!(hellos_after_init, if close { 3 } else { 1 }, "close {close}: {:?}", g.ops());
        assert_eq!(g.ops().iter().filter(|o| *o == "release").count(), 3);
    }
}

/// A read-only thread says at `Initialize` that its releases are refused
/// (`policy_denied`), with a capable guardian answering; a `wcgw` thread of
/// the same guardian is told they are available.
#[test]
fn architect_mode_says_releases_are_not_available() {
    let env = Env::new();
    let ws = env.ws();
    let fe = env.guarded();
    let _g = answering_guardian(&env, false);
    let arch = fe.initialize(json!({"any_workspace_path": ws, "thread_id": "ta", "mode_name": "architect"}));
    assert_eq!(arch["temporary_release"], json!({"available": false, "reason": "policy_denied"}), "{arch}");
    let v = init(&fe, ws, "t1");
    assert_eq!(v["temporary_release"], json!({"available": true, "reason": null}), "{v}");
}

#[test]
fn instance_change_is_owner_unavailable() {
    let env = Env::new();
    let ws = env.ws();
    let fe = env.guarded();
    {
        let _g = env.engine_guardian(&["temporary_release"], "first");
        init(&fe, ws, "t1");
    }
    // The first guardian stops listening only when its thread ends; replace
    // the socket with a new guardian (another instance).
    std::fs::remove_file(&env.sock).unwrap();
    let g2 = env.engine_guardian(&["temporary_release"], "second");
    let h = env.helper("t1", "h.py", b"x");
    let req = release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]);
    assert_eq!(code(&fe.edit_files(req)), "owner_unavailable");
    assert!(!g2.ops().contains(&"release".to_owned()));
    assert!(Path::new(&h).exists());
    drop(g2);
    // A new instance serving this frontend's data directory (a restart):
    // the thread is re-attached to it (`session_open`) and the release sent.
    let _ = std::fs::remove_file(&env.sock);
    std::fs::create_dir_all(&env.data).unwrap();
    let data = std::fs::canonicalize(&env.data).unwrap().display().to_string();
    let handler: Arc<Handler> = Arc::new(move |op: &str, _: &Value| match op {
        "hello" => {
            let mut h = hello_reply(&["temporary_release"], "third");
            h["data_dir"] = json!(data);
            Some(h)
        }
        "session_open" => Some(json!({"ok": true, "session_dir": "", "instance": "third"})),
        "release" => {
            let report = ReleaseReport::denied(&[], Reason::PolicyDenied, &[], "scripted");
            Some(json!({"ok": true, "report": report}))
        }
        _ => Some(json!({"ok": false, "error": {"code": "unknown_op", "message": op}})),
    });
    let g3 = FakeGuardian::start(env.sock.clone(), handler);
    let req = release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]);
    assert_eq!(code(&fe.edit_files(req)), "policy_denied");
    let ops = g3.ops();
    let at = |op: &str| ops.iter().position(|o| o == op);
    assert!(at("session_open").is_some() && at("session_open") < at("release"), "{ops:?}");
}

#[test]
fn release_receipt_and_replay() {
    let env = Env::new();
    let ws = env.ws();
    let g = env.engine_guardian(&["temporary_release"], "inst");
    let fe = env.guarded();
    let v = init(&fe, ws, "t1");
    assert_eq!(v["temporary_release"]["available"], true);
    let h1 = env.helper("t1", "a.py", b"alpha");
    let h2 = env.helper("t1", "b.py", b"beta");
    let req = release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h1)), entry(&read_one(&fe, "t1", &h2))]);
    let v = fe.edit_files(req.clone());
    assert_eq!(v["status"], "completed", "{v}");
    assert!(!is_error(&v));
    assert_eq!(v["replayed"], false);
    assert_eq!(v["files"][0]["outcome"], "released");
    assert_eq!(v["files"][1]["file_path"], h2.as_str());
    let id = v["receipt_id"].as_str().unwrap().to_owned();
    assert!(!Path::new(&h1).exists() && !Path::new(&h2).exists());
    // The receipt was durable before the answer.
    let stored = env.data.join("receipts").join(&id[..2]).join(format!("{id}.json"));
    assert!(stored.is_file());
    assert!(summary("EditFiles", &v).contains("2 released"));

    // A new file at a released path survives a replay.
    std::fs::write(&h1, b"new").unwrap();
    let again = fe.edit_files(req.clone());
    assert_eq!(again["replayed"], true);
    assert_eq!(again["files"], v["files"]);
    assert_eq!(again["receipt_id"], id.as_str());
    assert_eq!(std::fs::read(&h1).unwrap(), b"new");
    let releases = g.ops().iter().filter(|o| *o == "release").count();
    assert_eq!(releases, 1);

    // After a frontend restart (new secret, no threads): still replayed.
    let fe2 = env.guarded();
    let after = fe2.edit_files(req.clone());
    assert_eq!(after["replayed"], true, "{after}");
    // Another thread's request for the same paths cannot fetch it.
    let mut other = req.clone();
    other["thread_id"] = json!("t2");
    assert_eq!(code(&fe2.edit_files(other)), "thread_mismatch");
    assert_eq!(g.ops().iter().filter(|o| *o == "release").count(), 1);

    // A denial (the new file has no read) is not recorded.
    let before = files_below(&env.data.join("receipts"));
    assert_eq!(before, 1);
    let mut stale = req.clone();
    stale["files"].as_array_mut().unwrap().truncate(1);
    assert_eq!(code(&fe.edit_files(stale)), "read_required");
    assert_eq!(files_below(&env.data.join("receipts")), before);
}

/// Regular files below `dir`, at any depth.
fn files_below(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| if e.file_type().unwrap().is_dir() { files_below(&e.path()) } else { 1 })
        .sum()
}

#[test]
fn lost_reply_is_failed_and_not_resent() {
    let env = Env::new();
    let ws = env.ws();
    let handler: Arc<Handler> = Arc::new(|op: &str, _: &Value| match op {
        "hello" => Some(hello_reply(&["temporary_release"], "i")),
        "session_open" => Some(json!({"ok": true, "session_dir": ""})),
        _ => None,
    });
    let g = FakeGuardian::start(env.sock.clone(), handler);
    let fe = env.guarded();
    init(&fe, ws, "t1");
    let h = env.helper("t1", "a.py", b"alpha");
    let v = fe.edit_files(release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]));
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(code(&v), "owner_unavailable");
    assert_eq!(v["outcome_unknown"], true);
    assert!(v["message"].as_str().unwrap().contains("Inspect"));
    assert_eq!(g.ops().iter().filter(|o| *o == "release").count(), 1);
    assert!(!env.data.join("receipts").exists());
}

#[test]
fn concurrent_identical_releases_replay() {
    let env = Env::new();
    let ws = env.ws().to_owned();
    let g = env.engine_guardian(&["temporary_release"], "inst");
    let fe = Arc::new(env.guarded());
    init(&fe, &ws, "t1");
    let h = env.helper("t1", "a.py", b"alpha");
    let req = release_req("t1", &ws, vec![entry(&read_one(&fe, "t1", &h))]);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (fe, req) = (fe.clone(), req.clone());
            std::thread::spawn(move || fe.edit_files(req))
        })
        .collect();
    let results: Vec<Value> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(results.iter().all(|r| r["status"] == "completed"), "{results:?}");
    assert_eq!(results.iter().filter(|r| r["replayed"] == false).count(), 1);
    assert_eq!(g.ops().iter().filter(|o| *o == "release").count(), 1);
}

/// A run that touched the filesystem and whose receipt cannot be written
/// (`D/receipts` made immutable): `status: failed`, `errorCode:
/// receipt_unavailable`, and the per-target outcomes still returned.
#[test]
fn unwritable_receipt_fails_the_answer_and_keeps_the_outcomes() {
    use rustix::fs::IFlags;
    let env = Env::new();
    let ws = env.ws();
    let _g = env.engine_guardian(&["temporary_release"], "inst");
    let fe = env.guarded();
    init(&fe, ws, "t1");
    let h = env.helper("t1", "a.py", b"alpha");
    let req = release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]);
    let receipts = env.data.join("receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    let dir = std::fs::File::open(&receipts).unwrap();
    let flags = rustix::fs::ioctl_getflags(&dir).unwrap_or(IFlags::empty());
    if rustix::fs::ioctl_setflags(&dir, flags | IFlags::IMMUTABLE).is_err() {
        eprintln!("skipped: cannot make a directory immutable here");
        return;
    }
    let v = fe.edit_files(req);
    rustix::fs::ioctl_setflags(&dir, flags).unwrap();
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["errorCode"], "receipt_unavailable", "{v}");
    assert!(is_error(&v));
    assert_eq!(v["files"][0]["outcome"], "released", "{v}");
    assert!(v["receipt_error"].as_str().is_some_and(|m| m.contains("replay is impossible")), "{v}");
    assert!(!Path::new(&h).exists());
    assert_eq!(std::fs::read_dir(&receipts).unwrap().count(), 0);
}
