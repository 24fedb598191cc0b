//! Tree builders and report checks shared by the scan and parity tests.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, CWD};
use winx_release_engine::scan::{ScanReport, Verdict};
use winx_release_engine::{PhysicalId, Reason};

pub fn no_aliases() -> HashSet<PhysicalId> {
    HashSet::new()
}

pub fn id_of(path: &Path) -> PhysicalId {
    let m = fs::symlink_metadata(path).unwrap();
    PhysicalId { dev: m.dev(), ino: m.ino() }
}

pub fn write(path: &Path, len: usize) {
    fs::write(path, vec![b'x'; len]).unwrap();
}

/// Creates `n` empty files `f0..` in `dir`.
pub fn files(dir: &Path, n: usize) {
    for i in 0..n {
        fs::File::create(dir.join(format!("f{i}"))).unwrap();
    }
}

/// Creates a chain of `n` nested directories `d1/d2/.../dn` below `root`
/// and returns the deepest.
pub fn chain(root: &Path, n: usize) -> PathBuf {
    let mut p = root.to_path_buf();
    for i in 1..=n {
        p.push(format!("d{i}"));
    }
    fs::create_dir_all(&p).unwrap();
    p
}

pub fn fifo(path: &Path) {
    rustix::fs::mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
}

/// A temporary directory for a large tree: on tmpfs where there is one, as
/// creating 50,000 files on some disk filesystems takes tens of seconds.
pub fn big_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

#[track_caller]
pub fn assert_clean(r: &ScanReport) {
    assert_eq!(r.verdict, Verdict::Clean, "{r:?}");
    assert_eq!(r.reason, None, "{r:?}");
    assert_eq!(r.path, None, "{r:?}");
    assert!(!r.failed_closed());
}

#[track_caller]
pub fn assert_fail(r: &ScanReport, reason: Reason, path: &Path) {
    assert_eq!(r.verdict, Verdict::FailClosed, "{r:?}");
    assert!(r.failed_closed());
    assert_eq!(r.reason, Some(reason), "{r:?}");
    assert_eq!(r.path.as_deref(), Some(path), "{r:?}");
}
