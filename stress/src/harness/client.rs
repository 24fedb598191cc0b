//! A small synchronous MCP client over a child process's stdio.
//!
//! Messages are newline-delimited JSON-RPC 2.0. One reader thread per client
//! routes each response to the caller waiting for its id, so several worker
//! threads can have calls in flight on one frontend at once. Requests the
//! server sends (`ping`, say) are answered; notifications are ignored. An
//! error response without an id (what a server answers to a line it could
//! not take, an oversized one for instance) goes to the only call in flight,
//! if there is exactly one.

use std::collections::HashMap;
use std::fmt;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use winx_release_kernel::sys::lock;

use crate::harness::stdio::{read_lines, LineWriter};

/// The MCP protocol version this client asks for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// The server answered with a JSON-RPC error.
    Rpc {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// No answer within the timeout.
    Timeout(Duration),
    /// The frontend is gone or the pipe broke.
    Transport(String),
    /// An answer that is not what MCP promises.
    Protocol(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rpc { code, message } => write!(f, "JSON-RPC error {code}: {message}"),
            CallError::Timeout(d) => write!(f, "no answer in {} s", d.as_secs()),
            CallError::Transport(m) => write!(f, "transport: {m}"),
            CallError::Protocol(m) => write!(f, "protocol: {m}"),
        }
    }
}

impl std::error::Error for CallError {}

/// The result of a `tools/call`.
#[derive(Clone, Debug)]
pub struct ToolReply {
    /// `result.structuredContent`.
    pub value: Value,
    /// `result.isError`.
    pub is_error: bool,
    /// Wall time of the call at the client.
    pub elapsed: Duration,
}

impl ToolReply {
    /// `structuredContent.status`.
    pub fn status(&self) -> &str {
        self.value.get("status").and_then(Value::as_str).unwrap_or("")
    }

    /// `structuredContent.errorCode`.
    pub fn error_code(&self) -> Option<&str> {
        self.value.get("errorCode").and_then(Value::as_str)
    }
}

type Pending = Arc<Mutex<HashMap<u64, mpsc::Sender<Value>>>>;

/// A connected MCP client.
pub struct McpClient {
    name: String,
    child: Mutex<Child>,
    stdin: LineWriter,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    timeout: Duration,
}

impl McpClient {
    /// Takes over a spawned child whose stdin and stdout are piped, and
    /// starts its reader thread. Call [`McpClient::initialize`] next.
    pub fn new(name: &str, mut child: Child, timeout: Duration) -> anyhow::Result<McpClient> {
        let stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("{name}: stdin is not piped"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("{name}: stdout is not piped"))?;
        let client = McpClient {
            name: name.to_owned(),
            child: Mutex::new(child),
            stdin: LineWriter::new(stdin),
            pending: Arc::default(),
            next_id: AtomicU64::new(1),
            alive: Arc::new(AtomicBool::new(true)),
            timeout,
        };
        let (pending, stdin, alive) = (client.pending.clone(), client.stdin.clone(), client.alive.clone());
        let at_end_pending = pending.clone();
        read_lines(
            format!("stress-{name}-reader"),
            stdout,
            move |line| route(line, &pending, &stdin),
            move || {
                alive.store(false, Ordering::SeqCst);
                // Dropping the senders wakes every waiter with "disconnected".
                lock(&at_end_pending).clear();
            },
        )?;
        Ok(client)
    }

    /// The frontend's process id.
    pub fn pid(&self) -> u32 {
        lock(&self.child).id()
    }

    /// The client's name (for messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The MCP handshake: `initialize`, then `notifications/initialized`.
    /// Returns the server's `initialize` result.
    pub fn initialize(&self) -> Result<Value, CallError> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "winx-release-stress", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self.request("initialize", params, self.timeout)?;
        if result.get("protocolVersion").and_then(Value::as_str).is_none() {
            return Err(CallError::Protocol(format!("{}: initialize result without protocolVersion", self.name)));
        }
        self.notify("notifications/initialized", json!({}))?;
        Ok(result)
    }

    fn send(&self, msg: &Value) -> Result<(), CallError> {
        let line = serde_json::to_vec(msg).map_err(|e| CallError::Protocol(e.to_string()))?;
        self.stdin.send_line(line).map_err(|e| CallError::Transport(format!("{}: {e}", self.name)))
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) -> Result<(), CallError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    /// Sends a request without waiting: returns its id and the channel its
    /// response arrives on (see [`McpClient::wait`]).
    pub fn start(&self, method: &str, params: Value) -> Result<(u64, mpsc::Receiver<Value>), CallError> {
        if !self.alive.load(Ordering::SeqCst) {
            return Err(CallError::Transport(format!("{} has exited", self.name)));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        lock(&self.pending).insert(id, tx);
        if let Err(e) = self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})) {
            lock(&self.pending).remove(&id);
            return Err(e);
        }
        Ok((id, rx))
    }

    /// Waits up to `timeout` for the response to request `id`; gives up on
    /// it when none comes.
    pub fn wait(&self, id: u64, rx: &mpsc::Receiver<Value>, timeout: Duration) -> Result<Value, CallError> {
        let answer = rx.recv_timeout(timeout);
        lock(&self.pending).remove(&id);
        let msg = match answer {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(CallError::Timeout(timeout)),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(CallError::Transport(format!("{} exited", self.name)))
            }
        };
        if let Some(err) = msg.get("error") {
            return Err(CallError::Rpc {
                code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: err.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
            });
        }
        msg.get("result").cloned().ok_or_else(|| CallError::Protocol(format!("{}: response without result", self.name)))
    }

    /// Sends a request and waits for its result.
    pub fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, CallError> {
        let (id, rx) = self.start(method, params)?;
        self.wait(id, &rx, timeout)
    }

    /// The `structuredContent` and `isError` of a `tools/call` result.
    pub fn tool_reply(tool: &str, result: &Value, elapsed: Duration) -> Result<ToolReply, CallError> {
        let value = result
            .get("structuredContent")
            .cloned()
            .ok_or_else(|| CallError::Protocol(format!("{tool} result without structuredContent: {result}")))?;
        let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
        Ok(ToolReply { value, is_error, elapsed })
    }

    /// `tools/call` of `tool` with `arguments`.
    pub fn call_tool(&self, tool: &str, arguments: Value) -> Result<ToolReply, CallError> {
        self.call_tool_within(tool, arguments, self.timeout)
    }

    /// `tools/call` with its own timeout.
    pub fn call_tool_within(&self, tool: &str, arguments: Value, timeout: Duration) -> Result<ToolReply, CallError> {
        let start = Instant::now();
        let result = self.request("tools/call", json!({"name": tool, "arguments": arguments}), timeout)?;
        McpClient::tool_reply(tool, &result, start.elapsed())
    }

    /// Closes stdin (the server then exits), waits up to `grace`, then
    /// kills the process.
    pub fn shutdown(&self, grace: Duration) {
        self.stdin.close();
        let deadline = Instant::now() + grace;
        let mut child = lock(&self.child);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(2));
    }
}

/// Routes one line of the frontend's stdout: a response to the call
/// waiting for its id, a request of the server answered (`ping`) or
/// refused, anything else dropped.
fn route(line: &[u8], pending: &Pending, stdin: &LineWriter) {
    let Ok(msg) = serde_json::from_slice::<Value>(line) else { return };
    let id = msg.get("id");
    let is_response = msg.get("result").is_some() || msg.get("error").is_some();
    match (id, is_response) {
        (Some(Value::Number(n)), true) => {
            if let Some(tx) = n.as_u64().and_then(|id| lock(pending).remove(&id)) {
                let _ = tx.send(msg);
            }
        }
        (None | Some(Value::Null), true) => {
            let mut map = lock(pending);
            if map.len() == 1 {
                if let Some(id) = map.keys().next().copied() {
                    if let Some(tx) = map.remove(&id) {
                        let _ = tx.send(msg);
                    }
                }
            }
        }
        (Some(id), false) if msg.get("method").is_some() => {
            // A request from the server: answer `ping`, refuse the rest.
            let reply = if msg["method"] == "ping" {
                json!({"jsonrpc": "2.0", "id": id, "result": {}})
            } else {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}})
            };
            if let Ok(bytes) = serde_json::to_vec(&reply) {
                let _ = stdin.send_line(bytes);
            }
        }
        _ => {}
    }
}
