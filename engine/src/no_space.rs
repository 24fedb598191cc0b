//! Naming a full filesystem: `ENOSPC` and `EDQUOT` are `no_space`
//! (contract section 4), and the one-line detail says which filesystem is
//! full.
//!
//! The filesystem is found from the device of the path that failed (its
//! nearest existing ancestor, since what could not be created does not
//! exist) and the mount table: the mount point, the filesystem type and
//! its source. This runs only after a failure, never on the fast path.
//!
//! # References
//! - [`errno(3)`](https://man7.org/linux/man-pages/man3/errno.3.html) (`ENOSPC`, `EDQUOT`)
//! - [`proc_pid_mountinfo(5)`](https://man7.org/linux/man-pages/man5/proc_pid_mountinfo.5.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxFlags, CWD};

use crate::error::TargetReason;

/// Whether `e` says the filesystem or a disk quota is full (`ENOSPC`,
/// `EDQUOT`).
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == libc::ENOSPC || c == libc::EDQUOT)
}

/// The target-level reason of an I/O error: `no_space` for `ENOSPC` and
/// `EDQUOT`, `io_error` for anything else.
pub fn reason_of(e: &io::Error) -> TargetReason {
    if is_no_space(e) {
        TargetReason::NoSpace
    } else {
        TargetReason::IoError
    }
}

/// The one-line detail of a failure `e` of `what` at `path`: for
/// `no_space`, it names the filesystem that is full (mount point, type,
/// source); otherwise it is `what: e`.
pub fn detail(what: &str, path: &Path, e: &io::Error) -> String {
    if !is_no_space(e) {
        return format!("{what}: {e}");
    }
    let full = match filesystem_of(path) {
        Some(fs) => format!("the {} filesystem {} mounted at {}", fs.fstype, fs.source, fs.mount_point.display()),
        None => format!("the filesystem holding {}", path.display()),
    };
    format!("no space: {full} is full ({what} at {}: {e}); free space there and retry", path.display())
}

/// One mounted filesystem, as the mount table names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Its type (`ext4`, `tmpfs`, ...).
    pub fstype: String,
    /// Its source (a device, or the type's pseudo source).
    pub source: String,
}

/// The filesystem that holds `path` (or its nearest existing ancestor):
/// the mount of its device whose mount point is the longest prefix of the
/// path. `None` when it cannot be told.
pub fn filesystem_of(path: &Path) -> Option<Filesystem> {
    let mut cur = Some(path);
    let st = loop {
        let p = cur?;
        match rustix::fs::statx(CWD, p, AtFlags::NO_AUTOMOUNT | AtFlags::STATX_DONT_SYNC, StatxFlags::empty()) {
            Ok(st) => break st,
            Err(_) => cur = p.parent(),
        }
    };
    let table = crate::scan::read_mount_table()?;
    best_mount(&table, st.stx_dev_major, st.stx_dev_minor, path)
}

/// Among the mountinfo lines of device `major:minor`, the one whose mount
/// point is the longest prefix of `path`.
fn best_mount(table: &[u8], major: u32, minor: u32, path: &Path) -> Option<Filesystem> {
    let dev = format!("{major}:{minor}");
    let mut best: Option<Filesystem> = None;
    for line in table.split(|b| *b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|b| *b == b' ').collect();
        if fields.len() < 5 || fields[2] != dev.as_bytes() {
            continue;
        }
        let Some(sep) = fields.iter().position(|f| *f == b"-") else { continue };
        let mount_point = PathBuf::from(OsStr::from_bytes(&winx_release_kernel::mountinfo::unescape(fields[4])));
        let text = |i: usize| fields.get(i).map(|f| String::from_utf8_lossy(f).into_owned()).unwrap_or_default();
        let fs = Filesystem { mount_point, fstype: text(sep + 1), source: text(sep + 2) };
        let better = match &best {
            None => true,
            Some(b) => {
                path.starts_with(&fs.mount_point)
                    && (!path.starts_with(&b.mount_point)
                        || fs.mount_point.as_os_str().len() > b.mount_point.as_os_str().len())
            }
        };
        if better {
            best = Some(fs);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(reason_of(&io::Error::from_raw_os_error(libc::ENOSPC)), TargetReason::NoSpace);
        assert_eq!(reason_of(&io::Error::from_raw_os_error(libc::EDQUOT)), TargetReason::NoSpace);
        assert_eq!(reason_of(&io::Error::from_raw_os_error(libc::EIO)), TargetReason::IoError);
        assert_eq!(reason_of(&io::Error::other("x")), TargetReason::IoError);
    }

    #[test]
    fn the_longest_mount_of_the_device_is_named() {
        let t = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                  30 22 0:50 / /mnt/a rw - tmpfs tmpfs rw\n\
                  31 22 0:50 /sub /srv/b\\040c rw - tmpfs tmpfs rw\n";
        let fs = best_mount(t, 0, 50, Path::new("/srv/b c/d/journal")).unwrap();
        assert_eq!(fs.mount_point, PathBuf::from("/srv/b c"));
        assert_eq!((fs.fstype.as_str(), fs.source.as_str()), ("tmpfs", "tmpfs"));
        let fs = best_mount(t, 8, 1, Path::new("/home/x")).unwrap();
        assert_eq!((fs.mount_point, fs.source.as_str()), (PathBuf::from("/"), "/dev/sda1"));
        assert!(best_mount(t, 9, 9, Path::new("/x")).is_none());
    }
}
