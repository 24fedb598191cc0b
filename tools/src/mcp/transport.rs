//! The stdio transport: rmcp's line reader for what comes in, and one
//! writer thread that serialises each outgoing message straight into
//! stdout.
//!
//! rmcp's own stdio transport encodes a whole message into one buffer, then
//! hands it to tokio's stdout, which copies it again, 2 MiB at a time, to
//! a blocking thread. A `ReadFiles` reply can carry 25 MB of text: the
//! client then waits for the whole encoding before its first byte, and
//! the process holds two more copies of the reply. Here the writer thread
//! serialises into a 256 KiB buffer over stdout (and, when stdout is a
//! pipe, asks for a 1 MiB pipe), so the client reads the start of a reply
//! while its end is still being encoded.
//!
//! A tool may also stream its result ([`Streams`]): its handler registers a
//! writer for the request's id and returns a placeholder; when the reply to
//! that id comes to be written, the writer thread writes the envelope and
//! lets the tool's writer write the `result` object as its parts become
//! known, so the client reads a `ReadFiles` reply while later helpers are
//! still being hashed.
//!
//! Standard input is read in large chunks by a thread of its own
//! ([`Incoming`]), not through tokio's blocking pool 8 KiB at a time.
//!
//! Messages leave in the order [`Transport::send`] was called: the message
//! is queued in the call, before its future is polled. The reader side is
//! `lines.rs` (bounded lines; every line that is not a message answered
//! with its JSON-RPC error); those error lines go through the same writer
//! thread, whole, so no line is ever interleaved with another.
//!
//! Once the writer has been idle for [`IDLE`] after writing anything, it
//! calls the idle hook (`set_idle_hook`; the binary's gives the
//! allocator's free memory back to the system), so what a request
//! allocated does not stay resident after it.
//!
//! # References
//! - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html)
//!   (`F_SETPIPE_SZ`)
//! - [`pipe(7)`](https://man7.org/linux/man-pages/man7/pipe.7.html)

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::oneshot;

use super::incoming::Incoming;
use super::lines::{decode, oversized, Decoded, Lines, Read};

/// Bytes the writer thread buffers before a `write(2)` to stdout.
pub const WRITE_BUFFER: usize = 256 * 1024;

/// The pipe size asked for when stdout is a pipe (the unprivileged
/// maximum, `/proc/sys/fs/pipe-max-size`, is 1 MiB by default).
const PIPE_SIZE: usize = 1024 * 1024;

/// How long the writer waits with nothing to write before it calls the
/// idle hook (once per busy spell).
pub const IDLE: Duration = Duration::from_millis(500);

static IDLE_HOOK: OnceLock<fn()> = OnceLock::new();

/// Sets what the writer calls once it has been idle for `IDLE` (0.5 s) after a
/// busy spell (the first call wins).
pub fn set_idle_hook(hook: fn()) {
    let _ = IDLE_HOOK.set(hook);
}

enum Outgoing {
    /// A message to serialise; the result of writing it goes back.
    Message(Box<TxJsonRpcMessage<RoleServer>>, oneshot::Sender<io::Result<()>>),
    /// Bytes the reader side encoded itself (whole lines).
    Bytes(Vec<u8>),
}

/// Writes the JSON object of a reply's `result`, given the result rmcp made
/// of the handler's placeholder (its fields other than the tool's own).
pub type StreamedResult = Box<dyn FnOnce(&ServerResult, &mut dyn Write) -> io::Result<()> + Send>;

/// Streamed results waiting for their reply, by request id.
#[derive(Clone, Default)]
pub struct Streams(Arc<Mutex<HashMap<RequestId, StreamedResult>>>);

impl Streams {
    /// The reply to `id` is to be written by `write`.
    pub fn insert(&self, id: RequestId, write: StreamedResult) {
        winx_release_kernel::sys::lock(&self.0).insert(id, write);
    }

    fn take(&self, id: &RequestId) -> Option<StreamedResult> {
        winx_release_kernel::sys::lock(&self.0).remove(id)
    }
}

/// The MCP transport on stdin and stdout.
pub struct Stdio {
    lines: Lines<Incoming>,
    out: Option<mpsc::Sender<Outgoing>>,
}

impl Stdio {
    /// A transport over this process's stdin and stdout; incoming lines
    /// longer than `max_line` bytes are answered with an Invalid Request
    /// error and skipped; replies to the ids in `streams` are streamed.
    pub fn new(max_line: usize, streams: Streams) -> io::Result<Stdio> {
        let stdout = File::from(io::stdout().as_fd().try_clone_to_owned()?);
        if rustix::fs::fstat(&stdout).is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_fifo()) {
            // Best effort: a smaller pipe only means more wake-ups.
            let _ = rustix::pipe::fcntl_setpipe_size(&stdout, PIPE_SIZE);
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new().name("winx-mcp-out".into()).spawn(move || write_loop(stdout, rx, &streams))?;
        let lines = Lines::new(Incoming::stdin()?, max_line);
        Ok(Stdio { lines, out: Some(tx) })
    }

    /// Queues an error line the reader answers a line with.
    fn answer(&self, mut line: Vec<u8>) {
        line.push(b'\n');
        if let Some(tx) = &self.out {
            let _ = tx.send(Outgoing::Bytes(line));
        }
    }
}

/// The writer thread: serialises messages into `stdout` until every sender
/// is gone.
fn write_loop(stdout: File, rx: mpsc::Receiver<Outgoing>, streams: &Streams) {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, stdout);
    // Whether anything was written since the idle hook last ran.
    let mut busy = false;
    loop {
        let item = if busy {
            match rx.recv_timeout(IDLE) {
                Ok(item) => item,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    busy = false;
                    if let Some(hook) = IDLE_HOOK.get() {
                        hook();
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match rx.recv() {
                Ok(item) => item,
                Err(_) => return,
            }
        };
        busy = true;
        match item {
            Outgoing::Message(m, done) => {
                let r = write_message(&mut w, &m, streams).and_then(|()| w.write_all(b"\n")).and_then(|()| w.flush());
                let _ = done.send(r);
            }
            Outgoing::Bytes(b) => {
                if let Err(e) = w.write_all(&b).and_then(|()| w.flush()) {
                    tracing::debug!(error = %e, "stdout write failed");
                }
            }
        }
    }
}

/// Writes one message (without its newline): serialised, or, for a reply
/// whose result is streamed, its envelope around the tool's writer.
fn write_message(w: &mut dyn Write, m: &TxJsonRpcMessage<RoleServer>, streams: &Streams) -> io::Result<()> {
    if let JsonRpcMessage::Response(r) = m {
        if let Some(write) = streams.take(&r.id) {
            w.write_all(b"{\"jsonrpc\":")?;
            serde_json::to_writer(&mut *w, &r.jsonrpc)?;
            w.write_all(b",\"id\":")?;
            serde_json::to_writer(&mut *w, &r.id)?;
            w.write_all(b",\"result\":")?;
            write(&r.result, w)?;
            return w.write_all(b"}");
        }
    }
    serde_json::to_writer(w, m).map_err(io::Error::from)
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "MCP writer is closed")
}

impl Transport<RoleServer> for Stdio {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), io::Error>> + Send + 'static {
        let (done, result) = oneshot::channel();
        // Queued now, so messages leave in the order of the calls.
        let queued = self.out.as_ref().is_some_and(|tx| tx.send(Outgoing::Message(Box::new(item), done)).is_ok());
        async move {
            if !queued {
                return Err(closed());
            }
            result.await.unwrap_or_else(|_| Err(closed()))
        }
    }

    /// The next message; each line that is not one is answered here.
    /// Cancel-safe: the line reader keeps a partial line, and a whole
    /// line is decoded and answered with no await in between.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.lines.next().await {
                Read::Line => {}
                Read::Oversized => {
                    tracing::warn!(max_line = self.lines.max_line(), "request line over the limit, skipped");
                    self.answer(oversized(self.lines.max_line()));
                    continue;
                }
                Read::Eof => return None,
                Read::Failed(e) => {
                    tracing::error!(error = %e, "reading stdin failed");
                    return None;
                }
            }
            let decoded = decode(self.lines.line());
            self.lines.clear();
            match decoded {
                Decoded::Message(m) => return Some(*m),
                Decoded::Ignored => {}
                Decoded::Answer(line) => {
                    tracing::debug!(answer = %String::from_utf8_lossy(&line), "a line that is not a request");
                    self.answer(line);
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        self.out = None;
        Ok(())
    }
}
