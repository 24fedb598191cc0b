//! Safe `openat`/`statx` on a [`Pipeline`]: the pipeline owns what each
//! operation points to until its completion.
//!
//! `Pipeline::push` is unsafe because the caller must keep a path and a
//! descriptor alive until the completion. [`Ops`] takes that duty over: an
//! operation is given shared handles ([`Arc<OwnedFd>`] for the directory, an
//! [`Arc`]ed name buffer for the path), and `Ops` holds clones of them until
//! the completion has been delivered. If the ring was abandoned
//! (`Pipeline::poisoned`), those clones are leaked instead of dropped, as
//! the kernel may still hold the pointers. An `openat` completion is
//! delivered as an [`OwnedFd`], so no caller ever handles a raw descriptor.
//!
//! With this, the release engine's io_uring scan backend needs no
//! `unsafe` of its own.
//!
//! # References
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::ring::{Op, Pipeline, RingConfig, Shared};

/// A path for an operation: empty (`AT_EMPTY_PATH`), or the NUL-terminated
/// name that starts at `start` in a shared buffer.
#[derive(Clone, Debug)]
pub enum Name {
    /// The empty path.
    Empty,
    /// The name at `.1` in `.0`, which must hold a NUL at or after `.1`.
    In(Arc<Vec<u8>>, usize),
}

/// A delivered completion.
#[derive(Debug)]
pub enum Done<'a> {
    /// A `statx` result, or the errno.
    Statx(Result<&'a libc::statx, i32>),
    /// An `openat` result: the new descriptor, or the errno.
    Opened(Result<OwnedFd, i32>),
}

/// Why an operation was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The name has no NUL terminator in its buffer.
    BadName,
}

/// What one queued operation holds until its completion.
struct Keep {
    tag: u64,
    open: bool,
    _dir: Arc<OwnedFd>,
    _name: Name,
}

/// A pipeline whose operations own what they point to.
pub struct Ops {
    pipe: Pipeline,
    keep: Vec<Option<Keep>>,
    free: Vec<usize>,
    /// Held by operations delivered during the current reap.
    spent: Vec<Keep>,
}

impl Ops {
    /// Operations on a new ring (or synchronous, see [`Pipeline::new`]).
    pub fn new(config: &RingConfig, shared: Arc<Shared>) -> Ops {
        Ops::with(Pipeline::new(config, shared))
    }

    /// Operations carried out by system calls, on the calling thread.
    pub fn synchronous(config: &RingConfig, shared: Arc<Shared>) -> Ops {
        Ops::with(Pipeline::synchronous(config, shared))
    }

    fn with(pipe: Pipeline) -> Ops {
        Ops { pipe, keep: Vec::new(), free: Vec::new(), spent: Vec::new() }
    }

    /// Whether another operation can be queued now.
    pub fn has_room(&self) -> bool {
        self.pipe.has_room()
    }

    /// Operations queued and not yet delivered.
    pub fn outstanding(&self) -> usize {
        self.pipe.outstanding()
    }

    /// Closes `fd`, on the ring when there is room (never delivered).
    pub fn close(&mut self, fd: OwnedFd) {
        self.pipe.close(fd);
    }

    /// Queues `statx(dir, name, flags, mask)`, delivered with `tag`.
    ///
    /// # Panics
    /// When there is no room ([`Ops::has_room`]).
    pub fn statx(&mut self, dir: &Arc<OwnedFd>, name: Name, flags: i32, mask: u32, tag: u64) -> Result<(), Refused> {
        self.queue(dir, name, tag, false, |dirfd, path| Op::Statx { dirfd, path, flags, mask })
    }

    /// Queues `openat(dir, name, flags)`, delivered with `tag` as
    /// [`Done::Opened`].
    ///
    /// # Panics
    /// When there is no room ([`Ops::has_room`]).
    pub fn openat(&mut self, dir: &Arc<OwnedFd>, name: Name, flags: i32, tag: u64) -> Result<(), Refused> {
        self.queue(dir, name, tag, true, |dirfd, path| Op::OpenAt { dirfd, path, flags })
    }

    fn queue(
        &mut self,
        dir: &Arc<OwnedFd>,
        name: Name,
        tag: u64,
        open: bool,
        op: impl FnOnce(i32, *const std::ffi::c_char) -> Op,
    ) -> Result<(), Refused> {
        let path = match &name {
            Name::Empty => c"".as_ptr(),
            Name::In(buf, start) => {
                let tail = buf.get(*start..).ok_or(Refused::BadName)?;
                CStr::from_bytes_until_nul(tail).map_err(|_| Refused::BadName)?.as_ptr()
            }
        };
        let keep = Keep { tag, open, _dir: dir.clone(), _name: name };
        let idx = match self.free.pop() {
            Some(i) => {
                self.keep[i] = Some(keep);
                i
            }
            None => {
                self.keep.push(Some(keep));
                self.keep.len() - 1
            }
        };
        let op = op(dir.as_raw_fd(), path);
        // SAFETY: `path` points into the name buffer (or a static string)
        // and `dirfd` is the descriptor of `dir`; `self.keep[idx]` holds
        // both until the completion with tag `idx` is delivered (or leaks
        // them if the ring is abandoned), which is what `push` requires.
        unsafe { self.pipe.push(op, idx as u64) };
        Ok(())
    }

    /// Delivers at least `want` completions (fewer only when fewer are
    /// outstanding) to `f(tag, done)`.
    pub fn reap(&mut self, want: usize, f: &mut dyn FnMut(u64, Done<'_>)) -> usize {
        let (keep, free, spent, pipe) = (&mut self.keep, &mut self.free, &mut self.spent, &mut self.pipe);
        let n = pipe.reap(want, &mut |idx, res, st| deliver(keep, free, spent, idx, res, st, f));
        self.bury();
        n
    }

    /// Delivers everything outstanding.
    pub fn drain(&mut self, f: &mut dyn FnMut(u64, Done<'_>)) {
        let (keep, free, spent, pipe) = (&mut self.keep, &mut self.free, &mut self.spent, &mut self.pipe);
        pipe.drain(&mut |idx, res, st| deliver(keep, free, spent, idx, res, st, f));
        self.bury();
    }

    /// Waits for room, delivering what completes meanwhile.
    pub fn make_room(&mut self, f: &mut dyn FnMut(u64, Done<'_>)) {
        let (keep, free, spent, pipe) = (&mut self.keep, &mut self.free, &mut self.spent, &mut self.pipe);
        pipe.make_room(&mut |idx, res, st| deliver(keep, free, spent, idx, res, st, f));
        self.bury();
    }

    /// Releases what delivered operations held: dropped, or leaked when
    /// the ring was abandoned meanwhile (it may still hold the pointers of
    /// operations it failed with `EIO`).
    fn bury(&mut self) {
        if self.pipe.poisoned() {
            for k in self.spent.drain(..) {
                std::mem::forget(k);
            }
        } else {
            self.spent.clear();
        }
    }
}

fn deliver(
    keep: &mut [Option<Keep>],
    free: &mut Vec<usize>,
    spent: &mut Vec<Keep>,
    idx: u64,
    res: i32,
    st: &libc::statx,
    f: &mut dyn FnMut(u64, Done<'_>),
) {
    let Some(k) = usize::try_from(idx).ok().and_then(|i| keep.get_mut(i)).and_then(Option::take) else { return };
    free.push(idx as usize);
    let done = if k.open {
        if res >= 0 {
            // SAFETY: a successful `openat` completion is a new descriptor
            // that nothing else owns; it is delivered exactly once.
            Done::Opened(Ok(unsafe { OwnedFd::from_raw_fd(res) }))
        } else {
            Done::Opened(Err(-res))
        }
    } else if res < 0 {
        Done::Statx(Err(-res))
    } else {
        Done::Statx(Ok(st))
    };
    let tag = k.tag;
    spent.push(k);
    f(tag, done);
}

impl Drop for Ops {
    fn drop(&mut self) {
        // Deliver (and so close) whatever is outstanding while the names
        // and descriptors are still held.
        self.drain(&mut |_, _| {});
        if self.pipe.poisoned() {
            for k in self.keep.drain(..).flatten() {
                std::mem::forget(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> Arc<OwnedFd> {
        Arc::new(
            rustix::fs::open(
                "/",
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn statx_and_open_on_ring_and_sync() {
        for sync in [false, true] {
            let cfg = RingConfig::default();
            let mut ops = if sync { Ops::synchronous(&cfg, Shared::new()) } else { Ops::new(&cfg, Shared::new()) };
            let d = dir();
            let names = Arc::new(b"proc\0nonexistent-xyz\0".to_vec());
            ops.statx(&d, Name::In(names.clone(), 0), libc::AT_SYMLINK_NOFOLLOW, libc::STATX_INO, 1).unwrap();
            ops.openat(&d, Name::In(names.clone(), 5), libc::O_RDONLY | libc::O_CLOEXEC, 2).unwrap();
            ops.statx(&d, Name::Empty, libc::AT_EMPTY_PATH, libc::STATX_INO, 3).unwrap();
            assert_eq!(ops.statx(&d, Name::In(Arc::new(b"no nul".to_vec()), 0), 0, 0, 4), Err(Refused::BadName));
            assert_eq!(ops.statx(&d, Name::In(names.clone(), 99), 0, 0, 4), Err(Refused::BadName));
            let mut got = Vec::new();
            ops.drain(&mut |tag, done| {
                got.push(match done {
                    Done::Statx(r) => (tag, r.map(|st| st.stx_ino != 0).unwrap_or(false), 0),
                    Done::Opened(r) => (tag, r.is_ok(), r.err().unwrap_or(0)),
                })
            });
            got.sort();
            assert_eq!(got, vec![(1, true, 0), (2, false, libc::ENOENT), (3, true, 0)], "sync {sync}");
            drop(ops);
            assert_eq!(Arc::strong_count(&names), 1);
        }
    }
}
