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
//! string. With the rendering, each entry's content is escaped once, in
//! one pass over its bytes, into a buffer of its own: those characters go
//! into the text block's fence and are kept instead of the content (which
//! is dropped), and once the text block is closed they are copied, not
//! escaped again, into `structuredContent`'s `content` string (the same
//! JSON string characters: issue 57; a content whose escape is more than a
//! quarter longer than itself is kept as it is and escaped again). With
//! the JSON text block each content is escaped for each block from the
//! entry the read made. Everything else goes out through one bounded
//! buffer ([`super::escape::Out`]), kept characters straight to the writer
//! past it; no serialised copy of the reply is held: what is kept is each
//! content once (as characters or as read). With
//! `--text-result summary`, `structuredContent` is written as the entries
//! come and nothing is kept. The pieces of the result object around them
//! are [`super::frame`]'s.
//!
//! A read that hangs (a file on a dead NFS or FUSE mount) must not hold the
//! transport's one writer thread, and every reply queued behind this one,
//! for ever: the writer waits at most [`ENTRY_DEADLINE`] for each next
//! piece. When that passes with nothing new, every entry that has not come
//! is reported failed (`io_error`, with a `message` naming the bound) and
//! the reply ends. The reading side is then told to stop (the `stop` flag
//! of [`writer`] and [`read`]): a file that answers, slowly or without end
//! (a sparse file of 2^63 - 1 bytes), is no longer read for a reply that
//! went out without it. A client's `notifications/cancelled` sets the same
//! flag (`server.rs`).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ServerResult;
use serde_json::{json, Value};
use winx_release_mcp_tools::frontend::{read_status, ReadEntry};
use winx_release_mcp_tools::Frontend;

use super::escape::{Nesting, Out, Stats};
use super::frame::{write_rest, write_tail, write_text_block_head, Written};
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
pub fn read(frontend: &Frontend, args: &Value, stop: &AtomicBool, tx: &mpsc::Sender<Piece>) {
    let each = |i: usize, e: ReadEntry| {
        let _ = tx.send(Piece::Entry(i, e));
    };
    let last = match frontend.read_files_each_until(args, stop, &each) {
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
/// `paths`, with the text block `text`. Once the reply is written (or its
/// writing failed), `stop` is set: whatever the reading side still reads
/// would be dropped, so it stops reading.
pub fn writer(
    rx: mpsc::Receiver<Piece>,
    paths: Vec<String>,
    text: TextResult,
    stop: Arc<AtomicBool>,
) -> StreamedResult {
    writer_with_deadline(rx, paths, text, ENTRY_DEADLINE, stop)
}

fn writer_with_deadline(
    rx: mpsc::Receiver<Piece>,
    paths: Vec<String>,
    text: TextResult,
    deadline: Duration,
    stop: Arc<AtomicBool>,
) -> StreamedResult {
    Box::new(move |placeholder, w| {
        let stream = Stream { rx: &rx, paths: &paths, text, deadline };
        let written = stream.write_result(placeholder, w).map(drop);
        stop.store(true, Ordering::Relaxed);
        written
    })
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

    /// Writes the `files` entry `v` where it goes first: into the text
    /// block (the rendering, or the result as JSON), or with the summary
    /// into `structuredContent`. `read` entries were written before it.
    ///
    /// Returns, for the rendering, the content's characters as the text
    /// block's JSON string holds them: the same characters
    /// `structuredContent`'s `content` string holds, kept to be copied
    /// there rather than escaped a second time (when they are at most a
    /// quarter longer than the content; else `None`, and the content is
    /// escaped again from the entry).
    fn emit(&self, v: &Value, read: usize, out: &mut Out<'_>) -> io::Result<Option<Vec<u8>>> {
        match self.text {
            TextResult::Text => {
                let Some(text) = v.get("content").and_then(Value::as_str) else {
                    return render::write_read_file(v, &mut out.in_string()).map(|()| None);
                };
                let chars = out.escape_apart(text.as_bytes());
                render::write_read_file_with(v, &mut out.in_string(), |_, w| w.escaped_already(&chars))?;
                Ok((chars.len() <= text.len() + text.len() / 4).then_some(chars))
            }
            TextResult::Json => {
                if read > 0 {
                    out.write_all(b",")?;
                }
                out.json(v, Nesting::JsonInString).map(|()| None)
            }
            TextResult::Summary => {
                if read > 0 {
                    out.write_all(b",")?;
                }
                out.json(v, Nesting::Json).map(|()| None)
            }
        }
    }

    /// Writes the `result` object of a `ReadFiles` reply from the pieces on
    /// `rx`. `placeholder` is what rmcp made of the handler's placeholder:
    /// its members other than `content`, `structuredContent` and `isError`
    /// are kept.
    fn write_result(&self, placeholder: &ServerResult, w: &mut dyn Write) -> io::Result<Stats> {
        let mut out = Out::new(w);
        let first = self.next();
        if let Ok(Piece::Whole(v)) = first {
            write_rest(placeholder, to_call_result("ReadFiles", v, self.text), Written::Nothing, &mut out)?;
            return out.finish();
        }
        // With a text block of its own (the rendering, or the JSON), the
        // text block goes first, written as the entries come (while later
        // ones are still hashed), and the entries are kept as they are
        // (each content as it was read, one copy) for `structuredContent`
        // at the end. With the summary, `structuredContent` goes first and
        // nothing is kept.
        out.write_all(b"{")?;
        match self.text {
            TextResult::Text => {
                out.write_all(b"\"content\":[")?;
                write_text_block_head(&mut out)?;
                render::stream_head(&mut out.in_string())?;
            }
            TextResult::Json => {
                out.write_all(b"\"content\":[")?;
                write_text_block_head(&mut out)?;
                out.escaped(b"{\"files\":[", Nesting::Json)?;
            }
            TextResult::Summary => out.write_all(b"\"structuredContent\":{\"files\":[")?,
        }
        let mut waiting: BTreeMap<usize, ReadEntry> = BTreeMap::new();
        let (mut kept, mut read, mut failed) = (Vec::new(), 0usize, Vec::new());
        let mut emit = |e: ReadEntry, out: &mut Out<'_>| -> io::Result<()> {
            match e {
                Ok(mut v) => {
                    let chars = self.emit(&v, read, out)?;
                    if self.text != TextResult::Summary {
                        // The content's characters stand for the content
                        // from now on: it is dropped.
                        if chars.is_some() {
                            if let Some(c) = v.get_mut("content") {
                                *c = Value::Null;
                            }
                        }
                        kept.push((v, chars));
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
                emit(e, &mut out)?;
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
            emit(e, &mut out)?;
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
        // The text block's end, then `structuredContent` from the kept
        // entries, each content escaped once more (for this block) from
        // the read's own buffer.
        let written = match self.text {
            TextResult::Summary => {
                write_tail(&tail, &mut out)?;
                Written::Structured
            }
            text_first => {
                if text_first == TextResult::Text {
                    render::stream_tail(&tail, &mut out.in_string())?;
                } else {
                    write_tail(&tail, &mut out.in_string())?;
                }
                out.write_all(b"\"}],\"structuredContent\":{\"files\":[")?;
                for (i, (v, chars)) in kept.iter().enumerate() {
                    if i > 0 {
                        out.write_all(b",")?;
                    }
                    out.json_with_content(v, chars.as_deref())?;
                }
                write_tail(&tail, &mut out)?;
                Written::ContentAndStructured
            }
        };
        drop(kept);
        // The text block (when it is the summary) and `isError` as a whole
        // result of these counts would have them.
        let mut counted = tail;
        counted["files"] = Value::Array(vec![Value::Null; read]);
        write_rest(placeholder, to_call_result("ReadFiles", counted, self.text), written, &mut out)?;
        out.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::escape::BUFFER_BOUND;
    use super::*;
    use std::time::Instant;
    use winx_release_mcp_tools::frontend::read_files_result;

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
        writer(rx, paths(), text, Arc::new(AtomicBool::new(false)))(&placeholder(), &mut out).unwrap();
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

    /// The reply's bytes, pinned (issue 57: whatever changes in how the
    /// reply is written, the client must read the same bytes): the
    /// rendering's text block and `structuredContent`, in any order of
    /// arrival, for contents with quotes, backslashes, a control character
    /// and text beyond ASCII.
    #[test]
    fn the_streamed_reply_s_bytes_are_pinned() {
        let mut all = entries();
        all.push(Ok(json!({"file_path": "/e", "content": "tab\tbell\u{7}é✓\r\n", "size": 14,
            "revision": "sha256:ab", "binary": false, "truncated": false})));
        let paths: Vec<String> = ["/a", "/b", "/c", "/d", "/e"].map(String::from).to_vec();
        for order in [[0, 1, 2, 3, 4], [4, 2, 0, 3, 1]] {
            let (tx, rx) = mpsc::channel();
            for i in order {
                tx.send(Piece::Entry(i, all[i].clone())).unwrap();
            }
            tx.send(Piece::Done(5)).unwrap();
            drop(tx);
            let mut out = Vec::new();
            writer(rx, paths.clone(), TextResult::Text, Arc::new(AtomicBool::new(false)))(&placeholder(), &mut out)
                .unwrap();
            let got = String::from_utf8(out).unwrap();
            assert_eq!(got, PINNED_REPLY, "{order:?}");
        }
    }

    const PINNED_REPLY: &str = r##"{"content":[{"type":"text","text":"ReadFiles (status at the end)\n\nfile_path: /a\nsize: 4\ncontent:\n```\none\n\"two\"\\\n```\n\nfile_path: /c\nsize: 6\ncontent:\n```\nthree\n```\n\nfile_path: /d\ncontent: binary (0 bytes, not shown)\n\nfile_path: /e\nrevision: sha256:ab\nsize: 14\ncontent:\n```\ntab\tbell\u0007é✓\r\n```\n\nfailed: /b (not_found)\n\nReadFiles: partial\n"}],"structuredContent":{"files":[{"content":"one\n\"two\"\\","file_path":"/a","size":4},{"content":"three\n","file_path":"/c","size":6},{"binary":true,"content":null,"file_path":"/d"},{"binary":false,"content":"tab\tbell\u0007é✓\r\n","file_path":"/e","revision":"sha256:ab","size":14,"truncated":false}],"failed_files":[{"errorCode":"not_found","file_path":"/b"}],"status":"partial"},"isError":false,"resultType":"complete"}"##;

    /// A sink that remembers its largest single write.
    #[derive(Default)]
    struct Sink {
        bytes: Vec<u8>,
        largest_write: usize,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.largest_write = self.largest_write.max(buf.len());
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Contract section 3: each content is escaped once per block, and no
    /// second full copy of the reply is held. Four files of 300 KiB of text
    /// with quotes, backslashes and newlines: the escaper sees each content
    /// once for the text block and once for `structuredContent` (twice the
    /// contents, plus the labels and paths), the buffer stays within its
    /// bound, and the reply (over 2.4 MB) reaches the transport's writer in
    /// pieces no larger than that bound.
    #[test]
    fn each_content_is_escaped_once_per_block_without_a_copy_of_the_reply() {
        let content = |i: usize| format!("line {i} \"q\" \\ `x`\n").repeat(300 * 1024 / 20);
        let entry = |i: usize| -> ReadEntry {
            Ok(json!({"file_path": format!("/f{i}"), "revision": "sha256:00", "size": content(i).len(),
                "content": content(i), "binary": false, "truncated": false}))
        };
        let contents: usize = (0..4).map(|i| content(i).len()).sum();
        // With the rendering, each content is escaped once, for the text
        // block, and its characters are copied into `structuredContent`.
        for (text, blocks) in [(TextResult::Text, 1), (TextResult::Json, 2), (TextResult::Summary, 1)] {
            let (tx, rx) = mpsc::channel();
            for i in [2, 0, 3, 1] {
                tx.send(Piece::Entry(i, entry(i))).unwrap();
            }
            tx.send(Piece::Done(4)).unwrap();
            drop(tx);
            let paths: Vec<String> = (0..4).map(|i| format!("/f{i}")).collect();
            let stream = Stream { rx: &rx, paths: &paths, text, deadline: ENTRY_DEADLINE };
            let mut sink = Sink::default();
            let stats = stream.write_result(&placeholder(), &mut sink).unwrap();
            let escaped_per_content = stats.escaped as f64 / contents as f64;
            assert!(
                stats.escaped >= blocks * contents && stats.escaped <= blocks * contents + 4096,
                "{text:?}: {} bytes escaped for {contents} bytes of content in {blocks} blocks \
                 ({escaped_per_content:.2} passes)",
                stats.escaped
            );
            assert!(stats.peak <= BUFFER_BOUND, "{text:?}: {stats:?}");
            let copied = if text == TextResult::Text { 2 * contents } else { 0 };
            assert!(stats.copied >= copied && stats.copied <= copied * 5 / 4, "{text:?}: {stats:?}");
            let copies = if text == TextResult::Summary { 1 } else { 2 };
            assert!(sink.bytes.len() > copies * contents, "{text:?}");
            assert!(sink.largest_write <= BUFFER_BOUND, "{text:?}: one write of {} bytes", sink.largest_write);
            // And what was written is the result, each content as it was
            // read in each block.
            let v = parse_text(serde_json::from_slice(&sink.bytes).unwrap(), text);
            for i in 0..4 {
                assert_eq!(v["structuredContent"]["files"][i]["content"].as_str(), Some(content(i).as_str()));
                if text == TextResult::Text {
                    let t = v["content"][0]["text"].as_str().unwrap();
                    assert!(t.contains(&format!("content:\n```\n{}```\n", content(i))), "{text:?}");
                }
            }
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
                let stop = Arc::new(AtomicBool::new(false));
                let w = writer_with_deadline(rx, paths(), TextResult::Json, Duration::from_millis(300), stop.clone());
                let r = w(&placeholder(), &mut out);
                let _ = done_tx.send((r.is_ok(), out, stop.load(Ordering::Relaxed)));
            });
            let (ok, out, stopped) = done_rx.recv_timeout(Duration::from_secs(5)).expect("the writer is not held");
            drop(tx);
            // The reading side is told to give up what the reply went out without.
            assert!(stopped, "the reading side was not told to stop");
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
