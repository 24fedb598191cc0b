//! Small shared helpers.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::Mode;
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use winx_release_engine::resolve::{open_dir_beneath, WalkError};

/// Locks `m`, ignoring poisoning (the data are plain tables).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `2 * bytes` random lowercase hex digits from the OS.
pub(crate) fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| io::Error::other(format!("getrandom: {e}")))?;
    Ok(hex::encode(buf))
}

/// An I/O error for a failed no-follow walk.
pub(crate) fn walk_io(e: WalkError) -> io::Error {
    match e {
        WalkError::NotFound(i) => io::Error::new(io::ErrorKind::NotFound, format!("component {i} does not exist")),
        WalkError::Symlink(i) => io::Error::other(format!("component {i} is a symbolic link")),
        WalkError::NotDirectory(i) => io::Error::other(format!("component {i} is not a directory")),
        WalkError::Io(i, e) => io::Error::new(e.kind(), format!("component {i}: {e}")),
    }
}

/// Creates directory `name` below `dir` with `mode` when missing, then opens
/// it without following a link.
pub(crate) fn mkdir_beneath(dir: BorrowedFd<'_>, name: &str, mode: u32) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    open_dir_beneath(dir, &[name]).map_err(walk_io)
}

/// What reading a whole file gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadBytes {
    /// SHA-256 of every byte read.
    pub(crate) digest: [u8; 32],
    /// How many bytes were read.
    pub(crate) len: u64,
    /// The first bytes read (at most the `keep` asked for).
    pub(crate) prefix: Vec<u8>,
}

/// Reads every byte of `fd` from offset 0 with `pread`, hashing them all and
/// keeping the first `keep`. The hash and the kept bytes come from the same
/// reads of the same descriptor.
pub(crate) fn read_fd(fd: BorrowedFd<'_>, keep: usize) -> io::Result<ReadBytes> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut hasher = Sha256::new();
    let mut prefix = Vec::new();
    let mut off = 0u64;
    loop {
        let n = match rustix::io::pread(fd.as_fd(), &mut buf[..], off) {
            Ok(n) => n,
            Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if prefix.len() < keep {
            let take = (keep - prefix.len()).min(n);
            prefix.extend_from_slice(&buf[..take]);
        }
        off += n as u64;
    }
    Ok(ReadBytes { digest: hasher.finalize().into(), len: off, prefix })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn read_fd_hashes_all_keeps_prefix() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let r = read_fd(f.as_fd(), 1000).unwrap();
        assert_eq!(r.len, data.len() as u64);
        assert_eq!(r.prefix, &data[..1000]);
        assert_eq!(r.digest, <[u8; 32]>::from(Sha256::digest(&data)));
        assert_eq!(random_hex(4).unwrap().len(), 8);
    }
}
