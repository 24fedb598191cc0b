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

mod release;
mod write_bash;

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
