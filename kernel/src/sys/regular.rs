//! Opening a file of the data directory for reading: a regular file only,
//! never through a final link, and never a wait.

use std::fs::File;
use std::io;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// Opens `path` for reading when it is a regular file: the final component
/// is not followed (`O_NOFOLLOW`), and it is opened without waiting
/// (`O_NONBLOCK`, cleared once the file is known to be regular), so that a
/// fifo or a device put where a journal, a record or a receipt should be
/// is an error, not an `open` that waits for a writer for ever.
///
/// Errors: the `open`'s (`NotFound` when it is missing, `ELOOP` for a
/// link), and `InvalidData` when it is not a regular file.
///
/// # References
/// - [`open(2)`](https://man7.org/linux/man-pages/man2/open.2.html) (`O_NONBLOCK` on a fifo)
/// - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html) (`F_SETFL`)
pub fn open_regular(path: &Path) -> io::Result<File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        let msg = format!("{} is not a regular file", path.display());
        return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
    }
    let now = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, now - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fifo, a directory and a link are refused at once; a regular file
    /// reads as usual, blocking reads restored.
    #[test]
    fn only_a_regular_file_is_opened_and_a_fifo_never_waits() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert_eq!(open_regular(d.path()).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let file = d.path().join("f");
        std::fs::write(&file, b"bytes").unwrap();
        std::os::unix::fs::symlink(&file, d.path().join("link")).unwrap();
        assert!(open_regular(&d.path().join("link")).is_err());
        assert_eq!(open_regular(&d.path().join("none")).unwrap_err().kind(), io::ErrorKind::NotFound);
        let f = open_regular(&file).unwrap();
        assert!(!rustix::fs::fcntl_getfl(&f).unwrap().contains(OFlags::NONBLOCK));
        assert_eq!(std::io::read_to_string(f).unwrap(), "bytes");
    }
}
