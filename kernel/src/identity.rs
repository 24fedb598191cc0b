//! Physical identity of an opened object.
//!
//! An inode number is reused at once by ext4 and xfs, and change time is
//! stamped with a coarse clock on kernels before 6.13, so (device, inode,
//! size, change time) can repeat for a file deleted and recreated within
//! one tick. The identity therefore also carries the birth time
//! (`STATX_BTIME`) and the inode generation number (`FS_IOC_GETVERSION`),
//! each where the filesystem provides it; [`Pin::same_object`] is the one
//! comparison that decides whether two identities name one generation of
//! one physical object.
//!
//! # References
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`ioctl_iflags(2)`](https://man7.org/linux/man-pages/man2/ioctl_iflags.2.html) (`FS_IOC_GETVERSION`)

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::AsFd;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Statx, StatxFlags};

/// The (device, inode) pair that names one physical object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct PhysicalId {
    /// Device number (`makedev(major, minor)`, as `st_dev`).
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

/// The full identity captured from an opened object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// File mode, type bits included.
    pub mode: u32,
    /// Link count.
    pub nlink: u64,
    /// Size in bytes.
    pub size: u64,
    /// Change time, seconds.
    pub ctime_sec: i64,
    /// Change time, nanoseconds.
    pub ctime_nsec: u32,
    /// Allocated 512-byte blocks.
    pub blocks: u64,
    /// Birth time (seconds, nanoseconds), where the filesystem reports it
    /// (`STATX_BTIME` in `stx_mask`).
    #[serde(default)]
    pub btime: Option<(i64, u32)>,
    /// Inode generation number (`FS_IOC_GETVERSION`), where the filesystem
    /// answers; `None` as well for an identity read by name with `statx`
    /// alone, since the ioctl needs an open file ([`Identity::of_fd`] and
    /// `Identity::of_name` open the file to read it).
    #[serde(default)]
    pub generation: Option<u32>,
}

/// The statx fields identity needs.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub const IDENTITY_MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::MODE)
    .union(StatxFlags::NLINK)
    .union(StatxFlags::INO)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::CTIME)
    .union(StatxFlags::BLOCKS)
    .union(StatxFlags::BTIME);

impl Identity {
    /// Builds an identity from a `statx` result (no generation number: that
    /// needs an open file, see [`Identity::of_fd`]).
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn from_statx(st: &Statx) -> Identity {
        let btime =
            (st.stx_mask & StatxFlags::BTIME.bits() != 0).then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec));
        Identity {
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mode: u32::from(st.stx_mode),
            nlink: u64::from(st.stx_nlink),
            size: st.stx_size,
            ctime_sec: st.stx_ctime.tv_sec,
            ctime_nsec: st.stx_ctime.tv_nsec,
            blocks: st.stx_blocks,
            btime,
            generation: None,
        }
    }

    /// Reads the identity of an opened file descriptor, its birth time and
    /// (for a regular file or directory) its generation number included.
    ///
    /// # References
    /// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html) with `AT_EMPTY_PATH`
    /// - `FS_IOC_GETVERSION` (`engine/src/generation.rs`)
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn of_fd<Fd: AsFd>(fd: Fd) -> std::io::Result<Identity> {
        let st = rustix::fs::statx(fd.as_fd(), c"", AtFlags::EMPTY_PATH, IDENTITY_MASK)?;
        let mut id = Identity::from_statx(&st);
        if matches!(id.file_type(), FileType::RegularFile | FileType::Directory) {
            id.generation = crate::generation::of_fd(fd);
        }
        Ok(id)
    }

    /// The identity of `name` in `dir`, not following a link: for a regular
    /// file, that of the file opened (`O_NOFOLLOW|O_NONBLOCK`, never a
    /// device or fifo), so that its generation number is known; for
    /// anything else, its `statx`. `Ok(None)` when there is nothing there.
    ///
    /// # References
    /// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html),
    ///   [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn of_name<Fd: AsFd>(dir: Fd, name: &str) -> std::io::Result<Option<Identity>> {
        let dir = dir.as_fd();
        let st = match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, IDENTITY_MASK) {
            Ok(st) => Identity::from_statx(&st),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if !st.is_regular() {
            return Ok(Some(st));
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(Some(Identity::of_fd(&fd)?))
    }

    /// The physical (device, inode) pair.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn physical(&self) -> PhysicalId {
        PhysicalId { dev: self.dev, ino: self.ino }
    }

    /// The object's file type.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode)
    }

    /// Whether it is a regular file (`S_IFREG` in its mode).
    pub fn is_regular(&self) -> bool {
        self.mode & 0o170_000 == 0o100_000
    }

    /// Bytes its removal frees: allocated blocks × 512.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn allocated_bytes(&self) -> u64 {
        self.blocks.saturating_mul(512)
    }
}

/// What a read pinned about a helper: the physical identity that the
/// generation token binds, and the SHA-256 of the bytes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pin {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Change time, seconds.
    pub ctime_sec: i64,
    /// Change time, nanoseconds.
    pub ctime_nsec: u32,
    /// SHA-256 of the bytes.
    #[serde(with = "hex_digest")]
    pub sha256: [u8; 32],
    /// Birth time, where the filesystem reports it.
    #[serde(default)]
    pub btime: Option<(i64, u32)>,
    /// Inode generation number, where the filesystem answers.
    #[serde(default)]
    pub generation: Option<u32>,
}

impl Pin {
    /// Pins an identity and its digest.
    pub fn new(id: &Identity, sha256: [u8; 32]) -> Pin {
        Pin {
            dev: id.dev,
            ino: id.ino,
            size: id.size,
            ctime_sec: id.ctime_sec,
            ctime_nsec: id.ctime_nsec,
            sha256,
            btime: id.btime,
            generation: id.generation,
        }
    }

    /// Pins an opened file: its identity, then the SHA-256 of every byte
    /// read from the same descriptor.
    ///
    /// The identity is read before the bytes. A file that changes meanwhile
    /// gives a pin that no longer matches it, so a release with that pin is
    /// refused (fail closed), never applied to the changed file.
    ///
    /// # References
    /// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
    /// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn of_fd<Fd: AsFd>(fd: Fd) -> std::io::Result<Pin> {
        let id = Identity::of_fd(fd.as_fd())?;
        let (digest, _) = crate::hash::sha256_fd(fd.as_fd())?;
        Ok(Pin::new(&id, digest))
    }

    /// The physical (device, inode) pair.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn physical(&self) -> PhysicalId {
        PhysicalId { dev: self.dev, ino: self.ino }
    }

    /// Whether `id` names the same generation of the same physical object:
    /// same device and inode, and the same birth time and generation
    /// number (each compared as given: one known and the other not is a
    /// difference, which fails closed).
    ///
    /// This is the one identity comparison of the release (check and
    /// recheck in quarantine) and of recovery.
    pub fn same_object(&self, id: &Identity) -> bool {
        self.dev == id.dev && self.ino == id.ino && self.btime == id.btime && self.generation == id.generation
    }

    /// Whether `id` is the same physical object, unchanged since the pin
    /// ([`Pin::same_object`], and the same size and change time).
    pub fn matches_identity(&self, id: &Identity) -> bool {
        self.same_object(id)
            && self.size == id.size
            && self.ctime_sec == id.ctime_sec
            && self.ctime_nsec == id.ctime_nsec
    }

    /// The contract's revision string for the pinned bytes.
    pub fn revision(&self) -> String {
        crate::revision::format(&self.sha256)
    }
}

mod hex_digest {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = String::deserialize(d)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(&s, &mut out).map_err(serde::de::Error::custom)?;
        Ok(out)
    }
}
