//! Unit tests of the frontend. A scripted guardian (`client::fake`) stands in
//! only where a guardian is unavoidable; its `release` runs the real engine
//! with an idle owner.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use winx_release_engine::admission::Admission;
use winx_release_engine::layout::{session_name, Layout};
use winx_release_engine::release::{release, ReleaseOptions, ReleaseRequest};
use winx_release_engine::{IdleOwner, ReleaseReport, Target};

use super::*;
use winx_release_protocol::client::fake::{hello_reply, FakeGuardian, Handler};

struct Env {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    data: PathBuf,
    sock: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = winx_release_protocol::client::fake::private_tempdir();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir(&ws).unwrap();
        let data = root.join("data");
        Env { ws, data, sock: root.join("g.sock"), _dir: dir }
    }

    fn ws(&self) -> &str {
        self.ws.to_str().unwrap()
    }

    fn embedded(&self) -> Frontend {
        Frontend::new(FrontendConfig::new(&self.sock, &self.data, true)).unwrap()
    }

    fn guarded(&self) -> Frontend {
        let mut c = FrontendConfig::new(&self.sock, &self.data, false);
        c.timeouts.io = std::time::Duration::from_secs(5);
        c.launch_wait = std::time::Duration::from_secs(5);
        Frontend::new(c).unwrap()
    }

    fn session_dir(&self, thread: &str) -> PathBuf {
        self.ws.join(".winx/tmp").join(session_name(thread))
    }

    fn helper(&self, thread: &str, name: &str, content: &[u8]) -> String {
        let p = self.session_dir(thread).join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p.to_str().unwrap().to_owned()
    }

    /// A guardian whose `release` runs the real engine with an idle owner.
    fn engine_guardian(&self, caps: &'static [&'static str], instance: &'static str) -> FakeGuardian {
        let data = self.data.clone();
        let handler: Arc<Handler> = Arc::new(move |op: &str, req: &Value| match op {
            "hello" => Some(hello_reply(caps, instance)),
            "session_open" => Some(json!({"ok": true, "session_dir": "", "instance": instance})),
            "release" => {
                let layout = Layout::new(req["workspace"].as_str().unwrap(), &data).unwrap();
                let targets: Vec<Target> = serde_json::from_value(req["targets"].clone()).unwrap();
                let rr = ReleaseRequest {
                    layout: &layout,
                    thread_id: req["thread_id"].as_str().unwrap(),
                    targets: &targets,
                };
                let report = release(&rr, &Admission::new().enter(), &IdleOwner, &ReleaseOptions::default());
                Some(json!({"ok": true, "report": report}))
            }
            _ => Some(json!({"ok": false, "error": {"code": "unknown_op", "message": op}})),
        });
        FakeGuardian::start(self.sock.clone(), handler)
    }
}

fn init(fe: &Frontend, ws: &str, thread: &str) -> Value {
    let v = fe.initialize(json!({"any_workspace_path": ws, "thread_id": thread}));
    assert_eq!(v["status"], "completed", "{v}");
    v
}

fn read_one(fe: &Frontend, thread: &str, path: &str) -> Value {
    let v = fe.read_files(json!({"thread_id": thread, "file_paths": [path]}));
    assert_eq!(v["status"], "completed", "{v}");
    v["files"][0].clone()
}

fn entry(f: &Value) -> Value {
    json!({"file_path": f["file_path"], "mode": "release_temporary", "expected_revision": f["revision"],
        "artifact_generation": f["temporary_artifact"]["artifact_generation"]})
}

fn release_req(thread: &str, ws: &str, entries: Vec<Value>) -> Value {
    json!({"thread_id": thread, "workspace_root": ws, "operation": "release_temporary", "files": entries})
}

fn code(v: &Value) -> &str {
    v["errorCode"].as_str().unwrap_or("<none>")
}

#[test]
fn initialize_embedded() {
    let env = Env::new();
    let fe = env.embedded();
    let v = init(&fe, env.ws(), "t1");
    assert_eq!(v["thread_id"], "t1");
    assert_eq!(v["workspace_root"], env.ws());
    assert_eq!(v["temporary_artifact_dir"], env.session_dir("t1").to_str().unwrap());
    assert_eq!(v["temporary_release"], json!({"available": false, "reason": "embedded_runtime"}));
    assert_eq!(v["temporary_artifact_max_files"], 128);
    assert_eq!(v["temporary_artifact_max_session_bytes"], 67108864);
    assert_eq!(v["temporary_artifact_max_file_bytes"], 33554432);
    assert_eq!(v["temporary_artifact_max_bytes"], 268435456);
    assert_eq!(v["temporary_artifact_stale_pruned_files"], 0);
    assert_eq!(v["deletion_deferred"], "runtime_protection_unknown");
    assert_eq!(v["stale_audit"]["deleted_files"], 0);
    assert_eq!(v["reattached"], false);
    let mode = std::fs::metadata(env.session_dir("t1")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    // Re-attaching; a generated thread id; a non-canonical workspace path.
    assert_eq!(init(&fe, env.ws(), "t1")["reattached"], true);
    let fresh = fe.initialize(json!({"any_workspace_path": format!("{}/../ws", env.ws()), "thread_id": ""}));
    assert_eq!(fresh["workspace_root"], env.ws());
    let t = fresh["thread_id"].as_str().unwrap();
    assert_eq!(t.len(), 32);
    assert!(!is_error(&fresh));
    // Refusals.
    let rel = fe.initialize(json!({"any_workspace_path": "ws"}));
    assert_eq!((rel["status"].as_str(), code(&rel)), (Some("invalid_input"), "path_not_exact"));
    let missing = fe.initialize(json!({"any_workspace_path": format!("{}/nope", env.ws())}));
    assert_eq!(code(&missing), "not_found");
    std::fs::write(env.ws.join("file"), b"x").unwrap();
    let file = fe.initialize(json!({"any_workspace_path": format!("{}/file", env.ws())}));
    assert_eq!(code(&file), "invalid_input");
    assert!(is_error(&file));
    assert_eq!(code(&fe.initialize(json!({"any_workspace_path": env.ws(), "bogus": 1}))), "invalid_input");
}

#[test]
fn initialize_without_guardian_and_with_launcher() {
    let env = Env::new();
    let fe = env.guarded();
    let v = init(&fe, env.ws(), "t1");
    assert_eq!(v["temporary_release"]["available"], false, "{v}");
    assert_eq!(v["temporary_release"]["reason"], "owner_unavailable", "{v}");
    // Contract section 3: one line naming the socket, the cause, the fix.
    let detail = v["temporary_release"]["detail"].as_str().unwrap_or_default();
    let sock = env.sock.to_str().unwrap();
    assert!(detail.starts_with(&format!("no usable guardian at {sock}: guardian unreachable: ")), "{v}");
    assert!(detail.contains(&format!("`winx-release guardian --socket {sock}`")), "{v}");
    assert!(detail.contains("WINX_GUARDIAN_SOCKET") && !detail.contains('\n'), "{v}");
    assert!(env.session_dir("t1").is_dir());

    let launched = Arc::new(AtomicUsize::new(0));
    let holder: Arc<std::sync::Mutex<Option<FakeGuardian>>> = Arc::default();
    let (l2, h2) = (launched.clone(), holder.clone());
    let env2 = Env::new();
    let data = env2.data.clone();
    let mut cfg = FrontendConfig::new(&env2.sock, &data, false);
    cfg.launcher = Some(Box::new(move |sock: &Path| {
        l2.fetch_add(1, Ordering::SeqCst);
        let handler: Arc<Handler> = Arc::new(|op: &str, _: &Value| match op {
            "hello" => Some(hello_reply(&["temporary_release"], "inst-1")),
            _ => Some(json!({"ok": true, "session_dir": "", "instance": "inst-1"})),
        });
        *h2.lock().unwrap() = Some(FakeGuardian::start(sock.to_path_buf(), handler));
        Ok(())
    }));
    let fe2 = Frontend::new(cfg).unwrap();
    let v = init(&fe2, env2.ws(), "t1");
    assert_eq!(v["temporary_release"], json!({"available": true, "reason": null}));
    assert_eq!(v["guardian"]["instance"], "inst-1");
    assert_eq!(launched.load(Ordering::SeqCst), 1);
    assert_eq!(holder.lock().unwrap().as_ref().unwrap().ops(), ["hello", "session_open"]);
}

#[test]
fn read_files_helpers_and_plain() {
    let env = Env::new();
    let fe = env.embedded();
    init(&fe, env.ws(), "t1");
    let text = b"print('hello')\n";
    let h = env.helper("t1", "sub/h.py", text);
    let f = read_one(&fe, "t1", &h);
    assert_eq!(f["content"].as_str().unwrap().as_bytes(), text);
    assert_eq!(f["revision"], format!("sha256:{}", hex::encode(Sha256::digest(text))));
    assert_eq!(f["size"], text.len());
    let tok = f["temporary_artifact"]["artifact_generation"].as_str().unwrap();
    assert!(tok.starts_with("g1.") && tok.len() == 67);
    assert_eq!(f["temporary_artifact"]["in_use"], Value::Null);
    assert_eq!(f["temporary_artifact"]["releasable"], Value::Null);

    // A plain file: no token.
    std::fs::write(env.ws.join("src.rs"), b"fn main() {}\n").unwrap();
    let p = read_one(&fe, "t1", &format!("{}/src.rs", env.ws()));
    assert!(p.get("temporary_artifact").is_none());
    assert_eq!(p["content"], "fn main() {}\n");
    // Another session's helper: read, no token.
    let other = env.helper("t2", "o.py", b"x");
    assert!(read_one(&fe, "t1", &other).get("temporary_artifact").is_none());

    // Binary and truncated content.
    let bin = env.helper("t1", "b.bin", &[0, 159, 146, 150]);
    let b = read_one(&fe, "t1", &bin);
    assert_eq!((b["binary"].clone(), b["content"].clone()), (json!(true), Value::Null));
    assert!(b.get("temporary_artifact").is_some());
    let big = vec![b'a'; 300 * 1024];
    let bigp = env.helper("t1", "big.txt", &big);
    let g = read_one(&fe, "t1", &bigp);
    assert_eq!(g["truncated"], true);
    assert_eq!(g["content"].as_str().unwrap().len(), 256 * 1024);
    assert_eq!(g["size"], 300 * 1024);
    assert_eq!(g["revision"], format!("sha256:{}", hex::encode(Sha256::digest(&big))));

    // Refusals, in failed_files.
    let sd = env.session_dir("t1");
    std::os::unix::fs::symlink(&h, sd.join("link.py")).unwrap();
    std::fs::hard_link(sd.join("b.bin"), sd.join("hard.bin")).unwrap();
    std::fs::create_dir(sd.join("dir")).unwrap();
    let v = fe.read_files(json!({"thread_id": "t1", "file_paths": [
        sd.join("link.py"), sd.join("hard.bin"), sd.join("dir"), sd.join("none"), "relative", h]}));
    assert_eq!(v["status"], "partial");
    let codes: Vec<&str> =
        v["failed_files"].as_array().unwrap().iter().map(|f| f["errorCode"].as_str().unwrap()).collect();
    assert_eq!(codes, ["symlink", "hardlink", "not_regular_file", "not_found", "path_not_exact"]);
    assert_eq!(v["files"].as_array().unwrap().len(), 1);
    let unknown = fe.read_files(json!({"thread_id": "zz", "file_paths": [h]}));
    assert_eq!((unknown["status"].as_str(), code(&unknown)), (Some("denied"), "thread_mismatch"));
    // The denial says what to call, with which arguments (an Inspector user
    // calls each tool by hand).
    let msg = unknown["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("call Initialize with") && msg.contains("any_workspace_path") && msg.contains("\"zz\""),
        "{unknown}"
    );
    assert_eq!(code(&fe.read_files(json!({"thread_id": "t1"}))), "invalid_input");
}

#[test]
fn request_level_codes_and_their_order() {
    let env = Env::new();
    let fe = env.embedded();
    let ws = env.ws();
    init(&fe, ws, "t1");
    let h = env.helper("t1", "h.py", b"one");
    let f = read_one(&fe, "t1", &h);
    let good = entry(&f);
    let with_path = |p: &str| {
        let mut e = good.clone();
        e["file_path"] = json!(p);
        e
    };
    let check = |req: Value, want: &str| {
        let v = fe.edit_files(req.clone());
        assert_eq!(code(&v), want, "{req} -> {v}");
        assert!(is_error(&v));
        assert_eq!(v["operation"], "release_temporary");
        assert_eq!(v["replayed"], false);
        for file in v["files"].as_array().unwrap() {
            assert_eq!(file["outcome"], "denied");
        }
        v
    };
    let sd = env.session_dir("t1");
    let sds = sd.to_str().unwrap();

    // Shape.
    check(
        json!({"thread_id": "t1", "workspace_root": ws, "operation": "release_temporary", "files": [good], "x": 1}),
        "invalid_input",
    );
    check(release_req("t1", ws, vec![]), "file_count");
    check(release_req("t1", ws, (0..101).map(|i| with_path(&format!("{sds}/h{i}"))).collect()), "file_count");
    check(release_req("t1", ws, vec![good.clone(), good.clone()]), "duplicate_path");
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/../h.py"))]), "path_not_exact");
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/*.py"))]), "glob_not_allowed");
    check(
        release_req("t1", ws, vec![good.clone(), json!({"file_path": "/x", "mode": "replace", "content": ""})]),
        "mixed_modes",
    );
    let mut verify = release_req("t1", ws, vec![good.clone()]);
    verify["verify_command"] = json!("true");
    check(verify, "verification_not_allowed");
    // Thread and workspace (after path rules).
    check(release_req("nobody", ws, vec![good.clone()]), "thread_mismatch");
    check(release_req("nobody", ws, vec![with_path(&format!("{sds}/a[1]"))]), "glob_not_allowed");
    check(release_req("t1", &format!("{ws}/"), vec![good.clone()]), "workspace_mismatch");
    // Placement.
    check(release_req("t1", ws, vec![with_path(&format!("{ws}/src.py"))]), "not_session_helper");
    let other = env.session_dir("t2").join("o.py");
    check(release_req("t1", ws, vec![with_path(other.to_str().unwrap())]), "other_session");
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/.winx-release-0/t000"))]), "reserved_namespace");
    // Targets.
    std::os::unix::fs::symlink(&h, sd.join("link.py")).unwrap();
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/link.py"))]), "symlink");
    std::fs::write(sd.join("hl"), b"x").unwrap();
    std::fs::hard_link(sd.join("hl"), env.ws.join("hl2")).unwrap();
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/hl"))]), "hardlink");
    std::fs::create_dir(sd.join("d")).unwrap();
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/d"))]), "not_regular_file");
    check(release_req("t1", ws, vec![with_path(&format!("{sds}/none"))]), "not_found");
    let mut no_token = good.clone();
    no_token.as_object_mut().unwrap().remove("artifact_generation");
    check(release_req("t1", ws, vec![no_token]), "invalid_input");
    let mut bad_token = good.clone();
    bad_token["artifact_generation"] = json!("g1.zz");
    check(release_req("t1", ws, vec![bad_token]), "read_required");
    let mut bad_rev = good.clone();
    bad_rev["expected_revision"] = json!(format!("sha256:{}", "0".repeat(64)));
    check(release_req("t1", ws, vec![bad_rev]), "revision_mismatch");
    // Per-target reasons: each its own, the request the first.
    let v = check(release_req("t1", ws, vec![good.clone(), with_path(&format!("{sds}/none"))]), "not_found");
    assert_eq!(v["files"][0]["reason"], "not_found");
    assert_eq!(v["files"][1]["reason"], "not_found");
    let v = check(
        release_req("t1", ws, vec![with_path(&format!("{ws}/x")), with_path(other.to_str().unwrap())]),
        "not_session_helper",
    );
    assert_eq!(v["files"][1]["reason"], "other_session");
    // Everything right: the owner decides.
    check(release_req("t1", ws, vec![good.clone()]), "embedded_runtime");
    // Nothing was touched.
    assert_eq!(std::fs::read(&h).unwrap(), b"one");

    // The token binds the physical file: an identical replacement needs a read.
    std::fs::remove_file(&h).unwrap();
    std::fs::write(&h, b"one").unwrap();
    check(release_req("t1", ws, vec![good.clone()]), "read_required");
    // A token from another frontend process (another secret).
    let fe2 = env.embedded();
    init(&fe2, ws, "t1");
    let f2 = read_one(&fe2, "t1", &h);
    let v = fe.edit_files(release_req("t1", ws, vec![entry(&f2)]));
    assert_eq!(code(&v), "read_required");
    // Policy, after the thread and before placement.
    init(&fe, ws, "t1");
    let arch = fe.initialize(json!({"any_workspace_path": ws, "thread_id": "ta", "mode_name": "architect"}));
    assert_eq!(arch["mode_name"], "architect");
    let ha = env.helper("ta", "h.py", b"a");
    let fa = read_one(&fe, "ta", &ha);
    check(release_req("ta", ws, vec![entry(&fa)]), "policy_denied");
    check(release_req("ta", ws, vec![with_path(other.to_str().unwrap())]), "policy_denied");
    let cw = fe.initialize(json!({"any_workspace_path": ws, "thread_id": "tc", "mode_name": "code_writer",
        "code_writer_config": {"allowed_globs": ["src/**"], "allowed_commands": "all"}}));
    assert_eq!(cw["status"], "completed");
    let hc = env.helper("tc", "h.py", b"c");
    let fc = read_one(&fe, "tc", &hc);
    check(release_req("tc", ws, vec![entry(&fc)]), "policy_denied");
    let cw_all = fe.initialize(json!({"any_workspace_path": ws, "thread_id": "tc", "mode_name": "code_writer",
        "code_writer_config": {"allowed_globs": [".winx/tmp/**"], "allowed_commands": "all"}}));
    assert_eq!(cw_all["status"], "completed");
    let fc = read_one(&fe, "tc", &hc);
    check(release_req("tc", ws, vec![entry(&fc)]), "embedded_runtime");
}

#[test]
fn owner_codes_without_a_capable_guardian() {
    let env = Env::new();
    let ws = env.ws();
    // No guardian at all.
    let fe = env.guarded();
    init(&fe, ws, "t1");
    let h = env.helper("t1", "h.py", b"x");
    let req = release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]);
    assert_eq!(code(&fe.edit_files(req.clone())), "owner_unavailable");

    // An older guardian: hello without temporary_release.
    let g = env.engine_guardian(&["executions"], "old-1");
    let fe = env.guarded();
    let v = init(&fe, ws, "t1");
    assert_eq!(v["temporary_release"], json!({"available": false, "reason": "owner_unsupported"}));
    let req = release_req("t1", ws, vec![entry(&read_one(&fe, "t1", &h))]);
    let v = fe.edit_files(req);
    assert_eq!(code(&v), "owner_unsupported");
    assert!(!g.ops().contains(&"release".to_owned()), "{:?}", g.ops());
    assert!(Path::new(&h).exists());
}

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
