//! Removing a tree through directory handles, never following a link.
//!
//! Used by retention on what it has already moved out of a backing root into
//! its private staging directory. Every directory is opened
//! `O_DIRECTORY|O_NOFOLLOW` relative to its parent's descriptor; every entry
//! is inspected with `statx(AT_SYMLINK_NOFOLLOW)` and removed with
//! `unlinkat` relative to its parent, so a symbolic link is removed as a
//! link and never followed.
//!
//! # References
//! - [`unlinkat(2)`](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, StatxFlags};
use rustix::io::Errno;

/// Deepest level [`remove_tree`] descends; anything deeper is left in place
/// (the execution and receipt stores are one level deep).
pub const REMOVE_MAX_DEPTH: u32 = 16;

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// What a removal freed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Entries removed (the tree's root included).
    pub entries: u64,
}

/// Removes the entry `name` of `parent` and, if it is a directory, its whole
/// contents first, without following links.
///
/// An entry that vanishes meanwhile is not an error. Returns what was
/// removed; an error leaves the rest in place.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &str, depth: u32) -> io::Result<Removed> {
    let mut removed = Removed::default();
    remove_entry(parent, name, depth, &mut removed)?;
    Ok(removed)
}

fn remove_entry(parent: BorrowedFd<'_>, name: &str, depth: u32, removed: &mut Removed) -> io::Result<()> {
    let st = match rustix::fs::statx(parent, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(u32::from(st.stx_mode)) != FileType::Directory {
        return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) => {
                removed.entries += 1;
                Ok(())
            }
            Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    if depth > REMOVE_MAX_DEPTH {
        return Err(io::Error::other(format!("{name}: deeper than {REMOVE_MAX_DEPTH} levels; left in place")));
    }
    let dir = match rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for child in list(&dir)? {
        remove_entry(dir.as_fd(), &child, depth + 1, removed)?;
    }
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) => {
            removed.entries += 1;
            Ok(())
        }
        Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The names in `dir` (without `.` and `..`), read to the end before
/// anything is removed. A directory removed meanwhile (`ENOENT`) is empty.
pub(crate) fn list<Fd: rustix::fd::AsFd>(dir: Fd) -> io::Result<Vec<String>> {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut iter = RawDir::new(dir, &mut buf);
    let mut names = Vec::new();
    while let Some(entry) = iter.next() {
        let entry = match entry {
            Ok(e) => e,
            Err(Errno::NOENT) => break,
            Err(e) => return Err(e.into()),
        };
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        // Names that are not UTF-8 are not ours; they are left alone.
        if let Ok(s) = std::str::from_utf8(bytes) {
            names.push(s.to_owned());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn removes_a_tree_and_never_follows_a_link() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        let t = d.path().join("t");
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::fs::write(t.join("a/b/f"), b"1").unwrap();
        std::fs::write(t.join("g"), b"2").unwrap();
        std::os::unix::fs::symlink(&outside, t.join("link")).unwrap();
        let parent = rustix::fs::openat(rustix::fs::CWD, d.path(), DIR_FLAGS, Mode::empty()).unwrap();
        let r = remove_tree(parent.as_fd(), "t", 1).unwrap();
        assert_eq!(r.entries, 6);
        assert!(!t.exists());
        assert!(outside.join("keep").exists());
        // A vanished entry is not an error.
        assert_eq!(remove_tree(parent.as_fd(), "t", 1).unwrap().entries, 0);
    }
}
