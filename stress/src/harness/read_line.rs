//! Reading a child's first line (a guardian's ready line, say) within a
//! timeout.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

/// Why no line came.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadLineError {
    /// The stream ended before a line.
    Eof,
    /// Reading failed.
    Io(std::io::Error),
    /// No line within the timeout.
    Timeout,
}

impl fmt::Display for ReadLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadLineError::Eof => f.write_str("EOF before a line"),
            ReadLineError::Io(e) => write!(f, "{e}"),
            ReadLineError::Timeout => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for ReadLineError {}

/// Reads one line from `r` within `timeout`, newline included. A thread
/// reads it, then drains `r` until its end, so that the writer never
/// blocks on a full pipe.
pub fn read_line_timeout<R: Read + Send + 'static>(r: R, timeout: Duration) -> Result<String, ReadLineError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(r);
        let mut line = String::new();
        let res = reader.read_line(&mut line).map(|_| line);
        let _ = tx.send(res);
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(line)) if !line.is_empty() => Ok(line),
        Ok(Ok(_)) => Err(ReadLineError::Eof),
        Ok(Err(e)) => Err(ReadLineError::Io(e)),
        Err(_) => Err(ReadLineError::Timeout),
    }
}
