//! SHA-256 of an opened file's bytes, and revision strings.
//!
//! # References
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)

use std::io;
use std::os::fd::AsFd;

use sha2::{Digest, Sha256};

/// Read buffer size for hashing.
pub const HASH_CHUNK: usize = 256 * 1024;

/// Hashes every byte readable from `fd`, from offset 0, with `pread`.
///
/// Returns the digest and the number of bytes read. The file offset is not
/// used, so the same descriptor can be hashed again later.
pub fn sha256_fd<Fd: AsFd>(fd: Fd) -> io::Result<([u8; 32], u64)> {
    let mut buf = vec![0u8; HASH_CHUNK];
    sha256_fd_with(fd.as_fd(), &mut buf)
}

/// Like [`sha256_fd`], with a caller-provided buffer.
pub fn sha256_fd_with<Fd: AsFd>(fd: Fd, buf: &mut [u8]) -> io::Result<([u8; 32], u64)> {
    let mut hasher = Sha256::new();
    let mut off = 0u64;
    loop {
        let n = match rustix::io::pread(fd.as_fd(), &mut *buf, off) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        off += n as u64;
    }
    Ok((hasher.finalize().into(), off))
}

/// SHA-256 of a byte slice.
pub fn sha256_bytes(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The contract's revision string: `sha256:<64 lowercase hex>`.
pub fn revision(digest: &[u8; 32]) -> String {
    format!("sha256:{}", hex::encode(digest))
}

/// Parses a revision string back into a digest; `None` if malformed.
pub fn parse_revision(rev: &str) -> Option<[u8; 32]> {
    let hex_part = rev.strip_prefix("sha256:")?;
    if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}
