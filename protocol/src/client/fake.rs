//! A minimal scripted guardian for unit tests (feature `fake-guardian`).

use super::*;
use serde_json::json;
use std::io::BufRead;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A handler maps (op, request) to a reply line (without id), or `None`
/// to drop the connection without answering. A reply with `"_close": true`
/// is sent without that member, and the connection is closed after it (as
/// a guardian that stops after answering).
pub type Handler = dyn Fn(&str, &Value) -> Option<Value> + Send + Sync;

/// A guardian listening at `path`, answering with `handler`, recording
/// every op it receives.
pub struct FakeGuardian {
    pub path: PathBuf,
    pub ops: Arc<Mutex<Vec<String>>>,
    /// How many connections it closed after a `"_close": true` reply.
    pub closes: Arc<std::sync::atomic::AtomicUsize>,
    _thread: JoinHandle<()>,
}

impl FakeGuardian {
    pub fn start(path: PathBuf, handler: Arc<Handler>) -> FakeGuardian {
        let listener = UnixListener::bind(&path).unwrap();
        let ops = Arc::new(Mutex::new(Vec::new()));
        let ops2 = ops.clone();
        let closes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let closes2 = closes.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let handler = handler.clone();
                let ops = ops2.clone();
                let closes = closes2.clone();
                std::thread::spawn(move || {
                    let mut w = conn.try_clone().unwrap();
                    for line in BufReader::new(conn).lines() {
                        let Ok(line) = line else { return };
                        let req: Value = serde_json::from_str(&line).unwrap();
                        let op = req["op"].as_str().unwrap_or_default().to_owned();
                        ops.lock().unwrap().push(op.clone());
                        let Some(mut reply) = handler(&op, &req) else { return };
                        reply["id"] = req["id"].clone();
                        let close = reply.as_object_mut().and_then(|o| o.remove("_close")) == Some(json!(true));
                        let mut out = serde_json::to_vec(&reply).unwrap();
                        out.push(b'\n');
                        if w.write_all(&out).is_err() || close {
                            let _ = w.shutdown(std::net::Shutdown::Both);
                            if close {
                                closes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            return;
                        }
                    }
                });
            }
        });
        FakeGuardian { path, ops, closes, _thread: thread }
    }

    pub fn ops(&self) -> Vec<String> {
        self.ops.lock().unwrap().clone()
    }

    /// Waits (up to 20 s) until it has closed `n` connections after a
    /// `"_close": true` reply: a client that reads the reply can send its
    /// next request before the close, which no client can tell from a
    /// request lost to a stopping guardian.
    pub fn wait_closes(&self, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.closes.load(std::sync::atomic::Ordering::SeqCst) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// A temporary directory of mode 0700 (one that may hold a socket).
pub fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// A hello reply with `caps`.
pub fn hello_reply(caps: &[&str], instance: &str) -> Value {
    json!({"ok": true, "protocol": 1, "guardian": "fake/0", "platform": "linux",
        "capabilities": caps, "instance": instance, "pid": 1})
}
