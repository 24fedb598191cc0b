//! Reply lines: the envelope (`id`, `ok`, `error`) around a reply's body,
//! as the guardian writes it and the client first reads it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ErrorBody, ErrorCode};

#[derive(Serialize)]
struct OkLine<'a, T> {
    id: u64,
    ok: bool,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Serialize)]
struct ErrLine<'a> {
    id: u64,
    ok: bool,
    error: &'a ErrorBody,
}

/// The line (with its newline) of a successful reply to request `id`.
pub fn ok_line<T: Serialize>(id: u64, body: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(&OkLine { id, ok: true, body })
        .unwrap_or_else(|e| error_line(id, ErrorCode::IoError, &format!("reply not serialisable: {e}")));
    if line.last() != Some(&b'\n') {
        line.push(b'\n');
    }
    line
}

/// The line (with its newline) of an error reply to request `id`.
pub fn error_line(id: u64, code: ErrorCode, message: &str) -> Vec<u8> {
    let body = ErrorBody { code, message: message.to_owned() };
    let mut line = serde_json::to_vec(&ErrLine { id, ok: false, error: &body }).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A reply line as the client first reads it: the envelope, and the body's
/// fields still to be decoded into the op's reply type.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ReplyLine {
    /// The request's id.
    pub id: u64,
    /// Whether the op succeeded.
    pub ok: bool,
    /// What went wrong, when `ok` is false.
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// The op's reply fields.
    #[serde(flatten)]
    pub body: Map<String, Value>,
}
