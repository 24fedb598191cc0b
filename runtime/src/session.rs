//! A session, as the runtime knows it: its directory's identity.

use std::io;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::AsFd;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The identity of a session directory (device, inode and birth time): a
/// session is the same whichever path (a bind mount, a renamed workspace)
/// reaches it, and a directory made later with a freed inode number (ext4
/// hands a removed directory's number to the next one made beside it) is
/// another session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionKey {
    /// The device.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
    /// Its birth time in nanoseconds since the epoch (`statx`
    /// `STATX_BTIME`); 0 where the filesystem keeps none, and in records
    /// written before it was kept.
    #[serde(default)]
    pub born: u64,
}

impl SessionKey {
    /// The identity of the directory open as `fd` (off Linux:
    /// `crate::foreign`, `unsupported_platform`).
    ///
    /// # References
    /// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn of_dir(fd: impl AsFd) -> io::Result<SessionKey> {
        let id = winx_release_kernel::identity::Identity::of_fd(fd)?;
        let born = id.btime.map_or(0, |(s, ns)| {
            u64::try_from(s).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(u64::from(ns))
        });
        Ok(SessionKey { dev: id.dev, ino: id.ino, born })
    }

    /// Whether `other` names the same session directory: the same device
    /// and inode, and the same birth time where both know one (a record
    /// written before birth times were kept matches its directory still).
    pub fn same_directory(&self, other: &SessionKey) -> bool {
        self.dev == other.dev && self.ino == other.ino && (self.born == 0 || other.born == 0 || self.born == other.born)
    }

    /// The identity of the directory at `path` (following links).
    pub fn of_path(path: &Path) -> io::Result<SessionKey> {
        SessionKey::of_dir(std::fs::File::open(path)?)
    }
}
