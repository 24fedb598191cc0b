//! Hostile and careless clients (issue 58), end to end over the real
//! `winx-release mcp` stdio and the real guardian socket: every line gets
//! one clear answer, what one request may cost is bounded before work
//! starts, and the memory a request took comes back after it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::support::{p, snapshot, without_members, Env, RawMcp};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(30);

/// A raw frontend, initialised (MCP `initialize`, then `Initialize` of
/// `thread`).
fn raw_world(env: &Env, thread: &str) -> RawMcp {
    let mut raw = RawMcp::start(env, "mcp-limits");
    raw.send(
        json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "limits", "version": "0"}}}),
    );
    assert_eq!(raw.recv(T)["id"], "init");
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let r = call(&mut raw, "setup", "Initialize", json!({"any_workspace_path": env.ws, "thread_id": thread}));
    assert_eq!(r["status"], "completed", "{r}");
    raw
}

/// `tools/call` of `tool` with `args` under `id`; its `structuredContent`.
fn call(raw: &mut RawMcp, id: &str, tool: &str, args: Value) -> Value {
    raw.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}}));
    let r = raw.recv(T);
    assert_eq!(r["id"], id, "{r}");
    r["result"]["structuredContent"].clone()
}

/// The frontend's resident memory, in bytes (`VmRSS`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the frontend runs");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// Waits (up to 30 s, polling) for the frontend's RSS to be at most
/// `bound`; panics with the figures when it stays above.
fn rss_comes_back(pid: u32, bound: u64, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = rss(pid);
        if now <= bound {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {after}: the frontend keeps {} MiB resident, bound {} MiB",
            now >> 20,
            bound >> 20
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Point 1: a line that does not parse is answered `-32700` with
/// `"id": null`; JSON that is no request `-32600` with `"id": null`;
/// `tools/call` whose `arguments` is not an object or whose `name` is not
/// a string `-32602` with its id. The server goes on serving.
#[test]
fn every_line_that_is_not_a_request_gets_its_json_rpc_error() {
    let mut env = Env::new();
    env.start_guardian();
    let mut raw = raw_world(&env, "j");
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    let parse_errors: Vec<Vec<u8>> = vec![
        b"{not json".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\0\"id\":1}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\xff\xfe\"}}".to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"\udc80"}}"#.to_vec(),
        br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1e400}}"#.to_vec(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":{}}}}}"#, "[".repeat(100_000)).into_bytes(),
    ];
    for line in &parse_errors {
        raw.send_raw(line);
        let r = raw.recv(T);
        assert_eq!(r["error"]["code"], -32700, "{r}");
        assert!(r.as_object().unwrap().get("id") == Some(&Value::Null), "{r}");
    }
    for line in [&br#"{"jsonrpc":"2.0"}"#[..], b"[]", b"17", br#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#] {
        raw.send_raw(line);
        let r = raw.recv(T);
        assert_eq!(r["error"]["code"], -32600, "{r}");
        assert!(r.as_object().unwrap().get("id") == Some(&Value::Null), "{r}");
    }
    for (id, params) in [
        ("s", json!({"name": "ReadFiles", "arguments": "file_paths"})),
        ("a", json!({"name": "ReadFiles", "arguments": ["/etc/hostname"]})),
        ("n", json!({"name": "ReadFiles", "arguments": 7})),
        ("k", json!({"name": 42, "arguments": {}})),
    ] {
        raw.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        let r = raw.recv(T);
        assert_eq!((&r["id"], &r["error"]["code"]), (&json!(id), &json!(-32602)), "{r}");
    }
    // A notification is never answered: the next answer is the ping's.
    raw.send_raw(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"junk"}"#);
    raw.send(json!({"jsonrpc": "2.0", "id": "last", "method": "ping"}));
    let r = raw.recv(T);
    assert_eq!((&r["id"], &r["result"]), (&json!("last"), &json!({})), "{r}");
    assert_eq!(without_members(snapshot(&[&env.ws, &env.data])), before, "bad lines changed the filesystem");
}

/// Point 2: what one request may cost is bounded before work starts, and
/// what it took comes back.
///
/// Attacks (smaller than issue 58's, to stay within a minute on a loaded
/// 2-core machine): 20,000 pings at once; a 200 MB line without a
/// newline; `ReadFiles` of 200,000 paths; a 10 MB string argument. Each
/// must be answered (the long line `-32600`, the paths `file_count`, the
/// long command `invalid_input`), and the frontend's RSS must come back
/// to within 48 MiB of what it was before, within 30 s of the last answer.
/// The 48 MiB: a frontend's baseline is 8-12 MiB here; the tokio runtime,
/// the thread caches and the allocator's arenas (one per core, each a
/// 64 MiB reservation of which a few MiB stay touched) keep some 20 MiB
/// more after the first large request, whatever its size; on c4cb753 the
/// 200,000-path request alone left 284-378 MB. The bound does not depend
/// on the machine's load: the memory is given back once the frontend is
/// idle, and the test waits for that by polling.
#[test]
fn each_attack_is_bounded_and_its_memory_comes_back() {
    let mut env = Env::new();
    env.start_guardian();
    let mut raw = raw_world(&env, "m");
    let pid = raw.child.id();
    std::thread::sleep(Duration::from_secs(1));
    let base = rss(pid);
    let bound = base + (48 << 20);

    // 20,000 pings, sent before any answer is read.
    let pings: Vec<u8> = (0..20_000)
        .flat_map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n").into_bytes())
        .collect();
    raw.send_raw(&pings[..pings.len() - 1]);
    // Answered concurrently: in any order, each once.
    let mut seen = vec![false; 20_000];
    for _ in 0..20_000 {
        let r = raw.recv(T);
        let i = r["id"].as_u64().unwrap_or_else(|| panic!("{r}")) as usize;
        assert!(!std::mem::replace(&mut seen[i], true), "{r}");
    }
    rss_comes_back(pid, bound, "20,000 pings");

    // A 200 MB line with no newline, then a newline: answered -32600 as
    // soon as it passes the 1 MiB line limit; the rest is skipped unread.
    let chunk = vec![b'x'; 8 << 20];
    let sender = {
        let stdin = raw.stdin_writer();
        std::thread::spawn(move || {
            for _ in 0..25 {
                if stdin.write_part(&chunk).is_err() {
                    return;
                }
            }
            let _ = stdin.write_part(b"\n");
        })
    };
    let r = raw.recv(T);
    assert_eq!((&r["error"]["code"], &r["id"]), (&json!(-32600), &Value::Null), "{r}");
    sender.join().unwrap();
    raw.send(json!({"jsonrpc": "2.0", "id": "after-line", "method": "ping"}));
    assert_eq!(raw.recv(T)["id"], "after-line");
    rss_comes_back(pid, bound, "a 200 MB line");

    // ReadFiles of 200,000 paths: file_count before any path is looked at.
    let paths: Vec<String> = (0..200_000).map(|i| format!("/nonexistent/winx-limits/{i}")).collect();
    let v = call(&mut raw, "paths", "ReadFiles", json!({"thread_id": "m", "file_paths": paths}));
    assert_eq!((v["status"].as_str(), v["errorCode"].as_str()), (Some("invalid_input"), Some("file_count")), "{v}");
    rss_comes_back(pid, bound, "a ReadFiles of 200,000 paths");

    // A 10 MB string argument.
    let v = call(&mut raw, "long", "BashCommand", json!({"thread_id": "m", "command": "x".repeat(10 << 20)}));
    assert_eq!(v["status"], "invalid_input", "{v}");
    rss_comes_back(pid, bound, "a 10 MB command");
}

/// Point 3: a `ReadFiles` that runs out of descriptors reports `io_error`
/// for what it could not open, never `not_found`: one helper named 400
/// times by a frontend whose descriptor limit is 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_is_io_error_not_not_found() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp_wrapped(&["prlimit", "--nofile=64:64", "--"], &env.sock, &[]).await;
    mcp.init(&env.ws, "fd").await;
    let h = env.session_dir("fd").join("one.txt");
    std::fs::write(&h, "one\n").unwrap();
    let v = mcp.call("ReadFiles", json!({"thread_id": "fd", "file_paths": vec![&h; 400]})).await;
    let failed = v["failed_files"].as_array().unwrap();
    assert!(!failed.is_empty(), "64 descriptors should not hold 400 opens at once: {}", &v.to_string()[..300]);
    for f in failed {
        assert_eq!(f["errorCode"], "io_error", "{f}");
    }
    assert_eq!(v["files"].as_array().unwrap().len() + failed.len(), 400);
    mcp.stop().await;
}

/// Point 4: a command, `send_text` or `send_ascii` over the documented
/// 128 KiB limit is refused `invalid_input` naming the limit, before
/// anything reaches the guardian (nothing runs), while the guardian is up.
#[test]
fn over_long_shell_input_is_refused_before_anything_is_sent() {
    let mut env = Env::new();
    env.start_guardian();
    let mut raw = raw_world(&env, "c");
    let marker = env.ws.join("ran");
    let command = format!("touch {}; : {}", p(&marker), "y".repeat(2 << 20));
    let v = call(&mut raw, "cmd", "BashCommand", json!({"thread_id": "c", "command": command}));
    assert_eq!((v["status"].as_str(), v["errorCode"].as_str()), (Some("invalid_input"), Some("invalid_input")), "{v}");
    assert!(v["message"].as_str().unwrap().contains("131072"), "{v}");
    let v = call(&mut raw, "text", "BashCommand", json!({"thread_id": "c", "send_text": "z".repeat(2 << 20)}));
    assert_eq!(v["status"], "invalid_input", "{v}");
    assert!(v["message"].as_str().unwrap().contains("131072"), "{v}");
    let v = call(&mut raw, "ascii", "BashCommand", json!({"thread_id": "c", "send_ascii": vec![65; 300_000]}));
    assert_eq!(v["status"], "invalid_input", "{v}");
    // A command at the limit is carried whole and runs.
    let fits = format!("touch {}; : {}", p(&marker), "y".repeat(128 * 1024 - 200));
    let v = call(&mut raw, "fits", "BashCommand", json!({"thread_id": "c", "command": fits, "wait_for_seconds": 20}));
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("completed"), Some(0)), "{v}");
    assert!(marker.exists());
}

/// Point 5: paths the kernel cannot take are `path_not_exact` before any
/// system call (Initialize, ReadFiles, releases); the guardian refuses a
/// `session_open` whose thread id holds a NUL and makes no directory for
/// it; `screen` with `lines: 0` is refused.
#[test]
fn paths_the_kernel_cannot_take_and_bad_thread_ids_are_refused() {
    let mut env = Env::new();
    env.start_guardian();
    let mut raw = raw_world(&env, "p");
    let ws = p(&env.ws).to_owned();
    for any in [format!("{ws}/a\0b"), format!("{ws}/{}", "c".repeat(300)), format!("{ws}/{}", "d/".repeat(2100))] {
        let v = call(&mut raw, "init", "Initialize", json!({"any_workspace_path": any, "thread_id": "p2"}));
        assert_eq!(v["errorCode"], "path_not_exact", "{v}");
    }
    let sd = env.session_dir("p");
    std::fs::write(sd.join("h.txt"), "h\n").unwrap();
    let bad = [
        format!("{}/h.txt/", p(&sd)),
        format!("{}/{}", p(&sd), "e".repeat(256)),
        format!("{}/{}", p(&sd), "f/".repeat(2100)),
        format!("/tmp/{}", "g".repeat(300)),
        "/etc/".to_owned(),
    ];
    let v = call(&mut raw, "read", "ReadFiles", json!({"thread_id": "p", "file_paths": bad}));
    let failed = v["failed_files"].as_array().unwrap();
    assert_eq!(failed.len(), bad.len(), "{v}");
    for f in failed {
        assert_eq!(f["errorCode"], "path_not_exact", "{f}");
    }
    // A release of a 4,100-byte path.
    let long = format!("{}/{}", p(&sd), "h/".repeat(2040) + "x.txt");
    assert!(long.len() > 4096);
    let entry = json!({"file_path": long, "mode": "release_temporary",
        "expected_revision": format!("sha256:{}", "0".repeat(64)), "artifact_generation": "g1.00"});
    let v = call(
        &mut raw,
        "rel",
        "EditFiles",
        json!({"thread_id": "p", "workspace_root": env.ws,
        "operation": "release_temporary", "files": [entry]}),
    );
    assert_eq!(v["errorCode"], "path_not_exact", "{v}");
    // screen with lines: 0, to a thread whose shell runs (a thread without
    // one is refused invalid_input anyway; c4cb753 answered this one
    // completed).
    let v = call(&mut raw, "true", "BashCommand", json!({"thread_id": "p", "command": "true", "wait_for_seconds": 20}));
    assert_eq!(v["status"], "completed", "{v}");
    let v = call(&mut raw, "screen", "BashCommand", json!({"thread_id": "p", "screen": true, "lines": 0}));
    assert_eq!(v["status"], "invalid_input", "{v}");
    assert!(v["message"].as_str().unwrap().contains("lines"), "{v}");

    // The guardian itself: a thread id with a NUL or another control
    // character is refused, and no session directory is made for it.
    let before = without_members(snapshot(&[&env.ws, &env.data]));
    let mut s = UnixStream::connect(&env.sock).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut lines = BufReader::new(s.try_clone().unwrap());
    for (id, thread) in [(1, "a\0b"), (2, "tab\there"), (3, "esc\u{1b}")] {
        let req = json!({"id": id, "op": "session_open", "workspace": env.ws, "thread_id": thread});
        s.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        let r: Value = serde_json::from_str(&line).unwrap();
        assert_eq!((&r["ok"], &r["error"]["code"]), (&json!(false), &json!("invalid_input")), "{r}");
    }
    assert_eq!(without_members(snapshot(&[&env.ws, &env.data])), before, "a session directory was made");
}

/// Point 6: one process may hold 64 connections to the guardian at once;
/// the next is answered with one error line naming the bound and closed,
/// while the others (and other processes) are still served.
#[test]
fn connections_per_process_are_bounded() {
    let mut env = Env::new();
    env.start_guardian();
    let hello = format!("{}\n", json!({"id": 1, "op": "hello", "protocol": 1, "client": "limits"}));
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut s = UnixStream::connect(&env.sock).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(hello.as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        assert!(line.contains("\"ok\":true"), "{line}");
        held.push(s);
    }
    let s = UnixStream::connect(&env.sock).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut r = BufReader::new(&s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert_eq!(v["ok"], false, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("64"), "{v}");
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).unwrap(), 0, "one line, then closed: {rest}");
    // Another process is still served (the status command connects).
    let out = env.command(&["status", "--socket", p(&env.sock)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A connection given back makes room.
    drop(held.pop());
    let deadline = Instant::now() + T;
    loop {
        let mut s = UnixStream::connect(&env.sock).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        // Until the guardian has seen the connection close, a new one gets
        // its refusal line and is closed at once: the hello may then meet a
        // closed socket (EPIPE, ECONNRESET), which is a try like another.
        let mut line = String::new();
        let sent = s.write_all(hello.as_bytes());
        let read = BufReader::new(&s).read_line(&mut line);
        if sent.is_ok() && read.is_ok() && line.contains("\"ok\":true") {
            break;
        }
        assert!(Instant::now() < deadline, "no room after a connection closed: {line}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
