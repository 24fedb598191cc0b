//! The operations a [`super::ring::Pipeline`] carries, the state every
//! pipeline of one run shares (the switch to synchronous system calls), and
//! the synchronous form of each operation.
//!
//! The ownership rules of `ring.rs` hold here too: a path, buffer or
//! descriptor named by an `Op` stays valid until its completion is
//! delivered.
//!
//! # References
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)

use std::ffi::c_char;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// One operation. Pointers and descriptors must stay valid until the
/// operation's completion is delivered (see the module's ownership rules).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// `statx(dirfd, path, flags, mask)` into the slot's own buffer.
    Statx { dirfd: RawFd, path: *const c_char, flags: i32, mask: u32 },
    /// `openat(dirfd, path, flags, 0)`; the result is a new descriptor the
    /// receiver of the completion owns.
    OpenAt { dirfd: RawFd, path: *const c_char, flags: i32 },
    /// `pread(fd, buf, len, offset)`.
    Read { fd: RawFd, buf: *mut u8, len: u32, offset: u64 },
    /// `close(fd)`; its completion is never delivered.
    Close { fd: RawFd },
}

impl Op {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Statx { .. } => "IORING_OP_STATX",
            Op::OpenAt { .. } => "IORING_OP_OPENAT",
            Op::Read { .. } => "IORING_OP_READ",
            Op::Close { .. } => "IORING_OP_CLOSE",
        }
    }
}

/// State shared by every pipeline of one run: the switch to synchronous
/// mode and the simulated refusal used by tests.
#[derive(Debug, Default)]
pub struct Shared {
    pub(super) degraded: AtomicBool,
    pub(super) why: OnceLock<String>,
    /// Completion number (1-based, over all pipelines) to turn into
    /// `-EINVAL`, as gVisor would answer; 0 for none.
    pub(super) einval_at: u64,
    pub(super) completions: AtomicU64,
    /// Tests: `io_uring_enter` call number (1-based, over all pipelines) to
    /// fail after it submitted, as a broken ring would; 0 for none.
    #[cfg(test)]
    pub(super) fatal_at: u64,
    #[cfg(test)]
    pub(super) enters: AtomicU64,
    /// Tests: the read buffers (address, length) of operations abandoned by
    /// a simulated failure, and the byte the "kernel" keeps writing there.
    #[cfg(test)]
    pub(crate) late: std::sync::Mutex<(Vec<(usize, usize)>, u8)>,
}

impl Shared {
    /// A shared state with no simulated refusal.
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared::default())
    }

    /// A shared state that turns completion number `n` (1-based, counted
    /// over all pipelines, `close` excluded) into `-EINVAL`.
    pub fn with_einval_at(n: Option<u64>) -> Arc<Shared> {
        Arc::new(Shared { einval_at: n.unwrap_or(0), ..Shared::default() })
    }

    /// Tests: a shared state whose `io_uring_enter` call number `n` fails
    /// (after submitting) as a broken ring would, and whose abandoned read
    /// buffers are then filled with `canary` at every later step, as the
    /// kernel might still write them at any moment.
    #[cfg(test)]
    pub(crate) fn with_fatal_at(n: u64, canary: u8) -> Arc<Shared> {
        Arc::new(Shared { fatal_at: n, late: std::sync::Mutex::new((Vec::new(), canary)), ..Shared::default() })
    }

    /// Tests: whether this `io_uring_enter` is the one to fail.
    #[cfg(test)]
    pub(super) fn simulated_enter_failure(&self) -> bool {
        self.fatal_at > 0 && self.enters.fetch_add(1, Ordering::Relaxed) + 1 == self.fatal_at
    }

    #[cfg(not(test))]
    pub(super) fn simulated_enter_failure(&self) -> bool {
        false
    }

    /// Tests: the simulated kernel writes its canary into every abandoned
    /// read buffer.
    #[cfg(test)]
    pub(super) fn late_kernel_writes(&self) {
        let late = self.late.lock().unwrap_or_else(|p| p.into_inner());
        for &(addr, len) in &late.0 {
            // SAFETY: test simulation of a kernel that completes an abandoned
            // read late. The ownership rules say such a buffer is leaked by
            // its owner, never freed nor reused, so the memory stays
            // allocated and nothing reads it; an owner that breaks the rule
            // sees this canary in data it hashes, which the test detects.
            unsafe { std::ptr::write_bytes(addr as *mut u8, late.1, len) };
        }
    }

    #[cfg(not(test))]
    pub(super) fn late_kernel_writes(&self) {}

    /// Whether the run switched to synchronous system calls.
    pub fn degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed)
    }

    /// Why the run switched, if it did.
    #[cfg(test)]
    pub(crate) fn why(&self) -> Option<&str> {
        self.why.get().map(String::as_str)
    }

    /// Switches the run to synchronous system calls, logging why once.
    /// `for_process`: the kernel refused an operation, so io_uring is
    /// unavailable for the rest of the process too (not for a simulated
    /// refusal, nor for a ring that could not be set up this once).
    pub(crate) fn degrade(&self, why: String, for_process: bool) {
        if self.why.set(why.clone()).is_ok() {
            tracing::warn!(reason = %why, "io_uring failed; continuing with synchronous system calls");
            if for_process {
                super::probe::mark_refused(why);
            }
        }
        self.degraded.store(true, Ordering::Relaxed);
    }
}

/// Runs `op` as the matching system call; returns its result or `-errno`.
pub(super) fn run_sync(op: &Op, statx: &mut libc::statx) -> i32 {
    let errno = || -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    match *op {
        Op::Statx { dirfd, path, flags, mask } => {
            // SAFETY: `path` is a valid NUL-terminated string and `statx` a
            // writable buffer (the caller's contract on `push`).
            let r = unsafe { libc::statx(dirfd, path, flags, mask, statx) };
            if r == 0 {
                0
            } else {
                errno()
            }
        }
        Op::OpenAt { dirfd, path, flags } => loop {
            // SAFETY: `path` is a valid NUL-terminated string.
            let fd = unsafe { libc::openat(dirfd, path, flags, 0) };
            if fd >= 0 {
                return fd;
            }
            let e = errno();
            if e != -libc::EINTR {
                return e;
            }
        },
        Op::Read { fd, buf, len, offset } => loop {
            let off = libc::off_t::try_from(offset).unwrap_or(libc::off_t::MAX);
            // SAFETY: `buf` is writable for `len` bytes (the caller's contract).
            let n = unsafe { libc::pread(fd, buf.cast(), len as usize, off) };
            if n >= 0 {
                return i32::try_from(n).unwrap_or(i32::MAX);
            }
            let e = errno();
            if e != -libc::EINTR {
                return e;
            }
        },
        Op::Close { fd } => {
            // SAFETY: the descriptor was handed over to this operation.
            unsafe { libc::close(fd) };
            0
        }
    }
}
