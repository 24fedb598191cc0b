//! Releases as the tests make and check them: a request of read helpers,
//! a helper written and read, a refusal that changed nothing, a completed
//! release, snapshots of the trees.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{revision_of, Env, Mcp};

/// Reads `paths` (helpers of `thread`) in one `ReadFiles` and returns the
/// release request of all of them, with the revisions and tokens it gave.
pub async fn read_then_release_req(env: &Env, mcp: &Mcp, thread: &str, paths: &[PathBuf]) -> Value {
    let read = mcp.call("ReadFiles", json!({"thread_id": thread, "file_paths": paths})).await;
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
    release_req(thread, &env.ws, &triples)
}

/// A release request of `entries` (path, revision, generation).
pub fn release_req(thread: &str, ws: &Path, entries: &[(&Path, &str, &str)]) -> Value {
    let files: Vec<Value> = entries
        .iter()
        .map(|(p, rev, generation)| {
            json!({"file_path": p, "mode": "release_temporary", "expected_revision": rev,
                "artifact_generation": generation})
        })
        .collect();
    json!({"thread_id": thread, "workspace_root": ws, "operation": "release_temporary", "files": files})
}

/// What a path is, for [`snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A regular file: inode, links, bytes.
    File { ino: u64, nlink: u64, bytes: Vec<u8> },
    /// A directory.
    Dir { ino: u64, mode: u32 },
    /// A symbolic link and its target.
    Symlink { target: PathBuf },
    /// Anything else (fifo, socket, device).
    Other { ino: u64, mode: u32 },
}

/// Everything below `roots`, links not followed, fifos not opened.
pub fn snapshot(roots: &[&Path]) -> BTreeMap<PathBuf, Node> {
    fn walk(p: &Path, out: &mut BTreeMap<PathBuf, Node>) {
        let Ok(m) = fs::symlink_metadata(p) else { return };
        let ft = m.file_type();
        let node = if ft.is_symlink() {
            Node::Symlink { target: fs::read_link(p).unwrap_or_default() }
        } else if ft.is_dir() {
            Node::Dir { ino: m.ino(), mode: m.mode() }
        } else if ft.is_file() {
            Node::File { ino: m.ino(), nlink: m.nlink(), bytes: fs::read(p).unwrap_or_default() }
        } else {
            Node::Other { ino: m.ino(), mode: m.mode() }
        };
        out.insert(p.to_path_buf(), node);
        if ft.is_dir() {
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    walk(&e.path(), out);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for r in roots {
        walk(r, &mut out);
    }
    out
}

/// Initializes `thread`, writes `$WINX_TEMP_DIR/<name>` with `content`
/// through `BashCommand`, reads it; returns (path, revision, generation).
pub async fn helper(env: &Env, mcp: &Mcp, thread: &str, name: &str, content: &str) -> (PathBuf, String, String) {
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
pub async fn refused(env: &Env, mcp: &Mcp, req: Value, status: &str, code: &str) -> Value {
    let before = without_members(snapshot(&[&env.ws, &env.data]));
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
    let after = without_members(snapshot(&[&env.ws, &env.data]));
    assert_eq!(before, after, "a refused request changed the filesystem: {req}");
    v
}

/// A snapshot without the runtime's `D/executions/<id>/members` files: the
/// processes a running execution (a thread's shell is one) was seen with,
/// which the guardian records whenever it looks, release or not.
pub fn without_members(mut s: BTreeMap<PathBuf, Node>) -> BTreeMap<PathBuf, Node> {
    s.retain(|p, _| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        name != "members" && !name.starts_with(".members.tmp-")
    });
    s
}

/// Expects a completed release of exactly `paths`.
pub fn assert_completed(v: &Value, paths: &[&Path]) {
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
