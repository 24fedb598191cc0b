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

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::reserved::write_reaches_reserved;
use crate::layout::{is_session_name, TMP_DIR, WINX_DIR};

/// Symbolic links followed in one resolution at most (the kernel's own
/// bound, `ELOOP` beyond).
const MAX_LINKS: usize = 40;

const DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

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
    /// see [`write_reaches_reserved`]): the host refuses it.
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
    let walk = resolve(path)?;
    let resolved = walk.path();
    // The directories the write lands in: the chain, less the target when
    // it is itself a directory.
    let landing = &walk.dirs[..walk.dirs.len() - usize::from(walk.target_is_dir)];
    let mut session = None;
    for (i, d) in landing.iter().enumerate().skip(2).rev() {
        let parents = (&landing[i - 2].name, &landing[i - 1].name);
        if parents.0.as_os_str() == WINX_DIR && parents.1.as_os_str() == TMP_DIR && is_session_name_os(&d.name) {
            let st = rustix::fs::fstat(&d.fd)?;
            let path: PathBuf = landing[..=i].iter().map(|d| d.name.as_os_str()).collect();
            session = Some(SessionDir { path, dev: st.st_dev, ino: st.st_ino });
            break;
        }
    }
    let reserved = write_reaches_reserved(path, &resolved);
    Ok(WriteRoute { resolved, session, reserved })
}

fn is_session_name_os(name: &OsStr) -> bool {
    name.to_str().is_some_and(is_session_name)
}

/// One directory of the resolved chain: its handle and its name in its
/// parent (`/` for the root).
struct Dir {
    fd: OwnedFd,
    name: OsString,
}

/// A resolved path: the chain of directories opened, the components that
/// do not exist, and the existing non-directory it ends at.
struct Walk {
    dirs: Vec<Dir>,
    missing: Vec<OsString>,
    file: Option<OsString>,
    target_is_dir: bool,
}

impl Walk {
    fn path(&self) -> PathBuf {
        let mut p: PathBuf = self.dirs.iter().map(|d| d.name.as_os_str()).collect();
        p.extend(self.file.iter().chain(&self.missing));
        p
    }
}

fn root() -> io::Result<Dir> {
    Ok(Dir { fd: rustix::fs::openat(CWD, "/", DIR_FLAGS, Mode::empty())?, name: "/".into() })
}

/// Resolves `path` as path resolution does, through directory handles.
fn resolve(path: &Path) -> io::Result<Walk> {
    let mut links = 0;
    let mut walk = Walk { dirs: vec![root()?], missing: Vec::new(), file: None, target_is_dir: false };
    // Components are owned: a link's target joins the queue in front.
    let mut queue: VecDeque<OsString> = path.components().filter_map(owned).collect();
    while let Some(name) = queue.pop_front() {
        walk.target_is_dir = false;
        if walk.file.is_some() {
            // A component after a non-directory.
            return Err(Errno::NOTDIR.into());
        }
        if name == "/" {
            walk.dirs.truncate(1);
            walk.missing.clear();
            continue;
        }
        if name == "." {
            continue;
        }
        if name == ".." {
            if walk.missing.pop().is_none() && walk.dirs.len() > 1 {
                walk.dirs.pop();
            }
            continue;
        }
        if !walk.missing.is_empty() {
            walk.missing.push(name);
            continue;
        }
        let parent = walk.dirs.last().expect("the root stays").fd.as_fd();
        let st = match rustix::fs::statat(parent, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => {
                walk.missing.push(name);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let fd = rustix::fs::openat(parent, name.as_os_str(), DIR_FLAGS, Mode::empty())?;
                walk.dirs.push(Dir { fd, name });
                walk.target_is_dir = true;
            }
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::LOOP.into());
                }
                let target = rustix::fs::readlinkat(parent, name.as_os_str(), Vec::new())?;
                let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                for c in target.components().filter_map(owned).collect::<Vec<_>>().into_iter().rev() {
                    queue.push_front(c);
                }
            }
            _ => walk.file = Some(name),
        }
    }
    Ok(walk)
}

/// A component as the walk's queue holds it.
fn owned(c: Component<'_>) -> Option<OsString> {
    match c {
        Component::RootDir => Some("/".into()),
        Component::CurDir => Some(".".into()),
        Component::ParentDir => Some("..".into()),
        Component::Normal(n) => Some(n.to_owned()),
        Component::Prefix(_) => None,
    }
}

#[cfg(test)]
mod tests;
