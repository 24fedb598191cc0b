//! The members of a streamed tool result around the parts the stream
//! writes itself: the text block's head, the end of a `ReadFiles` object,
//! and the protocol's own members (`isError`, `_meta`, …) as the same
//! [`rmcp::model::CallToolResult`] a whole result is would have them.

use std::io::{self, Write};

use rmcp::model::ServerResult;
use serde_json::Value;

/// What of a result object is out already.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Nothing: write it whole.
    Nothing,
    /// Its `{` and `structuredContent`.
    Structured,
    /// Its `{`, `content` (the text block) and `structuredContent`.
    ContentAndStructured,
}

/// Writes the end of a `ReadFiles` object after its `files`:
/// `],"failed_files":…,"status":…` (and `errorCode`), then `}`.
pub fn write_tail(tail: &Value, w: &mut dyn Write) -> io::Result<()> {
    w.write_all(b"],\"failed_files\":")?;
    serde_json::to_writer(&mut *w, &tail["failed_files"])?;
    w.write_all(b",\"status\":")?;
    serde_json::to_writer(&mut *w, &tail["status"])?;
    if let Some(code) = tail.get("errorCode") {
        w.write_all(b",\"errorCode\":")?;
        serde_json::to_writer(&mut *w, code)?;
    }
    w.write_all(b"}")
}

/// Writes `result` with the placeholder's protocol members: the whole
/// object, or the members not `written` yet and the closing `}`.
pub fn write_rest(
    placeholder: &ServerResult,
    mut result: rmcp::model::CallToolResult,
    written: Written,
    w: &mut dyn Write,
) -> io::Result<()> {
    if let ServerResult::CallToolResult(p) = placeholder {
        result.result_type = p.result_type.clone();
        result.meta = p.meta.clone();
    }
    if written == Written::Nothing {
        return serde_json::to_writer(w, &result).map_err(io::Error::from);
    }
    result.structured_content = None;
    let Value::Object(members) = serde_json::to_value(&result)? else {
        return Err(io::Error::other("a tool result is not an object"));
    };
    for (k, v) in &members {
        if k == "content" && written == Written::ContentAndStructured {
            continue;
        }
        w.write_all(b",")?;
        serde_json::to_writer(&mut *w, k)?;
        w.write_all(b":")?;
        serde_json::to_writer(&mut *w, v)?;
    }
    w.write_all(b"}")
}

/// Writes the start of a text block, up to the opening quote of its
/// `text`: its other members as a text block has them, then `"text":"`.
pub fn write_text_block_head(w: &mut dyn Write) -> io::Result<()> {
    let Value::Object(block) = serde_json::to_value(rmcp::model::ContentBlock::text(String::new()))? else {
        return Err(io::Error::other("a content block is not an object"));
    };
    w.write_all(b"{")?;
    for (k, v) in block.iter().filter(|(k, _)| k.as_str() != "text") {
        serde_json::to_writer(&mut *w, k)?;
        w.write_all(b":")?;
        serde_json::to_writer(&mut *w, v)?;
        w.write_all(b",")?;
    }
    w.write_all(b"\"text\":\"")
}
