//! The rehash worker: reads of several files in flight on one pipeline,
//! each file hashed chunk by chunk as its reads complete.
//!
//! A worker keeps up to `depth` files open for reading at once, one read
//! in flight per file, each into its own buffer. Buffers come from a
//! process-wide pool and go back to it, so repeated rehashes reuse them.
//!
//! # References
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//!   (`IORING_OP_READ`)
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::ring::{Op, Pipeline, RingConfig, Shared};

/// Size of one read.
pub(crate) const CHUNK: usize = 256 * 1024;

/// Bytes of reads in flight per worker at most (besides the first): the
/// data of a completed read should still be in the core's L2 cache when it
/// is hashed. Many small files fit at once; large ones go two by two.
const IN_FLIGHT_BYTES: u64 = 512 * 1024;

/// Buffers kept in the pool at most.
const POOL_MAX: usize = 16;

static POOL: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());

fn take_buffer() -> Box<[u8]> {
    POOL.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_else(|| vec![0u8; CHUNK].into_boxed_slice())
}

fn give_buffer(b: Box<[u8]>) {
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < POOL_MAX {
        pool.push(b);
    }
}

/// One file to hash.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FileJob {
    /// An open descriptor, valid for the whole run.
    pub fd: RawFd,
    /// Stop after `limit + 1` bytes: more than that cannot match.
    pub limit: Option<u64>,
    /// The size the file is expected to have (its pin, or `fstat`): reads
    /// are sized to end there, then one 1-byte read checks for the end.
    pub size_hint: u64,
    /// Bytes of content to keep from the start.
    pub keep: usize,
}

/// A file's digest, its length as read, and its first bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hashed {
    pub sha256: [u8; 32],
    pub len: u64,
    pub head: Vec<u8>,
}

struct Active {
    job: usize,
    hasher: Sha256,
    off: u64,
    head: Vec<u8>,
}

/// A pipeline and its read buffers. The pipeline is drained before the
/// buffers go back to the pool (or are leaked, if the ring failed with reads
/// in flight).
pub(crate) struct Reader {
    pipe: Pipeline,
    bufs: Vec<Box<[u8]>>,
}

impl Reader {
    /// A reader with `depth` buffers on `pipe` (at most as many as the
    /// pipeline has slots).
    pub(crate) fn new(pipe: Pipeline, depth: usize) -> Reader {
        let depth = depth.clamp(1, pipe.capacity());
        Reader { pipe, bufs: (0..depth).map(|_| take_buffer()).collect() }
    }

    /// Hashes the jobs that `next` hands out, reporting each to `out`.
    pub(crate) fn run(
        &mut self,
        jobs: &[FileJob],
        next: &dyn Fn() -> Option<usize>,
        out: &mut dyn FnMut(usize, io::Result<Hashed>),
    ) {
        let depth = self.bufs.len();
        let mut active: Vec<Option<Active>> = (0..depth).map(|_| None).collect();
        let mut live = 0usize;
        let mut idle: Vec<usize> = (0..depth).rev().collect();
        let mut exhausted = false;
        let mut done: Vec<(usize, i32)> = Vec::with_capacity(depth);
        let mut pending = vec![0u64; depth];
        let mut in_flight = 0u64;
        loop {
            while let (false, Some(&b)) = (exhausted, idle.last()) {
                if live > 0 && in_flight >= IN_FLIGHT_BYTES {
                    break;
                }
                let Some(job) = next() else {
                    exhausted = true;
                    break;
                };
                idle.pop();
                let keep = jobs[job].keep.min(CHUNK * 4);
                active[b] = Some(Active { job, hasher: Sha256::new(), off: 0, head: Vec::with_capacity(keep) });
                pending[b] = self.issue(b, &jobs[job], 0);
                in_flight += pending[b];
                live += 1;
            }
            if live == 0 {
                return;
            }
            done.clear();
            self.pipe.reap(1, &mut |tag, res, _| done.push((tag as usize, res)));
            for &(b, res) in &done {
                in_flight -= std::mem::take(&mut pending[b]);
                let Some(a) = active[b].as_mut() else { continue };
                let job = jobs[a.job];
                if res < 0 {
                    out(a.job, Err(io::Error::from_raw_os_error(-res)));
                    active[b] = None;
                    idle.push(b);
                    live -= 1;
                    continue;
                }
                let n = res as usize;
                let finished = if n == 0 {
                    true
                } else {
                    let data = &self.bufs[b][..n];
                    a.hasher.update(data);
                    if a.head.len() < job.keep {
                        let take = (job.keep - a.head.len()).min(n);
                        a.head.extend_from_slice(&data[..take]);
                    }
                    a.off += n as u64;
                    job.limit.is_some_and(|l| a.off > l)
                };
                if finished {
                    let a = active[b].take().expect("active");
                    out(a.job, Ok(Hashed { sha256: a.hasher.finalize().into(), len: a.off, head: a.head }));
                    idle.push(b);
                    live -= 1;
                } else {
                    let off = a.off;
                    pending[b] = self.issue(b, &job, off);
                    in_flight += pending[b];
                }
            }
        }
    }

    /// Reads the next chunk of `job` at `off` into buffer `b`.
    ///
    /// Reads stop at the expected size rather than asking for a whole
    /// chunk: a read that comes back short of its length on a regular file
    /// makes io_uring retry the rest on an io-wq worker (an extra thread
    /// hop per small file). At the expected size one byte is asked for, to
    /// see the end (or a file that grew).
    fn issue(&mut self, b: usize, job: &FileJob, off: u64) -> u64 {
        let mut len = if off < job.size_hint { (job.size_hint - off).min(CHUNK as u64) } else { 1 };
        if off > job.size_hint {
            // It grew: read on in whole chunks.
            len = CHUNK as u64;
        }
        if let Some(l) = job.limit {
            len = len.min((l + 1).saturating_sub(off)).max(1);
        }
        let buf = self.bufs[b].as_mut_ptr();
        // One read per buffer at a time, and the pipeline has at least as
        // many slots as the reader has buffers (see `Reader::new`).
        assert!(self.pipe.has_room(), "rehash pipeline smaller than its buffer count");
        // SAFETY: buffer `b` is owned by this reader, is not touched until
        // this read's completion is delivered, and outlives the pipeline's
        // drain (see `Drop`); `job.fd` is open for the whole run (the
        // caller's contract).
        unsafe { self.pipe.push(Op::Read { fd: job.fd, buf, len: len as u32, offset: off }, b as u64) };
        len
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.pipe.drain(&mut |_, _, _| {});
        let bufs = std::mem::take(&mut self.bufs);
        if self.pipe.poisoned() {
            // The kernel may still write into them.
            std::mem::forget(bufs);
        } else {
            bufs.into_iter().for_each(give_buffer);
        }
    }
}

/// Opens each of `names` in `dir` with
/// `O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_NOCTTY|O_CLOEXEC`, as one batch on a
/// ring when `ring`, else with `openat(2)`. Results are in `names`' order.
pub(crate) fn open_files_at(dir: BorrowedFd<'_>, names: &[&CStr], ring: bool) -> Vec<io::Result<OwnedFd>> {
    const FLAGS: i32 = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let mut opened: Vec<Option<io::Result<OwnedFd>>> = (0..names.len()).map(|_| None).collect();
    let cfg = RingConfig { entries: (names.len().next_power_of_two() as u32).clamp(2, 128), ..RingConfig::default() };
    let mut pipe = if ring { Pipeline::new(&cfg, Shared::new()) } else { Pipeline::synchronous(&cfg, Shared::new()) };
    let mut record = |tag: u64, res: i32, _: &libc::statx| {
        opened[tag as usize] = Some(if res >= 0 {
            // SAFETY: a successful openat returned a new descriptor nothing
            // else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(res) })
        } else {
            Err(io::Error::from_raw_os_error(-res))
        });
    };
    for (i, name) in names.iter().enumerate() {
        if !pipe.has_room() {
            pipe.make_room(&mut record);
        }
        // SAFETY: the names and `dir` are borrowed for the whole call, past
        // the drain below.
        unsafe { pipe.push(Op::OpenAt { dirfd: dir.as_raw_fd(), path: name.as_ptr(), flags: FLAGS }, i as u64) };
    }
    pipe.drain(&mut record);
    drop(pipe);
    opened.into_iter().map(|o| o.unwrap_or_else(|| Err(io::Error::other("open not completed")))).collect()
}
