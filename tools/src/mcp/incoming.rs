//! Standard input in large chunks: one reader thread, and an
//! [`AsyncBufRead`] that hands its chunks to the line reader (`lines.rs`).
//!
//! `tokio::io::stdin()` runs every read as a task on tokio's blocking pool,
//! each as large as the caller's buffer; rmcp's reader asked for 8 KiB at
//! a time, so a 500 KB `EditFiles` request took some 60 blocking-pool
//! round trips, each two context switches and a task: under the
//! 16-session stress the frontends switched about 6,500 times a second,
//! more than all other processes together.
//!
//! Here one thread reads standard input `CHUNK` bytes at a time (whatever
//! the pipe holds) and sends each chunk through a bounded channel; the line
//! reader looks for line ends in the chunks themselves. When standard input is a
//! pipe it is also asked to hold 1 MiB (best effort, as for standard
//! output), so a client writes a large request with fewer wake-ups.
//!
//! End of input and read errors reach the reader as they did before: the
//! chunks already read first, then end of file (or the error). The thread
//! never blocks the process's exit: it is not joined, and a read it is
//! blocked in ends with the process.
//!
//! # References
//! - [`read(2)`](https://man7.org/linux/man-pages/man2/read.2.html)
//! - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html)
//!   (`F_SETPIPE_SZ`)

use std::fs::File;
use std::io::{self, Read};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// The most one `read(2)` of standard input asks for.
const CHUNK: usize = 1024 * 1024;

/// Chunks read ahead of the consumer (at most `DEPTH` × [`CHUNK`] bytes).
const DEPTH: usize = 4;

/// The pipe size asked for when standard input is a pipe.
const PIPE_SIZE: usize = 1024 * 1024;

/// Standard input as an [`AsyncRead`] fed by a reader thread.
pub struct Incoming {
    rx: mpsc::Receiver<io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
    done: bool,
}

impl Incoming {
    /// Starts the reader thread on a duplicate of this process's standard
    /// input.
    pub fn stdin() -> io::Result<Incoming> {
        use std::os::fd::AsFd;
        let file = File::from(io::stdin().as_fd().try_clone_to_owned()?);
        if rustix::fs::fstat(&file).is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_fifo()) {
            // Best effort: a smaller pipe only means more wake-ups.
            let _ = rustix::pipe::fcntl_setpipe_size(&file, PIPE_SIZE);
        }
        Incoming::from_reader(file, "winx-mcp-in")
    }

    /// Starts a thread named `name` reading `source` until its end.
    pub fn from_reader(source: impl Read + Send + 'static, name: &str) -> io::Result<Incoming> {
        let (tx, rx) = mpsc::channel(DEPTH);
        std::thread::Builder::new().name(name.into()).spawn(move || read_loop(source, &tx))?;
        Ok(Incoming { rx, chunk: Vec::new(), at: 0, done: false })
    }
}

/// Reads `source` into chunks until its end, an error, or until nobody
/// receives.
fn read_loop(mut source: impl Read, tx: &mpsc::Sender<io::Result<Vec<u8>>>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let item = match source.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => Ok(buf[..n].to_vec()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        if tx.blocking_send(item).is_err() || failed {
            return;
        }
    }
}

impl AsyncBufRead for Incoming {
    /// The rest of the current chunk, or the next one (empty at the end).
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        while this.at == this.chunk.len() {
            if this.done {
                return Poll::Ready(Ok(&[]));
            }
            match this.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => (this.chunk, this.at) = (chunk, 0),
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(None) => this.done = true,
            }
        }
        Poll::Ready(Ok(&this.chunk[this.at..]))
    }

    fn consume(mut self: Pin<&mut Self>, amt: usize) {
        self.at = (self.at + amt).min(self.chunk.len());
    }
}

impl AsyncRead for Incoming {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let n = match self.as_mut().poll_fill_buf(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Ready(Ok(bytes)) => {
                let n = buf.remaining().min(bytes.len());
                buf.put_slice(&bytes[..n]);
                n
            }
        };
        self.consume(n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A source that hands out its bytes in the given pieces, then fails
    /// or ends.
    struct Pieces(Vec<Vec<u8>>, Option<io::ErrorKind>);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return match self.1.take() {
                    Some(kind) => Err(io::Error::new(kind, "source failed")),
                    None => Ok(0),
                };
            }
            let piece = &mut self.0[0];
            let n = piece.len().min(buf.len());
            buf[..n].copy_from_slice(&piece[..n]);
            piece.drain(..n);
            if piece.is_empty() {
                self.0.remove(0);
            }
            Ok(n)
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().unwrap()
    }

    #[test]
    fn every_byte_arrives_in_order_through_small_reads_then_end_of_file() {
        let bytes: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i * 7 % 251) as u8).collect();
        // Pieces of odd sizes, one larger than a chunk.
        let pieces = vec![bytes[..5].to_vec(), bytes[5..CHUNK + 9].to_vec(), bytes[CHUNK + 9..].to_vec()];
        let mut inc = Incoming::from_reader(Pieces(pieces, None), "test-in").unwrap();
        let got = runtime().block_on(async {
            let mut got = Vec::new();
            let mut small = [0u8; 8192];
            loop {
                let n = inc.read(&mut small).await.unwrap();
                if n == 0 {
                    break got;
                }
                got.extend_from_slice(&small[..n]);
            }
        });
        assert_eq!(got.len(), bytes.len());
        assert!(got == bytes, "bytes changed or reordered");
        // End of file stays end of file.
        assert_eq!(runtime().block_on(inc.read(&mut [0u8; 4])).unwrap(), 0);
    }

    #[test]
    fn a_read_error_arrives_after_the_bytes_read_before_it() {
        let src = Pieces(vec![b"{\"a\":1}\n".to_vec()], Some(io::ErrorKind::BrokenPipe));
        let mut inc = Incoming::from_reader(src, "test-in").unwrap();
        runtime().block_on(async {
            let mut buf = Vec::new();
            let err = inc.read_to_end(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
            assert_eq!(buf, b"{\"a\":1}\n");
        });
    }
}
