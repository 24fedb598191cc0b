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

/// Writes `bytes` to `path` durably: a temporary file in the same directory
/// (mode 0600), fsync, rename over `path`, fsync of the directory.
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), crate::random::random_hex(6)));
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
