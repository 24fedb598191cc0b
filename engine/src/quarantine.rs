//! The private same-filesystem quarantine and `RENAME_NOREPLACE` moves.
//!
//! # References
//! - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html)
//! - [`mkdirat(2)`](https://man7.org/linux/man-pages/man2/mkdirat.2.html)

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::layout::RESERVED_PREFIX;
use winx_release_kernel::sys::random_hex;

/// Why the quarantine could not be set up.
#[non_exhaustive]
#[derive(Debug)]
pub enum QuarantineError {
    /// The filesystem refuses `RENAME_NOREPLACE` (`EINVAL`/`ENOSYS`).
    RenameUnsupported,
    /// Another error.
    Io(io::Error),
}

/// A quarantine directory `.winx-release-<random>` (mode 0700) in a session
/// directory.
#[derive(Debug)]
pub struct Quarantine {
    /// The opened quarantine directory.
    pub dir: OwnedFd,
    /// Its name in the session directory.
    pub name: String,
    /// Its full path, for reports.
    pub path: PathBuf,
}

/// Renames `from` in `from_dir` to `to` in `to_dir` without ever replacing
/// an existing `to` (`RENAME_NOREPLACE`).
///
/// There is deliberately no fallback to plain `rename`: `EINVAL`/`ENOSYS`
/// come back as errors.
pub fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: impl AsRef<OsStr>,
    to_dir: BorrowedFd<'_>,
    to: impl AsRef<OsStr>,
) -> io::Result<()> {
    rustix::fs::renameat_with(from_dir, from.as_ref(), to_dir, to.as_ref(), RenameFlags::NOREPLACE).map_err(Into::into)
}

/// Whether an error from [`rename_noreplace`] means the filesystem cannot
/// do `RENAME_NOREPLACE` at all.
pub fn is_rename_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == Errno::INVAL.raw_os_error() || c == Errno::NOSYS.raw_os_error())
}

impl Quarantine {
    /// Creates a quarantine in `session` (whose path is `session_path`).
    ///
    /// The directory is made under a probe name and then moved to its final
    /// name with `RENAME_NOREPLACE`, which proves the filesystem supports the
    /// flag before any helper moves.
    pub fn create(session: BorrowedFd<'_>, session_path: &Path) -> Result<Quarantine, QuarantineError> {
        let name = format!("{RESERVED_PREFIX}{}", random_hex(8));
        let probe = format!("{name}.probe");
        rustix::fs::mkdirat(session, probe.as_str(), Mode::from_raw_mode(0o700))
            .map_err(|e| QuarantineError::Io(e.into()))?;
        if let Err(e) = rename_noreplace(session, &probe, session, &name) {
            let _ = rustix::fs::unlinkat(session, probe.as_str(), AtFlags::REMOVEDIR);
            return Err(if is_rename_unsupported(&e) {
                QuarantineError::RenameUnsupported
            } else {
                QuarantineError::Io(e)
            });
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = rustix::fs::openat(session, name.as_str(), flags, Mode::empty())
            .map_err(|e| QuarantineError::Io(e.into()))?;
        Ok(Quarantine { dir, path: session_path.join(&name), name })
    }

    /// The path of `entry` inside the quarantine.
    pub fn entry_path(&self, entry: &str) -> PathBuf {
        self.path.join(entry)
    }

    /// Removes the quarantine directory from `session` if it is empty.
    /// Returns whether it was removed. The removal is not made durable
    /// here: the caller `fsync`s `session` before it retires the journal.
    pub fn remove_if_empty(&self, session: BorrowedFd<'_>) -> bool {
        rustix::fs::unlinkat(session, self.name.as_str(), AtFlags::REMOVEDIR).is_ok()
    }

    /// Fsyncs the quarantine directory.
    pub fn sync(&self) -> io::Result<()> {
        rustix::fs::fsync(self.dir.as_fd()).map_err(Into::into)
    }
}

/// The name a target gets in quarantine: `t<index, 3 digits>`.
pub fn entry_name(index: usize) -> String {
    format!("t{index:03}")
}
