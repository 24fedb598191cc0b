//! The inode generation number (`FS_IOC_GETVERSION`).
//!
//! An inode number alone names a physical object only while it exists:
//! ext4 and xfs hand a freed inode number to the next file at once. The
//! generation number that such filesystems keep per inode (the second half
//! of an NFS file handle) changes when the number is reused, so (device,
//! inode, generation) tells a recreated file from the one that was read.
//!
//! This module is the engine's one exception to `#![deny(unsafe_code)]`
//! outside the io_uring module: neither `rustix` nor `std` offers a safe
//! wrapper for this ioctl, and `rustix::ioctl::ioctl` is itself an
//! `unsafe fn`. The exception is a single `ioctl(2)` call that writes into
//! a local integer.
//!
//! # References
//! - [`ioctl_iflags(2)`](https://man7.org/linux/man-pages/man2/ioctl_iflags.2.html)
//!   and the kernel's `FS_IOC_GETVERSION` in `include/uapi/linux/fs.h`
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::os::fd::{AsFd, AsRawFd};

/// The generation number of the inode open at `fd`, or `None` where the
/// filesystem does not answer `FS_IOC_GETVERSION` (tmpfs, overlayfs and
/// others answer `ENOTTY`/`EOPNOTSUPP`) or any other error occurs.
///
/// The kernel stores the 32-bit generation into the argument; the argument
/// is a zeroed `c_long` because the opcode is declared with `long` size.
///
/// # References
/// - [`ioctl(2)`](https://man7.org/linux/man-pages/man2/ioctl.2.html)
pub fn of_fd<Fd: AsFd>(fd: Fd) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        let mut value: libc::c_long = 0;
        let fd = fd.as_fd();
        // SAFETY: `fd` is a live descriptor borrowed for this call, and the
        // third argument points to a local, initialised, properly aligned
        // `c_long` that outlives the call. `FS_IOC_GETVERSION` is a read
        // ioctl: the kernel writes at most `sizeof(long)` bytes (ext4, xfs,
        // btrfs write an `int`) through that pointer and nothing else; any
        // filesystem that does not know the request fails with an error and
        // writes nothing.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FS_IOC_GETVERSION, &mut value as *mut libc::c_long) };
        if rc == 0 {
            // The kernel writes a 32-bit `int` at the start of the zeroed
            // long: its low half on a little-endian machine, its high half
            // on a big-endian one.
            let v = value as u64;
            return Some(if cfg!(target_endian = "big") { (v >> 32) as u32 } else { v as u32 });
        }
        None
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stable_for_one_inode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let a = super::of_fd(std::fs::File::open(&p).unwrap());
        assert_eq!(a, super::of_fd(std::fs::File::open(&p).unwrap()));
    }
}
