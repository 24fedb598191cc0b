//! Exact quotas: every file below a session counts whatever its depth, and
//! concurrent writers at the edge cannot pass a quota together.

use std::path::PathBuf;

use serde_json::{json, Value};
use winx_release_engine::layout::session_name;
use winx_release_engine::quota::{MAX_SESSION_BYTES, MAX_SESSION_FILES};

use super::{Frontend, FrontendConfig};

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    fe: Frontend,
}

fn world() -> World {
    world_with(|_| {})
}

fn world_with(tweak: impl FnOnce(&mut FrontendConfig)) -> World {
    let dir = winx_release_protocol::client::fake::private_tempdir();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let mut config = FrontendConfig::new(root.join("g.sock"), root.join("data"), true);
    tweak(&mut config);
    let fe = Frontend::new(config).unwrap();
    let v = fe.initialize(json!({"any_workspace_path": ws, "thread_id": "t1"}));
    assert_eq!(v["status"], "completed", "{v}");
    World { _dir: dir, ws, fe }
}

impl World {
    fn session(&self) -> PathBuf {
        self.ws.join(".winx/tmp").join(session_name("t1"))
    }

    fn write(&self, path: &std::path::Path, content: &str) -> Value {
        self.fe.edit_files(json!({"thread_id": "t1", "workspace_root": self.ws,
            "files": [{"file_path": path, "mode": "replace", "content": content}]}))
    }
}

/// Helpers 17 to 40 levels down (below the scan's 16-level bound) count:
/// with 127 of them, one more file fits and the next is refused.
#[test]
fn files_at_any_depth_count_against_the_session_quota() {
    let w = world();
    let mut deep = w.session();
    for level in 0..40 {
        deep.push(format!("d{level}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    for i in 0..(MAX_SESSION_FILES - 1) {
        let mut p = w.session();
        for level in 0..(17 + (i % 24)) {
            p.push(format!("d{level}"));
        }
        std::fs::write(p.join(format!("f{i}")), b"x").unwrap();
    }
    assert_eq!(w.write(&deep.join("last"), "1")["status"], "completed");
    let v = w.write(&deep.join("over"), "2");
    assert_eq!((v["status"].as_str(), v["errorCode"].as_str()), (Some("denied"), Some("quota_exceeded")), "{v}");
    assert!(!deep.join("over").exists());
}

/// Eight writers at once, one file below the 128-file quota: exactly one
/// write lands, seven are refused, and the session holds 128 files. Fifty
/// rounds: without the workspace lock two writers passed together within
/// the first dozen rounds here.
#[test]
fn eight_concurrent_writers_at_the_edge_pass_the_quota_once() {
    for round in 0..50 {
        let w = world();
        let sd = w.session();
        std::fs::create_dir_all(&sd).unwrap();
        for i in 0..(MAX_SESSION_FILES - 1) {
            std::fs::write(sd.join(format!("f{i}")), b"").unwrap();
        }
        let barrier = std::sync::Barrier::new(8);
        let results: Vec<Value> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|k| {
                    let (w, sd, barrier) = (&w, &sd, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        w.write(&sd.join(format!("new{k}")), "n")
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let landed = results.iter().filter(|v| v["status"] == "completed").count();
        let refused = results.iter().filter(|v| v["errorCode"] == "quota_exceeded").count();
        assert_eq!((landed, refused), (1, 7), "round {round}: {results:?}");
        assert_eq!(std::fs::read_dir(&sd).unwrap().count() as u64, MAX_SESSION_FILES);
    }
}

/// Eight writers of 1 MiB each at once, 1 MiB below the 64 MiB session
/// quota: exactly one lands.
#[test]
fn eight_concurrent_writers_at_the_byte_edge_pass_the_quota_once() {
    const MIB: u64 = 1024 * 1024;
    let w = world();
    let sd = w.session();
    std::fs::create_dir_all(&sd).unwrap();
    // A sparse file: its length counts, its blocks are not allocated.
    std::fs::File::create(sd.join("big")).unwrap().set_len(MAX_SESSION_BYTES - MIB).unwrap();
    let content = "b".repeat(MIB as usize);
    let barrier = std::sync::Barrier::new(8);
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|k| {
                let (w, sd, barrier, content) = (&w, &sd, &barrier, &content);
                s.spawn(move || {
                    barrier.wait();
                    w.write(&sd.join(format!("new{k}")), content)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let landed = results.iter().filter(|v| v["status"] == "completed").count();
    let refused = results.iter().filter(|v| v["errorCode"] == "quota_exceeded").count();
    assert_eq!((landed, refused), (1, 7), "{:?}", results.iter().map(|v| &v["status"]).collect::<Vec<_>>());
    let bytes: u64 = std::fs::read_dir(&sd).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert_eq!(bytes, MAX_SESSION_BYTES);
}

/// A command holding `flock "$PWD"` (here: this test, through another open
/// file description) does not hang a helper write: after the bound it is
/// refused with one clear message, nothing written; once the lock is free
/// the write goes through.
#[test]
fn a_workspace_flock_held_by_a_command_bounds_the_write() {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let w = world_with(|c| c.quota_lock_wait = std::time::Duration::from_millis(300));
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let held = rustix::fs::openat(rustix::fs::CWD, &w.ws, flags, Mode::empty()).unwrap();
    rustix::fs::flock(&held, FlockOperation::LockExclusive).unwrap();
    let target = w.session().join("h.txt");
    let t = std::time::Instant::now();
    let v = w.write(&target, "x");
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!((v["status"].as_str(), v["errorCode"].as_str()), (Some("denied"), Some("io_error")), "{v}");
    assert!(v["message"].as_str().unwrap().contains("flock"), "{v}");
    assert!(!target.exists());
    drop(held);
    assert_eq!(w.write(&target, "x")["status"], "completed");
}
