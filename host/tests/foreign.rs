//! The frontend library off Linux (built on Linux with `--cfg
//! winx_foreign`, as CI does: `.ci/run`): the request checks that need no
//! filesystem work as everywhere, the targets step is `unsupported_platform`,
//! and there are no receipts. Without the cfg this file is empty.
#![cfg(winx_foreign)]

use serde_json::json;
use winx_release_engine::Layout;
use winx_release_host::request::{self, Binding};
use winx_release_host::{ReceiptStore, ReleaseResult, TokenKey};

#[test]
fn checks_run_and_targets_are_unsupported_platform() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let wss = ws.to_str().unwrap();
    let layout = Layout::new(&ws, ws.join("data")).unwrap();
    let h = format!("{}/h.py", layout.session_dir("t").display());
    let args = json!({"thread_id": "t", "workspace_root": wss, "operation": "release_temporary",
        "files": [{"file_path": h, "mode": "release_temporary", "expected_revision": format!("sha256:{}", "0".repeat(64)),
            "artifact_generation": "g1.x"}]});
    let req = request::parse(&args).unwrap();
    req.check_shape().unwrap();
    let b = req.check_binding(Some(Binding { thread_id: "t", workspace_root: wss })).unwrap();
    let e = req.targets(&TokenKey::generate().unwrap(), b, &layout).unwrap_err();
    assert_eq!(e.code.as_str(), "unsupported_platform");
    let v = ReleaseResult::denied(&req.paths(), &e).to_value();
    assert_eq!(
        (&v["status"], &v["errorCode"], &v["files"][0]["reason"]),
        (&json!("denied"), &json!("unsupported_platform"), &json!("unsupported_platform"))
    );
    let receipts = ReceiptStore::new(layout.data_dir());
    assert_eq!(receipts.find(&req).unwrap(), None);
    assert!(receipts.record(&req, &ReleaseResult::denied(&req.paths(), &e)).is_err());
    assert!(!ws.join("data").exists());
}
