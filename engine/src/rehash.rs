//! The rehash pipeline: SHA-256 of many opened files at once.
//!
//! One pipeline serves the two places that hash many helpers' bytes at
//! once: `ReadFiles` (one pass that both hashes and keeps the content it
//! returns) and the release's pre-release check. (The post-quarantine
//! recheck reads each captured object on its own, with
//! `hash::fingerprint_fd`.) Files are read with batched io_uring `read`s (several files in
//! flight per worker, one ring per worker thread, buffers reused across
//! calls), hashed with `sha2` (which detects SHA-NI at run time) on worker
//! threads: the calling thread and, for enough bytes, one more per core.
//! Where io_uring is unavailable, or refuses a read, the same workers use
//! `pread(2)`.
//!
//! A job may carry a `limit` (the pinned size): reading stops after
//! `limit + 1` bytes, since a longer file cannot match, so a grown
//! replacement is never read to its end.
//!
//! [`open_and_hash_at`] adds the opening: `openat(O_NOFOLLOW|O_NONBLOCK)`
//! of names in one directory, batched on the ring, then each opened file's
//! identity, and only a file that is the pinned one is hashed.
//!
//! # Hash passes of one release
//!
//! A helper's bytes are hashed once by `ReadFiles` (the revision and the
//! token's digest come from that one read), then read twice by a release:
//! once by the pre-release check (every target, beside the scan and before
//! anything moves: "all targets are checked before removal begins"), which
//! takes SHA-256 against the pin and, from the same reads, a BLAKE3
//! fingerprint ([`RehashOptions::fingerprint`]); and once after the move
//! into quarantine ("its pinned physical identity and content are
//! rechecked"), which compares the captured bytes' BLAKE3 with that
//! fingerprint (`release/check.rs` says why that is a content recheck).
//! Neither pass can be dropped: the recheck alone would start moving
//! targets before all were checked, and the check alone would leave the
//! window between check and move unverified.
//!
//! # References
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//!   (`IORING_OP_OPENAT`, `IORING_OP_READ`)
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use winx_release_kernel::hash::{Fingerprint, Head, Keep};
// The synchronous reads beside the pipeline, for this workspace's tests and
// benches, which compare the two.
pub use winx_release_kernel::hash::{
    fingerprint_fd, read_and_hash, sha256_fd, sha256_fd_with, stopped, ReadBytes, HASH_CHUNK,
};
use winx_release_kernel::identity::{Identity, Pin};
use winx_release_kernel::uring::read::{FileJob, Reader};
use winx_release_kernel::uring::ring::{Pipeline, RingConfig, Shared};

/// Which engine reads the files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RehashBackend {
    /// io_uring when available and the batch is big enough to pay for it
    /// (see [`plan`]), else `pread(2)` on the calling thread.
    #[default]
    Auto,
    /// io_uring reads (falling back to `pread(2)` where io_uring is
    /// unavailable).
    Uring,
    /// `pread(2)`.
    Sync,
}

/// Knobs of one rehash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RehashOptions {
    /// The engine.
    pub backend: RehashBackend,
    /// Worker threads, the calling thread included; 0 lets [`plan`] decide.
    pub threads: usize,
    /// Also take each file's BLAKE3 fingerprint from the same reads
    /// ([`Rehashed::fingerprint`]).
    pub fingerprint: bool,
}

/// One file to hash: an open descriptor, read from offset 0 (the file
/// offset is not used, so the same descriptor can be hashed again).
#[derive(Clone, Copy, Debug)]
pub struct HashJob<'a> {
    /// The file.
    pub fd: BorrowedFd<'a>,
    /// Stop after `limit + 1` bytes (the pinned size: more cannot match);
    /// `None` reads to the end.
    pub limit: Option<u64>,
    /// What to keep of the first bytes (for `ReadFiles`).
    pub keep: Keep,
}

impl<'a> HashJob<'a> {
    /// Hash all of `fd`, keep nothing.
    pub fn new(fd: BorrowedFd<'a>) -> Self {
        HashJob { fd, limit: None, keep: Keep::Nothing }
    }

    /// Hash `fd` against a pinned size: stop after `size + 1` bytes.
    pub fn pinned(fd: BorrowedFd<'a>, size: u64) -> Self {
        HashJob { fd, limit: Some(size), keep: Keep::Nothing }
    }
}

/// A file's digest, its length as read, and its first bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rehashed {
    /// SHA-256 of the bytes read.
    pub sha256: [u8; 32],
    /// Bytes read: the file's length, or `limit + 1` when it is longer than
    /// the job's limit.
    pub len: u64,
    /// The first bytes, as the job's `keep` said.
    pub head: Head,
    /// BLAKE3 of the same bytes, when [`RehashOptions::fingerprint`] asked
    /// for it.
    pub fingerprint: Option<Fingerprint>,
}

impl Rehashed {
    /// Whether these are exactly the pinned bytes.
    pub fn matches(&self, pin: &Pin) -> bool {
        self.sha256 == pin.sha256 && self.len == pin.size
    }
}

/// How a batch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Reads go to io_uring.
    pub uring: bool,
    /// Worker threads, the calling thread included.
    pub threads: usize,
}

/// Below this many bytes in all, a batch runs with `pread(2)` on the
/// calling thread: setting up rings and threads would cost more than it
/// saves.
pub const SMALL_BATCH_BYTES: u64 = 256 * 1024;

/// Bytes per extra worker thread: a thread is only worth starting for
/// about this much hashing (SHA-NI hashes ~1.5 GB/s per core).
pub const BYTES_PER_THREAD: u64 = 1024 * 1024;

/// Files each worker keeps in flight.
const DEPTH: usize = 8;

/// Decides how a batch of `jobs` files, `bytes` bytes in all, runs.
///
/// `Auto`: a batch under [`SMALL_BATCH_BYTES`] runs on the calling thread
/// with `pread(2)`; a larger one on io_uring (when available) with one
/// thread per [`BYTES_PER_THREAD`], at most one per core and one per file.
/// `Uring`/`Sync` force the engine; `threads` forces the thread count.
pub fn plan(jobs: usize, bytes: u64, opts: &RehashOptions) -> Plan {
    let cores = winx_release_kernel::sys::cores();
    let auto_threads = usize::try_from(bytes / BYTES_PER_THREAD).unwrap_or(usize::MAX).clamp(1, cores.min(jobs.max(1)));
    let available = || winx_release_kernel::uring::probe().is_ok();
    let (uring, threads) = match opts.backend {
        RehashBackend::Sync => (false, auto_threads),
        RehashBackend::Uring => (available(), auto_threads),
        RehashBackend::Auto if bytes < SMALL_BATCH_BYTES => (false, 1),
        RehashBackend::Auto => (available(), auto_threads),
    };
    let threads = if opts.threads > 0 { opts.threads } else { threads };
    Plan { uring, threads: threads.min(jobs.max(1)) }
}

fn ring_config() -> RingConfig {
    RingConfig { entries: DEPTH as u32, ..RingConfig::default() }
}

/// Hashes every job's file, in parallel; results are in `jobs`' order.
///
/// An error reading a file is that file's result; the others go on.
pub fn hash_fds(jobs: &[HashJob<'_>], opts: &RehashOptions) -> Vec<io::Result<Rehashed>> {
    let results: Mutex<Vec<Option<io::Result<Rehashed>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    hash_fds_each(jobs, opts, &|i, r| {
        results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(io::Error::other("rehash worker ended early"))))
        .collect()
}

/// Like [`hash_fds`], handing each file's result to `done` as soon as it
/// is ready, with the file's index in `jobs`: on the worker thread that
/// hashed it, in no particular order. Returns once every job is done.
pub fn hash_fds_each(jobs: &[HashJob<'_>], opts: &RehashOptions, done: &(dyn Fn(usize, io::Result<Rehashed>) + Sync)) {
    hash_fds_each_until(jobs, opts, &AtomicBool::new(false), done);
}

/// Like [`hash_fds_each`], giving up once `stop` is set: no read is issued
/// after it (each worker looks at it after every completed read), and
/// every file not hashed by then gets [`winx_release_kernel::hash::stopped`] as its
/// result. Still returns only once every job has had its result.
pub fn hash_fds_each_until(
    jobs: &[HashJob<'_>],
    opts: &RehashOptions,
    stop: &AtomicBool,
    done: &(dyn Fn(usize, io::Result<Rehashed>) + Sync),
) {
    if jobs.is_empty() {
        return;
    }
    // Sizes, for the plan and to start the biggest files first.
    // (A pinned size is what the file should hold; only unpinned files
    // need an fstat.)
    let sizes: Vec<u64> = jobs
        .iter()
        .map(|j| {
            j.limit
                .unwrap_or_else(|| rustix::fs::fstat(j.fd).map(|s| u64::try_from(s.st_size).unwrap_or(0)).unwrap_or(0))
        })
        .collect();
    let total = sizes.iter().fold(0u64, |t, s| t.saturating_add(*s));
    let plan = plan(jobs.len(), total, opts);
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]));
    let file_jobs: Vec<FileJob> = jobs
        .iter()
        .zip(&sizes)
        .map(|(j, &size)| FileJob {
            fd: j.fd.as_raw_fd(),
            limit: j.limit,
            keep: j.keep,
            size_hint: size,
            fingerprint: opts.fingerprint,
        })
        .collect();
    let cursor = AtomicUsize::new(0);
    let next = || {
        let k = cursor.fetch_add(1, Ordering::Relaxed);
        order.get(k).copied()
    };
    let shared = Shared::new();
    let work = |uring: bool| {
        let pipe = if uring {
            Pipeline::new(&ring_config(), shared.clone())
        } else {
            Pipeline::synchronous(&ring_config(), shared.clone())
        };
        let mut reader = Reader::new(pipe, DEPTH);
        reader.run(&file_jobs, &next, stop, &mut |i, r| {
            done(i, r.map(|h| Rehashed { sha256: h.sha256, len: h.len, head: h.head, fingerprint: h.fingerprint }));
        });
    };
    std::thread::scope(|s| {
        for _ in 1..plan.threads {
            // The workers take files from one queue: a worker no thread
            // can be had for (the user's task limit) leaves its share to
            // the others, this thread among them.
            let _ = std::thread::Builder::new().spawn_scoped(s, || work(plan.uring));
        }
        work(plan.uring);
    });
}

/// A file [`open_and_hash_at`] opened.
#[derive(Debug)]
pub struct OpenedHash {
    /// The opened file (`O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_NOCTTY|O_CLOEXEC`).
    pub file: OwnedFd,
    /// Its identity, from the descriptor.
    pub identity: Identity,
    /// Its bytes' hash; `None` when it was not hashed because it is not the
    /// pinned object (not regular, another inode, more links, another size).
    pub hash: Option<Rehashed>,
}

/// One name for [`open_and_hash_at`].
#[derive(Clone, Copy, Debug)]
pub struct OpenJob<'a> {
    /// A name in the directory (one component).
    pub name: &'a CStr,
    /// The pin it must match to be hashed; `None` hashes any regular file.
    pub pin: Option<&'a Pin>,
}

/// Opens each name in `dir` without following a link, reads its identity,
/// and hashes the files that are the pinned object (regular, same device
/// and inode, one link, pinned size; reading stops after `size + 1` bytes).
///
/// The opens are one batch on the ring where io_uring is available.
/// Results are in `jobs`' order; an open error is that name's `Err` (with
/// the errno: `ELOOP` for a symbolic link, `ENXIO` for a socket, `ENOENT`).
pub fn open_and_hash_at(
    dir: BorrowedFd<'_>,
    jobs: &[OpenJob<'_>],
    opts: &RehashOptions,
) -> Vec<io::Result<OpenedHash>> {
    let use_ring =
        !matches!(opts.backend, RehashBackend::Sync) && jobs.len() > 1 && winx_release_kernel::uring::probe().is_ok();
    let names: Vec<&CStr> = jobs.iter().map(|j| j.name).collect();
    let opened = winx_release_kernel::uring::read::open_files_at(dir, &names, use_ring);
    let prepared: Vec<io::Result<(OwnedFd, Identity, bool)>> = opened
        .into_iter()
        .zip(jobs)
        .map(|(o, job)| {
            let fd = o?;
            let id = Identity::of_fd(&fd)?;
            let hash_it =
                id.is_regular() && job.pin.is_none_or(|p| p.same_object(&id) && id.nlink == 1 && id.size == p.size);
            Ok((fd, id, hash_it))
        })
        .collect();
    let mut hashes: Vec<Option<io::Result<Rehashed>>> = (0..jobs.len()).map(|_| None).collect();
    {
        let (idx, hash_jobs): (Vec<usize>, Vec<HashJob<'_>>) = prepared
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Ok((fd, _, true)) => {
                    Some((i, HashJob { fd: fd.as_fd(), limit: jobs[i].pin.map(|p| p.size), keep: Keep::Nothing }))
                }
                _ => None,
            })
            .unzip();
        for (i, h) in idx.into_iter().zip(hash_fds(&hash_jobs, opts)) {
            hashes[i] = Some(h);
        }
    }
    prepared
        .into_iter()
        .zip(hashes)
        .map(|(r, h)| {
            let (file, identity, _) = r?;
            let hash = h.transpose()?;
            Ok(OpenedHash { file, identity, hash })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn plan_rules() {
        let auto = RehashOptions::default();
        assert_eq!(plan(100, 1000, &auto), Plan { uring: false, threads: 1 });
        let big = plan(100, 64 << 20, &auto);
        assert_eq!(big.uring, winx_release_kernel::uring::probe().is_ok());
        assert!(big.threads >= 1);
        let sync = RehashOptions { backend: RehashBackend::Sync, threads: 2, fingerprint: false };
        assert_eq!(plan(100, 64 << 20, &sync), Plan { uring: false, threads: 2 });
        // Never more threads than files.
        assert_eq!(plan(1, 64 << 20, &sync).threads, 1);
    }

    #[test]
    fn every_backend_agrees_with_the_one_thread_hash() {
        let contents: Vec<Vec<u8>> =
            (0..12u8).map(|i| (0..(i as usize * 77_777 + (i as usize % 3))).map(|k| (k as u8) ^ i).collect()).collect();
        let files: Vec<std::fs::File> = contents.iter().map(|c| file_with(c)).collect();
        let want: Vec<([u8; 32], u64)> =
            files.iter().map(|f| winx_release_kernel::hash::sha256_fd(f).unwrap()).collect();
        let jobs: Vec<HashJob<'_>> =
            files.iter().map(|f| HashJob { fd: f.as_fd(), limit: None, keep: Keep::Bytes(10) }).collect();
        for backend in [RehashBackend::Auto, RehashBackend::Uring, RehashBackend::Sync] {
            for threads in [0, 1, 2] {
                let got = hash_fds(&jobs, &RehashOptions { backend, threads, fingerprint: false });
                for (i, g) in got.into_iter().enumerate() {
                    let g = g.unwrap();
                    assert_eq!((g.sha256, g.len), want[i], "{backend:?} {threads} file {i}");
                    assert_eq!(g.head.clone().into_bytes(), &contents[i][..contents[i].len().min(10)]);
                }
            }
        }
    }

    #[test]
    fn limit_stops_after_one_more_byte() {
        let f = file_with(&[7u8; 1000]);
        for backend in [RehashBackend::Uring, RehashBackend::Sync] {
            let r =
                hash_fds(&[HashJob::pinned(f.as_fd(), 10)], &RehashOptions { backend, threads: 1, fingerprint: false });
            let r = r.into_iter().next().unwrap().unwrap();
            assert_eq!(r.len, 11);
            let exact = hash_fds(
                &[HashJob::pinned(f.as_fd(), 1000)],
                &RehashOptions { backend, threads: 1, fingerprint: false },
            );
            let exact = exact.into_iter().next().unwrap().unwrap();
            assert_eq!((exact.sha256, exact.len), winx_release_kernel::hash::sha256_fd(&f).unwrap());
        }
    }

    /// Once the flag is set, every file gets a result at once: a batch of
    /// sparse files of 2 GiB each (seconds of hashing, so a flag nobody
    /// looks at shows as finished hashes, not as a hung test), stopped
    /// from another thread 50 ms in, on both engines.
    #[test]
    fn a_stopped_batch_reports_every_file_at_once() {
        let files: Vec<std::fs::File> = (0..6)
            .map(|_| {
                let f = tempfile::tempfile().unwrap();
                f.set_len(2 << 30).unwrap();
                f
            })
            .collect();
        let jobs: Vec<HashJob<'_>> = files.iter().map(|f| HashJob::new(f.as_fd())).collect();
        for backend in [RehashBackend::Uring, RehashBackend::Sync] {
            let stop = AtomicBool::new(false);
            let got: Mutex<Vec<usize>> = Mutex::new(Vec::new());
            let t = std::time::Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    stop.store(true, Ordering::Relaxed);
                });
                let opts = RehashOptions { backend, threads: 2, fingerprint: false };
                hash_fds_each_until(&jobs, &opts, &stop, &|i, r| {
                    assert_eq!(r.unwrap_err().to_string(), stopped().to_string(), "{backend:?} file {i}");
                    got.lock().unwrap().push(i);
                });
            });
            let mut got = got.into_inner().unwrap();
            got.sort_unstable();
            assert_eq!(got, (0..jobs.len()).collect::<Vec<_>>(), "{backend:?}: each file once");
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "{backend:?}: {:?}", t.elapsed());
        }
    }

    #[test]
    fn read_error_is_per_file() {
        let good = file_with(b"hello");
        let dir = std::fs::File::open("/").unwrap(); // reading a directory: EISDIR
        let jobs = [HashJob::new(good.as_fd()), HashJob::new(dir.as_fd())];
        for backend in [RehashBackend::Uring, RehashBackend::Sync] {
            let r = hash_fds(&jobs, &RehashOptions { backend, threads: 1, fingerprint: false });
            assert_eq!(r[0].as_ref().unwrap().sha256, winx_release_kernel::revision::sha256_bytes(b"hello"));
            assert_eq!(r[1].as_ref().unwrap_err().raw_os_error(), Some(libc::EISDIR));
        }
    }
}
