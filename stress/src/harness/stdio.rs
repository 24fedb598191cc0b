//! Newline-delimited messages over a child's stdio: its stdin, shared by
//! the threads that write to it, and a thread that reads its stdout line
//! by line.

use std::io::{self, BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout};
use std::sync::{Arc, Mutex};

use winx_release_kernel::sys::lock;

/// A child's stdin, shared between threads, closed once.
#[derive(Clone)]
pub struct LineWriter(Arc<Mutex<Option<ChildStdin>>>);

impl LineWriter {
    /// Takes over `stdin`.
    pub fn new(stdin: ChildStdin) -> LineWriter {
        LineWriter(Arc::new(Mutex::new(Some(stdin))))
    }

    /// Writes `line` and a newline in one write, and flushes. Fails with
    /// `NotConnected` once [`LineWriter::close`] was called.
    pub fn send_line(&self, mut line: Vec<u8>) -> io::Result<()> {
        line.push(b'\n');
        let mut guard = lock(&self.0);
        let stdin = guard.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "closed"))?;
        stdin.write_all(&line).and_then(|()| stdin.flush())
    }

    /// Writes `bytes` as they are (no newline), and flushes: part of a line
    /// a client is still writing.
    pub fn write_part(&self, bytes: &[u8]) -> io::Result<()> {
        let mut guard = lock(&self.0);
        let stdin = guard.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "closed"))?;
        stdin.write_all(bytes).and_then(|()| stdin.flush())
    }

    /// Closes stdin: the child reads EOF.
    pub fn close(&self) {
        lock(&self.0).take();
    }
}

/// Starts a thread named `name` that hands `each` every line of `stdout`,
/// its newline included, until the end of the stream or an error, and then
/// calls `at_end`.
pub fn read_lines(
    name: String,
    stdout: ChildStdout,
    mut each: impl FnMut(&[u8]) + Send + 'static,
    at_end: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new().name(name).spawn(move || {
        let mut reader = BufReader::with_capacity(1 << 16, stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => each(&line),
            }
        }
        at_end();
    })?;
    Ok(())
}
