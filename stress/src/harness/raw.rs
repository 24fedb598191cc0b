//! A frontend driven over raw stdio lines, for what a well-behaved client
//! would not send: malformed frames, hostile sizes, bytes that are not
//! UTF-8. Every line the frontend prints comes back as it is, in order.

use std::fmt;
use std::io;
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::harness::stdio::{read_lines, LineWriter};

/// Why [`RawClient::recv`] returned no message.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecvError {
    /// No line within the timeout.
    Timeout,
    /// The frontend closed its stdout.
    Closed,
    /// A line that is not JSON (stdout carries only JSON-RPC).
    NotJson {
        /// The line, lossily decoded.
        line: String,
        /// Why it does not parse.
        error: serde_json::Error,
    },
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Timeout => f.write_str("no response line in time"),
            RecvError::Closed => f.write_str("the frontend closed its stdout"),
            RecvError::NotJson { line, error } => write!(f, "stdout carries only JSON-RPC: {line:?}: {error}"),
        }
    }
}

impl std::error::Error for RecvError {}

/// A child (`winx-release mcp`) written to and read from line by line.
pub struct RawClient {
    /// The child; killed and reaped on drop.
    pub child: Child,
    stdin: LineWriter,
    lines: mpsc::Receiver<Vec<u8>>,
}

impl RawClient {
    /// Takes over `child`, whose stdin and stdout are piped, and starts
    /// reading its stdout.
    pub fn new(mut child: Child) -> io::Result<RawClient> {
        let not_piped = || io::Error::new(io::ErrorKind::InvalidInput, "stdin and stdout must be piped");
        let stdin = LineWriter::new(child.stdin.take().ok_or_else(not_piped)?);
        let stdout = child.stdout.take().ok_or_else(not_piped)?;
        let (tx, lines) = mpsc::channel();
        read_lines(
            "raw-mcp-reader".to_owned(),
            stdout,
            move |line| {
                let _ = tx.send(line.to_vec());
            },
            || {},
        )?;
        Ok(RawClient { child, stdin, lines })
    }

    /// Writes `bytes` and a newline.
    pub fn send_raw(&self, bytes: &[u8]) -> io::Result<()> {
        self.stdin.send_line(bytes.to_vec())
    }

    /// Writes one JSON-RPC message and a newline.
    pub fn send(&self, msg: &Value) -> io::Result<()> {
        self.stdin.send_line(serde_json::to_vec(msg)?)
    }

    /// The next line of stdout, parsed as JSON.
    pub fn recv(&self, timeout: Duration) -> Result<Value, RecvError> {
        let line = self.lines.recv_timeout(timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => RecvError::Timeout,
            mpsc::RecvTimeoutError::Disconnected => RecvError::Closed,
        })?;
        serde_json::from_slice(&line)
            .map_err(|error| RecvError::NotJson { line: String::from_utf8_lossy(&line).trim_end().to_owned(), error })
    }

    /// The child's stdin, to write to from another thread.
    pub fn stdin_writer(&self) -> LineWriter {
        self.stdin.clone()
    }

    /// Closes stdin (EOF for the frontend).
    pub fn close_stdin(&self) {
        self.stdin.close();
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
