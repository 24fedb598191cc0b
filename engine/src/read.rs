//! Read-and-pin: a helper's bytes and the [`Pin`] a release needs, from one
//! consistent read of the opened file.
//!
//! [`read_pinned`] opens a helper below its session directory through
//! directory handles without following a link (the rules of
//! [`crate::preflight`]: regular, one link), reads every byte with `pread`
//! from that descriptor, hashing them all (SHA-256) and keeping the first
//! bytes as [`Keep`] asks, and reads the descriptor's identity before and
//! after. When the identity moved during the read (a write in between), it
//! reads again, three times at most, then refuses with
//! [`Reason::ReadRequired`]. So the bytes returned are the bytes hashed, and
//! the pin names the object they were read from: a release with that pin
//! removes that object only if it is still the same one with the same bytes.
//!
//! [`read_pinned_all`] reads many helpers of one session as one batch
//! (io_uring reads and every core for big batches), handing each result
//! over as soon as it is known; a helper that changed during the batch is
//! read again on its own, as [`read_pinned`] would.
//!
//! # References
//! - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::ffi::OsString;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::path::Component;
use std::path::Path;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::Reason;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::preflight::{check_exact, in_reserved_namespace};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::rehash::{self, HashJob, RehashOptions};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::resolve::{open_dir_abs, open_regular_beneath};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use winx_release_kernel::hash::{read_and_hash_until, HASH_CHUNK};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use winx_release_kernel::identity::Identity;
use winx_release_kernel::identity::Pin;

pub use winx_release_kernel::hash::{Head, Keep};

/// How often a read is tried before a file that keeps changing is refused.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
const READ_TRIES: usize = 3;

/// What one consistent read of a helper gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedRead {
    /// The identity the bytes were read from (after the read) and their
    /// SHA-256: what a release of exactly these bytes needs.
    pub pin: Pin,
    /// The first bytes, as the read's [`Keep`] asked (`pin.size` bytes were
    /// read and hashed in all).
    pub head: Head,
}

impl PinnedRead {
    /// The revision string of the bytes read (`sha256:<hex>`).
    pub fn revision(&self) -> String {
        self.pin.revision()
    }

    /// Whether the head holds every byte that was read and hashed (the
    /// read's [`Keep`] kept at least `pin.size` bytes, and a
    /// [`Keep::Text`] read met only text).
    pub fn is_whole(&self) -> bool {
        self.head.len() as u64 == self.pin.size
    }

    /// Every byte that was read and hashed, when the head holds them all
    /// ([`PinnedRead::is_whole`]), else `None`.
    ///
    /// This is how a host's `ReadFiles` shows a helper: read it once with
    /// `Keep::Bytes(limit)`, display these bytes (its own line ranges,
    /// decoding, truncation work on them) and mint the token from
    /// [`PinnedRead::pin`]. The token then binds exactly the bytes shown:
    /// a file that changed after the read is refused by the release
    /// (its identity or digest no longer matches), where a host that read
    /// the file itself and pinned a second read could have had a token for
    /// bytes it never showed.
    pub fn into_whole(self) -> Option<Vec<u8>> {
        self.is_whole().then(|| self.head.into_bytes())
    }
}

/// Reads every byte of the opened file `fd` consistently: its identity
/// before and after the read match and the bytes read are its size.
///
/// The file need not be a helper (nothing about its links or its place is
/// checked here); [`read_pinned`] is this, on a helper it opened.
///
/// # Errors
/// [`Reason::ReadRequired`] when the file changed during each of three
/// reads; [`Reason::NotFound`] when it cannot be read or stat'ed.
///
/// # References
/// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
/// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn read_fd(fd: BorrowedFd<'_>, keep: Keep) -> Result<PinnedRead, Reason> {
    read_fd_until(fd, keep, &AtomicBool::new(false))
}

/// Like [`read_fd`], giving up once `stop` is set (looked at before every
/// read): a read nobody waits for any more ends within one chunk, however
/// long the file.
///
/// # Errors
/// Those of [`read_fd`]; [`Reason::ReadRequired`] when it gave up (the
/// file was not read: a caller that still wants it must read it again).
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn read_fd_until(fd: BorrowedFd<'_>, keep: Keep, stop: &AtomicBool) -> Result<PinnedRead, Reason> {
    let mut before = Identity::of_fd(fd).map_err(|_| Reason::NotFound)?;
    let mut buf = vec![0u8; HASH_CHUNK];
    for _ in 0..READ_TRIES {
        let bytes = read_and_hash_until(fd, &mut buf, keep, stop).map_err(|_| {
            if stop.load(Ordering::Relaxed) {
                Reason::ReadRequired
            } else {
                Reason::NotFound
            }
        })?;
        let after = Identity::of_fd(fd).map_err(|_| Reason::NotFound)?;
        if unchanged(&before, &after) && bytes.len == after.size {
            return Ok(PinnedRead { pin: Pin::new(&after, bytes.digest), head: bytes.head });
        }
        before = after;
    }
    Err(Reason::ReadRequired)
}

/// Whether `after` is the object `before` was, unchanged.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn unchanged(before: &Identity, after: &Identity) -> bool {
    Pin::new(before, [0; 32]).matches_identity(after)
}

/// The components of `path` below `session_dir`, both exact absolute paths.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn below(session_dir: &Path, path: &Path) -> Result<Vec<OsString>, Reason> {
    check_exact(session_dir)?;
    check_exact(path)?;
    if in_reserved_namespace(path) {
        return Err(Reason::ReservedNamespace);
    }
    let rel = path.strip_prefix(session_dir).map_err(|_| Reason::NotSessionHelper)?;
    let comps: Vec<OsString> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n.to_owned()),
            _ => Err(Reason::PathNotExact),
        })
        .collect::<Result<_, _>>()?;
    if comps.is_empty() {
        return Err(Reason::NotSessionHelper);
    }
    Ok(comps)
}

/// Reads the helper at `path` below `session_dir` and pins it: the bytes
/// (kept as `keep` asks, all of them hashed) and the [`Pin`] of the object
/// they were read from.
///
/// Both paths are exact and absolute (no `.`, `..`, trailing `/`, glob
/// character; see [`check_exact`]). The walk from `/` to the file goes
/// through directory handles and follows no link; the file must be a
/// regular file with one link, at open and after the read; its identity
/// must be the same before and after the read (three tries). A pin is not a
/// generation token: binding it to a thread and a process secret is the
/// frontend's part.
///
/// # Errors
/// [`Reason::PathNotExact`], [`Reason::GlobNotAllowed`],
/// [`Reason::ReservedNamespace`], [`Reason::NotSessionHelper`] (not strictly
/// below `session_dir`), [`Reason::Symlink`], [`Reason::NotFound`],
/// [`Reason::NotRegularFile`], [`Reason::Hardlink`],
/// [`Reason::ReadRequired`] (the file kept changing while it was read).
///
/// # Example
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use winx_release_engine::read::{read_pinned, Keep};
///
/// let dir = tempfile::tempdir()?;
/// let session = dir.path().canonicalize()?;
/// std::fs::write(session.join("helper.py"), "print('hi')\n")?;
/// let read = read_pinned(&session, &session.join("helper.py"), Keep::Text(1024))?;
/// assert_eq!(read.head.into_text(false).as_deref(), Some("print('hi')\n"));
/// assert_eq!(read.pin.size, 12);
/// # Ok(())
/// # }
/// ```
///
/// # References
/// - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)
/// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
/// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
pub fn read_pinned(session_dir: &Path, path: &Path, keep: Keep) -> Result<PinnedRead, Reason> {
    #[cfg(not(all(target_os = "linux", not(winx_foreign))))]
    {
        // Every platform but Linux: reads say so.
        let _ = (session_dir, path, keep);
        Err(Reason::UnsupportedPlatform)
    }
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    {
        let rel = below(session_dir, path)?;
        let dir = open_dir_abs(session_dir).map_err(|e| e.reason())?;
        read_rel(dir.as_fd(), &rel, keep, &AtomicBool::new(false))
    }
}

/// Opens `rel` below the opened directory `dir` and reads it consistently.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn read_rel(dir: BorrowedFd<'_>, rel: &[OsString], keep: Keep, stop: &AtomicBool) -> Result<PinnedRead, Reason> {
    let opened = open_regular_beneath(dir, rel)?;
    let read = read_fd_until(opened.file.as_fd(), keep, stop)?;
    if !read.pin.same_object(&opened.identity) {
        return Err(Reason::ReadRequired);
    }
    let after = Identity::of_fd(&opened.file).map_err(|_| Reason::NotFound)?;
    if after.nlink > 1 {
        return Err(Reason::Hardlink);
    }
    Ok(read)
}

/// Reads and pins every helper of `paths` below `session_dir`, as one batch,
/// handing each result to `done(index, result)` as soon as it is known: from
/// the hashing threads, in any order, each index once.
///
/// Each result is what [`read_pinned`] would give for that path, with the
/// same rules and errors (a helper that changed during the batch is read
/// again on its own). When `session_dir` itself cannot be opened, every
/// path gets that reason ([`Reason::Symlink`] or [`Reason::NotFound`]).
///
/// # References
/// - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html) (`IORING_OP_READ`)
/// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn read_pinned_all<P: AsRef<Path> + Sync>(
    session_dir: &Path,
    paths: &[P],
    keep: Keep,
    done: &(dyn Fn(usize, Result<PinnedRead, Reason>) + Sync),
) {
    read_pinned_all_until(session_dir, paths, keep, &AtomicBool::new(false), done);
}

/// Like [`read_pinned_all`], giving up once `stop` is set: no read is
/// issued after it, and every path whose read was not finished by then
/// gets [`Reason::ReadRequired`] (it was not read). Still returns only
/// once every path has had its result.
///
/// A `ReadFiles` whose client cancelled it, or whose reply went out
/// without the entries still being read, sets it: a helper of any length
/// (a sparse file of 2^63 - 1 bytes) costs no more than the caller waits.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn read_pinned_all_until<P: AsRef<Path> + Sync>(
    session_dir: &Path,
    paths: &[P],
    keep: Keep,
    stop: &AtomicBool,
    done: &(dyn Fn(usize, Result<PinnedRead, Reason>) + Sync),
) {
    let dir = match open_dir_abs(session_dir) {
        Ok(d) => d,
        Err(e) => {
            for i in 0..paths.len() {
                done(i, Err(e.reason()));
            }
            return;
        }
    };
    let rels: Vec<Result<Vec<OsString>, Reason>> = paths.iter().map(|p| below(session_dir, p.as_ref())).collect();
    let opened: Vec<Option<(OwnedFd, Identity)>> = rels
        .iter()
        .enumerate()
        .map(|(i, rel)| match rel.as_ref().map(|rel| open_regular_beneath(dir.as_fd(), rel)) {
            Ok(Ok(o)) => Some((o.file, o.identity)),
            Ok(Err(r)) | Err(&r) => {
                done(i, Err(r));
                None
            }
        })
        .collect();
    // The batch's jobs, and which path each one is.
    let mut of_job = Vec::with_capacity(opened.len());
    let mut jobs: Vec<HashJob<'_>> = Vec::with_capacity(opened.len());
    for (i, o) in opened.iter().enumerate() {
        if let Some((file, _)) = o {
            of_job.push(i);
            jobs.push(HashJob { fd: file.as_fd(), limit: None, keep });
        }
    }
    rehash::hash_fds_each_until(&jobs, &RehashOptions::default(), stop, &|j, batch| {
        let i = of_job[j];
        let Some((file, before)) = &opened[i] else { return };
        let result = match (batch, Identity::of_fd(file)) {
            (Ok(r), Ok(after)) if unchanged(before, &after) && r.len == after.size => {
                if after.nlink > 1 {
                    Err(Reason::Hardlink)
                } else {
                    Ok(PinnedRead { pin: Pin::new(&after, r.sha256), head: r.head })
                }
            }
            // Given up: not read.
            _ if stop.load(Ordering::Relaxed) => Err(Reason::ReadRequired),
            // Changed while the batch read it, or an error: the one-file
            // read with its retries decides.
            _ => match &rels[i] {
                Ok(rel) => read_rel(dir.as_fd(), rel, keep, stop),
                Err(r) => Err(*r),
            },
        };
        done(i, result);
    });
}
