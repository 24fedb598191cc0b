//! The request lines of standard input, each answered: a bounded line
//! reader and the decoding of a line into a JSON-RPC message or the
//! JSON-RPC error that answers it.
//!
//! rmcp's own reader ignores a line that is not JSON (invalid JSON, a NUL,
//! bytes that are not UTF-8, a lone surrogate escape, a number out of
//! range, nesting deeper than `serde_json` follows) and drops an over-long
//! line, both without an answer, so a client's request waited for ever; a
//! line of the wrong shape got an Invalid Request error without an `id`
//! member. JSON-RPC 2.0 (section 5.1) answers each of them:
//!
//! - a line that does not parse as JSON: `-32700` (Parse error), `"id": null`;
//! - JSON that is not a request, a notification or a response, and a line
//!   over the line limit: `-32600` (Invalid Request), `"id": null`;
//! - a request of a method the server knows whose `params` do not fit it
//!   (`tools/call` whose `arguments` is not an object or whose `name` is
//!   not a string): `-32602` (Invalid params) with the request's `id`.
//!
//! A notification (no `id`) is never answered, whatever its shape; one of
//! a method MCP does not define is ignored, as rmcp does.
//!
//! The line buffer is bounded: a line may be [`SMALL_LINE`] bytes long,
//! or up to `max_line` when its first [`HEAD`] bytes name `tools/call`
//! (the one request the contract needs large: an `EditFiles` write of a
//! 32 MiB helper; every SDK writes `method` before `params`). An over-long
//! line is answered as soon as it passes its limit, and its rest is
//! skipped without being kept. After a line larger than [`KEEP_CAPACITY`] the buffer is given
//! back, so one large request does not pin its size for the process's
//! life.
//!
//! # References
//! - [JSON-RPC 2.0](https://www.jsonrpc.org/specification), sections 4, 5.1

use std::io;

use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Capacity the line buffer keeps between lines; a larger one is freed.
pub const KEEP_CAPACITY: usize = 1024 * 1024;

/// Longest line that is not a `tools/call` request (1 MiB).
pub const SMALL_LINE: usize = 1024 * 1024;

/// The first bytes of a line looked at for `tools/call`.
pub const HEAD: usize = 64 * 1024;

/// JSON-RPC's Parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's Invalid Request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's Invalid params.
pub const INVALID_PARAMS: i64 = -32602;

/// What reading the next line gave.
pub enum Read {
    /// A whole line is in the buffer ([`Lines::line`]).
    Line,
    /// A line passed the limit; its rest is skipped.
    Oversized,
    /// End of input (an unterminated last line is dropped).
    Eof,
    /// Reading failed.
    Failed(io::Error),
}

/// A bounded line reader over `R`.
pub struct Lines<R> {
    read: R,
    line: Vec<u8>,
    /// Skipping the rest of an over-long line.
    skipping: bool,
    max_line: usize,
    /// Whether the line being read may grow past [`SMALL_LINE`]; decided
    /// when it first does.
    large: Option<bool>,
}

impl<R: AsyncBufRead + Unpin> Lines<R> {
    /// Lines of `read`, each at most `max_line` bytes with its newline.
    pub fn new(read: R, max_line: usize) -> Lines<R> {
        Lines { read, line: Vec::new(), skipping: false, max_line, large: None }
    }

    /// The longest line accepted.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// The limit of the line `line` being read, given its next `more`
    /// bytes (deciding `large` once it passes the small limit).
    fn limit(line: &[u8], large: &mut Option<bool>, max_line: usize, more: &[u8]) -> usize {
        let small = SMALL_LINE.min(max_line);
        if line.len().saturating_add(more.len()) <= small {
            return small;
        }
        let large = *large.get_or_insert_with(|| {
            let mut head = line[..line.len().min(HEAD)].to_vec();
            head.extend_from_slice(&more[..more.len().min(HEAD - head.len())]);
            head.windows(b"tools/call".len()).any(|w| w == b"tools/call")
        });
        if large {
            max_line
        } else {
            small
        }
    }

    /// Reads up to the end of the next line.
    ///
    /// Cancel-safe: bytes are moved from the reader into the buffer with
    /// no await in between, so a dropped call leaves a partial line that
    /// the next call goes on with.
    pub async fn next(&mut self) -> Read {
        loop {
            let (used, done) = {
                let bytes = match self.read.fill_buf().await {
                    Ok(b) => b,
                    Err(e) => return Read::Failed(e),
                };
                if bytes.is_empty() {
                    return Read::Eof;
                }
                let newline = bytes.iter().position(|&b| b == b'\n');
                let used = newline.map_or(bytes.len(), |i| i + 1);
                if self.skipping {
                    if newline.is_some() {
                        self.skipping = false;
                    }
                    (used, None)
                } else if self.line.len().saturating_add(used)
                    > Self::limit(&self.line, &mut self.large, self.max_line, &bytes[..used])
                {
                    self.line = Vec::new();
                    self.large = None;
                    self.skipping = newline.is_none();
                    (used, Some(Read::Oversized))
                } else {
                    self.line.extend_from_slice(&bytes[..used]);
                    (used, newline.map(|_| Read::Line))
                }
            };
            self.read.consume(used);
            if let Some(r) = done {
                return r;
            }
        }
    }

    /// The line just read, without its line end.
    pub fn line(&self) -> &[u8] {
        let l = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        l.strip_suffix(b"\r").unwrap_or(l)
    }

    /// Empties the buffer for the next line (freeing it when large).
    pub fn clear(&mut self) {
        self.large = None;
        if self.line.capacity() > KEEP_CAPACITY {
            self.line = Vec::new();
        } else {
            self.line.clear();
        }
    }
}

/// What one line is.
#[derive(Debug)]
pub enum Decoded {
    /// A message for the server.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Nothing to do (a blank line, a notification that does not fit).
    Ignored,
    /// A JSON-RPC error line to answer with (without its newline).
    Answer(Vec<u8>),
}

/// The JSON-RPC error line with `id`, `code` and `message`.
pub fn error_line(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let v = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The answer to a line over its limit.
pub fn oversized(max_line: usize) -> Vec<u8> {
    let msg = format!(
        "Invalid Request: a request line is limited to {SMALL_LINE} bytes, a tools/call request to {max_line} \
         (docs/MCP.md, Limits); this one was skipped unread"
    );
    error_line(&Value::Null, INVALID_REQUEST, &msg)
}

/// The methods a client may send that MCP defines: a request of one of
/// them whose `params` rmcp could not take is an Invalid params case.
fn known_method(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "tools/call"
            | "tools/list"
            | "prompts/get"
            | "prompts/list"
            | "resources/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "resources/templates/list"
            | "completion/complete"
            | "logging/setLevel"
    )
}

/// Whether `method` is a notification MCP defines (others are ignored).
fn known_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/initialized"
            | "notifications/progress"
            | "notifications/roots/list_changed"
    )
}

/// An `id` a reply may echo: a string or an integer.
fn echoable(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Decodes one line (without its line end).
pub fn decode(line: &[u8]) -> Decoded {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Ignored;
    }
    let typed = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line);
    let shape_error = match typed {
        Ok(JsonRpcMessage::Request(r)) => match &r.request {
            // A method rmcp knows whose params it could not take lands here.
            ClientRequest::CustomRequest(c) if known_method(&c.method) => {
                let id = serde_json::to_value(&r.id).unwrap_or(Value::Null);
                let msg = format!("Invalid params: the params of {} do not fit its schema", c.method);
                return Decoded::Answer(error_line(&id, INVALID_PARAMS, &msg));
            }
            _ => return Decoded::Message(Box::new(JsonRpcMessage::Request(r))),
        },
        Ok(m) => return Decoded::Message(Box::new(m)),
        Err(e) => e,
    };
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Decoded::Answer(error_line(&Value::Null, PARSE_ERROR, &format!("Parse error: {e}"))),
    };
    let method = v.get("method").and_then(Value::as_str);
    if let (Some(method), None) = (method, v.get("id")) {
        // A notification is never answered.
        if !known_notification(method) {
            tracing::debug!(method, "ignoring a notification MCP does not define");
        } else {
            tracing::debug!(method, error = %shape_error, "ignoring a notification of the wrong shape");
        }
        return Decoded::Ignored;
    }
    let id = v.get("id").filter(|id| echoable(id));
    if let (Some(method), Some(id), Some("2.0")) = (method, id, v.get("jsonrpc").and_then(Value::as_str)) {
        if known_method(method) {
            let msg = format!("Invalid params: {shape_error}");
            return Decoded::Answer(error_line(id, INVALID_PARAMS, &msg));
        }
    }
    Decoded::Answer(error_line(&Value::Null, INVALID_REQUEST, &format!("Invalid Request: {shape_error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &[u8]) -> Value {
        match decode(line) {
            Decoded::Answer(b) => serde_json::from_slice(&b).unwrap(),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn each_bad_line_gets_its_code() {
        for bad in [
            &b"{"[..],
            b"\0",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xff\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\\udc80\"}}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":1e400}}",
        ] {
            let a = answer(bad);
            assert_eq!((a["error"]["code"].as_i64(), &a["id"]), (Some(PARSE_ERROR), &Value::Null), "{a}");
        }
        let deep = "[".repeat(100_000);
        assert_eq!(answer(deep.as_bytes())["error"]["code"], PARSE_ERROR);
        for bad in [&b"{\"jsonrpc\":\"2.0\"}"[..], b"[]", b"42", b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}"]
        {
            let a = answer(bad);
            assert_eq!((a["error"]["code"].as_i64(), &a["id"]), (Some(INVALID_REQUEST), &Value::Null), "{a}");
            assert!(a.as_object().unwrap().contains_key("id"));
        }
        for args in ["\"x\"", "[1]", "7"] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{{"name":"ReadFiles","arguments":{args}}}}}"#
            );
            let a = answer(line.as_bytes());
            assert_eq!((a["error"]["code"].as_i64(), &a["id"]), (Some(INVALID_PARAMS), &json!("r1")), "{a}");
        }
        let a = answer(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":42,"arguments":{}}}"#);
        assert_eq!((a["error"]["code"].as_i64(), &a["id"]), (Some(INVALID_PARAMS), &json!(9)), "{a}");
    }

    #[test]
    fn good_lines_and_notifications_are_not_answered() {
        assert!(matches!(decode(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Decoded::Message(_)));
        assert!(matches!(
            decode(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
            Decoded::Message(_)
        ));
        assert!(matches!(decode(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Decoded::Message(_)));
        assert!(matches!(decode(br#"{"jsonrpc":"2.0","method":"$/whatever","params":7}"#), Decoded::Ignored));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#),
            Decoded::Ignored
        ));
        assert!(matches!(decode(b"  "), Decoded::Ignored));
    }

    #[test]
    fn only_a_tools_call_line_may_pass_the_small_limit() {
        let big = SMALL_LINE + 10;
        let call = format!("{{\"method\":\"tools/call\",\"x\":\"{}\"}}\n", "a".repeat(SMALL_LINE));
        let other = format!("{{\"method\":\"tools/list\",\"x\":\"{}\"}}\n", "a".repeat(SMALL_LINE));
        let input = format!("{call}{other}{call}");
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut lines = Lines::new(tokio::io::BufReader::with_capacity(4096, input.as_bytes()), 2 * big);
            assert!(matches!(lines.next().await, Read::Line));
            assert_eq!(lines.line().len(), call.len() - 1);
            lines.clear();
            assert!(matches!(lines.next().await, Read::Oversized));
            assert!(matches!(lines.next().await, Read::Line));
            assert_eq!(lines.line().len(), call.len() - 1);
        });
    }

    #[test]
    fn an_over_long_line_is_skipped_and_the_next_is_read() {
        let input = format!("{}\nshort\n{}", "x".repeat(100), "y".repeat(10));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut lines = Lines::new(tokio::io::BufReader::with_capacity(7, input.as_bytes()), 16);
            assert!(matches!(lines.next().await, Read::Oversized));
            assert!(matches!(lines.next().await, Read::Line));
            assert_eq!(lines.line(), b"short");
            lines.clear();
            assert!(matches!(lines.next().await, Read::Eof));
        });
    }
}
