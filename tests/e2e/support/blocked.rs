//! Releases that must wait: the calls the liveness and execution tests
//! share (a bounded tool call, a helper written and read, a release that
//! must be denied with nothing changed, one retried until it completes).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{release_req, snapshot, Env, Mcp};

/// Every MCP call of these tests must answer within this time (a
/// deadlocked guardian fails the test instead of hanging it).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A tool call that must answer within [`CALL_TIMEOUT`].
pub async fn call(mcp: &Mcp, tool: &str, args: Value) -> Value {
    tokio::time::timeout(CALL_TIMEOUT, mcp.call(tool, args.clone()))
        .await
        .unwrap_or_else(|_| panic!("{tool} {args} did not answer within {CALL_TIMEOUT:?}"))
}

/// Writes a helper of `thread` directly and reads it: (path, revision,
/// generation).
pub async fn helper(env: &Env, mcp: &Mcp, thread: &str, name: &str) -> (PathBuf, String, String) {
    let path = env.session_dir(thread).join(name);
    std::fs::write(&path, format!("helper {name}\n")).unwrap();
    let (rev, generation) = mcp.read_helper(thread, &path).await;
    (path, rev, generation)
}

/// The release of one helper must be denied with `code`, nothing changed.
pub async fn denied(env: &Env, mcp: &Mcp, thread: &str, h: &(PathBuf, String, String), code: &str) -> Value {
    denied_at(env, mcp, &env.ws, thread, h, code).await
}

pub async fn denied_at(
    env: &Env,
    mcp: &Mcp,
    ws: &Path,
    thread: &str,
    h: &(PathBuf, String, String),
    code: &str,
) -> Value {
    let before = snapshot(&[&env.ws]);
    let v = call(mcp, "EditFiles", release_req(thread, ws, &[(&h.0, &h.1, &h.2)])).await;
    assert_eq!(v["status"], "denied", "{v}");
    assert_eq!(v["errorCode"], code, "{v}");
    assert!(h.0.exists());
    assert_eq!(before, snapshot(&[&env.ws]), "a denied release changed the workspace");
    v
}

/// Retries the release until it completes (refused with `code` meanwhile).
pub async fn completes_after(
    env: &Env,
    mcp: &Mcp,
    thread: &str,
    h: &(PathBuf, String, String),
    code: &str,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let v = call(mcp, "EditFiles", release_req(thread, &env.ws, &[(&h.0, &h.1, &h.2)])).await;
        if v["status"] == "completed" {
            assert_eq!(v["files"][0]["outcome"], "released", "{v}");
            assert!(!h.0.exists());
            return;
        }
        assert_eq!(v["errorCode"], code, "{v}");
        assert!(Instant::now() < deadline, "still refused after {within:?}: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
