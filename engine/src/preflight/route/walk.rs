//! The resolution behind [`super::route_write`] (Linux): path resolution
//! as the kernel does it, through directory handles.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::{SessionDir, WriteRoute};
use crate::layout::{is_session_name, TMP_DIR, WINX_DIR};
use crate::preflight::write_reaches_reserved;

/// Symbolic links followed in one resolution at most (the kernel's own
/// bound, `ELOOP` beyond).
const MAX_LINKS: usize = 40;

const DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// [`super::route_write`] of the absolute `path`.
pub(super) fn route(path: &Path) -> io::Result<WriteRoute> {
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
