//! The threaded scan backend: the io_uring backend's parallel walkers and
//! in-order replay, on plain system calls.
//!
//! Each worker runs its `openat`/`statx` as ordinary system calls (the
//! pipeline's synchronous mode), so it needs no io_uring and pays no io-wq
//! hand-off; the parallelism is the worker threads'. It is the third
//! contender `auto` measures against (see `docs/IO_URING.md`).
//!
//! # References
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use super::uring::{run, UringConfig};
use super::{BackendKind, ScanBackend, ScanReport, ScanRequest};

/// Parallel walkers on plain system calls.
#[derive(Clone, Debug, Default)]
pub struct ThreadsBackend {
    config: UringConfig,
}

impl ThreadsBackend {
    /// A backend with `threads` workers (the calling thread included; 0
    /// uses the available parallelism).
    pub fn new(threads: usize) -> ThreadsBackend {
        ThreadsBackend { config: UringConfig { threads, ..UringConfig::default() } }
    }
}

impl ScanBackend for ThreadsBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Threads
    }

    fn scan(&self, req: &ScanRequest<'_>) -> ScanReport {
        run(&self.config, true, req)
    }
}
