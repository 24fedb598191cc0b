//! What the setup phase and the edge checks share: opening a session on
//! its frontends, and judging whether a release was denied as expected.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::{json, Value};

use crate::workload::ops;
use crate::workload::world::{TrackedSession, World};

/// The scan bound of the contract.
pub const SCAN_BOUND: u64 = 50_000;

/// Whether a release answer is the denial `codes` allow.
pub(crate) fn denied_with(v: &Option<Value>, codes: &[&str]) -> (bool, String) {
    match v {
        None => (false, "nothing to work on".to_owned()),
        Some(v) => {
            let code = v["errorCode"].as_str().unwrap_or("-");
            let status = v["status"].as_str().unwrap_or("-");
            (matches!(status, "denied" | "invalid_input") && codes.contains(&code), format!("{status} {code}"))
        }
    }
}

pub(crate) fn check_denied(w: &World, name: &str, v: &Option<Value>, codes: &[&str]) {
    let (ok, detail) = denied_with(v, codes);
    w.check(name, ok, detail);
}

/// Initialises a session on frontend `home` (and `other`), checking the
/// `Initialize` result.
#[allow(clippy::too_many_arguments)]
pub fn open_session(
    w: &World,
    idx: usize,
    ws: usize,
    thread_id: &str,
    home: usize,
    other: usize,
    mode: Option<&str>,
    rng: crate::workload::rng::Rng,
) -> anyhow::Result<(TrackedSession, Value)> {
    let root = w.workspaces[ws].root.clone();
    let v = ops::initialize(w, home, &root, thread_id, mode)?;
    if other != home {
        ops::initialize(w, other, &root, thread_id, mode)?;
    }
    anyhow::ensure!(v["workspace_root"] == json!(root), "Initialize returned workspace {}", v["workspace_root"]);
    let dir = PathBuf::from(v["temporary_artifact_dir"].as_str().context("temporary_artifact_dir")?);
    let slot = w.workspaces[ws].book.add_slot();
    Ok((TrackedSession::new(idx, ws, slot, thread_id.to_owned(), dir, home, other, rng), v))
}
