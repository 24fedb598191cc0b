//! A `ReadFiles` the client cancels stops reading: files no read can
//! finish (sparse files of 8 TiB: over an hour of SHA-256 each here) cost
//! the frontend nothing once the client has said it no longer wants them.

use std::time::{Duration, Instant};

use crate::support::{Env, RawMcp};
use serde_json::json;

/// User plus system CPU time of process `pid`, in seconds.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the frontend is alive");
    let fields: Vec<&str> = stat.rsplit_once(')').expect("a stat line").1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // Linux reports these in USER_HZ, 100 per second on every architecture it runs.
    ticks as f64 / 100.0
}

/// The frontend's CPU time over `d`.
fn cpu_over(pid: u32, d: Duration) -> f64 {
    let before = cpu_s(pid);
    std::thread::sleep(d);
    cpu_s(pid) - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_read_stops_reading() {
    let mut env = Env::new();
    env.start_guardian();
    let mut raw = RawMcp::start(&env, "mcp-cancel");
    let t = Duration::from_secs(10);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}));
    assert_eq!(raw.recv(t)["id"], 1);
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Initialize",
        "arguments": {"any_workspace_path": env.ws, "thread_id": "c"}}}));
    let r = raw.recv(t);
    assert_eq!(r["result"]["isError"], false, "{r}");
    // A helper (read in the hashing batch) and a workspace file (read on
    // its own, before the batch), each longer than any read can finish.
    let helper = env.session_dir("c").join("huge.bin");
    let plain = env.ws.join("huge.log");
    for f in [&helper, &plain] {
        std::fs::File::create(f).unwrap().set_len(1 << 43).unwrap();
    }
    let pid = raw.child.id();
    let before = cpu_s(pid);
    raw.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "ReadFiles",
        "arguments": {"thread_id": "c", "file_paths": [plain, helper]}}}));
    // The read runs: the frontend hashes (a core's worth, when the machine
    // has one to give; other tests may share it).
    let started = Instant::now();
    while cpu_s(pid) - before < 0.3 {
        assert!(started.elapsed() < Duration::from_secs(20), "the read did not start");
        std::thread::sleep(Duration::from_millis(50));
    }

    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3,
        "reason": "the user stopped it"}}));
    let cancelled = Instant::now();
    // The reply the client no longer waits for still ends the request (its
    // entries `io_error`), well before the 10 s the reply waits for a
    // silent file.
    let r = raw.recv(Duration::from_secs(5));
    assert_eq!(r["id"], 3, "{r}");
    assert!(cancelled.elapsed() < Duration::from_secs(5), "{:?}", cancelled.elapsed());
    let failed = r["result"]["structuredContent"]["failed_files"].as_array().cloned().unwrap_or_default();
    assert_eq!(failed.len(), 2, "{r}");
    assert!(failed.iter().all(|f| f["errorCode"] == "io_error"), "{r}");
    // And nothing reads any more.
    let idle = cpu_over(pid, Duration::from_secs(1));
    assert!(idle < 0.15, "the frontend still read after the cancellation: {idle:.2} s of CPU in 1 s");

    // The frontend goes on answering.
    let small = env.session_dir("c").join("small.txt");
    std::fs::write(&small, "hello\n").unwrap();
    raw.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "ReadFiles",
        "arguments": {"thread_id": "c", "file_paths": [small]}}}));
    let r = raw.recv(t);
    assert_eq!(r["id"], 4, "{r}");
    assert_eq!(r["result"]["structuredContent"]["files"][0]["content"], "hello\n", "{r}");
}
