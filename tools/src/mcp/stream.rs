//! `ReadFiles` as a streamed reply.
//!
//! The adapter hands each path's entry over as soon as it is known
//! ([`Frontend::read_files_each`]: the helpers of one request are hashed in
//! one batch on every core, in request order as far as the batch allows).
//! The reply is written while that goes on: the result object's `files`
//! array entry by entry in request order (an entry that arrives early waits
//! for the ones before it), then `failed_files`, `status`, and last the
//! members that depend on the whole (`isError`, and with
//! `--text-result summary` the summary), as the same [`to_call_result`] a
//! whole result goes through makes them.
//! So the client reads the first helpers' content while the last ones are
//! still being hashed, and `structuredContent` is the one
//! [`Frontend::read_files`] would give, members in another order.
//!
//! The text block is written first, as the entries come: the rendering
//! for a model ([`super::render`], whose status line then comes last), or
//! with `--text-result json` the `structuredContent` object as a JSON
//! string. Each entry's content goes into the text block's JSON string
//! escaped once, straight from the entry the read made, and the entry is
//! kept; once the text block is closed, the kept entries are serialised
//! again, as `structuredContent`. No serialised copy of the reply is held:
//! what is kept is the read's own content, once. With
//! `--text-result summary`, `structuredContent` is written as the entries
//! come and nothing is kept.
//!
//! A read that hangs (a file on a dead NFS or FUSE mount) must not hold the
//! transport's one writer thread, and every reply queued behind this one,
//! for ever: the writer waits at most [`ENTRY_DEADLINE`] for each next
//! piece. When that passes with nothing new, every entry that has not come
//! is reported failed (`io_error`, with a `message` naming the bound) and
//! the reply ends; what the reading thread finds later is dropped.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use rmcp::model::ServerResult;
use serde_json::{json, Value};
use winx_release_frontend_adapter::frontend::{read_status, ReadEntry};
use winx_release_frontend_adapter::Frontend;

use super::render;
use super::result::{to_call_result, TextResult};
use super::transport::StreamedResult;

/// The longest the writer waits for the next piece of a streamed reply
/// (the first one included) before it reports the entries still missing
/// as failed and ends the reply. Hashing a 32 MiB helper takes well under
/// a second here; a file that gives nothing for this long is on a
/// filesystem that does not answer.
pub const ENTRY_DEADLINE: Duration = Duration::from_secs(10);

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

/// The paths a `ReadFiles` request names (for the failures of entries that
/// never come); empty when `file_paths` is not a list.
pub fn requested_paths(args: &Value) -> Vec<String> {
    args.get("file_paths")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|p| p.as_str().unwrap_or_default().to_owned()).collect())
        .unwrap_or_default()
}

/// The writer of a streamed `ReadFiles` reply fed by `rx` for a request of
/// `paths`, with the text block `text`.
pub fn writer(rx: mpsc::Receiver<Piece>, paths: Vec<String>, text: TextResult) -> StreamedResult {
    writer_with_deadline(rx, paths, text, ENTRY_DEADLINE)
}

fn writer_with_deadline(
    rx: mpsc::Receiver<Piece>,
    paths: Vec<String>,
    text: TextResult,
    deadline: Duration,
) -> StreamedResult {
    Box::new(move |placeholder, w| {
        let stream = Stream { rx: &rx, paths: &paths, text, deadline };
        stream.write_result(placeholder, w)
    })
}

/// A writer into a JSON string: what is written goes out as the
/// characters of a JSON string (without its quotes), escaped once.
struct JsonString<'a> {
    w: &'a mut dyn Write,
    /// The escaped bytes of one write, before they go out (reused).
    escaped: Vec<u8>,
}

impl Write for JsonString<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.escaped.clear();
        escape_into(buf, &mut self.escaped);
        self.w.write_all(&self.escaped)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// Appends `buf` to `out` as the characters of a JSON string (without its
/// quotes), as `serde_json` escapes a string: `"`, `\` and control
/// characters. What is escaped here is JSON text, so runs between quotes
/// and backslashes go out unchanged.
///
/// The text has something to escape every few dozen bytes (each newline of
/// a helper is `\n` in JSON, and its backslash is escaped here again), so
/// the escaped bytes are gathered in `out` and written once by the caller,
/// and runs of 16 bytes with nothing to escape are passed over a run at a
/// time.
fn escape_into(buf: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    out.reserve(buf.len() + buf.len() / 8 + 8);
    let (mut start, mut i) = (0, 0);
    while i < buf.len() {
        if let Some(run) = buf.get(i..i + 16) {
            if !run.iter().fold(false, |any, &b| any | needs(b)) {
                i += 16;
                continue;
            }
        }
        let b = buf[i];
        if needs(b) {
            out.extend_from_slice(&buf[start..i]);
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                _ => out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 15)],
                ]),
            }
            start = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&buf[start..]);
}

/// What of a result object is out already.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Nothing: write it whole.
    Nothing,
    /// Its `{` and `structuredContent`.
    Structured,
    /// Its `{`, `content` (the text block) and `structuredContent`.
    ContentAndStructured,
}

/// How the pieces ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// `Done` came.
    Done(usize),
    /// Nothing came for the deadline.
    TimedOut,
    /// The reading side went away without `Done` (a panic).
    Broken,
}

struct Stream<'a> {
    rx: &'a mpsc::Receiver<Piece>,
    paths: &'a [String],
    text: TextResult,
    deadline: Duration,
}

impl Stream<'_> {
    fn next(&self) -> Result<Piece, End> {
        self.rx.recv_timeout(self.deadline).map_err(|e| match e {
            RecvTimeoutError::Timeout => End::TimedOut,
            RecvTimeoutError::Disconnected => End::Broken,
        })
    }

    /// The failure of entry `i`, which did not come.
    fn missing(&self, i: usize, end: End) -> Value {
        let path = self.paths.get(i).map_or("", String::as_str);
        match end {
            End::TimedOut => json!({"file_path": path, "errorCode": "io_error",
                "message": format!("no answer from the filesystem within {} s; the read was abandoned",
                    self.deadline.as_secs_f64())}),
            _ => json!({"file_path": path, "errorCode": "io_error"}),
        }
    }

    /// Writes the `result` object of a `ReadFiles` reply from the pieces on
    /// `rx`. `placeholder` is what rmcp made of the handler's placeholder:
    /// its members other than `content`, `structuredContent` and `isError`
    /// are kept.
    fn write_result(&self, placeholder: &ServerResult, w: &mut dyn Write) -> io::Result<()> {
        let first = self.next();
        if let Ok(Piece::Whole(v)) = first {
            return write_rest(placeholder, to_call_result("ReadFiles", v, self.text), Written::Nothing, w);
        }
        // With a text block of its own (the rendering, or the JSON), the
        // text block goes first, written as the entries come (while later
        // ones are still hashed), and the entries are kept as they are
        // (each content as it was read, one copy) for `structuredContent`
        // at the end. With the summary, `structuredContent` goes first and
        // nothing is kept.
        let text_first = self.text != TextResult::Summary;
        w.write_all(b"{")?;
        if text_first {
            w.write_all(b"\"content\":[")?;
            write_text_block_head(w)?;
        } else {
            w.write_all(b"\"structuredContent\":{\"files\":[")?;
        }
        let mut text = JsonString { w, escaped: Vec::new() };
        match self.text {
            TextResult::Text => render::stream_head(&mut text)?,
            TextResult::Json => text.write_all(b"{\"files\":[")?,
            TextResult::Summary => {}
        }
        let mut waiting: BTreeMap<usize, ReadEntry> = BTreeMap::new();
        let (mut kept, mut read, mut failed) = (Vec::new(), 0usize, Vec::new());
        let mode = self.text;
        let mut emit = |e: ReadEntry, out: &mut JsonString<'_>| -> io::Result<()> {
            match e {
                Ok(v) => {
                    match mode {
                        TextResult::Text => render::write_read_file(&v, out)?,
                        TextResult::Json => {
                            if read > 0 {
                                out.write_all(b",")?;
                            }
                            serde_json::to_writer(&mut *out, &v)?;
                        }
                        TextResult::Summary => {
                            if read > 0 {
                                out.w.write_all(b",")?;
                            }
                            serde_json::to_writer(&mut *out.w, &v)?;
                        }
                    }
                    if mode != TextResult::Summary {
                        kept.push(v);
                    }
                    read += 1;
                }
                Err(v) => failed.push(v),
            }
            Ok(())
        };
        let mut next = 0usize;
        let mut piece = first;
        let end = loop {
            match piece {
                Ok(Piece::Entry(i, e)) => {
                    waiting.insert(i, e);
                }
                Ok(Piece::Done(n)) => break End::Done(n),
                // A second whole result cannot come after entries.
                Ok(Piece::Whole(_)) => break End::Broken,
                Err(end) => break end,
            }
            while let Some(e) = waiting.remove(&next) {
                emit(e, &mut text)?;
                next += 1;
            }
            piece = self.next();
        };
        // Entries that never came (none, unless the reading side broke or
        // the deadline passed) are failures; what came after a gap is
        // written in order.
        let total = match end {
            End::Done(n) => n,
            End::TimedOut => self.paths.len(),
            End::Broken => 0,
        };
        let last = total.max(waiting.keys().next_back().map_or(0, |k| k + 1));
        for i in next..last {
            let e = waiting.remove(&i).unwrap_or_else(|| Err(self.missing(i, end)));
            emit(e, &mut text)?;
        }
        if end == End::TimedOut {
            tracing::warn!(
                deadline_s = self.deadline.as_secs_f64(),
                "ReadFiles: a file gave no answer in time; its entry is reported failed"
            );
        }
        let status = if end == End::Broken { "failed" } else { read_status(read, failed.len()) };
        let mut tail = json!({"failed_files": failed, "status": status});
        if end == End::Broken {
            tail["errorCode"] = json!("internal_error");
        }
        let written = match self.text {
            TextResult::Text => {
                render::stream_tail(&tail, &mut text)?;
                let JsonString { w, .. } = text;
                w.write_all(b"\"}],\"structuredContent\":{\"files\":[")?;
                write_entries(&kept, w)?;
                write_tail(&tail, w)?;
                (w, Written::ContentAndStructured)
            }
            TextResult::Json => {
                write_tail(&tail, &mut text)?;
                let JsonString { w, .. } = text;
                w.write_all(b"\"}],\"structuredContent\":{\"files\":[")?;
                write_entries(&kept, w)?;
                write_tail(&tail, w)?;
                (w, Written::ContentAndStructured)
            }
            TextResult::Summary => {
                let JsonString { w, .. } = text;
                write_tail(&tail, w)?;
                (w, Written::Structured)
            }
        };
        let (w, written) = written;
        drop(kept);
        // The text block (when it is the summary) and `isError` as a whole
        // result of these counts would have them.
        let mut counted = tail;
        counted["files"] = Value::Array(vec![Value::Null; read]);
        write_rest(placeholder, to_call_result("ReadFiles", counted, self.text), written, w)
    }
}

/// Writes the kept entries, comma-separated.
fn write_entries(kept: &[Value], w: &mut dyn Write) -> io::Result<()> {
    for (i, v) in kept.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        serde_json::to_writer(&mut *w, v)?;
    }
    Ok(())
}

/// Writes the end of a `ReadFiles` object after its `files`:
/// `],"failed_files":…,"status":…` (and `errorCode`), then `}`.
fn write_tail(tail: &Value, w: &mut dyn Write) -> io::Result<()> {
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
fn write_rest(
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
fn write_text_block_head(w: &mut dyn Write) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use winx_release_frontend_adapter::frontend::read_files_result;

    fn entries() -> Vec<ReadEntry> {
        vec![
            Ok(json!({"file_path": "/a", "content": "one\n\"two\"\\", "size": 4})),
            Err(json!({"file_path": "/b", "errorCode": "not_found"})),
            Ok(json!({"file_path": "/c", "content": "three\n", "size": 6})),
            Ok(json!({"file_path": "/d", "content": null, "binary": true})),
        ]
    }

    fn paths() -> Vec<String> {
        ["/a", "/b", "/c", "/d"].map(String::from).to_vec()
    }

    fn placeholder() -> ServerResult {
        ServerResult::CallToolResult(rmcp::model::CallToolResult::success(vec![]))
    }

    /// The streamed result, with its text block parsed (it is the
    /// `structuredContent` object as a JSON string).
    fn streamed_with(pieces: Vec<Piece>, text: TextResult) -> Value {
        let (tx, rx) = mpsc::channel();
        for p in pieces {
            tx.send(p).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        writer(rx, paths(), text)(&placeholder(), &mut out).unwrap();
        parse_text(serde_json::from_slice(&out).expect("the streamed result is JSON"), text)
    }

    fn streamed(pieces: Vec<Piece>) -> Value {
        streamed_with(pieces, TextResult::Json)
    }

    fn parse_text(mut v: Value, text: TextResult) -> Value {
        assert_eq!(v["content"].as_array().map(Vec::len), Some(1), "{v}");
        if text == TextResult::Json {
            let t = v["content"][0]["text"].as_str().expect("a text block").to_owned();
            let parsed: Value = serde_json::from_str(&t).expect("the text block is JSON");
            assert_eq!(parsed, v["structuredContent"], "the text block is structuredContent");
            v["content"][0]["text"] = parsed;
        }
        v
    }

    fn whole_with(v: Value, text: TextResult) -> Value {
        let mut r = to_call_result("ReadFiles", v, text);
        r.result_type = rmcp::model::CallToolResult::success(vec![]).result_type;
        parse_text(serde_json::to_value(r).unwrap(), text)
    }

    fn whole(v: Value) -> Value {
        whole_with(v, TextResult::Json)
    }

    #[test]
    fn entries_in_any_order_give_the_whole_result() {
        for text in [TextResult::Json, TextResult::Summary] {
            let want = whole_with(read_files_result(entries()), text);
            for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
                let mut e: Vec<Option<ReadEntry>> = entries().into_iter().map(Some).collect();
                let mut pieces: Vec<Piece> = order.iter().map(|&i| Piece::Entry(i, e[i].take().unwrap())).collect();
                pieces.push(Piece::Done(4));
                assert_eq!(streamed_with(pieces, text), want, "{order:?}");
            }
        }
    }

    /// The rendering, streamed: each file's block as a whole rendering
    /// writes it, in request order whatever order the entries came in, the
    /// failures, then the status line; `structuredContent` and `isError`
    /// are the whole result's.
    #[test]
    fn the_streamed_rendering_ends_with_the_status() {
        let want = whole_with(read_files_result(entries()), TextResult::Text);
        let mut blocks = String::new();
        for e in entries().into_iter().flatten() {
            let mut b = Vec::new();
            render::write_read_file(&e, &mut b).unwrap();
            blocks.push_str(std::str::from_utf8(&b).unwrap());
        }
        let expected =
            format!("ReadFiles (status at the end)\n{blocks}\nfailed: /b (not_found)\n\nReadFiles: partial\n");
        for order in [[0, 1, 2, 3], [3, 2, 1, 0]] {
            let mut e: Vec<Option<ReadEntry>> = entries().into_iter().map(Some).collect();
            let mut pieces: Vec<Piece> = order.iter().map(|&i| Piece::Entry(i, e[i].take().unwrap())).collect();
            pieces.push(Piece::Done(4));
            let got = streamed_with(pieces, TextResult::Text);
            assert_eq!(got["structuredContent"], want["structuredContent"], "{order:?}");
            assert_eq!(got["isError"], want["isError"]);
            assert_eq!(got["content"][0]["text"].as_str(), Some(expected.as_str()), "{order:?}");
        }
        assert!(expected.contains("content:\n```\none\n\"two\"\\\n```\n"), "{expected}");
    }

    #[test]
    fn escaping_is_serde_json_s() {
        for text in ["", "plain", "a\"b\\c", "\u{1}\u{8}\u{c}\n\r\t\u{1f}é€😀", "{\"k\":\"v\\n\"}"] {
            let mut out = Vec::new();
            escape_into(text.as_bytes(), &mut out);
            let want = serde_json::to_string(text).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), want[1..want.len() - 1], "{text:?}");
        }
        // Written in two pieces, the second holding a 16-byte run whose
        // last byte must be escaped (the case the property test below
        // first found against a run that skipped one byte too many).
        let text = "Σ᧐\0a \u{ec8}\0\0𑶓🉐𑍇#𞥞𐰀\0";
        let mut out = Vec::new();
        escape_into(&text.as_bytes()[..18], &mut out);
        escape_into(&text.as_bytes()[18..], &mut out);
        let want = serde_json::to_string(text).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), want[1..want.len() - 1]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        // Any text, escaping runs of 16 and the bytes between them alike,
        // and written in any two pieces (as the serialiser's writes split
        // it): serde_json's escaping.
        #[test]
        fn escaping_any_text_in_any_pieces_is_serde_json_s(
            text in "(\\PC|[\u{0}-\u{1f}\"\\\\]){0,200}",
            cut in 0usize..200,
        ) {
            let bytes = text.as_bytes();
            let cut = cut.min(bytes.len());
            let mut out = Vec::new();
            escape_into(&bytes[..cut], &mut out);
            escape_into(&bytes[cut..], &mut out);
            let want = serde_json::to_string(&text).unwrap();
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), &want[1..want.len() - 1]);
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

    /// A file that never answers (a hung mount): the reading side holds its
    /// sender and sends nothing more. The writer gives up after the
    /// deadline, names the missing entries as failed, and ends the reply.
    #[test]
    fn a_read_that_hangs_holds_the_writer_only_for_the_deadline() {
        for sent in [0usize, 1] {
            let (tx, rx) = mpsc::channel();
            if sent == 1 {
                tx.send(Piece::Entry(0, entries().remove(0))).unwrap();
            }
            let (done_tx, done_rx) = mpsc::channel();
            let started = Instant::now();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let w = writer_with_deadline(rx, paths(), TextResult::Json, Duration::from_millis(300));
                let r = w(&placeholder(), &mut out);
                let _ = done_tx.send((r.is_ok(), out));
            });
            let (ok, out) = done_rx.recv_timeout(Duration::from_secs(5)).expect("the writer is not held");
            drop(tx);
            assert!(ok && started.elapsed() < Duration::from_secs(3));
            let v = parse_text(serde_json::from_slice(&out).unwrap(), TextResult::Json);
            let s = &v["structuredContent"];
            assert_eq!(s["files"].as_array().map(Vec::len), Some(sent), "{v}");
            let failed = s["failed_files"].as_array().unwrap();
            assert_eq!(failed.len(), 4 - sent, "{v}");
            assert_eq!(failed[0]["file_path"], paths()[sent], "{v}");
            assert_eq!(failed[0]["errorCode"], "io_error", "{v}");
            assert!(failed[0]["message"].as_str().is_some_and(|m| m.contains("0.3 s")), "{v}");
            assert_eq!(s["status"], if sent == 0 { "failed" } else { "partial" }, "{v}");
        }
    }
}
