//! `ReadFiles` of 100 helpers of 640 KiB at the MCP client, to the reply's
//! last byte, against `openssl dgst -sha256` over the same 100 files (the
//! baseline, in the same group): group `read_files_text` (printable lines:
//! the reply holds the first 256 KiB of each helper in both blocks, about
//! 53 MB) and group `read_files_binary` (random bytes: no content).
//!
//! The frontend is the real `winx-release mcp` (`$WINX_BENCH_BIN`, else the
//! binary `cargo bench` builds, in the bench profile: release code) with its
//! guardian, over stdio, driven from Rust. The timed part writes the
//! `tools/call` line and reads raw bytes up to the reply's newline: no JSON
//! parse and no copy (benches/mcp_vs_openssl.py's Python client spent about 214 ms of a
//! text call reading and parsing the 53 MB line). Every reply is checked
//! after its timing: the first in full (parsed), the others by length (but for the id's
//! digits) and by their `"status":"completed"`.
//!
//! Both sides read warm files (written once, read once before timing).
//! A smoke run (`cargo test --all-targets`) reads 10 helpers of 64 KiB.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use winx_release_stress::harness::dirs::PrivateDirs;
use winx_release_stress::harness::guardian::GuardianProc;

mod common;

/// The binary driven: `$WINX_BENCH_BIN`, else this build's.
fn bin() -> PathBuf {
    std::env::var_os("WINX_BENCH_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_winx-release")), PathBuf::from)
}

/// An MCP frontend on stdio, spoken to in raw lines.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    id: u64,
    /// Where replies are read, straight from the pipe (kept: its memory is
    /// reused); the last reply is `buf[..len]`, newline included.
    buf: Vec<u8>,
    len: usize,
}

impl Mcp {
    fn start(dirs: &PrivateDirs, bin: &Path) -> Mcp {
        let mut cmd = dirs.command(&[], bin, &["mcp", "--socket", dirs.sock.to_str().unwrap()]);
        cmd.env_remove("RUST_LOG").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut m = Mcp { child, stdin, stdout, id: 0, buf: vec![0; 1 << 20], len: 0 };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}});
        m.request("initialize", init);
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, msg: &Value) {
        let mut bytes = serde_json::to_vec(msg).unwrap();
        bytes.push(b'\n');
        self.stdin.write_all(&bytes).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The request line of `method` with a new id.
    fn line_of(&mut self, method: &str, params: Value) -> Vec<u8> {
        self.id += 1;
        let mut bytes =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})).unwrap();
        bytes.push(b'\n');
        bytes
    }

    /// Writes `request` and reads the reply into `self.buf`: the timed part
    /// (raw bytes straight from the pipe into one buffer, no parse, no
    /// copy). A JSON-RPC message is one line with no raw newline inside, and
    /// the frontend sends nothing unasked, so the reply is complete when a
    /// read ends with a newline. Returns the time to its last byte.
    fn timed(&mut self, request: &[u8]) -> Duration {
        self.len = 0;
        let t = Instant::now();
        self.stdin.write_all(request).unwrap();
        self.stdin.flush().unwrap();
        loop {
            if self.len == self.buf.len() {
                self.buf.resize(2 * self.buf.len(), 0);
            }
            let k = self.stdout.read(&mut self.buf[self.len..]).unwrap();
            assert!(k > 0, "the frontend closed its stdout");
            self.len += k;
            if self.buf[self.len - 1] == b'\n' {
                break;
            }
        }
        t.elapsed()
    }

    /// The last reply.
    fn line(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// A request and its parsed reply (the line with its id).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let req = self.line_of(method, params);
        self.timed(&req);
        let id = json!(self.id);
        self.line()
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<Value>(l).unwrap())
            .find(|v| v["id"] == id)
            .expect("no reply to the request")
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        r["result"]["structuredContent"].clone()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Printable helper text: lines of 80 bytes (79 lower-case letters and
/// spaces, then a newline), rotated at random, cut to `len` bytes
/// (the text benches/helper_text.py writes, from another generator).
fn text_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz ";
    let mut line: Vec<u8> = (0..79).map(|_| ALPHABET[(next() % 27) as usize]).collect();
    line.push(b'\n');
    let mut out = Vec::with_capacity(len + 80);
    while out.len() < len {
        let a = (next() % 40) as usize;
        let b = (next() % 40) as usize;
        out.extend_from_slice(&line[a..]);
        out.extend_from_slice(&line[..b]);
    }
    out.truncate(len);
    out
}

/// Random bytes (the binary helpers).
fn binary_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The baseline: `openssl dgst -sha256 FILES`, output to a pipe and dropped.
fn openssl(paths: &[PathBuf]) {
    let st = Command::new("openssl").args(["dgst", "-sha256"]).args(paths).stdout(Stdio::null()).status().unwrap();
    assert!(st.success());
}

fn find_subslice(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn read_files(c: &mut Criterion) {
    let (n, size) = if common::smoke() { (10, 64 * 1024) } else { (100, 640 * 1024) };
    let bin = bin();
    let w = PrivateDirs::create("winx-bench-read-", None).unwrap();
    let mut cmd = w.command(&[], &bin, &["guardian", "--socket", w.sock.to_str().unwrap()]);
    cmd.stderr(Stdio::null());
    let mut guardian = GuardianProc::spawn(cmd, Duration::from_secs(30)).unwrap();
    let mut m = Mcp::start(&w, &bin);
    let init = m.call("Initialize", json!({"any_workspace_path": w.ws, "thread_id": "bench"}));
    assert_eq!(init["status"], "completed", "{init}");
    let session = PathBuf::from(init["temporary_artifact_dir"].as_str().unwrap());

    for (kind, binary) in [("text", false), ("binary", true)] {
        let paths: Vec<PathBuf> = (0..n)
            .map(|i| {
                let p = session.join(format!("h{i:03}.{}", if binary { "bin" } else { "txt" }));
                let bytes = if binary { binary_bytes(size, i as u64 + 1) } else { text_bytes(size, i as u64 + 1) };
                std::fs::write(&p, bytes).unwrap();
                let _ = std::fs::read(&p).unwrap(); // warm
                p
            })
            .collect();
        let args = json!({"thread_id": "bench", "file_paths": paths});
        // The first call, untimed, checked in full.
        let first = m.call("ReadFiles", args.clone());
        assert_eq!(first["status"], "completed", "{}", &first.to_string()[..200.min(first.to_string().len())]);
        let files = first["files"].as_array().unwrap();
        assert_eq!(files.len(), n);
        assert_eq!(files[0]["binary"], json!(binary));
        assert_eq!(files[0]["content"].is_string(), !binary);
        let reply_len = m.len;

        let mut g = c.benchmark_group(format!("read_files_{kind}"));
        if !common::smoke() {
            g.sample_size(20).warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(15));
        }
        g.bench_function(format!("openssl dgst -sha256, {n} files of {} KiB", size / 1024), |b| {
            b.iter(|| openssl(&paths))
        });
        g.bench_function(
            format!("ReadFiles {kind}, {n} files of {} KiB, to the reply's last byte", size / 1024),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let req = m.line_of("tools/call", json!({"name": "ReadFiles", "arguments": args}));
                        total += m.timed(&req);
                        // The same reply but for the id's digits.
                        assert!(
                            m.len.abs_diff(reply_len) < 8,
                            "the reply's length changed: {} against {reply_len}",
                            m.len
                        );
                        let head = &m.line()[..m.len.min(256)];
                        assert!(find_subslice(head, format!("\"id\":{}", m.id).as_bytes()), "not the reply");
                        let tail = &m.line()[m.len.saturating_sub(512)..];
                        assert!(find_subslice(tail, b"\"status\":\"completed\""), "not completed");
                    }
                    total
                })
            },
        );
        g.finish();
        eprintln!("read_files_{kind}: reply {reply_len} bytes");
    }
    drop(m);
    guardian.kill();
}

criterion_group!(benches, read_files);
criterion_main!(benches);
