//! Durable small files: temporary file, fsync, rename, directory fsync.
//!
//! # References
//! - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
//! - [`rename(2)`](https://man7.org/linux/man-pages/man2/rename.2.html)

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates `dir` and its missing parents with mode 0700.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Fsyncs a directory so that entries created, renamed or removed in it are
/// durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A random lowercase-hex string of `2 * bytes` characters.
///
/// Uses `getrandom(2)`; should the kernel refuse (it does not on any
/// supported Linux), falls back to a SHA-256 of the time, the pid and a
/// process-wide counter, which is unique though not secret. Names made here
/// are never secrets; the frontend's token secret has its own fallible path.
pub fn random_hex(bytes: usize) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut buf = vec![0u8; bytes];
    let mut filled = 0;
    while filled < bytes {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let seed = format!("{:?}/{}/{}", now, std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
                let mut out = String::new();
                let mut block = crate::hash::sha256_bytes(seed.as_bytes());
                while out.len() < 2 * bytes {
                    out.push_str(&hex::encode(block));
                    block = crate::hash::sha256_bytes(&block);
                }
                out.truncate(2 * bytes);
                return out;
            }
        }
    }
    hex::encode(buf)
}

/// Writes `bytes` to `path` durably: a temporary file in the same directory
/// (mode 0600), fsync, rename over `path`, fsync of the directory.
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), random_hex(6)));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
