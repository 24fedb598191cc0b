//! The reserved namespace for writes, through aliases.
//!
//! The seed reserves the private `.winx-release-*` quarantine namespace
//! "from all supported file mutations, including undo and resolved
//! aliases". A name check ([`super::in_reserved_namespace`]) sees only the
//! path as written; a write can reach the namespace through a symbolic link
//! (the path, or a directory on the way, resolves into it) or a hard link
//! (the file the path names has another name inside a quarantine). This is
//! the one function that decides it for every file tool.
//!
//! # References
//! - [`lstat(2)`](https://man7.org/linux/man-pages/man2/lstat.2.html)
//! - [`link(2)`](https://man7.org/linux/man-pages/man2/link.2.html)

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::rules::in_reserved_namespace;
use crate::layout::{is_reserved_name, TMP_DIR, WINX_DIR};

/// Whether a mutation of `requested` reaches the reserved namespace.
/// `resolved` is where the write lands: the existing file `requested` names,
/// through every symbolic link, or the canonical existing ancestor followed
/// by the components still missing.
///
/// True when `requested` or `resolved` has a `.winx-release-*` component,
/// or when the regular file at `resolved` has more than one link and one of
/// its other names is in a quarantine directory (`.winx-release-*`) of a
/// session directory (`.winx/tmp/*`) of any directory above it, where the
/// engine makes its quarantines. Fail closed: a quarantine directory that
/// cannot be read counts as holding an alias.
///
/// A hard link from a quarantine into another workspace, not above the
/// file, is not searched for (quarantines are made only inside session
/// directories; the file tools write inside the workspace).
pub fn write_reaches_reserved(requested: &Path, resolved: &Path) -> bool {
    if in_reserved_namespace(requested) || in_reserved_namespace(resolved) {
        return true;
    }
    let Ok(meta) = std::fs::symlink_metadata(resolved) else { return false };
    if !meta.file_type().is_file() || meta.nlink() < 2 {
        return false;
    }
    let id = (meta.dev(), meta.ino());
    resolved.ancestors().skip(1).any(|a| quarantines_hold(&a.join(WINX_DIR).join(TMP_DIR), id).unwrap_or(true))
}

/// Whether a quarantine of a session directory in `sessions` holds an entry
/// with the identity `id`. A missing `sessions` holds nothing.
fn quarantines_hold(sessions: &Path, id: (u64, u64)) -> io::Result<bool> {
    let sessions = match std::fs::read_dir(sessions) {
        Ok(d) => d,
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => return Ok(false),
        Err(e) => return Err(e),
    };
    for session in sessions {
        let session = session?;
        if !session.file_type()?.is_dir() {
            continue;
        }
        for q in std::fs::read_dir(session.path())? {
            let q = q?;
            if !is_reserved_name(q.file_name()) || !q.file_type()?.is_dir() {
                continue;
            }
            for entry in std::fs::read_dir(q.path())? {
                let m = std::fs::symlink_metadata(entry?.path())?;
                if (m.dev(), m.ino()) == id {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_symlinks_and_hard_links_into_a_quarantine() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().canonicalize().unwrap();
        let session = ws.join(".winx/tmp/session-0123456789abcdef");
        let q = session.join(".winx-release-00ff");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("t000"), b"captured").unwrap();
        // By name.
        assert!(write_reaches_reserved(&q.join("x"), &q.join("x")));
        let src = ws.join("src.py");
        std::fs::write(&src, b"x").unwrap();
        assert!(!write_reaches_reserved(&src, &src));
        // Through a symbolic link: the resolved target is in it.
        assert!(write_reaches_reserved(&ws.join("alias"), &q.join("t000")));
        // Through a hard link: another name of the file is in a quarantine.
        let hl = ws.join("deep/er/hl.py");
        std::fs::create_dir_all(hl.parent().unwrap()).unwrap();
        std::fs::hard_link(q.join("t000"), &hl).unwrap();
        assert!(write_reaches_reserved(&hl, &hl));
        // A hard link between two ordinary names is not an alias of it.
        let other = ws.join("other.py");
        std::fs::hard_link(&src, &other).unwrap();
        assert!(!write_reaches_reserved(&other, &other));
        // Nothing to search for a missing file or a missing `.winx/tmp`.
        assert!(!write_reaches_reserved(&ws.join("none"), &ws.join("none")));
        let elsewhere = tempfile::tempdir().unwrap();
        let f = elsewhere.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        std::fs::hard_link(&f, elsewhere.path().join("g")).unwrap();
        assert!(!write_reaches_reserved(&f, &f));
    }
}
