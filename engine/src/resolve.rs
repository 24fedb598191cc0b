//! Path resolution through directory handles, never following links.
//!
//! Every directory is opened `O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC` relative to
//! its already-opened parent, starting at `/`. Where the kernel has
//! `openat2`, a whole relative walk is first tried in one call with
//! `RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS`; any failure is
//! re-run component by component to name the offending component exactly.
//!
//! # References
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
//! - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::Reason;
use winx_release_kernel::identity::{Identity, IDENTITY_MASK};

static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Why a walk stopped.
///
/// Like every error enum of the engine it is `#[non_exhaustive]`: a match
/// outside the engine needs a wildcard arm.
///
/// ```compile_fail
/// use winx_release_engine::resolve::WalkError;
/// fn index(e: &WalkError) -> usize {
///     match e {
///         WalkError::NotFound(i) | WalkError::Symlink(i) | WalkError::NotDirectory(i) | WalkError::Io(i, _) => *i,
///     }
/// }
/// ```
#[non_exhaustive]
#[derive(Debug)]
pub enum WalkError {
    /// A component does not exist.
    NotFound(usize),
    /// A component is a symbolic link.
    Symlink(usize),
    /// A component is not a directory.
    NotDirectory(usize),
    /// Another error at a component.
    Io(usize, io::Error),
}

impl WalkError {
    /// The target-level reason code for this failure.
    pub(crate) fn reason(&self) -> Reason {
        match self {
            WalkError::Symlink(_) => Reason::Symlink,
            WalkError::NotFound(_) | WalkError::NotDirectory(_) | WalkError::Io(..) => Reason::NotFound,
        }
    }
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::NotFound(i) => write!(f, "component {i} does not exist"),
            WalkError::Symlink(i) => write!(f, "component {i} is a symbolic link"),
            WalkError::NotDirectory(i) => write!(f, "component {i} is not a directory"),
            WalkError::Io(i, e) => write!(f, "component {i}: {e}"),
        }
    }
}

impl From<WalkError> for io::Error {
    fn from(e: WalkError) -> io::Error {
        match e {
            WalkError::NotFound(i) => io::Error::new(io::ErrorKind::NotFound, format!("component {i} does not exist")),
            WalkError::Symlink(i) => io::Error::other(format!("component {i} is a symbolic link")),
            WalkError::NotDirectory(i) => io::Error::other(format!("component {i} is not a directory")),
            WalkError::Io(i, e) => io::Error::new(e.kind(), format!("component {i}: {e}")),
        }
    }
}

/// Opens one directory component below `dir`, without following a link.
fn open_component(dir: BorrowedFd<'_>, name: &OsStr, index: usize) -> Result<OwnedFd, WalkError> {
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(WalkError::NotFound(index)),
        Err(e @ (Errno::LOOP | Errno::NOTDIR)) => {
            match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, IDENTITY_MASK) {
                Ok(st) if FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Symlink => {
                    Err(WalkError::Symlink(index))
                }
                Ok(_) => Err(WalkError::NotDirectory(index)),
                Err(_) => Err(WalkError::Io(index, e.into())),
            }
        }
        Err(e) => Err(WalkError::Io(index, e.into())),
    }
}

/// Opens `components` one by one below `base`, never following links.
pub(crate) fn open_dir_beneath<S: AsRef<OsStr>>(base: BorrowedFd<'_>, components: &[S]) -> Result<OwnedFd, WalkError> {
    if components.is_empty() {
        return rustix::fs::openat(base, ".", DIR_FLAGS, Mode::empty()).map_err(|e| WalkError::Io(0, e.into()));
    }
    if !OPENAT2_MISSING.load(Ordering::Relaxed) {
        let mut joined = OsString::new();
        for (i, c) in components.iter().enumerate() {
            if i > 0 {
                joined.push("/");
            }
            joined.push(c.as_ref());
        }
        let how = ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(base, joined.as_os_str(), DIR_FLAGS, Mode::empty(), how) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOSYS) | Err(Errno::PERM) => OPENAT2_MISSING.store(true, Ordering::Relaxed),
            Err(_) => {} // diagnose below, component by component
        }
    }
    let mut cur = open_component(base, components[0].as_ref(), 0)?;
    for (i, c) in components.iter().enumerate().skip(1) {
        cur = open_component(cur.as_fd(), c.as_ref(), i)?;
    }
    Ok(cur)
}

/// Creates directory `name` below `dir` with `mode` when it is missing, then
/// opens it without following a link.
///
/// An existing entry is accepted only if it is a directory; a symbolic link
/// or any other file type fails, and nothing is created through a link.
///
/// # References
/// - [`mkdirat(2)`](https://man7.org/linux/man-pages/man2/mkdirat.2.html)
pub fn mkdir_beneath(dir: BorrowedFd<'_>, name: &str, mode: u32) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(open_dir_beneath(dir, &[OsStr::new(name)])?)
}

/// Opens an absolute directory path from `/`, never following links.
///
/// `path` must be absolute and exact (see [`crate::preflight::check_exact`]).
pub fn open_dir_abs(path: &Path) -> Result<OwnedFd, WalkError> {
    let root =
        rustix::fs::openat(rustix::fs::CWD, "/", DIR_FLAGS, Mode::empty()).map_err(|e| WalkError::Io(0, e.into()))?;
    let comps: Vec<&OsStr> =
        path.as_os_str().as_bytes().split(|&b| b == b'/').filter(|c| !c.is_empty()).map(OsStr::from_bytes).collect();
    open_dir_beneath(root.as_fd(), &comps)
}

/// A helper opened for release: its parent directory handle, its name in
/// that directory, the opened file and its identity at open time.
#[derive(Debug)]
pub struct OpenedFile {
    /// The parent directory.
    pub parent: OwnedFd,
    /// The final component.
    pub name: OsString,
    /// The file, opened read-only, no-follow.
    pub file: OwnedFd,
    /// Identity read from the opened descriptor.
    pub identity: Identity,
}

/// Opens a regular, singly-linked file `rel` below the directory `base`.
///
/// Refuses with `not_found`, `symlink` (any component), `not_regular_file`,
/// `hardlink` (`nlink > 1`), or `read_required` when the object changed
/// between the no-follow `statx` and the open.
pub(crate) fn open_regular_beneath<S: AsRef<OsStr>>(base: BorrowedFd<'_>, rel: &[S]) -> Result<OpenedFile, Reason> {
    let (name, parents) = rel.split_last().ok_or(Reason::NotSessionHelper)?;
    let name = name.as_ref();
    let parent = open_dir_beneath(base, parents).map_err(|e| e.reason())?;
    let st = match rustix::fs::statx(parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW, IDENTITY_MASK) {
        Ok(st) => Identity::from_statx(&st),
        Err(Errno::NOENT) => return Err(Reason::NotFound),
        Err(_) => return Err(Reason::NotFound),
    };
    match st.file_type() {
        FileType::RegularFile => {}
        FileType::Symlink => return Err(Reason::Symlink),
        _ => return Err(Reason::NotRegularFile),
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = match rustix::fs::openat(parent.as_fd(), name, flags, Mode::empty()) {
        Ok(f) => f,
        Err(Errno::LOOP) => return Err(Reason::Symlink),
        Err(Errno::NOENT) => return Err(Reason::NotFound),
        Err(_) => return Err(Reason::NotFound),
    };
    let identity = Identity::of_fd(&file).map_err(|_| Reason::NotFound)?;
    if !identity.is_regular() {
        return Err(Reason::NotRegularFile);
    }
    if identity.physical() != st.physical() {
        return Err(Reason::ReadRequired);
    }
    if identity.nlink > 1 {
        return Err(Reason::Hardlink);
    }
    Ok(OpenedFile { parent, name: name.to_owned(), file, identity })
}
