//! Opening scan roots.
//!
//! A root given by the operator ([`open_root`]) has its ancestors resolved by
//! the kernel as usual; only its final component is opened without following
//! a link. A root below an already-opened directory ([`open_root_beneath`])
//! is opened component by component, never following a link.
//!
//! A root that does not exist is an empty root (contract section 1: "a
//! backing root that does not exist is simply empty").
//!
//! # References
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::collections::HashSet;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags, CWD};
use rustix::io::Errno;

use super::{BackendKind, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRequest, ScanRoot, Verdict};
use crate::error::Reason;
use crate::resolve::{open_dir_beneath, WalkError};
use winx_release_kernel::identity::PhysicalId;

/// Flags every scanned directory is opened with.
pub(super) const DIR_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Why a root could not be opened for scanning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootFailure {
    /// `backing_symlink`, `backing_unsupported_entry` or `backing_inaccessible`.
    pub reason: Reason,
    /// The offending path: the root, or the component of it that failed.
    pub path: PathBuf,
}

impl RootFailure {
    fn new(reason: Reason, path: impl Into<PathBuf>) -> Self {
        RootFailure { reason, path: path.into() }
    }
}

impl std::fmt::Display for RootFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.path.display())
    }
}

impl std::error::Error for RootFailure {}

/// Strips trailing slashes (but keeps `/`): with a trailing slash the kernel
/// follows a final symbolic link even under `O_NOFOLLOW`.
fn trim_trailing_slashes(path: &Path) -> &Path {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let mut end = bytes.len();
    while end > 1 && bytes[end - 1] == b'/' {
        end -= 1;
    }
    Path::new(std::ffi::OsStr::from_bytes(&bytes[..end]))
}

/// Classifies a final component that `O_DIRECTORY|O_NOFOLLOW` refused
/// (`ELOOP` or `ENOTDIR`). `Ok(())` means it does not exist after all.
fn diagnose(dir: BorrowedFd<'_>, name: &Path, report: &Path) -> Result<(), RootFailure> {
    match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE) {
        Ok(st) => match FileType::from_raw_mode(u32::from(st.stx_mode)) {
            FileType::Symlink => Err(RootFailure::new(Reason::BackingSymlink, report)),
            // A directory now: it changed between the open and the statx.
            FileType::Directory => Err(RootFailure::new(Reason::BackingInaccessible, report)),
            _ => Err(RootFailure::new(Reason::BackingUnsupportedEntry, report)),
        },
        Err(Errno::NOENT) => Ok(()),
        // An ancestor is not a directory (`ENOTDIR`), or a link loop among
        // the ancestors (`ELOOP`): the path cannot be resolved.
        Err(_) => Err(RootFailure::new(Reason::BackingInaccessible, report)),
    }
}

/// Opens an operator-given root for scanning.
///
/// The ancestors of `path` are resolved by the kernel as usual; the final
/// component is opened `O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC`.
///
/// - missing (the root or an ancestor): an empty root (`dir` is `None`);
/// - the final component is a symbolic link: `backing_symlink`;
/// - a regular file, fifo, socket or device: `backing_unsupported_entry`;
/// - permission denied, an ancestor that is not a directory, or any other
///   error: `backing_inaccessible`.
///
/// `path` should be absolute; a relative path is resolved against the
/// current directory and reported as given.
pub fn open_root(path: &Path) -> Result<ScanRoot, RootFailure> {
    let trimmed = trim_trailing_slashes(path);
    match rustix::fs::openat(CWD, trimmed, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(ScanRoot { path: path.to_path_buf(), dir: Some(fd) }),
        Err(Errno::NOENT) => Ok(ScanRoot { path: path.to_path_buf(), dir: None }),
        Err(Errno::LOOP | Errno::NOTDIR) => {
            diagnose(CWD, trimmed, path)?;
            Ok(ScanRoot { path: path.to_path_buf(), dir: None })
        }
        Err(_) => Err(RootFailure::new(Reason::BackingInaccessible, path)),
    }
}

/// Whether `c` is one plain name: not empty, `.` or `..`, no `/` or NUL.
fn plain_component(c: &str) -> bool {
    !c.is_empty() && c != "." && c != ".." && !c.contains(['/', '\0'])
}

/// Opens the root `base_path/rel...` below the opened directory `base`
/// (whose path is `base_path`), opening every component of `rel` without
/// following a link.
///
/// - a missing component: an empty root;
/// - a component that is a symbolic link: `backing_symlink` at that component;
/// - a component that is not a directory: `backing_unsupported_entry` there;
/// - any other error, or a component that is not a plain name (empty, `.`,
///   `..`, containing `/`): `backing_inaccessible`.
pub fn open_root_beneath(base: BorrowedFd<'_>, base_path: &Path, rel: &[&str]) -> Result<ScanRoot, RootFailure> {
    let full: PathBuf = rel.iter().fold(base_path.to_path_buf(), |p, c| p.join(c));
    let upto = |i: usize| -> PathBuf { rel[..=i].iter().fold(base_path.to_path_buf(), |p, c| p.join(c)) };
    if let Some(i) = rel.iter().position(|c| !plain_component(c)) {
        return Err(RootFailure::new(Reason::BackingInaccessible, upto(i)));
    }
    match open_dir_beneath(base, rel) {
        Ok(fd) => Ok(ScanRoot { path: full, dir: Some(fd) }),
        Err(WalkError::NotFound(_)) => Ok(ScanRoot { path: full, dir: None }),
        Err(WalkError::Symlink(i)) => Err(RootFailure::new(Reason::BackingSymlink, upto(i))),
        Err(WalkError::NotDirectory(i)) => Err(RootFailure::new(Reason::BackingUnsupportedEntry, upto(i))),
        Err(WalkError::Io(i, _)) => {
            let p = if rel.is_empty() { full } else { upto(i.min(rel.len() - 1)) };
            Err(RootFailure::new(Reason::BackingInaccessible, p))
        }
    }
}

/// A fail-closed report that inspected nothing (`bytes` is `Some(0)` in
/// [`ScanMode::Sizes`], `None` in [`ScanMode::Lean`]).
pub fn fail_report(kind: BackendKind, mode: ScanMode, reason: Reason, path: PathBuf, elapsed_us: u64) -> ScanReport {
    ScanReport {
        verdict: Verdict::FailClosed,
        reason: Some(reason),
        path: Some(path),
        entries: 0,
        directories: 0,
        files: 0,
        bytes: (mode == ScanMode::Sizes).then_some(0),
        max_depth: 0,
        backend: kind,
        elapsed_us,
    }
}

/// Opens every root with [`open_root`] and scans them with `backend` under
/// one shared bound.
///
/// A root that cannot be opened fails the whole scan closed (nothing is
/// scanned; the report's counts are zero). `elapsed_us` includes opening
/// the roots.
pub fn scan_paths(
    backend: &dyn ScanBackend,
    roots: &[PathBuf],
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
) -> ScanReport {
    scan_paths_with(backend, roots, limits, aliases, ScanMode::Sizes)
}

/// [`scan_paths`] in `mode`.
pub fn scan_paths_with(
    backend: &dyn ScanBackend,
    roots: &[PathBuf],
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
    mode: ScanMode,
) -> ScanReport {
    // `kind` only names the backend of a report that failed before the
    // scan: `auto`'s answer reads the load, so it is asked only then.
    scan_opened(roots, || backend.kind(), mode, |roots| backend.scan(&ScanRequest { roots, limits, aliases, mode }))
}

/// Opens every root with [`open_root`] and hands them to `scan`; a root
/// that cannot be opened fails the scan closed with nothing scanned (a
/// report of `kind` and `mode` naming it). The report's `elapsed_us`
/// includes opening the roots. The one place scans by path open their
/// roots.
pub(crate) fn scan_opened(
    roots: &[PathBuf],
    kind: impl FnOnce() -> BackendKind,
    mode: ScanMode,
    scan: impl FnOnce(&[ScanRoot]) -> ScanReport,
) -> ScanReport {
    let start = Instant::now();
    let elapsed = || u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let mut opened = Vec::with_capacity(roots.len());
    for root in roots {
        match open_root(root) {
            Ok(r) => opened.push(r),
            Err(f) => return fail_report(kind(), mode, f.reason, f.path, elapsed()),
        }
    }
    let mut report = scan(&opened);
    report.elapsed_us = elapsed();
    report
}
