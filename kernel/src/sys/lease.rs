//! Whether a file is open anywhere else: a write lease taken and dropped at
//! once (`fcntl(F_SETLEASE, F_WRLCK)` then `F_UNLCK`).
//!
//! rustix wraps neither `F_SETLEASE` nor `F_SETSIG`, so the two `fcntl`
//! calls are made through `libc` here: this file is one of the engine's
//! few fenced files allowed `unsafe` (beside the io_uring module and
//! `generation.rs`), and each block says why it holds.
//!
//! The kernel grants a write lease only when the file has no open file
//! description other than the caller's own: none opened for reading or
//! writing by any process (any user, any PID namespace), no executable
//! image of it running, and no mapping of it (a mapping keeps its open file
//! description alive after the descriptor is closed). Descriptors opened
//! with `O_PATH` are not counted.
//!
//! A granted lease is believed only on the filesystems of
//! [`LEASE_SEES_MAPPINGS`]. A stacking filesystem maps another file than
//! the one the lease is taken on: on overlayfs, `mmap(2)` puts the upper or
//! lower layer's file into the mapping, so a process that mapped a helper
//! and closed its descriptor leaves no open file description of the
//! overlay's file, and the lease was granted while the helper was mapped.
//! Elsewhere a granted lease answers [`OpenElsewhere::CannotTell`]
//! (`EOPNOTSUPP`), and the caller reads every view.
//!
//! Side effects, both bounded by the few microseconds the lease is held: a
//! process that opens or truncates the file meanwhile waits until the lease
//! is dropped (or, with `O_NONBLOCK`, gets `EWOULDBLOCK`), and the lease
//! holder is signalled: the signal is set to `SIGURG`, whose default action
//! is to ignore it, so that no embedder is killed by the default `SIGIO`.
//!
//! # References
//! - [`F_SETLEASE(2const)`](https://man7.org/linux/man-pages/man2/f_setlease.2const.html)
//! - [`F_SETSIG(2const)`](https://man7.org/linux/man-pages/man2/f_setsig.2const.html)

#![deny(clippy::undocumented_unsafe_blocks)]

use std::os::fd::{AsRawFd, BorrowedFd};

/// `F_SETSIG` of `<asm-generic/fcntl.h>` (the `libc` crate does not name
/// it): the signal sent when a lease is broken.
const F_SETSIG: libc::c_int = 10;

/// Filesystems (`statfs` `f_type`, name) on which a mapping holds an open
/// file description of the very file the lease is taken on, so that a
/// granted lease means that nothing maps it.
pub(crate) const LEASE_SEES_MAPPINGS: &[(i64, &str)] =
    &[(0xEF53, "ext2/ext3/ext4"), (0x5846_5342, "xfs"), (0x0102_1994, "tmpfs"), (0x9123_683E, "btrfs")];

/// Whether the file `fd` refers to lies on a filesystem of
/// [`LEASE_SEES_MAPPINGS`]; `false` when it cannot be told.
///
/// # References
/// - [`fstatfs(2)`](https://man7.org/linux/man-pages/man2/fstatfs.2.html)
fn lease_sees_mappings(fd: BorrowedFd<'_>) -> bool {
    // `f_type`'s width differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstatfs(fd).is_ok_and(|s| LEASE_SEES_MAPPINGS.iter().any(|(t, _)| *t == s.f_type as i64))
}

/// What a lease attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenElsewhere {
    /// The lease was granted (and dropped): no other open file description
    /// of the file exists, so no process has it open for reading or
    /// writing, runs it, or maps it.
    No,
    /// The kernel refused the lease because another open file description
    /// exists (`EAGAIN`).
    Yes,
    /// The lease could not be tried (leases disabled, a filesystem without
    /// them, a file of another owner without `CAP_LEASE`, a descriptor
    /// opened for writing), or was granted on a filesystem where that does
    /// not rule out a mapping (`EOPNOTSUPP`: not one of
    /// `LEASE_SEES_MAPPINGS`): the caller must look another way.
    CannotTell(rustix::io::Errno),
}

/// Tells whether the file `fd` refers to is open anywhere but through
/// `fd`'s own open file description, by taking a write lease on `fd` and
/// dropping it at once.
///
/// Give the caller's one descriptor of the file, opened read-only: any
/// other open file description of it, the caller's own included, makes the
/// answer [`OpenElsewhere::Yes`].
///
/// # References
/// - [`F_SETLEASE(2const)`](https://man7.org/linux/man-pages/man2/f_setlease.2const.html)
/// - [`F_SETSIG(2const)`](https://man7.org/linux/man-pages/man2/f_setsig.2const.html)
pub fn open_elsewhere(fd: BorrowedFd<'_>) -> OpenElsewhere {
    let raw = fd.as_raw_fd();
    // SAFETY: `fcntl(F_SETSIG)` takes an integer argument and touches only
    // the open file description `raw` names, which `fd` keeps open for the
    // duration of the call.
    if unsafe { libc::fcntl(raw, F_SETSIG, libc::SIGURG) } != 0 {
        return OpenElsewhere::CannotTell(
            rustix::io::Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(rustix::io::Errno::INVAL),
        );
    }
    // SAFETY: as above; `F_SETLEASE` takes an integer argument.
    if unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_WRLCK) } != 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => OpenElsewhere::Yes,
            _ => OpenElsewhere::CannotTell(rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::INVAL)),
        };
    }
    // SAFETY: as above. Dropping a lease this descriptor holds cannot fail
    // while it is open; were it to, closing the descriptor drops it too.
    unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_UNLCK) };
    if !lease_sees_mappings(fd) {
        return OpenElsewhere::CannotTell(rustix::io::Errno::OPNOTSUPP);
    }
    OpenElsewhere::No
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_file_open_or_mapped_elsewhere_refuses_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        let mine = std::fs::File::open(&p).unwrap();
        assert_eq!(open_elsewhere(mine.as_fd()), OpenElsewhere::No);
        // Open in another process.
        let mut child =
            std::process::Command::new("sleep").arg("30").stdin(std::fs::File::open(&p).unwrap()).spawn().unwrap();
        assert_eq!(open_elsewhere(mine.as_fd()), OpenElsewhere::Yes);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(open_elsewhere(mine.as_fd()), OpenElsewhere::No);
        // Mapped, its descriptor closed.
        let other = std::fs::File::open(&p).unwrap();
        // SAFETY: a fresh private read-only mapping of 8 KiB that nothing
        // reads; unmapped below with the same address and length.
        let map =
            unsafe { libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_PRIVATE, other.as_raw_fd(), 0) };
        assert_ne!(map, libc::MAP_FAILED);
        drop(other);
        assert_eq!(open_elsewhere(mine.as_fd()), OpenElsewhere::Yes);
        // SAFETY: the mapping made above, unmapped once.
        assert_eq!(unsafe { libc::munmap(map, 8192) }, 0);
        assert_eq!(open_elsewhere(mine.as_fd()), OpenElsewhere::No);
        // An O_PATH descriptor is not counted: the caller must look for
        // those in /proc.
        let _path = rustix::fs::open(&p, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty()).unwrap();
        assert_eq!(open_elsewhere(mine.as_fd()), OpenElsewhere::No);
    }
}
