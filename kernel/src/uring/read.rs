//! The rehash worker: reads of several files in flight on one pipeline,
//! each file hashed chunk by chunk as its reads complete.
//!
//! A worker keeps up to `depth` files open for reading at once, one read
//! in flight per file, each into its own buffer. Buffers come from a
//! process-wide pool and go back to it, so repeated rehashes reuse them; a
//! slot takes its buffer when it first reads, so a worker that never has
//! `depth` files in flight (large files go two by two, see
//! `IN_FLIGHT_BYTES`) never holds `depth` buffers.
//!
//! # References
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//!   (`IORING_OP_READ`)
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::hash::{Fingerprint, Head, Keep};

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
pub struct FileJob {
    /// An open descriptor, valid for the whole run.
    pub fd: RawFd,
    /// Stop after `limit + 1` bytes: more than that cannot match.
    pub limit: Option<u64>,
    /// The size the file is expected to have (its pin, or `fstat`): reads
    /// are sized to end there, then one 1-byte read checks for the end.
    pub size_hint: u64,
    /// What to keep of the first bytes.
    pub keep: Keep,
    /// Also take the BLAKE3 fingerprint of the bytes.
    pub fingerprint: bool,
}

/// A file's digest, its length as read, and its first bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hashed {
    /// SHA-256 of every byte read.
    pub sha256: [u8; 32],
    /// How many bytes were read.
    pub len: u64,
    /// The first bytes, as the job's `keep` asked.
    pub head: Head,
    /// The BLAKE3 fingerprint, when the job asked for it.
    pub fingerprint: Option<Fingerprint>,
}

struct Active {
    job: usize,
    hasher: Sha256,
    fingerprint: Option<Box<blake3::Hasher>>,
    off: u64,
    head: Head,
}

/// A pipeline and its read buffers (one slot per file in flight, filled
/// on its first read). The pipeline is drained before the buffers go back
/// to the pool (or are leaked, if the ring failed with reads in flight).
pub struct Reader {
    pipe: Pipeline,
    bufs: Vec<Option<Box<[u8]>>>,
}

impl Reader {
    /// A reader with `depth` buffer slots on `pipe` (at most as many as
    /// the pipeline has slots).
    pub fn new(pipe: Pipeline, depth: usize) -> Reader {
        let depth = depth.clamp(1, pipe.capacity());
        Reader { pipe, bufs: (0..depth).map(|_| None).collect() }
    }

    /// Hashes the jobs that `next` hands out, reporting each to `out`.
    ///
    /// Once `stop` is set (looked at after every completion), no read is
    /// issued any more: every file being read and every job `next` still
    /// hands out is reported as [`crate::hash::stopped`], and the reads in
    /// flight are reaped before this returns.
    pub fn run(
        &mut self,
        jobs: &[FileJob],
        next: &dyn Fn() -> Option<usize>,
        stop: &AtomicBool,
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
            if !exhausted && stop.load(Ordering::Relaxed) {
                // Every job not yet handed out ends now; the files being
                // read end as their reads complete (below).
                exhausted = true;
                while let Some(job) = next() {
                    out(job, Err(crate::hash::stopped()));
                }
            }
            while let (false, Some(&b)) = (exhausted, idle.last()) {
                if live > 0 && in_flight >= IN_FLIGHT_BYTES {
                    break;
                }
                let Some(job) = next() else {
                    exhausted = true;
                    break;
                };
                idle.pop();
                active[b] = Some(Active {
                    job,
                    hasher: Sha256::new(),
                    fingerprint: jobs[job].fingerprint.then(|| Box::new(blake3::Hasher::new())),
                    off: 0,
                    head: Head::sized(jobs[job].keep, jobs[job].size_hint),
                });
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
                    if self.pipe.poisoned() {
                        // The ring was abandoned with this read in flight:
                        // the kernel may still write the buffer. Leak it,
                        // never reuse it; this slot takes another one.
                        std::mem::forget(self.bufs[b].take());
                    }
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
                    let data = &self.bufs[b].as_deref().expect("a slot with a read has its buffer")[..n];
                    a.hasher.update(data);
                    if let Some(f) = a.fingerprint.as_mut() {
                        f.update(data);
                    }
                    a.head.push(data);
                    a.off += n as u64;
                    job.limit.is_some_and(|l| a.off > l)
                };
                if !finished && stop.load(Ordering::Relaxed) {
                    let a = active[b].take().expect("active");
                    out(a.job, Err(crate::hash::stopped()));
                    idle.push(b);
                    live -= 1;
                } else if finished {
                    let a = active[b].take().expect("active");
                    out(
                        a.job,
                        Ok(Hashed {
                            sha256: a.hasher.finalize().into(),
                            len: a.off,
                            head: a.head,
                            fingerprint: a.fingerprint.map(|f| *f.finalize().as_bytes()),
                        }),
                    );
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
        let buf = self.bufs[b].get_or_insert_with(take_buffer).as_mut_ptr();
        // One read per buffer at a time, and the pipeline has at least as
        // many slots as the reader has buffers (see `Reader::new`).
        assert!(self.pipe.has_room(), "rehash pipeline smaller than its buffer count");
        // SAFETY: buffer `b` is owned by this reader and is not touched
        // until this read's completion is delivered. It then stays allocated
        // as long as the kernel may write it: when the completion is a
        // failure of a poisoned pipeline (the ring abandoned with the read in
        // flight), `run` leaks the buffer instead of reusing it, and `Drop`
        // leaks every buffer of a poisoned pipeline after its drain.
        // `job.fd` is open for the whole run (the caller's contract); a read
        // abandoned by the ring may still use it afterwards, which reads a
        // file the caller owns into leaked memory and nothing else.
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
            bufs.into_iter().flatten().for_each(give_buffer);
        }
    }
}

/// Opens each of `names` in `dir` with
/// `O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_NOCTTY|O_CLOEXEC`, as one batch on a
/// ring when `ring`, else with `openat(2)`. Results are in `names`' order.
///
/// The ring is handed copies of the names and a duplicate of `dir` that
/// this function owns: if the ring is abandoned with opens in flight
/// (`Pipeline::poisoned`), they are leaked, never freed, so the kernel
/// never resolves a freed name or a reused descriptor number.
pub fn open_files_at(dir: BorrowedFd<'_>, names: &[&CStr], ring: bool) -> Vec<io::Result<OwnedFd>> {
    const FLAGS: i32 = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let mut opened: Vec<Option<io::Result<OwnedFd>>> = (0..names.len()).map(|_| None).collect();
    let dir = match dir.try_clone_to_owned() {
        Ok(d) => d,
        Err(e) => return names.iter().map(|_| Err(io::Error::new(e.kind(), e.to_string()))).collect(),
    };
    let owned: Vec<CString> = names.iter().map(|n| CString::from(*n)).collect();
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
    for (i, name) in owned.iter().enumerate() {
        if !pipe.has_room() {
            pipe.make_room(&mut record);
        }
        // SAFETY: `owned` and `dir` belong to this function and outlive the
        // drain below; if the pipeline is poisoned by then, both are leaked
        // (never freed) because the kernel may still use them.
        unsafe { pipe.push(Op::OpenAt { dirfd: dir.as_raw_fd(), path: name.as_ptr(), flags: FLAGS }, i as u64) };
    }
    pipe.drain(&mut record);
    if pipe.poisoned() {
        std::mem::forget(owned);
        std::mem::forget(dir);
    }
    drop(pipe);
    opened.into_iter().map(|o| o.unwrap_or_else(|| Err(io::Error::other("open not completed")))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The ring fails for good (`io_uring_enter` number 2 errors after
    /// submitting) with reads in flight, and from then on the simulated
    /// kernel writes a canary into every abandoned buffer before each later
    /// step. Every file is either reported as failed or hashed exactly: no
    /// later read or hash ever sees a buffer the kernel may still write,
    /// and no such buffer returns to the pool.
    #[test]
    fn abandoned_read_buffers_are_leaked_not_reused() {
        const CANARY: u8 = 0xC5;
        let dir = tempfile::tempdir().unwrap();
        let sizes = [3 * CHUNK + 17, CHUNK, 5 * CHUNK, 2 * CHUNK + 1, 4 * CHUNK, 7, CHUNK * 2, 3 * CHUNK];
        let mut files = Vec::new();
        let mut expected = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let body: Vec<u8> = (0..n).map(|j| (i as u8).wrapping_mul(31) ^ (j as u8) | 1).collect();
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, &body).unwrap();
            expected.push(<[u8; 32]>::from(Sha256::digest(&body)));
            files.push(std::fs::File::open(&p).unwrap());
        }
        let jobs: Vec<FileJob> = files
            .iter()
            .zip(&sizes)
            .map(|(f, &n)| FileJob {
                fd: f.as_raw_fd(),
                limit: None,
                size_hint: n as u64,
                keep: Keep::Nothing,
                fingerprint: false,
            })
            .collect();
        let shared = Shared::with_fatal_at(2, CANARY);
        let pipe = Pipeline::new(&RingConfig::default(), shared.clone());
        if !pipe.is_ring() {
            eprintln!("skipped: io_uring unavailable here");
            return;
        }
        let cursor = std::sync::atomic::AtomicUsize::new(0);
        let next = || {
            let k = cursor.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (k < jobs.len()).then_some(k)
        };
        let mut reader = Reader::new(pipe, 4);
        // Every slot filled now (a slot takes its buffer on its first read
        // otherwise), so that the reads can be told to use these.
        reader.bufs.iter_mut().for_each(|b| *b = Some(take_buffer()));
        let before: Vec<usize> = reader.bufs.iter().flatten().map(|b| b.as_ptr() as usize).collect();
        let mut got: Vec<Option<io::Result<Hashed>>> = (0..jobs.len()).map(|_| None).collect();
        reader.run(&jobs, &next, &AtomicBool::new(false), &mut |i, r| got[i] = Some(r));
        assert!(reader.pipe.poisoned(), "the simulated failure was not reached");
        let abandoned: Vec<usize> = shared.late.lock().unwrap().0.iter().map(|&(a, _)| a).collect();
        assert!(!abandoned.is_empty(), "no read was in flight at the failure");
        let (mut failed, mut hashed) = (0, 0);
        for (i, r) in got.into_iter().enumerate() {
            match r.expect("every job reported") {
                Ok(h) => {
                    assert_eq!(h.sha256, expected[i], "file {i} hashed wrong: a buffer the kernel writes was reused");
                    assert_eq!(h.len, sizes[i] as u64);
                    hashed += 1;
                }
                Err(_) => failed += 1,
            }
        }
        assert!(failed > 0 && hashed > 0, "failed {failed}, hashed {hashed}");
        // The abandoned buffers are not among the reader's buffers any more.
        let after: Vec<usize> = reader.bufs.iter().flatten().map(|b| b.as_ptr() as usize).collect();
        for a in &abandoned {
            assert!(before.iter().any(|b| b == a), "an abandoned read used a foreign buffer");
            assert!(!after.contains(a), "abandoned buffer {a:#x} still in use");
        }
        drop(reader);
        let pool: Vec<usize> = POOL.lock().unwrap().iter().map(|b| b.as_ptr() as usize).collect();
        for a in &abandoned {
            assert!(!pool.contains(a), "abandoned buffer {a:#x} went back to the pool");
        }
    }
}
