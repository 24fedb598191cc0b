//! SHA-256 of an opened file's bytes, and revision strings.
//!
//! # References
//! - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::io;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::{AsFd, BorrowedFd};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use sha2::{Digest, Sha256};

mod head;

pub use head::{Head, Keep};

/// Read buffer size for hashing.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub const HASH_CHUNK: usize = 256 * 1024;

/// Hashes every byte readable from `fd`, from offset 0, with `pread`.
///
/// Returns the digest and the number of bytes read. The file offset is not
/// used, so the same descriptor can be hashed again later.
///
/// # References
/// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn sha256_fd<Fd: AsFd>(fd: Fd) -> io::Result<([u8; 32], u64)> {
    let mut buf = vec![0u8; HASH_CHUNK];
    sha256_fd_with(fd.as_fd(), &mut buf)
}

/// Like [`sha256_fd`], with a caller-provided buffer.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn sha256_fd_with<Fd: AsFd>(fd: Fd, buf: &mut [u8]) -> io::Result<([u8; 32], u64)> {
    let r = read_and_hash(fd, buf, Keep::Nothing)?;
    Ok((r.digest, r.len))
}

/// What reading a whole file gave: its digest, length and first bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub struct ReadBytes {
    /// SHA-256 of every byte read.
    pub digest: [u8; 32],
    /// How many bytes were read.
    pub len: u64,
    /// The first bytes read, as `keep` asked.
    pub head: Head,
}

/// Reads every byte of `fd` from offset 0 with `pread` into `buf`, hashing
/// them all and keeping the first bytes as `keep` says.
///
/// The hash and the kept bytes come from the same reads of the same
/// descriptor, so the content a caller returns is the content it hashed.
/// This is the one synchronous SHA-256 read; the io_uring pipeline is in
/// the release engine's `rehash`, on [`crate::uring`].
///
/// # References
/// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn read_and_hash<Fd: AsFd>(fd: Fd, buf: &mut [u8], keep: Keep) -> io::Result<ReadBytes> {
    read_and_hash_until(fd, buf, keep, &AtomicBool::new(false))
}

/// Like [`read_and_hash`], giving up once `stop` is set: it is looked at
/// before every read, so a read the caller no longer wants (a client
/// cancelled it, or its reply went out without it) ends within one chunk,
/// however long the file (a sparse file of 2^63 - 1 bytes, say).
///
/// # Errors
/// [`stopped`] once `stop` is set; a read's error.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn read_and_hash_until<Fd: AsFd>(fd: Fd, buf: &mut [u8], keep: Keep, stop: &AtomicBool) -> io::Result<ReadBytes> {
    let mut hasher = Sha256::new();
    let mut head = Head::new(keep);
    let len = pread_all(fd.as_fd(), buf, u64::MAX, stop, &mut |data| {
        hasher.update(data);
        head.push(data);
    })?;
    Ok(ReadBytes { digest: hasher.finalize().into(), len, head })
}

/// The error of a read given up because its `stop` flag was set.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn stopped() -> io::Error {
    io::Error::other("the read was stopped: its caller no longer wants it")
}

/// Reads `fd` from offset 0 with `pread` into `buf`, handing each read to
/// `each`, until the end of the file or `end` bytes. Returns the bytes
/// read. The one synchronous read loop of this module.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn pread_all(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    end: u64,
    stop: &AtomicBool,
    each: &mut dyn FnMut(&[u8]),
) -> io::Result<u64> {
    let mut off = 0u64;
    while off < end {
        if stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        let want = usize::try_from(end - off).unwrap_or(usize::MAX).min(buf.len());
        let n = match rustix::io::pread(fd, &mut buf[..want], off) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break;
        }
        each(&buf[..n]);
        off += n as u64;
    }
    Ok(off)
}

/// A BLAKE3 digest of a file's bytes.
///
/// A release's check takes it beside the SHA-256 from the same reads; the
/// recheck of the captured object then compares BLAKE3 digests, at about
/// five times the speed of SHA-256 here. Both are cryptographic hashes
/// (collisions cost ~2^128 work), so captured bytes with the check's
/// fingerprint are the bytes the check proved equal to the pin.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub type Fingerprint = [u8; 32];

/// BLAKE3 of the bytes readable from `fd` from offset 0, with `pread` into
/// `buf`; reading stops after `limit + 1` bytes (a longer file cannot
/// match). Returns the fingerprint and the bytes read.
///
/// # References
/// - [`pread(2)`](https://man7.org/linux/man-pages/man2/pread.2.html)
/// - [BLAKE3](https://github.com/BLAKE3-team/BLAKE3-specs/blob/master/blake3.pdf)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn fingerprint_fd<Fd: AsFd>(fd: Fd, buf: &mut [u8], limit: u64) -> io::Result<(Fingerprint, u64)> {
    let mut hasher = blake3::Hasher::new();
    let len = pread_all(fd.as_fd(), buf, limit.saturating_add(1), &AtomicBool::new(false), &mut |data| {
        hasher.update(data);
    })?;
    Ok((*hasher.finalize().as_bytes(), len))
}

#[cfg(all(test, target_os = "linux", not(winx_foreign)))]
mod tests {
    use std::io::Write;

    #[test]
    fn read_and_hash_hashes_all_and_keeps_a_prefix() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let mut buf = vec![0u8; 4096];
        let r = super::read_and_hash(&f, &mut buf, super::Keep::Bytes(1000)).unwrap();
        assert_eq!(r.len, data.len() as u64);
        assert_eq!(r.head.into_bytes(), &data[..1000]);
        assert_eq!(r.digest, crate::revision::sha256_bytes(&data));
    }

    /// A sparse file of 4 GiB (seconds of hashing: a flag nobody looks at
    /// shows as a finished hash, not as a hung test) gives up at once when
    /// its stop flag is set, from another thread while it is being read.
    #[test]
    fn a_read_stops_within_a_chunk_once_its_flag_is_set() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let f = tempfile::tempfile().unwrap();
        f.set_len(4 << 30).unwrap();
        let stop = AtomicBool::new(false);
        let t = std::time::Instant::now();
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                stop.store(true, Ordering::Relaxed);
            });
            let mut buf = vec![0u8; super::HASH_CHUNK];
            super::read_and_hash_until(&f, &mut buf, super::Keep::Nothing, &stop)
        });
        assert_eq!(r.unwrap_err().to_string(), super::stopped().to_string());
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn fingerprint_reads_all_or_stops_past_the_limit() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..600_000u32).map(|i| (i % 253) as u8).collect();
        f.write_all(&data).unwrap();
        let mut buf = vec![0u8; 4096];
        let (fp, n) = super::fingerprint_fd(&f, &mut buf, data.len() as u64).unwrap();
        assert_eq!((fp, n), (*blake3::hash(&data).as_bytes(), data.len() as u64));
        // A limit under the size reads one byte past it, never the rest.
        let (fp, n) = super::fingerprint_fd(&f, &mut buf, 1000).unwrap();
        assert_eq!((fp, n), (*blake3::hash(&data[..1001]).as_bytes(), 1001));
    }
}
