//! `ReadFiles` as a streamed reply.
//!
//! The adapter hands each path's entry over as soon as it is known
//! ([`Frontend::read_files_each`]: the helpers of one request are hashed in
//! one batch on every core, in request order as far as the batch allows).
//! The reply is written while that goes on: `structuredContent` first, its
//! `files` array entry by entry in request order (an entry that arrives
//! early waits for the ones before it), then `failed_files`, `status`, and
//! last the members that depend on the whole (`content`, the summary, and
//! `isError`), taken from the same [`to_call_result`] a whole result goes
//! through. So the client reads the first helpers' content while the last
//! ones are still being hashed, and the result is the one
//! [`Frontend::read_files`] would give, members in another order.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::mpsc;

use rmcp::model::ServerResult;
use serde_json::{json, Value};
use winx_release_frontend_adapter::frontend::{read_status, ReadEntry};
use winx_release_frontend_adapter::Frontend;

use super::server::to_call_result;
use super::transport::StreamedResult;

/// What the reading side sends the writing side.
pub enum Piece {
    /// Path `index`'s entry.
    Entry(usize, ReadEntry),
    /// Every entry was sent; the request named this many paths.
    Done(usize),
    /// The whole request was refused: this is its result.
    Whole(Value),
}

/// Reads for `args` on this thread, sending each piece to `tx` as it is
/// known.
pub fn read(frontend: &Frontend, args: &Value, tx: &mpsc::Sender<Piece>) {
    let each = |i: usize, e: ReadEntry| {
        let _ = tx.send(Piece::Entry(i, e));
    };
    let last = match frontend.read_files_each(args, &each) {
        Ok(n) => Piece::Done(n),
        Err(v) => Piece::Whole(v),
    };
    let _ = tx.send(last);
}

/// The writer of a streamed `ReadFiles` reply fed by `rx`.
pub fn writer(rx: mpsc::Receiver<Piece>) -> StreamedResult {
    Box::new(move |placeholder, w| write_result(placeholder, &rx, w))
}

/// Writes the `result` object of a `ReadFiles` reply from the pieces on
/// `rx`. `placeholder` is what rmcp made of the handler's placeholder: its
/// members other than `content`, `structuredContent` and `isError` are kept.
fn write_result(placeholder: &ServerResult, rx: &mpsc::Receiver<Piece>, w: &mut dyn Write) -> io::Result<()> {
    let first = rx.recv().ok();
    if let Some(Piece::Whole(v)) = first {
        return write_rest(placeholder, to_call_result("ReadFiles", v), false, w);
    }
    w.write_all(b"{\"structuredContent\":{\"files\":[")?;
    let mut waiting: BTreeMap<usize, ReadEntry> = BTreeMap::new();
    let (mut read, mut failed) = (0usize, Vec::new());
    let mut emit = |e: ReadEntry, w: &mut dyn Write| -> io::Result<()> {
        match e {
            Ok(v) => {
                if read > 0 {
                    w.write_all(b",")?;
                }
                serde_json::to_writer(&mut *w, &v)?;
                read += 1;
            }
            Err(v) => failed.push(v),
        }
        Ok(())
    };
    let (mut next, mut total) = (0usize, None);
    let mut piece = first;
    while total.is_none() {
        match piece.take() {
            Some(Piece::Entry(i, e)) => {
                waiting.insert(i, e);
            }
            Some(Piece::Done(n)) => total = Some(n),
            // The reading side ended without `Done` (a panic): what came is
            // written, and the status says the call failed.
            Some(Piece::Whole(_)) | None => break,
        }
        while let Some(e) = waiting.remove(&next) {
            emit(e, w)?;
            next += 1;
        }
        if total.is_none() {
            piece = rx.recv().ok();
        }
    }
    // Entries that never came (none, unless the reading side broke) are
    // failures; what came after a gap is written in order.
    let end = total.unwrap_or(0).max(waiting.keys().next_back().map_or(0, |k| k + 1));
    for i in next..end {
        emit(waiting.remove(&i).unwrap_or_else(|| Err(json!({"errorCode": "io_error"}))), w)?;
    }
    let status = if total.is_none() { "failed" } else { read_status(read, failed.len()) };
    w.write_all(b"],\"failed_files\":")?;
    serde_json::to_writer(&mut *w, &failed)?;
    w.write_all(b",\"status\":")?;
    serde_json::to_writer(&mut *w, status)?;
    if total.is_none() {
        w.write_all(b",\"errorCode\":\"internal_error\"")?;
    }
    w.write_all(b"}")?;
    // The summary and `isError` as a whole result of these counts would
    // have them.
    let mut counted = json!({"status": status, "failed_files": failed});
    counted["files"] = Value::Array(vec![Value::Null; read]);
    write_rest(placeholder, to_call_result("ReadFiles", counted), true, w)
}

/// Writes `result` with the placeholder's protocol members: the whole
/// object, or, when `structured_written` (its `{` and `structuredContent`
/// are out already), its other members and the closing `}`.
fn write_rest(
    placeholder: &ServerResult,
    mut result: rmcp::model::CallToolResult,
    structured_written: bool,
    w: &mut dyn Write,
) -> io::Result<()> {
    if let ServerResult::CallToolResult(p) = placeholder {
        result.result_type = p.result_type.clone();
        result.meta = p.meta.clone();
    }
    if structured_written {
        result.structured_content = None;
    }
    let Value::Object(members) = serde_json::to_value(&result)? else {
        return Err(io::Error::other("a tool result is not an object"));
    };
    if !structured_written {
        return serde_json::to_writer(w, &members).map_err(io::Error::from);
    }
    for (k, v) in &members {
        w.write_all(b",")?;
        serde_json::to_writer(&mut *w, k)?;
        w.write_all(b":")?;
        serde_json::to_writer(&mut *w, v)?;
    }
    w.write_all(b"}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use winx_release_frontend_adapter::frontend::read_files_result;

    fn entries() -> Vec<ReadEntry> {
        vec![
            Ok(json!({"file_path": "/a", "content": "one\n", "size": 4})),
            Err(json!({"file_path": "/b", "errorCode": "not_found"})),
            Ok(json!({"file_path": "/c", "content": "three\n", "size": 6})),
            Ok(json!({"file_path": "/d", "content": null, "binary": true})),
        ]
    }

    fn streamed(pieces: Vec<Piece>) -> Value {
        let (tx, rx) = mpsc::channel();
        for p in pieces {
            tx.send(p).unwrap();
        }
        drop(tx);
        let placeholder = ServerResult::CallToolResult(rmcp::model::CallToolResult::success(vec![]));
        let mut out = Vec::new();
        writer(rx)(&placeholder, &mut out).unwrap();
        serde_json::from_slice(&out).expect("the streamed result is JSON")
    }

    fn whole(v: Value) -> Value {
        let mut r = to_call_result("ReadFiles", v);
        r.result_type = rmcp::model::CallToolResult::success(vec![]).result_type;
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn entries_in_any_order_give_the_whole_result() {
        let want = whole(read_files_result(entries()));
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
            let mut e: Vec<Option<ReadEntry>> = entries().into_iter().map(Some).collect();
            let mut pieces: Vec<Piece> = order.iter().map(|&i| Piece::Entry(i, e[i].take().unwrap())).collect();
            pieces.push(Piece::Done(4));
            assert_eq!(streamed(pieces), want, "{order:?}");
        }
    }

    #[test]
    fn a_refused_request_is_its_whole_result() {
        let refusal = json!({"status": "invalid_input", "errorCode": "invalid_input", "files": [], "failed_files": []});
        assert_eq!(streamed(vec![Piece::Whole(refusal.clone())]), whole(refusal));
    }

    #[test]
    fn a_broken_reading_side_still_gives_json_that_says_failed() {
        let mut e = entries();
        let v = streamed(vec![Piece::Entry(0, e.remove(0))]);
        assert_eq!(v["structuredContent"]["status"], "failed");
        assert_eq!(v["structuredContent"]["files"].as_array().map(Vec::len), Some(1));
        assert_eq!(v["isError"], true);
        // Missing entries of a finished read are failures.
        let v = streamed(vec![Piece::Entry(1, entries().remove(1)), Piece::Done(2)]);
        assert_eq!(v["structuredContent"]["status"], "failed");
        assert_eq!(v["structuredContent"]["failed_files"].as_array().map(Vec::len), Some(2));
    }
}
