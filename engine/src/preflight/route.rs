//! Which session a host's file write reaches: the one rule a host's file
//! tools ask before they write.
//!
//! A host's write tool must take a session's admission barrier for a write
//! into that session's directory (a write there can change a helper a
//! release is about to remove) and must refuse the reserved namespace. A
//! prefix check on the path as written is wrong both ways: a symbolic link
//! outside the session directory can lead into it, and `session/../..`
//! leads out of it. [`route_write`] resolves the path as the kernel will:
//! component by component from `/`, each directory opened as a handle
//! relative to the one before, symbolic links followed (read with
//! `readlinkat`, at most 40), `..` taken as the physical parent. The
//! directories the write lands in are known by the handles, and the
//! session directory among them is told by its place in the layout
//! (`<workspace>/.winx/tmp/session-*`) and named by its identity.
//!
//! # References
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
//! - [`readlinkat(2)`](https://man7.org/linux/man-pages/man2/readlinkat.2.html)
//! - [`path_resolution(7)`](https://man7.org/linux/man-pages/man7/path_resolution.7.html)

use std::io;
use std::path::{Path, PathBuf};

#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod walk;

/// Where a write lands and what it reaches: the answer of [`route_write`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRoute {
    /// The physical path the write lands at: every symbolic link followed,
    /// every `..` taken, the components that do not exist yet appended.
    pub resolved: PathBuf,
    /// The session directory the write lands in (at any depth), if any.
    pub session: Option<SessionDir>,
    /// Whether the write reaches the reserved `.winx-release-*` namespace
    /// (by name, through a link, or as a hard link of a quarantined file;
    /// see [`write_reaches_reserved`](crate::preflight::write_reaches_reserved)): the host refuses it.
    pub reserved: bool,
}

/// A session directory a write reaches, named by its identity.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionDir {
    /// Its physical path.
    pub path: PathBuf,
    /// Its device, as `winx_release_runtime::SessionKey` holds it.
    pub dev: u64,
    /// Its inode.
    pub ino: u64,
}

/// Answers where a write of `path` lands, which session directory it
/// reaches (if any) and whether it touches the reserved namespace.
///
/// `path` is absolute and may hold symbolic links, `.` and `..`; it need
/// not exist (a file about to be created, in directories about to be
/// made). The answer is the session whose directory the resolved path is
/// in, matched by identity ([`SessionDir::dev`], [`SessionDir::ino`]) with
/// the host's sessions: the host takes that session's admission barrier
/// for the write, and refuses the write when [`WriteRoute::reserved`] is
/// set or when the session directory is none of its own.
///
/// Resolve under the barrier the write will hold: a link changed between
/// this answer and the write could lead elsewhere (the agent's shell can
/// change links only while it runs, and a release needs the barrier too).
///
/// Off Linux no session directory exists (releases are
/// `unsupported_platform`): the answer is the path as given, no session,
/// and `reserved` by name; a host's code is the same on every platform.
///
/// # Errors
/// The resolution's own: `path` relative (`InvalidInput`), a link loop or
/// more than 40 links (`ELOOP`), a component that exists and is not a
/// directory (`ENOTDIR`), a directory that cannot be searched (`EACCES`).
/// A host refuses the write then (fail closed).
///
/// # Example
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use winx_release_engine::preflight::route_write;
/// use winx_release_engine::Layout;
///
/// let tmp = tempfile::tempdir()?;
/// let ws = tmp.path().canonicalize()?.join("ws");
/// std::fs::create_dir(&ws)?;
/// let layout = Layout::new(&ws, tmp.path().canonicalize()?.join("data"))?;
/// layout.create_session_dir("t1")?;
/// std::os::unix::fs::symlink(layout.session_dir("t1"), ws.join("link"))?;
/// let route = route_write(&ws.join("link/helper.py"))?;
/// assert_eq!(route.session.map(|s| s.path), Some(layout.session_dir("t1")));
/// assert_eq!(route.resolved, layout.session_dir("t1").join("helper.py"));
/// assert!(!route.reserved);
/// # Ok(())
/// # }
/// ```
pub fn route_write(path: &Path) -> io::Result<WriteRoute> {
    if !path.is_absolute() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a write's path must be absolute"));
    }
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    return walk::route(path);
    #[cfg(not(all(target_os = "linux", not(winx_foreign))))]
    {
        // No session directory exists here (releases are
        // `unsupported_platform`): the path as given, reserved by name.
        let reserved = path
            .components()
            .any(|c| matches!(c, std::path::Component::Normal(n) if crate::layout::is_reserved_name(n)));
        Ok(WriteRoute { resolved: path.to_owned(), session: None, reserved })
    }
}

#[cfg(all(test, target_os = "linux", not(winx_foreign)))]
mod tests;
