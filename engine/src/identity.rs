//! Physical identity of an opened object.
//!
//! # References
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::os::fd::AsFd;

use rustix::fs::{AtFlags, FileType, Statx, StatxFlags};

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
}

/// The statx fields identity needs.
pub(crate) const IDENTITY_MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::MODE)
    .union(StatxFlags::NLINK)
    .union(StatxFlags::INO)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::CTIME)
    .union(StatxFlags::BLOCKS);

impl Identity {
    /// Builds an identity from a `statx` result.
    pub fn from_statx(st: &Statx) -> Identity {
        Identity {
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mode: u32::from(st.stx_mode),
            nlink: u64::from(st.stx_nlink),
            size: st.stx_size,
            ctime_sec: st.stx_ctime.tv_sec,
            ctime_nsec: st.stx_ctime.tv_nsec,
            blocks: st.stx_blocks,
        }
    }

    /// Reads the identity of an opened file descriptor.
    ///
    /// # References
    /// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html) with `AT_EMPTY_PATH`
    pub fn of_fd<Fd: AsFd>(fd: Fd) -> std::io::Result<Identity> {
        let st = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, IDENTITY_MASK)?;
        Ok(Identity::from_statx(&st))
    }

    /// The physical (device, inode) pair.
    pub fn physical(&self) -> PhysicalId {
        PhysicalId { dev: self.dev, ino: self.ino }
    }

    /// The object's file type.
    pub fn file_type(&self) -> FileType {
        FileType::from_raw_mode(self.mode)
    }

    /// Whether it is a regular file.
    pub fn is_regular(&self) -> bool {
        self.file_type() == FileType::RegularFile
    }

    /// Bytes its removal frees: allocated blocks × 512.
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
}

impl Pin {
    /// Pins an identity and its digest.
    pub fn new(id: &Identity, sha256: [u8; 32]) -> Pin {
        Pin { dev: id.dev, ino: id.ino, size: id.size, ctime_sec: id.ctime_sec, ctime_nsec: id.ctime_nsec, sha256 }
    }

    /// The physical (device, inode) pair.
    pub fn physical(&self) -> PhysicalId {
        PhysicalId { dev: self.dev, ino: self.ino }
    }

    /// Whether `id` is the same physical object, unchanged since the pin
    /// (same device, inode, size and change time).
    pub fn matches_identity(&self, id: &Identity) -> bool {
        self.dev == id.dev
            && self.ino == id.ino
            && self.size == id.size
            && self.ctime_sec == id.ctime_sec
            && self.ctime_nsec == id.ctime_nsec
    }

    /// The contract's revision string for the pinned bytes.
    pub fn revision(&self) -> String {
        crate::hash::revision(&self.sha256)
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
